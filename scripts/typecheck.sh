#!/usr/bin/env bash
# Type-check the pure core with mypy --strict: the resource model, the renderer, the broker's decisions,
# the controller's decisions, queue and claims logic.
# mypy reads the packages through the symlink tree of scripts/package-tree.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/package-tree.sh
modules=(
  -p opbroker.api -p opbroker.rendering -p opbroker.gorender
  -m opbroker.broker.decisions -m opbroker.broker.errors -m opbroker.broker.bodies -m opbroker.broker.headers
  -m opbroker.broker.operations -m opbroker.broker.parameters -m opbroker.broker.catalogs
  -m opbroker.broker.bodylimit -m opbroker.controller.refusals -m opbroker.controller.catalog_status
  -m opbroker.controller.decisions -m opbroker.controller.workqueue
  -m opbroker.controller.claims.matching -m opbroker.controller.claims.constraints -m opbroker.controller.claims.states
  -m opbroker.devcluster.requirements -m opbroker.devcluster.node
)
MYPYPATH=.typecheck exec .venv/bin/mypy --strict --follow-imports=silent "${modules[@]}" "$@"
