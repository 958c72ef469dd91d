"""The Ready condition of SFService and SFPlan: whether the controller accepted the catalog entry.

Why: a catalog declared as code is rolled out with ``pulumi up``, and the components promise a Ready
condition their ``wait_for_ready`` (``pulumi.com/waitFor: condition=Ready``) waits on; ``kubectl get``
shows it too. Nothing else writes these objects' status, so the controller does, once per change:

* an SFService is Ready when it fits the resource model;
* an SFPlan is Ready when it fits the resource model and every template compiles (the same offline check
  ``pulumi preview`` and ``opbroker validate`` run); otherwise Ready=False, reason ``PlanInvalid``, with
  every finding in the message;
* an SFPlan being deleted while service instances use it is not Ready either: reason ``PlanInUse``, with how
  many (the controller's finalizer keeps it until they are deprovisioned, see ``catalog_entries``);
* two trusted SFPlans (or SFServices) declaring one id are both Ready=False, reason ``DuplicateId``, each
  naming the other(s): neither is served until one goes;
* an SFService or SFPlan outside the trusted namespaces is never in the catalog: Ready=False, reason
  ``UntrustedNamespace``, naming the namespaces catalog entries must live in, and a Warning event. The object
  is a tenant's, and so is its status: nothing reads this condition back, it is for whoever looks.

The status is written only when it would change (``observedGeneration`` and the condition), so the
controller's own write, coming back as a watch event, causes no further write.

Pure: the verdict and the patch are computed from the object and the check's findings.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from opbroker.controller.core.decisions import ready_conditions
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.views import EntryView
from opbroker.controller.runtime.objects import Manifest


@dataclass(frozen=True)
class Verdict:
    ready: bool
    reason: Reason
    message: str


def service_verdict(problem: str | None) -> Verdict:
    if problem:
        return Verdict(False, Reason.SERVICE_INVALID, f"the service does not fit the resource model: {problem}")
    return Verdict(True, Reason.ACCEPTED, "the service is in the catalog")


def plan_verdict(problem: str | None, template_errors: tuple[str, ...] = ()) -> Verdict:
    if problem:
        return Verdict(False, Reason.PLAN_INVALID, f"the plan does not fit the resource model: {problem}")
    if template_errors:
        return Verdict(False, Reason.PLAN_INVALID, "the plan's templates do not work: " + "; ".join(template_errors))
    return Verdict(True, Reason.ACCEPTED, "the plan is in the catalog and its templates compile")


def duplicate_verdict(kind: str, osb_id: str, others: tuple[str, ...]) -> Verdict:
    """A trusted ``kind`` ("plan" or "service") whose id ``others`` (``namespace/name``) declare too."""
    what = "SFPlan" if kind == "plan" else "SFService"
    return Verdict(
        False,
        Reason.DUPLICATE_ID,
        f"the {kind} id {osb_id!r} is also declared by {what} {', '.join(others)}: neither is served (the "
        f"broker's catalog leaves it out, instances of it fail) until only one {what} declares it",
    )


def untrusted_verdict(kind: str, namespace: str, trusted: tuple[str, ...]) -> Verdict:
    """An SFService or SFPlan in ``namespace``, which is not one of the ``trusted`` namespaces."""
    what = "SFPlan" if kind == "plan" else "SFService"
    return Verdict(
        False,
        Reason.UNTRUSTED_NAMESPACE,
        f"ignored: an {what} is read only from the trusted catalog namespaces ({', '.join(trusted)}), not from "
        f"{namespace!r}; it is not in the catalog and serves no instance. Apply it in {trusted[0]!r} (or have "
        f"the platform trust {namespace!r}: the controller's and the broker's --catalog-namespace)",
    )


def in_use_verdict(users: int) -> Verdict:
    """A plan being deleted that ``users`` instances still use."""
    return Verdict(
        False,
        Reason.PLAN_IN_USE,
        f"deletion waits: {users} service instance(s) still use this plan; it takes no new ones, and goes once "
        "they are deprovisioned",
    )


def service_in_use_verdict(plans: int, instances: int) -> Verdict:
    """A service being deleted that ``plans`` SFPlans and ``instances`` service instances still use."""
    return Verdict(
        False,
        Reason.SERVICE_IN_USE,
        f"deletion waits: {plans} plan(s) and {instances} service instance(s) still use this service; it goes "
        "once they are gone",
    )


def status_patch(entry: EntryView, verdict: Verdict, at: datetime.datetime) -> Manifest | None:
    """The status patch announcing ``verdict`` for ``entry`` (a flipped Ready moves ``at``), or None if its
    status already says so."""
    generation = entry.meta.generation
    current = entry.condition("Ready")
    if (
        current is not None
        and entry.observed_generation == generation
        and (current.status, current.reason, current.message, current.observed_generation)
        == ("True" if verdict.ready else "False", verdict.reason.value, verdict.message[:1024], generation)
    ):
        return None
    wanted = ready_conditions(entry.conditions, ready=verdict.ready, reason=verdict.reason, message=verdict.message,
                              generation=generation, at=at)  # fmt: skip
    return {"observedGeneration": generation, "conditions": wanted}
