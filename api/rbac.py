"""The least-privilege RBAC rules of the control plane, as plain data (no pulumi import).

Every rule is spelt out: which groups, which resources, which verbs — derived from the resource model so
a new kind gets its rules without anyone editing a list here. ``grants_everything`` is the one check the
component and the policy pack share: no rule may grant ``*`` verbs on ``*`` resources.
"""

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from opbroker.api import RESOURCE_KINDS, SFPlan, SFService, SFServiceBinding, SFServiceInstance
from opbroker.api.conventions import DEFAULT_PLAN_SERVICE_ACCOUNT, NAMESPACE_SERVICE_ACCOUNT
from opbroker.api.meta import KubeResource
from opbroker.api.policyrules import WILDCARD as WILDCARD  # re-exported: the rules' one vocabulary
from opbroker.api.policyrules import Rule as Rule
from opbroker.api.policyrules import grants_everything as grants_everything
from opbroker.api.policyrules import rule_problems as rule_problems
from opbroker.api.shards import MAX_SHARDS as MAX_SHARDS  # re-exported: the components bound by it
from opbroker.api.shards import Shards, lease_name

#: Verbs on a kind the controller owns: it reads, writes, finalizes and deletes them.
OWNER_VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")
#: Verbs on the ``/status`` subresource of a kind the controller owns.
STATUS_VERBS = ("get", "update", "patch")
#: ``/finalizers`` needs ``update`` so owner references with blockOwnerDeletion can point at the kind.
FINALIZER_VERBS = ("update",)
READ_VERBS = ("get", "list", "watch")
#: Workload kinds a claim may bind into (``opbroker.controller.claims.workloads.SUPPORTED_KINDS``).
WORKLOADS = ("deployments", "statefulsets", "daemonsets")
#: The Lease the controller replicas campaign for (the controller's default ``lease_name``).
LEADER_LEASE = "opbroker-controller"


def _owned(kinds: Iterable[type[KubeResource]]) -> list[Rule]:
    """Full ownership of the given kinds, one group at a time: the objects, their status, their finalizers."""
    by_group: dict[str, list[str]] = {}
    for kind in kinds:
        by_group.setdefault(kind.GROUP, []).append(kind.PLURAL)
    rules = []
    for group, plurals in by_group.items():
        rules.append(Rule((group,), tuple(plurals), OWNER_VERBS))
        rules.append(Rule((group,), tuple(f"{p}/status" for p in plurals), STATUS_VERBS))
        rules.append(Rule((group,), tuple(f"{p}/finalizers" for p in plurals), FINALIZER_VERBS))
    return rules


def impersonated_accounts(plan_accounts: Sequence[str] = ()) -> tuple[str, ...]:
    """The ServiceAccount names the controller may impersonate: the default plan account, every plan account
    the platform declared (``plan_accounts``: the names SFPlans' ``serviceAccountName`` may give) and each
    consumer namespace's ``opbroker`` account. Sorted and without repeats, so a rule built from them is stable."""
    return tuple(sorted({DEFAULT_PLAN_SERVICE_ACCOUNT, NAMESPACE_SERVICE_ACCOUNT, *plan_accounts}))


def impersonation_rule(plan_accounts: Sequence[str] = ()) -> Rule:
    """Impersonating ServiceAccounts by name (:func:`impersonated_accounts`). The controller sends only
    ``Impersonate-User: system:serviceaccount:<ns>:<name>``, which the API server authorises as ``impersonate``
    on ``serviceaccounts`` with that namespace and name (the account's groups follow from it, unchecked), so no
    rule for users or groups exists. The names hold in every namespace: a consumer namespace's own account named
    like a plan account can do only what that namespace's admin could grant it; plans act only as accounts of the
    trusted catalog namespaces (:mod:`opbroker.controller.osb.identities`)."""
    return Rule(("",), ("serviceaccounts",), ("impersonate",), impersonated_accounts(plan_accounts))


def controller_cluster_rules(
    operator_rules: Sequence[Mapping[str, Any]] = (),
    *,
    single_tenant: bool = False,
    webhook_configuration: str | None = None,
    cluster_operator_rules: Sequence[Mapping[str, Any]] = (),
    plan_accounts: Sequence[str] = (),
    onboards: bool = False,
) -> list[Rule]:
    """The controller's ClusterRole (issue 24): it writes only its own kinds, Events, and — for everything else
    — through identities the platform granted, which it impersonates; it reads what it watches.

    * every opbroker kind (objects, status, finalizers), the Service Catalog kinds included;
    * Events (create, patch) on state changes;
    * ``impersonate`` on the plan accounts and the namespaces' ``opbroker`` account, by name
      (:func:`impersonation_rule`; ``plan_accounts`` are the extra names plans may give): a plan's work runs as
      the plan's account, writes into a consumer's namespace for no plan as that namespace's account (Flux's
      model). Not in ``single_tenant``, which impersonates no one;
    * SubjectAccessReviews (create): a read answered from the watch cache is first checked for the account the
      plan acts as;
    * reads only: Secrets (registries, credentials, sources, claims' endpoint Secrets — one watch), ConfigMaps,
      namespaces, nodes and pods (capacity-aware scheduling), Jobs and workloads (claims), and the
      operator kinds the plans render (``operator_rules`` and ``cluster_operator_rules`` reduced to
      get/list/watch: the watch cache of ``sources``).

    ``single_tenant`` (the controller's ``--single-tenant``): the controller acts with its own rights, so it
    gets the write rights it no longer delegates: the plans' operator kinds, Secrets, ConfigMaps, Jobs and the
    claims' workload patches. Off by default.

    ``webhook_configuration``: the name of the admission webhook's ValidatingWebhookConfiguration, which the
    controller reads and patches (its ``caBundle``) — that one object only (:func:`webhook_cluster_rules`).

    ``onboards`` (``--onboard-namespace-selector``): it watches namespaces, and impersonates the onboarder
    (:data:`ONBOARDER_ACCOUNT`, :func:`onboarder_rules`) to onboard those whose labels match.
    """
    reads = [
        Rule(("",), ("secrets", "configmaps"), READ_VERBS),
        Rule(("",), ("nodes",), READ_VERBS),
        Rule(("",), ("namespaces",), READ_VERBS if onboards else ("get",)),
        Rule(("",), ("pods",), ("list",)),
        Rule(("batch",), ("jobs",), READ_VERBS),
        Rule(("apps",), WORKLOADS, READ_VERBS),
    ]
    operator = [Rule.from_args(rule) for rule in (*operator_rules, *cluster_operator_rules)]
    onboarder = [ONBOARDER_ACCOUNT] if onboards else []
    if single_tenant:  # impersonates no one, but the onboarder (it writes no RoleBinding itself either way)
        impersonation = [Rule(("",), ("serviceaccounts",), ("impersonate",), tuple(onboarder))] if onboards else []
    else:
        impersonation = [impersonation_rule([*plan_accounts, *onboarder])]
    if single_tenant:
        delegated = [*tenant_write_rules(), *operator]
    else:
        delegated = [
            Rule(r.api_groups, r.resources, tuple(v for v in r.verbs if v in READ_VERBS), r.resource_names)
            for r in operator
            if any(v in READ_VERBS for v in r.verbs)
        ]
    return [
        *_owned(RESOURCE_KINDS),
        Rule(("",), ("events",), ("create", "patch")),
        Rule(("events.k8s.io",), ("events",), ("create", "patch")),
        *impersonation,
        Rule(("authorization.k8s.io",), ("subjectaccessreviews",), ("create",)),
        *(webhook_cluster_rules(webhook_configuration) if webhook_configuration else []),
        *reads,
        *delegated,
    ]


def webhook_cluster_rules(configuration: str) -> list[Rule]:
    """The admission webhook's registration: read its ValidatingWebhookConfiguration and set its ``caBundle``
    (the ControlPlane creates it). Limited by name: the controller can change no other webhook of the cluster."""
    return [
        Rule(
            ("admissionregistration.k8s.io",), ("validatingwebhookconfigurations",), ("get", "patch"), (configuration,)
        )
    ]


def webhook_namespace_rules(secret: str) -> list[Rule]:
    """The admission webhook's Role in the control-plane namespace: the first replica creates the Secret with
    the CA and serving certificate, every replica reads it and may renew it. Creating cannot be limited to a
    name; reading and renewing can."""
    return [
        Rule(("",), ("secrets",), ("create",)),
        Rule(("",), ("secrets",), ("get", "update"), resource_names=(secret,)),
    ]


def tenant_write_rules() -> list[Rule]:
    """What opbroker writes into a consumer's namespace beside the plans' operator kinds: registries and
    credentials Secrets, ConfigMaps, claims' health-check Jobs and workload projections."""
    return [
        Rule(("",), ("secrets",), ("get", "list", "watch", "create", "update", "patch", "delete")),
        Rule(("",), ("configmaps",), ("get", "list", "watch", "create", "update", "patch", "delete")),
        Rule(("batch",), ("jobs",), ("get", "list", "watch", "create", "delete")),
        Rule(("apps",), WORKLOADS, ("get", "list", "watch", "patch")),
    ]


def plan_account_rules(operator_rules: Sequence[Mapping[str, Any]] = ()) -> list[Rule]:
    """The default plan account's ClusterRole (``opbroker-plans``), granted by RoleBindings — in the control-plane
    namespace and in each onboarded consumer namespace (:func:`onboarding_manifests`), nowhere else: the operator
    kinds its plans render (``operator_rules``), and the Secrets and ConfigMaps of instances and bindings
    (credentials). A plan confined to fewer namespaces gets its own account (``spec.serviceAccountName``)."""
    return [
        Rule(("",), ("secrets",), ("get", "list", "watch", "create", "update", "patch", "delete")),
        Rule(("",), ("configmaps",), ("get", "list", "watch", "create", "update", "patch", "delete")),
        *(Rule.from_args(rule) for rule in operator_rules),
    ]


def plan_role_name(control_plane: str, account: str = DEFAULT_PLAN_SERVICE_ACCOUNT) -> str:
    """The ClusterRole of a plan account of the control plane in ``control_plane`` (bound per namespace)."""
    return f"opbroker:{control_plane}:{account}"


def plan_cluster_role_name(control_plane: str, account: str = DEFAULT_PLAN_SERVICE_ACCOUNT) -> str:
    """The ClusterRole of a plan account's cluster-scoped kinds (bound cluster-wide: a RoleBinding cannot grant
    them)."""
    return f"{plan_role_name(control_plane, account)}:cluster"


def _binding(
    kind: str, name: str, role: str, account: str, account_namespace: str, namespace: str | None = None
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": metadata,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": account_namespace}],
    }


def _cluster_role(name: str, rules: Sequence[Rule]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [rule.to_manifest() for rule in rules],
    }


def plan_account_manifests(
    namespace: str,
    rules: Sequence[Rule],
    account: str = DEFAULT_PLAN_SERVICE_ACCOUNT,
    *,
    cluster_rules: Sequence[Rule] = (),
) -> list[dict[str, Any]]:
    """A plan account, as the platform grants it outside Pulumi (``opbroker dev``, the tests): the
    ServiceAccount in the control-plane ``namespace``, a ClusterRole with ``rules`` bound by a RoleBinding in that
    namespace only (each consumer namespace gets its own at onboarding, :func:`onboarding_manifests`), and —
    only when ``cluster_rules`` are given — a second ClusterRole with them and a ClusterRoleBinding. The platform
    declares which rules are cluster-wide: those of cluster-scoped kinds (a ClusterRole a plan renders), which
    no RoleBinding can grant, and what such an object itself grants (RBAC's escalation check)."""
    role = plan_role_name(namespace, account)
    manifests = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": namespace}},
        _cluster_role(role, rules),
        plan_binding(namespace, namespace, account),
    ]
    if cluster_rules:
        cluster_role = plan_cluster_role_name(namespace, account)
        manifests += [
            _cluster_role(cluster_role, cluster_rules),
            _binding("ClusterRoleBinding", cluster_role, cluster_role, account, namespace),
        ]
    return manifests


#: The ClusterRole a consumer namespace's ``opbroker`` account is bound to there (:func:`onboarding_manifests`).
NAMESPACE_WRITER = "opbroker-namespace-writer"


def namespace_writer_manifest(name: str = NAMESPACE_WRITER) -> dict[str, Any]:
    """The ClusterRole of :func:`tenant_write_rules`, bound in each onboarded namespace to its ``opbroker``
    account."""
    return _cluster_role(name, tenant_write_rules())


def plan_binding(namespace: str, control_plane: str, account: str = DEFAULT_PLAN_SERVICE_ACCOUNT) -> dict[str, Any]:
    """The RoleBinding that lets ``control_plane``'s plan ``account`` write in ``namespace``: its ClusterRole
    (:func:`plan_role_name`), bound there and nowhere else."""
    role = plan_role_name(control_plane, account)
    return _binding("RoleBinding", role, role, account, control_plane, namespace)


def onboarding_manifests(
    namespace: str,
    control_plane: str,
    plan_accounts: Sequence[str] = (DEFAULT_PLAN_SERVICE_ACCOUNT,),
    *,
    writer: str = NAMESPACE_WRITER,
) -> list[dict[str, Any]]:
    """What the platform grants in a new consumer namespace: its ``opbroker`` account (Flux's default service
    account, per tenant) bound to the ``writer`` ClusterRole (:func:`namespace_writer_manifest`), and each of
    the control plane's ``plan_accounts`` bound there (:func:`plan_binding`) — the only places a plan account
    writes are its control plane's namespace and the namespaces onboarded so."""
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": NAMESPACE_SERVICE_ACCOUNT, "namespace": namespace},
    }
    return [
        account,
        _binding("RoleBinding", writer, writer, NAMESPACE_SERVICE_ACCOUNT, namespace, namespace),
        *(plan_binding(namespace, control_plane, plan) for plan in plan_accounts),
    ]


#: The account the controller onboards namespaces as (``--onboard-namespace-selector``), impersonated by name: the
#: controller's own ClusterRole writes no ServiceAccount and no RoleBinding.
ONBOARDER_ACCOUNT = "opbroker-onboarder"


def namespace_writer_name(control_plane: str) -> str:
    """The ClusterRole the onboarded namespaces' ``opbroker`` accounts are bound to (one per control plane)."""
    return f"opbroker:{control_plane}:namespace-writer"


def onboarded_roles(
    control_plane: str, plan_accounts: Sequence[str] = (DEFAULT_PLAN_SERVICE_ACCOUNT,)
) -> tuple[str, ...]:
    """The ClusterRoles an onboarding binds (each RoleBinding is named after its role): the namespace writer and
    the plan accounts' roles."""
    return (namespace_writer_name(control_plane), *(plan_role_name(control_plane, a) for a in plan_accounts))


def onboarder_rules(control_plane: str, plan_accounts: Sequence[str] = (DEFAULT_PLAN_SERVICE_ACCOUNT,)) -> list[Rule]:
    """The onboarder's ClusterRole: create the ``opbroker`` account and the RoleBindings of an onboarding in any
    namespace (a create cannot be limited by name), read, change and delete only those by name, and ``bind`` only
    the onboarding's ClusterRoles — RBAC refuses a RoleBinding to any other role unless the creator holds all of
    its rights, which this account does not."""
    roles = onboarded_roles(control_plane, plan_accounts)
    return [
        Rule(("",), ("serviceaccounts",), ("create",)),
        Rule(("",), ("serviceaccounts",), ("get", "patch", "delete"), (NAMESPACE_SERVICE_ACCOUNT,)),
        Rule(("rbac.authorization.k8s.io",), ("rolebindings",), ("create",)),
        Rule(("rbac.authorization.k8s.io",), ("rolebindings",), ("get", "patch", "delete"), roles),
        Rule(("rbac.authorization.k8s.io",), ("clusterroles",), ("bind",), roles),
    ]


def _an_onboarding_write(rule: Rule) -> bool:
    """Whether ``rule`` is one of the onboarder's writes (:func:`onboarder_rules`): creating ServiceAccounts or
    RoleBindings; reading, patching, deleting them only by opbroker's names; binding only opbroker's ClusterRoles."""
    verbs, names = set(rule.verbs), rule.resource_names or ()
    by_name = verbs <= {"get", "patch", "delete"}
    ours = bool(names) and all(name.startswith("opbroker:") for name in names)
    if rule.api_groups == ("",) and rule.resources == ("serviceaccounts",):
        return (verbs == {"create"} and not names) or (by_name and names == (NAMESPACE_SERVICE_ACCOUNT,))
    if rule.api_groups == ("rbac.authorization.k8s.io",) and rule.resources == ("rolebindings",):
        return (verbs == {"create"} and not names) or (by_name and ours)
    if rule.api_groups == ("rbac.authorization.k8s.io",) and rule.resources == ("clusterroles",):
        return verbs == {"bind"} and ours
    return False


#: Where a ClusterRole may grant write verbs (issue 24's RBAC check): opbroker's own API groups and the
#: coordination, event, impersonation and access-review resources.
WRITE_VERBS = frozenset(
    {"create", "update", "patch", "delete", "deletecollection", "impersonate", "bind", "escalate", "*"}
)


def writes_beyond_own(rules: Sequence[Rule], *, onboarding: bool = False) -> list[Rule]:
    """The rules of a ClusterRole that grant a write verb outside opbroker's own groups, Leases, Events,
    impersonation of ServiceAccounts by name and access reviews (a write limited by ``resourceNames`` to
    opbroker's own webhook configuration aside). Impersonating every ServiceAccount (no ``resourceNames``) is
    cluster-admin in effect, and is caught. ``onboarding``: the role is the onboarder's, which may also write
    what an onboarding is (:func:`_an_onboarding_write`) and nothing beyond it."""
    own_groups = {kind.GROUP for kind in RESOURCE_KINDS}
    allowed = {
        ("coordination.k8s.io", "leases"),
        ("", "events"),
        ("events.k8s.io", "events"),
        ("", "serviceaccounts"),
        ("authorization.k8s.io", "subjectaccessreviews"),
    }
    wrong = []
    for rule in rules:
        if not WRITE_VERBS & set(rule.verbs):
            continue
        if onboarding and _an_onboarding_write(rule):
            continue
        for group in rule.api_groups:
            if group in own_groups:
                continue
            if (
                group == "admissionregistration.k8s.io"
                and rule.resource_names
                and set(rule.resources) <= {"validatingwebhookconfigurations"}
            ):
                continue
            if all((group, resource) in allowed for resource in rule.resources):
                if (
                    group == ""
                    and "serviceaccounts" in rule.resources
                    and (set(rule.verbs) != {"impersonate"} or not rule.resource_names)
                ):
                    wrong.append(rule)
                continue
            wrong.append(rule)
            break
    return wrong


def shard_leases(lease: str = LEADER_LEASE, shards: int = 1) -> tuple[str, ...]:
    """The Leases a controller of ``shards`` shards campaigns for: ``lease`` itself unsharded, else one per shard,
    ``<lease>-shard-<i>`` for i in 0..shards-1 (shard i's replicas compete for the i-th; none for ``lease``)."""
    if not Shards(shards).sharded:  # refused beyond its bounds (ValueError naming them)
        return (lease,)
    return tuple(lease_name(lease, index) for index in range(shards))


def controller_namespace_rules(lease: str = LEADER_LEASE, shards: int = 1) -> list[Rule]:
    """The controller's Role in the control-plane namespace: leader election through its Leases (creating cannot
    be limited to a name; reading and renewing can) — the one Lease, or with ``shards`` > 1 exactly the shards'
    (:func:`shard_leases`), so a replica left from the other layout (a Deployment's leader after sharding, a
    shard after going back to one) can no longer renew and steps down — and the admin API's requests,
    ConfigMaps named per plan. The other layout's Leases may be read (not renewed): a leader acts only once they are
    free (``opbroker.controller.running``: the old leaders have stopped acting) — sharded, the unsharded Lease;
    unsharded, every Lease a shard may have had (``Shards.other_layout_leases``)."""
    return [
        Rule(("coordination.k8s.io",), ("leases",), ("create",)),
        Rule(("coordination.k8s.io",), ("leases",), ("get", "update"), resource_names=shard_leases(lease, shards)),
        # The other layout's Leases, read (a leader acts once they are free: opbroker.controller.running).
        Rule(("coordination.k8s.io",), ("leases",), ("get",), resource_names=Shards(shards).other_layout_leases(lease)),
        # The admin API's requests (opbroker.api.adminrequests): read them, write their answers.
        Rule(("",), ("configmaps",), ("get", "list", "watch", "patch")),
    ]


def registry_rules() -> list[Rule]:
    """The controller's Role on the registries it keeps in the control-plane namespace (issue 29): written with
    its own rights, not a plan's (the plan's account needs nothing there), listed by the orphan sweep. Registries
    are named by their owner's uid, so no name limits it."""
    return [Rule(("",), ("secrets",), ("get", "list", "watch", "create", "update", "patch", "delete"))]


def broker_rules(*, request_rules: bool = True) -> list[Rule]:
    """The broker's Role in the control-plane namespace: read the catalog and its own auth Secret and, unless
    ``request_rules`` is False (they are cluster-wide then, see :func:`broker_cluster_rules`), record requests
    and read credentials Secrets there."""
    catalog = (SFService.PLURAL, SFPlan.PLURAL)
    group = SFService.GROUP
    rules = [
        Rule((group,), catalog, READ_VERBS),
        Rule(("",), ("secrets",), ("get",)),
        # The admin API's requests (opbroker.broker.admin): recorded here, answered by the controller.
        Rule(("",), ("configmaps",), ("get", "create", "update", "patch")),
    ]
    return rules + (broker_cluster_rules() if request_rules else [])


def broker_cluster_rules() -> list[Rule]:
    """What the broker needs wherever instances live: with ``context_namespaces`` (the Kubernetes profile:
    an instance goes to the namespace its request's context names) that is any namespace, so these go into a
    ClusterRole. Recording requests, watching them (the broker's namespace index), reading binding
    credentials Secrets."""
    requests = (SFServiceInstance.PLURAL, SFServiceBinding.PLURAL)
    group = SFService.GROUP
    return [
        Rule((group,), requests, ("create", "get", "list", "watch", "patch", "delete")),
        Rule((group,), tuple(f"{p}/status" for p in requests), ("get", "patch")),
        Rule(("",), ("secrets",), ("get",)),
    ]
