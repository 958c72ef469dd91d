"""Onboarding by label (``--onboard-namespace-selector``, the ControlPlane's ``tenant_namespace_selector``) against
a real API server, with the ControlPlane's own RBAC: the controller onboards a namespace once the platform labels it,
as the onboarder account, and offboards it when the label goes; a tenant cannot label its own Namespace (so cannot
get itself onboarded); the onboarder can bind nothing but opbroker's ClusterRoles and touch no other RoleBinding;
the controller itself writes no RoleBinding; an onboarding it did not make is never offboarded by it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from opbroker.api.controllerinstall import MANAGED_BY_LABEL, ControllerSpec, Names, controller_objects
from opbroker.api.rbac import ONBOARDER_ACCOUNT
from opbroker.controller.onboarding import MANAGED_BY_CONTROLLER, NamespaceOnboarder, Onboarding, onboard
from opbroker.controller.runtime.kube import Kube
from opbroker.devcluster import ControlPlane
from opbroker.devcluster.processes import Process
from tests.controller_support import controller_command, wait_for
from tests.tenancy_support import make_tenant, refused, service_account_client

SELECTOR = "opbroker.io/tenant in (yes)"
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


@pytest.fixture
def control_plane_namespace(api_client: client.ApiClient) -> Iterator[str]:
    """A control plane's namespace with exactly the ControlPlane's accounts and RBAC for a selector."""
    name = f"cp-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": name}})
    spec = ControllerSpec(namespace=name, image="unused", onboard_namespace_selector=SELECTOR, webhook=False)
    admin = Kube(api_client)
    applied = [m for _, m in controller_objects(spec) if m["kind"] in RBAC_KINDS]
    for manifest in applied:
        admin.apply(manifest)
    try:
        yield name
    finally:
        rbac = client.RbacAuthorizationV1Api(api_client)
        for manifest in applied:
            if manifest["kind"] == "ClusterRole":
                rbac.delete_cluster_role(manifest["metadata"]["name"])
            elif manifest["kind"] == "ClusterRoleBinding":
                rbac.delete_cluster_role_binding(manifest["metadata"]["name"])
        core.delete_namespace(name)


def namespace_body(core: client.CoreV1Api, name: str) -> dict[str, Any]:
    found = core.read_namespace(name)
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": found.metadata.labels}}


def test_the_controller_onboards_labelled_namespaces_as_the_onboarder_and_nothing_more(
    api_client: client.ApiClient, control_plane_namespace: str
) -> None:
    cp = control_plane_namespace
    core = client.CoreV1Api(api_client)
    rbac = client.RbacAuthorizationV1Api(api_client)
    controller = Kube(service_account_client(api_client, cp, Names(cp).controller, seconds=600))
    onboarder = NamespaceOnboarder(
        controller.acting_as(f"system:serviceaccount:{cp}:{ONBOARDER_ACCOUNT}"), cp, SELECTOR
    )
    team, other = f"team-{uuid.uuid4().hex[:8]}", f"team-{uuid.uuid4().hex[:8]}"
    for name in (team, other):
        core.create_namespace({"metadata": {"name": name}})
    try:
        tenant = make_tenant(api_client, team)
        # The label is the platform's: the tenant cannot set it on its own Namespace.
        refused(lambda: tenant.core.patch_namespace(team, {"metadata": {"labels": {"opbroker.io/tenant": "yes"}}}), 403)

        onboarder.on_namespace("ADDED", namespace_body(core, team))  # not labelled: nothing to do
        onboarder.sync(team)
        assert "opbroker" not in {a.metadata.name for a in core.list_namespaced_service_account(team).items}

        core.patch_namespace(team, {"metadata": {"labels": {"opbroker.io/tenant": "yes"}}})
        onboarder.on_namespace("MODIFIED", namespace_body(core, team))
        onboarder.sync(team)
        account = core.read_namespaced_service_account("opbroker", team)
        assert account.metadata.labels[MANAGED_BY_LABEL] == MANAGED_BY_CONTROLLER
        bindings = {b.metadata.name: b.role_ref.name for b in rbac.list_namespaced_role_binding(team).items}
        names = Names(cp)
        assert bindings == {
            "tenant-rights": "tenant-rights",
            names.namespace_writer: names.namespace_writer,
            names.plan_cluster_role: names.plan_cluster_role,
        }

        # The onboarder binds nothing else, and touches no other RoleBinding; the controller writes none itself.
        door = onboarder.door
        # ("admin" is no test: its rules are aggregated, empty in a cluster without the aggregation controller yet.)
        for role in ("cluster-admin", "system:node", names.controller_cluster_role):
            escalation = {**_writer_binding(team, "escalate"), "roleRef": {**_ROLE_REF, "name": role}}
            refused(lambda body=escalation: door.create(body), 403)
        refused(lambda: door.delete(_ref("RoleBinding", team, "tenant-rights")), 403)
        refused(lambda: door.delete(_ref("ServiceAccount", team, "tenant")), 403)
        refused(lambda: controller.apply(_writer_binding(team, names.namespace_writer)), 403)

        # An onboarding the controller did not make stays when the labels do not match.
        onboard(Kube(api_client), Onboarding(other, cp))
        onboarder.on_namespace("ADDED", namespace_body(core, other))
        onboarder.sync(other)
        assert core.read_namespaced_service_account("opbroker", other).metadata.labels[MANAGED_BY_LABEL] != (
            MANAGED_BY_CONTROLLER
        )

        # The label goes: so does the onboarding (the tenant's own binding stays).
        core.patch_namespace(team, {"metadata": {"labels": {"opbroker.io/tenant": None}}})
        onboarder.on_namespace("MODIFIED", namespace_body(core, team))
        onboarder.sync(team)
        assert {b.metadata.name for b in rbac.list_namespaced_role_binding(team).items} == {"tenant-rights"}
        assert "opbroker" not in {a.metadata.name for a in core.list_namespaced_service_account(team).items}
    finally:
        for name in (team, other):
            core.delete_namespace(name)


def _ref(kind: str, namespace: str, name: str) -> Any:
    from opbroker.api.meta import ResourceRef

    api_version = "v1" if kind == "ServiceAccount" else "rbac.authorization.k8s.io/v1"
    return ResourceRef(api_version=api_version, kind=kind, namespace=namespace, name=name)


_ROLE_REF = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole"}


def _writer_binding(namespace: str, writer: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": writer, "namespace": namespace},
        "roleRef": {**_ROLE_REF, "name": writer},
        "subjects": [{"kind": "ServiceAccount", "name": "opbroker", "namespace": namespace}],
    }


@pytest.mark.process
def test_a_running_controller_onboards_a_namespace_labelled_later_and_offboards_it_when_unlabelled(
    control_plane: ControlPlane, api_client: client.ApiClient, control_plane_namespace: str, tmp_path: Path
) -> None:
    """The watch wired in: ``opbroker controller run --onboard-namespace-selector`` (as the admin, impersonating
    the onboarder, so the onboarder's RBAC decides) follows a namespace's labels within seconds."""
    core = client.CoreV1Api(api_client)
    team = f"team-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": team}})
    command = controller_command(
        control_plane, "--namespace", control_plane_namespace, "--onboard-namespace-selector", SELECTOR
    )
    process = Process("controller", command, tmp_path)
    process.start()
    try:
        accounts = lambda: {a.metadata.name for a in core.list_namespaced_service_account(team).items}  # noqa: E731
        try:
            core.patch_namespace(team, {"metadata": {"labels": {"opbroker.io/tenant": "yes"}}})
            wait_for(lambda: "opbroker" in accounts(), timeout=60, what=f"the onboarding of {team}")
            core.patch_namespace(team, {"metadata": {"labels": {"opbroker.io/tenant": "no"}}})
            wait_for(lambda: "opbroker" not in accounts(), timeout=30, what=f"the offboarding of {team}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the controller's log ends:\n{process.tail()}") from None
        assert process.running, process.tail()
    finally:
        process.stop()
        core.delete_namespace(team)
