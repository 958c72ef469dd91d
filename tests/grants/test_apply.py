"""``opbroker grant plan-account --apply`` against a real API server: the imported Couchbase plan renders a
ClusterRole, which the default plan account may not create until the command granted it — and what the account
held before (another plan's operator kind) stays."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from typer.testing import CliRunner

from opbroker.api.rbac import plan_role_name
from opbroker.cli.main import app
from opbroker.devcluster import ControlPlane
from opbroker.devcluster.grants import grant_plan_account
from opbroker.devcluster.incluster import DEMO_OPERATOR_RULE

IMPORTED = Path(__file__).resolve().parents[2] / "examples" / "couchbase" / "imported.yaml"
READER = {
    "metadata": {"name": "secret-store-reader-probe"},
    "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}],
}


@pytest.fixture
def control_namespace(api_client: client.ApiClient) -> Iterator[str]:
    name = f"cp-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(api_client).create_namespace({"metadata": {"name": name}})
    grant_plan_account(api_client, name, [DEMO_OPERATOR_RULE])  # what `opbroker dev` grants
    yield name
    client.CoreV1Api(api_client).delete_namespace(name)
    rbac = client.RbacAuthorizationV1Api(api_client)
    for role in (plan_role_name(name), f"{plan_role_name(name)}:cluster"):
        for delete in (rbac.delete_cluster_role, rbac.delete_cluster_role_binding):
            try:
                delete(role)
            except ApiException as exc:
                if exc.status != 404:
                    raise


def as_plan_account(plane: ControlPlane, namespace: str) -> client.RbacAuthorizationV1Api:
    api = config.new_client_from_config(config_file=str(plane.kubeconfig))
    api.set_default_header("Impersonate-User", f"system:serviceaccount:{namespace}:opbroker-plans")
    return client.RbacAuthorizationV1Api(api)


def may_create_the_reader(plane: ControlPlane, namespace: str) -> bool:
    try:
        as_plan_account(plane, namespace).create_cluster_role(READER, dry_run="All")
    except ApiException as exc:
        assert exc.status == 403, exc
        return False
    return True


def test_apply_grants_what_the_plan_renders_and_keeps_what_the_account_held(
    control_plane: ControlPlane, api_client: client.ApiClient, control_namespace: str
) -> None:
    ns = control_namespace
    assert not may_create_the_reader(control_plane, ns)
    command = ["grant", "plan-account", str(IMPORTED), "--namespace", ns, "--apply"]
    command += ["--kubeconfig", str(control_plane.kubeconfig)]
    for _ in range(2):  # applied again, it changes nothing
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 0, result.output
        assert f"applied ClusterRoleBinding {plan_role_name(ns)}:cluster" in result.output
    assert may_create_the_reader(control_plane, ns)
    rules = client.RbacAuthorizationV1Api(api_client).read_cluster_role(plan_role_name(ns)).rules
    kept = [r for r in rules if r.api_groups == ["demo.opbroker.io"]]
    assert kept and kept[0].resources == ["databases"] and "create" in kept[0].verbs
    cluster = client.RbacAuthorizationV1Api(api_client).read_cluster_role(f"{plan_role_name(ns)}:cluster").rules
    assert len(cluster) == 2  # clusterroles, and get secrets: not repeated by the second run
