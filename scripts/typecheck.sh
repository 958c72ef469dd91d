#!/usr/bin/env bash
# Type-check with mypy --strict: every package but the controller whole, and the controller's decisions, queue and
# claims logic.
# mypy reads the packages through the symlink tree of scripts/package-tree.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/package-tree.sh
# Whole packages: every layer, strict.
modules=(
  -p opbroker.api -p opbroker.osbclient -p opbroker.kubeclient -p opbroker.rendering -p opbroker.gorender
  -p opbroker.broker -p opbroker.provider -p opbroker.devcluster -p opbroker.components -p opbroker.stacks -p opbroker.cli
  -p opbroker.controller
)
MYPYPATH=.typecheck exec .venv/bin/mypy --strict --follow-imports=silent "${modules[@]}" "$@"
