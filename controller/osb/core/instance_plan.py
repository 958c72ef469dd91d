"""The pure half of reconciling an SFServiceInstance: its facts, and the plan that turns them into actions.

Every decision about an instance lives here and nowhere else — apply or wait, succeeded / failed / in progress,
overdue, give up, which objects to release, when to look again — as functions of :class:`InstanceFacts` that
return actions of the one vocabulary (:mod:`.actions`). No I/O and no Kubernetes client (the import contract
checks it); the moment of the read comes in the facts (``now``), so ages, deadlines and transition times are
fixed by them: ``tests/controller/test_instance_plan.py`` tables the plan without a cluster, on a fixed clock. The
reconciler that observes the facts and runs the actions is :mod:`opbroker.controller.osb.instances`.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opbroker.api.catalog import DeletionPolicy, DriftPolicy
from opbroker.api.conventions import LABEL_INSTANCE, LABEL_PLAN
from opbroker.api.meta import ResourceRef
from opbroker.api.osb import OperationState
from opbroker.controller.catalog.catalog import PlanEntry
from opbroker.controller.core import actions as a
from opbroker.controller.core import decisions
from opbroker.controller.core.conditions import SYNCED_CONDITION, Condition, conditions_patch, shows
from opbroker.controller.core.decisions import Letting, Step
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.views import BindingView, InstanceView, ObjectView, recorded_refs
from opbroker.controller.multicluster.core import placement_plan
from opbroker.controller.multicluster.core.placement_plan import PlacementAction, PlacementFacts
from opbroker.controller.osb.core import drift, live_status, singleton_plan
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.objects import (
    minus_refs,
    recorded,
    ref_dicts,
    ref_key,
    reference_to,
    same_namespace,
    stamp,
    union_refs,
)
from opbroker.kubeclient.wire import JsonBody, JsonObject, mapping_of, text_of
from opbroker.rendering.status import SectionStatus


@dataclass(frozen=True)
class Limits:
    """The settings a plan decides with (defaults: ``ControllerSettings``')."""

    poll_seconds: float = 10.0
    """How long to wait before reading an operation in progress (or a teardown) again."""
    max_operation_seconds: float = 7200.0
    """An operation still in progress after this long fails (0: no limit)."""
    error_threshold: int = 8
    """Consecutive errors (a template that fails to render, a fixable refusal) before the operation fails."""
    max_poll_seconds: float = 300.0
    """The longest an operation in progress waits between two readings when every object its status template
    reads is of a watched kind: its wait grows with its age up to this (``decisions.poll_after``), since the
    watch reports a change at once. Otherwise it is read every ``poll_seconds``."""
    resync_seconds: float = 600.0
    """Day two: a bound binding is looked at again this long after its last look (±10 %, by uid) even when no event
    came (0: never). Instances are resynced by the sweep of ``controller.resync`` over the same period instead."""
    live_status_seconds: float = 10.0
    """Day two: at most one live-status change (Ready, its Event) written per instance per this many seconds."""
    drift_bounds: drift.Bounds = dataclasses.field(default_factory=drift.Bounds)
    """Day two: how often one object may be set back before it counts as a fight."""


@dataclass(frozen=True)
class Piece:
    """One rendered object to apply, with what observe learnt of its kind (namespaced or not)."""

    manifest: JsonObject = dataclasses.field(repr=False)
    singleton: bool = False
    adopt: bool = False
    namespaced: bool = True
    deletion_policy: DeletionPolicy = DeletionPolicy.DELETE
    """Its template's ``deletionPolicy``: recorded with the object when it is applied, and what its teardown does."""
    drift: DriftPolicy = DriftPolicy.CORRECT
    """Its template's ``drift``: what a settled instance's check does when the live object differs."""

    @property
    def ref(self) -> ResourceRef:
        # The renderer refuses an object without a non-empty apiVersion, kind and metadata.name (rendering.output).
        meta = mapping_of(self.manifest.get("metadata"))
        namespace = meta.get("namespace")
        return ResourceRef(
            api_version=text_of(self.manifest.get("apiVersion")) or "",
            kind=text_of(self.manifest.get("kind")) or "",
            name=text_of(meta.get("name")) or "",
            namespace=namespace if isinstance(namespace, str) else None,
        )


@dataclass(frozen=True)
class Rendering:
    """The ``provision`` template's output for this generation: what an apply writes."""

    pieces: tuple[Piece, ...]
    registry: JsonObject = dataclasses.field(repr=False)
    registry_changed: bool = False
    sources: Mapping[str, ResourceRef] = dataclasses.field(default_factory=dict)
    """The objects the ``sources`` template named for this render (the evaluation that follows reads them)."""
    released: tuple[Held, ...] = ()
    """The recorded objects it no longer renders, as read (what the apply lets go of); read for an apply only."""
    live: tuple[Held, ...] = ()
    """Every object it renders, as read before the apply: one that exists and is someone else's is not written
    (:func:`guarded`), a shared singleton that exists is joined, not created (:func:`apply_or_join`)."""
    read: Mapping[tuple[str, str, str, str], JsonBody | None] = dataclasses.field(default_factory=dict, repr=False)
    """The ``sources`` objects as the render read them (by ``ref_key``): an object both read and rendered is read
    once per pass — a shard's store never answers "absent" (issue 46), so each read of an object about to be
    created is a GET."""


@dataclass(frozen=True)
class Report:
    """What the plan's status template says of the operation (``section``: provision or deprovision; None when
    it renders none), and what it read."""

    has_template: bool
    section: SectionStatus | None = None
    registry: JsonObject = dataclasses.field(default_factory=dict, repr=False)
    source_refs: tuple[ResourceRef, ...] = ()
    source_versions: tuple[str | None, ...] = ()
    """The versions of ``source_refs`` as the template read them (a check remembers what it decided on)."""


@dataclass(frozen=True)
class Held:
    """A recorded object as observe read it before it is let go (a teardown's, or one an apply no longer renders):
    ``live`` None, it is gone. ``readable`` False: the acting account may not even read it (403) — it could not have
    been written with these rights, so it is not ours, and a record naming it (a stale one, or one forged before the
    API server kept records) must not hold the owner's deletion for ever: it is left alone."""

    ref: ResourceRef
    live: ObjectView | None
    readable: bool = True

    def letting(self, owner_uid: str) -> Letting:
        """What letting go of it means for ``owner_uid`` (:func:`.decisions.letting_go`)."""
        return decisions.letting_go(self.live, owner_uid=owner_uid) if self.readable else Letting.LEAVE


def held_of(held: Sequence[Held], ref: ResourceRef) -> Held:
    """``ref`` as read among ``held`` (not read: gone, nothing to let go of)."""
    wanted = ref_key(ref)
    return next((h for h in held if ref_key(h.ref) == wanted), Held(ref, None))


@dataclass(frozen=True)
class Teardown:
    """What a teardown decides on: whether the namespace is going, and each recorded object as read."""

    terminating: bool
    held: tuple[Held, ...] = ()

    def of(self, ref: ResourceRef) -> Held:
        return held_of(self.held, ref)


def orphans_of(pieces: Sequence[Piece]) -> list[ResourceRef]:
    """The rendered objects whose template says ``deletionPolicy: orphan``."""
    return [piece.ref for piece in pieces if piece.deletion_policy is DeletionPolicy.ORPHAN]


def release(held: Held, owner_uid: str, actor: str | None) -> tuple[a.Action, ...]:
    """Let go of a recorded object, decided from the object as read: deleted at the version read when it is
    ``owner_uid``'s alone; shared, our owner reference and our entry among its tracked users dropped — or, the last
    user of a tracked singleton, deleted — at the version read (:func:`.singleton_plan.leaving`); being deleted or
    gone, nothing; not ours (or not readable), never touched, a log line says so. Every write carries the version it
    was decided on: one changed since is a conflict, and the reconcile decides again."""
    step, ref, live = held.letting(owner_uid), held.ref, held.live
    if step is Letting.LEAVE:
        where = f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name
        return (a.Log(f"left {ref.kind} {where} alone: recorded as released, but it is not ours"),)
    if live is None or step in (Letting.GONE, Letting.WAIT):
        return ()
    if step is Letting.UNOWN or decisions.singleton_users(live.meta):
        write = singleton_plan.leaving(live, ref, owner_uid=owner_uid, as_user=actor).write
        return () if write is None else (write,)
    return (a.Delete(ref, actor, resource_version=live.meta.resource_version),)


def orphan(held: Held, owner_uid: str, actor: str | None) -> tuple[a.Action, ...]:
    """Let go of a recorded object without deleting it (``deletionPolicy: orphan``): the patch
    :func:`.decisions.orphaning` decides from the object as read, guarded by its version; none when nothing on it is
    the owner's (gone, being deleted, orphaned before, not ours or not readable)."""
    patch = decisions.orphaning(held.live, owner_uid=owner_uid) if held.readable else None
    return () if patch is None else (a.Orphan(held.ref, owner_uid, patch, actor),)


@dataclass(frozen=True)
class LettingGo:
    """The actions that let go of recorded objects (:func:`let_go`), and what they leave behind."""

    actions: tuple[a.Action, ...]
    waiting: bool
    """An object deleted (now or before) is still there: the teardown waits for it."""
    orphaned: tuple[ResourceRef, ...]
    """Objects left in place by their ``deletionPolicy: orphan`` (named in the teardown's Event)."""


def let_go(
    refs: Sequence[ResourceRef],
    teardown: Teardown,
    orphans: Sequence[ResourceRef],
    owner_uid: str,
    actor: str | None,
) -> LettingGo:
    """Let go of the recorded ``refs`` in a teardown: an object recorded as an orphan (``orphans``, the status'
    record: the plan may have changed since) is orphaned — never deleted, never waited for — and any other is
    released (:func:`release`: deleted when ours alone, and waited for). An orphan already let go (not ours any
    more) gets no action and is still named; one gone or being deleted by someone else is not."""
    orphan_keys = {ref_key(ref) for ref in orphans}
    out: list[a.Action] = []
    waiting, orphaned = False, []
    for ref in refs:
        held = teardown.of(ref)
        letting = held.letting(owner_uid)
        if letting is Letting.GONE:
            continue
        if ref_key(ref) in orphan_keys:
            out.extend(orphan(held, owner_uid, actor))
            if letting is not Letting.WAIT:
                orphaned.append(ref)
            continue
        out.extend(release(held, owner_uid, actor))
        waiting = waiting or letting in (Letting.DELETE, Letting.WAIT)
    return LettingGo(tuple(out), waiting, tuple(orphaned))


def no_longer_rendered(
    gone: Sequence[ResourceRef],
    held: Sequence[Held],
    orphans: Sequence[ResourceRef],
    owner_uid: str,
    actor: str | None,
) -> tuple[a.Action, ...]:
    """Let go of recorded objects an apply no longer renders (``held``: them as observe read them): each released,
    or orphaned when it was recorded so (then an Event names them)."""
    orphan_keys = {ref_key(ref) for ref in orphans}
    kept = [ref for ref in gone if ref_key(ref) in orphan_keys]
    out: list[a.Action] = []
    for ref in gone:
        let = orphan if ref_key(ref) in orphan_keys else release
        out.extend(let(held_of(held, ref), owner_uid, actor))
    if kept:
        out.append(a.Event(Reason.ORPHANED.value, decisions.orphaned_message(kept, why="no longer rendered")))
    return tuple(out)


def pause(view: InstanceView | BindingView, now: datetime.datetime, where: str) -> tuple[a.Action, ...]:
    """Say once that the object is paused (``where``: :func:`.decisions.paused_where`): the ``Paused`` condition and
    an Event; nothing else is written, applied or asked (no poll either: the pause is lifted by an annotation, whose
    event brings the object back). Shared by instances and bindings."""
    message = decisions.paused_message(where)
    patch = decisions.pause_status(view.status, view.meta.generation, paused=True, message=message, at=now)
    return (a.WriteStatus(patch, event=a.Event(Reason.PAUSED.value, message)),)


def resume(view: InstanceView | BindingView, now: datetime.datetime) -> tuple[a.Action, ...]:
    """The pause is lifted: ``Paused`` False (reason ``Resumed``) and an Event, then a fresh pass decides from the
    facts as usual (the live state, not what was due when the pause began). Shared by instances and bindings."""
    message = decisions.RESUMED_MESSAGE
    patch = decisions.pause_status(view.status, view.meta.generation, paused=False, message=message, at=now)
    return (a.WriteStatus(patch, event=a.Event(Reason.RESUMED.value, message)), a.Continue())


@dataclass(frozen=True)
class Observed:
    """Day two: one object ``provision`` renders now, and the live object (None: gone) it is compared with."""

    piece: Piece
    live: JsonObject | None = dataclasses.field(repr=False)
    history: tuple[datetime.datetime, ...] = ()
    """When it was set back before (the corrections that changed it, inside the fight window)."""
    managers: tuple[str, ...] = ()
    """When a drift of it would be a fight (``drift.fighting``): the other field managers writing it, the most
    recent first (``drift.other_managers``, read past the store, which keeps no ``managedFields``)."""


@dataclass(frozen=True)
class Check:
    """Day two: what a settled instance's check read. ``unchanged``: nothing it read last time has moved (the
    ``digest`` of their versions matches the one recorded when it was last found as declared): nothing to do."""

    digest: str
    unchanged: bool = False
    observed: tuple[Observed, ...] = ()
    refs: tuple[ResourceRef, ...] = ()
    """What the check read (the status template's sources and the recorded objects): followed by the watch."""
    last_live_write: datetime.datetime | None = None
    """When a live-status change was last written (the debounce, ``core.live_status``)."""
    versions: tuple[str | None, ...] = ()
    """The versions of ``refs`` as read (what the resync sweep compares with the store's)."""
    shapes: Mapping[Any, str | None] = dataclasses.field(default_factory=dict)
    """The rendered objects' shapes as read (``drift.shape``, by object key): remembered when found as declared."""
    sources: tuple[ResourceRef, ...] = ()
    """What the status template read (``refs`` beside the recorded objects): recorded with the digest."""
    recorded: bool = False
    """``status.checked`` holds this digest already: a restart would find it (no write need carry it)."""
    recovered: bool = False
    """A first check answered by ``status.checked`` (``unchanged``): what it read is remembered and followed."""
    health: str = live_status.Health.UNKNOWN.value
    """A recovered check's: the health recorded in ``status.checked`` with its digest."""


@dataclass(frozen=True)
class InstanceFacts:
    """What one pass of a reconcile decides on, read once."""

    key: Key
    instance: InstanceView
    entry: PlanEntry | None
    live_bindings: int
    """Bindings still referring to the instance (counted only while it is being deleted)."""
    pending: JsonObject | None
    """The record of an apply of this generation and plan version whose outcome is still awaited."""
    trusted: tuple[str, ...] = ()
    """The control plane's namespaces (where the broker records instances whose context it checked)."""
    limits: Limits = Limits()
    now: datetime.datetime = dataclasses.field(kw_only=True)
    """The moment of the read (observe's clock; the plan reads none): ages and transition times are measured from it."""
    actor: str | None = None
    """The identity the plan's objects are written as (its ServiceAccount; None: the controller's own)."""
    rendering: Rendering | None = None
    report: Report | None = None
    teardown: Teardown | None = None
    render_error: str | None = None
    """A template of the plan failed to render (apply, evaluation or teardown): why."""
    refusal: a.Refusal | None = None
    """The cluster refused a read the render needed (a source the plan's account may not read)."""
    watched_kinds: frozenset[tuple[str, str]] = frozenset()
    """The (apiVersion, kind)s whose watch is live at the read: a change of their objects enqueues the owner."""
    over_budget: str | None = None
    """Why the namespace may start no new operation now (``core.budgets.refusal``; None: it may)."""
    check: Check | None = None
    """Day two: what a settled instance's check read (``Step.CHECK``)."""
    first_check: Check | None = None
    """The check an operation's success makes before its write (None: not a success, or the check could not be
    made): found as declared, it is recorded with that write (:func:`first_checked`)."""
    shapes: Mapping[Any, str | None] = dataclasses.field(default_factory=dict)
    """Day two: the recorded objects' shapes (``drift.shape``) as the evaluation of an operation read them: at its
    success they are what was applied and reported ready, remembered as declared."""
    placement: PlacementFacts | None = None
    """Multi-cluster: what placing the instance depends on, as observe read it (None: one cluster, nothing to
    place). The plan's first branch (:func:`placed`)."""
    shard_labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Sharded (issue 46): the shard label the instance's rendered objects carry — this shard's, so its source
    watches follow them and the others' do not (empty unsharded; a shared singleton carries none)."""


# -- the pure plan ------------------------------------------------------------------------------------------

OsbAction = a.Action | PlacementAction
"""What an instance's or binding's plan returns: the one vocabulary, and placement's own writes (multi-cluster)."""


def placed(facts: InstanceFacts) -> tuple[OsbAction, ...] | None:
    """The plan's first branch: what multi-cluster placement does with the instance (scheduling it, handing it to its
    cluster, mirroring the copy back, deleting the copy...: :func:`.placement_plan.instance`); None when it is
    reconciled right here, as in one cluster."""
    if facts.placement is None:
        return None
    actions = placement_plan.instance(facts.placement)
    return None if actions is None else tuple(actions)


def _paused_where(facts: InstanceFacts) -> str | None:
    plan = facts.entry.view.meta if facts.entry is not None else None
    return decisions.paused_where(facts.instance.meta, plan, kind="instance")


def steps(facts: InstanceFacts) -> tuple[Step, ...]:
    """What the instance needs next (the first half of the plan, and what observe gathers facts for). Nothing
    when placement decides (:func:`placed`): nothing is rendered for an instance reconciled elsewhere."""
    if placed(facts) is not None:
        return ()
    view, entry = facts.instance, facts.entry
    paused = decisions.pause_step(view.meta, view.status, _paused_where(facts))
    if paused is not None:
        return () if paused is Step.NOTHING else (paused,)
    step = decisions.next_instance_step(
        view,
        plan_hash=entry.hash if entry else None,
        auto_update=bool(entry and entry.model and entry.model.spec.auto_update_instances),
        live_bindings=facts.live_bindings,
    )
    if step == Step.NOTHING:
        return ()
    if step in (Step.ADD_FINALIZER, Step.BLOCKED, Step.TEARDOWN):
        return (step,)
    if step == Step.CHECK:  # a settled instance whose plan is gone or broken keeps its last verdict
        return (step,) if entry is not None and entry.model is not None else ()
    if entry is None or entry.model is None:
        return (Step.REPORT_PLAN_PROBLEM,)
    if step == Step.APPLY and decisions.refuses_new_instance(view, entry.view):
        return (Step.REFUSE_WITHDRAWN,)
    if step == Step.APPLY and _context_refused(facts):
        return (Step.REFUSE_CONTEXT_NAMESPACE,)
    if step == Step.APPLY and facts.over_budget is not None and not view.status.in_progress:
        return (Step.WAIT_FOR_BUDGET,)
    if step in (Step.APPLY, Step.EVALUATE) and facts.pending is not None and view.status.in_progress:
        # Applied already, its record waiting for the outcome: a re-render with no new generation (a mass
        # update, a plan change) evaluates on the next pass as EVALUATE, and must still write that record
        # (appliedPlanHash, appliedSpec) with the outcome.
        return (Step.AWAIT_OUTCOME,)
    if step == Step.APPLY and not entry.view.meta.held and not entry.view.meta.deleting:
        return (Step.HOLD_PLAN,)  # applied once the plan is held: it cannot be deleted while this instance uses it
    return (step,)


def plan(facts: InstanceFacts) -> tuple[OsbAction, ...]:
    """Every decision of a pass: the actions the facts call for (placement's first, when it decides)."""
    placement = placed(facts)
    if placement is not None:
        return placement
    out: list[OsbAction] = []
    for step in steps(facts):
        out.extend(_expand(step, facts))
    return tuple(out)


def _expand(step: Step, facts: InstanceFacts) -> Sequence[a.Action]:
    entry = facts.entry
    if step == Step.PAUSE:
        return pause(facts.instance, facts.now, _paused_where(facts) or "")
    if step == Step.RESUME:
        return resume(facts.instance, facts.now)
    if step == Step.ADD_FINALIZER:
        return (a.EnsureFinalizer(), a.Continue())
    if step == Step.BLOCKED:
        error = f"cannot deprovision: {facts.live_bindings} binding(s) still exist; unbind them first"
        return (_transition(facts, OperationState.FAILED, Reason.BINDINGS_EXIST, error=error),)
    if step == Step.TEARDOWN:
        return _teardown(facts)
    if step == Step.CHECK:
        return check(facts)
    if step == Step.REPORT_PLAN_PROBLEM:
        return (_plan_problem(facts),)
    assert entry is not None
    if step == Step.HOLD_PLAN:
        # The plan's finalizer is its own reconciler's (core.finalizers.OWNERS): this instance brought the plan's
        # key to the queue (app.on_instance); the plan's event when it is held brings this instance back. The
        # requeue is the safety net under that event.
        return (a.Requeue(facts.limits.poll_seconds),)
    if step == Step.REFUSE_WITHDRAWN:
        error = f"plan {entry.view.meta.name!r} is being deleted: it takes no new instances"
        return (_answer_failed(facts, Reason.PLAN_WITHDRAWN, error),)
    if step == Step.REFUSE_CONTEXT_NAMESPACE:
        why = _context_refused(facts) or ""
        return (_answer_failed(facts, Reason.CONTEXT_NAMESPACE_REFUSED, why),)
    if step == Step.WAIT_FOR_BUDGET:
        return wait_for_budget(facts.instance, facts.now, facts.limits, facts.over_budget or "")
    if facts.render_error is not None:
        return _count_error(facts, facts.render_error, Reason.RENDER_FAILED)
    if facts.refusal is not None:
        return refused(facts, facts.refusal)
    if step == Step.APPLY:
        return _apply(facts)
    return _evaluate(facts, applied=facts.pending if step == Step.AWAIT_OUTCOME else {})


def refused(facts: InstanceFacts, refusal: a.Refusal) -> tuple[a.Action, ...]:
    """What to write when the cluster refused an object of the apply (the executor stopped there)."""
    if facts.check is not None:  # a correction of a settled instance: its operation stays as it ended
        return _check_refused(facts, refusal)
    if refusal.why is a.Refused.OBJECT and not refusal.permanent:  # fixable outside the request: count, retry
        return _count_error(facts, refusal.message, Reason.APPLY_FAILED)
    reason = {
        a.Refused.OBJECT: Reason.APPLY_REFUSED,
        a.Refused.NOT_OWNED: Reason.OBJECT_NOT_OWNED,
        a.Refused.SINGLETON_FULL: Reason.SINGLETON_FULL,
    }[refusal.why]
    return (_answer_failed(facts, reason, refusal.message, log=refusal.why is a.Refused.OBJECT),)


def _answer_failed(facts: InstanceFacts, reason: Reason, error: str, *, log: bool = False) -> a.WriteStatus:
    """The request is refused for good: failed, and this generation answered (``observedGeneration``), so no
    later event (the plan's hold, a watched object) applies it again; a new request (an update) does."""
    answered = {"observedGeneration": facts.instance.meta.generation}
    return _transition(facts, OperationState.FAILED, reason, error=error, extra=answered, log=log)


def _context_refused(facts: InstanceFacts) -> str | None:
    return decisions.context_namespace_refused(facts.instance, trusted_namespaces=facts.trusted)


def write_status(
    view: InstanceView | BindingView,
    now: datetime.datetime,
    state: OperationState,
    reason: Reason,
    *,
    description: str = "",
    error: str | None = None,
    extra: JsonObject | None = None,
    log: bool = False,
) -> a.WriteStatus:
    """Move an object (read as ``view``) to ``state``, with the Ready condition; an outcome that changes the state
    gets its Event. Shared by every kind with an OSB operation (instances, bindings)."""
    status = decisions.outcome_status(
        view.status, view.meta.generation, state=state, reason=reason, description=description, error=error, at=now
    )
    status.update(extra or {})
    settled = state in (OperationState.SUCCEEDED, OperationState.FAILED)
    event = None
    if settled and view.status.state != state.value:
        message = error or description or state.value
        event = a.Event(reason.value, message, warning=state == OperationState.FAILED, log=log)
    return a.WriteStatus(status, settled=settled, event=event)


def wait_for_budget(
    view: InstanceView | BindingView, now: datetime.datetime, limits: Limits, why: str
) -> tuple[a.Action, ...]:
    """A new operation that waits for its namespace's budget: its Ready condition says why (written once, not at
    every look — the state stays what the broker requested), and it is looked at again after ``poll_seconds``. Shared
    by instances and bindings."""
    ready = view.status.condition("Ready")
    again = a.Requeue(limits.poll_seconds)
    if ready is not None and ready.reason == Reason.NAMESPACE_BUDGET_EXCEEDED.value:
        return (again,)
    state = _requested_state(view.status.state)
    status = decisions.outcome_status(
        view.status, view.meta.generation, state=state, reason=Reason.NAMESPACE_BUDGET_EXCEEDED, description=why, at=now
    )
    event = a.Event(Reason.NAMESPACE_BUDGET_EXCEEDED.value, why, warning=True)
    return (a.WriteStatus(status, event=event), again)


def _requested_state(state: str | None) -> OperationState:
    """The state a waiting request keeps: the one the broker wrote (in queue, update), else in queue."""
    try:
        return OperationState(state) if state else OperationState.IN_QUEUE
    except ValueError:
        return OperationState.IN_QUEUE


def count_error(
    view: InstanceView | BindingView, now: datetime.datetime, threshold: int, message: str, reason: Reason
) -> tuple[a.Action, ...]:
    """One more consecutive error: give up past the threshold (the operation failed), else retry with backoff."""
    status, gave_up = decisions.error_status(
        view.status, view.meta.generation, message=message, threshold=threshold, at=now
    )
    if gave_up:
        return (
            a.WriteStatus(status, guarded=False),
            a.Event(Reason.GAVE_UP.value, text_of(status.get("error")) or message, warning=True, log=True),
        )
    return (a.WriteStatus(status, guarded=False), a.Event(reason.value, message, warning=True), a.Retry(message))


def all_watched(refs: Sequence[ResourceRef], kinds: frozenset[tuple[str, str]]) -> bool:
    """Whether every object of ``refs`` is of a kind in ``kinds`` (those watched): then the watch, not the poll,
    tells of its changes."""
    return all((ref.api_version, ref.kind) in kinds for ref in refs)


def still_in_progress(
    view: InstanceView | BindingView,
    now: datetime.datetime,
    limits: Limits,
    applied: JsonObject,
    version: tuple[Any, Any],
    *,
    watched: bool = False,
) -> tuple[a.Action, ...]:
    """The operator has not reported an outcome yet: look again later (keeping the apply's record), or fail the
    operation once it has run past ``max_operation_seconds`` (writing the record with the failure). ``watched``:
    every object the status template reads is of a watched kind, so the poll may back off with the operation's
    age; else it comes every ``poll_seconds``, the only news of a change."""
    age = decisions.overdue(view.status, max_seconds=limits.max_operation_seconds, at=now)
    if age is None:
        wait = decisions.poll_after(
            view.status,
            poll_seconds=limits.poll_seconds,
            max_seconds=limits.max_operation_seconds,
            max_poll_seconds=limits.max_poll_seconds if watched else None,
            at=now,
        )
        return (*((a.Remember(version, applied),) if applied else ()), a.Requeue(wait))
    error = (
        f"{view.status.last_operation_type or 'the operation'} timed out: no outcome {age:.0f}s after it was "
        f"requested (limit {limits.max_operation_seconds:.0f}s); the plan's status template still reports it in "
        "progress"
    )
    failed = write_status(view, now, OperationState.FAILED, Reason.TIMED_OUT, error=error, extra=applied, log=True)
    return (a.Forget(), failed)


def _transition(
    facts: InstanceFacts,
    state: OperationState,
    reason: Reason,
    *,
    description: str = "",
    error: str | None = None,
    extra: JsonObject | None = None,
    log: bool = False,
) -> a.WriteStatus:
    return write_status(
        facts.instance,
        facts.now,
        state,
        reason,
        description=description,
        error=error,
        extra=extra,
        log=log,
    )


def _count_error(facts: InstanceFacts, message: str, reason: Reason) -> tuple[a.Action, ...]:
    return count_error(facts.instance, facts.now, facts.limits.error_threshold, message, reason)


def _plan_problem(facts: InstanceFacts) -> a.WriteStatus:
    entry, plan_id = facts.entry, facts.instance.plan_id
    if entry is None:
        reason, error = Reason.PLAN_NOT_FOUND, f"plan {plan_id!r} is not in the catalog"
    elif entry.duplicates:
        reason, error = Reason.DUPLICATE_ID, f"plan {plan_id!r} is not served: {entry.problem}"
    else:
        reason, error = Reason.PLAN_INVALID, f"plan {plan_id!r} is invalid: {entry.problem}"
    return _transition(facts, OperationState.FAILED, reason, error=error)  # the plan's fix enqueues it again


def _apply(facts: InstanceFacts) -> tuple[a.Action, ...]:
    """Record, then apply ``provision``'s objects, release what it no longer renders, and continue: the next
    pass reads the outcome. Moving to ``in progress`` and recording the resources is one status write; the
    apply's own record rides along with the final state (kept meanwhile by ``Remember``)."""
    view, entry, rendering = facts.instance, facts.entry, facts.rendering
    assert entry is not None and rendering is not None
    meta = view.meta
    new_refs = [piece.ref for piece in rendering.pieces]
    old_refs = list(view.status.resources)
    # Each object's policy as its template says now; an object no longer rendered keeps the one recorded with it.
    new_orphans = orphans_of(rendering.pieces)
    orphans = [*minus_refs(list(view.status.orphans), new_refs), *new_orphans]
    labels = {LABEL_INSTANCE: meta.name, LABEL_PLAN: entry.view.meta.name}
    out: list[a.Action] = [
        _transition(  # record first, apply second: a crash in between leaves nothing unrecorded
            facts,
            OperationState.IN_PROGRESS,
            Reason.IN_PROGRESS,
            description="applying",
            extra={
                "resources": recorded(union_refs(old_refs, new_refs), orphans),
                **decisions.started_operation(view.status, at=facts.now),
            },
        )
    ]
    if rendering.registry_changed:
        out.append(a.SaveRegistry(rendering.registry, labels))
    for piece in rendering.pieces:
        step = apply_or_join(facts, piece)
        if isinstance(step, a.Refusal):  # as the executor stops at a refused object: the rest is not applied
            return (*out, *refused(facts, step))
        out.extend(step)
    gone = minus_refs(old_refs, new_refs)
    out.extend(no_longer_rendered(gone, rendering.released, view.status.orphans, meta.uid, facts.actor))
    record = {
        "resources": recorded(new_refs, new_orphans),
        "appliedSpec": view.spec,
        "appliedPlanHash": entry.hash,
        "observedGeneration": meta.generation,
        "errorCount": 0,
    }
    out += [a.Remember((meta.generation, entry.hash), record), a.Continue()]
    return tuple(out)


def apply_action(facts: InstanceFacts, piece: Piece) -> a.Apply:
    """The apply of one rendered object of the instance: stamped as its own, labelled with it and its plan, owned
    through an owner reference where one can reach it. The same for the first apply and a day-two correction."""
    view, entry = facts.instance, facts.entry
    assert entry is not None
    meta = view.meta
    labels = {LABEL_INSTANCE: meta.name, LABEL_PLAN: entry.view.meta.name}
    if not piece.singleton:  # shared by instances of any shard: followed by every shard's watch
        labels.update(facts.shard_labels)
    owned = piece.namespaced and same_namespace(piece.manifest, meta)
    manifest = stamp(dict(piece.manifest), owner=view, labels=labels, owned=owned, shared=piece.singleton)
    return a.Apply(
        manifest,
        owner_uid=meta.uid,
        owner_reference=reference_to(view),
        singleton=piece.singleton,
        owned=owned,
        adopt=piece.adopt,
        as_user=facts.actor,
    )


def apply_or_join(facts: InstanceFacts, piece: Piece) -> tuple[a.Action, ...] | a.Refusal:
    """The apply of one rendered object, decided on the object as observe read it (``Rendering.live``): refused
    when it exists and is someone else's (:func:`guarded`) — or, for a shared singleton that exists already, the
    write that joins it (:func:`.singleton_plan.joining`, guarded by the version read; nothing when the instance is
    one of its users already), or why it may not be joined. A singleton that did not exist is created: one made
    meanwhile is a conflict, and the next pass reads it and decides here."""
    assert facts.rendering is not None
    action = apply_action(facts, piece)
    live = held_of(facts.rendering.live, piece.ref).live
    if not piece.singleton:
        decided = guarded(action, piece.ref, live)
        if decided is None:
            return ()
        return decided if isinstance(decided, a.Refusal) else (decided,)
    if live is None:
        return (action,)
    step = singleton_plan.joining(live, piece.ref, action)
    if step is a.Refused.NOT_OWNED:
        return a.Refusal(step, decisions.not_owned_message(piece.ref))
    if step is a.Refused.SINGLETON_FULL:
        return a.Refusal(step, decisions.singleton_full_message(piece.ref))
    return () if step is None or isinstance(step, a.Refused) else (step,)


def guarded(apply: a.Apply, ref: ResourceRef, live: ObjectView | None) -> a.Apply | a.Refusal | None:
    """One object's apply, decided on the object as observe read it (``live``; None: there is none):

    * refused when it exists and is someone else's — only an owner's stamp (``owner_uid``'s or a co-owner's), or a
      template that declares adoption, lets it be written over (``decisions.takeover``); a record in a status
      proves nothing;
    * an amendment (``must_exist``: a binding's part of its instance's object) of an object that is gone: nothing
      to write (None) — and one that exists is written only onto that object (its uid: one deleted after the read
      is not re-created, half-specified, by the apply; found: an unbind racing its instance's deprovision
      re-created the database, unstamped, and the deprovision then waited for ever on an object not its own);
    * else the apply. An object created by someone else between the read and the apply is the one case this cannot
      see (server-side apply has no "create only").
    """
    if apply.must_exist and (live is None or not live.meta.uid):
        return None
    owners = (apply.owner_uid, *apply.co_owners)
    if decisions.takeover(live, owner_uids=owners, adopt=apply.adopt) is decisions.Takeover.REFUSE:
        return a.Refusal(a.Refused.NOT_OWNED, decisions.not_owned_message(ref))
    if apply.must_exist and live is not None:
        return dataclasses.replace(apply, uid=live.meta.uid)
    return apply


def guarded_in_order(
    applies: Sequence[tuple[a.Apply, ResourceRef]], live: Sequence[Held]
) -> tuple[list[a.Apply], a.Refusal | None]:
    """:func:`guarded` for each apply in turn, on its object as read among ``live``, up to the first one refused (as
    the executor stops at a refused object): the applies to make, and the refusal that ends them (None: none)."""
    made: list[a.Apply] = []
    for apply, ref in applies:
        decided = guarded(apply, ref, held_of(live, ref).live)
        if isinstance(decided, a.Refusal):
            return made, decided
        if decided is not None:
            made.append(decided)
    return made, None


def provisioned_by(report: Report | None) -> bool:
    """Whether ``report`` (an evaluation's) ends the operation as provisioned — a plan without a status template
    succeeds once applied. Only then are the recorded objects' shapes read (:attr:`InstanceFacts.shapes`): every
    other evaluation pass of an operation would read them for nothing."""
    if report is None:
        return False
    if not report.has_template:
        return True
    return report.section is not None and report.section.state == OperationState.SUCCEEDED.value


def _evaluate(facts: InstanceFacts, *, applied: JsonObject | None) -> tuple[a.Action, ...]:
    """Read the operation's outcome from the status template's ``provision`` section.

    ``applied``: the record of the apply whose outcome this is (empty: recorded already)."""
    view, report, entry = facts.instance, facts.report, facts.entry
    assert report is not None and entry is not None
    applied = dict(applied or {})
    if not report.has_template:
        dashboard = decisions.dashboard_url(None, dict(report.registry))
        extra = {**applied, **({"dashboardUrl": dashboard} if dashboard else {})}
        description = "resources applied (the plan has no status template)"
        track = a.Track(view.status.resources or recorded_refs(applied.get("resources")))
        record, seed = first_checked(facts, track.refs, live_status.Health.UNKNOWN)
        extra |= record
        outcome = _transition(facts, OperationState.SUCCEEDED, Reason.PROVISIONED, description=description, extra=extra)
        return (track, a.Forget(), dataclasses.replace(outcome, settled=False), seed)
    track = a.Track((*report.source_refs, *view.status.resources))
    section = report.section
    if section is None or section.state == OperationState.IN_PROGRESS.value:
        version = (view.meta.generation, entry.hash)
        waiting = still_in_progress(
            view, facts.now, facts.limits, applied, version, watched=all_watched(track.refs, facts.watched_kinds)
        )
        return (track, *waiting)
    reported = {
        "dashboardUrl": decisions.dashboard_url(section.dashboard_url, dict(report.registry)),
        "instanceUsable": section.instance_usable,
        "updateRepeatable": section.update_repeatable,
    }
    extra = {**applied, **{k: v for k, v in reported.items() if v is not None}}
    description = section.description or ""
    if section.state == OperationState.SUCCEEDED.value:
        # Provisioned: the instance stays followed (day two: its objects' changes bring it back for a check), and its
        # first check rides on this write (:func:`first_checked`).
        record, seed = first_checked(facts, track.refs, live_status.Health.READY)
        extra |= record
        outcome = _transition(facts, OperationState.SUCCEEDED, Reason.PROVISIONED, description=description, extra=extra)
        return (track, a.Forget(), dataclasses.replace(outcome, settled=False), seed)
    else:
        error = section.error or section.description or "the operator reported a failure"
        outcome = _transition(
            facts, OperationState.FAILED, Reason.FAILED, description=description, error=error, extra=extra
        )
    return (track, a.Forget(), outcome)


def _teardown(facts: InstanceFacts) -> tuple[a.Action, ...]:
    """Deprovision: release every recorded object, wait for the ones deleted and for the status template's
    ``deprovision`` verdict, then drop the registry and the finalizer."""
    view, gathered = facts.instance, facts.teardown
    assert gathered is not None
    meta = view.meta
    out: list[a.Action] = [a.Forget()]
    if not view.status.in_progress:
        out.append(_transition(facts, OperationState.IN_PROGRESS, Reason.DEPROVISIONING, description="deprovisioning"))
    scope = decisions.teardown_scope(
        list(view.status.resources), namespace=meta.namespace, namespace_terminating=gathered.terminating
    )
    letting = let_go(scope.release, gathered, view.status.orphans, meta.uid, facts.actor)
    out.extend(letting.actions)
    done = not letting.waiting
    report = facts.report
    if scope.run_templates and report is not None and report.has_template:
        out.append(a.Track((*report.source_refs, *view.status.resources)))
        section = report.section
        if facts.render_error is not None:
            if not done:
                return (*out, *_count_error(facts, facts.render_error, Reason.RENDER_FAILED))
            # Everything recorded is gone, and the status template cannot speak for it (most often it reads the
            # very objects that just went). Keeping the finalizer would hang the DELETE for good (a repeated
            # DELETE only repeats this): finish, and say why in a Warning event.
            message = (
                f"every recorded object is deleted; the status template could not confirm it: {facts.render_error}"
            )
            out.append(a.Event(Reason.DEPROVISION_UNCONFIRMED.value, message, warning=True, log=True))
            section = None
        if section is not None:
            if section.state == OperationState.FAILED.value:
                error = section.error or section.description or "deprovision failed"
                return (*out, _transition(facts, OperationState.FAILED, Reason.FAILED, error=error))
            done = done and section.state == OperationState.SUCCEEDED.value
    if not done:
        return (*out, a.Requeue(facts.limits.poll_seconds))
    if letting.orphaned:
        out.append(a.Event(Reason.ORPHANED.value, decisions.orphaned_message(letting.orphaned, why="deprovisioned")))
    if gathered.terminating:
        out.append(
            a.Event(Reason.NAMESPACE_TERMINATING.value, decisions.terminating_teardown_message(meta.namespace, scope))
        )
    return (*out, a.DropRegistry(), a.EnsureFinalizer(present=False), a.ForgetObject())


# -- day two: a settled instance kept as declared ------------------------------------------------------------


#: What the Synced condition says when every rendered object holds what its template renders.
IN_SYNC_MESSAGE = "every object the plan renders holds what its templates render"


def check(facts: InstanceFacts) -> tuple[a.Action, ...]:
    """Day two: keep a settled instance as declared, and show what its operator says of it.

    Every object ``provision`` renders now is compared with the live one (``core.drift``): one deleted, or with a
    field the template sets changed, is set back (``drift: correct``, as the plan's account, rate-limited per object
    with backoff), only reported (``report``: ``Synced=False``), or left (``ignore``). An object set back too often in
    a short time has another writer: correcting it stops (``Synced=False`` naming that writer). The status template's
    verdict becomes the Ready condition (``core.live_status``), debounced; ``state`` and ``lastOperation`` stay as the
    last operation left them. A check that finds everything as declared records what it read (``Checked``), so the
    next look with nothing changed costs no render."""
    view, limits, found = facts.instance, facts.limits, facts.check
    if found is None:
        return ()
    if found.unchanged:
        return _unchanged(facts, found)  # nothing moved since it was found as declared (the resync sweep looks again)
    now = facts.now
    out: list[a.Action] = [a.Track(found.refs)] if found.refs else []
    events: list[a.Event] = []
    waits: list[float] = []
    corrections = 0
    problem = facts.render_error or (facts.refusal.message if facts.refusal is not None else None)
    if problem is not None:
        reason = Reason.RENDER_FAILED if facts.render_error is not None else Reason.APPLY_REFUSED
        synced = Condition(SYNCED_CONDITION, False, reason, f"cannot check the rendered objects: {problem}")
    else:
        findings = drift_of(facts, found)
        out.extend(findings.corrections)
        if findings.refusal is not None:
            return (*out, *refused(facts, findings.refusal))
        corrections = len(findings.corrections)
        waits.extend(findings.waits)
        synced = findings.synced
    changes: list[Condition] = []
    if not shows(view, synced):  # (never True of an instance without the condition: shows says so)
        changes.append(synced)
        events.append(synced_event(synced))
    health = live_status.Health.UNKNOWN
    live_written = False
    verdict = live_status.verdict_of(facts.report.section) if facts.report and facts.report.has_template else None
    if verdict is not None and problem is None:
        health = verdict.health
        ready = view.status.condition("Ready")
        change = live_status.change(
            ready, verdict, last_write=found.last_live_write, now=now, min_seconds=limits.live_status_seconds
        )
        if change is not None and change.write:
            changes.append(Condition("Ready", verdict.ready, verdict.reason, verdict.message))
            events.append(a.Event(verdict.reason.value, verdict.message, warning=not verdict.ready))
            live_written = True
        elif change is not None:
            waits.append(change.wait)
    settled = not corrections and not waits and problem is None
    # What a restart needs to skip this render rides on a status write made anyway, never on one of its own: a write
    # per instance after it settled would meet the broker's guarded writes of a client's next request (a conflict)
    # and change every settled object once more.
    record = settled and not found.recorded
    if changes:
        patch = conditions_patch(view, changes, now)
        out.append(a.WriteStatus({**patch, **checked_status(found, health.value)} if record else patch))
        out.extend(events)
    versions = found.versions if settled else ()
    out.append(
        a.Checked(
            found.digest if settled else "",
            live_written=live_written,
            refs=found.refs,
            versions=versions,
            shapes=dict(found.shapes) if settled and synced.ok else {},  # a drift only reported is still there
            at=now,
        )
    )
    out.append(a.ReportHealth(health.value))
    if corrections:  # the corrections' own echoes are not events: look again soon to see them hold
        waits.append(limits.drift_bounds.backoff.base)
    if waits:
        out.append(a.Requeue(max(0.5, min(waits))))
    return tuple(out)


def _unchanged(facts: InstanceFacts, found: Check) -> tuple[a.Action, ...]:
    """Nothing the last check read has moved: nothing to do. A first check answered by ``status.checked`` (a
    restart's): what it read is remembered and followed, as a check that rendered would have left it, and the health
    recorded with it is what the instance-health metric counts from now on."""
    if found.recovered:
        checked = a.Checked(found.digest, refs=found.refs, versions=found.versions, at=facts.now)
        track = a.Track(found.refs, seen=tuple(zip(found.refs, found.versions, strict=True)))
        return (track, checked, a.ReportHealth(found.health))
    return ()


def first_checked(
    facts: InstanceFacts, refs: Sequence[ResourceRef], health: live_status.Health
) -> tuple[JsonObject, a.Checked]:
    """An operation's success is its instance's first check: what the success write records (``status.checked``)
    and what the controller remembers (``Checked``).

    The check was made in the same pass, before the write (``first_check``): every object ``provision`` renders
    compared with the live one, the versions of what it read taken as first read. Found as declared, its record
    rides on the success write — no write of its own, so a settled object is never written again for it (a broker
    request guarded by the version the client's last read saw is not beaten by it, a tenant's snapshot of its
    settled objects stays still) — and a restart, or the shard the instance moves to, answers its first check from
    it instead of rendering. Anything else (a drift, an object held back, no check made): nothing recorded; what it
    reads is remembered without versions, so the next resync sweep (``controller.resync``) checks it, as a check."""
    seed = a.Checked("", refs=tuple(refs), shapes=dict(facts.shapes))
    found = facts.first_check
    if found is None:
        return {}, seed
    findings = drift_of(facts, found)
    if findings.corrections or findings.waits or findings.refusal is not None or not findings.synced.ok:
        return {}, seed
    checked = a.Checked(found.digest, refs=found.refs, versions=found.versions, shapes=dict(found.shapes), at=facts.now)
    return checked_status(found, health.value), checked


def drift_of(facts: InstanceFacts, found: Check) -> Findings:
    """What the objects a check observed hold against their applies (:func:`find_drift`, at the facts' moment)."""
    return find_drift(
        [(seen, apply_action(facts, seen.piece)) for seen in found.observed], facts.now, facts.limits.drift_bounds
    )


def checked_status(found: Check, health: str) -> JsonObject:
    """The status field a restarted controller skips this check with (``status.checked``): what it read beside the
    recorded objects, the digest of it all (made with the controller's key) and the health the check found (what the
    instance-health metric counts: a skipped check asks no status template)."""
    return {"checked": {"sources": ref_dicts(list(found.sources)), "digest": found.digest, "health": health}}


def _check_refused(facts: InstanceFacts, refusal: a.Refusal) -> tuple[a.Action, ...]:
    """A correction the cluster refused (the plan's account may not write there; the object is someone else's now):
    the instance's operation stays as it ended, ``Synced=False`` says why, and the resync sweep looks again."""
    synced = Condition(SYNCED_CONDITION, False, Reason.APPLY_REFUSED, f"a correction was refused: {refusal.message}")
    return tuple(synced_actions(facts.instance, synced, facts.now))


@dataclass(frozen=True)
class Findings:
    """What comparing rendered objects with the live ones found (:func:`find_drift`)."""

    corrections: tuple[a.Correct, ...]
    waits: tuple[float, ...]
    """Seconds until an object held back (its backoff, or a fight's window) may be set back."""
    synced: Condition
    refusal: a.Refusal | None = None
    """An object to set back that is someone else's now (:func:`guarded`): the corrections before it are made,
    nothing after it, and the kind's ``refused`` plan says so (as an apply refused by the cluster)."""


def find_drift(observed: Sequence[tuple[Observed, a.Apply]], now: datetime.datetime, bounds: drift.Bounds) -> Findings:
    """Compare each rendered object (with the apply that writes it: an instance's, a binding's) with the live one,
    per its template's ``drift`` policy: what to set back now, what waits, and what ``Synced`` says. Shared by
    instances (:func:`check`) and bindings (their refresh)."""
    corrections: list[a.Correct] = []
    waits: list[float] = []
    fights: list[str] = []
    reported: list[str] = []
    for seen, action in observed:
        piece = seen.piece
        if piece.drift is DriftPolicy.IGNORE or piece.singleton:  # a shared singleton is left as it is
            continue
        paths = drift.differences(action.manifest, seen.live)
        if not paths:
            continue
        if piece.drift is DriftPolicy.REPORT:
            reported.append(drift.drift_message(piece.ref, paths, corrected=False))
            continue
        decision = drift.verdict(seen.history, now, bounds)
        if decision.verdict is drift.Verdict.CORRECT:
            decided = guarded(action, piece.ref, ObjectView.maybe(seen.live))
            if isinstance(decided, a.Refusal):
                return Findings(tuple(corrections), tuple(waits), _synced(fights, reported), decided)
            if decided is not None:  # None: an amendment of an object that is gone (its owner's check remakes it)
                corrections.append(a.Correct(decided, paths, now))
            continue
        waits.append(decision.after)
        if decision.verdict is drift.Verdict.FIGHT:
            fights.append(drift.fight_message(piece.ref, paths, seen.managers, bounds))
    return Findings(tuple(corrections), tuple(waits), _synced(fights, reported))


def _synced(fights: Sequence[str], reported: Sequence[str]) -> Condition:
    """What ``Synced`` says of the findings: a fight first, then what is only reported, else in sync."""
    if fights:
        return Condition(SYNCED_CONDITION, False, Reason.DRIFT_FIGHT, fights[0])
    if reported:
        return Condition(SYNCED_CONDITION, False, Reason.DRIFT_DETECTED, "; ".join(reported))
    return Condition(SYNCED_CONDITION, True, Reason.IN_SYNC, IN_SYNC_MESSAGE)


def synced_actions(view: InstanceView | BindingView, synced: Condition, now: datetime.datetime) -> list[a.Action]:
    """The ``Synced`` condition written when it changes (never to say True of an object that never drifted), with
    its Event. Shared by instances and bindings."""
    if shows(view, synced):
        return []
    return [a.WriteStatus(conditions_patch(view, [synced], now)), synced_event(synced)]


def synced_event(synced: Condition) -> a.Event:
    """The Event of a change of ``Synced``: a Warning with its message when it turns False, ``InSync`` when back."""
    if not synced.ok:
        return a.Event(synced.reason.value, synced.message, warning=True)
    return a.Event(Reason.IN_SYNC.value, IN_SYNC_MESSAGE)
