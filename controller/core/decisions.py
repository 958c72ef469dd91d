"""Pure decisions of the reconcilers: what to do next, and what the status should then say.

No I/O here, and no reading of wire bodies: every function takes the facts (the typed views of
:mod:`.views` — an instance, a binding, a live object's metadata, a Secret — the plan entry, counts) and
returns a decision or a status patch (a :data:`Manifest`: what the controller writes stays a plain dict).
The reconcilers perform what these decide, which keeps the state machine testable without a cluster
(tests/controller/test_decisions.py).
"""

from __future__ import annotations

import base64
import binascii
import datetime
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from opbroker.api.conventions import (
    ANNOTATION_OWNER_UID,
    ANNOTATION_PAUSED,
    ANNOTATION_SINGLETON,
    ANNOTATION_SINGLETON_USERS,
    CREDENTIALS_KEY,
    LABEL_MANAGED_BY,
    LABEL_PLAN,
    MANAGED_BY,
    PAUSED,
)
from opbroker.api.meta import ResourceRef
from opbroker.api.osb import OperationState
from opbroker.controller.core.conditions import Condition, condition, with_conditions
from opbroker.controller.core.digests import DigestKey
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.views import (
    BindingView,
    ConditionView,
    EntryView,
    InstanceView,
    Meta,
    ObjectView,
    OperationView,
    SecretView,
    conditions_of,
)
from opbroker.controller.runtime.objects import STAMP_LABELS, Manifest, ref_key
from opbroker.kubeclient.wire import JsonObject
from opbroker.rendering.registry import DASHBOARD_URL

#: States in which the broker has asked for work the controller has not started yet.
REQUESTED = frozenset({None, OperationState.IN_QUEUE.value, OperationState.UPDATE.value})
TERMINAL = frozenset({OperationState.SUCCEEDED.value, OperationState.FAILED.value})


class Step(StrEnum):
    """The next thing a reconcile does with an instance or binding."""

    NOTHING = "nothing"
    ADD_FINALIZER = "add-finalizer"
    APPLY = "apply"
    EVALUATE = "evaluate"
    TEARDOWN = "teardown"
    BLOCKED = "blocked"
    REPORT_PLAN_PROBLEM = "report-plan-problem"
    """The plan is missing from the catalog or invalid: say so in the status."""
    AWAIT_OUTCOME = "await-outcome"
    """Applied already (the record waits in memory); read the operation's state back."""
    ABANDON = "abandon"
    """A binding whose instance is gone or going: fail it (and remove it if it never bound)."""
    REPORT_INSTANCE_FAILED = "report-instance-failed"
    """A binding requested on an instance whose last operation failed."""
    REFRESH = "refresh"
    """A settled binding whose credentials' sources changed: render them again, rewrite them if they moved."""
    HOLD_PLAN = "hold-plan"
    """Before an instance's first apply: wait until the plan carries the finalizer that keeps it while instances use
    it (its own reconciler adds it, ``entry_guard``)."""
    REFUSE_WITHDRAWN = "refuse-withdrawn"
    """A new instance of a plan being deleted: fail it (the plan takes no new instances)."""
    REFUSE_CONTEXT_NAMESPACE = "refuse-context-namespace"
    """An instance whose request context names a namespace other than its own: fail it, apply nothing."""
    WAIT_FOR_BUDGET = "wait-for-budget"
    """A new operation in a namespace at its budget (``core.budgets``): say so in Ready, look again later."""
    PAUSE = "pause"
    """Paused (:func:`pause_step`), not said yet: the ``Paused`` condition and an Event, nothing else."""
    RESUME = "resume"
    """The pause is lifted: ``Paused`` becomes False, then the next pass decides from the facts as usual."""
    CHECK = "check"
    """Day two: a provisioned instance, settled — its status template's verdict shown live, its rendered objects
    compared with the live ones (``core.drift``, ``core.live_status``)."""


def is_deleting(obj: JsonObject) -> bool:
    """Whether a body (as read) is being deleted; code holding a view asks ``view.meta.deleting``."""
    return Meta.of(obj.get("metadata")).deleting


def next_instance_step(instance: InstanceView, *, plan_hash: str | None, auto_update: bool, live_bindings: int) -> Step:
    """Decide what an instance needs next (the plan itself is checked by the caller)."""
    meta, status = instance.meta, instance.status
    if meta.deleting:
        if not meta.held:
            return Step.NOTHING
        return Step.BLOCKED if live_bindings else Step.TEARDOWN
    if not meta.held:
        return Step.ADD_FINALIZER
    if status.state in REQUESTED or instance.generation_pending:
        return Step.APPLY
    if auto_update and plan_hash is not None and instance.applied_plan_hash not in (None, plan_hash):
        return Step.APPLY
    if status.in_progress:
        return Step.EVALUATE
    if status.state == OperationState.SUCCEEDED.value:
        return Step.CHECK
    return Step.NOTHING


def drift_checked(instance: InstanceView, *, plan_hash: str | None) -> bool:
    """Whether a settled instance's objects are compared with what its plan renders now: only while the plan is
    the version it was applied with. A plan changed since (``autoUpdateInstances`` off, or the update not rolled
    out yet) renders something the instance never asked for; correcting to it would be an update nobody
    requested. Its live status is still shown."""
    return instance.applied_plan_hash in (None, plan_hash)


def next_binding_step(binding: BindingView, *, instance_state: str | None) -> Step:
    """Decide what a binding needs next."""
    meta, status = binding.meta, binding.status
    if meta.deleting:
        return Step.TEARDOWN if meta.held else Step.NOTHING
    if not meta.held:
        return Step.ADD_FINALIZER
    if status.state in REQUESTED or binding.generation_pending:
        return Step.APPLY if instance_state == OperationState.SUCCEEDED.value else Step.BLOCKED
    if status.in_progress:
        return Step.EVALUATE
    if status.state == OperationState.SUCCEEDED.value:
        # Bound: the credentials follow the objects they were read from (a rotated password, a moved host).
        return Step.REFRESH
    return Step.NOTHING


# -- pause (issue 43): an administrator stops everything but the deletion -----------------------------------------

#: The condition a pause is reported in (True while paused, False with reason ``Resumed`` once lifted).
PAUSED_CONDITION = "Paused"


def paused_where(meta: Meta, plan: Meta | None, *, kind: str) -> str | None:
    """Where the pause of an object (``kind``: instance, binding) comes from, in words: its own annotation, its plan's
    (the catalog entry the reconcile holds), or both; None when neither pauses it (:attr:`Meta.paused`)."""
    places = []
    if meta.paused:
        places.append(f"the {kind} itself")
    if plan is not None and plan.paused:
        places.append(f"its plan {plan.namespace}/{plan.name}")
    return " and ".join(places) or None


def paused_message(where: str) -> str:
    """What the ``Paused`` condition and its Event say of a pause found on ``where``."""
    return (
        f'reconciling is paused by the annotation {ANNOTATION_PAUSED}: "{PAUSED}" on {where}: nothing is applied, '
        "evaluated or refreshed until it is removed; a deletion still proceeds"
    )


RESUMED_MESSAGE = f"the annotation {ANNOTATION_PAUSED} is gone: reconciling resumes from the live state"


def pause_step(meta: Meta, status: OperationView, where: str | None) -> Step | None:
    """What a pause asks of a reconcile before any other decision, ``where`` being :func:`paused_where`'s answer.

    None: not paused, and no pause to lift — decide as usual. :attr:`Step.NOTHING`: paused, and the condition says
    so already (written once, not at every look: the object's and its plan's events keep coming). :attr:`Step.PAUSE`:
    paused, not said yet (or said of another place). :attr:`Step.RESUME`: the condition says paused, the annotations
    no longer do. A deletion is never paused: the teardown runs whatever the annotations say, so a deprovision or an
    unbind is never blocked by a pause."""
    if meta.deleting:
        return None
    said = status.condition(PAUSED_CONDITION)
    if where is not None:
        current = said is not None and said.status == "True" and said.message == paused_message(where)
        return Step.NOTHING if current else Step.PAUSE
    if said is not None and said.status == "True":
        return Step.RESUME
    return None


def pause_status(
    status: OperationView, generation: int | None, *, paused: bool, message: str, at: datetime.datetime
) -> Manifest:
    """The status patch of a pause (``paused``) or of its end: the ``Paused`` condition set, every other condition
    written back as read (a patch replaces the list), nothing else — the operation's state stays as it was."""
    change = Condition(PAUSED_CONDITION, paused, Reason.PAUSED if paused else Reason.RESUMED, message)
    return {"conditions": with_conditions(status.conditions, [change], generation, at)}


def credentials_changed(secret: SecretView | None, response: JsonObject) -> bool:
    """Whether the binding's credentials Secret (as read; None: missing) no longer holds ``response``.

    Compared as JSON values, so key order or formatting never cause a write; an unreadable Secret is rewritten.
    """
    encoded = secret.data.get(CREDENTIALS_KEY) if secret is not None else None
    if encoded is None:
        return True
    try:
        held = json.loads(base64.b64decode(encoded, validate=True))
    except (binascii.Error, ValueError):
        return True
    return bool(held != response)


def sources_digest(
    *,
    key: DigestKey,
    plan_hash: str | None,
    instance: Meta,
    binding: Meta,
    versions: list[tuple[ResourceRef, str | None]],
) -> str:
    """What a bound binding's credentials were rendered from, in a few bytes: the plan version, the
    instance's and the binding's uid and generation, and each source's resourceVersion (None: missing).

    The same digest means the status template would read the same objects again, so the credentials need
    not be rendered (nor their Secret read) to know they still hold: after a restart, every bound binding
    is checked this way against ``status.sourcesDigest`` instead of being rendered again, and every settled instance
    against ``status.checked``. Made with the controller's ``key`` (an HMAC, ``core.digests``): a digest a tenant wrote
    into its object's status matches nothing.
    """
    facts = [
        plan_hash,
        [(meta.uid or None, meta.generation) for meta in (instance, binding)],
        sorted((ref_key(ref), version or "") for ref, version in versions),
    ]
    return key.digest(json.dumps(facts, separators=(",", ":")).encode())


def operation_age(status: OperationView, *, at: datetime.datetime) -> float | None:
    """Seconds since the object's current operation began (``status.operationStartedAt``, written by the
    controller, else the broker's ``lastOperation.startedAt``); None when no start is recorded or readable."""
    started = status.started_at or status.requested_at
    if started is None:
        return None
    try:
        when = datetime.datetime.fromisoformat(started)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return (at - when).total_seconds()


def started_operation(status: OperationView, *, at: datetime.datetime) -> dict[str, str]:
    """The status field to write with the move to ``in progress``, so the operation's age can be measured:
    the broker's ``lastOperation.startedAt`` when the broker asked for this operation (state ``in_queue`` or
    ``update``), else now — a change made through the API, a plan roll-out, an object created without the
    broker. ``lastOperation`` itself is the broker's record of its requests and is never written here."""
    if status.state in REQUESTED - {None} and status.requested_at is not None:
        return {"operationStartedAt": status.requested_at}
    moment = at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"operationStartedAt": moment}


def overdue(status: OperationView, *, max_seconds: float, at: datetime.datetime) -> float | None:
    """The operation's age if it has run longer than ``max_seconds`` (0: no limit), else None."""
    age = operation_age(status, at=at)
    if max_seconds <= 0 or age is None or age <= max_seconds:
        return None
    return age


def poll_after(
    status: OperationView,
    *,
    poll_seconds: float,
    max_seconds: float,
    max_poll_seconds: float | None = None,
    at: datetime.datetime,
) -> float:
    """When to look at an in-progress operation again.

    The poll is a safety net: a change of any object the status template reads enqueues the owner through its
    source watch at once (the caller passes ``max_poll_seconds`` only when every such object's kind is watched).
    So the interval grows with the operation's age — ``poll_seconds`` while it is young, then half its age, at
    most ``max_poll_seconds`` (None: no growth) — and an operation that waits long (a slow operator, a backlog
    of thousands) is re-evaluated about a dozen times, not once per ``poll_seconds`` for as long as it waits.
    It never comes later than the operation's deadline, so a timed-out operation fails on time, not up to a
    poll later."""
    age = operation_age(status, at=at)
    if age is None:
        return poll_seconds
    wait = poll_seconds
    if max_poll_seconds is not None and max_poll_seconds > poll_seconds:
        wait = min(max(poll_seconds, age / 2), max_poll_seconds)
    if max_seconds <= 0:
        return wait
    return max(0.5, min(wait, max_seconds - age + 0.5))


def resync_after(uid: str, seconds: float) -> float:
    """When a settled object is looked at again without any event (the safety net for a missed one): ``seconds``
    spread over ±10 % by the object's uid, so 20 000 objects settled in one burst do not all come back in the same
    second — each keeps its own phase, every period."""
    if seconds <= 0:
        return 0.0
    fraction = int(hashlib.sha256(uid.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return seconds * (0.9 + 0.2 * fraction)


def ready_condition(
    previous: list[Manifest] | None,
    *,
    ready: bool,
    reason: Reason,
    message: str,
    generation: int | None,
    at: datetime.datetime,
) -> list[Manifest]:
    """The conditions list (as read, kept as they are) with Ready set; the transition time (``at``)
    only moves when the status flips."""
    old = next(iter(conditions_of([c for c in (previous or []) if c.get("type") == "Ready"][:1])), None)
    kept = [c for c in (previous or []) if c.get("type") != "Ready"]  # as read: a Service Catalog one has more fields
    return [*kept, condition(Condition("Ready", ready, reason, message), old, generation, at)]


def ready_conditions(
    previous: Sequence[ConditionView],
    *,
    ready: bool,
    reason: Reason,
    message: str,
    generation: int | None,
    at: datetime.datetime,
) -> list[Manifest]:
    """:func:`ready_condition` over a view's conditions: the others written back as read, Ready set."""
    return with_conditions(previous, [Condition("Ready", ready, reason, message)], generation, at)


def outcome_status(
    status: OperationView,
    generation: int | None,
    *,
    state: OperationState,
    reason: Reason,
    description: str = "",
    error: str | None = None,
    at: datetime.datetime,
) -> Manifest:
    """A status patch announcing ``state`` for an object whose status reads ``status`` and whose generation is
    ``generation``, with the Ready condition to match (changed ``at``)."""
    ready = state == OperationState.SUCCEEDED
    message = error or description or state.value
    return {
        "state": state.value,
        "description": description or None,
        "error": error,
        "conditions": ready_conditions(
            status.conditions, ready=ready, reason=reason, message=message, generation=generation, at=at
        ),
    }


def error_status(
    status: OperationView, generation: int | None, *, message: str, threshold: int, at: datetime.datetime
) -> tuple[Manifest, bool]:
    """Count one more consecutive error; past ``threshold`` the operation is failed for good.

    Returns the status patch and whether the controller gave up (no more retries until a new request).
    """
    count = status.error_count + 1
    if count >= threshold:
        patch = outcome_status(
            status,
            generation,
            state=OperationState.FAILED,
            reason=Reason.GAVE_UP,
            error=f"gave up after {count} consecutive errors: {message}",
            at=at,
        )
        patch["errorCount"] = count
        patch["observedGeneration"] = generation
        return patch, True
    return {"errorCount": count, "description": f"retrying after error {count}/{threshold}: {message}"}, False


def dashboard_url(reported: str | None, registry: JsonObject | None) -> str | None:
    """The instance's dashboard URL: what the status template reports, else the registry's ``dashboard-url``
    (the Couchbase broker's read-write key, set by a template with ``setRegistry``); None when neither has
    one (or the registry's is not a non-empty string)."""
    if reported:
        return reported
    value = (registry or {}).get(DASHBOARD_URL)
    return value if isinstance(value, str) and value else None


@dataclass(frozen=True)
class TeardownScope:
    """What a teardown (deprovision, unbind) does: run the plan's templates (``unbind`` objects applied, the
    ``status`` template asked), and which recorded objects to release and wait for."""

    run_templates: bool
    release: tuple[ResourceRef, ...]
    #: Recorded objects left to the namespace's deletion (they go with it).
    left: tuple[ResourceRef, ...] = ()


def teardown_scope(refs: list[ResourceRef], *, namespace: str, namespace_terminating: bool) -> TeardownScope:
    """The teardown of an object in ``namespace``. Normally: templates, and every recorded object.

    In a terminating namespace nothing may be created (an unbind template's objects would be refused with
    403 forever, and the object's finalizer would hold the namespace's deletion for good), and everything in
    it is being deleted anyway: no templates, and only what lives elsewhere (another namespace, cluster
    scoped) is released and waited for.
    """
    if not namespace_terminating:
        return TeardownScope(run_templates=True, release=tuple(refs))
    elsewhere = tuple(ref for ref in refs if ref.namespace != namespace)
    left = tuple(ref for ref in refs if ref.namespace == namespace)
    return TeardownScope(run_templates=False, release=elsewhere, left=left)


def terminating_teardown_message(namespace: str, scope: TeardownScope) -> str:
    """The Event (and log line) of a teardown finished without templates in a terminating namespace."""
    return (
        f"namespace {namespace!r} is being deleted: the plan's teardown templates were not run (nothing can be "
        f"created there); {len(scope.left)} object(s) in it go with it, {len(scope.release)} elsewhere released"
    )


# -- SFPlans in use: a plan cannot be deleted under live instances -------------------------------------------


class PlanGuard(StrEnum):
    """What the finalizer of an SFPlan (or an SFService) needs."""

    NOTHING = "nothing"
    HOLD = "hold"
    """Instances use it: add the finalizer."""
    WAIT = "wait"
    """Being deleted while instances use it: keep the finalizer, and say why."""
    RELEASE = "release"
    """Being deleted and unused: drop the finalizer."""


def entry_needs_count(meta: Meta) -> bool:
    """Whether a catalog entry's guard depends on how many objects use it (counting them is a cluster-wide list):
    a held entry that is not being deleted keeps its finalizer without counting, and nothing can be added to one
    being deleted that is not held."""
    return meta.deleting == meta.held


def entry_guard(meta: Meta, *, users: int, hold_unused: bool = False) -> PlanGuard:
    """The finalizer step of a catalog entry (an SFPlan, or an SFService: issue 29) that ``users`` objects use.
    ``hold_unused``: held before anything uses it — sharded (issue 46), the instances that would ask for their plan's
    hold are other shards' and not seen here; the deletion still waits for, and counts, the users."""
    if meta.deleting:
        if not meta.held:
            return PlanGuard.NOTHING
        return PlanGuard.WAIT if users else PlanGuard.RELEASE
    return PlanGuard.HOLD if (users or hold_unused) and not meta.held else PlanGuard.NOTHING


def plan_users(instances: Iterable[InstanceView], plan_id: str) -> int:
    """How many of ``instances`` use the plan ``plan_id``. One being deleted without our finalizer is gone
    already (its DELETE completes without us), so it does not count."""
    return sum(1 for instance in instances if instance.plan_id == plan_id and not instance.meta.leaving)


@dataclass(frozen=True)
class ServiceUsers:
    """What keeps an SFService from going (issue 29): the trusted SFPlans and the instances naming its id."""

    plans: int
    instances: int

    def __bool__(self) -> bool:
        return bool(self.plans or self.instances)


def service_users(plans: Iterable[EntryView], instances: Iterable[InstanceView], service_id: str) -> ServiceUsers:
    """Who uses the service ``service_id``: ``plans`` declaring it (a plan deleted without our finalizer is
    gone already and does not count; one held by its instances does) and ``instances`` naming it (counted as
    :func:`plan_users` counts)."""
    return ServiceUsers(
        plans=sum(1 for plan in plans if plan.service_id == service_id and not plan.meta.leaving),
        instances=sum(1 for i in instances if i.service_id == service_id and not i.meta.leaving),
    )


def withdrawn(plan: EntryView | None) -> bool:
    """A plan being deleted is withdrawn: it takes no new instances; its existing ones keep working."""
    return plan is not None and plan.meta.deleting


def refuses_new_instance(instance: InstanceView, plan: EntryView | None) -> bool:
    """Whether ``instance`` is a new provision (nothing applied yet) of a withdrawn plan."""
    never_applied = not instance.status.records_resources and instance.applied_plan_hash is None
    return withdrawn(plan) and not instance.meta.deleting and never_applied


# -- ownership (issue 24): what opbroker may do to an object that exists already ---------------------------------


class Takeover(StrEnum):
    """What applying a rendered object may do, given the live object."""

    CREATE = "create"
    """It does not exist: create it (stamped as the owner's)."""
    UPDATE = "update"
    """It carries the owner's stamp: apply."""
    ADOPT = "adopt"
    """It exists unstamped and the plan's template declares adoption: apply, which stamps it."""
    REFUSE = "refuse"
    """It exists and is someone else's: leave it untouched and fail the operation."""


def takeover(live: ObjectView | None, *, owner_uids: tuple[str, ...], adopt: bool) -> Takeover:
    """Whether a rendered object may be written over ``live``: only one stamped as one of ``owner_uids`` (an
    instance's, or a binding's and its instance's), or any when the template adopts. A record in a status
    proves nothing; the live object's stamp does."""
    if live is None:
        return Takeover.CREATE
    if any(live.meta.stamped(uid) for uid in owner_uids):
        return Takeover.UPDATE
    return Takeover.ADOPT if adopt else Takeover.REFUSE


def not_owned_message(ref: ResourceRef) -> str:
    """Why an object of that name is left untouched: it exists and is not the writer's (:func:`takeover`)."""
    where = f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name
    return (
        f"{ref.kind} {where} exists and was not created by opbroker for this object; it is left untouched "
        "(declare adopt: true on the plan's template to take such objects over)"
    )


class Letting(StrEnum):
    """What releasing a recorded object does."""

    GONE = "gone"
    DELETE = "delete"
    WAIT = "wait"
    """Ours and being deleted already."""
    UNOWN = "unown"
    """Shared with other owners: drop our owner reference, it lives on."""
    LEAVE = "leave"
    """Not ours (no stamp, no owner reference of ours): never deleted or changed, whatever a status records."""


def letting_go(live: ObjectView | None, *, owner_uid: str) -> Letting:
    """How to let go of ``live``, recorded as ``owner_uid``'s: only an object stamped as its own, or owned by it
    through an owner reference (a shared singleton, or an object from before stamps), is ever touched."""
    if live is None:
        return Letting.GONE
    meta = live.meta
    users = singleton_users(meta)
    referenced = meta.owned_by(owner_uid) or owner_uid in users
    if not referenced and not meta.stamped(owner_uid):
        return Letting.LEAVE
    if any(uid != owner_uid for uid in meta.owner_uids) or any(u != owner_uid for u in users):
        return Letting.UNOWN if referenced else Letting.LEAVE
    return Letting.WAIT if meta.deleting else Letting.DELETE


def orphaning(live: ObjectView | None, *, owner_uid: str) -> Manifest | None:
    """The metadata merge patch that lets ``owner_uid`` go of ``live`` and leaves it in place (its template's
    ``deletionPolicy: orphan``); None when nothing on it is the owner's — gone, being deleted already, or not its
    (:func:`letting_go`'s LEAVE, which is also what an object orphaned before reads as).

    Dropped: the owner's reference (the garbage collector would delete the object with its owner), its entry among a
    shared singleton's users, and its stamp (:data:`ANNOTATION_OWNER_UID`: no later owner of that uid may write over
    it). While another owner holds it (a singleton's other instances) opbroker's labels stay, since those owners'
    rules read them (:func:`shared_singleton`); with none left the labels :func:`~.objects.stamp` adds go too, so the
    object is nobody's of opbroker's and no listing of opbroker's own objects picks it up again. Guarded by the
    version read (a 409 re-reads)."""
    step = letting_go(live, owner_uid=owner_uid)
    if live is None or step not in (Letting.DELETE, Letting.UNOWN):
        return None
    meta = live.meta
    patch: Manifest = {"resourceVersion": meta.resource_version}
    if meta.owned_by(owner_uid):
        patch["ownerReferences"] = [dict(o.wire) for o in meta.owners if o.uid != owner_uid]
    annotations: dict[str, str | None] = {}
    if meta.stamped(owner_uid):
        annotations[ANNOTATION_OWNER_UID] = None
    users = singleton_users(meta)
    if owner_uid in users:
        annotations[ANNOTATION_SINGLETON_USERS] = users_annotation(u for u in users if u != owner_uid)
    if annotations:
        patch["annotations"] = annotations
    if step is Letting.DELETE:
        labels = {
            name: None
            for name in STAMP_LABELS
            if name in meta.labels and (name != LABEL_MANAGED_BY or meta.labels[name] == MANAGED_BY)
        }
        if labels:
            patch["labels"] = labels
    return patch


#: The most objects an :func:`orphaned_message` names (an Event's message is cut at 1 024 characters).
ORPHANS_NAMED = 10


def orphaned_message(refs: Sequence[ResourceRef], *, why: str) -> str:
    """The Event of objects let go without deletion (``deletionPolicy: orphan``), each named by kind, namespace and
    name; ``why`` says when (the teardown, an update that no longer renders them)."""
    named = [f"{ref.kind} {ref.namespace}/{ref.name}" if ref.namespace else f"{ref.kind} {ref.name}" for ref in refs]
    more = len(named) - ORPHANS_NAMED
    listed = ", ".join(named[:ORPHANS_NAMED]) + (f" and {more} more" if more > 0 else "")
    return f"{why}: left in place, no longer managed by opbroker (deletionPolicy: orphan): {listed}"


#: The most instances one tracked singleton may list (:data:`ANNOTATION_SINGLETON_USERS`): 39 bytes a uid, so
#: 5 000 stay under 200 KiB, clear of the API server's 256 KiB for all of an object's annotations together.
MAX_SINGLETON_USERS = 5000


def singleton_users(meta: Meta | None) -> tuple[str, ...]:
    """The instances a shared singleton records as its users (:data:`ANNOTATION_SINGLETON_USERS`); none when it
    records none or the annotation is not a JSON list of strings (written by hand: nobody is taken for a user)."""
    raw = meta.annotations.get(ANNOTATION_SINGLETON_USERS) if meta is not None else None
    if raw is None:
        return ()
    try:
        users = json.loads(raw)
    except json.JSONDecodeError:
        return ()
    if not isinstance(users, list) or not all(isinstance(u, str) for u in users):
        return ()
    return tuple(users)


def users_annotation(users: Iterable[str]) -> str | None:
    """The annotation's value for ``users`` (sorted, each once); None — remove it — for nobody."""
    unique = sorted(set(users))
    return json.dumps(unique, separators=(",", ":")) if unique else None


def shared_singleton(live: Meta, *, plan_label: str | None) -> bool:
    """Whether an existing object (its metadata) is a singleton opbroker made for this plan (so an instance may
    share it)."""
    return (
        live.annotations.get(ANNOTATION_SINGLETON) == "true"
        and bool(plan_label)
        and live.labels.get(LABEL_PLAN) == plan_label
    )


def singleton_user(live: Meta, owner_uid: str) -> bool:
    """Whether an existing singleton already counts the instance ``owner_uid`` among its users (its owner
    reference, or its entry in :data:`ANNOTATION_SINGLETON_USERS`): that instance applying it again (an update, a
    roll-out) is one of its sharers, not a stranger taking it over — even on a singleton made before the stamp
    annotated every singleton (:func:`~.objects.stamp`), which :func:`shared_singleton` does not recognise."""
    return live.owned_by(owner_uid) or owner_uid in singleton_users(live)


def context_namespace_refused(instance: InstanceView, *, trusted_namespaces: tuple[str, ...]) -> str | None:
    """Why the request context's namespace may not receive this instance's objects (None: it may).

    The OSB context names where a consumer's objects go; the broker accepts only namespaces the platform allows
    and records the instance there (or, without context namespaces, in the control plane's namespace). An
    instance created directly in a tenant's namespace may name only that namespace: anything else would let one
    tenant direct a plan's objects into another's namespace."""
    wanted, home = instance.context_namespace, instance.meta.namespace
    if not wanted or wanted == home or home in trusted_namespaces:
        return None
    return (
        f"the request's context names namespace {wanted!r}, but the instance lives in {home!r}: an instance may "
        "direct its objects only into its own namespace (instances recorded by the broker in the control plane's "
        "namespace excepted)"
    )


def singleton_full_message(ref: ResourceRef) -> str:
    """Why an instance may not join a singleton: it lists :data:`MAX_SINGLETON_USERS` instances already."""
    where = f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name
    return (
        f"{ref.kind} {where} is shared by {MAX_SINGLETON_USERS} instances already, the most opbroker "
        "tracks on one object; give the plan's singleton a name per group of instances"
    )
