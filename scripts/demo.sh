#!/usr/bin/env bash
# The main job: set up (idempotent), then bring up the local control plane, the controller, the broker,
# the demo operator and the example catalog, and run provision → bind → unbind → deprovision over OSB.
# Pass `--serve` to keep it running instead (Ctrl-C stops everything).
# The setup builds only what the demo uses (no node, cert-manager or Pulumi engine; scripts/test.sh builds them).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --demo
if [ "${1:-}" = "--serve" ]; then
  shift
  exec .venv/bin/opbroker dev "$@"
fi
exec .venv/bin/opbroker dev --demo "$@"
