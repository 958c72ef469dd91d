"""What the Service Catalog kinds write about themselves: conditions, and the status writes with their Events.

Pure: each function returns values — a conditions list, or the executor's actions (:class:`~.actions.WriteStatus`
with its :class:`~.actions.Event`) — computed from the object as read and the time (a parameter: no clock
is read here).
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

from opbroker.controller.core import actions as a
from opbroker.controller.core.decisions import ready_condition
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.shown_failures import SHOWN_REASONS
from opbroker.controller.core.views import condition_wire
from opbroker.controller.runtime.policies import DEFAULTS
from opbroker.controller.servicecatalog.core import operations
from opbroker.controller.servicecatalog.core.offering import Unresolved
from opbroker.controller.servicecatalog.core.views import CatalogObject
from opbroker.kubeclient.wire import JsonBody, JsonObject


def checksum(parameters: JsonObject) -> str:
    return hashlib.sha256(json.dumps(parameters, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def timestamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def conditions(
    obj: CatalogObject, *, ready: bool, reason: Reason, message: str, now: datetime, failed: bool = False
) -> list[JsonBody]:
    """Ready as given; Failed=True only for a failure that waits for a spec change (no retries). (The conditions
    written: the status patch replaces the whole list, so the kept ones are written too.)"""
    generation = obj.meta.generation
    held = [condition_wire(c) for c in obj.status.conditions if c.type != "Failed"]
    listed = ready_condition(held, ready=ready, reason=reason, message=message, generation=generation, at=now)
    if failed:
        listed.append(
            {
                "type": "Failed",
                "status": "True",
                "reason": reason.value,
                "message": message[:1024],
                "lastTransitionTime": timestamp(now),
                "observedGeneration": generation,
            }
        )
    return listed


def said(obj: CatalogObject, *, ready: bool, reason: Reason, message: str, now: datetime) -> list[Any]:
    """Set the Ready condition and record an Event — nothing when it says so already (no write, no event)."""
    current = obj.status.condition("Ready")
    if current is not None and current.reason == reason.value and current.message == message[:1024]:
        return []
    patch = {"conditions": conditions(obj, ready=ready, reason=reason, message=message, now=now)}
    return [a.WriteStatus(patch, event=a.Event(reason.value, message, warning=not ready))]


def waiting_for_budget(
    obj: CatalogObject, why: str, *, now: datetime, again: float = DEFAULTS.unresolved_recheck.base
) -> list[Any]:
    """A request its namespace's budget holds back (``controller.core.budgets``): Ready says why — once, not at each
    look (the counts in the message move) — and a look again after ``again`` (the policy table's
    ``unresolved_recheck``)."""
    current = obj.status.condition("Ready")
    look = a.Requeue(again)
    if current is not None and current.reason == Reason.NAMESPACE_BUDGET_EXCEEDED.value:
        return [look]
    return [*said(obj, ready=False, reason=Reason.NAMESPACE_BUDGET_EXCEEDED, message=why, now=now), look]


def unresolved(
    obj: CatalogObject, problem: Unresolved, *, now: datetime, again: float = DEFAULTS.unresolved_recheck.base
) -> list[Any]:
    """What an object whose references do not resolve gets: its Ready condition says why (once), and a look again
    after ``again`` (the policy table's ``unresolved_recheck``)."""
    return [
        *said(obj, ready=False, reason=problem.reason, message=str(problem), now=now),
        a.Requeue(again),
    ]


def ignored(warnings: tuple[str, ...], what: str) -> list[Any]:
    """A warning Event naming the optional fields of a broker's answer that were dropped (wrong type): the
    answer was used without them. Never values of credentials (the client does not quote those)."""
    if not warnings:
        return []
    message = f"the broker's answer to the {what} had fields of the wrong type, ignored: " + "; ".join(warnings)
    return [a.Event(Reason.ANSWER_FIELDS_IGNORED.value, message, warning=True)]


AFTER = " — after: "
"""Joins a step of a retried creation to the failure it follows (:func:`after_failure`)."""
MITIGATION_FOLLOWS = "; orphan mitigation follows"
#: Ready reasons whose message is a failure a retried creation's next steps carry on (the calls' own, and what the
#: runtime shows of a failure that escaped the plan: ``controller.runtime.showing``).
CARRIED = frozenset(
    {
        Reason.PROVISION_CALL_FAILED.value,
        Reason.BIND_CALL_FAILED.value,
        Reason.UPDATE_CALL_FAILED.value,
        Reason.BIND_RESULT_REFUSED.value,
        Reason.ASYNC_OPERATION_TIMED_OUT.value,
        Reason.ORPHAN_MITIGATION.value,
        Reason.ORPHAN_MITIGATION_SUCCESSFUL.value,
        Reason.PROVISIONING.value,
        Reason.BINDING_IN_PROGRESS.value,
        Reason.UNBINDING.value,
        *(r.value for r in SHOWN_REASONS),
    }
)


def after_failure(obj: CatalogObject, message: str) -> str:
    """``message`` for a step of a creation that is retried after a failure (orphan mitigation, the request sent
    again), followed by that failure as the Ready condition says it now — so Ready keeps naming what failed and its
    fix through the whole cycle, not only for the moment between the failure and the next step."""
    current = obj.status.condition("Ready")
    said = (current.message or "") if current is not None and current.status != "True" else ""
    if current is None or current.reason not in CARRIED or not said:
        return message
    if AFTER in said:
        failure = said.split(AFTER, 1)[1]
    elif current.reason in (Reason.PROVISIONING.value, Reason.BINDING_IN_PROGRESS.value, Reason.UNBINDING.value):
        return message  # a request's own step, no failure before it
    else:
        failure = said.removesuffix(MITIGATION_FOLLOWS)
    return f"{message}{AFTER}{failure}"


def mitigation_follows(obj: CatalogObject, *, reason: Reason, message: str, final: bool, now: datetime) -> list[Any]:
    """A creation (provision, bind) failed with orphan mitigation to follow (:func:`operations.mitigating`),
    said in an Event; the mitigation runs at once, on the next pass."""
    listed = conditions(
        obj, ready=False, reason=reason, message=f"{message}{MITIGATION_FOLLOWS}", failed=final, now=now
    )
    event = a.Event(Reason.ORPHAN_MITIGATION.value, message, warning=True)
    return [a.WriteStatus(operations.mitigating(obj, final=final, conditions=listed), event=event), a.Requeue(0)]


def removal_failed(obj: CatalogObject, field: str, *, reason: Reason, message: str, now: datetime) -> list[Any]:
    """A removal failed (:func:`operations.removal_failed`), said in an Event; the caller requeues it after a
    backoff (an object being deleted has no spec to change: the removal is sent until it succeeds)."""
    listed = conditions(obj, ready=False, reason=reason, message=f"{message}; retrying", now=now)
    event = a.Event(reason.value, message, warning=True)
    return [a.WriteStatus(operations.removal_failed(field, conditions=listed), event=event)]
