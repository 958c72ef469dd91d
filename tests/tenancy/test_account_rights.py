"""What each opbroker account may write, asked of the API server (issue 42): the ControlPlane's RBAC (rendered
by the component, one onboarded namespace) is applied to the test control plane, and a SubjectAccessReview per
account, resource, write verb and place — every resource the API server serves, in the control-plane namespace,
an onboarded one, one not onboarded, and cluster-wide — must find nothing the table
(:mod:`opbroker.api.accountrights`, which docs/security.md prints) does not list. What any ServiceAccount may do
without opbroker (the cluster's own bootstrap roles) is measured on an account with no binding and set aside."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from opbroker.api import RESOURCE_KINDS, accountrights
from opbroker.api.accountrights import ANYWHERE, CONTROL_PLANE, ONBOARDED
from opbroker.api.conventions import service_account_user
from opbroker.controller.runtime.kube import Kube
from opbroker.devcluster.incluster import DEMO_OPERATOR_RULE, control_plane_manifests
from opbroker.kubeclient.answers import json_object
from opbroker.kubeclient.lean import LeanCustomObjects
from tests.tenancy_support import allowed

WRITES = ("create", "update", "patch", "delete", "deletecollection", "impersonate", "escalate", "bind")
CLUSTER_SCOPED_RULE = {"api_groups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["create"]}
#: Impersonation targets discovery does not list.
IMPERSONABLE = (
    ("", "users"),
    ("", "groups"),
    ("authentication.k8s.io", "userextras"),
    ("authentication.k8s.io", "uids"),
)
RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


@pytest.fixture
def places(api_client: client.ApiClient) -> Iterator[dict[str, str]]:
    """A control plane's RBAC applied: its namespace, one onboarded namespace, one that is not."""
    tag = uuid.uuid4().hex[:8]
    where = {CONTROL_PLANE: f"cp-{tag}", ONBOARDED: f"tn-{tag}", "other": f"ot-{tag}"}
    core = client.CoreV1Api(api_client)
    for namespace in where.values():
        core.create_namespace({"metadata": {"name": namespace, "labels": {"opbroker.io/test": "true"}}})
    args = {
        "image": "opbroker:rights",
        "namespace": where[CONTROL_PLANE],
        "create_namespace": False,
        "install_crds": False,
        "tenant_namespaces": [where[ONBOARDED]],
        "controller": {"operator_rules": [DEMO_OPERATOR_RULE], "cluster_operator_rules": [CLUSTER_SCOPED_RULE]},
    }
    applied = [m for m in control_plane_manifests(args) if m["kind"] in RBAC_KINDS]
    kube = Kube(api_client)
    for manifest in applied:
        kube.apply(manifest, field_manager="opbroker-test")
    core.create_namespaced_service_account(where["other"], {"metadata": {"name": "nobody"}})
    try:
        yield where
    finally:
        rbac = client.RbacAuthorizationV1Api(api_client)
        for manifest in applied:
            if manifest["kind"] == "ClusterRole":
                rbac.delete_cluster_role(manifest["metadata"]["name"])
            elif manifest["kind"] == "ClusterRoleBinding":
                rbac.delete_cluster_role_binding(manifest["metadata"]["name"])
        for namespace in where.values():
            core.delete_namespace(namespace)


def served(api: client.ApiClient) -> list[tuple[str, str, bool]]:
    """(group, resource, namespaced) of every resource the API server serves (preferred versions, no
    subresources), opbroker's own groups aside."""
    own = {kind.GROUP for kind in RESOURCE_KINDS}

    lean = LeanCustomObjects(api)

    def get(path: str) -> Any:
        return json_object(lean.request("GET", path))

    lists = [("", get("/api/v1"))]
    for group in get("/apis")["groups"]:
        if group["name"] not in own:
            lists.append((group["name"], get(f"/apis/{group['preferredVersion']['groupVersion']}")))
    return [
        (group, r["name"], r["namespaced"])
        for group, found in lists
        for r in found["resources"]
        if "/" not in r["name"]
    ]


def test_no_account_writes_anything_the_table_does_not_list(
    api_client: client.ApiClient, places: dict[str, str]
) -> None:
    cp = places[CONTROL_PLANE]
    accounts = {
        accountrights.CONTROLLER: service_account_user(cp, "opbroker-controller"),
        accountrights.BROKER: service_account_user(cp, "opbroker-broker"),
        accountrights.PLANS: service_account_user(cp, "opbroker-plans"),
        accountrights.NAMESPACE: service_account_user(places[ONBOARDED], "opbroker"),
    }
    nobody = service_account_user(places["other"], "nobody")
    operator = {(g, r) for g in DEMO_OPERATOR_RULE["api_groups"] for r in DEMO_OPERATOR_RULE["resources"]}
    cluster_operator = {("rbac.authorization.k8s.io", "clusterroles")}
    questions = []
    for group, resource, namespaced in [*served(api_client), *((g, r, False) for g, r in IMPERSONABLE)]:
        scopes = [(label, places[label]) for label in (CONTROL_PLANE, ONBOARDED, "other")] if namespaced else []
        for label, namespace in scopes or [(ANYWHERE, "")]:
            for verb in WRITES:
                questions.append((group, resource, label, namespace, verb))

    def ask(question: tuple[str, str, str, str, str]) -> list[str]:
        group, resource, label, namespace, verb = question
        if allowed(api_client, nobody, verb, group, resource, namespace):
            return []  # the cluster grants it every ServiceAccount: not opbroker's doing
        wrong = []
        for account, user in accounts.items():
            if not allowed(api_client, user, verb, group, resource, namespace):
                continue
            listed = accountrights.documented(account, group, resource, verb, label)
            if account == accountrights.PLANS and verb in accountrights.CHANGE:
                listed |= (group, resource) in operator and label in (CONTROL_PLANE, ONBOARDED)
                listed |= (group, resource) in cluster_operator and verb in CLUSTER_SCOPED_RULE["verbs"]
            if not listed:
                wrong.append(f"{account} may {verb} {group or 'core'}/{resource} in {label}")
        return wrong

    with ThreadPoolExecutor(max_workers=4) as pool:
        undocumented = [line for found in pool.map(ask, questions) for line in found]
    assert undocumented == [], "\n".join(undocumented)
    assert len(questions) > 500, "the API server listed too few resources to mean anything"


def test_the_named_rights_hold_by_name_only(api_client: client.ApiClient, places: dict[str, str]) -> None:
    """The probes above carry no name, so rights limited by name show here: impersonation of the listed
    accounts only, the plan account's writes where it is bound only."""
    cp, onboarded, other = places[CONTROL_PLANE], places[ONBOARDED], places["other"]
    controller = service_account_user(cp, "opbroker-controller")
    assert allowed(api_client, controller, "impersonate", "", "serviceaccounts", cp, "opbroker-plans")
    assert allowed(api_client, controller, "impersonate", "", "serviceaccounts", onboarded, "opbroker")
    assert not allowed(api_client, controller, "impersonate", "", "serviceaccounts", cp, "opbroker-controller")
    assert not allowed(api_client, controller, "impersonate", "", "serviceaccounts", "kube-system", "default")
    assert not allowed(api_client, controller, "impersonate", "", "users", "", "system:admin")
    assert not allowed(api_client, controller, "impersonate", "", "groups", "", "system:masters")
    plans = service_account_user(cp, "opbroker-plans")
    for namespace, expected in ((cp, True), (onboarded, True), (other, False)):
        assert allowed(api_client, plans, "create", "", "secrets", namespace) is expected, namespace
        assert allowed(api_client, plans, "create", "demo.opbroker.io", "databases", namespace) is expected
    assert allowed(api_client, plans, "create", "rbac.authorization.k8s.io", "clusterroles", "")
    writer = service_account_user(onboarded, "opbroker")
    assert allowed(api_client, writer, "create", "", "secrets", onboarded)
    assert not allowed(api_client, writer, "create", "", "secrets", other)


def test_the_docs_print_the_table() -> None:
    docs = (Path(__file__).parents[2] / "docs" / "security.md").read_text()
    assert accountrights.markdown_table() in docs, "docs/security.md: paste accountrights.markdown_table()"
