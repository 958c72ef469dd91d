"""Bench suite ``pulumi``: the real Pulumi engine on the root stack's declarations, against a fresh control plane
without a node (``await_deployments`` false): ``pulumi preview`` and ``pulumi up`` of the whole stack (37
resources), then a second preview with nothing to change and ``pulumi destroy``. Also reports the cold build of
the engine binaries from ``scripts/build-pulumi.sh``'s own records (a cached binary is never rebuilt).
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
from pathlib import Path
from typing import Any

from opbroker.devcluster import ControlPlane
from opbroker.devcluster.pulumi_engine import (
    BIN,
    PULUMI_KUBERNETES_VERSION,
    PULUMI_VERSION,
    Engine,
    new_project,
    root_stack_program,
)


def run() -> dict[str, Any]:
    builds = [json.loads(record.read_text()) for record in sorted(BIN.parent.glob("build-*.json"))]
    plane = ControlPlane(f"bench-pulumi-{os.getpid()}")
    plane.up(progress=lambda _m: None)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            (root / "home").mkdir()
            (root / "state").mkdir()
            engine = Engine(root / "home", root / "state", plane.kubeconfig)
            project = new_project(engine, root / "stack", root_stack_program(secrets.token_urlsafe(16)))
            preview = project.run("preview")
            up = project.up()
            resources = len(project.resources())
            again = project.run("preview")
            destroy = project.run("destroy", "--yes", "--skip-preview")
    finally:
        plane.down(progress=lambda _m: None)
    return {
        "pulumi": PULUMI_VERSION,
        "pulumi_kubernetes": PULUMI_KUBERNETES_VERSION,
        "cold_build": builds,
        "resources": resources,
        "seconds": {
            "preview": round(preview.seconds, 2),
            "up": round(up.seconds, 2),
            "preview_unchanged": round(again.seconds, 2),
            "destroy": round(destroy.seconds, 2),
        },
    }
