"""``opbroker namespace onboard`` and ``offboard`` against a real API server: the namespace's ``opbroker`` account
can write there (and only there) once onboarded, onboarding again changes nothing, a missing namespace is refused
by name, and offboarding removes the account and the bindings but not the control plane's namespace writer."""

from __future__ import annotations

import uuid

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from typer.testing import CliRunner

from opbroker.api.controllerinstall import Names
from opbroker.cli.main import app
from opbroker.devcluster import ControlPlane
from tests.tenancy_support import service_account_client


def test_the_cli_onboards_and_offboards_a_namespace(control_plane: ControlPlane, api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(api_client)
    rbac = client.RbacAuthorizationV1Api(api_client)
    name = f"onb-{uuid.uuid4().hex[:8]}"
    other = f"onb-{uuid.uuid4().hex[:8]}"
    runner = CliRunner()
    kubeconfig = ["--kubeconfig", str(control_plane.kubeconfig)]

    missing = runner.invoke(app, ["namespace", "onboard", name, *kubeconfig])
    assert missing.exit_code == 1 and f"the namespace {name} does not exist" in missing.output

    for namespace in (name, other):
        core.create_namespace({"metadata": {"name": namespace, "labels": {"opbroker.io/test": "true"}}})
    try:
        for _ in range(2):  # applied again, it changes nothing
            done = runner.invoke(app, ["namespace", "onboard", name, *kubeconfig])
            assert done.exit_code == 0, done.output
            assert f"onboarded {name} for the control plane in opbroker" in done.output
        bindings = {b.metadata.name: b for b in rbac.list_namespaced_role_binding(name).items}
        writer = Names("opbroker").namespace_writer
        assert bindings[writer].role_ref.name == writer
        assert [(s.name, s.namespace) for s in bindings[writer].subjects] == [("opbroker", name)]
        plans = bindings["opbroker:opbroker:opbroker-plans"]
        assert [(s.name, s.namespace) for s in plans.subjects] == [("opbroker-plans", "opbroker")]
        assert rbac.read_cluster_role(writer).rules  # applied with the onboarding where no ControlPlane made it

        # The namespace's account writes what opbroker writes there for no plan — there, and nowhere else.
        account = client.CoreV1Api(service_account_client(api_client, name, "opbroker", seconds=600))
        secret = {"metadata": {"name": "written-by-opbroker"}, "stringData": {"k": "v"}}
        account.create_namespaced_secret(name, secret)
        with pytest.raises(ApiException) as refused:
            account.create_namespaced_secret(other, secret)
        assert refused.value.status == 403

        gone = runner.invoke(app, ["namespace", "offboard", name, *kubeconfig])
        assert gone.exit_code == 0, gone.output
        assert {b.metadata.name for b in rbac.list_namespaced_role_binding(name).items} == set()
        assert "opbroker" not in {a.metadata.name for a in core.list_namespaced_service_account(name).items}
        assert rbac.read_cluster_role(writer).rules  # other namespaces are bound to it
        again = runner.invoke(app, ["namespace", "offboard", name, *kubeconfig])
        assert again.exit_code == 0 and "(it was not onboarded)" in again.output
    finally:
        for namespace in (name, other):
            core.delete_namespace(namespace)
