"""The least-privilege RBAC rules of the control plane, as plain data (no pulumi import).

Every rule is spelt out: which groups, which resources, which verbs — derived from the resource model so
a new kind gets its rules without anyone editing a list here. ``grants_everything`` is the one check the
component and the policy pack share: no rule may grant ``*`` verbs on ``*`` resources.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opbroker.api import RESOURCE_KINDS, SFPlan, SFService, SFServiceBinding, SFServiceInstance
from opbroker.api.meta import KubeResource

WILDCARD = "*"

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


@dataclass(frozen=True)
class Rule:
    """One PolicyRule of a Role or ClusterRole."""

    api_groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    resource_names: tuple[str, ...] = ()

    def to_manifest(self) -> dict[str, Any]:
        """The rule as the API server spells it (camelCase, no empty resourceNames)."""
        rule: dict[str, Any] = {
            "apiGroups": list(self.api_groups),
            "resources": list(self.resources),
            "verbs": list(self.verbs),
        }
        if self.resource_names:
            rule["resourceNames"] = list(self.resource_names)
        return rule

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> "Rule":
        """A rule from component args (snake_case) or a manifest (camelCase)."""

        def field(snake: str, camel: str) -> tuple[str, ...]:
            value = args.get(snake, args.get(camel)) or ()
            return tuple(str(v) for v in value)

        return cls(
            api_groups=field("api_groups", "apiGroups"),
            resources=field("resources", "resources"),
            verbs=field("verbs", "verbs"),
            resource_names=field("resource_names", "resourceNames"),
        )


def grants_everything(rule: Mapping[str, Any] | Rule) -> bool:
    """Whether a rule grants every verb on every resource (``*`` on ``*``), whatever its groups."""
    parsed = rule if isinstance(rule, Rule) else Rule.from_args(rule)
    return WILDCARD in parsed.verbs and WILDCARD in parsed.resources


def rule_problems(rules: Sequence[Mapping[str, Any]], path: str) -> list[tuple[str, str]]:
    """(field path, reason) for every extra rule that is empty or grants ``*`` on ``*``."""
    problems = []
    for index, raw in enumerate(rules):
        rule = Rule.from_args(raw)
        where = f"{path}[{index}]"
        if not rule.resources:
            problems.append((f"{where}.resources", "at least one resource is required"))
        if not rule.verbs:
            problems.append((f"{where}.verbs", "at least one verb is required"))
        if grants_everything(rule):
            problems.append((where, "grants '*' verbs on '*' resources; name the operator kinds and verbs instead"))
    return problems


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


def controller_cluster_rules(operator_rules: Sequence[Mapping[str, Any]] = ()) -> list[Rule]:
    """The controller's ClusterRole, rule by rule what ``opbroker.controller`` calls (every namespace):

    * every opbroker kind (objects, status, finalizers), the Service Catalog kinds (servicecatalog.k8s.io:
      brokers, serviceclasses, instances, bindings) included;
    * Secrets: instance and binding registries, bind credentials, claim binding and health-check Secrets
      (server-side apply), read back; kopf watches them cluster-wide for the claims (metadata only);
      claims delete a binding Secret whose type changed (immutable) or whose claim is gone, and the
      endpoint Secret of a withdrawn registration;
    * Events (core, create) on state changes;
    * namespaces (get): a teardown in a terminating namespace creates nothing there (issue 18);
    * nodes and pods: capacity-aware scheduling sums the allocatable of the nodes and the requests of the
      running pods of its own cluster (cluster "1");
    * Jobs: a RegisteredService's health check runs as a Job, read and replaced (kopf watches them);
    * Deployments, StatefulSets, DaemonSets: claims project binding Secrets into the selected workloads by
      server-side apply (``patch``), listing them per namespace (kopf watches them);
    * CRDs, read-only: kopf notices CRDs installed or re-installed while it runs;
    * ConfigMaps (no delete), as before, for plans that render them;
    * and the operator kinds the plans render (``operator_rules``, supplied by whoever writes the plans: the
      controller applies, reads, watches and deletes them, so ``get, list, watch, create, update, patch,
      delete``).
    """
    return [
        *_owned(RESOURCE_KINDS),
        Rule(("",), ("secrets",), ("get", "list", "watch", "create", "update", "patch", "delete")),
        Rule(("",), ("configmaps",), ("get", "list", "watch", "create", "update", "patch")),
        Rule(("",), ("events",), ("create", "patch")),
        Rule(("events.k8s.io",), ("events",), ("create", "patch")),
        Rule(("",), ("nodes",), READ_VERBS),
        Rule(("",), ("namespaces",), ("get",)),
        Rule(("",), ("pods",), ("list",)),
        Rule(("batch",), ("jobs",), ("get", "list", "watch", "create", "delete")),
        Rule(("apps",), WORKLOADS, ("get", "list", "watch", "patch")),
        Rule(("apiextensions.k8s.io",), ("customresourcedefinitions",), READ_VERBS),
        *(Rule.from_args(rule) for rule in operator_rules),
    ]


def controller_namespace_rules(lease: str = LEADER_LEASE) -> list[Rule]:
    """The controller's Role in the control-plane namespace: leader election through one Lease. Creating
    cannot be limited to a name; reading and renewing can."""
    return [
        Rule(("coordination.k8s.io",), ("leases",), ("create",)),
        Rule(("coordination.k8s.io",), ("leases",), ("get", "update"), resource_names=(lease,)),
    ]


def broker_rules(*, request_rules: bool = True) -> list[Rule]:
    """The broker's Role in the control-plane namespace: read the catalog and its own auth Secret and, unless
    ``request_rules`` is False (they are cluster-wide then, see :func:`broker_cluster_rules`), record requests
    and read credentials Secrets there."""
    catalog = (SFService.PLURAL, SFPlan.PLURAL)
    group = SFService.GROUP
    rules = [Rule((group,), catalog, READ_VERBS), Rule(("",), ("secrets",), ("get",))]
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
