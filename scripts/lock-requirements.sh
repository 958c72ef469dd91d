#!/usr/bin/env bash
# Re-lock the image's Python dependencies: requirements.lock pins every runtime dependency of opbroker
# (pyproject's [project] dependencies, transitively, for Python 3.11 on any platform) and the setuptools and
# wheel that build it ([build-system] requires), each with the sha256 of every file its version is published as.
# The Containerfile and `opbroker cluster image` install from it with `pip install --require-hashes`.
# A maintainer's tool (it needs the package index): run it when a dependency changes, and commit the result.
#
# Usage: scripts/lock-requirements.sh [--upgrade]
set -euo pipefail
cd "$(dirname "$0")/.."
UV=.venv/bin/uv
[ -x "$UV" ] || { echo "uv is missing: .venv/bin/pip install -e '.[dev]'" >&2; exit 1; }
BUILD=$(mktemp --suffix=.in)
trap 'rm -f "$BUILD"' EXIT
.venv/bin/python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]))' >"$BUILD"
"$UV" pip compile pyproject.toml "$BUILD" "$@" \
  --universal --python-version 3.11 --generate-hashes --no-header --quiet \
  --output-file requirements.lock
sed -i "s#$BUILD#[build-system] requires#" requirements.lock
{
  echo "# The image's Python dependencies, every file's hash pinned: written by scripts/lock-requirements.sh from"
  echo "# pyproject.toml ([project] dependencies and [build-system] requires). Do not edit by hand."
  cat requirements.lock
} >requirements.lock.new
mv requirements.lock.new requirements.lock
echo "[lock] requirements.lock: $(grep -c '^[a-z0-9]' requirements.lock) packages"
