"""Fixtures for the engine tests: a control plane of their own and a Pulumi engine (``opbroker.devcluster.
pulumi_engine``: the binaries scripts/build-pulumi.sh builds, a file backend, the passphrase secrets provider).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from opbroker.devcluster.pulumi_engine import BIN, Engine

# -- fixtures -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A control plane of its own (no node, no CRDs installed: the stacks install them); yields its kubeconfig."""
    from opbroker.devcluster import ControlPlane

    plane = ControlPlane(f"pulumi-{os.getpid()}-{tmp_path_factory.mktemp('c').name}"[:40])
    plane.up(progress=lambda message: print(f"[control plane] {message}"))
    try:
        yield plane.kubeconfig
    finally:
        plane.down(progress=lambda message: print(f"[control plane] {message}"))


@pytest.fixture(scope="module")
def engine(engine_cluster: Path, tmp_path_factory: pytest.TempPathFactory) -> Engine:
    for binary in ("pulumi", "pulumi-language-yaml", "pulumi-resource-kubernetes"):
        assert (BIN / binary).is_file(), f"{BIN / binary} is missing: run scripts/setup.sh (scripts/build-pulumi.sh)"
    root = tmp_path_factory.mktemp("pulumi")
    (root / "home").mkdir()
    (root / "state").mkdir()
    return Engine(root / "home", root / "state", engine_cluster)
