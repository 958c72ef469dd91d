"""A plan account's rights, read from and granted in a cluster: the edge of ``opbroker grant plan-account`` and of
the sister preparation (``opbroker sister prepare``) around the pure :mod:`opbroker.api.planrights`.

Plans are rendered for a new instance and binding (:mod:`opbroker.rendering.samples`); kinds are resolved by the
API server's discovery (a CRD's plural and scope), the well-known table where it does not serve them (yet).
Granting adds to what the account's roles hold, never removes: other plans' rights stay.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pydantic import ValidationError

from opbroker.api import rbac
from opbroker.api.catalog import SFPlan
from opbroker.api.conventions import DEFAULT_PLAN_SERVICE_ACCOUNT
from opbroker.api.meta import ResourceRef
from opbroker.api.planrights import PlanRights, Resolver, account_manifests, rights, well_known
from opbroker.api.policyrules import Rule
from opbroker.controller.kinds import PLANS, SERVICES
from opbroker.controller.runtime.kube import Kube, ref_of
from opbroker.kubeclient.wire import JsonObject, objects_of, path_of
from opbroker.rendering import RenderError
from opbroker.rendering.samples import rendered_objects

#: A plan and the SFService it belongs to (None when unknown).
PlanAndService = tuple[SFPlan, JsonObject | None]


class NoPlans(RuntimeError):
    """Nothing to compute rights from, or a plan that does not render: the message says which."""


def acts_as(plan: SFPlan, account: str) -> bool:
    """Whether ``plan`` writes as ``account`` (its ``serviceAccountName``, else the default plan account)."""
    return (plan.spec.service_account_name or DEFAULT_PLAN_SERVICE_ACCOUNT) == account


def plans_in_cluster(
    kube: Kube, namespace: str, account: str, skipped: Callable[[str], None] = lambda _: None
) -> list[PlanAndService]:
    """The SFPlans of ``namespace`` acting as ``account``, with their SFServices; an invalid one is ``skipped``."""
    services = {str(path_of(s, "spec", "id")): s for s in kube.list_custom(SERVICES, namespace)}
    found: list[PlanAndService] = []
    for body in kube.list_custom(PLANS, namespace):
        try:
            plan = SFPlan.model_validate(body)
        except ValidationError:
            skipped(f"SFPlan {namespace}/{path_of(body, 'metadata', 'name')} is not valid; skipped")
            continue
        if acts_as(plan, account):
            found.append((plan, services.get(plan.spec.service_id)))
    return found


def discovering(kube: Kube) -> Resolver:
    """Kinds resolved by ``kube``'s discovery, the well-known table for a kind it does not serve."""

    def resolve(api_version: str, kind: str) -> tuple[str, bool] | None:
        try:
            return kube.plural_of(api_version, kind)
        except Exception:  # not served (a CRD not installed yet): the table, else a guess the caller reports
            return well_known(api_version, kind)

    return resolve


def rights_of(plans: Sequence[PlanAndService], namespace: str, parameters: JsonObject, resolve: Resolver) -> PlanRights:
    """What ``plans`` render for a new instance and binding in ``namespace``, as rights (:func:`rights`)."""
    objects: list[JsonObject] = []
    for plan, service in plans:
        try:
            objects += rendered_objects(plan, namespace=namespace, parameters=parameters, service=service)
        except RenderError as exc:
            raise NoPlans(f"plan {plan.metadata.name}: {exc}") from None
    return rights(objects, resolve)


def live_rules(kube: Kube, role: str) -> list[Rule]:
    """The rules the ClusterRole ``role`` holds now (none when it does not exist)."""
    live = kube.get(ResourceRef(api_version="rbac.authorization.k8s.io/v1", kind="ClusterRole", name=role))
    return [Rule.from_args(rule) for rule in objects_of((live or {}).get("rules"))]


def grant(kube: Kube, namespace: str, account: str, needed: PlanRights, *, field_manager: str) -> list[ResourceRef]:
    """Apply the account's objects granting ``needed`` beside what its roles hold; the refs applied."""
    held = live_rules(kube, rbac.plan_role_name(namespace, account))
    held_cluster = live_rules(kube, rbac.plan_cluster_role_name(namespace, account))
    applied = []
    for manifest in account_manifests(namespace, account, needed, held=held, held_cluster=held_cluster):
        kube.apply(manifest, field_manager=field_manager)
        applied.append(ref_of(manifest))
    return applied
