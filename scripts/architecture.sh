#!/usr/bin/env bash
# Check the layers and the forbidden imports ([tool.importlinter] in pyproject.toml) with import-linter.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/package-tree.sh
PYTHONPATH=.typecheck exec .venv/bin/lint-imports --config pyproject.toml --cache-dir .typecheck/import-linter "$@"
