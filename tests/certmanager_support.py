"""cert-manager for the tests: its controller (built from its Go module, ``scripts/build-cert-manager.sh``) as a
process logged in as its own ServiceAccount, its CRDs, and the certificates example catalog with its plan account.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from opbroker.api.conventions import DEFAULT_NAMESPACE
from opbroker.devcluster import ControlPlane, certmanager
from opbroker.devcluster.grants import grant_plan_account
from opbroker.devcluster.processes import Process
from tests.controller_support import REPO, TEST_PLAN_RULES, apply_yaml

CATALOG = REPO / "examples" / "certificates" / "catalog.yaml"


@pytest.fixture(scope="session")
def certificates_catalog(api_client: client.ApiClient, catalog_namespace: str) -> list[dict[str, Any]]:
    """The certificates service and plan, and the default plan account also granted what the plan renders."""
    grant_plan_account(api_client, DEFAULT_NAMESPACE, [*TEST_PLAN_RULES, *certmanager.PLAN_RULES])
    return apply_yaml(api_client, CATALOG, catalog_namespace)


@pytest.fixture(scope="session")
def cert_manager(
    control_plane: ControlPlane,
    api_client: client.ApiClient,
    certificates_catalog: list[dict[str, Any]],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Process]:
    """cert-manager's controller, running as ``cert-manager/cert-manager`` with :data:`certmanager.CONTROLLER_RULES`."""
    certmanager.ensure_built()
    certmanager.install(api_client)
    folder: Path = tmp_path_factory.mktemp("cert-manager")
    kubeconfig = certmanager.write_kubeconfig(api_client, control_plane.kubeconfig, folder / "kubeconfig")
    process = Process("cert-manager", list(certmanager.controller_command(kubeconfig)), folder)
    process.start()
    yield process
    process.stop()
