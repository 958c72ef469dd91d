"""Least rights by default (issue 42), as data: an SFCluster's rules are checked as the ControlPlane's are, a
plan account is bound per namespace (cluster-wide only for the cluster-scoped kinds declared), and the
controller impersonates accounts by name only."""

from typing import Any

import pytest
from pydantic import ValidationError

from opbroker.api import rbac
from opbroker.api.cluster import SFCluster, SFClusterController
from opbroker.api.crd import crd_for
from opbroker.controller.multicluster import installer

EVERYTHING = {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}


@pytest.mark.parametrize("field", ["operatorRules", "clusterOperatorRules"])
def test_an_sfcluster_granting_everything_is_refused_by_the_model_and_the_crd(field: str) -> None:
    with pytest.raises(ValidationError, match=r"grants '\*' verbs on '\*' resources"):
        SFClusterController.model_validate({"image": "opbroker:1", field: [EVERYTHING]})
    # Every verb on one kind, or one verb on every kind, stays possible (as for the ControlPlane's rules).
    SFClusterController.model_validate(
        {"image": "opbroker:1", field: [{**EVERYTHING, "resources": ["postgresqls"]}, {**EVERYTHING, "verbs": ["get"]}]}
    )
    schema = crd_for(SFCluster)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    rule = schema["properties"]["spec"]["properties"]["controller"]["properties"][field]["items"]
    assert rule["x-kubernetes-validations"] == [
        {"rule": "!('*' in self.verbs && '*' in self.resources)", "message": rbac.rule_problems([EVERYTHING], "")[0][1]}
    ]


def kinds(objects: list[tuple[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    return dict(objects)


def test_a_sisters_plan_account_is_bound_in_its_namespace_and_cluster_wide_only_for_cluster_scoped_kinds() -> None:
    scoped = {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["create"]}
    wanted = SFClusterController.model_validate(
        {"image": "opbroker:1", "clusterOperatorRules": [scoped], "planAccounts": ["pg-plans"]}
    )
    objects = kinds(installer.desired("opbroker", wanted))
    assert objects["plans-role-binding"]["kind"] == "RoleBinding"
    assert objects["plans-role-binding"]["metadata"]["namespace"] == "opbroker"
    assert objects["plans-cluster-scoped-role"]["rules"] == [scoped]
    assert objects["plans-cluster-scoped-role-binding"]["kind"] == "ClusterRoleBinding"
    impersonation = [r for r in objects["controller-cluster-role"]["rules"] if "impersonate" in r["verbs"]]
    assert impersonation == [
        {
            "apiGroups": [""],
            "resources": ["serviceaccounts"],
            "verbs": ["impersonate"],
            "resourceNames": ["opbroker", "opbroker-plans", "pg-plans"],
        }
    ]
    # Removal knows every object an installation may have made, the cluster-scoped role included.
    removable = {(m["kind"], m["metadata"]["name"]) for _, m in installer.removable("opbroker")}
    assert ("ClusterRoleBinding", "opbroker:opbroker:opbroker-plans:cluster") in removable
    plain = installer.desired("opbroker", SFClusterController(image="x"))
    assert [m["metadata"]["name"] for _, m in plain if m["kind"] == "ClusterRoleBinding"] == [
        "opbroker:opbroker:controller"
    ], "without cluster-scoped kinds, nothing of the plan account is bound cluster-wide"


def test_onboarding_binds_the_plan_accounts_and_the_namespace_account_in_that_namespace_only() -> None:
    account, writer, *plans = rbac.onboarding_manifests("team-a", "opbroker", ("opbroker-plans", "pg-plans"))
    assert account["metadata"] == {"name": "opbroker", "namespace": "team-a"}
    assert writer["kind"] == "RoleBinding" and writer["roleRef"]["name"] == rbac.NAMESPACE_WRITER
    assert [(p["kind"], p["metadata"]["namespace"], p["roleRef"]["name"]) for p in plans] == [
        ("RoleBinding", "team-a", "opbroker:opbroker:opbroker-plans"),
        ("RoleBinding", "team-a", "opbroker:opbroker:pg-plans"),
    ]
    assert [p["subjects"][0]["namespace"] for p in plans] == ["opbroker", "opbroker"]
    granted = rbac.plan_account_manifests("opbroker", rbac.plan_account_rules())
    assert [m["kind"] for m in granted] == ["ServiceAccount", "ClusterRole", "RoleBinding"]


def test_onboarding_by_label_gives_the_controller_no_write_and_the_onboarder_exactly_an_onboarding() -> None:
    """``--onboard-namespace-selector``: the controller's ClusterRole gains reads of Namespaces and the
    impersonation of the onboarder by name, no write; the onboarder's ClusterRole passes the least-rights check
    only as an onboarder's, and any wider rule of the same kinds is caught."""
    controller = rbac.controller_cluster_rules(onboards=True)
    assert rbac.writes_beyond_own(controller) == []
    assert rbac.ONBOARDER_ACCOUNT in rbac.impersonation_rule([rbac.ONBOARDER_ACCOUNT]).resource_names
    assert next(r for r in controller if "impersonate" in r.verbs).resource_names == (
        "opbroker",
        rbac.ONBOARDER_ACCOUNT,
        "opbroker-plans",
    )
    onboarder = rbac.onboarder_rules("opbroker")
    assert rbac.writes_beyond_own(onboarder, onboarding=True) == []
    assert rbac.writes_beyond_own(onboarder) == onboarder  # only the onboarder's role may hold them
    group = "rbac.authorization.k8s.io"
    wider = [
        rbac.Rule((group,), ("clusterroles",), ("bind",)),  # any ClusterRole
        rbac.Rule((group,), ("clusterroles",), ("bind",), ("cluster-admin",)),
        rbac.Rule((group,), ("clusterroles",), ("escalate",), ("opbroker:opbroker:namespace-writer",)),
        rbac.Rule((group,), ("rolebindings",), ("patch", "delete")),  # every RoleBinding
        rbac.Rule((group,), ("rolebindings",), ("create", "delete"), ("opbroker:opbroker:namespace-writer",)),
        rbac.Rule((group,), ("roles",), ("create",)),
        rbac.Rule(("",), ("serviceaccounts",), ("delete",)),  # every account
        rbac.Rule(("",), ("serviceaccounts",), ("impersonate",)),
        rbac.Rule(("",), ("secrets",), ("create",)),
    ]
    for rule in wider:
        assert rbac.writes_beyond_own([rule], onboarding=True) == [rule], rule
