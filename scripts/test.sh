#!/usr/bin/env bash
# The test command: set up (idempotent), lint, type-check, check the layers, the Go renderer's tests, then every
# test against a real kube-apiserver.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
echo "[test] ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "[test] mypy --strict"
scripts/typecheck.sh
echo "[test] import-linter (layers)"
scripts/architecture.sh
echo "[test] go vet, go test (the Go template renderer)"
(cd gorender && go vet ./... && go test ./...)
# The lowest versions run beside pytest: it is in-process work on one core (~80 s) while pytest mostly waits on
# control planes, so it costs the wall time nothing instead of its whole run. Its output is kept and printed at the
# end; it fails the command as loudly as it would have in line.
echo "[test] lowest versions: every floor in pyproject.toml, the in-process tests (scripts/lowest-versions.sh)," \
  "in the background beside pytest"
lowest_dir=$(mktemp -d)
# In a session of its own (setsid: same pid, it is no group leader here) so that an interrupted run stops all of
# it, its pytest included; its own --basetemp keeps its temporary folders apart from the main run's.
setsid scripts/lowest-versions.sh -m unit -q --basetemp "$lowest_dir/tmp" >"$lowest_dir/log" 2>&1 &
lowest_pid=$!
trap '[ -z "$lowest_pid" ] || kill -- -"$lowest_pid" 2>/dev/null || true; rm -rf "$lowest_dir"' EXIT
echo "[test] pytest"
# pytest is no longer exec'd (the lowest versions' status is collected after it), so the signals that reached it
# then are passed on: SIGTERM to this script goes to pytest; Ctrl-C reaches it from the terminal as before (a
# background child of a script ignores SIGINT unless given back its default: env --default-signal).
env --default-signal=INT .venv/bin/pytest --durations=40 "$@" &
pytest_pid=$!
trap 'kill -TERM "$pytest_pid" 2>/dev/null; kill -- -"$lowest_pid" 2>/dev/null || true' TERM
trap ':' INT
pytest_status=0
# A trapped signal ends `wait` early: wait again while pytest still runs (it finishes its teardown).
until wait "$pytest_pid"; do
  pytest_status=$?
  kill -0 "$pytest_pid" 2>/dev/null || break
  pytest_status=0
done
trap - TERM INT
lowest_status=0
wait "$lowest_pid" || lowest_status=$?
lowest_pid=""
echo "[test] lowest versions (scripts/lowest-versions.sh), run beside pytest; its output:"
cat "$lowest_dir/log"
if [ "$lowest_status" -ne 0 ]; then
  echo "[test] FAILED: scripts/lowest-versions.sh exited $lowest_status (its output is above)" >&2
fi
if [ "$pytest_status" -ne 0 ]; then
  echo "[test] FAILED: pytest exited $pytest_status" >&2
  exit "$pytest_status"
fi
exit "$lowest_status"
