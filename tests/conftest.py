"""Shared fixtures, and the ``unit``/``process``/``apiserver`` markers. The cluster fixtures live in
``tests/cluster_fixtures.py`` (a real kube-apiserver).

Three kinds of test, so that ``pytest -m unit`` is the fast loop:

* ``apiserver``: the test starts or uses a local control plane. Derived, not kept by hand: a test whose fixtures
  include one that starts a control plane (:data:`APISERVER_FIXTURES`), or whose module says
  ``pytestmark = pytest.mark.apiserver`` (its own fixtures start one);
* ``process``: no control plane, but the test runs another program — the Pulumi engine, the Go renderer, the CLI
  as a subprocess, a broker in its own process. Marked by hand (``@pytest.mark.process`` or the module's
  ``pytestmark``);
* ``unit``: every other test — in-process only.

Both hand-given markers are checked as the tests run: a ``unit`` test that starts a control plane or any process
fails at once, naming the fix.
"""

from __future__ import annotations

import subprocess
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
        if item.get_closest_marker("apiserver") is None and item.get_closest_marker("process") is None:
            item.add_marker(pytest.mark.unit)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _running["item"] = item  # before any fixture of the item, module- and session-scoped ones included


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    # Finalizers of wider-scoped fixtures run in the teardown of whichever test comes last: not that test's doing.
    _running["item"] = None


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

    popen_init = subprocess.Popen.__init__

    def guarded_popen(popen: subprocess.Popen[bytes], *args: object, **kwargs: object) -> None:
        item = _running["item"]
        if item is not None and item.get_closest_marker("unit") is not None:
            program = args[0] if args else kwargs.get("args")
            raise AssertionError(
                f"{item.nodeid} is marked unit but starts a process ({program!r}): mark it "
                "`@pytest.mark.process` (or its module `pytestmark = pytest.mark.process`)"
            )
        popen_init(popen, *args, **kwargs)  # type: ignore[arg-type]

    subprocess.Popen.__init__ = guarded_popen  # type: ignore[method-assign,assignment]
