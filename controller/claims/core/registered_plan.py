"""A RegisteredService's decisions (pure): the check to run, its schedule, the state and the status write.

The generic actions (the status write with its conditions and an Event, Requeue, ForgetObject: drop the
schedule and any probe result) are performed by the one executor; the service's own effects (the schedule in
memory, a probe submitted to the prober, the container check's Job) are declared here and performed by
:mod:`opbroker.controller.claims.registered`. A check's Job start has three outcomes; the plan gives the
actions of each (:meth:`StartJob.then`), the effect only reports which happened.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pydantic import ValidationError

from opbroker.api.conventions import ANNOTATION_OWNER_UID
from opbroker.api.errors import field_errors
from opbroker.api.meta import ResourceRef
from opbroker.api.primaza import HealthCheck, RegisteredService, ServiceState
from opbroker.controller.claims import healthjobs, probes, servicebinding
from opbroker.controller.claims.core import conditions, names, states
from opbroker.controller.claims.core.states import CheckOutcome, Result
from opbroker.controller.claims.core.views import JobView, ObjectView, OwnerRef, ServiceView
from opbroker.controller.claims.probes import Finished, Probe
from opbroker.controller.core import actions as a
from opbroker.controller.core.reasons import Reason
from opbroker.controller.runtime.keys import Key
from opbroker.kubeclient.wire import JsonBody, JsonObject


@dataclass(frozen=True)
class Schedule:
    """When the next check of one service is due (in memory: after a restart, a check runs at once)."""

    fingerprint: str
    due: float


def fingerprint_of(check: HealthCheck, values: Mapping[str, str], service_type: str | None) -> str:
    """Identifies a check *and* the credentials it runs with: a change of either starts a fresh run."""
    canonical = json.dumps(
        [check.model_dump(mode="json", by_alias=True), sorted(values.items()), service_type], sort_keys=True
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class RegisteredFacts:
    key: Key
    service: ServiceView
    now: float
    """The runtime clock's ``monotonic()`` at observe (schedules are on this clock)."""
    wall: datetime.datetime
    """The wall clock at observe (a Job's deadline is on this one)."""
    probe_timeout: float
    holder_exists: bool = False
    """Whether the claim ``status.claimedBy`` names exists (and, of another namespace, may still hold it)."""
    secrets: Mapping[str, Mapping[str, str] | None] = field(default_factory=dict)
    """The decoded Secrets the endpoint definition reads."""
    schedule: Schedule | None = None
    finished: Finished | None = None
    """A TCP/HTTP probe's result, taken from the prober."""
    running: bool = False
    """A TCP/HTTP probe of the service is running."""
    job: JobView | None = None
    """The container check's Job, as it exists."""
    check_secret: ObjectView | None = None
    """The container check's Secret, as it exists."""


# -- the service's own actions (performed by registered's effects) -----------------------------------------


@dataclass(frozen=True)
class SetSchedule:
    schedule: Schedule


@dataclass(frozen=True)
class DropSchedule:
    """Check at once when the Secret is back."""


@dataclass(frozen=True)
class SubmitProbe:
    fingerprint: str
    probe: Probe


@dataclass(frozen=True)
class DeleteJob:
    """Delete the check's Job (its Pods go with it)."""


class Started:
    """How a check's Job start went (what :class:`StartJob`'s effect reports)."""

    CREATED = 0
    STILL_DELETING = -1
    """The previous run (same name) is still being deleted."""


@dataclass(frozen=True)
class StartJob:
    """Apply the check's Secret and create its Job; what follows depends on how that went (:meth:`then`)."""

    secret: JsonObject = field(repr=False)
    job: JsonObject = field(repr=False)
    secret_version: str | None
    """The resourceVersion of the (stamped) check Secret read; None: there was none."""
    created: tuple[RegisteredAction, ...]
    """After the Job was created."""
    still_deleting: tuple[RegisteredAction, ...]
    """When the previous run is still being deleted."""
    refused: Callable[[int, str, Reason | None], tuple[RegisteredAction, ...] | None] = field(repr=False)
    """When the API server refuses the Job: the actions for its HTTP status, what the refusal shows (its message
    and reason, :mod:`~opbroker.controller.core.shown_failures`: the fix first); None for a status not in
    :data:`REFUSALS`."""

    def then(self, started: int, said: str = "", reason: Reason | None = None) -> tuple[RegisteredAction, ...] | None:
        """The actions that follow ``started`` (:class:`Started`, or the HTTP status of a refusal, with what it
        shows); None: a refusal the plan has no answer for (the error stands)."""
        if started == Started.CREATED:
            return self.created
        if started == Started.STILL_DELETING:
            return self.still_deleting
        return self.refused(started, said, reason)


REFUSALS = (400, 403, 422)
"""The API server's answers to a check's Job that make the check undetermined (retried next period)."""


RegisteredAction = (
    a.WriteStatus | a.Requeue | a.ForgetObject | SetSchedule | DropSchedule | SubmitProbe | DeleteJob | StartJob
)


@dataclass(frozen=True)
class Status:
    """What a RegisteredService's status says (as read, then as the plan's first write leaves it)."""

    state: str | None
    claimed_by: str | None
    failures: int
    conditions: list[JsonBody] | None

    @classmethod
    def of(cls, service: ServiceView) -> Status:
        listed = [dict(c) for c in service.conditions]
        return cls(service.state, service.claimed_by, service.consecutive_failures, listed or None)

    def record(self) -> states.HealthRecord:
        """The health record the status keeps (its ``Healthy`` condition and failure count)."""
        return states.record_from_status(self.conditions, self.failures)


def job_ref(service: ServiceView) -> ResourceRef:
    meta = service.meta
    return ResourceRef(
        api_version="batch/v1", kind="Job", name=names.healthcheck_name(meta.name), namespace=meta.namespace
    )


def service_model(service: ServiceView) -> RegisteredService:
    return RegisteredService.model_validate({k: v for k, v in service.wire.items() if k != "status"})


def _identity(model: RegisteredService, name: str) -> str | None:
    return next((i.value for i in model.spec.service_class_identity if i.name == name), None)


def _requeue(seconds: float | None) -> list[RegisteredAction]:
    """Look again after ``seconds`` (None: an event brings the service back)."""
    return [] if seconds is None else [a.Requeue(seconds)]


def plan(facts: RegisteredFacts) -> list[RegisteredAction]:
    service = facts.service
    status = Status.of(service)
    generation = service.meta.generation
    stamp = conditions.stamp(facts.wall)
    try:
        model = service_model(service)
    except ValidationError as exc:
        invalid = CheckOutcome(Result.UNDETERMINED, Reason.SPEC_INVALID, "; ".join(field_errors(exc)))
        record = states.record_after(status.record(), invalid)
        written, _ = _write(status, ServiceState.UNDETERMINED, record, status.claimed_by, generation, stamp)
        return written
    actions: list[RegisteredAction] = []
    current = ServiceState(status.state) if status.state else None
    if current is None:
        written, status = _write(
            status, ServiceState.REGISTERED, states.NEVER_CHECKED, status.claimed_by, generation, stamp
        )
        actions.extend(written)
        current = ServiceState.REGISTERED

    holder = status.claimed_by
    held = holder is not None and facts.holder_exists
    spec = model.spec
    resolution = servicebinding.resolve(spec.service_endpoint_definition, facts.secrets)
    record = status.record()
    check = spec.healthcheck

    def finish(outcome: CheckOutcome | None, requeue: float | None) -> list[RegisteredAction]:
        """The state and status after a check's ``outcome`` (None: no new result)."""
        after = states.record_after(record, outcome) if outcome is not None else record
        assert check is not None
        health = states.health_of(after, checked=True, threshold=check.failure_threshold)
        state = states.next_state(current, health, held=held)
        written, _ = _write(status, state, after, holder if held else None, generation, stamp)
        return [*written, *_requeue(requeue)]

    if not resolution.complete:
        missing = CheckOutcome(Result.UNDETERMINED, Reason.SECRET_MISSING, "; ".join(resolution.missing))
        record = states.record_after(record, missing)
        state = states.next_state(current, states.Health.UNDETERMINED, held=held)
        written, _ = _write(status, state, record, holder if held else None, generation, stamp)
        return [*actions, DropSchedule(), *written]
    if check is None:
        state = states.next_state(current, states.Health.UNCHECKED, held=held)
        written, _ = _write(status, state, states.UNCHECKED_RECORD, holder if held else None, generation, stamp)
        return [*actions, a.ForgetObject(), *written]

    service_type = _identity(model, "type")
    fingerprint = fingerprint_of(check, resolution.values, service_type)
    period = healthjobs.period_of(check)
    schedule = facts.schedule
    due = schedule.due if schedule is not None and schedule.fingerprint == fingerprint else facts.now
    now = facts.now
    if check.container is None:
        return [*actions, *_probe_plan(facts, check, resolution.values, fingerprint, period, due, finish)]

    job = facts.job
    uid = service.meta.uid
    if job is not None:
        if not job.owned_by(uid):
            # someone else's Job of that name: never deleted, and no check runs under it
            message = f"Job {job.meta.name!r} exists and is not stamped as this service's: left untouched"
            not_owned = CheckOutcome(Result.UNDETERMINED, Reason.OBJECT_NOT_OWNED, message)
            return [*actions, SetSchedule(Schedule(fingerprint, now + period)), *finish(not_owned, period)]
        if job.meta.deleting:
            return [*actions, SetSchedule(Schedule(fingerprint, due)), *finish(None, 1.0)]
        if job.meta.annotations.get(names.ANNOTATION_FINGERPRINT) != fingerprint:
            # a run of an older check (or older credentials): replace it
            return [*actions, DeleteJob(), SetSchedule(Schedule(fingerprint, now)), *finish(None, 0.5)]
        outcome = healthjobs.read(job, deadline=period, now=facts.wall)
        if outcome is None:
            waiting = max(0.05, healthjobs.remaining(job, deadline=period, now=facts.wall))
            return [*actions, SetSchedule(Schedule(fingerprint, due)), *finish(None, waiting)]
        return [*actions, DeleteJob(), SetSchedule(Schedule(fingerprint, now + period)), *finish(outcome, period)]
    if now < due:
        return [*actions, SetSchedule(Schedule(fingerprint, due)), *finish(None, max(0.05, due - now))]
    if service_type is None:
        invalid = CheckOutcome(Result.UNDETERMINED, Reason.CHECK_INVALID, "no 'type' in serviceClassIdentity")
        return [*actions, SetSchedule(Schedule(fingerprint, due)), *finish(invalid, period)]
    existing = facts.check_secret
    if existing is not None and not existing.owned_by(uid):
        message = (
            f"Secret {names.healthcheck_name(service.meta.name)!r} exists and is not stamped as this "
            f"service's ({ANNOTATION_OWNER_UID}): left untouched"
        )
        not_owned = CheckOutcome(Result.UNDETERMINED, Reason.OBJECT_NOT_OWNED, message)
        return [*actions, SetSchedule(Schedule(fingerprint, now + period)), *finish(not_owned, period)]
    data = servicebinding.binding_data(
        service_type=service_type,
        provider=_identity(model, "provider"),
        values=resolution.values,
        keys=resolution.values,
    )
    secret, job_manifest = healthjobs.manifests(
        OwnerRef.of(service.wire), check, data, service_type=service_type, fingerprint=fingerprint
    )

    def refused(code: int, said: str, shown: Reason | None) -> tuple[RegisteredAction, ...] | None:
        """A 403 is the namespace's (not onboarded) or an account's: its own reason; a 400 or 422, the check's."""
        if code not in REFUSALS:
            return None
        reason = shown if code == 403 and shown is not None else Reason.CHECK_INVALID
        outcome = CheckOutcome(Result.UNDETERMINED, reason, f"cannot start the check: {said or f'HTTP {code}'}")
        return (SetSchedule(Schedule(fingerprint, now + period)), *finish(outcome, period))

    start = StartJob(
        secret,
        job_manifest,
        None if existing is None else existing.meta.resource_version,
        created=(SetSchedule(Schedule(fingerprint, math.inf)), *finish(None, period)),
        still_deleting=(SetSchedule(Schedule(fingerprint, due)), *finish(None, 1.0)),
        refused=refused,
    )
    return [*actions, start]


# -- the plan's parts (pure) -----------------------------------------------------------------------------


def _probe_plan(
    facts: RegisteredFacts,
    check: HealthCheck,
    values: dict[str, str],
    fingerprint: str,
    period: float,
    due: float,
    finish: Callable[[CheckOutcome | None, float | None], list[RegisteredAction]],
) -> list[RegisteredAction]:
    """A TCP/HTTP check: account a finished probe of this check, start the next one when it is due."""
    now = facts.now
    outcome: CheckOutcome | None = None
    finished = facts.finished
    if finished is not None and finished.fingerprint == fingerprint:
        outcome = finished.outcome
        due = now + period
    elif finished is not None:
        due = now  # a result for a check that has changed since: run the new one
    if facts.running:
        # the prober enqueues the service when the result is in
        return [SetSchedule(Schedule(fingerprint, due)), *finish(outcome, None)]
    if now >= due:
        probe = probes.probe_for(check, values, timeout=min(facts.probe_timeout, period))
        if isinstance(probe, CheckOutcome):
            return [SetSchedule(Schedule(fingerprint, now + period)), *finish(probe, period)]
        return [SetSchedule(Schedule(fingerprint, math.inf)), SubmitProbe(fingerprint, probe), *finish(outcome, None)]
    return [SetSchedule(Schedule(fingerprint, due)), *finish(outcome, max(0.05, due - now))]


def _write(
    status: Status,
    state: ServiceState,
    record: states.HealthRecord,
    claimed_by: str | None,
    generation: int | None,
    timestamp: str,
) -> tuple[list[RegisteredAction], Status]:
    """The status write (none when nothing changes) and the status after it (``timestamp``: a flipped
    condition's transition time)."""
    previous = status.state
    new_conditions = states.status_conditions(
        status.conditions, record=record, state=state, generation=generation, timestamp=timestamp
    )
    wanted = {
        "state": state.value,
        "claimedBy": claimed_by,
        "consecutiveFailures": record.failures,
        "conditions": new_conditions,
    }
    unchanged = (
        previous == state.value
        and status.claimed_by == claimed_by
        and status.failures == record.failures
        and conditions.same(status.conditions, new_conditions)
    )
    if unchanged:
        return [], status
    event: a.Event | None = None
    if previous != state.value:
        detail = "" if state in (ServiceState.REGISTERED, ServiceState.CLAIMED) else f": {record.message}"
        if status.claimed_by and not claimed_by:
            detail += f" (claim {status.claimed_by!r} no longer exists)"
        event = a.Event(
            states.transition_reason(state).value,
            f"{previous or 'new'} -> {state.value}{detail}",
            warning=state in (ServiceState.UNREACHABLE, ServiceState.UNDETERMINED),
        )
    after = Status(state.value, claimed_by, record.failures, new_conditions)
    return [a.WriteStatus(wanted, event=event)], after
