#!/usr/bin/env bash
# Type-check the pure core with mypy --strict.
# mypy cannot follow setuptools' editable-install import hook (opbroker.api -> api/), so it reads the
# packages through a tree of symlinks that mirrors the installed layout.
set -euo pipefail
cd "$(dirname "$0")/.."
tree=.typecheck/opbroker
mkdir -p "$tree"
for pkg in api rendering; do ln -sfn "../../$pkg" "$tree/$pkg"; done
MYPYPATH=.typecheck exec .venv/bin/mypy --strict -p opbroker.api -p opbroker.rendering "$@"
