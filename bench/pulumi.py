"""Bench suite ``pulumi``: the real Pulumi engine on the Python root stack (examples/stack) as an inline Automation
API program (``opbroker.stacks``), against a fresh control plane without a node (``awaitDeployments`` false):
``pulumi preview`` and ``pulumi up`` of the whole stack, then a second preview with nothing to change and
``pulumi destroy``. Also reports the cold build of the engine binaries from ``scripts/build-pulumi.sh``'s own
records (a cached binary is never rebuilt).
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from opbroker import stacks
from opbroker.devcluster import ControlPlane
from opbroker.devcluster.pulumi_engine import (
    BIN,
    PULUMI_KUBERNETES_VERSION,
    PULUMI_VERSION,
    Engine,
    root_stack,
)

T = TypeVar("T")


def timed(call: Callable[[], T]) -> tuple[T, float]:
    started = time.monotonic()
    result = call()
    return result, round(time.monotonic() - started, 2)


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
            stack, select = timed(lambda: root_stack(engine, root / "stack", secrets.token_urlsafe(16)))
            preview, preview_seconds = timed(lambda: stacks.preview(stack))
            _, up_seconds = timed(lambda: stacks.up(stack))
            resources = len(stack.export_stack().deployment.get("resources") or [])
            again, again_seconds = timed(lambda: stacks.preview(stack))
            _, destroy_seconds = timed(lambda: stacks.destroy(stack))
    finally:
        plane.down(progress=lambda _m: None)
    return {
        "pulumi": PULUMI_VERSION,
        "pulumi_kubernetes": PULUMI_KUBERNETES_VERSION,
        "program": "examples/stack (Python, inline Automation API program)",
        "cold_build": builds,
        "resources": resources,
        "planned_creates": preview.summary.get("create", 0),
        "unchanged_changes": len(again.changes),
        "seconds": {
            "select_stack": select,
            "preview": preview_seconds,
            "up": up_seconds,
            "preview_unchanged": again_seconds,
            "destroy": destroy_seconds,
        },
    }
