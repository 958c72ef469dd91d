#!/usr/bin/env bash
# Build the Pulumi engine opbroker's engine tests run: the `pulumi` CLI, the YAML language host and the
# Kubernetes resource plugin, from the Go module proxy, once per machine. The binaries are cached in
# $OPBROKER_CACHE/pulumi-$PULUMI_VERSION-<key>/bin (tests put that folder first on PATH, where the engine
# finds language hosts and "ambient" resource plugins). Each build's time is recorded in build-*.json beside it.
#
# Why wrapper modules (the same pattern as devcluster/build.sh): github.com/pulumi/pulumi/pkg/v3 replaces
# sdk/v3 with ../sdk and pulumi-kubernetes/provider/v4 replaces its sdk/v4 with ../sdk, and `go install
# pkg@version` refuses modules with replace directives. A wrapper module per binary requires the module and
# pins the replaced one to the same release (replace directives of non-main modules are ignored), so each
# binary builds against exactly the dependency versions its release was tested with.
#
# The wrapper modules are committed (devcluster/pulumibuild/{pulumi,yaml,kubernetes}: go.mod, go.sum, the Go
# files; re-pinned by scripts/pin-go-wrappers.sh) and compiled with -mod=readonly: nothing is resolved here,
# every download is checked against go.sum, and the versions come from those go.mod files. The cache folder is
# keyed by the modules' files (pulumi-<version>-<key>): a change of any pin builds anew.
#
# The Kubernetes provider's main embeds `schema-embed.json` and `terraform-mapping-embed.json`, which
# upstream's `go generate` writes from the module's schema.json (with the version filled in) and
# terraform-mapping.json; the published module leaves them out, so the wrapper carries a three-line main
# and the build writes both files from the downloaded (go.sum-checked) module's own JSON.
#
# Not built: the Python language host (module github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3)
# — every pseudo-version of it answers 403 on the module proxy here; see docs/pulumi.md.
#
# Usage: build-pulumi.sh                  (builds what is missing; a no-op when cached)
#        build-pulumi.sh --print-bin-dir  (where the binaries of the committed pins are, or would be, cached)
set -euo pipefail

CACHE="${OPBROKER_CACHE:-$HOME/.cache/opbroker}"
MODULES="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/devcluster/pulumibuild"
START=$(date +%s)

say() { printf '[pulumi-build %4ss] %s\n' "$(($(date +%s) - START))" "$*"; }
die() {
  say "ERROR: $*" >&2
  exit 1
}
# talk_while: progress every 30 s against the measured estimate (gorender/build-estimates.tsv).
# shellcheck source=../gorender/talk.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gorender/talk.sh"

for m in pulumi yaml kubernetes; do
  [ -f "$MODULES/$m/go.mod" ] && [ -f "$MODULES/$m/go.sum" ] || die "the wrapper module $MODULES/$m (go.mod, go.sum) is missing"
done
# The modules' fingerprint (devcluster/binaries.py computes the same): sha256 over `sha256sum` of their files.
module_key() {
  (cd "$1" && find . -type f \( -name go.mod -o -name go.sum -o -name '*.go' \) | LC_ALL=C sort |
    xargs sha256sum | sha256sum | cut -c1-12)
}
pinned() { sed -nE "s#^(require)?[[:space:]]*$2 (v[0-9][^ ]*)( // indirect)?\$#\\2#p" "$MODULES/$1/go.mod" | head -1; }
PULUMI_VERSION=$(pinned pulumi github.com/pulumi/pulumi/pkg/v3)
PULUMI_VERSION=${PULUMI_VERSION#v}
PULUMI_YAML_VERSION=$(pinned yaml github.com/pulumi/pulumi-yaml)
PULUMI_YAML_VERSION=${PULUMI_YAML_VERSION#v}
PULUMI_KUBERNETES_VERSION=$(pinned kubernetes github.com/pulumi/pulumi-kubernetes/sdk/v4)
PULUMI_KUBERNETES_VERSION=${PULUMI_KUBERNETES_VERSION#v}
[ -n "$PULUMI_VERSION" ] && [ -n "$PULUMI_YAML_VERSION" ] && [ -n "$PULUMI_KUBERNETES_VERSION" ] ||
  die "a wrapper module under $MODULES pins no pulumi, pulumi-yaml or pulumi-kubernetes version"
ROOT="$CACHE/pulumi-$PULUMI_VERSION-$(module_key "$MODULES")"
BIN="$ROOT/bin"
WORK="$ROOT/build"
if [ "${1:-}" = "--print-bin-dir" ]; then
  printf '%s\n' "$BIN"
  exit 0
fi

# One build per cache folder at a time: a second caller (a test run beside setup) waits, then finds it cached.
mkdir -p "$CACHE"
exec 9>"$ROOT.lock"
if ! flock -n 9; then
  say "another build into $ROOT is running: waiting for it to finish"
  flock 9
fi

# Each binary's own wrapper module and its fingerprint: a binary whose module did not change is taken from the
# folder of an earlier pin set (a new YAML host pin rebuilds only the YAML host), never rebuilt.
module_of() {
  case "$1" in
    pulumi) echo pulumi ;;
    pulumi-language-yaml) echo yaml ;;
    pulumi-resource-kubernetes) echo kubernetes ;;
  esac
}
mkdir -p "$BIN"
missing=()
for t in pulumi pulumi-language-yaml pulumi-resource-kubernetes; do
  [ -x "$BIN/$t" ] && continue
  key=$(module_key "$MODULES/$(module_of "$t")")
  for earlier in "$CACHE"/pulumi-"$PULUMI_VERSION"-*/bin; do
    if [ "$earlier" != "$BIN" ] && [ -x "$earlier/$t" ] && [ "$(cat "$earlier/$t.key" 2>/dev/null)" = "$key" ]; then
      cp "$earlier/$t" "$BIN/$t.tmp" && mv "$BIN/$t.tmp" "$BIN/$t" && printf '%s\n' "$key" >"$BIN/$t.key"
      say "$t taken from $earlier (its wrapper module is unchanged)"
      break
    fi
  done
  [ -x "$BIN/$t" ] || missing+=("$t")
done
if [ ${#missing[@]} = 0 ]; then
  say "cached binaries found in $BIN"
  exit 0
fi
say "building ${missing[*]} (pulumi $PULUMI_VERSION, pulumi-yaml $PULUMI_YAML_VERSION, pulumi-kubernetes $PULUMI_KUBERNETES_VERSION) into $BIN (a cold build takes about $(build_estimate pulumi) s on 2 cores)"

command -v go >/dev/null || die "Go is not installed: install Go 1.26 or newer (https://go.dev/dl/)"
GO_MINOR=$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')
[ "$GO_MINOR" -ge 26 ] || die "pulumi $PULUMI_VERSION needs Go 1.26 or newer, found $(go env GOVERSION)"

mkdir -p "$BIN" "$WORK"
export GOFLAGS="-mod=readonly -buildvcs=false"
export GOWORK=off
export CGO_ENABLED=0
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"

# A copy of one committed wrapper module in the work folder (the build writes nothing into the checkout); go
# build downloads what it compiles, each module checked against go.sum. Prints the copy's folder.
module() {
  local dir="$WORK/$1"
  rm -rf "$dir"
  cp -R "$MODULES/$1" "$dir"
  printf '%s\n' "$dir"
}

build_pulumi() {
  local t0 dir
  t0=$(date +%s)
  dir=$(module pulumi) || return 1
  (cd "$dir" && go build -trimpath -o "$BIN/pulumi" \
    -ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v$PULUMI_VERSION" \
    github.com/pulumi/pulumi/pkg/v3/cmd/pulumi) || return 1
  say "pulumi built in $(($(date +%s) - t0)) s"
}

build_yaml() {
  local t0 dir
  t0=$(date +%s)
  dir=$(module yaml) || return 1
  (cd "$dir" && go build -trimpath -o "$BIN/pulumi-language-yaml" \
    -ldflags "-s -w -X github.com/pulumi/pulumi-yaml/pkg/version.Version=v$PULUMI_YAML_VERSION" \
    github.com/pulumi/pulumi-yaml/cmd/pulumi-language-yaml) || return 1
  say "pulumi-language-yaml built in $(($(date +%s) - t0)) s"
}

build_kubernetes() {
  local t0 dir module_dir
  t0=$(date +%s)
  dir=$(module kubernetes) || return 1
  module_dir=$(cd "$dir" && go mod download -json github.com/pulumi/pulumi-kubernetes/provider/v4 |
    sed -nE 's/.*"Dir": "(.*)".*/\1/p')
  [ -d "$module_dir" ] || return 1
  # What upstream's generate.go does: the schema with its version set, both files re-serialized compactly.
  python3 - "$module_dir/cmd/pulumi-resource-kubernetes" "$dir/cmd/pulumi-resource-kubernetes" \
    "$PULUMI_KUBERNETES_VERSION" <<'PY'
import json, sys
src, dst, version = sys.argv[1:]
with open(f"{src}/schema.json") as f:
    schema = json.load(f)
schema["version"] = version
with open(f"{dst}/schema-embed.json", "w") as f:
    json.dump(schema, f, separators=(",", ":"))
with open(f"{src}/terraform-mapping.json") as f:
    mapping = json.load(f)
with open(f"{dst}/terraform-mapping-embed.json", "w") as f:
    json.dump(mapping, f, separators=(",", ":"))
PY
  (cd "$dir" && go build -trimpath -o "$BIN/pulumi-resource-kubernetes" \
    -ldflags "-s -w -X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=$PULUMI_KUBERNETES_VERSION" \
    ./cmd/pulumi-resource-kubernetes) || return 1
  say "pulumi-resource-kubernetes built in $(($(date +%s) - t0)) s"
}

# The three builds share Go's build cache; run side by side, one link overlaps another's compiles.
pids=()
for t in "${missing[@]}"; do
  case "$t" in
    pulumi) build_pulumi >"$WORK/pulumi.log" 2>&1 &
      pids+=($!) ;;
    pulumi-language-yaml) build_yaml >"$WORK/yaml.log" 2>&1 &
      pids+=($!) ;;
    pulumi-resource-kubernetes) build_kubernetes >"$WORK/kubernetes.log" 2>&1 &
      pids+=($!) ;;
  esac
done
failed=0
talk_while "compiling ${missing[*]} side by side" pulumi "${pids[@]}" || failed=1
for log in "$WORK"/*.log; do [ -f "$log" ] && grep -h "built in" "$log" || true; done
if [ "$failed" != 0 ]; then
  for log in "$WORK"/pulumi.log "$WORK"/yaml.log "$WORK"/kubernetes.log; do [ -f "$log" ] && tail -20 "$log"; done
  die "a build failed (logs in $WORK)"
fi
for t in "${missing[@]}"; do
  [ -x "$BIN/$t" ] || die "$t is missing from $BIN after the build"
  module_key "$MODULES/$(module_of "$t")" >"$BIN/$t.key"
done
printf '{"seconds": %s, "built": "%s", "go": "%s", "cpus": %s, "pulumi": "%s", "pulumi_yaml": "%s", "pulumi_kubernetes": "%s"}\n' \
  "$(($(date +%s) - START))" "${missing[*]}" "$(go env GOVERSION)" "$(nproc)" "$PULUMI_VERSION" "$PULUMI_YAML_VERSION" \
  "$PULUMI_KUBERNETES_VERSION" >"$ROOT/build-$(date +%Y%m%dT%H%M%S).json"
say "done: $("$BIN/pulumi" version), pulumi-language-yaml, pulumi-resource-kubernetes $PULUMI_KUBERNETES_VERSION"
