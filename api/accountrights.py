"""Every write an opbroker account may make outside opbroker's own kinds, as one table (issue 42).

docs/security.md prints :func:`markdown_table` ("What each account may write"), and a test asks the API server
(SubjectAccessReview, against the ControlPlane's RBAC applied) what each account may do and fails on any write
not listed here. A new right is added here first, with why; the docs follow from it.
"""

from dataclasses import dataclass

from opbroker.api.conventions import DEFAULT_PLAN_SERVICE_ACCOUNT, NAMESPACE_SERVICE_ACCOUNT

#: Where a right holds: every namespace (or cluster-scoped), the control-plane namespace, each onboarded one.
ANYWHERE = "cluster"
CONTROL_PLANE = "control-plane namespace"
ONBOARDED = "onboarded namespaces"
#: The resource of the rows that stand for the platform's declared rules (``controller.operator_rules``).
OPERATOR_KINDS = "(controller.operator_rules)"
CLUSTER_OPERATOR_KINDS = "(controller.cluster_operator_rules)"


@dataclass(frozen=True)
class Write:
    """One documented write: ``account`` may ``verbs`` ``group``/``resource`` ``where`` (by ``names`` only, when
    given), because ``why``."""

    account: str
    group: str
    resource: str
    verbs: tuple[str, ...]
    where: str
    why: str
    names: str = ""


CONTROLLER = "controller"
BROKER = "broker"
PLANS = DEFAULT_PLAN_SERVICE_ACCOUNT
NAMESPACE = NAMESPACE_SERVICE_ACCOUNT
CHANGE = ("create", "update", "patch", "delete")

WRITES: tuple[Write, ...] = (
    Write(CONTROLLER, "", "events", ("create", "patch"), ANYWHERE, "state changes, beside the object"),
    Write(CONTROLLER, "events.k8s.io", "events", ("create", "patch"), ANYWHERE, "the same, newer API"),
    Write(
        CONTROLLER,
        "",
        "serviceaccounts",
        ("impersonate",),
        ANYWHERE,
        "a plan acts as its account, a namespace write for no plan as that namespace's account",
        "opbroker-plans, opbroker, controller.plan_accounts",
    ),
    Write(CONTROLLER, "authorization.k8s.io", "subjectaccessreviews", ("create",), ANYWHERE, "cache reads checked"),
    Write(
        CONTROLLER,
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
        ("patch",),
        ANYWHERE,
        "its webhook's caBundle",
        "opbroker-servicecatalog-<namespace>",
    ),
    Write(CONTROLLER, "coordination.k8s.io", "leases", ("create", "update"), CONTROL_PLANE, "leader election"),
    Write(CONTROLLER, "", "secrets", CHANGE, CONTROL_PLANE, "registries; the webhook's CA"),
    Write(CONTROLLER, "", "configmaps", ("patch",), CONTROL_PLANE, "the admin API's answers"),
    Write(BROKER, "", "configmaps", ("create", "update", "patch"), CONTROL_PLANE, "the admin API's requests"),
    Write(PLANS, "", "secrets", CHANGE, f"{CONTROL_PLANE}, {ONBOARDED}", "instances' and bindings' credentials"),
    Write(PLANS, "", "configmaps", CHANGE, f"{CONTROL_PLANE}, {ONBOARDED}", "what templates render"),
    Write(PLANS, "", OPERATOR_KINDS, CHANGE, f"{CONTROL_PLANE}, {ONBOARDED}", "what templates render"),
    Write(PLANS, "", CLUSTER_OPERATOR_KINDS, CHANGE, ANYWHERE, "cluster-scoped kinds templates render"),
    Write(NAMESPACE, "", "secrets", CHANGE, ONBOARDED, "Service Catalog Bindings', claims' Secrets"),
    Write(NAMESPACE, "", "configmaps", CHANGE, ONBOARDED, "projections"),
    Write(NAMESPACE, "batch", "jobs", ("create", "delete"), ONBOARDED, "claims' health checks"),
    Write(NAMESPACE, "apps", "deployments", ("patch",), ONBOARDED, "claims' workload projections"),
    Write(NAMESPACE, "apps", "statefulsets", ("patch",), ONBOARDED, "claims' workload projections"),
    Write(NAMESPACE, "apps", "daemonsets", ("patch",), ONBOARDED, "claims' workload projections"),
)


def documented(account: str, group: str, resource: str, verb: str, where: str) -> bool:
    """Whether :data:`WRITES` lists ``verb`` on ``group``/``resource`` for ``account`` ``where`` (one of
    :data:`ANYWHERE`, :data:`CONTROL_PLANE`, :data:`ONBOARDED`, or any other namespace)."""
    for write in WRITES:
        if (write.account, write.group, write.resource) != (account, group, resource) or verb not in write.verbs:
            continue
        if write.where == ANYWHERE or where in write.where.split(", "):
            return True
    return False


def markdown_table() -> str:
    """The table docs/security.md shows."""
    rows = ["| account | writes | where | why |", "|---|---|---|---|"]
    for w in WRITES:
        kind = f"{w.group}/{w.resource}" if w.group else w.resource
        names = f" (only {w.names})" if w.names else ""
        rows.append(f"| `{w.account}` | {', '.join(w.verbs)} `{kind}`{names} | {w.where} | {w.why} |")
    return "\n".join(rows)
