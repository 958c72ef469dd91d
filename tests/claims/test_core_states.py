"""The RegisteredService state machine and health accounting, without a server.

Aspects: every transition of the seed (Registered → Available / Claimed / Unreachable / Undetermined,
health flapping while Claimed back to Claimed or to Available), the failure threshold, undetermined
runs leaving the failure count alone, claim/release transitions, and the health record surviving a
round trip through the status (so a controller restart loses nothing).
"""

from __future__ import annotations

import pytest

from opbroker.api.primaza import ServiceState
from opbroker.controller.claims.core import states
from opbroker.controller.claims.core.states import CheckOutcome, Health, Result
from opbroker.controller.core.reasons import Reason

S = ServiceState
H = Health

# (reason, current state, health, held, next state)
TRANSITIONS = [
    ("created, no health check: Registered -> Available", S.REGISTERED, H.UNCHECKED, False, S.AVAILABLE),
    ("created, check passes: Registered -> Available", S.REGISTERED, H.HEALTHY, False, S.AVAILABLE),
    ("created, first result pending: stays Registered", S.REGISTERED, H.PENDING, False, S.REGISTERED),
    ("brand new, pending: Registered", None, H.PENDING, False, S.REGISTERED),
    ("created, one failure below threshold: stays Registered", S.REGISTERED, H.FAILING, False, S.REGISTERED),
    ("created, check fails to threshold: Registered -> Unreachable", S.REGISTERED, H.DOWN, False, S.UNREACHABLE),
    ("created, check cannot run: Registered -> Undetermined", S.REGISTERED, H.UNDETERMINED, False, S.UNDETERMINED),
    ("claimed: Available -> Claimed", S.AVAILABLE, H.HEALTHY, True, S.CLAIMED),
    ("released: Claimed -> Available", S.CLAIMED, H.HEALTHY, False, S.AVAILABLE),
    ("health fails while Available: -> Unreachable", S.AVAILABLE, H.DOWN, False, S.UNREACHABLE),
    ("health fails while Claimed: Claimed -> Unreachable", S.CLAIMED, H.DOWN, True, S.UNREACHABLE),
    ("recovers, claim still holds it: Unreachable -> Claimed", S.UNREACHABLE, H.HEALTHY, True, S.CLAIMED),
    ("recovers, no claim holds it: Unreachable -> Available", S.UNREACHABLE, H.HEALTHY, False, S.AVAILABLE),
    ("check cannot run while Claimed: -> Undetermined", S.CLAIMED, H.UNDETERMINED, True, S.UNDETERMINED),
    ("check runs again and passes: Undetermined -> Claimed", S.UNDETERMINED, H.HEALTHY, True, S.CLAIMED),
    ("check runs again and passes: Undetermined -> Available", S.UNDETERMINED, H.HEALTHY, False, S.AVAILABLE),
    ("one failure below threshold keeps Claimed", S.CLAIMED, H.FAILING, True, S.CLAIMED),
    ("one failure below threshold keeps Available", S.AVAILABLE, H.FAILING, False, S.AVAILABLE),
    ("below threshold does not leave Unreachable", S.UNREACHABLE, H.FAILING, False, S.UNREACHABLE),
    ("below threshold does not leave Undetermined", S.UNDETERMINED, H.FAILING, True, S.UNDETERMINED),
    ("pending keeps the current state", S.CLAIMED, H.PENDING, True, S.CLAIMED),
    ("health check removed while Unreachable: -> Available", S.UNREACHABLE, H.UNCHECKED, False, S.AVAILABLE),
    ("holder gone while Claimed: -> Available", S.CLAIMED, H.UNCHECKED, False, S.AVAILABLE),
]


@pytest.mark.parametrize(
    ("reason", "current", "health", "held", "expected"), TRANSITIONS, ids=[t[0] for t in TRANSITIONS]
)
def test_next_state(reason: str, current: S | None, health: H, held: bool, expected: S) -> None:
    assert states.next_state(current, health, held=held) == expected, reason


PASS = CheckOutcome(Result.PASSED, Reason.HEALTHY, "ok")
FAIL = CheckOutcome(Result.FAILED, Reason.PROBE_FAILED, "refused")
UNDETERMINED = CheckOutcome(Result.UNDETERMINED, Reason.CHECK_DEADLINE, "no verdict")


def run(outcomes: list[CheckOutcome], *, held: list[bool], threshold: int) -> list[S]:
    """Feed results through the record and the state machine, as reconciles do, starting Registered."""
    state: S = S.REGISTERED
    record = states.NEVER_CHECKED
    seen = []
    for outcome, holds in zip(outcomes, held, strict=True):
        record = states.record_after(record, outcome)
        state = states.next_state(state, states.health_of(record, checked=True, threshold=threshold), held=holds)
        seen.append(state)
    return seen


def test_flapping_while_claimed_returns_to_claimed() -> None:
    seen = run([PASS, PASS, FAIL, FAIL, PASS], held=[False, True, True, True, True], threshold=2)
    assert seen == [S.AVAILABLE, S.CLAIMED, S.CLAIMED, S.UNREACHABLE, S.CLAIMED]


def test_flapping_while_claimed_returns_to_available_when_the_claim_went_away() -> None:
    seen = run([PASS, FAIL, PASS], held=[True, True, False], threshold=1)
    assert seen == [S.CLAIMED, S.UNREACHABLE, S.AVAILABLE]


def test_the_threshold_counts_consecutive_failures_only() -> None:
    seen = run([FAIL, FAIL, PASS, FAIL, FAIL, FAIL], held=[False] * 6, threshold=3)
    assert seen == [S.REGISTERED, S.REGISTERED, S.AVAILABLE, S.AVAILABLE, S.AVAILABLE, S.UNREACHABLE]


def test_an_undetermined_run_neither_counts_nor_resets_failures() -> None:
    record = states.NEVER_CHECKED
    for outcome in (FAIL, UNDETERMINED, FAIL):
        record = states.record_after(record, outcome)
    assert record.failures == 2 and record.result == Result.FAILED
    assert states.record_after(record, UNDETERMINED).failures == 2
    assert states.record_after(record, PASS).failures == 0


@pytest.mark.parametrize(
    ("record", "checked", "threshold", "health"),
    [
        (states.NEVER_CHECKED, False, 3, H.UNCHECKED),
        (states.NEVER_CHECKED, True, 3, H.PENDING),
        (states.HealthRecord(Result.PASSED, 0, Reason.HEALTHY, ""), True, 3, H.HEALTHY),
        (states.HealthRecord(Result.FAILED, 2, Reason.PROBE_FAILED, ""), True, 3, H.FAILING),
        (states.HealthRecord(Result.FAILED, 3, Reason.PROBE_FAILED, ""), True, 3, H.DOWN),
        (states.HealthRecord(Result.UNDETERMINED, 0, Reason.SECRET_MISSING, ""), True, 3, H.UNDETERMINED),
    ],
)
def test_health_of(record: states.HealthRecord, checked: bool, threshold: int, health: H) -> None:
    assert states.health_of(record, checked=checked, threshold=threshold) == health


@pytest.mark.parametrize(
    "record",
    [
        states.NEVER_CHECKED,
        states.UNCHECKED_RECORD,
        states.HealthRecord(Result.PASSED, 0, Reason.HEALTHY, "TCP connect to db:5432 succeeded"),
        states.HealthRecord(Result.FAILED, 4, Reason.PROBE_FAILED, "refused (consecutive failures: 4)"),
        states.HealthRecord(Result.UNDETERMINED, 1, Reason.CHECK_DEADLINE, "no verdict"),
        states.HealthRecord(Result.UNDETERMINED, 0, Reason.SECRET_MISSING, "Secret 'x' not found"),
    ],
)
def test_the_health_record_survives_the_status(record: states.HealthRecord) -> None:
    status = {
        "consecutiveFailures": record.failures,
        "conditions": states.status_conditions(
            None, record=record, state=S.AVAILABLE, generation=1, timestamp="2026-01-01T00:00:00Z"
        ),
    }
    assert states.record_from_status(status["conditions"], record.failures) == record
    again = states.status_conditions(
        status["conditions"], record=record, state=S.AVAILABLE, generation=1, timestamp="2026-01-01T00:00:00Z"
    )
    assert again == status["conditions"]  # re-rendering an unchanged record changes nothing


def test_ready_condition_follows_the_state() -> None:
    for state, ready in [(S.AVAILABLE, "True"), (S.CLAIMED, "True"), (S.UNREACHABLE, "False"), (S.REGISTERED, "False")]:
        found = states.status_conditions(
            None, record=states.NEVER_CHECKED, state=state, generation=2, timestamp="2026-01-01T00:00:00Z"
        )
        condition = next(c for c in found if c["type"] == "Ready")
        assert (condition["status"], condition["reason"], condition["observedGeneration"]) == (ready, state.value, 2)


@pytest.mark.parametrize(
    ("current", "claimed", "released"),
    [
        (S.AVAILABLE, S.CLAIMED, S.AVAILABLE),
        (S.CLAIMED, S.CLAIMED, S.AVAILABLE),
        (S.UNREACHABLE, S.UNREACHABLE, S.UNREACHABLE),
        (S.UNDETERMINED, S.UNDETERMINED, S.UNDETERMINED),
    ],
)
def test_claim_and_release(current: S, claimed: S, released: S) -> None:
    assert states.on_claimed(current) == claimed
    assert states.on_released(current) == released
