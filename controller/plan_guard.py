"""The finalizer that keeps an SFPlan while service instances use it, and an SFService while plans or instances
use it, as Service Fabrik guards the deregistration of both.

Deleting a plan under live instances would strand them: their updates, bindings and deprovision all render
the plan's templates. So:

* an instance's first apply makes sure its plan carries the finalizer (``InstanceReconciler``, step
  ``HOLD_PLAN``: one patch per plan, as the catalog's copy then shows it held);
* a plan deleted while in use waits, Ready=False with reason ``PlanInUse`` (``PlanEntryReconciler``); it is
  withdrawn meanwhile: the broker leaves it out of ``/v2/catalog`` and refuses new instances of it, the
  controller fails a never-applied one (``PlanWithdrawn``), existing instances keep working;
* the finalizer goes when the plan's deletion is reconciled and no instance uses it — reconciled again when
  an instance of a withdrawn plan is deleted, and every 30 s while it waits.

An SFService is guarded the same way (issue 29): it carries the finalizer while trusted SFPlans or instances
name its id (``ServiceEntryReconciler``, queued by every event of such a plan); deleted meanwhile, it waits,
Ready=False with reason ``ServiceInUse`` and how many plans and instances hold it, and goes with the last.

The decisions are pure (``decisions.plan_guard_step``, ``decisions.plan_users``, ``decisions.service_users``);
this is the one write.
"""

from __future__ import annotations

from opbroker.api.conventions import FINALIZER
from opbroker.controller.core.views import Meta
from opbroker.controller.kube import PLANS, Kind, Kube
from opbroker.kubeclient.wire import JsonObject


def set_plan_finalizer(kube: Kube, plan: JsonObject, *, hold: bool) -> None:
    """Add (``hold``) or drop the controller's finalizer on ``plan`` (:func:`set_finalizer`)."""
    set_finalizer(kube, PLANS, plan, hold=hold)


def set_finalizer(kube: Kube, kind: Kind, entry: JsonObject, *, hold: bool) -> None:
    """Add (``hold``) or drop the controller's finalizer on a catalog ``entry`` (an SFPlan or an SFService),
    guarded by its resourceVersion.

    The copy may be stale (the catalog keeps the last watch event's): a conflict (409) propagates, and the
    runtime's one conflict policy repeats the reconcile, by then on the copy the entry's watch event brought (the
    event that moved the entry on is on its way). Adding to a plan being deleted is refused by the API server (no
    new finalizers then), which the caller sees as an error — the right answer for an instance racing the plan's
    deletion.
    """
    meta = Meta.of(entry.get("metadata"))
    finalizers = [f for f in meta.finalizers if f != FINALIZER]
    if hold:
        finalizers.append(FINALIZER)
    patch = {"metadata": {"finalizers": finalizers or None, "resourceVersion": meta.resource_version}}
    kube.patch_custom(kind, meta.namespace, meta.name, patch)
