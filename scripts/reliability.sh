#!/usr/bin/env bash
# The reliability suite: controller kills, API server restarts, dropped connections, conflicting OSB
# requests and fuzzing, each on a fresh local stack; results in bench/results/reliability-<date>.json and
# bench/results/RELIABILITY.md. About 15 minutes on 2 cores; --quick runs small versions.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python -m bench.reliability "$@"
