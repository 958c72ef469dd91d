"""Reconciling RegisteredServices: endpoint values, health checks, the state, the holder.

Each reconcile reads the service, resolves its endpoint definition (a missing Secret or key makes it
Undetermined), accounts at most one new health-check result, and writes the state :mod:`states`
decides — guarded by the resourceVersion, so it never overwrites a claim taking the service meanwhile.
TCP/HTTP probes run in the :class:`~opbroker.controller.claims.probes.Prober`'s threads and come back
as a re-enqueue; a container check is a Job (:mod:`healthjobs`) whose deadline the reconcile enforces.
The next check is due one period after the last result; the reconcile asks the queue to come back then.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import math
import time
from dataclasses import dataclass
from typing import Any, ClassVar

from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from opbroker.api.errors import field_errors
from opbroker.api.meta import ResourceRef
from opbroker.api.primaza import HealthCheck, RegisteredService, ServiceState
from opbroker.controller.claims import conditions, healthjobs, names, probes, servicebinding, states
from opbroker.controller.claims.context import Context
from opbroker.controller.claims.kinds import CLAIMS, REGISTERED_SERVICES
from opbroker.controller.claims.states import CheckOutcome, Result
from opbroker.controller.reasons import Reason
from opbroker.controller.reconciler import DONE, Key, Outcome

logger = logging.getLogger(__name__)


@dataclass
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


class RegisteredReconciler:
    kind: ClassVar[str] = "registered"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._schedules: dict[Key, Schedule] = {}

    def forget(self, key: Key) -> None:
        self._schedules.pop(key, None)
        self.ctx.prober.forget(key)

    def reconcile(self, key: Key) -> Outcome:
        return self.reconcile_object(key.namespace, key.name)

    def reread(self, key: Key) -> None:
        return None  # reads come from the watch cache or the API; nothing to drop

    def reconcile_object(self, namespace: str, name: str) -> Outcome:
        key = Key("registered", namespace, name)
        service = self.ctx.kube.get_custom(REGISTERED_SERVICES, namespace, name)
        if service is None or service["metadata"].get("deletionTimestamp"):
            self.forget(key)
            return DONE
        status: dict[str, Any] = service.get("status") or {}
        generation = service["metadata"].get("generation")
        try:
            model = RegisteredService.model_validate({k: v for k, v in service.items() if k != "status"})
        except ValidationError as exc:
            invalid = CheckOutcome(Result.UNDETERMINED, Reason.SPEC_INVALID, "; ".join(field_errors(exc)))
            record = states.record_after(states.record_from_status(status), invalid)
            self._write(
                service, ServiceState.UNDETERMINED, record, claimed_by=status.get("claimedBy"), generation=generation
            )
            return DONE
        current = ServiceState(status["state"]) if status.get("state") else None
        if current is None:
            self._write(
                service,
                ServiceState.REGISTERED,
                states.NEVER_CHECKED,
                claimed_by=status.get("claimedBy"),
                generation=generation,
            )
            status = service.get("status") or {}
            current = ServiceState.REGISTERED

        holder = status.get("claimedBy") or None
        held = holder is not None and self._claim_exists(namespace, holder)

        spec = model.spec
        definition = spec.service_endpoint_definition
        secrets = {
            secret: servicebinding.decode(self.ctx.kube.read_secret(namespace, secret))
            for secret in sorted(servicebinding.referenced_secrets(definition))
        }
        resolution = servicebinding.resolve(definition, secrets)
        record = states.record_from_status(status)
        requeue: float | None = None
        check = spec.healthcheck
        if not resolution.complete:
            self._schedules.pop(key, None)  # check at once when the Secret is back
            missing = CheckOutcome(Result.UNDETERMINED, Reason.SECRET_MISSING, "; ".join(resolution.missing))
            record = states.record_after(record, missing)
            health = states.Health.UNDETERMINED
        elif check is None:
            self.forget(key)
            record = states.UNCHECKED_RECORD
            health = states.Health.UNCHECKED
        else:
            service_type = next((i.value for i in spec.service_class_identity if i.name == "type"), None)
            fingerprint = fingerprint_of(check, resolution.values, service_type)
            if check.container is not None:
                provider = next((i.value for i in spec.service_class_identity if i.name == "provider"), None)
                data = servicebinding.binding_data(
                    service_type=service_type or "", provider=provider, values=resolution.values, keys=resolution.values
                )
                outcome, requeue = self._container_check(service, check, data, service_type, fingerprint)
            else:
                outcome, requeue = self._probe_check(key, check, resolution.values, fingerprint)
            if outcome is not None:
                record = states.record_after(record, outcome)
            health = states.health_of(record, checked=True, threshold=check.failure_threshold)

        state = states.next_state(current, health, held=held)
        self._write(service, state, record, claimed_by=holder if held else None, generation=generation)
        return Outcome(requeue_after=requeue)

    # -- the holder ----------------------------------------------------------------------------------

    def _claim_exists(self, namespace: str, claim: str) -> bool:
        """Whether the claim named by ``claimedBy`` exists (cache first, then the API to be sure)."""
        if self.ctx.store.claim(namespace, claim) is not None:
            return True
        return self.ctx.kube.get_custom(CLAIMS, namespace, claim) is not None

    # -- TCP / HTTP ----------------------------------------------------------------------------------

    def _probe_check(
        self, key: Key, check: HealthCheck, values: dict[str, str], fingerprint: str
    ) -> tuple[CheckOutcome | None, float | None]:
        prober = self.ctx.prober
        period = healthjobs.period_of(check)
        now = time.monotonic()
        schedule = self._schedules.get(key)
        if schedule is None or schedule.fingerprint != fingerprint:
            schedule = self._schedules[key] = Schedule(fingerprint, now)
        outcome: CheckOutcome | None = None
        finished = prober.take(key)
        if finished is not None and finished.fingerprint == fingerprint:
            outcome = finished.outcome
            schedule.due = now + period
        elif finished is not None:
            schedule.due = now  # a result for a check that has changed since: run the new one
        if prober.running(key):
            return outcome, None  # the prober enqueues the service when the result is in
        if now >= schedule.due:
            timeout = min(self.ctx.settings.probe_timeout, period)
            probe = probes.probe_for(check, values, timeout=timeout)
            if isinstance(probe, CheckOutcome):
                schedule.due = now + period
                return probe, period
            schedule.due = math.inf
            prober.submit(key, fingerprint, probe)
            return outcome, None
        return outcome, max(0.05, schedule.due - now)

    # -- container -----------------------------------------------------------------------------------

    def _container_check(
        self,
        service: dict[str, Any],
        check: HealthCheck,
        data: dict[str, str],
        service_type: str | None,
        fingerprint: str,
    ) -> tuple[CheckOutcome | None, float | None]:
        """Start, read or time out the check's Job; ``data`` is what it mounts (binding layout)."""
        kube = self.ctx.kube
        meta = service["metadata"]
        key = Key("registered", meta["namespace"], meta["name"])
        period = healthjobs.period_of(check)
        ref = ResourceRef(
            api_version="batch/v1", kind="Job", name=names.healthcheck_name(meta["name"]), namespace=meta["namespace"]
        )
        now = time.monotonic()
        wall = datetime.datetime.now(datetime.UTC)
        schedule = self._schedules.get(key)
        if schedule is None or schedule.fingerprint != fingerprint:
            schedule = self._schedules[key] = Schedule(fingerprint, now)
        job = kube.get(ref)
        if job is not None:
            job_meta = job.get("metadata") or {}
            if job_meta.get("deletionTimestamp"):
                return None, 1.0
            if (job_meta.get("annotations") or {}).get(names.ANNOTATION_FINGERPRINT) != fingerprint:
                kube.delete(ref)  # a run of an older check (or older credentials): replace it
                schedule.due = now
                return None, 0.5
            outcome = healthjobs.read(job, deadline=period, now=wall)
            if outcome is None:
                return None, max(0.05, healthjobs.remaining(job, deadline=period, now=wall))
            kube.delete(ref)
            schedule.due = now + period
            return outcome, period
        if now < schedule.due:
            return None, max(0.05, schedule.due - now)
        if service_type is None:
            return CheckOutcome(Result.UNDETERMINED, Reason.CHECK_INVALID, "no 'type' in serviceClassIdentity"), period
        secret, job_manifest = healthjobs.manifests(
            service, check, data, service_type=service_type, fingerprint=fingerprint
        )
        try:
            kube.apply_secret(secret)
            created = kube.create(job_manifest)
        except ApiException as exc:
            if exc.status not in (400, 403, 422):
                raise
            schedule.due = now + period
            return CheckOutcome(
                Result.UNDETERMINED, Reason.CHECK_INVALID, f"cannot start the check: HTTP {exc.status}"
            ), period
        if created is None:
            return None, 1.0  # the previous run is still being deleted
        schedule.due = math.inf
        return None, period

    # -- status --------------------------------------------------------------------------------------

    def _write(
        self,
        service: dict[str, Any],
        state: ServiceState,
        record: states.HealthRecord,
        *,
        claimed_by: str | None,
        generation: int | None = None,
    ) -> None:
        status: dict[str, Any] = service.get("status") or {}
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
            return
        patched = self.ctx.patch_status(REGISTERED_SERVICES, service, wanted)
        if patched is not None:
            service.clear()
            service.update(patched)
        if previous != state.value:
            detail = "" if state in (ServiceState.REGISTERED, ServiceState.CLAIMED) else f": {record.message}"
            if status.get("claimedBy") and not claimed_by:
                detail += f" (claim {status['claimedBy']!r} no longer exists)"
            self.ctx.kube.emit_event(
                service,
                reason=states.transition_reason(state).value,
                message=f"{previous or 'new'} -> {state.value}{detail}",
                warning=state in (ServiceState.UNREACHABLE, ServiceState.UNDETERMINED),
            )
