"""Reconciling SFService and SFPlan: report whether the controller accepted each catalog entry, keep a plan
while instances use it, and a service while plans or instances use it.

observe reads the entry (fresh from the API: the store does not hold catalog entries), checks it — outside the
trusted namespaces it is only warned about; in them, another trusted object declaring its id makes it a
duplicate — and, for an entry whose finalizer depends on it, counts what uses it; plan is pure
(:func:`opbroker.controller.core.catalog_status.status_patch`,
:func:`opbroker.controller.core.decisions.plan_guard_step`);
act writes the patch, guarded by the resourceVersion the verdict was made on, and sets the finalizer
(see :mod:`opbroker.controller.plan_guard`).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import ValidationError

from opbroker.api import SFPlan, SFService
from opbroker.api.conventions import catalog_id
from opbroker.api.errors import field_errors
from opbroker.controller.catalog import Catalog, ref
from opbroker.controller.core import catalog_status, decisions
from opbroker.controller.core.catalog_status import Verdict
from opbroker.controller.core.decisions import PlanGuard, ServiceUsers
from opbroker.controller.kube import INSTANCES, PLANS, SERVICES, Kind, Kube
from opbroker.controller.plan_guard import set_finalizer
from opbroker.controller.reconciler import DONE, Key, ObservePlanAct, Outcome
from opbroker.rendering import Renderer
from opbroker.rendering.checking import check_plan


@dataclass(frozen=True)
class EntryFacts:
    key: Key
    body: dict[str, Any]
    verdict: Verdict
    users: int = 0
    """Instances using the plan, or plans and instances using the service; counted only when the entry's
    finalizer depends on it."""
    service_users: ServiceUsers | None = None
    """For a service: its users, by kind (for the message of a deletion that waits)."""
    trusted: bool = True
    """The object lives in a trusted namespace (else it is a tenant's: warned about, never served)."""
    warned: bool = False
    """Untrusted, and already warned about at this generation (by this controller process)."""


@dataclass(frozen=True)
class WriteStatus:
    patch: dict[str, Any]
    warning: Verdict | None = None
    """Also say this in a Warning event (a deletion that waits)."""


@dataclass(frozen=True)
class SetFinalizer:
    hold: bool


@dataclass(frozen=True)
class RecheckLater:
    seconds: float


@dataclass(frozen=True)
class Warn:
    """A Warning event on an object outside the trusted namespaces (its status is not ours to write)."""

    verdict: Verdict


EntryAction = WriteStatus | SetFinalizer | RecheckLater | Warn

#: How often a plan whose deletion waits for its instances (or a service, for its plans and instances) is looked
#: at again (an instance's or plan's deletion also queues it: this is the safety net).
PLAN_IN_USE_RECHECK_SECONDS = 30.0


def waiting(facts: EntryFacts, verdict: Verdict) -> list[EntryAction]:
    """A deletion that waits for the entry's users: say why (status and a Warning event), look again later."""
    patch = catalog_status.status_patch(facts.body, verdict)
    return [
        *([WriteStatus(patch, warning=verdict)] if patch is not None else []),
        RecheckLater(PLAN_IN_USE_RECHECK_SECONDS),
    ]


def _mark(body: dict[str, Any]) -> tuple[Any, Any]:
    """What a warning about an untrusted object was given for: its uid and generation."""
    meta = body.get("metadata") or {}
    return meta.get("uid"), meta.get("generation")


class ServiceEntryReconciler(ObservePlanAct[EntryFacts, EntryAction]):
    kind: ClassVar[str] = "service"
    resource: ClassVar[Kind] = SERVICES

    def __init__(self, kube: Kube, renderer: Renderer, catalog: Catalog) -> None:
        self.kube = kube
        self.renderer = renderer
        self.catalog = catalog
        self._warned: dict[Key, tuple[Any, Any]] = {}
        self._warned_lock = threading.Lock()

    def observe(self, key: Key) -> EntryFacts | None:
        facts = self.observe_entry(key)
        if facts is None or not facts.trusted or not decisions.plan_needs_count(facts.body):
            return facts
        service_id = catalog_id(facts.body)
        others = [b for b in self.catalog.service_bodies(service_id) if Catalog.key(b) != (key.namespace, key.name)]
        if decisions.is_deleting(facts.body) and any(not decisions.is_deleting(other) for other in others):
            return facts  # another trusted SFService declares the id and stays: it serves the plans, none waits
        users = decisions.service_users(
            self.catalog.plan_bodies_of_service(service_id), self.kube.list_custom(INSTANCES, None), service_id
        )
        return EntryFacts(key, facts.body, facts.verdict, users.plans + users.instances, users)

    def observe_entry(self, key: Key) -> EntryFacts | None:
        """The entry and its verdict, without counting its users."""
        body = self.kube.get_custom(self.resource, key.namespace, key.name, fresh=True)
        if body is None:
            return None
        if not self.catalog.trusts(body):
            verdict = catalog_status.untrusted_verdict(self.kind, key.namespace, tuple(sorted(self.catalog.trusted)))
            with self._warned_lock:
                warned = self._warned.get(key) == _mark(body)
            return EntryFacts(key, body, verdict, trusted=False, warned=warned)
        others = [ref(k) for k in self.holders(catalog_id(body)) if k != (key.namespace, key.name)]
        if others:
            return EntryFacts(key, body, catalog_status.duplicate_verdict(self.kind, catalog_id(body), tuple(others)))
        return EntryFacts(key, body, self.verdict(body))

    def holders(self, osb_id: str) -> list[tuple[str, str]]:
        """The trusted objects of this kind declaring ``osb_id``."""
        return self.catalog.service_holders(osb_id)

    def verdict(self, body: dict[str, Any]) -> Verdict:
        try:
            SFService.model_validate(body)
        except ValidationError as exc:
            return catalog_status.service_verdict("; ".join(field_errors(exc)))
        return catalog_status.service_verdict(None)

    def gone(self, key: Key) -> Outcome:
        with self._warned_lock:
            self._warned.pop(key, None)
        return DONE

    @staticmethod
    def untrusted(facts: EntryFacts) -> Sequence[EntryAction]:
        """An object outside the trusted namespaces: warned about once per generation; never held (a finalizer
        of ours left from a time it was trusted is dropped when it is deleted, so it can go)."""
        actions: list[EntryAction] = []
        held = decisions.has_finalizer(facts.body)
        if held and decisions.is_deleting(facts.body):
            actions.append(SetFinalizer(hold=False))
        elif not facts.warned:
            actions.append(Warn(facts.verdict))
        return actions

    @staticmethod
    def plan(facts: EntryFacts) -> Sequence[EntryAction]:
        """Ready as checked — unless the service is being deleted under plans or instances, which it then waits
        for (as a plan waits for its instances)."""
        if not facts.trusted:
            return ServiceEntryReconciler.untrusted(facts)
        guard = decisions.plan_guard_step(facts.body, users=facts.users)
        if guard is PlanGuard.RELEASE:
            return (SetFinalizer(hold=False),)
        actions: list[EntryAction] = [SetFinalizer(hold=True)] if guard is PlanGuard.HOLD else []
        if guard is PlanGuard.WAIT:
            users = facts.service_users or ServiceUsers(0, facts.users)
            return [*actions, *waiting(facts, catalog_status.service_in_use_verdict(users.plans, users.instances))]
        return [*actions, *ServiceEntryReconciler.as_checked(facts)]

    @staticmethod
    def as_checked(facts: EntryFacts) -> Sequence[EntryAction]:
        """The status write announcing the entry's verdict, if its status does not say it yet."""
        patch = catalog_status.status_patch(facts.body, facts.verdict)
        return () if patch is None else (WriteStatus(patch),)

    def act(self, facts: EntryFacts, actions: Sequence[EntryAction]) -> Outcome:
        outcome = DONE
        for action in actions:
            if isinstance(action, SetFinalizer):
                set_finalizer(self.kube, self.resource, facts.body, hold=action.hold)
            elif isinstance(action, RecheckLater):
                outcome = Outcome(requeue_after=action.seconds)
            elif isinstance(action, Warn):
                self.kube.emit_event(
                    facts.body, reason=action.verdict.reason.value, message=action.verdict.message, warning=True
                )
                with self._warned_lock:
                    self._warned[facts.key] = _mark(facts.body)
            else:
                self.kube.patch_custom_status(
                    self.resource,
                    facts.key.namespace,
                    facts.key.name,
                    action.patch,
                    resource_version=facts.body["metadata"]["resourceVersion"],
                )  # a 409 is a conflict: the runtime re-reads and decides again on the newer version
                if action.warning is not None:
                    self.kube.emit_event(
                        facts.body, reason=action.warning.reason.value, message=action.warning.message, warning=True
                    )
        return outcome


class PlanEntryReconciler(ServiceEntryReconciler):
    """Also trial-renders each plan (:func:`check_plan`), once per generation: the verdict is remembered by the
    plan's uid and generation, so a plan whose templates hit a limit (a memory bomb, a runaway loop) is
    reported once and not rendered again on every event that brings it back (the controller's own status
    write, a resync) until its spec changes. A verdict that may be the machine's (the Go renderer crashed) is
    not remembered."""

    kind: ClassVar[str] = "plan"
    resource: ClassVar[Kind] = PLANS

    def __init__(self, kube: Kube, renderer: Renderer, catalog: Catalog) -> None:
        super().__init__(kube, renderer, catalog)
        self._verdicts: dict[Key, tuple[tuple[Any, Any], Verdict]] = {}
        self._verdicts_lock = threading.Lock()

    def holders(self, osb_id: str) -> list[tuple[str, str]]:
        return self.catalog.plan_holders(osb_id)

    def observe(self, key: Key) -> EntryFacts | None:
        facts = self.observe_entry(key)
        if facts is None or not facts.trusted or not decisions.plan_needs_count(facts.body):
            return facts
        plan_id = catalog_id(facts.body)
        others = [b for b in self.catalog.plan_bodies(plan_id) if Catalog.key(b) != (key.namespace, key.name)]
        if decisions.is_deleting(facts.body) and any(not decisions.is_deleting(other) for other in others):
            return facts  # another trusted SFPlan declares the id and stays: it serves the instances, none waits
        users = decisions.plan_users(self.kube.list_custom(INSTANCES, None), plan_id)
        return EntryFacts(key, facts.body, facts.verdict, users)

    @staticmethod
    def plan(facts: EntryFacts) -> Sequence[EntryAction]:
        """Ready as checked — unless the plan is being deleted under instances, which it then waits for."""
        if not facts.trusted:
            return ServiceEntryReconciler.untrusted(facts)
        guard = decisions.plan_guard_step(facts.body, users=facts.users)
        if guard is PlanGuard.RELEASE:
            return (SetFinalizer(hold=False),)  # deleted and unused: it goes, nothing more is written to it
        actions: list[EntryAction] = [SetFinalizer(hold=True)] if guard is PlanGuard.HOLD else []
        if guard is PlanGuard.WAIT:
            return [*actions, *waiting(facts, catalog_status.in_use_verdict(facts.users))]
        return [*actions, *ServiceEntryReconciler.as_checked(facts)]

    def verdict(self, body: dict[str, Any]) -> Verdict:
        key, mark = Key(self.kind, *Catalog.key(body)), _mark(body)
        with self._verdicts_lock:
            known = self._verdicts.get(key)
        if known is not None and known[0] == mark:
            return known[1]
        try:
            model = SFPlan.model_validate(body)
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
