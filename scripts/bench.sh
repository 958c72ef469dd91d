#!/usr/bin/env bash
# The benchmark suites: provisioning (100, 1 000, 5 000 instances), bindings (10 000 over 1 000 instances),
# the scale curve, the renderer, claims matching, the local cluster and the Pulumi engine (preview and up of
# the root stack). Results: bench/results/. Takes about 30 minutes.
# `scripts/bench.sh --quick` checks the harness in a minute; `--suite NAME` runs one suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python -m bench.run "$@"
