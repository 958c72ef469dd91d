"""The rights a plan account needs, computed from the objects its plans render (``opbroker grant plan-account``).

A plan writes with its account's rights (``opbroker.controller.osb.identities``): every kind its templates render needs
the verbs the controller uses on it — ``get`` (drift, ownership stamps), ``create``/``patch`` (server-side apply),
``update`` (a singleton's users, guarded by resourceVersion), ``delete`` (deprovision, objects no longer rendered),
``list``/``watch`` (the sources cache answers only what the account could read itself) — i.e.
:data:`opbroker.api.rbac.OWNER_VERBS`. Where they are granted follows the platform's model
(:func:`opbroker.api.rbac.plan_account_manifests`): namespaced kinds in the account's ClusterRole, bound per
namespace (the control plane's and each onboarded one); cluster-scoped kinds (a ClusterRole a plan renders) in
its second ClusterRole, bound cluster-wide — no RoleBinding can grant them.

RBAC lets an account grant only what it holds (its escalation check), so a rendered Role or ClusterRole adds the
rules it grants (a ClusterRole's cluster-wide, a Role's per namespace), and a rendered RoleBinding or
ClusterRoleBinding adds ``bind`` on the role it names, by name. Pure: which kind is which resource, and whether it
is namespaced, comes from a resolver (:data:`WELL_KNOWN` offline, the API server's discovery with a cluster).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from opbroker.api import rbac
from opbroker.api.policyrules import Rule
from opbroker.api.rbac import OWNER_VERBS

RBAC_GROUP = "rbac.authorization.k8s.io"

#: (group, kind) → (resource, namespaced) of the kinds plans commonly render; any other kind is asked of the
#: API server when there is one, else guessed (:func:`guess`) and said so.
WELL_KNOWN: Mapping[tuple[str, str], tuple[str, bool]] = {
    ("", "Secret"): ("secrets", True),
    ("", "ConfigMap"): ("configmaps", True),
    ("", "Service"): ("services", True),
    ("", "ServiceAccount"): ("serviceaccounts", True),
    ("", "PersistentVolumeClaim"): ("persistentvolumeclaims", True),
    ("", "Pod"): ("pods", True),
    ("", "Namespace"): ("namespaces", False),
    ("", "PersistentVolume"): ("persistentvolumes", False),
    ("apps", "Deployment"): ("deployments", True),
    ("apps", "StatefulSet"): ("statefulsets", True),
    ("apps", "DaemonSet"): ("daemonsets", True),
    ("batch", "Job"): ("jobs", True),
    ("batch", "CronJob"): ("cronjobs", True),
    ("policy", "PodDisruptionBudget"): ("poddisruptionbudgets", True),
    ("networking.k8s.io", "NetworkPolicy"): ("networkpolicies", True),
    ("networking.k8s.io", "Ingress"): ("ingresses", True),
    (RBAC_GROUP, "Role"): ("roles", True),
    (RBAC_GROUP, "RoleBinding"): ("rolebindings", True),
    (RBAC_GROUP, "ClusterRole"): ("clusterroles", False),
    (RBAC_GROUP, "ClusterRoleBinding"): ("clusterrolebindings", False),
    ("storage.k8s.io", "StorageClass"): ("storageclasses", False),
    ("cert-manager.io", "Certificate"): ("certificates", True),
    ("cert-manager.io", "Issuer"): ("issuers", True),
    ("cert-manager.io", "ClusterIssuer"): ("clusterissuers", False),
}

#: (apiVersion, kind) → (resource, namespaced), or None when the resolver does not know the kind.
Resolver = Callable[[str, str], tuple[str, bool] | None]


def group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0] if "/" in api_version else ""


def well_known(api_version: str, kind: str) -> tuple[str, bool] | None:
    return WELL_KNOWN.get((group_of(api_version), kind))


def guess(kind: str) -> str:
    """The resource name Kubernetes' own convention gives a kind (lower case, plural): a guess, said as one."""
    lower = kind.lower()
    if lower.endswith(("s", "x", "ch", "sh")):
        return lower + "es"
    if lower.endswith("y") and lower[-2:-1] not in "aeiou":
        return lower[:-1] + "ies"
    return lower + "s"


@dataclass(frozen=True)
class PlanRights:
    """What an account needs: ``namespaced`` rules (bound where the account writes), ``cluster`` rules (bound
    cluster-wide), and ``guesses`` — kinds whose resource name or scope was guessed, for the user to check."""

    namespaced: tuple[Rule, ...]
    cluster: tuple[Rule, ...]
    guesses: tuple[str, ...] = ()


def merged(rules: Iterable[Rule]) -> tuple[Rule, ...]:
    """``rules`` with those of the same groups, resource and names joined (verbs united, in a stable order): one
    rule per resource, sorted, so the same plans give the same role."""
    joined: dict[tuple[tuple[str, ...], str, tuple[str, ...]], set[str]] = {}
    for rule in rules:
        for resource in rule.resources:
            key = (tuple(sorted(rule.api_groups)), resource, tuple(sorted(rule.resource_names)))
            joined.setdefault(key, set()).update(rule.verbs)
    order = {verb: index for index, verb in enumerate((*OWNER_VERBS, "bind", "escalate"))}
    return tuple(
        Rule(groups, (resource,), tuple(sorted(verbs, key=lambda v: (order.get(v, len(order)), v))), names)
        for (groups, resource, names), verbs in sorted(joined.items())
    )


def _granted(manifest: Mapping[str, Any]) -> list[Rule]:
    return [Rule.from_args(rule) for rule in manifest.get("rules") or [] if isinstance(rule, Mapping)]


def rights(objects: Iterable[Mapping[str, Any]], resolve: Resolver) -> PlanRights:
    """The rights to write ``objects`` (rendered manifests) as the controller does, and what they grant."""
    namespaced: list[Rule] = []
    cluster: list[Rule] = []
    guesses: list[str] = []
    for manifest in objects:
        api_version, kind = str(manifest.get("apiVersion") or ""), str(manifest.get("kind") or "")
        if not kind:
            continue
        group = group_of(api_version)
        found = resolve(api_version, kind)
        if found is None:
            found = (guess(kind), True)
            guesses.append(f"{api_version} {kind}: resource {found[0]!r}, namespaced (guessed)")
        resource, is_namespaced = found
        (namespaced if is_namespaced else cluster).append(Rule((group,), (resource,), OWNER_VERBS))
        if group == RBAC_GROUP and kind == "ClusterRole":
            cluster += _granted(manifest)
        elif group == RBAC_GROUP and kind == "Role":
            namespaced += _granted(manifest)
        elif group == RBAC_GROUP and kind in ("RoleBinding", "ClusterRoleBinding"):
            ref = manifest.get("roleRef") or {}
            role_kind, role_name = ref.get("kind"), ref.get("name")
            if role_kind in ("Role", "ClusterRole") and role_name:
                bind = Rule(
                    (RBAC_GROUP,), ("roles" if role_kind == "Role" else "clusterroles",), ("bind",), (role_name,)
                )
                (cluster if role_kind == "ClusterRole" else namespaced).append(bind)
    return PlanRights(merged(namespaced), merged(cluster), tuple(dict.fromkeys(guesses)))


def beyond(rules: Iterable[Rule], base: Iterable[Rule]) -> tuple[Rule, ...]:
    """``rules`` less what ``base`` grants already (same groups, resource and names, every verb): what the plan
    account's ClusterRole holds for every plan (Secrets, ConfigMaps) need not be repeated."""
    held = {(g, r, n): set(v) for g, r, n, v in _keyed(base)}
    return tuple(
        rule
        for rule in merged(rules)
        if not all(
            set(rule.verbs)
            <= held.get((tuple(sorted(rule.api_groups)), res, tuple(sorted(rule.resource_names))), set())
            for res in rule.resources
        )
    )


def _keyed(rules: Iterable[Rule]) -> Iterable[tuple[tuple[str, ...], str, tuple[str, ...], tuple[str, ...]]]:
    for rule in merged(rules):
        yield tuple(sorted(rule.api_groups)), rule.resources[0], tuple(sorted(rule.resource_names)), rule.verbs


def account_manifests(
    namespace: str, account: str, needed: PlanRights, *, held: Iterable[Rule] = (), held_cluster: Iterable[Rule] = ()
) -> list[dict[str, Any]]:
    """The plan account's objects (:func:`opbroker.api.rbac.plan_account_manifests`) granting ``needed`` beside
    ``held``/``held_cluster`` (the rules its two ClusterRoles hold already, kept when applying to a cluster);
    Secrets and ConfigMaps, which every plan account holds, are not repeated."""
    namespaced = beyond((*needed.namespaced, *held), rbac.plan_account_rules())
    return rbac.plan_account_manifests(
        namespace,
        rbac.plan_account_rules([rule.to_manifest() for rule in namespaced]),
        account,
        cluster_rules=merged((*needed.cluster, *held_cluster)),
    )
