"""Fixtures for tests that need a real Kubernetes API.

One control plane per test session (built on first use, cached outside the repo), with opbroker's CRDs
installed; each test gets its own namespace. Nothing is mocked and nothing is skipped: if the control
plane cannot start, the tests that need it fail with the reason.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from kubernetes import client, config

from opbroker.devcluster import ControlPlane
from opbroker.devcluster.admission import install_admission
from opbroker.devcluster.crds import install_crds


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    plane = ControlPlane(f"pytest-{os.getpid()}")
    plane.up(progress=lambda message: print(f"[control plane] {message}"))
    try:
        yield plane
    finally:
        plane.down(progress=lambda message: print(f"[control plane] {message}"))


@pytest.fixture(scope="session")
def api_client(control_plane: ControlPlane) -> Iterator[client.ApiClient]:
    api = config.new_client_from_config(config_file=str(control_plane.kubeconfig))
    install_crds(api)
    install_admission(api)
    from tests.tenancy_support import await_facts_enforced

    await_facts_enforced(api)
    yield api
    api.close()


def onboard(api: client.ApiClient, namespace: str) -> None:
    """What the platform does for a new consumer namespace (``grants.onboard_namespace``)."""
    from opbroker.devcluster.grants import onboard_namespace

    onboard_namespace(api, namespace)


@contextmanager
def onboarded_namespace(api: client.ApiClient, prefix: str = "t") -> Iterator[str]:
    """A fresh namespace (``<prefix>-<random>``), onboarded (:func:`onboard`), deleted on exit (the namespace
    controller empties it)."""
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": name, "labels": {"opbroker.io/test": "true"}}})
    onboard(api, name)  # the platform onboards every consumer namespace (its opbroker account)
    try:
        yield name
    finally:
        core.delete_namespace(name)


@pytest.fixture
def bare_namespace(api_client: client.ApiClient) -> Iterator[str]:
    """A fresh namespace nobody onboarded (what a failure shown for a missing onboarding needs)."""
    name = f"bare-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": name, "labels": {"opbroker.io/test": "true"}}})
    yield name
    core.delete_namespace(name)


@pytest.fixture
def namespace(api_client: client.ApiClient) -> Iterator[str]:
    """A fresh namespace for one test (:func:`onboarded_namespace`)."""
    with onboarded_namespace(api_client) as name:
        yield name
