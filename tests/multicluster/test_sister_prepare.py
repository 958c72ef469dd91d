"""``opbroker sister prepare`` on two real control planes: the session's (the master, with the demo catalog in a
control-plane namespace of its own) and one started here (the sister, empty). One command makes the sister ready —
CRDs, namespace, the plan account's rights for the master's plans, an onboarded namespace — and writes the
kubeconfig Secret on the master that the controller accepts; run again, it changes nothing."""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from typer.testing import CliRunner

from opbroker.api.rbac import plan_role_name
from opbroker.cli.main import app
from opbroker.controller.multicluster.core import kubeconfigs
from opbroker.controller.multicluster.sisters import SisterKube, client_from_kubeconfig
from opbroker.devcluster import ControlPlane

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "demo_operator"


@pytest.fixture(scope="module")
def sister() -> Iterator[ControlPlane]:
    plane = ControlPlane(f"pytest-prep-{os.getpid()}")
    plane.up(progress=lambda message: print(f"[sister] {message}"))
    try:
        yield plane
    finally:
        plane.down(progress=lambda _message: None)


@pytest.fixture
def master_namespace(api_client: client.ApiClient) -> Iterator[str]:
    """A control-plane namespace on the master holding the demo catalog (its plan renders the demo's Database)."""
    name = f"cp-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(api_client).create_namespace({"metadata": {"name": name}})
    custom = client.CustomObjectsApi(api_client)
    for document in yaml.safe_load_all((DEMO / "catalog.yaml").read_text()):
        plural = {"SFService": "sfservices", "SFPlan": "sfplans"}[document["kind"]]
        custom.create_namespaced_custom_object("osb.servicefabrik.io", "v1alpha1", name, plural, document)
    yield name
    client.CoreV1Api(api_client).delete_namespace(name)


def may_create_a_database(sister: ControlPlane, control_plane: str, namespace: str) -> bool:
    api = config.new_client_from_config(config_file=str(sister.kubeconfig))
    api.set_default_header("Impersonate-User", f"system:serviceaccount:{control_plane}:opbroker-plans")
    body = {
        "apiVersion": "demo.opbroker.io/v1alpha1",
        "kind": "Database",
        "metadata": {"name": "probe"},
        "spec": {"engine": "pg"},
    }
    try:
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            "demo.opbroker.io", "v1alpha1", namespace, "databases", body, dry_run="All"
        )
    except ApiException as exc:
        assert exc.status == 403, exc
        return False
    return True


def role_rules(api: client.ApiClient, name: str) -> list[dict[str, Any]]:
    role = client.RbacAuthorizationV1Api(api).read_cluster_role(name)
    return [api.sanitize_for_serialization(rule) for rule in role.rules]


def test_one_command_prepares_the_sister_and_registers_its_kubeconfig_on_the_master(
    control_plane: ControlPlane, api_client: client.ApiClient, sister: ControlPlane, master_namespace: str
) -> None:
    ns = master_namespace
    team = f"team-{uuid.uuid4().hex[:6]}"
    command = [
        "sister", "prepare", "eu-2",
        "--sister-kubeconfig", str(sister.kubeconfig),
        "--namespace", ns,
        "--crd", str(DEMO / "crd.yaml"),
        "--onboard", team,
        "--kubeconfig", str(control_plane.kubeconfig),
    ]  # fmt: skip
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 0, result.output
    assert "secretRef: eu-2-kubeconfig" in result.output

    sister_api = config.new_client_from_config(config_file=str(sister.kubeconfig))
    extensions = client.ApiextensionsV1Api(sister_api)
    assert extensions.read_custom_resource_definition("sfplans.osb.servicefabrik.io")
    assert extensions.read_custom_resource_definition("sfclusters.resource.servicefabrik.io")
    assert client.CoreV1Api(sister_api).read_namespace(ns)
    rules = role_rules(sister_api, plan_role_name(ns))
    assert {"apiGroups": ["demo.opbroker.io"], "resources": ["databases"], "verbs": [
        "get", "list", "watch", "create", "update", "patch", "delete"
    ]} in rules  # fmt: skip
    # The plans may write where the namespace was onboarded, and nowhere else.
    assert may_create_a_database(sister, ns, team)
    assert not may_create_a_database(sister, ns, "default")

    # The master's Secret: a kubeconfig of data only, which the controller accepts and which reaches the sister.
    secret = client.CoreV1Api(api_client).read_namespaced_secret("eu-2-kubeconfig", ns)
    text = base64.b64decode(secret.data["kubeconfig"]).decode()
    assert kubeconfigs.problems(yaml.safe_load(text)) == []
    SisterKube(client_from_kubeconfig(text)).probe()

    # Again: nothing changes (the same rules, the same Secret).
    version = secret.metadata.resource_version
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 0, result.output
    assert role_rules(sister_api, plan_role_name(ns)) == rules
    assert client.CoreV1Api(api_client).read_namespaced_secret("eu-2-kubeconfig", ns).metadata.resource_version == (
        version
    )
