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
echo "[test] lowest versions: every floor in pyproject.toml, the in-process tests (scripts/lowest-versions.sh)"
scripts/lowest-versions.sh
echo "[test] pytest"
exec .venv/bin/pytest --durations=40 "$@"
