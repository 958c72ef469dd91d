"""The OSB operation protocol, once, for Service Catalog Instances and Bindings: pure decisions.

An operation (provision, update, deprovision, bind, unbind) runs the same way for both kinds:

1. **start**: its id and the operation are recorded in the status *before* the request is sent
   (:func:`recorded`), so a crash between the two repeats the request with the same id (brokers answer a
   repeat 200); no other operation starts while one is in flight (``asyncOpInProgress``);
2. the broker answers at once (done), refuses (:func:`refused`), or **accepts** it (202: :func:`accepted`);
3. an accepted operation is **polled** through ``last_operation`` (:func:`polled`): backing off from the
   controller's pacing, a broker's ``Retry-After`` replacing the backoff for that poll, and never past the
   **deadline** — the controller's ``--max-operation-seconds``, or the plan's OSB ``maximum_polling_duration``
   when shorter (:func:`deadline`) — after which the operation has failed (OSB "Polling Interval and
   Duration");
4. a creation (provision, bind) whose outcome is unknown — a 5xx, a lost answer, a malformed 201 — or that
   the broker reports failed or that timed out, is followed by **orphan mitigation**: a deprovision or unbind
   before anything else happens (:func:`mitigating`). After a 5xx or a lost answer the creation is retried
   once mitigated; after a broker's ``failed`` or a timeout the verdict is **final**: the object is marked
   failed now and stays so after mitigation, until its spec changes (:func:`terminal_mitigation`,
   :func:`keeping_failed`);
5. a refusal the broker may outlive (unreachable, 408, 429, 5xx without mitigation, 422 ``ConcurrencyError``)
   is **retried** after a backoff; any other refusal is **permanent** and waits for a spec change (removals —
   deprovision, unbind — are sent again whatever the answer: an object being deleted has no spec to change).

The classifications are ``osbclient``'s (``is_retryable``, the spec's orphan mitigation table
``needs_orphan_mitigation``, ``next_poll``); this module turns them, with what the status recorded and the
time (a parameter: no clock is read here), into one :class:`Decision`. The reconcilers keep only the
Kubernetes and HTTP calls, and the per-kind outcome (a Secret written, a finalizer released).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum

from opbroker import osbclient
from opbroker.controller.core.shown_failures import broker_message
from opbroker.controller.core.views import condition_wire
from opbroker.controller.servicecatalog.core.views import CatalogObject, PlanEntry
from opbroker.kubeclient.wire import JsonBody
from opbroker.osbclient import Request

#: Creations: what orphan mitigation undoes (the spec's table, "provision, bind").
CREATES = frozenset({Request.PROVISION, Request.BIND})
#: Removals: a 410 (gone) finishes them as well as a success does.
REMOVES = frozenset({Request.DEPROVISION, Request.UNBIND})
#: The shortest wait before the next poll: a broker's ``Retry-After: 0`` must not make a busy loop.
MIN_POLL_DELAY = 0.2


class Verdict(StrEnum):
    SUCCEEDED = "succeeded"
    """The operation finished well (a removal also when the broker says the object is gone)."""
    POLL = "poll"
    """Still running: ask ``last_operation`` again after :attr:`Decision.delay`."""
    RETRY = "retry"
    """Refused for now (a transient failure, no mitigation needed): send the request again after a backoff."""
    FAILED = "failed"
    """Failed: record it; orphan mitigation follows when :attr:`Decision.mitigate`."""


@dataclass(frozen=True)
class Decision:
    """What to do after one answer of the broker (or its absence)."""

    verdict: Verdict
    message: str = ""
    """What happened, for the condition and the event (never credentials: the client redacts them)."""
    delay: float = 0.0
    """``POLL``: seconds before the next ``last_operation``."""
    mitigate: bool = False
    """``FAILED``: orphan mitigation (a deprovision or unbind of the target) follows before anything else."""
    final: bool = False
    """``FAILED``: the broker's verdict (a failed or timed-out creation) stands for this generation: the object
    is marked failed now and stays so after mitigation (a 5xx or a lost answer is retried once mitigated)."""
    timed_out: bool = False
    """``FAILED``: the deadline passed while the operation was still in progress."""
    refused: bool = False
    """``FAILED`` because the broker refused the request itself for good (not an operation's verdict)."""
    answered: int | None = None
    """A refused request: the broker's HTTP status, when it answered one (409 means the id is taken)."""


def deadline(backoff: osbclient.Backoff, plan: PlanEntry | None) -> osbclient.Backoff:
    """The poll pacing for an operation on ``plan``: the controller's, its maximum duration shortened to the
    plan's OSB ``maximum_polling_duration`` (``maximumPollingDuration``) when that is shorter (never longer)."""
    limit = plan.maximum_polling_duration if plan is not None else None
    if limit is None or limit >= backoff.max_duration:
        return backoff
    return replace(backoff, max_duration=float(limit))


def refused(request: Request, error: osbclient.BrokerError) -> Decision:
    """The request itself raised ``error``. A creation whose outcome is unknown is mitigated (then retried); a
    transient failure is retried; any other is permanent (``answered``: the broker's status, if any).

    Removals are never "mitigated" (mitigating one is sending it again) and come back ``FAILED`` when
    permanent: the reconciler records the removal failed and sends it again after a backoff."""
    answered = error.status if isinstance(error, osbclient.OSBError) else None
    mitigate = request in CREATES and osbclient.needs_orphan_mitigation_after(request, error)
    message = broker_message(error)
    if mitigate or not osbclient.is_retryable(error):
        return Decision(Verdict.FAILED, message, mitigate=mitigate, refused=not mitigate, answered=answered)
    return Decision(Verdict.RETRY, message, answered=answered)


def polled(
    request: Request,
    answer: osbclient.LastOperation | osbclient.BrokerError,
    *,
    started: datetime | None,
    now: datetime,
    polls: int,
    backoff: osbclient.Backoff,
    draw: float = 0.0,
) -> Decision:
    """A ``last_operation`` poll of an accepted ``request`` answered ``answer`` (or raised it).

    ``started``: when the operation was recorded (``status.operationStartTime``; None counts as ``now``);
    ``polls``: polls made so far, this one included; ``backoff``: the pacing with its :func:`deadline`, jittered
    by ``draw``. A transient failure of the poll is polled again; a permanent one counts as the broker saying
    ``failed``."""
    if isinstance(answer, osbclient.BrokerError):
        if osbclient.is_retryable(answer):
            return later(request, started=started, now=now, polls=polls, retry_after=None, backoff=backoff, draw=draw)
        answer = osbclient.LastOperation(state=osbclient.FAILED, description=str(answer))
    if request in REMOVES and (answer.gone or answer.state == osbclient.SUCCEEDED):
        return Decision(Verdict.SUCCEEDED, answer.description or "")
    if answer.state == osbclient.IN_PROGRESS:
        return later(
            request, started=started, now=now, polls=polls, retry_after=answer.retry_after, backoff=backoff, draw=draw
        )
    if answer.state == osbclient.SUCCEEDED and not answer.gone:
        return Decision(Verdict.SUCCEEDED, answer.description or "")
    # Failed, or a creation or update whose target the broker says is gone (nothing left to mitigate).
    creation = request in CREATES
    description = answer.description or (
        f"the {_target(request)} is gone" if answer.gone else "the broker reported failure"
    )
    mitigate = (
        creation and not answer.gone and osbclient.needs_orphan_mitigation(request, status=200, failed_state=True)
    )
    return Decision(Verdict.FAILED, description, mitigate=mitigate, final=creation)


def later(
    request: Request,
    *,
    started: datetime | None,
    now: datetime,
    polls: int,
    retry_after: float | None,
    backoff: osbclient.Backoff,
    draw: float = 0.0,
) -> Decision:
    """Still in progress after ``polls`` polls: when to look again (``Retry-After`` when the broker gave one,
    else the backoff; never past the deadline), or ``FAILED`` (timed out) once the deadline has passed — a
    creation then mitigated, its failure final."""
    due = osbclient.next_poll(
        started=started or now, now=now, polls=polls, retry_after=retry_after, backoff=backoff, draw=draw
    )
    if due.expired:
        creation = request in CREATES
        message = f"the {request.value} did not finish within {backoff.max_duration:.0f}s"
        return Decision(Verdict.FAILED, message, mitigate=creation, final=creation, timed_out=True)
    return Decision(Verdict.POLL, delay=max(due.delay, MIN_POLL_DELAY))


def fetched(error: osbclient.BrokerError | None) -> Decision:
    """Fetching what an asynchronous bind made (its credentials) after ``last_operation`` said succeeded: a
    transient failure is fetched again after a backoff; a permanent one fails the bind, and the binding the
    broker made is unbound (mitigated) — then bound again."""
    if error is None:
        return Decision(Verdict.SUCCEEDED)
    message = f"fetching the bound credentials failed: {error}"
    if osbclient.is_retryable(error):
        return Decision(Verdict.RETRY, message)
    return Decision(Verdict.FAILED, message, mitigate=True)


# -- what the status records (patches of ``status``; the caller builds the conditions) ------------------------


def recorded(operation: str, at: str, **fields: object) -> JsonBody:
    """The status written before the request is sent: the operation, when it started, and ``fields`` (the
    object's id, what it asks for). ``at``: a timestamp as the status holds it."""
    return {"currentOperation": operation, "operationStartTime": at, **fields}


def accepted(operation: str | None) -> JsonBody:
    """The broker accepted the operation (202): it is in flight — polled, and no other starts meanwhile."""
    return {"asyncOpInProgress": True, "lastOperation": operation}


def finished(obj: CatalogObject, **fields: object) -> JsonBody:
    """A creation or update done: nothing in flight, this generation observed."""
    return {
        "asyncOpInProgress": False,
        "currentOperation": None,
        "lastOperation": None,
        "operationStartTime": None,
        "inProgressProperties": None,
        "observedGeneration": obj.meta.generation,
        **fields,
    }


def removed(**fields: object) -> JsonBody:
    """A removal (a deletion's, or orphan mitigation's) done: nothing in flight, no mitigation pending."""
    return {
        "asyncOpInProgress": False,
        "orphanMitigationInProgress": False,
        "currentOperation": None,
        "lastOperation": None,
        **fields,
    }


def mitigating(obj: CatalogObject, *, final: bool, conditions: list[JsonBody]) -> JsonBody:
    """A creation failed with orphan mitigation to follow. ``final``: its failure stands for this generation
    (the conditions carry ``Failed``), so nothing of the operation is kept to be retried."""
    status: JsonBody = {"asyncOpInProgress": False, "lastOperation": None, "orphanMitigationInProgress": True}
    if final:
        status.update(
            {"currentOperation": None, "inProgressProperties": None, "observedGeneration": obj.meta.generation}
        )
    return {**status, "conditions": conditions}


def removal_failed(field: str, *, conditions: list[JsonBody]) -> JsonBody:
    """A removal (deprovision, unbind) failed: nothing in flight, ``field`` (``deprovisionStatus`` or
    ``unbindStatus``) ``Failed`` — the removal is still owed and is sent again after a backoff."""
    return {"asyncOpInProgress": False, "lastOperation": None, field: "Failed", "conditions": conditions}


def failed(obj: CatalogObject, *, conditions: list[JsonBody], **fields: object) -> JsonBody:
    """An operation failed for good: nothing in flight, this generation observed (it waits for a spec change)."""
    return {
        "asyncOpInProgress": False,
        "lastOperation": None,
        "currentOperation": None,
        "inProgressProperties": None,
        "observedGeneration": obj.meta.generation,
        **fields,
        "conditions": conditions,
    }


# -- orphan mitigation's memory of a final failure --------------------------------------------------------------


def terminal_mitigation(obj: CatalogObject) -> bool:
    """Whether the orphan mitigation under way follows a final failure (the provision or bind was marked
    failed for this generation) rather than one to retry once mitigated."""
    return obj.observed and any(c.type == "Failed" and c.status == "True" for c in obj.status.conditions)


def keeping_failed(obj: CatalogObject, listed: list[JsonBody], *, keep: bool) -> list[JsonBody]:
    """``listed`` (new conditions, which drop Failed) with the object's Failed condition put back when ``keep``."""
    if not keep:
        return listed
    held = [condition_wire(c) for c in obj.status.conditions if c.type == "Failed"]
    return [c for c in listed if c.get("type") != "Failed"] + held


def _target(request: Request) -> str:
    return "binding" if request in (Request.BIND, Request.UNBIND) else "instance"
