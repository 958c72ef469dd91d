"""Reconciling RegisteredServices: endpoint values, health checks, the state, the holder.

Each reconcile reads the service, resolves its endpoint definition (a missing Secret or key makes it
Undetermined), accounts at most one new health-check result, and writes the state :mod:`states`
decides — guarded by the resourceVersion, so it never overwrites a claim taking the service meanwhile.
TCP/HTTP probes run in the :class:`~opbroker.controller.claims.probes.Prober`'s threads and come back
as a re-enqueue; a container check is a Job (:mod:`healthjobs`) whose deadline the reconcile enforces.
The next check is due one period after the last result; the reconcile asks the queue to come back then.

Tenancy: the endpoint Secrets are read in the service's own namespace only (``valueFromSecret`` names no
namespace), and a container check runs there, mounting a Secret made from those values; the check's Secret and
Job are stamped with the service's uid (``opbroker.io/owner-uid``) and one of those names without the stamp is
never written or deleted (Undetermined, ``ObjectNotOwned``). A holder of another namespace keeps the service only
while the service shares with it and the claim still looks here (:func:`matching.holder_allowed`).

observe reads the service, whether its holder exists (and may hold it), the endpoint Secrets, the check's
schedule and the prober's result (or the check's Job and Secret) and the clock;
:meth:`RegisteredReconciler.plan` (pure) decides the check to run, the schedule, the state and the status
write; act performs them.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from opbroker.api.conventions import ANNOTATION_OWNER_UID, owned_by
from opbroker.api.errors import field_errors
from opbroker.api.meta import ResourceRef
from opbroker.api.primaza import HealthCheck, RegisteredService, ServiceState
from opbroker.controller.claims import healthjobs, probes, servicebinding
from opbroker.controller.claims.context import Context
from opbroker.controller.claims.core import conditions, matching, names, states
from opbroker.controller.claims.core.states import CheckOutcome, Result
from opbroker.controller.claims.kinds import CLAIMS, REGISTERED_SERVICES
from opbroker.controller.claims.probes import Finished, Probe
from opbroker.controller.claims.store import claim_info
from opbroker.controller.core.reasons import Reason
from opbroker.controller.reconciler import DONE, Key, ObservePlanAct, Outcome

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Schedule:
    """When the next check of one service is due (in memory: after a restart, a check runs at once)."""

    fingerprint: str
    due: float


def fingerprint_of(check: HealthCheck, values: dict[str, str], service_type: str | None) -> str:
    """Identifies a check *and* the credentials it runs with: a change of either starts a fresh run."""
    canonical = json.dumps(
        [check.model_dump(mode="json", by_alias=True), sorted(values.items()), service_type], sort_keys=True
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class RegisteredFacts:
    key: Key
    body: dict[str, Any]
    now: float
    """The runtime clock's ``monotonic()`` at observe (schedules are on this clock)."""
    wall: datetime.datetime
    """The wall clock at observe (a Job's deadline is on this one)."""
    probe_timeout: float
    holder_exists: bool = False
    """Whether the claim ``status.claimedBy`` names exists (and, of another namespace, may still hold it)."""
    secrets: Mapping[str, dict[str, str] | None] = field(default_factory=dict)
    """The decoded Secrets the endpoint definition reads."""
    schedule: Schedule | None = None
    finished: Finished | None = None
    """A TCP/HTTP probe's result, taken from the prober."""
    running: bool = False
    """A TCP/HTTP probe of the service is running."""
    job: dict[str, Any] | None = None
    """The container check's Job, as it exists."""
    check_secret: dict[str, Any] | None = None
    """The container check's Secret, as it exists."""


@dataclass(frozen=True)
class WriteStatus:
    patch: dict[str, Any]
    event: tuple[str, str, bool] | None
    """(reason, message, warning), emitted on the service after the write."""


@dataclass(frozen=True)
class SetSchedule:
    schedule: Schedule


@dataclass(frozen=True)
class DropSchedule:
    """Check at once when the Secret is back."""


@dataclass(frozen=True)
class ForgetChecks:
    """No check any more: drop the schedule and any probe result."""


@dataclass(frozen=True)
class SubmitProbe:
    fingerprint: str
    probe: Probe


@dataclass(frozen=True)
class DeleteJob:
    pass


@dataclass(frozen=True)
class StartJob:
    """Apply the check's Secret and create its Job; then the rest of the plan, or one of the alternatives."""

    secret: dict[str, Any]
    job: dict[str, Any]
    secret_version: str | None
    """The resourceVersion of the (stamped) check Secret read; None: there was none."""
    still_deleting: tuple[RegisteredAction, ...]
    """Instead of the rest when the previous run is still being deleted."""
    refused: Mapping[int, tuple[RegisteredAction, ...]]
    """Instead of the rest when the API server refuses the Job, by HTTP status (:data:`REFUSALS`)."""


REFUSALS = (400, 403, 422)
"""The API server's answers to a check's Job that make the check undetermined (retried next period)."""


@dataclass(frozen=True)
class Requeue:
    seconds: float | None


RegisteredAction = (
    WriteStatus | SetSchedule | DropSchedule | ForgetChecks | SubmitProbe | DeleteJob | StartJob | Requeue
)


def _job_ref(body: dict[str, Any]) -> ResourceRef:
    meta = body["metadata"]
    return ResourceRef(
        api_version="batch/v1", kind="Job", name=names.healthcheck_name(meta["name"]), namespace=meta["namespace"]
    )


def _model(body: dict[str, Any]) -> RegisteredService:
    return RegisteredService.model_validate({k: v for k, v in body.items() if k != "status"})


def _identity(model: RegisteredService, name: str) -> str | None:
    return next((i.value for i in model.spec.service_class_identity if i.name == name), None)


class RegisteredReconciler(ObservePlanAct[RegisteredFacts, RegisteredAction]):
    kind: ClassVar[str] = "registered"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._schedules: dict[Key, Schedule] = {}

    def forget(self, key: Key) -> None:
        self._schedules.pop(key, None)
        self.ctx.prober.forget(key)

    def gone(self, key: Key) -> Outcome:
        self.forget(key)
        return DONE

    # -- observe -------------------------------------------------------------------------------------

    def observe(self, key: Key) -> RegisteredFacts | None:
        kube = self.ctx.kube
        _, namespace, name = key
        service = kube.get_custom(REGISTERED_SERVICES, namespace, name)
        if service is None or service["metadata"].get("deletionTimestamp"):
            return None
        facts = RegisteredFacts(
            key, service, self.ctx.clock.monotonic(), self.ctx.clock.now(), self.ctx.settings.probe_timeout
        )
        try:
            model = _model(service)
        except ValidationError:
            return facts
        holder = (service.get("status") or {}).get("claimedBy") or None
        definition = model.spec.service_endpoint_definition
        # Only the service's own namespace: Secrets are never read across namespaces.
        secrets = {
            secret: servicebinding.decode(kube.read_secret(namespace, secret))
            for secret in sorted(servicebinding.referenced_secrets(definition))
        }
        check = model.spec.healthcheck
        complete = servicebinding.resolve(definition, secrets).complete
        finished, running, job, check_secret = None, False, None, None
        if complete and check is not None and check.container is not None:
            job = kube.get(_job_ref(service))
            check_secret = kube.read_secret(namespace, names.healthcheck_name(name))
        elif complete and check is not None:
            finished, running = self.ctx.prober.take(key), self.ctx.prober.running(key)
        return RegisteredFacts(
            key,
            service,
            facts.now,
            facts.wall,
            facts.probe_timeout,
            holder_exists=holder is not None and self._may_hold(namespace, holder, model.spec.share_with or ()),
            secrets=secrets,
            schedule=self._schedules.get(key),
            finished=finished,
            running=running,
            job=job,
            check_secret=check_secret,
        )

    def _may_hold(self, namespace: str, holder: str, share_with: Sequence[str]) -> bool:
        """Whether the claim named by ``claimedBy`` exists (cache first, then the API to be sure) and may hold
        the service: of another namespace, only while the service shares with it and the claim looks here."""
        claim_namespace, claim = names.parse_ref(holder, home=namespace)
        info = self.ctx.store.claim(claim_namespace, claim)
        if info is None:
            body = self.ctx.kube.get_custom(CLAIMS, claim_namespace, claim)
            if body is None:
                return False
            info = claim_info(body)
        return matching.holder_allowed(namespace, share_with, claim_namespace, info.service_namespaces)

    # -- plan ----------------------------------------------------------------------------------------

    @staticmethod
    def plan(facts: RegisteredFacts) -> Sequence[RegisteredAction]:
        service = facts.body
        status: dict[str, Any] = service.get("status") or {}
        generation = service["metadata"].get("generation")
        try:
            model = _model(service)
        except ValidationError as exc:
            invalid = CheckOutcome(Result.UNDETERMINED, Reason.SPEC_INVALID, "; ".join(field_errors(exc)))
            record = states.record_after(states.record_from_status(status), invalid)
            written, _ = _write(status, ServiceState.UNDETERMINED, record, status.get("claimedBy"), generation)
            return written
        actions: list[RegisteredAction] = []
        current = ServiceState(status["state"]) if status.get("state") else None
        if current is None:
            written, status = _write(
                status, ServiceState.REGISTERED, states.NEVER_CHECKED, status.get("claimedBy"), generation
            )
            actions.extend(written)
            current = ServiceState.REGISTERED

        holder = status.get("claimedBy") or None
        held = holder is not None and facts.holder_exists
        spec = model.spec
        resolution = servicebinding.resolve(spec.service_endpoint_definition, facts.secrets)
        record = states.record_from_status(status)
        check = spec.healthcheck

        def finish(outcome: CheckOutcome | None, requeue: float | None) -> list[RegisteredAction]:
            """The state and status after a check's ``outcome`` (None: no new result)."""
            after = states.record_after(record, outcome) if outcome is not None else record
            assert check is not None
            health = states.health_of(after, checked=True, threshold=check.failure_threshold)
            state = states.next_state(current, health, held=held)
            written, _ = _write(status, state, after, holder if held else None, generation)
            return [*written, Requeue(requeue)]

        if not resolution.complete:
            missing = CheckOutcome(Result.UNDETERMINED, Reason.SECRET_MISSING, "; ".join(resolution.missing))
            record = states.record_after(record, missing)
            state = states.next_state(current, states.Health.UNDETERMINED, held=held)
            written, _ = _write(status, state, record, holder if held else None, generation)
            return [*actions, DropSchedule(), *written, Requeue(None)]
        if check is None:
            state = states.next_state(current, states.Health.UNCHECKED, held=held)
            written, _ = _write(status, state, states.UNCHECKED_RECORD, holder if held else None, generation)
            return [*actions, ForgetChecks(), *written, Requeue(None)]

        service_type = _identity(model, "type")
        fingerprint = fingerprint_of(check, resolution.values, service_type)
        period = healthjobs.period_of(check)
        schedule = facts.schedule
        due = schedule.due if schedule is not None and schedule.fingerprint == fingerprint else facts.now
        now = facts.now
        if check.container is None:
            return [*actions, *_probe_plan(facts, check, resolution.values, fingerprint, period, due, finish)]

        job = facts.job
        uid = str(service["metadata"].get("uid") or "")
        if job is not None:
            job_meta = job.get("metadata") or {}
            if not owned_by(job, uid):
                # someone else's Job of that name: never deleted, and no check runs under it
                message = f"Job {job_meta.get('name')!r} exists and is not stamped as this service's: left untouched"
                not_owned = CheckOutcome(Result.UNDETERMINED, Reason.OBJECT_NOT_OWNED, message)
                return [*actions, SetSchedule(Schedule(fingerprint, now + period)), *finish(not_owned, period)]
            if job_meta.get("deletionTimestamp"):
                return [*actions, SetSchedule(Schedule(fingerprint, due)), *finish(None, 1.0)]
            if (job_meta.get("annotations") or {}).get(names.ANNOTATION_FINGERPRINT) != fingerprint:
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
        if existing is not None and not owned_by(existing, uid):
            message = (
                f"Secret {names.healthcheck_name(service['metadata']['name'])!r} exists and is not stamped as this "
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
            service, check, data, service_type=service_type, fingerprint=fingerprint
        )
        start = StartJob(
            secret,
            job_manifest,
            None if existing is None else (existing.get("metadata") or {}).get("resourceVersion"),
            still_deleting=(SetSchedule(Schedule(fingerprint, due)), *finish(None, 1.0)),
            refused={
                code: (
                    SetSchedule(Schedule(fingerprint, now + period)),
                    *finish(
                        CheckOutcome(Result.UNDETERMINED, Reason.CHECK_INVALID, f"cannot start the check: HTTP {code}"),
                        period,
                    ),
                )
                for code in REFUSALS
            },
        )
        return [*actions, start, SetSchedule(Schedule(fingerprint, math.inf)), *finish(None, period)]

    # -- act -----------------------------------------------------------------------------------------

    def act(self, facts: RegisteredFacts, actions: Sequence[RegisteredAction]) -> Outcome:
        kube, key = self.ctx.kube, facts.key
        body = facts.body
        requeue: float | None = None
        pending = list(actions)
        while pending:
            action = pending.pop(0)
            if isinstance(action, WriteStatus):
                patched = self.ctx.patch_status(REGISTERED_SERVICES, body, action.patch)
                if patched is not None:
                    body = patched
                if action.event is not None:
                    reason, message, warning = action.event
                    kube.emit_event(body, reason=reason, message=message, warning=warning)
            elif isinstance(action, SetSchedule):
                self._schedules[key] = action.schedule
            elif isinstance(action, DropSchedule):
                self._schedules.pop(key, None)
            elif isinstance(action, ForgetChecks):
                self.forget(key)
            elif isinstance(action, SubmitProbe):
                self.ctx.prober.submit(key, action.fingerprint, action.probe)
            elif isinstance(action, DeleteJob):
                self.ctx.door(body["metadata"]["namespace"]).delete(_job_ref(body))
            elif isinstance(action, StartJob):
                try:
                    self.ctx.write_secret(action.secret, action.secret_version)
                    created = self.ctx.door(body["metadata"]["namespace"]).create(action.job)
                except ApiException as exc:
                    if exc.status not in action.refused:
                        raise
                    pending = list(action.refused[exc.status])
                    continue
                if created is None:
                    pending = list(action.still_deleting)
            else:
                requeue = action.seconds
        return Outcome(requeue_after=requeue)


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
    status: dict[str, Any],
    state: ServiceState,
    record: states.HealthRecord,
    claimed_by: str | None,
    generation: int | None,
) -> tuple[list[RegisteredAction], dict[str, Any]]:
    """The status write (none when nothing changes) and the status after it."""
    previous = status.get("state")
    new_conditions = states.status_conditions(
        status.get("conditions"), record=record, state=state, generation=generation
    )
    wanted = {
        "state": state.value,
        "claimedBy": claimed_by,
        "consecutiveFailures": record.failures,
        "conditions": new_conditions,
    }
    unchanged = (
        previous == state.value
        and (status.get("claimedBy") or None) == claimed_by
        and int(status.get("consecutiveFailures") or 0) == record.failures
        and conditions.same(status.get("conditions"), new_conditions)
    )
    if unchanged:
        return [], status
    event = None
    if previous != state.value:
        detail = "" if state in (ServiceState.REGISTERED, ServiceState.CLAIMED) else f": {record.message}"
        if status.get("claimedBy") and not claimed_by:
            detail += f" (claim {status['claimedBy']!r} no longer exists)"
        event = (
            states.transition_reason(state).value,
            f"{previous or 'new'} -> {state.value}{detail}",
            state in (ServiceState.UNREACHABLE, ServiceState.UNDETERMINED),
        )
    return [WriteStatus(wanted, event)], {**status, **wanted}
