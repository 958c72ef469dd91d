"""Shared fixtures, and the ``unit``/``apiserver`` markers. The cluster fixtures live in
``tests/cluster_fixtures.py`` (a real kube-apiserver).

Markers are derived, not kept by hand: a test whose fixtures include one that starts a control plane
(:data:`APISERVER_FIXTURES`), or whose module says ``pytestmark = pytest.mark.apiserver`` (its own fixtures start
one), is ``apiserver``; every other test is ``unit``. The derivation is checked as the tests run: a ``unit`` test
that starts a control plane fails at once, naming the fix.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from opbroker.devcluster import ControlPlane

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


#: Fixtures that start a local control plane (the others that need one depend on these).
APISERVER_FIXTURES = frozenset({"control_plane", "multicluster"})
_running: dict[str, pytest.Item | None] = {"item": None}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("apiserver") is None and APISERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.apiserver)
        if item.get_closest_marker("apiserver") is None:
            item.add_marker(pytest.mark.unit)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _running["item"] = item  # before any fixture of the item, module- and session-scoped ones included


def pytest_configure(config: pytest.Config) -> None:
    up = ControlPlane.up

    def guarded_up(plane: ControlPlane, *args: object, **kwargs: object) -> object:
        item = _running["item"]
        if item is not None and item.get_closest_marker("unit") is not None:
            raise AssertionError(
                f"{item.nodeid} is marked unit but starts a control plane: give its module "
                "`pytestmark = pytest.mark.apiserver`, or its fixture to APISERVER_FIXTURES (tests/conftest.py)"
            )
        return up(plane, *args, **kwargs)

    ControlPlane.up = guarded_up  # type: ignore[method-assign]
