"""Reconciling SFService and SFPlan: report whether the controller accepted each catalog entry, keep a plan
while instances use it, and a service while plans or instances use it.

observe reads the entry (fresh from the API: the store does not hold catalog entries) into a typed
:class:`~.core.views.EntryView`, checks it — outside the trusted namespaces it is only warned about; in them,
another trusted object declaring its id makes it a duplicate — and, for an entry whose finalizer depends on it,
counts what uses it; plan is pure (:mod:`opbroker.controller.catalog.core.entry_plan`, table-tested); act hands the
actions to the one :class:`~.executor.Executor` (the finalizer and the status written guarded by the
resourceVersion the verdict was made on).

The finalizer keeps an SFPlan while service instances use it, and an SFService while plans or instances use it, as
Service Fabrik guards the deregistration of both. Deleting a plan under live instances would strand them: their
updates, bindings and deprovision all render the plan's templates. So:

* these reconcilers are the one owner of that finalizer on their kind (:data:`~.core.finalizers.OWNERS`): an
  instance never writes its plan's; a new instance brings its plan's key to the queue while the plan is not held
  (``app.on_instance``), the plan's reconciler counts its users and adds the finalizer, and the instance waits for
  its first apply until its plan shows it held (``InstanceReconciler``, step ``HOLD_PLAN``; the plan's event brings
  it back);
* a plan deleted while in use waits, Ready=False with reason ``PlanInUse``; it is withdrawn meanwhile: the broker
  leaves it out of ``/v2/catalog`` and refuses new instances of it, the controller fails a never-applied one
  (``PlanWithdrawn``), existing instances keep working;
* the finalizer goes when the plan's deletion is reconciled and no instance uses it — reconciled again when an
  instance of a withdrawn plan is deleted, and every ``in_use_recheck`` while it waits.

An SFService is guarded the same way (issue 29): it carries the finalizer while trusted SFPlans or instances name
its id (queued by every event of such a plan); deleted meanwhile, it waits, Ready=False with reason
``ServiceInUse`` and how many plans and instances hold it, and goes with the last. The decisions are pure
(``decisions.entry_guard``, ``decisions.plan_users``, ``decisions.service_users``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, ClassVar

from pydantic import ValidationError

from opbroker.api import SFPlan, SFService
from opbroker.api.errors import field_errors
from opbroker.controller.catalog.catalog import Catalog, ref
from opbroker.controller.catalog.core import catalog_status, entry_plan
from opbroker.controller.catalog.core.catalog_status import Verdict
from opbroker.controller.catalog.core.entry_plan import EntryFacts, NoteWarned
from opbroker.controller.core import decisions
from opbroker.controller.core.views import EntryView, InstanceView
from opbroker.controller.kinds import INSTANCES, PLANS, SERVICES
from opbroker.controller.runtime.clock import SYSTEM, Clock
from opbroker.controller.runtime.concurrency import Lock
from opbroker.controller.runtime.executor import Executor, Run, Target
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.kinds import ObservePlanAct
from opbroker.controller.runtime.kube import Kind, Kube
from opbroker.controller.runtime.outcomes import DONE, Outcome
from opbroker.controller.runtime.policies import DEFAULTS, Policies
from opbroker.controller.runtime.showing import ShowsFailuresOnObject
from opbroker.rendering import Renderer
from opbroker.rendering.checking import check_plan

__all__ = ["EntryFacts", "PlanEntryReconciler", "ServiceEntryReconciler"]

Mark = tuple[str, int | None]


class ServiceEntryReconciler(ShowsFailuresOnObject, ObservePlanAct[EntryFacts, Any]):
    kind: ClassVar[str] = "service"
    resource: ClassVar[Kind] = SERVICES

    def __init__(
        self, kube: Kube, renderer: Renderer, catalog: Catalog, *, policies: Policies = DEFAULTS, clock: Clock = SYSTEM
    ) -> None:
        self.kube = kube
        self.policies = policies
        """The timing table: an entry whose deletion waits for its users is looked at again after its
        ``in_use_recheck``."""
        self.clock = clock
        """Read once per observe: the moment a Ready condition's transition is written at."""
        self.renderer = renderer
        self.catalog = catalog
        self._warned: dict[Key, Mark] = {}
        self._warned_lock = Lock()
        self.executor = Executor(Target(kube, self.resource, self.kind), effects={NoteWarned: self._note_warned})

    def observe(self, key: Key) -> EntryFacts | None:
        facts = self.observe_entry(key)
        if facts is None or not facts.trusted or not entry_plan.entry_needs_count(facts.entry.meta):
            return facts
        service_id = facts.entry.osb_id
        others = [v for v in self.catalog.service_views(service_id) if _key(v) != (key.namespace, key.name)]
        if facts.entry.meta.deleting and any(not other.meta.deleting for other in others):
            return facts  # another trusted SFService declares the id and stays: it serves the plans, none waits
        users = decisions.service_users(
            self.catalog.plan_views_of_service(service_id), _instances(self.kube), service_id
        )
        recheck_in = self.policies.delay(self.policies.in_use_recheck)
        return EntryFacts(
            key, facts.entry, facts.verdict, users.plans + users.instances, users, recheck_in=recheck_in, now=facts.now
        )

    def observe_entry(self, key: Key) -> EntryFacts | None:
        """The entry and its verdict, without counting its users."""
        body = self.kube.get_custom(self.resource, key.namespace, key.name, fresh=True)
        if body is None:
            return None
        entry = EntryView.of(body)
        now = self.clock.now()
        if not self.catalog.trusts(body):
            verdict = catalog_status.untrusted_verdict(self.kind, key.namespace, tuple(sorted(self.catalog.trusted)))
            with self._warned_lock:
                warned = self._warned.get(key) == entry.mark
            return EntryFacts(key, entry, verdict, trusted=False, warned=warned, now=now)
        others = [ref(k) for k in self.holders(entry.osb_id) if k != (key.namespace, key.name)]
        if others:
            return EntryFacts(
                key, entry, catalog_status.duplicate_verdict(self.kind, entry.osb_id, tuple(others)), now=now
            )
        return EntryFacts(key, entry, self.verdict(entry), now=now)

    def holders(self, osb_id: str) -> list[tuple[str, str]]:
        """The trusted objects of this kind declaring ``osb_id``."""
        return self.catalog.service_holders(osb_id)

    def verdict(self, entry: EntryView) -> Verdict:
        try:
            SFService.model_validate(entry.wire)
        except ValidationError as exc:
            return catalog_status.service_verdict("; ".join(field_errors(exc)))
        return catalog_status.service_verdict(None)

    def gone(self, key: Key) -> Outcome:
        with self._warned_lock:
            self._warned.pop(key, None)
        return DONE

    @staticmethod
    def plan(facts: EntryFacts) -> Sequence[Any]:
        return entry_plan.service_entry(facts)

    def act(self, facts: EntryFacts, actions: Sequence[Any]) -> Outcome:
        return self.executor.run(facts.key, facts.entry.wire, actions)

    def _note_warned(self, run: Run, action: NoteWarned) -> None:
        with self._warned_lock:
            self._warned[run.key] = action.mark


class PlanEntryReconciler(ServiceEntryReconciler):
    """Also trial-renders each plan (:func:`check_plan`), once per generation: the verdict is remembered by the
    plan's uid and generation, so a plan whose templates hit a limit (a memory bomb, a runaway loop) is
    reported once and not rendered again on every event that brings it back (the controller's own status
    write, a resync) until its spec changes. A verdict that may be the machine's (the Go renderer crashed) is
    not remembered."""

    kind: ClassVar[str] = "plan"
    resource: ClassVar[Kind] = PLANS

    def __init__(
        self,
        kube: Kube,
        renderer: Renderer,
        catalog: Catalog,
        *,
        policies: Policies = DEFAULTS,
        clock: Clock = SYSTEM,
        hold_unused: bool = False,
    ) -> None:
        super().__init__(kube, renderer, catalog, policies=policies, clock=clock)
        self.hold_unused = hold_unused
        """Sharded (issue 46): a plan is held from the start — the instances whose first apply waits for the hold
        are other shards', which never bring the plan's key to this one's queue."""
        self._verdicts: dict[Key, tuple[Mark, Verdict]] = {}
        self._verdicts_lock = Lock()

    def holders(self, osb_id: str) -> list[tuple[str, str]]:
        return self.catalog.plan_holders(osb_id)

    def observe(self, key: Key) -> EntryFacts | None:
        facts = self.observe_entry(key)
        if facts is not None and self.hold_unused:
            facts = dataclasses.replace(facts, hold_unused=True)
        if facts is None or not facts.trusted or not entry_plan.entry_needs_count(facts.entry.meta):
            return facts
        if self.hold_unused and not facts.entry.meta.deleting:
            return facts  # held whatever uses it: nothing to count
        plan_id = facts.entry.osb_id
        others = [v for v in self.catalog.plan_views(plan_id) if _key(v) != (key.namespace, key.name)]
        if facts.entry.meta.deleting and any(not other.meta.deleting for other in others):
            return facts  # another trusted SFPlan declares the id and stays: it serves the instances, none waits
        users = decisions.plan_users(_instances(self.kube), plan_id)
        recheck_in = self.policies.delay(self.policies.in_use_recheck)
        return dataclasses.replace(facts, users=users, recheck_in=recheck_in)

    @staticmethod
    def plan(facts: EntryFacts) -> Sequence[Any]:
        return entry_plan.plan_entry(facts)

    def verdict(self, entry: EntryView) -> Verdict:
        key, mark = Key(self.kind, entry.meta.namespace, entry.meta.name), entry.mark
        with self._verdicts_lock:
            known = self._verdicts.get(key)
        if known is not None and known[0] == mark:
            return known[1]
        try:
            model = SFPlan.model_validate(entry.wire)
        except ValidationError as exc:
            return catalog_status.plan_verdict("; ".join(field_errors(exc)))
        check = check_plan(model, self.renderer)
        verdict = catalog_status.plan_verdict(None, tuple(str(f) for f in check.errors))
        if check.settled:
            with self._verdicts_lock:
                self._verdicts[key] = (mark, verdict)
        return verdict

    def gone(self, key: Key) -> Outcome:
        with self._verdicts_lock:
            self._verdicts.pop(key, None)
        return super().gone(key)


def _key(entry: EntryView) -> tuple[str, str]:
    return entry.meta.namespace, entry.meta.name


def _instances(kube: Kube) -> list[InstanceView]:
    """Every instance, as read (for a count of an entry's users: only while a guard depends on it)."""
    return [InstanceView.of(body) for body in kube.list_custom(INSTANCES, None)]
