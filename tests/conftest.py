"""Shared fixtures. The cluster fixtures live in ``tests/cluster_fixtures.py`` (a real kube-apiserver)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
#: Copies of the seeds' manifests (tests need nothing outside the repository); see its README.
SEED_MANIFESTS = REPO / "tests" / "data" / "seeds"

pytest_plugins = [
    "tests.cluster_fixtures",
    "tests.controller_support",
    "tests.tenancy_support",  # tenant: a real ServiceAccount token with one namespace's consumer rights
    "tests.multicluster_support",
    "tests.brokers.fixture",  # second_broker, second_broker_tls, second_broker_token: an independent OSB broker
    "tests.servicecatalog_support",  # registered: the second broker as a Service Catalog Broker
]


@pytest.fixture(scope="session")
def seed_manifests() -> list[Path]:
    """The seeds' manifests, kept in the repository."""
    files = sorted(SEED_MANIFESTS.glob("*.yaml"))
    assert files, f"no seed manifests found in {SEED_MANIFESTS}"
    return files
