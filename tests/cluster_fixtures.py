"""Fixtures for tests that need a real Kubernetes API.

One control plane per test session (built on first use, cached outside the repo), with opbroker's CRDs
installed; each test gets its own namespace. Nothing is mocked and nothing is skipped: if the control
plane cannot start, the tests that need it fail with the reason.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client, config

from opbroker.api.conventions import NAMESPACE_SERVICE_ACCOUNT
from opbroker.devcluster import ControlPlane
from opbroker.devcluster.crds import install_crds


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    plane = ControlPlane(f"pytest-{os.getpid()}")
    plane.up(progress=lambda message: print(f"[control plane] {message}"))
    try:
        yield plane
    finally:
        plane.down(progress=lambda message: print(f"[control plane] {message}"))


#: The ClusterRole the tests' platform binds, in every consumer namespace, to that namespace's ``opbroker``
#: account: what opbroker writes there for no plan (Service Catalog Bindings, claims).
NAMESPACE_WRITER = "opbroker-namespace-writer"


@pytest.fixture(scope="session")
def api_client(control_plane: ControlPlane) -> Iterator[client.ApiClient]:
    from opbroker.components import rbac

    api = config.new_client_from_config(config_file=str(control_plane.kubeconfig))
    install_crds(api)
    rules = [rule.to_manifest() for rule in rbac.tenant_write_rules()]
    client.RbacAuthorizationV1Api(api).create_cluster_role({"metadata": {"name": NAMESPACE_WRITER}, "rules": rules})
    yield api
    api.close()


def onboard(api: client.ApiClient, namespace: str) -> None:
    """What the platform does for a new consumer namespace: its ``opbroker`` account, granted
    :data:`NAMESPACE_WRITER` there (Flux's default service account, per tenant)."""
    client.CoreV1Api(api).create_namespaced_service_account(
        namespace, {"metadata": {"name": NAMESPACE_SERVICE_ACCOUNT}}
    )
    client.RbacAuthorizationV1Api(api).create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": NAMESPACE_WRITER},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAMESPACE_WRITER},
            "subjects": [{"kind": "ServiceAccount", "name": NAMESPACE_SERVICE_ACCOUNT, "namespace": namespace}],
        },
    )


@pytest.fixture
def namespace(api_client: client.ApiClient) -> Iterator[str]:
    """A fresh namespace for one test, onboarded (:func:`onboard`), deleted afterwards (the namespace controller
    empties it)."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": name, "labels": {"opbroker.io/test": "true"}}})
    onboard(api_client, name)
    yield name
    core.delete_namespace(name)
