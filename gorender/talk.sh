# Sourced by opbroker's build scripts (devcluster/build.sh, scripts/build-cert-manager.sh, scripts/build-pulumi.sh):
# builds that talk. A step longer than a few seconds says that it still runs, with the elapsed seconds, at least
# every TALK_EVERY (30) seconds, against the build's one measured estimate (build-estimates.tsv beside this file,
# which opbroker.gorender.builds reads too). The caller defines say() (its prefix and elapsed time) first.
TALK_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TALK_EVERY=${TALK_EVERY:-30}

# build_estimate NAME: the measured seconds of a cold build of NAME on 2 cores (empty when the file has none).
build_estimate() { awk -F'\t' -v name="$1" '$1 == name { print $2 }' "$TALK_DIR/build-estimates.tsv"; }

# talk_while STEP NAME PID...: wait for every PID, saying every TALK_EVERY seconds that STEP still runs and how long
# a cold build of NAME takes. Returns 1 when any of them failed.
talk_while() {
  local step=$1 name=$2 estimate started=$SECONDS next pid running failed=0
  shift 2
  estimate=$(build_estimate "$name")
  next=$((SECONDS + TALK_EVERY))
  while :; do
    running=0
    for pid in "$@"; do
      if kill -0 "$pid" 2>/dev/null; then running=1; fi
    done
    [ "$running" = 0 ] && break
    if [ "$SECONDS" -ge "$next" ]; then
      say "still $step: $((SECONDS - started)) s so far (a cold build takes about ${estimate:-?} s on 2 cores)"
      next=$((SECONDS + TALK_EVERY))
    fi
    sleep 1
  done
  for pid in "$@"; do wait "$pid" || failed=1; done
  return "$failed"
}

# talking STEP NAME COMMAND...: run COMMAND, talking while it runs (see talk_while); COMMAND's exit status.
talking() {
  local step=$1 name=$2
  shift 2
  "$@" &
  talk_while "$step" "$name" "$!"
}
