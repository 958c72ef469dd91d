"""The RegisteredService state machine and its health accounting. Pure.

States (the seed's): Registered → Available / Claimed / Unreachable / Undetermined. The state is a
function of three facts, so a reconcile can always recompute it (level-triggered):

* the current state (Registered stays Registered until the first check result; a failing check below
  the threshold does not move a service out of the state it is in);
* the *health*, derived from the last check result and the count of consecutive failures, both kept in
  the status (``consecutiveFailures`` and the ``Healthy`` condition) so a restart loses nothing;
* whether a claim *holds* the service (``status.claimedBy`` names a claim that exists).

=================  =====================  ==================================================
health             held                   next state
=================  =====================  ==================================================
DOWN               any                    Unreachable
UNDETERMINED       any                    Undetermined
PENDING            any                    current state (Registered for a new service)
FAILING (<thr.)    any                    current if Registered/Unreachable/Undetermined,
                                          else Claimed if held, else Available
HEALTHY/UNCHECKED  yes                    Claimed
HEALTHY/UNCHECKED  no                     Available
=================  =====================  ==================================================

So health flapping while claimed goes Claimed → Unreachable → Claimed (the claim still holds it) or
→ Available (the claim was deleted meanwhile), exactly as the seed describes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from opbroker.api.primaza import ServiceState
from opbroker.controller.claims.core import conditions
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.views import conditions_of
from opbroker.kubeclient.wire import JsonBody

HEALTHY_CONDITION = "Healthy"
READY_CONDITION = "Ready"


class Result(StrEnum):
    """What one run of a health check found."""

    PASSED = "Passed"
    FAILED = "Failed"
    """The check ran and the service did not answer as expected (incl. an unresolvable host)."""
    UNDETERMINED = "Undetermined"
    """The check itself could not run or finish (missing Secret, Job past its deadline, bad check)."""


class Health(StrEnum):
    UNCHECKED = "Unchecked"
    """No health check defined: available as soon as registered."""
    PENDING = "Pending"
    HEALTHY = "Healthy"
    FAILING = "Failing"
    """Failed fewer than ``failureThreshold`` times in a row."""
    DOWN = "Down"
    UNDETERMINED = "Undetermined"


@dataclass(frozen=True)
class CheckOutcome:
    """The result of one check, with the reason and a message that never contains credentials."""

    result: Result
    reason: Reason
    message: str


@dataclass(frozen=True)
class HealthRecord:
    """What the status remembers of the checks: the last result and the consecutive failures."""

    result: Result | None
    failures: int
    reason: Reason
    message: str


NEVER_CHECKED = HealthRecord(result=None, failures=0, reason=Reason.CHECK_PENDING, message="not checked yet")


def record_from_status(listed: object, failures: int) -> HealthRecord:
    """Read the health record back from a RegisteredService status: its conditions (as read) and
    ``consecutiveFailures``."""
    condition = conditions.find(conditions_of(listed), HEALTHY_CONDITION)
    if condition is None:
        return NEVER_CHECKED
    try:
        reason = Reason(condition.reason or "")
    except ValueError:
        reason = Reason.CHECK_PENDING
    message = condition.message or ""
    match condition.status:
        case "True":
            return HealthRecord(Result.PASSED, failures, reason, message)
        case "False":
            return HealthRecord(Result.FAILED, failures, reason, message)
    if reason == Reason.CHECK_PENDING:
        return HealthRecord(None, failures, reason, message)
    return HealthRecord(Result.UNDETERMINED, failures, reason, message)


def record_after(record: HealthRecord, outcome: CheckOutcome) -> HealthRecord:
    """Account one check result: a pass resets the failure count, an undetermined run leaves it."""
    message = outcome.message
    if outcome.result == Result.PASSED:
        failures = 0
    elif outcome.result == Result.FAILED:
        failures = record.failures + 1
        message = f"{message} (consecutive failures: {failures})"
    else:
        failures = record.failures
    return HealthRecord(outcome.result, failures, outcome.reason, message)


def health_of(record: HealthRecord, *, checked: bool, threshold: int) -> Health:
    if not checked:
        return Health.UNCHECKED
    if record.result is None:
        return Health.PENDING
    if record.result == Result.UNDETERMINED:
        return Health.UNDETERMINED
    if record.result == Result.PASSED:
        return Health.HEALTHY
    return Health.DOWN if record.failures >= threshold else Health.FAILING


def next_state(current: ServiceState | None, health: Health, *, held: bool) -> ServiceState:
    """The state a RegisteredService should be in (see the module's table)."""
    if health == Health.DOWN:
        return ServiceState.UNREACHABLE
    if health == Health.UNDETERMINED:
        return ServiceState.UNDETERMINED
    if health == Health.PENDING:
        return current or ServiceState.REGISTERED
    if health == Health.FAILING and current in (
        None,
        ServiceState.REGISTERED,
        ServiceState.UNREACHABLE,
        ServiceState.UNDETERMINED,
    ):
        return current or ServiceState.REGISTERED
    return ServiceState.CLAIMED if held else ServiceState.AVAILABLE


def on_claimed(current: ServiceState | None) -> ServiceState | None:
    """The state written together with ``claimedBy``: an Available service becomes Claimed.

    A held service that is Unreachable or Undetermined keeps that state; it returns to Claimed when
    its health does.
    """
    if current in (ServiceState.AVAILABLE, ServiceState.CLAIMED):
        return ServiceState.CLAIMED
    return current


def on_released(current: ServiceState | None) -> ServiceState | None:
    """The state written when the holding claim lets go: Claimed goes back to Available."""
    return ServiceState.AVAILABLE if current == ServiceState.CLAIMED else current


def transition_reason(state: ServiceState) -> Reason:
    return {
        ServiceState.REGISTERED: Reason.REGISTERED,
        ServiceState.AVAILABLE: Reason.AVAILABLE,
        ServiceState.CLAIMED: Reason.CLAIMED,
        ServiceState.UNREACHABLE: Reason.UNREACHABLE,
        ServiceState.UNDETERMINED: Reason.UNDETERMINED,
    }[state]


def status_conditions(
    previous: object,
    *,
    record: HealthRecord,
    state: ServiceState,
    generation: int | None,
    timestamp: str,
) -> list[JsonBody]:
    """The ``Healthy`` condition (the persisted health record) and ``Ready`` (Available or Claimed);
    ``timestamp``: a flipped condition's transition time (the injected clock's)."""
    healthy: conditions.ConditionStatus = "Unknown"
    if record.result == Result.PASSED:
        healthy = "True"
    elif record.result == Result.FAILED:
        healthy = "False"
    updated = conditions.with_condition(
        previous,
        type_=HEALTHY_CONDITION,
        status=healthy,
        reason=record.reason.value,
        message=record.message,
        generation=generation,
        timestamp=timestamp,
    )
    ready = state in (ServiceState.AVAILABLE, ServiceState.CLAIMED)
    return conditions.with_condition(
        updated,
        type_=READY_CONDITION,
        status="True" if ready else "False",
        reason=transition_reason(state).value,
        message=f"state {state.value}",
        generation=generation,
        timestamp=timestamp,
    )


UNCHECKED_RECORD = HealthRecord(Result.PASSED, 0, Reason.NO_HEALTHCHECK, "no health check defined")
