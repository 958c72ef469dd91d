"""The OSB operation protocol shared by Service Catalog Instances and Bindings (``servicecatalog.operations``),
table-tested: what a refused request, a ``last_operation`` answer, the deadline and a credentials fetch decide,
and what the status records at each step. Pure: no cluster, no broker, time passed in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from opbroker import osbclient
from opbroker.controller.core.shown_failures import broker_message
from opbroker.controller.servicecatalog.core import operations
from opbroker.controller.servicecatalog.core.operations import MIN_POLL_DELAY, Decision, Verdict
from opbroker.controller.servicecatalog.core.views import CatalogObject, PlanEntry
from opbroker.osbclient import Request

T0 = datetime(2026, 1, 1, tzinfo=UTC)
PACING = osbclient.Backoff(base=1.0, maximum=30.0, max_duration=3600.0)
P, U, D, B, UB = Request.PROVISION, Request.UPDATE, Request.DEPROVISION, Request.BIND, Request.UNBIND


def answered(status: int, error: str | None = None) -> osbclient.OSBError:
    return osbclient.errors.error_class(status)(status, error, "said no", what="the request")


LOST = osbclient.ResponseLost("the request", "read timeout", timed_out=True)
UNREACHABLE = osbclient.BrokerUnreachable("the request", "connection refused", timed_out=False)
MALFORMED_201 = osbclient.MalformedResponse(201, None, "not a JSON object", what="the request")


# -- a request the broker refused (or that got no answer) ----------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "error", "verdict", "mitigate", "refused"),
    [
        # A creation whose outcome is unknown is mitigated (OSB's table), then retried: not a final failure.
        pytest.param(P, answered(500), Verdict.FAILED, True, False, id="provision-5xx-mitigates"),
        pytest.param(P, answered(503), Verdict.FAILED, True, False, id="provision-503-mitigates"),
        pytest.param(P, LOST, Verdict.FAILED, True, False, id="provision-lost-answer-mitigates"),
        pytest.param(P, MALFORMED_201, Verdict.FAILED, True, False, id="provision-malformed-201-mitigates"),
        pytest.param(B, answered(502), Verdict.FAILED, True, False, id="bind-5xx-mitigates"),
        pytest.param(B, LOST, Verdict.FAILED, True, False, id="bind-lost-answer-mitigates"),
        # Never sent, or "not now": sent again after a backoff.
        pytest.param(P, UNREACHABLE, Verdict.RETRY, False, False, id="provision-unreachable-retried"),
        pytest.param(P, answered(429), Verdict.RETRY, False, False, id="provision-429-retried"),
        pytest.param(P, answered(408), Verdict.RETRY, False, False, id="provision-408-retried-not-mitigated"),
        pytest.param(
            P, answered(422, "ConcurrencyError"), Verdict.RETRY, False, False, id="provision-concurrency-retried"
        ),
        pytest.param(B, UNREACHABLE, Verdict.RETRY, False, False, id="bind-unreachable-retried"),
        # Rejected as it is: permanent, nothing to mitigate (the broker made nothing).
        pytest.param(P, answered(400), Verdict.FAILED, False, True, id="provision-400-permanent"),
        pytest.param(P, answered(409), Verdict.FAILED, False, True, id="provision-409-permanent"),
        pytest.param(P, answered(422, "MaintenanceInfoConflict"), Verdict.FAILED, False, True, id="provision-422"),
        pytest.param(B, answered(403), Verdict.FAILED, False, True, id="bind-403-permanent"),
        # An update is never mitigated: its 5xx and lost answers are retried.
        pytest.param(U, answered(500), Verdict.RETRY, False, False, id="update-5xx-retried"),
        pytest.param(U, LOST, Verdict.RETRY, False, False, id="update-lost-retried"),
        pytest.param(U, answered(400), Verdict.FAILED, False, True, id="update-400-permanent"),
        # Removals are sent again: mitigating one would be the same request.
        pytest.param(D, answered(500), Verdict.RETRY, False, False, id="deprovision-5xx-retried"),
        pytest.param(D, LOST, Verdict.RETRY, False, False, id="deprovision-lost-retried"),
        pytest.param(D, answered(400), Verdict.FAILED, False, True, id="deprovision-400-failed-not-mitigated"),
        pytest.param(UB, answered(500), Verdict.RETRY, False, False, id="unbind-5xx-retried"),
        pytest.param(UB, answered(401), Verdict.FAILED, False, True, id="unbind-401-failed-not-mitigated"),
    ],
)
def test_a_refused_request(
    request_: Request, error: osbclient.BrokerError, verdict: Verdict, mitigate: bool, refused: bool
) -> None:
    decision = operations.refused(request_, error)
    assert decision.verdict is verdict
    assert decision.mitigate is mitigate
    assert decision.refused is refused
    assert not decision.final  # no operation ran: nothing the broker decided stands
    assert decision.message == broker_message(error)  # the fix first (core.shown_failures), then the client's words
    assert decision.message.endswith(str(error))
    assert decision.answered == (error.status if isinstance(error, osbclient.OSBError) else None)


# -- a last_operation poll ---------------------------------------------------------------------------------------

IN_PROGRESS = osbclient.LastOperation(state=osbclient.IN_PROGRESS, description="working")
SUCCEEDED = osbclient.LastOperation(state=osbclient.SUCCEEDED, description="done")
FAILED = osbclient.LastOperation(state=osbclient.FAILED, description="out of disk")
FAILED_SILENTLY = osbclient.LastOperation(state=osbclient.FAILED)
GONE = osbclient.LastOperation(state=osbclient.SUCCEEDED, gone=True)  # how the client reads a 410


def retry_after(seconds: float) -> osbclient.LastOperation:
    return osbclient.LastOperation(state=osbclient.IN_PROGRESS, retry_after=seconds)


@pytest.mark.parametrize(
    ("request_", "answer", "elapsed", "polls", "want"),
    [
        # Accepted and still in progress: the backoff doubles from the base, capped at the maximum.
        pytest.param(P, IN_PROGRESS, 10, 1, Decision(Verdict.POLL, delay=1.0), id="first-poll-after-base"),
        pytest.param(P, IN_PROGRESS, 10, 3, Decision(Verdict.POLL, delay=4.0), id="third-poll-doubled"),
        pytest.param(B, IN_PROGRESS, 10, 20, Decision(Verdict.POLL, delay=30.0), id="backoff-capped"),
        # Retry-After replaces the backoff for that poll, but never past the deadline nor into a busy loop.
        pytest.param(P, retry_after(7), 10, 5, Decision(Verdict.POLL, delay=7.0), id="retry-after-honoured"),
        pytest.param(UB, retry_after(45), 10, 1, Decision(Verdict.POLL, delay=45.0), id="retry-after-over-max"),
        pytest.param(P, retry_after(0), 10, 1, Decision(Verdict.POLL, delay=MIN_POLL_DELAY), id="retry-after-0"),
        pytest.param(P, retry_after(5000), 3000, 1, Decision(Verdict.POLL, delay=600.0), id="not-past-deadline"),
        # Past the deadline: failed (OSB), a creation mitigated and its failure final.
        pytest.param(
            P,
            IN_PROGRESS,
            3600,
            9,
            Decision(
                Verdict.FAILED,
                "the provision did not finish within 3600s",
                mitigate=True,
                final=True,
                timed_out=True,
            ),
            id="provision-deadline-passed",
        ),
        pytest.param(
            B,
            retry_after(1),
            4000,
            9,
            Decision(Verdict.FAILED, "the bind did not finish within 3600s", mitigate=True, final=True, timed_out=True),
            id="bind-deadline-passed",
        ),
        pytest.param(
            U,
            IN_PROGRESS,
            3601,
            9,
            Decision(Verdict.FAILED, "the update did not finish within 3600s", timed_out=True),
            id="update-deadline-passed-not-mitigated",
        ),
        pytest.param(
            D,
            IN_PROGRESS,
            3601,
            9,
            Decision(Verdict.FAILED, "the deprovision did not finish within 3600s", timed_out=True),
            id="deprovision-deadline-passed-not-mitigated",
        ),
        # Succeeded.
        pytest.param(P, SUCCEEDED, 10, 2, Decision(Verdict.SUCCEEDED, "done"), id="provision-succeeded"),
        pytest.param(U, SUCCEEDED, 10, 2, Decision(Verdict.SUCCEEDED, "done"), id="update-succeeded"),
        pytest.param(B, SUCCEEDED, 10, 2, Decision(Verdict.SUCCEEDED, "done"), id="bind-succeeded"),
        pytest.param(D, SUCCEEDED, 10, 2, Decision(Verdict.SUCCEEDED, "done"), id="deprovision-succeeded"),
        # 410 Gone finishes a removal; for a creation it is a failure with nothing left to mitigate.
        pytest.param(D, GONE, 10, 2, Decision(Verdict.SUCCEEDED), id="deprovision-gone-410"),
        pytest.param(UB, GONE, 10, 2, Decision(Verdict.SUCCEEDED), id="unbind-gone-410"),
        pytest.param(D, GONE, 99999, 2, Decision(Verdict.SUCCEEDED), id="deprovision-gone-even-past-deadline"),
        pytest.param(
            P, GONE, 10, 2, Decision(Verdict.FAILED, "the instance is gone", final=True), id="provision-gone-410"
        ),
        pytest.param(B, GONE, 10, 2, Decision(Verdict.FAILED, "the binding is gone", final=True), id="bind-gone-410"),
        # The broker says failed: a creation is mitigated and stays failed; others are not mitigated.
        pytest.param(
            P, FAILED, 10, 2, Decision(Verdict.FAILED, "out of disk", mitigate=True, final=True), id="provision-failed"
        ),
        pytest.param(
            B,
            FAILED_SILENTLY,
            10,
            2,
            Decision(Verdict.FAILED, "the broker reported failure", mitigate=True, final=True),
            id="bind-failed-without-description",
        ),
        pytest.param(U, FAILED, 10, 2, Decision(Verdict.FAILED, "out of disk"), id="update-failed"),
        pytest.param(D, FAILED, 10, 2, Decision(Verdict.FAILED, "out of disk"), id="deprovision-failed"),
        pytest.param(UB, FAILED, 10, 2, Decision(Verdict.FAILED, "out of disk"), id="unbind-failed"),
    ],
)
def test_a_poll_answer(
    request_: Request, answer: osbclient.LastOperation, elapsed: float, polls: int, want: Decision
) -> None:
    decision = operations.polled(
        request_, answer, started=T0, now=T0 + timedelta(seconds=elapsed), polls=polls, backoff=PACING
    )
    assert decision == want


@pytest.mark.parametrize(
    ("request_", "error", "elapsed", "want"),
    [
        # A poll the broker may outlive is polled again (backoff, no Retry-After) — until the deadline.
        pytest.param(P, answered(503), 10, Decision(Verdict.POLL, delay=2.0), id="poll-5xx-polled-again"),
        pytest.param(UB, LOST, 10, Decision(Verdict.POLL, delay=2.0), id="poll-lost-polled-again"),
        pytest.param(
            P,
            answered(503),
            3600,
            Decision(
                Verdict.FAILED, "the provision did not finish within 3600s", mitigate=True, final=True, timed_out=True
            ),
            id="poll-5xx-past-deadline-times-out",
        ),
        # A permanent refusal of the poll counts as the broker saying failed.
        pytest.param(
            P, answered(400), 10, Decision(Verdict.FAILED, str(answered(400)), mitigate=True, final=True), id="p-400"
        ),
        pytest.param(D, answered(400), 10, Decision(Verdict.FAILED, str(answered(400))), id="deprovision-poll-400"),
    ],
)
def test_a_poll_that_raised(request_: Request, error: osbclient.BrokerError, elapsed: float, want: Decision) -> None:
    decision = operations.polled(
        request_, error, started=T0, now=T0 + timedelta(seconds=elapsed), polls=2, backoff=PACING
    )
    assert decision == want


def test_an_operation_without_a_recorded_start_is_timed_from_now() -> None:
    decision = operations.polled(P, IN_PROGRESS, started=None, now=T0, polls=1, backoff=PACING)
    assert decision == Decision(Verdict.POLL, delay=1.0)


@pytest.mark.parametrize(
    ("plan", "max_duration"),
    [
        pytest.param({"maximumPollingDuration": 30}, 30.0, id="plan-shorter-wins"),
        pytest.param({"maximumPollingDuration": 7200}, 3600.0, id="plan-longer-ignored"),
        pytest.param({"maximumPollingDuration": 3600}, 3600.0, id="equal"),
        pytest.param({"name": "p"}, 3600.0, id="plan-without-limit"),
        pytest.param({"maximumPollingDuration": True}, 3600.0, id="boolean-is-no-limit"),
        pytest.param({"maximumPollingDuration": "30"}, 3600.0, id="unread-text-is-no-limit"),
        pytest.param(None, 3600.0, id="no-plan"),
    ],
)
def test_the_deadline_is_the_shorter_of_the_controllers_and_the_plans(
    plan: dict[str, Any] | None, max_duration: float
) -> None:
    backoff = operations.deadline(PACING, None if plan is None else PlanEntry.of(plan))
    assert backoff.max_duration == max_duration
    assert (backoff.base, backoff.maximum) == (PACING.base, PACING.maximum)


def test_the_plans_deadline_fails_a_poll_the_controllers_would_allow() -> None:
    short = operations.deadline(PACING, PlanEntry.of({"maximumPollingDuration": 30}))
    at = T0 + timedelta(seconds=31)
    assert operations.polled(P, IN_PROGRESS, started=T0, now=at, polls=3, backoff=PACING).verdict is Verdict.POLL
    decision = operations.polled(P, IN_PROGRESS, started=T0, now=at, polls=3, backoff=short)
    assert decision == Decision(
        Verdict.FAILED, "the provision did not finish within 30s", mitigate=True, final=True, timed_out=True
    )
    # Near the deadline the wait is cut to it: the poll at the deadline is the last chance to see the outcome.
    near = operations.polled(P, retry_after(20), started=T0, now=T0 + timedelta(seconds=25), polls=3, backoff=short)
    assert near == Decision(Verdict.POLL, delay=5.0)


@pytest.mark.parametrize(
    ("error", "want"),
    [
        pytest.param(None, Decision(Verdict.SUCCEEDED), id="fetched"),
        pytest.param(
            answered(503),
            Decision(Verdict.RETRY, f"fetching the bound credentials failed: {answered(503)}"),
            id="transient-fetched-again",
        ),
        pytest.param(
            answered(404),
            Decision(Verdict.FAILED, f"fetching the bound credentials failed: {answered(404)}", mitigate=True),
            id="permanent-unbound-then-bound-again",
        ),
    ],
)
def test_fetching_an_asynchronous_binds_credentials(error: osbclient.BrokerError | None, want: Decision) -> None:
    assert operations.fetched(error) == want


# -- what the status records -------------------------------------------------------------------------------------


def body(*, generation: int = 3, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "x", "namespace": "n", "generation": generation}, "status": status}


def test_the_id_and_operation_are_recorded_before_the_request_and_the_acceptance_after() -> None:
    assert operations.recorded("Provision", "2026-01-01T00:00:00Z", externalID="id-1") == {
        "currentOperation": "Provision",
        "operationStartTime": "2026-01-01T00:00:00Z",
        "externalID": "id-1",
    }
    assert operations.accepted("op-7") == {"asyncOpInProgress": True, "lastOperation": "op-7"}


def test_a_finished_creation_observes_its_generation_and_clears_the_operation() -> None:
    patch = operations.finished(CatalogObject.of(body(generation=4)), secretName="s")
    assert patch == {
        "asyncOpInProgress": False,
        "currentOperation": None,
        "lastOperation": None,
        "operationStartTime": None,
        "inProgressProperties": None,
        "observedGeneration": 4,
        "secretName": "s",
    }


def test_a_finished_removal_ends_any_mitigation() -> None:
    patch = operations.removed(unbindStatus="Succeeded")
    assert patch["orphanMitigationInProgress"] is False and patch["asyncOpInProgress"] is False
    assert patch["currentOperation"] is None and patch["lastOperation"] is None
    assert patch["unbindStatus"] == "Succeeded"


@pytest.mark.parametrize("final", [True, False])
def test_orphan_mitigation_follows_a_failure_final_or_not(final: bool) -> None:
    listed = [{"type": "Ready", "status": "False"}]
    patch = operations.mitigating(CatalogObject.of(body(generation=5)), final=final, conditions=listed)
    assert patch["orphanMitigationInProgress"] is True
    assert patch["asyncOpInProgress"] is False and patch["lastOperation"] is None
    assert patch["conditions"] == listed
    if final:  # failed for this generation: nothing of the operation is kept to be retried
        assert patch["observedGeneration"] == 5
        assert patch["currentOperation"] is None and patch["inProgressProperties"] is None
    else:  # retried once mitigated: the operation and the generation stay as they were
        assert "observedGeneration" not in patch and "currentOperation" not in patch


def test_a_failure_for_good_waits_for_a_spec_change() -> None:
    listed = [{"type": "Failed", "status": "True"}]
    patch = operations.failed(CatalogObject.of(body(generation=2)), conditions=listed, unbindStatus="NotRequired")
    assert patch["observedGeneration"] == 2  # settled at this generation: only a spec change moves it
    assert patch["asyncOpInProgress"] is False and patch["currentOperation"] is None
    assert patch["inProgressProperties"] is None and patch["lastOperation"] is None
    assert patch["unbindStatus"] == "NotRequired" and patch["conditions"] == listed


@pytest.mark.parametrize("field", ["deprovisionStatus", "unbindStatus"])
def test_a_failed_removal_stays_owed(field: str) -> None:
    listed = [{"type": "Ready", "status": "False"}]
    patch = operations.removal_failed(field, conditions=listed)
    assert patch == {"asyncOpInProgress": False, "lastOperation": None, field: "Failed", "conditions": listed}
