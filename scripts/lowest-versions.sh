#!/usr/bin/env bash
# The floors in pyproject.toml are true: install the lowest version of every direct dependency the ranges allow
# (`uv pip install --resolution lowest-direct`, runtime, `dev` and `pulumi` extras) into a virtual environment
# of its own and run the in-process tests (`pytest -m unit`) there. A floor raised or lowered is proved here.
#
# The environment lives outside the checkout, in $OPBROKER_CACHE (default ~/.cache/opbroker)/lowest-<hash of
# pyproject.toml>, built once per pyproject.toml (the package index is needed only then); each run re-points its
# editable install of opbroker at this checkout (no dependency touched) and runs the tests against it.
#
# Usage: scripts/lowest-versions.sh [pytest arguments]   (default: -m unit -q)
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
UV=.venv/bin/uv
[ -x "$UV" ] || { echo "uv is missing: .venv/bin/pip install -e '.[dev]' (scripts/setup.sh)" >&2; exit 1; }
CACHE="${OPBROKER_CACHE:-$HOME/.cache/opbroker}"
key=$(sha256sum pyproject.toml | cut -c1-12)
venv="$CACHE/lowest-$key"
if [ ! -f "$venv/.complete" ]; then
  echo "[lowest] building $venv: the lowest versions pyproject.toml allows"
  rm -rf "$venv"
  mkdir -p "$CACHE"
  "$UV" venv --quiet --python "$(.venv/bin/python -c 'import sys; print(sys.executable)')" "$venv"
  # lowest-direct: the floors of opbroker's own dependencies; what they need in turn resolves as usual.
  VIRTUAL_ENV="$venv" "$UV" pip install --quiet --resolution lowest-direct -e '.[dev,pulumi]'
  touch "$venv/.complete"
else
  # The dependencies are the cached ones; only opbroker itself is this checkout.
  VIRTUAL_ENV="$venv" "$UV" pip install --quiet --no-deps -e .
fi
# Every floor is what got installed: a floor below what the other floors require (kubernetes 37 needs pydantic
# 2.13.5, say) would be a version no test ever ran.
"$venv/bin/python" - <<'PY'
import tomllib
from importlib.metadata import version

from packaging.requirements import Requirement
from packaging.version import Version

project = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = project["optional-dependencies"]
untested = []
for line in [*project["dependencies"], *extras["pulumi"], *extras["dev"]]:
    requirement = Requirement(line)
    floor = next((Version(s.version) for s in requirement.specifier if s.operator == ">="), None)
    installed = Version(version(requirement.name))
    if floor is not None and installed != floor:
        untested.append(f"{requirement.name}: floor {floor}, installed {installed}")
if untested:
    raise SystemExit("[lowest] floors no test runs (raise each to what the others allow):\n  " + "\n  ".join(untested))
print(f"[lowest] every direct dependency with a floor is installed at it ({len(project['dependencies'])} runtime)")
PY
[ $# -gt 0 ] || set -- -m unit -q
# tests/ import opbroker the way the main environment does; the environment's own interpreter and tools.
PATH="$venv/bin:$PATH" "$venv/bin/python" -m pytest -p no:cacheprovider "$@"
echo "[lowest] passed in $(($(date +%s) - start)) s"
