"""Pure decisions of the reconcilers: what to do next, and what the status should then say.

No I/O here: every function takes the facts (the object as on the wire, the plan entry, counts) and
returns a decision or a status patch. The reconcilers perform what these decide, which keeps the state
machine testable without a cluster (tests/controller/test_controller_decisions.py).
"""

from __future__ import annotations

import base64
import binascii
import datetime
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from opbroker.api.conventions import (
    ANNOTATION_SINGLETON,
    ANNOTATION_SINGLETON_USERS,
    CREDENTIALS_KEY,
    FINALIZER,
    LABEL_PLAN,
    owned_by,
)
from opbroker.api.meta import ResourceRef
from opbroker.api.osb import OperationState
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.views import Meta
from opbroker.controller.objects import ref_key
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
    """Before an instance's first apply: the plan gains the finalizer that keeps it while instances use it."""
    REFUSE_WITHDRAWN = "refuse-withdrawn"
    """A new instance of a plan being deleted: fail it (the plan takes no new instances)."""
    REFUSE_CONTEXT_NAMESPACE = "refuse-context-namespace"
    """An instance whose request context names a namespace other than its own: fail it, apply nothing."""


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = obj.get("metadata") or {}
    return meta


def _status(obj: dict[str, Any]) -> dict[str, Any]:
    status: dict[str, Any] = obj.get("status") or {}
    return status


def is_deleting(obj: dict[str, Any]) -> bool:
    return bool(_meta(obj).get("deletionTimestamp"))


def has_finalizer(obj: dict[str, Any]) -> bool:
    return FINALIZER in (_meta(obj).get("finalizers") or [])


def generation_pending(obj: dict[str, Any]) -> bool:
    """True if the spec changed since the controller last applied it."""
    return _meta(obj).get("generation") != _status(obj).get("observedGeneration")


def fingerprint(obj: dict[str, Any]) -> tuple[Any, ...]:
    """What a reconcile decides on; an event that leaves it unchanged needs no reconcile."""
    meta = _meta(obj)
    return (
        meta.get("generation"),
        meta.get("deletionTimestamp"),
        has_finalizer(obj),
        _status(obj).get("state"),
        _status(obj).get("observedGeneration"),
    )


def next_instance_step(
    instance: dict[str, Any], *, plan_hash: str | None, auto_update: bool, live_bindings: int
) -> Step:
    """Decide what an instance needs next (the plan itself is checked by the caller)."""
    status = _status(instance)
    if is_deleting(instance):
        if not has_finalizer(instance):
            return Step.NOTHING
        return Step.BLOCKED if live_bindings else Step.TEARDOWN
    if not has_finalizer(instance):
        return Step.ADD_FINALIZER
    if status.get("state") in REQUESTED or generation_pending(instance):
        return Step.APPLY
    if auto_update and plan_hash is not None and status.get("appliedPlanHash") not in (None, plan_hash):
        return Step.APPLY
    if status.get("state") == OperationState.IN_PROGRESS.value:
        return Step.EVALUATE
    return Step.NOTHING


def next_binding_step(binding: dict[str, Any], *, instance_state: str | None) -> Step:
    """Decide what a binding needs next."""
    status = _status(binding)
    if is_deleting(binding):
        return Step.TEARDOWN if has_finalizer(binding) else Step.NOTHING
    if not has_finalizer(binding):
        return Step.ADD_FINALIZER
    if status.get("state") in REQUESTED or generation_pending(binding):
        return Step.APPLY if instance_state == OperationState.SUCCEEDED.value else Step.BLOCKED
    if status.get("state") == OperationState.IN_PROGRESS.value:
        return Step.EVALUATE
    if status.get("state") == OperationState.SUCCEEDED.value:
        # Bound: the credentials follow the objects they were read from (a rotated password, a moved host).
        return Step.REFRESH
    return Step.NOTHING


def credentials_changed(secret: dict[str, Any] | None, response: dict[str, Any]) -> bool:
    """Whether the binding's credentials Secret (as read; None: missing) no longer holds ``response``.

    Compared as JSON values, so key order or formatting never cause a write; an unreadable Secret is rewritten.
    """
    encoded = ((secret or {}).get("data") or {}).get(CREDENTIALS_KEY)
    if not isinstance(encoded, str):
        return True
    try:
        held = json.loads(base64.b64decode(encoded, validate=True))
    except (binascii.Error, ValueError):
        return True
    return bool(held != response)


def sources_digest(
    *,
    plan_hash: str | None,
    instance: dict[str, Any],
    binding: dict[str, Any],
    versions: list[tuple[ResourceRef, str | None]],
) -> str:
    """What a bound binding's credentials were rendered from, in a few bytes: the plan version, the
    instance's and the binding's uid and generation, and each source's resourceVersion (None: missing).

    The same digest means the status template would read the same objects again, so the credentials need
    not be rendered (nor their Secret read) to know they still hold: after a restart, every bound binding
    is checked this way against ``status.sourcesDigest`` instead of being rendered again.
    """
    facts = [
        plan_hash,
        [(_meta(obj).get("uid"), _meta(obj).get("generation")) for obj in (instance, binding)],
        sorted((ref_key(ref), version or "") for ref, version in versions),
    ]
    return hashlib.sha256(json.dumps(facts, separators=(",", ":")).encode()).hexdigest()[:32]


def operation_age(obj: dict[str, Any], *, at: datetime.datetime | None = None) -> float | None:
    """Seconds since the object's current operation began (``status.operationStartedAt``, written by the
    controller, else the broker's ``lastOperation.startedAt``); None when no start is recorded or readable."""
    status = _status(obj)
    started = status.get("operationStartedAt") or (status.get("lastOperation") or {}).get("startedAt")
    if not isinstance(started, str):
        return None
    try:
        when = datetime.datetime.fromisoformat(started)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return ((at or datetime.datetime.now(datetime.UTC)) - when).total_seconds()


def started_operation(obj: dict[str, Any], *, at: datetime.datetime | None = None) -> dict[str, Any]:
    """The status field to write with the move to ``in progress``, so the operation's age can be measured:
    the broker's ``lastOperation.startedAt`` when the broker asked for this operation (state ``in_queue`` or
    ``update``), else now — a change made through the API, a plan roll-out, an object created without the
    broker. ``lastOperation`` itself is the broker's record of its requests and is never written here."""
    status = _status(obj)
    requested = (status.get("lastOperation") or {}).get("startedAt")
    if status.get("state") in REQUESTED - {None} and isinstance(requested, str):
        return {"operationStartedAt": requested}
    moment = (at or datetime.datetime.now(datetime.UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"operationStartedAt": moment}


def overdue(obj: dict[str, Any], *, max_seconds: float, at: datetime.datetime | None = None) -> float | None:
    """The operation's age if it has run longer than ``max_seconds`` (0: no limit), else None."""
    age = operation_age(obj, at=at)
    if max_seconds <= 0 or age is None or age <= max_seconds:
        return None
    return age


def poll_after(
    obj: dict[str, Any], *, poll_seconds: float, max_seconds: float, at: datetime.datetime | None = None
) -> float:
    """When to look at an in-progress operation again: the poll interval, or sooner when its deadline
    comes first (so a timed-out operation fails on time, not up to a poll later)."""
    age = operation_age(obj, at=at)
    if max_seconds <= 0 or age is None:
        return poll_seconds
    return max(0.5, min(poll_seconds, max_seconds - age + 0.5))


def now(at: datetime.datetime | None = None) -> str:
    return (at or datetime.datetime.now(datetime.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


def ready_condition(
    previous: list[dict[str, Any]] | None,
    *,
    ready: bool,
    reason: Reason,
    message: str,
    generation: int | None,
    at: datetime.datetime | None = None,
) -> list[dict[str, Any]]:
    """The conditions list with Ready set; the transition time (``at``, default now) only moves when the
    status flips."""
    conditions = [c for c in (previous or []) if c.get("type") != "Ready"]
    old = next((c for c in (previous or []) if c.get("type") == "Ready"), None)
    status = "True" if ready else "False"
    changed = old is None or old.get("status") != status
    conditions.append(
        {
            "type": "Ready",
            "status": status,
            "reason": reason.value,
            "message": message[:1024],
            "lastTransitionTime": now(at) if changed else old.get("lastTransitionTime") if old else now(at),
            "observedGeneration": generation,
        }
    )
    return conditions


def outcome_status(
    obj: dict[str, Any],
    *,
    state: OperationState,
    reason: Reason,
    description: str = "",
    error: str | None = None,
    at: datetime.datetime | None = None,
) -> dict[str, Any]:
    """A status patch announcing ``state``, with the Ready condition to match (changed ``at``, default now)."""
    ready = state == OperationState.SUCCEEDED
    message = error or description or state.value
    return {
        "state": state.value,
        "description": description or None,
        "error": error,
        "conditions": ready_condition(
            _status(obj).get("conditions"),
            ready=ready,
            reason=reason,
            message=message,
            generation=_meta(obj).get("generation"),
            at=at,
        ),
    }


def error_status(
    obj: dict[str, Any], *, message: str, threshold: int, at: datetime.datetime | None = None
) -> tuple[dict[str, Any], bool]:
    """Count one more consecutive error; past ``threshold`` the operation is failed for good.

    Returns the status patch and whether the controller gave up (no more retries until a new request).
    """
    count = int(_status(obj).get("errorCount") or 0) + 1
    if count >= threshold:
        patch = outcome_status(
            obj,
            state=OperationState.FAILED,
            reason=Reason.GAVE_UP,
            error=f"gave up after {count} consecutive errors: {message}",
            at=at,
        )
        patch["errorCount"] = count
        patch["observedGeneration"] = _meta(obj).get("generation")
        return patch, True
    return {"errorCount": count, "description": f"retrying after error {count}/{threshold}: {message}"}, False


def dashboard_url(reported: str | None, registry: dict[str, Any] | None) -> str | None:
    """The instance's dashboard URL: what the status template reports, else the registry's ``dashboard-url``
    (the Couchbase broker's read-write key, set by a template with ``setRegistry``); None when neither has
    one (or the registry's is not a non-empty string)."""
    if reported:
        return reported
    value = (registry or {}).get(DASHBOARD_URL)
    return value if isinstance(value, str) and value else None


def namespace_terminating(namespace: dict[str, Any] | None) -> bool:
    """Whether a Namespace (as read; None: it does not exist) is going: phase ``Terminating`` or a
    ``deletionTimestamp``. Nothing can be created in it any more (the API server answers 403)."""
    if namespace is None:
        return True
    return is_deleting(namespace) or (namespace.get("status") or {}).get("phase") == "Terminating"


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


def plan_needs_count(plan: dict[str, Any]) -> bool:
    """Whether the plan's guard depends on how many instances use it (:func:`entry_needs_count`)."""
    return entry_needs_count(Meta.of(plan.get("metadata")))


def entry_needs_count(meta: Meta) -> bool:
    """Whether a catalog entry's guard depends on how many objects use it (counting them is a cluster-wide list):
    a held entry that is not being deleted keeps its finalizer without counting, and nothing can be added to one
    being deleted that is not held."""
    return meta.deleting == meta.held


def plan_guard_step(plan: dict[str, Any], *, users: int) -> PlanGuard:
    """The finalizer step of a catalog entry's body (:func:`entry_guard`)."""
    return entry_guard(Meta.of(plan.get("metadata")), users=users)


def entry_guard(meta: Meta, *, users: int) -> PlanGuard:
    """The finalizer step of a catalog entry (an SFPlan, or an SFService: issue 29) that ``users`` objects use."""
    if meta.deleting:
        if not meta.held:
            return PlanGuard.NOTHING
        return PlanGuard.WAIT if users else PlanGuard.RELEASE
    return PlanGuard.HOLD if users and not meta.held else PlanGuard.NOTHING


def plan_users(instances: list[dict[str, Any]], plan_id: str) -> int:
    """How many of ``instances`` use the plan ``plan_id``. One being deleted without our finalizer is gone
    already (its DELETE completes without us), so it does not count."""
    return sum(
        1
        for instance in instances
        if (instance.get("spec") or {}).get("planId") == plan_id
        and not (is_deleting(instance) and not has_finalizer(instance))
    )


@dataclass(frozen=True)
class ServiceUsers:
    """What keeps an SFService from going (issue 29): the trusted SFPlans and the instances naming its id."""

    plans: int
    instances: int

    def __bool__(self) -> bool:
        return bool(self.plans or self.instances)


def service_users(plans: list[dict[str, Any]], instances: list[dict[str, Any]], service_id: str) -> ServiceUsers:
    """Who uses the service ``service_id``: ``plans`` declaring it (a plan deleted without our finalizer is
    gone already and does not count; one held by its instances does) and ``instances`` naming it (counted as
    :func:`plan_users` counts)."""
    return ServiceUsers(
        plans=sum(
            1
            for plan in plans
            if (plan.get("spec") or {}).get("serviceId") == service_id
            and not (is_deleting(plan) and not has_finalizer(plan))
        ),
        instances=sum(
            1
            for instance in instances
            if (instance.get("spec") or {}).get("serviceId") == service_id
            and not (is_deleting(instance) and not has_finalizer(instance))
        ),
    )


def withdrawn(plan: dict[str, Any] | None) -> bool:
    """A plan being deleted is withdrawn: it takes no new instances; its existing ones keep working."""
    return plan is not None and is_deleting(plan)


def refuses_new_instance(instance: dict[str, Any], plan: dict[str, Any] | None) -> bool:
    """Whether ``instance`` is a new provision (nothing applied yet) of a withdrawn plan."""
    status = _status(instance)
    never_applied = not status.get("resources") and status.get("appliedPlanHash") is None
    return withdrawn(plan) and not is_deleting(instance) and never_applied


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


def takeover(live: dict[str, Any] | None, *, owner_uids: tuple[str, ...], adopt: bool) -> Takeover:
    """Whether a rendered object may be written over ``live``: only one stamped as one of ``owner_uids`` (an
    instance's, or a binding's and its instance's), or any when the template adopts. A record in a status
    proves nothing; the live object's stamp does."""
    if live is None:
        return Takeover.CREATE
    if any(owned_by(live, uid) for uid in owner_uids):
        return Takeover.UPDATE
    return Takeover.ADOPT if adopt else Takeover.REFUSE


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


def letting_go(live: dict[str, Any] | None, *, owner_uid: str) -> Letting:
    """How to let go of ``live``, recorded as ``owner_uid``'s: only an object stamped as its own, or owned by it
    through an owner reference (a shared singleton, or an object from before stamps), is ever touched."""
    if live is None:
        return Letting.GONE
    meta = live.get("metadata") or {}
    owners = meta.get("ownerReferences") or []
    users = singleton_users(live)
    referenced = any(o.get("uid") == owner_uid for o in owners) or owner_uid in users
    if not referenced and not owned_by(live, owner_uid):
        return Letting.LEAVE
    if any(o.get("uid") != owner_uid for o in owners) or any(u != owner_uid for u in users):
        return Letting.UNOWN if referenced else Letting.LEAVE
    return Letting.WAIT if meta.get("deletionTimestamp") else Letting.DELETE


#: The most instances one tracked singleton may list (:data:`ANNOTATION_SINGLETON_USERS`): 39 bytes a uid, so
#: 5 000 stay under 200 KiB, clear of the API server's 256 KiB for all of an object's annotations together.
MAX_SINGLETON_USERS = 5000


def singleton_users(live: dict[str, Any] | None) -> tuple[str, ...]:
    """The instances a shared singleton records as its users (:data:`ANNOTATION_SINGLETON_USERS`); none when it
    records none or the annotation is not a JSON list of strings (written by hand: nobody is taken for a user)."""
    annotations = ((live or {}).get("metadata") or {}).get("annotations") or {}
    raw = annotations.get(ANNOTATION_SINGLETON_USERS)
    if not isinstance(raw, str):
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


def shared_singleton(live: dict[str, Any], *, plan_label: str | None) -> bool:
    """Whether an existing object is a singleton opbroker made for this plan (so an instance may share it)."""
    meta = live.get("metadata") or {}
    return (
        (meta.get("annotations") or {}).get(ANNOTATION_SINGLETON) == "true"
        and bool(plan_label)
        and ((meta.get("labels") or {}).get(LABEL_PLAN) == plan_label)
    )


def context_namespace_refused(instance: dict[str, Any], *, trusted_namespaces: tuple[str, ...]) -> str | None:
    """Why the request context's namespace may not receive this instance's objects (None: it may).

    The OSB context names where a consumer's objects go; the broker accepts only namespaces the platform allows
    and records the instance there (or, without context namespaces, in the control plane's namespace). An
    instance created directly in a tenant's namespace may name only that namespace: anything else would let one
    tenant direct a plan's objects into another's namespace."""
    context = (instance.get("spec") or {}).get("context") or {}
    wanted = context.get("namespace") if isinstance(context, dict) else None
    home = _meta(instance).get("namespace")
    if not wanted or wanted == home or home in trusted_namespaces:
        return None
    return (
        f"the request's context names namespace {wanted!r}, but the instance lives in {home!r}: an instance may "
        "direct its objects only into its own namespace (instances recorded by the broker in the control plane's "
        "namespace excepted)"
    )
