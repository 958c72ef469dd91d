"""The ControlPlane under Pulumi's mocks: every child (type, name, parent), the CRDs from the resource model,
every RBAC rule of controller and broker (and that none is ``*`` on ``*``), the Deployments (replicas,
commands, probes, zone spreading, hardening), the broker Service, credentials, disruption budgets and the
optional autoscaler — and that custom resources created after it wait for its CRDs.
"""

from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest
from kubernetes import client

from opbroker.api.crd import all_crds
from opbroker.components import ControlPlane, InvalidArgsError, SFPlan, rbac, testing
from opbroker.components.testing import Registration
from opbroker.controller.app import Controller
from opbroker.controller.claims.workloads import SUPPORTED_KINDS
from opbroker.controller.runtime import apiready, health
from opbroker.controller.settings import ControllerSettings

K8S = "kubernetes:"
CRD = "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
STATEFUL_SET = "kubernetes:apps/v1:StatefulSet"
CLUSTER_ROLE = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole"
CLUSTER_ROLE_BINDING = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding"
ROLE = "kubernetes:rbac.authorization.k8s.io/v1:Role"
ROLE_BINDING = "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding"
SECRET = "kubernetes:core/v1:Secret"
SERVICE = "kubernetes:core/v1:Service"
HPA = "kubernetes:autoscaling/v2:HorizontalPodAutoscaler"
WEBHOOK_CONFIGURATION = "kubernetes:admissionregistration.k8s.io/v1:ValidatingWebhookConfiguration"

OWNER = ["get", "list", "watch", "create", "update", "patch", "delete"]
STATUS = ["get", "update", "patch"]
READ = ["get", "list", "watch"]


def deploy(
    args: dict[str, Any] | None = None, late: Any = None, name: str = "opbroker"
) -> tuple[testing.RecordingMocks, dict[str, Any]]:
    """Deploy a ControlPlane under mocks; ``late`` adds args built inside the program (Outputs need its loop)."""
    seen: dict[str, Any] = {}

    def program() -> Any:
        given = {"image": "registry.example/opbroker:1.2.3", **(args or {})}
        if late is not None:
            late(given)
        cp = ControlPlane(name, given)
        outputs = [cp.namespace, cp.crd_names, cp.broker_url, cp.broker_username, cp.broker_credentials_secret]
        return pulumi.Output.all(*outputs, cp.broker_password).apply(lambda values: seen.update(values=values))

    with testing.mocked() as mocks:
        pulumi.runtime.test(program)()
    return mocks, seen


@pytest.fixture(scope="module")
def default() -> tuple[testing.RecordingMocks, dict[str, Any]]:
    return deploy()


def inputs(mocks: testing.RecordingMocks, type_: str, name: str) -> dict[str, Any]:
    return mocks.one(type_, name).plain_inputs()


def test_every_child_is_registered_once_under_the_component(default: Any) -> None:
    mocks, _ = default
    component = mocks.one("opbroker:index:ControlPlane", "opbroker")
    children = sorted((r.type.removeprefix(K8S), r.name) for r in mocks.children_of(component.urn))
    crds = sorted(
        ("apiextensions.k8s.io/v1:CustomResourceDefinition", f"opbroker-{c['metadata']['name']}") for c in all_crds()
    )
    assert children == sorted(
        [
            ("core/v1:Namespace", "opbroker-namespace"),
            *crds,
            *(
                (f"admissionregistration.k8s.io/v1:{kind}", f"opbroker-{role}-policy{suffix}")
                for role in ("facts", "admin-requests")
                for kind, suffix in (
                    ("ValidatingAdmissionPolicy", ""),
                    ("ValidatingAdmissionPolicyBinding", "-binding"),
                )
            ),
            ("core/v1:ServiceAccount", "opbroker-controller"),
            ("core/v1:ServiceAccount", "opbroker-broker"),
            ("rbac.authorization.k8s.io/v1:ClusterRole", "opbroker-controller"),
            ("rbac.authorization.k8s.io/v1:ClusterRoleBinding", "opbroker-controller"),
            ("core/v1:ServiceAccount", "opbroker-plans"),
            ("rbac.authorization.k8s.io/v1:ClusterRole", "opbroker-plans"),
            ("rbac.authorization.k8s.io/v1:RoleBinding", "opbroker-plans"),
            ("rbac.authorization.k8s.io/v1:ClusterRole", "opbroker-namespace-writer-cluster-role"),
            ("rbac.authorization.k8s.io/v1:ClusterRole", "opbroker-broker"),
            ("rbac.authorization.k8s.io/v1:ClusterRoleBinding", "opbroker-broker"),
            ("rbac.authorization.k8s.io/v1:Role", "opbroker-controller-leader-election"),
            ("rbac.authorization.k8s.io/v1:RoleBinding", "opbroker-controller-leader-election"),
            ("rbac.authorization.k8s.io/v1:Role", "opbroker-controller-registries"),
            ("rbac.authorization.k8s.io/v1:RoleBinding", "opbroker-controller-registries"),
            ("rbac.authorization.k8s.io/v1:Role", "opbroker-controller-webhook"),
            ("rbac.authorization.k8s.io/v1:RoleBinding", "opbroker-controller-webhook"),
            ("core/v1:Service", "opbroker-controller-webhook"),
            ("admissionregistration.k8s.io/v1:ValidatingWebhookConfiguration", "opbroker-webhook"),
            ("rbac.authorization.k8s.io/v1:Role", "opbroker-broker"),
            ("rbac.authorization.k8s.io/v1:RoleBinding", "opbroker-broker"),
            ("random:index/randomPassword:RandomPassword", "opbroker-broker-password"),
            ("core/v1:Secret", "opbroker-broker-credentials"),
            ("apps/v1:Deployment", "opbroker-controller"),
            ("apps/v1:Deployment", "opbroker-broker"),
            ("core/v1:Service", "opbroker-broker"),
            ("policy/v1:PodDisruptionBudget", "opbroker-controller"),
            ("policy/v1:PodDisruptionBudget", "opbroker-broker"),
        ]
    )
    assert [r.type for r in mocks.registrations if r.parent != component.urn] == ["opbroker:index:ControlPlane"]


def test_the_crds_are_the_models_crds(default: Any) -> None:
    mocks, _ = default
    registered = mocks.of_type(CRD)
    assert len(registered) == 12
    expected = {f"opbroker-{c['metadata']['name']}": c for c in all_crds()}
    assert {r.name for r in registered} == set(expected)
    for registration in registered:
        crd = expected[registration.name]
        plain = registration.plain_inputs()
        assert plain == {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", **crd}


def test_outputs(default: Any) -> None:
    _, seen = default
    namespace, crd_names, url, username, secret_name, password = seen["values"]
    assert namespace == "opbroker"
    assert crd_names == [c["metadata"]["name"] for c in all_crds()]
    assert url == "http://opbroker-broker.opbroker.svc:8080"
    assert (username, secret_name) == ("opbroker", "opbroker-broker-credentials")
    assert password == testing.FAKE_PASSWORD


def test_controller_cluster_role_enumerates_every_rule(default: Any) -> None:
    mocks, _ = default
    role = inputs(mocks, CLUSTER_ROLE, "opbroker-controller")
    assert role["metadata"]["name"] == "opbroker:opbroker:controller"
    assert "namespace" not in role["metadata"]
    osb = ["sfservices", "sfplans", "sfserviceinstances", "sfservicebindings"]
    primaza = ["registeredservices", "serviceclaims", "servicecatalogs"]
    svcat = ["brokers", "serviceclasses", "instances", "bindings"]
    assert role["rules"] == [
        {"apiGroups": ["osb.servicefabrik.io"], "resources": osb, "verbs": OWNER},
        {"apiGroups": ["osb.servicefabrik.io"], "resources": [f"{p}/status" for p in osb], "verbs": STATUS},
        {"apiGroups": ["osb.servicefabrik.io"], "resources": [f"{p}/finalizers" for p in osb], "verbs": ["update"]},
        {"apiGroups": ["resource.servicefabrik.io"], "resources": ["sfclusters"], "verbs": OWNER},
        {"apiGroups": ["resource.servicefabrik.io"], "resources": ["sfclusters/status"], "verbs": STATUS},
        {"apiGroups": ["resource.servicefabrik.io"], "resources": ["sfclusters/finalizers"], "verbs": ["update"]},
        {"apiGroups": ["primaza.io"], "resources": primaza, "verbs": OWNER},
        {"apiGroups": ["primaza.io"], "resources": [f"{p}/status" for p in primaza], "verbs": STATUS},
        {"apiGroups": ["primaza.io"], "resources": [f"{p}/finalizers" for p in primaza], "verbs": ["update"]},
        {"apiGroups": ["servicecatalog.k8s.io"], "resources": svcat, "verbs": OWNER},
        {"apiGroups": ["servicecatalog.k8s.io"], "resources": [f"{p}/status" for p in svcat], "verbs": STATUS},
        {"apiGroups": ["servicecatalog.k8s.io"], "resources": [f"{p}/finalizers" for p in svcat], "verbs": ["update"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
        {
            "apiGroups": [""],
            "resources": ["serviceaccounts"],
            "verbs": ["impersonate"],
            "resourceNames": ["opbroker", "opbroker-plans"],
        },
        {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["validatingwebhookconfigurations"],
            "verbs": ["get", "patch"],
            "resourceNames": ["opbroker-servicecatalog-opbroker"],
        },
        {"apiGroups": [""], "resources": ["secrets", "configmaps"], "verbs": READ},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": READ},
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": READ},
        {"apiGroups": ["apps"], "resources": ["deployments", "statefulsets", "daemonsets"], "verbs": READ},
    ]


def test_no_cluster_role_writes_beyond_opbroker_own() -> None:
    """Issue 24's RBAC check: no ClusterRole of the control plane but the plan account's grants a write verb
    outside opbroker's own groups, Leases, Events, impersonation and access reviews; with operator rules the
    controller gets only their read verbs (its watch cache), the plan account the rules themselves."""
    rule = {"api_groups": ["acid.zalan.do"], "resources": ["postgresqls"], "verbs": OWNER}
    mocks, _ = deploy({"controller": {"operator_rules": [rule]}})
    for name in ("opbroker-controller", "opbroker-broker"):
        rules = [rbac.Rule.from_args(r) for r in inputs(mocks, CLUSTER_ROLE, name)["rules"]]
        assert rbac.writes_beyond_own(rules) == [], name
    controller_rules = inputs(mocks, CLUSTER_ROLE, "opbroker-controller")["rules"]
    assert allowed(controller_rules, "acid.zalan.do", "postgresqls") == set(READ)
    plans = inputs(mocks, CLUSTER_ROLE, "opbroker-plans")["rules"]
    assert allowed(plans, "acid.zalan.do", "postgresqls") == set(OWNER)
    assert allowed(plans, "", "secrets") == set(OWNER)
    binding = inputs(mocks, ROLE_BINDING, "opbroker-plans")
    assert binding["metadata"]["namespace"] == "opbroker"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "opbroker-plans", "namespace": "opbroker"}]
    assert "opbroker-plans" not in {r.name for r in mocks.of_type(CLUSTER_ROLE_BINDING)}, "bound per namespace"


def test_onboarded_namespaces_bind_their_account_and_the_plan_account_there_only() -> None:
    """Issue 42: the plan account writes where it is bound — the control plane's namespace and each of
    ``tenant_namespaces`` (RoleBindings to its ClusterRole) — and each onboarded namespace's ``opbroker`` account
    gets what opbroker writes there for no plan; cluster-wide only the cluster-scoped kinds declared."""
    scoped = {"api_groups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": OWNER}
    mocks, _ = deploy({"tenant_namespaces": ["team-a", "team-b"], "controller": {"cluster_operator_rules": [scoped]}})
    plan_bindings = [
        r.plain_inputs()
        for r in mocks.of_type(ROLE_BINDING)
        if r.plain_inputs()["roleRef"]["name"] == "opbroker:opbroker:opbroker-plans"
    ]
    assert sorted(b["metadata"]["namespace"] for b in plan_bindings) == ["opbroker", "team-a", "team-b"]
    for binding in plan_bindings:
        assert binding["roleRef"]["kind"] == "ClusterRole"
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "opbroker-plans", "namespace": "opbroker"}]
    writer = inputs(mocks, CLUSTER_ROLE, "opbroker-namespace-writer-cluster-role")
    assert [rbac.Rule.from_args(r) for r in writer["rules"]] == rbac.tenant_write_rules()
    for namespace in ("team-a", "team-b"):
        account = inputs(mocks, "kubernetes:core/v1:ServiceAccount", f"opbroker-tenant-{namespace}-account")
        assert account["metadata"]["namespace"] == namespace and account["metadata"]["name"] == "opbroker"
        binding = inputs(mocks, ROLE_BINDING, f"opbroker-tenant-{namespace}-writer-binding")
        assert binding["roleRef"]["name"] == writer["metadata"]["name"]
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "opbroker", "namespace": namespace}]
        # Onboarded by the component of its own, whose children keep the URNs they had as the ControlPlane's.
        onboarding = mocks.one("opbroker:index:NamespaceOnboarding", f"opbroker-tenant-{namespace}")
        assert onboarding.parent == mocks.one("opbroker:index:ControlPlane", "opbroker").urn
        children = mocks.children_of(onboarding.urn)
        assert sorted(c.name for c in children) == [
            f"opbroker-tenant-{namespace}-{key}" for key in ("account", "plans-binding", "writer-binding")
        ]
        assert all(f'parentUrn: "{onboarding.parent}"' in c.aliases[0] for c in children)
    cluster_wide = inputs(mocks, CLUSTER_ROLE_BINDING, "opbroker-plans-cluster")
    assert cluster_wide["subjects"] == [{"kind": "ServiceAccount", "name": "opbroker-plans", "namespace": "opbroker"}]
    role = inputs(mocks, CLUSTER_ROLE, "opbroker-plans-cluster")
    assert role["metadata"]["name"] == cluster_wide["roleRef"]["name"] == "opbroker:opbroker:opbroker-plans:cluster"
    assert role["rules"] == [
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": OWNER}
    ]
    plans = inputs(mocks, CLUSTER_ROLE, "opbroker-plans")["rules"]
    assert allowed(plans, "rbac.authorization.k8s.io", "clusterroles") == set()
    controller = inputs(mocks, CLUSTER_ROLE, "opbroker-controller")["rules"]
    assert allowed(controller, "rbac.authorization.k8s.io", "clusterroles") == set(READ)


def test_the_controller_impersonates_the_declared_plan_accounts_by_name_only() -> None:
    mocks, _ = deploy({"controller": {"plan_accounts": ["postgres-plans", "opbroker-plans"]}})
    rules = inputs(mocks, CLUSTER_ROLE, "opbroker-controller")["rules"]
    (impersonation,) = [r for r in rules if "impersonate" in r["verbs"]]
    assert impersonation == {
        "apiGroups": [""],
        "resources": ["serviceaccounts"],
        "verbs": ["impersonate"],
        "resourceNames": ["opbroker", "opbroker-plans", "postgres-plans"],
    }
    single = inputs(deploy({"controller": {"single_tenant": True}})[0], CLUSTER_ROLE, "opbroker-controller")["rules"]
    assert not [r for r in single if "impersonate" in r["verbs"]], "a single-tenant controller impersonates no one"


def test_the_rbac_check_finds_writes_beyond_opbroker_own() -> None:
    """The check itself can fail: the single-tenant controller role, and a role writing Secrets, are caught."""
    assert rbac.writes_beyond_own(rbac.controller_cluster_rules(single_tenant=True))
    assert rbac.writes_beyond_own([rbac.Rule(("",), ("secrets",), ("create",))])
    assert rbac.writes_beyond_own([rbac.Rule(("",), ("serviceaccounts",), ("create",))])
    # Impersonating every ServiceAccount is cluster-admin in effect; by name it is what the controller needs.
    assert rbac.writes_beyond_own([rbac.Rule(("",), ("serviceaccounts",), ("impersonate",))])
    assert rbac.writes_beyond_own([rbac.Rule(("",), ("serviceaccounts",), ("impersonate",), ("opbroker",))]) == []
    webhook = rbac.Rule(("admissionregistration.k8s.io",), ("validatingwebhookconfigurations",), ("patch",), ("x",))
    assert rbac.writes_beyond_own([webhook]) == []
    assert rbac.writes_beyond_own([rbac.Rule(("coordination.k8s.io",), ("leases",), ("create",))]) == []


def allowed(rules: list[dict[str, Any]], group: str, resource: str) -> set[str]:
    """The verbs a list of PolicyRules grants on one resource (no wildcards in ours)."""
    return {
        verb
        for rule in rules
        if group in rule["apiGroups"] and resource in rule["resources"] and not rule.get("resourceNames")
        for verb in rule["verbs"]
    }


def test_the_controller_may_do_what_its_code_does(default: Any) -> None:
    """Cross-check against the controller itself: every resource its watches name (read from the
    controller), and the calls of the claims subsystem and the scheduler."""
    mocks, _ = default
    rules = inputs(mocks, CLUSTER_ROLE, "opbroker-controller")["rules"]
    controller = Controller(client.ApiClient(), ControllerSettings(multicluster=True))
    watched = apiready.wanted_of(controller.all_watches())
    assert len(watched) >= 12
    for resource in watched:
        assert {"list", "watch"} <= allowed(rules, resource.group, resource.name), resource
    # Claims read health-check Jobs, binding Secrets and workloads; they write them as the namespace's account.
    assert allowed(rules, "batch", "jobs") == set(READ)
    assert allowed(rules, "", "secrets") == set(READ)
    for api_version, kind in SUPPORTED_KINDS:
        group = api_version.split("/")[0]
        assert allowed(rules, group, kind.lower() + "s") == set(READ), kind
    assert allowed(rules, "", "serviceaccounts") == set(), "impersonation only by name"
    (impersonation,) = [r for r in rules if r["resources"] == ["serviceaccounts"]]
    assert impersonation["resourceNames"] == sorted(
        {ControllerSettings().default_plan_service_account, ControllerSettings().namespace_service_account}
    )
    # Capacity-aware scheduling; Events. No CRD reads: kopf, which observed them, is gone (issue 45).
    assert "list" in allowed(rules, "", "pods") and "list" in allowed(rules, "", "nodes")
    assert "create" in allowed(rules, "", "events")
    assert allowed(rules, "apiextensions.k8s.io", "customresourcedefinitions") == set()


def test_controller_leader_election_role_is_namespaced_to_leases(default: Any) -> None:
    mocks, _ = default
    role = inputs(mocks, ROLE, "opbroker-controller-leader-election")
    assert role["metadata"]["namespace"] == "opbroker"
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "update"],
            "resourceNames": ["opbroker-controller"],
        },
        # Every shard's Lease, read only: back from shards, it acts once they are free (issue 46).
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get"],
            "resourceNames": [f"opbroker-controller-shard-{i}" for i in range(rbac.MAX_SHARDS)],
        },
        # The admin API's requests (issue 29): read there, answered there.
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "patch"]},
    ]


def test_controller_keeps_registries_in_its_namespace_with_its_own_role(default: Any) -> None:
    """Issue 29: registries live in the control-plane namespace, written with the controller's own rights."""
    mocks, _ = default
    role = inputs(mocks, ROLE, "opbroker-controller-registries")
    assert role["metadata"]["namespace"] == "opbroker"
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        }
    ]
    binding = inputs(mocks, ROLE_BINDING, "opbroker-controller-registries")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "opbroker-controller", "namespace": "opbroker"}]


BROKER_CATALOG_RULES = [
    {"apiGroups": ["osb.servicefabrik.io"], "resources": ["sfservices", "sfplans"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "update", "patch"]},
]
BROKER_REQUEST_RULES = [
    {
        "apiGroups": ["osb.servicefabrik.io"],
        "resources": ["sfserviceinstances", "sfservicebindings"],
        "verbs": ["create", "get", "list", "watch", "patch", "delete"],
    },
    {
        "apiGroups": ["osb.servicefabrik.io"],
        "resources": ["sfserviceinstances/status", "sfservicebindings/status"],
        "verbs": ["get", "patch"],
    },
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
]


def test_broker_reads_the_catalog_in_its_namespace_and_records_requests_in_any(default: Any) -> None:
    """By default an instance is recorded in its request's ``context.namespace`` (the OSB Kubernetes profile),
    so the broker's request rights are cluster-wide; the catalog and its own Secret stay namespaced. Found on a
    real node: under RBAC the broker was refused every provision with a context namespace."""
    mocks, _ = default
    role = inputs(mocks, ROLE, "opbroker-broker")
    assert role["metadata"] == {
        "name": "opbroker-broker",
        "namespace": "opbroker",
        "labels": {
            "app.kubernetes.io/name": "opbroker",
            "app.kubernetes.io/component": "broker",
            "app.kubernetes.io/part-of": "opbroker",
            "app.kubernetes.io/managed-by": "pulumi",
        },
    }
    assert role["rules"] == BROKER_CATALOG_RULES
    cluster_role = inputs(mocks, CLUSTER_ROLE, "opbroker-broker")
    assert cluster_role["metadata"]["name"] == "opbroker:opbroker:broker"
    assert cluster_role["rules"] == BROKER_REQUEST_RULES
    binding = inputs(mocks, CLUSTER_ROLE_BINDING, "opbroker-broker")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "opbroker:opbroker:broker",
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "opbroker-broker", "namespace": "opbroker"}]
    broker = inputs(mocks, DEPLOYMENT, "opbroker-broker")
    assert "--no-context-namespaces" not in broker["spec"]["template"]["spec"]["containers"][0]["command"]


def test_broker_without_context_namespaces_has_rights_in_its_namespace_only() -> None:
    mocks, _ = deploy({"broker": {"context_namespaces": False}})
    role = inputs(mocks, ROLE, "opbroker-broker")
    assert role["rules"] == BROKER_CATALOG_RULES + BROKER_REQUEST_RULES
    assert sorted(r.name for r in mocks.of_type(CLUSTER_ROLE)) == [
        "opbroker-controller",
        "opbroker-namespace-writer-cluster-role",
        "opbroker-plans",
    ]
    assert sorted(r.name for r in mocks.of_type(CLUSTER_ROLE_BINDING)) == ["opbroker-controller"]
    broker = inputs(mocks, DEPLOYMENT, "opbroker-broker")
    assert broker["spec"]["template"]["spec"]["containers"][0]["command"][-1] == "--no-context-namespaces"


def test_broker_allowed_namespaces_become_flags_and_a_selector_may_read_namespaces() -> None:
    """Issue 24 B: the broker honours a request's ``context.namespace`` only in the namespaces the platform
    allows; the component passes the list and the selector, and lets the broker read Namespaces' labels."""
    mocks, _ = deploy({"broker": {"allowed_namespaces": ["team-a", "team-b"], "allowed_namespace_selector": "t=1"}})
    command = inputs(mocks, DEPLOYMENT, "opbroker-broker")["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[-6:] == [
        "--allowed-namespace",
        "team-a",
        "--allowed-namespace",
        "team-b",
        "--allowed-namespace-selector",
        "t=1",
    ]
    namespaces = {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]}
    assert inputs(mocks, CLUSTER_ROLE, "opbroker-broker")["rules"] == [*BROKER_REQUEST_RULES, namespaces]

    namespaced, _ = deploy({"broker": {"context_namespaces": False, "allowed_namespace_selector": "t=1"}})
    assert inputs(namespaced, CLUSTER_ROLE, "opbroker-broker")["rules"] == [namespaces]
    assert inputs(namespaced, ROLE, "opbroker-broker")["rules"] == BROKER_CATALOG_RULES + BROKER_REQUEST_RULES


def test_no_rule_anywhere_grants_everything(default: Any) -> None:
    mocks, _ = default
    rules = [rule for t in (CLUSTER_ROLE, ROLE) for r in mocks.of_type(t) for rule in r.plain_inputs()["rules"]]
    # No CRD reads since kopf went (issue 45); two for the admin API's requests (issue 29), four of the namespace
    # writer, one reading the shards' Leases (issue 46)
    assert len(rules) == 42
    for rule in rules:
        assert not rbac.grants_everything(rule)
        assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule["apiGroups"]


def test_bindings_tie_each_role_to_its_service_account(default: Any) -> None:
    mocks, _ = default
    cluster_binding = inputs(mocks, CLUSTER_ROLE_BINDING, "opbroker-controller")
    assert cluster_binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "opbroker:opbroker:controller",
    }
    assert cluster_binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "opbroker-controller", "namespace": "opbroker"}
    ]
    for name, account in (
        ("opbroker-controller-leader-election", "opbroker-controller"),
        ("opbroker-broker", "opbroker-broker"),
    ):
        binding = inputs(mocks, ROLE_BINDING, name)
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": binding["metadata"]["name"],
        }
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": "opbroker"}]


def pod(mocks: testing.RecordingMocks, name: str) -> dict[str, Any]:
    return inputs(mocks, DEPLOYMENT, name)["spec"]["template"]["spec"]


@pytest.mark.parametrize(
    ("name", "component", "command"),
    [
        (
            "opbroker-controller",
            "controller",
            [
                "opbroker",
                "controller",
                "run",
                "--namespace",
                "opbroker",
                "--metrics-port",
                "9090",
                "--webhook-port",
                "9443",
                "--webhook-service",
                "opbroker-controller-webhook",
                "--webhook-configuration",
                "opbroker-servicecatalog-opbroker",
                "--webhook-secret",
                "opbroker-webhook-tls",
            ],
        ),
        (
            "opbroker-broker",
            "broker",
            [
                *("opbroker", "broker", "serve", "--host", "0.0.0.0", "--port", "8080", "--namespace", "opbroker"),
                *("--metrics-port", "9090"),
            ],
        ),
    ],
)
def test_deployments_run_hardened_spread_replicas(default: Any, name: str, component: str, command: list[str]) -> None:
    mocks, _ = default
    deployment = inputs(mocks, DEPLOYMENT, name)
    selector = {"app.kubernetes.io/name": "opbroker", "app.kubernetes.io/component": component}
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["selector"] == {"matchLabels": selector}
    assert deployment["spec"]["template"]["metadata"]["labels"].items() >= selector.items()
    spec = pod(mocks, name)
    assert spec["serviceAccountName"] == f"opbroker-{component}"
    assert spec["topologySpreadConstraints"] == [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": selector},
        },
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": selector},
        },
    ]
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    (container,) = spec["containers"]
    assert container["name"] == component
    assert container["image"] == "registry.example/opbroker:1.2.3"
    assert container["command"] == command
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in container["env"]


def test_the_broker_is_probed_on_healthz_and_readyz(default: Any) -> None:
    mocks, _ = default
    (container,) = pod(mocks, "opbroker-broker")["containers"]
    assert container["ports"] == [
        {"name": "http", "containerPort": 8080, "protocol": "TCP"},
        {"name": "metrics", "containerPort": 9090, "protocol": "TCP"},
    ]
    assert container["livenessProbe"] == {
        "httpGet": {"path": "/healthz", "port": "http"},
        "initialDelaySeconds": 10,
        "periodSeconds": 10,
        "timeoutSeconds": 2,
        "failureThreshold": 3,
    }
    assert container["readinessProbe"] == {
        "httpGet": {"path": "/readyz", "port": "http"},
        "periodSeconds": 5,
        "timeoutSeconds": 2,
        "failureThreshold": 3,
    }


def test_the_controller_is_probed_on_its_health_endpoints(default: Any) -> None:
    mocks, _ = default
    (container,) = pod(mocks, "opbroker-controller")["containers"]
    assert container["ports"] == [
        {"name": "metrics", "containerPort": 9090, "protocol": "TCP"},
        {"name": "webhook", "containerPort": 9443, "protocol": "TCP"},
    ]
    assert container["livenessProbe"] == {
        "httpGet": {"path": "/healthz", "port": "metrics"},
        "initialDelaySeconds": 10,
        "periodSeconds": 10,
        "timeoutSeconds": 2,
        "failureThreshold": 3,
    }
    assert container["readinessProbe"] == {
        "httpGet": {"path": "/readyz", "port": "metrics"},
        "periodSeconds": 5,
        "timeoutSeconds": 2,
        "failureThreshold": 3,
    }
    # The process serves exactly these paths on the port its command names.
    assert container["command"][5:7] == ["--metrics-port", "9090"]
    assert {"/healthz", "/readyz"} <= set(health.PATHS)


def test_the_brokers_metrics_are_on_a_port_its_service_does_not_expose(default: Any) -> None:
    """Issue 25: ``/metrics`` on the OSB port needed no credentials; OSB clients (and anyone reaching the
    Service) could read it. The broker serves it on 9090, which only a pod scrape reaches."""
    mocks, _ = default
    (container,) = pod(mocks, "opbroker-broker")["containers"]
    flags = container["command"]
    assert flags[flags.index("--metrics-port") + 1] == "9090"
    service = inputs(mocks, SERVICE, "opbroker-broker")
    assert [port["targetPort"] for port in service["spec"]["ports"]] == ["http"]
    assert {"name": "metrics", "containerPort": 9090, "protocol": "TCP"} in container["ports"]


def test_deployments_wait_for_crds_and_their_permissions(default: Any) -> None:
    mocks, _ = default
    crd_urns = {r.urn for r in mocks.of_type(CRD)}
    controller = mocks.one(DEPLOYMENT, "opbroker-controller")
    assert crd_urns <= set(controller.dependencies)
    assert mocks.one(CLUSTER_ROLE_BINDING, "opbroker-controller").urn in controller.dependencies
    assert mocks.one(ROLE_BINDING, "opbroker-controller-leader-election").urn in controller.dependencies
    broker = mocks.one(DEPLOYMENT, "opbroker-broker")
    assert crd_urns <= set(broker.dependencies)
    assert mocks.one(ROLE_BINDING, "opbroker-broker").urn in broker.dependencies
    assert mocks.one(SECRET, "opbroker-broker-credentials").urn in broker.dependencies


def test_broker_credentials_are_a_secret_the_broker_reads(default: Any) -> None:
    mocks, _ = default
    secret = mocks.one(SECRET, "opbroker-broker-credentials")
    assert testing.is_secret(secret.inputs["stringData"])
    assert secret.plain_inputs()["type"] == "kubernetes.io/basic-auth"
    assert secret.plain_inputs()["stringData"] == {"username": "opbroker", "password": testing.FAKE_PASSWORD}
    assert inputs(mocks, "random:index/randomPassword:RandomPassword", "opbroker-broker-password") == {
        "length": 32,
        "special": False,
    }
    env = {e["name"]: e for e in pod(mocks, "opbroker-broker")["containers"][0]["env"]}
    for variable, key in (("OPBROKER_BROKER_USERNAME", "username"), ("OPBROKER_BROKER_PASSWORD", "password")):
        assert env[variable]["valueFrom"] == {"secretKeyRef": {"name": "opbroker-broker-credentials", "key": key}}


def test_broker_service_and_disruption_budgets(default: Any) -> None:
    mocks, _ = default
    service = inputs(mocks, SERVICE, "opbroker-broker")
    assert service["spec"] == {
        "type": "ClusterIP",
        "selector": {"app.kubernetes.io/name": "opbroker", "app.kubernetes.io/component": "broker"},
        "ports": [{"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"}],
    }
    for component in ("controller", "broker"):
        pdb = inputs(mocks, "kubernetes:policy/v1:PodDisruptionBudget", f"opbroker-{component}")
        assert pdb["spec"] == {
            "maxUnavailable": 1,
            "selector": {
                "matchLabels": {"app.kubernetes.io/name": "opbroker", "app.kubernetes.io/component": component}
            },
        }
    assert mocks.of_type(HPA) == []


def test_settings_are_configurable() -> None:
    operator_rule = {"api_groups": ["acid.zalan.do"], "resources": ["postgresqls"], "verbs": ["get", "create"]}
    mocks, seen = deploy(
        {
            "namespace": "platform",
            "create_namespace": False,
            "zone_spread": "DoNotSchedule",
            "image_pull_secrets": ["regcred"],
            "controller": {
                "replicas": 3,
                "image": "registry.example/controller:9",
                "resources": {"requests": {"cpu": "1"}},
                "operator_rules": [operator_rule],
                "workers": 16,
                "namespace_workers": 3,
                "namespace_operations": 20,
                "namespace_cache_mib": 0,
                "error_threshold": 5,
                "max_operation_seconds": 900,
                "resync_seconds": 300,
                "multicluster": True,
                "scheduler": "least-utilized",
                "template_allow_networks": ["10.96.0.0/12"],
                "template_proxy": "http://egress.proxy:3128",
            },
            "broker": {
                "username": "cf",
                "service_type": "LoadBalancer",
                "autoscaling": {"min_replicas": 3, "max_replicas": 9, "target_cpu_utilization": 60},
            },
        },
        late=lambda args: args["broker"].update(password=pulumi.Output.secret("given-password")),
    )
    assert mocks.of_type("kubernetes:core/v1:Namespace") == []
    assert mocks.of_type("random:index/randomPassword:RandomPassword") == []
    controller = inputs(mocks, DEPLOYMENT, "opbroker-controller")
    assert controller["spec"]["replicas"] == 3
    container = controller["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.example/controller:9"
    assert container["resources"] == {"requests": {"cpu": "1"}}
    assert container["command"][:5] == ["opbroker", "controller", "run", "--namespace", "platform"]
    assert container["command"][7:] == [
        "--workers", "16", "--namespace-workers", "3", "--namespace-operations", "20", "--namespace-cache-mib", "0",
        "--error-threshold", "5", "--max-operation-seconds", "900", "--resync-seconds", "300", "--multicluster",
        "--scheduler", "least-utilized", "--template-allow-network", "10.96.0.0/12",
        "--template-proxy", "http://egress.proxy:3128", "--webhook-port", "9443",
        "--webhook-service", "opbroker-controller-webhook",
        "--webhook-configuration", "opbroker-servicecatalog-platform", "--webhook-secret", "opbroker-webhook-tls",
    ]  # fmt: skip
    assert controller["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    zone = controller["spec"]["template"]["spec"]["topologySpreadConstraints"][0]
    assert zone["whenUnsatisfiable"] == "DoNotSchedule"
    rules = inputs(mocks, CLUSTER_ROLE, "opbroker-controller")["rules"]
    assert rules[-1] == {"apiGroups": ["acid.zalan.do"], "resources": ["postgresqls"], "verbs": ["get"]}
    plan_rules = inputs(mocks, CLUSTER_ROLE, "opbroker-plans")["rules"]
    assert plan_rules[-1] == {"apiGroups": ["acid.zalan.do"], "resources": ["postgresqls"], "verbs": ["get", "create"]}
    assert inputs(mocks, CLUSTER_ROLE, "opbroker-controller")["metadata"]["name"] == "opbroker:platform:controller"
    broker = inputs(mocks, DEPLOYMENT, "opbroker-broker")
    assert "replicas" not in broker["spec"]  # the autoscaler owns the count
    hpa = inputs(mocks, HPA, "opbroker-broker")
    assert hpa["spec"] == {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "opbroker-broker"},
        "minReplicas": 3,
        "maxReplicas": 9,
        "metrics": [
            {
                "type": "Resource",
                "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}},
            }
        ],
    }
    assert inputs(mocks, SERVICE, "opbroker-broker")["spec"]["type"] == "LoadBalancer"
    secret = inputs(mocks, SECRET, "opbroker-broker-credentials")
    assert secret["stringData"] == {"username": "cf", "password": "given-password"}
    namespace, _, url, username, _, password = seen["values"]
    assert (namespace, url, username, password) == (
        "platform",
        "http://opbroker-broker.platform.svc:8080",
        "cf",
        "given-password",
    )


def test_crds_are_retained_when_they_leave_the_stack_unless_told_otherwise(default: Any) -> None:
    """Deleting a CRD deletes every object of its kind: ``pulumi destroy`` must not take every customer's
    instances with it by default."""
    mocks, _ = default
    crds = mocks.of_type(CRD)
    assert crds and all(crd.retain_on_delete for crd in crds)
    others = [r for r in mocks.registrations if r.type != CRD]
    assert not any(r.retain_on_delete for r in others)  # the rest goes with the stack
    deleting, _ = deploy({"retain_crds": False})
    assert deleting.of_type(CRD) and not any(crd.retain_on_delete for crd in deleting.of_type(CRD))


def test_without_crds_nothing_waits_on_them() -> None:
    mocks, seen = deploy({"install_crds": False})
    assert mocks.of_type(CRD) == []
    assert seen["values"][1] == []


def test_custom_resources_created_after_the_control_plane_wait_for_its_crds() -> None:
    plan = {
        "id": "p",
        "name": "p",
        "description": "p",
        "service_id": "s",
        "templates": [{"action": "provision", "content": "x"}],
    }

    def program() -> Any:
        cp = ControlPlane("cp", {"image": "i"})
        via_component = SFPlan("a", plan, pulumi.ResourceOptions(depends_on=[cp]))
        via_crds = SFPlan("b", {**plan, "id": "q"}, pulumi.ResourceOptions(depends_on=cp.crds))
        return pulumi.Output.all(via_component.plan_id, via_crds.plan_id)

    with testing.mocked() as mocks:
        pulumi.runtime.test(program)()
    crd_urns = {r.urn for r in mocks.of_type(CRD)}
    for name in ("a", "b"):
        assert crd_urns <= set(mocks.one("kubernetes:osb.servicefabrik.io/v1alpha1:SFPlan", name).dependencies)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"image": ""}, "image"),
        ({"controller": {"replicas": 0}}, "controller.replicas"),
        ({"controller": {"workers": 0}}, "controller.workers"),
        ({"controller": {"shards": 0}}, "controller.shards"),
        ({"controller": {"shards": 65}}, "controller.shards"),
        ({"controller": {"shards": "three"}}, "controller.shards"),
        ({"controller": {"scheduler": "round-robin"}}, "controller"),
        ({"controller": {"shard_takeover": True}}, "controller"),
        ({"controller": {"multicluster": True, "scheduler": "random"}}, "controller.scheduler"),
        ({"controller": {"template_allow_networks": ["10.0.0.0/33"]}}, "controller.template_allow_networks"),
        ({"controller": {"template_proxy": "socks5://p:1080"}}, "controller.template_proxy"),
        ({"broker": {"service_type": "Ingress"}}, "broker.service_type"),
        ({"broker": {"allowed_namespaces": ["Team_A"]}}, "broker.allowed_namespaces[0]"),
        ({"broker": {"allowed_namespace_selector": "tenant in (a"}}, "broker.allowed_namespace_selector"),
        ({"broker": {"autoscaling": {"min_replicas": 5, "max_replicas": 2}}}, "broker.autoscaling"),
        ({"namespace": "Not_A_Namespace"}, "namespace"),
        ({"zone_spread": "Sometimes"}, "zone_spread"),
        ({"retain_crds": "maybe"}, "retain_crds"),
        (
            {"controller": {"operator_rules": [{"api_groups": ["*"], "resources": ["*"], "verbs": ["*"]}]}},
            "controller.operator_rules[0]",
        ),
        (
            {"controller": {"operator_rules": [{"api_groups": [""], "resources": [], "verbs": ["get"]}]}},
            "controller.operator_rules[0].resources",
        ),
        (
            {"controller": {"cluster_operator_rules": [{"api_groups": [""], "resources": ["*"], "verbs": ["*"]}]}},
            "controller.cluster_operator_rules[0]",
        ),
        ({"controller": {"plan_accounts": ["Not An Account"]}}, "controller.plan_accounts[0]"),
        ({"tenant_namespaces": ["Team_A"]}, "tenant_namespaces[0]"),
        ({"tenant_namespace_selector": "a in (b"}, "tenant_namespace_selector"),
    ],
)
def test_bad_settings_name_their_field_and_register_nothing(args: dict[str, Any], field: str) -> None:
    with testing.mocked() as mocks, pytest.raises(InvalidArgsError) as raised:
        pulumi.runtime.test(lambda: ControlPlane("cp", {"image": "i", **args}))()
    assert mocks.registrations == []
    assert field in [path for path, _ in raised.value.problems]


def test_registration_helper_shape() -> None:
    # The recorded registrations are plain data the tests (and users) can compare.
    registration = Registration("t", "n", {"a": 1.0}, "", True, (), "urn")
    assert registration.plain_inputs() == {"a": 1}


def test_deployments_can_be_created_without_awaiting_them() -> None:
    """A cluster whose pods cannot start (no node yet) must not make ``pulumi up`` sit out a provider timeout."""
    awaited, _ = deploy({})
    skipped, _ = deploy({"await_deployments": False})
    for name in ("opbroker-controller", "opbroker-broker"):
        assert "annotations" not in inputs(awaited, DEPLOYMENT, name)["metadata"]
        assert inputs(skipped, DEPLOYMENT, name)["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}
    # The broker Service too: pulumi-kubernetes awaits it until its selector finds ready pods (found by the
    # real engine: `up` sat at "Finding Pods to direct traffic to" on a cluster without nodes).
    service = "kubernetes:core/v1:Service"
    assert "annotations" not in inputs(awaited, service, "opbroker-broker")["metadata"]
    assert inputs(skipped, service, "opbroker-broker")["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}


def test_the_webhook_is_registered_with_the_rights_it_needs(default: Any) -> None:
    """Issue 25 (6): by default the ControlPlane registers the Service Catalog admission webhook — a Service to the
    controller's webhook port, the ValidatingWebhookConfiguration pointing at it (without a CA: the controller fills
    it in) — and grants the controller what that takes and no more: get and patch on that one configuration, by
    name; create Secrets in its namespace (the shared CA) and get/update only its own."""
    mocks, _ = default
    service = inputs(mocks, SERVICE, "opbroker-controller-webhook")
    assert service["metadata"]["namespace"] == "opbroker"
    assert service["spec"] == {
        "type": "ClusterIP",
        "selector": {"app.kubernetes.io/name": "opbroker", "app.kubernetes.io/component": "controller"},
        "ports": [{"name": "webhook", "port": 443, "targetPort": "webhook", "protocol": "TCP"}],
    }
    registration = inputs(mocks, WEBHOOK_CONFIGURATION, "opbroker-webhook")
    assert registration["metadata"]["name"] == "opbroker-servicecatalog-opbroker"
    (hook,) = registration["webhooks"]
    assert hook["clientConfig"] == {
        "service": {
            "namespace": "opbroker",
            "name": "opbroker-controller-webhook",
            "port": 443,
            "path": "/validate/instances",
        }
    }
    assert hook["name"] == "instances.servicecatalog.k8s.io"
    assert (hook["failurePolicy"], hook["timeoutSeconds"], hook["sideEffects"]) == ("Ignore", 5, "None")
    assert hook["rules"] == [
        {
            "apiGroups": ["servicecatalog.k8s.io"],
            "apiVersions": ["v1alpha1"],
            "resources": ["instances"],
            "operations": ["DELETE"],
            "scope": "Namespaced",
        }
    ]
    # The controller serves on the Service's target port and knows the names it must use.
    (container,) = pod(mocks, "opbroker-controller")["containers"]
    assert {"name": "webhook", "containerPort": 9443, "protocol": "TCP"} in container["ports"]
    command = container["command"]
    flags = dict(zip(command[7::2], command[8::2], strict=True))
    assert flags == {
        "--webhook-port": "9443",
        "--webhook-service": "opbroker-controller-webhook",
        "--webhook-configuration": "opbroker-servicecatalog-opbroker",
        "--webhook-secret": "opbroker-webhook-tls",
    }
    # Its rights: on the configuration, get and patch by name only; nothing else of admissionregistration.
    cluster_rules = inputs(mocks, CLUSTER_ROLE, "opbroker-controller")["rules"]
    admission = [r for r in cluster_rules if "admissionregistration.k8s.io" in r["apiGroups"]]
    assert admission == [
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["validatingwebhookconfigurations"],
            "verbs": ["get", "patch"],
            "resourceNames": ["opbroker-servicecatalog-opbroker"],
        }
    ]
    assert rbac.writes_beyond_own([rbac.Rule.from_args(r) for r in cluster_rules]) == []
    role = inputs(mocks, ROLE, "opbroker-controller-webhook")
    assert role["metadata"]["namespace"] == "opbroker"
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "verbs": ["get", "update"],
            "resourceNames": ["opbroker-webhook-tls"],
        },
    ]
    binding = inputs(mocks, ROLE_BINDING, "opbroker-controller-webhook")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "opbroker-controller-webhook",
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "opbroker-controller", "namespace": "opbroker"}]
    # The controller starts once it may register: the configuration and its grants come first.
    controller = mocks.one(DEPLOYMENT, "opbroker-controller")
    for type_, name in ((WEBHOOK_CONFIGURATION, "opbroker-webhook"), (ROLE_BINDING, "opbroker-controller-webhook")):
        assert mocks.one(type_, name).urn in controller.dependencies


def test_the_webhook_can_be_left_out() -> None:
    """``controller.webhook: false``: no Service, configuration, Role or rule, and no webhook flag."""
    mocks, _ = deploy({"controller": {"webhook": False}})
    assert mocks.of_type(WEBHOOK_CONFIGURATION) == []
    assert [r.name for r in mocks.of_type(SERVICE)] == ["opbroker-broker"]
    assert "opbroker-controller-webhook" not in [r.name for r in mocks.of_type(ROLE)]
    rules = inputs(mocks, CLUSTER_ROLE, "opbroker-controller")["rules"]
    assert not [r for r in rules if "admissionregistration.k8s.io" in r["apiGroups"]]
    (container,) = pod(mocks, "opbroker-controller")["containers"]
    assert not [flag for flag in container["command"] if flag.startswith("--webhook")]


def test_a_tenant_namespace_selector_has_the_controller_onboard_as_the_onboarder() -> None:
    """``tenant_namespace_selector``: the controller runs with ``--onboard-namespace-selector``, reads Namespaces
    and impersonates ``opbroker-onboarder``, whose ClusterRole is exactly an onboarding's (bound cluster-wide:
    the namespaces are not known at deploy time)."""
    mocks, _ = deploy({"tenant_namespace_selector": "opbroker.io/tenant=yes"})
    command = inputs(mocks, DEPLOYMENT, "opbroker-controller")["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--onboard-namespace-selector") + 1] == "opbroker.io/tenant=yes"
    controller = inputs(mocks, CLUSTER_ROLE, "opbroker-controller")["rules"]
    assert allowed(controller, "", "namespaces") == set(READ)
    assert rbac.writes_beyond_own([rbac.Rule.from_args(r) for r in controller]) == []
    onboarder = [rbac.Rule.from_args(r) for r in inputs(mocks, CLUSTER_ROLE, "opbroker-onboarder")["rules"]]
    assert onboarder == rbac.onboarder_rules("opbroker")
    binding = inputs(mocks, CLUSTER_ROLE_BINDING, "opbroker-onboarder")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "opbroker-onboarder", "namespace": "opbroker"}]
    assert (
        inputs(mocks, "kubernetes:core/v1:ServiceAccount", "opbroker-onboarder")["metadata"]["namespace"] == "opbroker"
    )
    plain, _ = deploy()
    assert not [r for r in plain.registrations if "onboarder" in r.name]
    assert (
        "--onboard-namespace-selector"
        not in (
            inputs(plain, DEPLOYMENT, "opbroker-controller")["spec"]["template"]["spec"]["containers"][0]["command"]
        )
    )


# -- shards (issue 46) -------------------------------------------------------------------------------------------


def test_shard_takeover_lets_every_standby_pod_campaign_for_any_shards_lease() -> None:
    """``controller.shard_takeover``: the StatefulSet's pods run ``--shard-takeover`` (a standby of one shard takes
    any shard's free Lease); the Role already renews every shard's Lease, so nothing else changes."""

    def program() -> Any:
        ControlPlane("opbroker", {"image": "i", "controller": {"shards": 2, "replicas": 2, "shard_takeover": True}})

    with testing.mocked() as mocks:
        pulumi.runtime.test(program)()
    workload = mocks.one(STATEFUL_SET, "opbroker-controller").plain_inputs()
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    assert "--shard-takeover" in container["command"] and workload["spec"]["replicas"] == 4
    role = inputs(mocks, ROLE, "opbroker-controller-leader-election")
    (renewing,) = [rule for rule in role["rules"] if "resourceNames" in rule and "update" in rule["verbs"]]
    assert renewing["resourceNames"] == ["opbroker-controller-shard-0", "opbroker-controller-shard-1"]


def test_shards_make_the_controller_a_statefulset_and_tell_the_broker_the_count() -> None:
    """``controller.shards: 3`` with 3 replicas per shard: one StatefulSet of 9 pods behind its headless Service,
    waiting for what the Deployment waited for; the controller and the broker told the count; the Role renewing
    exactly the three shards' Leases; ``cp.controller`` is the StatefulSet."""
    seen: dict[str, Any] = {}

    def program() -> Any:
        cp = ControlPlane(
            "opbroker", {"image": "registry.example/opbroker:1.2.3", "controller": {"shards": 3, "replicas": 3}}
        )
        seen["controller"] = cp.controller
        return cp.broker_url

    with testing.mocked() as mocks:
        pulumi.runtime.test(program)()
    assert isinstance(seen["controller"], k8s.apps.v1.StatefulSet)
    assert [r.name for r in mocks.of_type(DEPLOYMENT)] == ["opbroker-broker"]
    controller = mocks.one(STATEFUL_SET, "opbroker-controller")
    workload = controller.plain_inputs()
    assert workload["metadata"]["name"] == "opbroker-controller" and workload["metadata"]["namespace"] == "opbroker"
    assert workload["spec"]["replicas"] == 9
    assert workload["spec"]["podManagementPolicy"] == "Parallel"
    headless = inputs(mocks, SERVICE, "opbroker-controller")
    assert headless["metadata"]["name"] == workload["spec"]["serviceName"] == "opbroker-controller"
    assert headless["spec"] == {"clusterIP": "None", "selector": workload["spec"]["selector"]["matchLabels"]}
    assert mocks.one(SERVICE, "opbroker-controller").urn in controller.dependencies
    assert {r.urn for r in mocks.of_type(CRD)} <= set(controller.dependencies)
    assert mocks.one(ROLE_BINDING, "opbroker-controller-leader-election").urn in controller.dependencies
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    command = container["command"]
    assert command[command.index("--shards") :][:3] == ["--shards", "3", "--shard-from-hostname"]
    assert "--shard-takeover" not in command  # standbys wait for their own shard's Lease unless asked
    (broker,) = pod(mocks, "opbroker-broker")["containers"]
    assert broker["command"][broker["command"].index("--shards") :][:2] == ["--shards", "3"]
    role = inputs(mocks, ROLE, "opbroker-controller-leader-election")
    (renewing,) = [rule for rule in role["rules"] if "resourceNames" in rule and "update" in rule["verbs"]]
    assert renewing["resourceNames"] == [f"opbroker-controller-shard-{i}" for i in range(3)]
    (reading,) = [rule for rule in role["rules"] if "resourceNames" in rule and "update" not in rule["verbs"]]
    assert reading == {**reading, "verbs": ["get"], "resourceNames": ["opbroker-controller"]}  # waited for, not taken
    budget = inputs(mocks, "kubernetes:policy/v1:PodDisruptionBudget", "opbroker-controller")
    assert budget["spec"]["selector"] == workload["spec"]["selector"]


def test_one_shard_leaves_the_controller_a_deployment_and_the_broker_uncounted(default: Any) -> None:
    explicit, _ = deploy({"controller": {"shards": 1}})
    assert explicit.of_type(STATEFUL_SET) == []
    for name in ("opbroker-controller", "opbroker-broker"):
        assert inputs(explicit, DEPLOYMENT, name) == inputs(default[0], DEPLOYMENT, name)
        assert "--shards" not in pod(explicit, name)["containers"][0]["command"]
    assert sorted(r.name for r in explicit.of_type(SERVICE)) == sorted(r.name for r in default[0].of_type(SERVICE))


def test_a_sharded_controller_can_be_created_without_awaiting_it() -> None:
    skipped, _ = deploy({"await_deployments": False, "controller": {"shards": 2}})
    assert inputs(skipped, STATEFUL_SET, "opbroker-controller")["metadata"]["annotations"] == {
        "pulumi.com/skipAwait": "true"
    }
