"""The Broker's pure plan: from the facts observed (the Broker, whether a relist is due, the catalog fetched or
the problem met, the classes held) to the actions — class writes, then the status written after them with the
classes the API server refused counted out (:func:`relisted`, the writes' pure continuation), and when to look
again. Table-tested without a cluster (tests/servicecatalog/test_decisions.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from typing import Any

from opbroker import osbclient
from opbroker.api.servicecatalog import parse_go_duration
from opbroker.controller.core import actions as a
from opbroker.controller.core.conditions import Condition, with_conditions
from opbroker.controller.core.decisions import ready_condition
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.views import ConditionView, condition_wire, conditions_of
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.policies import DEFAULTS
from opbroker.controller.servicecatalog.core import relisting
from opbroker.controller.servicecatalog.core.relisting import ClassChanges
from opbroker.controller.servicecatalog.core.views import BrokerView, ServiceClassView
from opbroker.kubeclient.wire import JsonBody, JsonObject

#: At most this many problems are named in a condition or event (both are cut at 1 KiB anyway); the count says
#: how many more there were.
NAMED_PROBLEMS = 8
CATALOG_COMPLETE = "CatalogComplete"


@dataclass(frozen=True)
class BrokerFacts:
    key: Key
    broker: BrokerView
    now: datetime
    due_in: float | None
    catalog: osbclient.catalog.Catalog | None = None
    classes: tuple[ServiceClassView, ...] = ()
    problem: tuple[Reason, str] | None = None
    spoken: str | None = None
    """The OSB version the broker accepted for the fetch."""
    retry_in: float = DEFAULTS.broker_catalog.base
    """After a failed fetch, when to try again: the policy table's ``broker_catalog``, jittered by the edge."""


@dataclass(frozen=True)
class WriteClasses:
    """Write the classes of a relist; ``then``: the pure continuation that turns the ones the API server
    refused for good into the actions that follow (:func:`relisted`)."""

    changes: ClassChanges
    then: Callable[[list[osbclient.catalog.Problem], JsonObject], Sequence[Any]] | None = field(
        default=None, compare=False, repr=False
    )


#: The shortest wait before a Broker is looked at again (a relist due "now" must not make a busy loop).
MIN_COME_BACK = 0.5


def come_back(seconds: float) -> a.Requeue:
    return a.Requeue(max(seconds, MIN_COME_BACK))


def plan(facts: BrokerFacts) -> Sequence[Any]:
    """The Broker's actions: wait for a relist that is not due, report a failed fetch and come back, or write
    the classes of the catalog fetched and then (:func:`relisted`) its status."""
    broker = facts.broker
    generation, spec = broker.meta.generation, broker.spec
    held = [condition_wire(c) for c in broker.conditions]
    if facts.due_in is not None and facts.due_in > 0:
        return (come_back(facts.due_in),)
    if facts.due_in is None and facts.catalog is None and facts.problem is None:
        return ()
    base = {"observedGeneration": generation, "reconciledRelistRequests": spec.relist_requests}
    if facts.problem is not None:
        reason, message = facts.problem
        conditions = ready_condition(
            held, ready=False, reason=reason, message=message, generation=generation, at=facts.now
        )
        event = a.Event(reason.value, message, warning=True)
        return (a.WriteStatus({**base, "conditions": conditions}, event=event), come_back(facts.retry_in))
    assert facts.catalog is not None
    changes = relisting.class_changes(broker, facts.catalog.services, facts.classes)
    count = changes.listed
    message = f"fetched the catalog (OSB {facts.spoken}): {count} service class(es)"
    if changes.conflicts:
        message += "; not offered (a class of that name belongs to another broker): " + ", ".join(changes.conflicts)
    conditions = ready_condition(
        held, ready=True, reason=Reason.FETCHED_CATALOG, message=message, generation=generation, at=facts.now
    )
    problems = (*facts.catalog.problems, *changes.problems)
    conditions, problem_event = completeness(conditions, problems, generation=generation, now=facts.now)
    new_status = RelistStatus(
        {**base, "lastCatalogRetrievalTime": relisting.now_text(facts.now), "brokerAPIVersion": facts.spoken},
        conditions_of(conditions),
        count,
    )
    said = (Reason.CLASS_NAME_CONFLICT, message, True) if changes.conflicts else problem_event
    actions: list[Any] = [WriteClasses(changes, partial(relisted, new_status, said, facts.now))]
    if spec.relist_behavior == "Duration":
        actions.append(come_back(parse_go_duration(spec.relist_duration).total_seconds()))
    return actions


def completeness(
    conditions: list[JsonBody],
    problems: Sequence[osbclient.catalog.Problem],
    *,
    generation: int | None,
    now: datetime,
) -> tuple[list[JsonBody], tuple[Reason, str, bool] | None]:
    """``conditions`` with ``CatalogComplete`` set from ``problems``, and the warning event to record (None
    when there is nothing to say). Pure."""
    skipped = [p for p in problems if p.skipped]
    if skipped:
        reason, complete = Reason.CATALOG_ENTRIES_SKIPPED, False
        head = f"{len(skipped)} catalog entr(ies) skipped, the rest listed"
    elif problems:
        reason, complete = Reason.CATALOG_FIELDS_IGNORED, True
        head = f"every entry listed; {len(problems)} optional field(s) of the wrong type ignored"
    else:
        reason, complete = Reason.ALL_ENTRIES_LISTED, True
        head = "every service and plan of the catalog is listed"
    ordered = [*skipped, *(p for p in problems if not p.skipped)]
    named = "; ".join(p.describe() for p in ordered[:NAMED_PROBLEMS])
    more = f"; and {len(ordered) - NAMED_PROBLEMS} more" if len(ordered) > NAMED_PROBLEMS else ""
    message = f"{head}: {named}{more}" if ordered else head
    change = Condition(CATALOG_COMPLETE, complete, reason, message)
    listed = with_conditions(conditions_of(conditions), [change], generation, now)
    return listed, ((reason, message, True) if ordered else None)


def _complete(conditions: object) -> ConditionView | None:
    return next((c for c in conditions_of(conditions) if c.type == CATALOG_COMPLETE), None)


@dataclass(frozen=True)
class RelistStatus:
    """The Broker's status a relist plans, written after its classes (:func:`relisted`)."""

    fields: JsonObject
    """The status fields the refusals do not change (generation, relist requests, time, version)."""
    conditions: tuple[ConditionView, ...]
    count: int
    """``serviceClassCount``: the classes listed."""

    def wire(self) -> JsonBody:
        """The status patch written."""
        conditions = [condition_wire(c) for c in self.conditions]
        return {**self.fields, "conditions": conditions, "serviceClassCount": self.count}


def with_refusals(
    status: RelistStatus,
    refused: Sequence[osbclient.catalog.Problem],
    generation: int | None,
    event: tuple[Reason, str, bool] | None,
    now: datetime,
) -> tuple[RelistStatus, tuple[Reason, str, bool] | None]:
    """The planned status and event, with the classes the API server refused counted out and named;
    ``generation``: the Broker's as last written. Pure."""
    held = _complete(status.conditions)
    earlier = held.message or "" if held is not None and held.reason != Reason.ALL_ENTRIES_LISTED.value else ""
    named = "; ".join(p.describe() for p in refused[:NAMED_PROBLEMS])
    message = f"{len(refused)} class(es) refused by the API server and skipped: {named}" + (
        f"; before that: {earlier}" if earlier else ""
    )
    change = Condition(CATALOG_COMPLETE, False, Reason.CATALOG_ENTRIES_SKIPPED, message)
    conditions = conditions_of(with_conditions(status.conditions, [change], generation, now))
    new_status = replace(status, conditions=conditions, count=max(0, status.count - len(refused)))
    return new_status, (event if event and event[0] is Reason.CLASS_NAME_CONFLICT else None) or (
        Reason.CATALOG_ENTRIES_SKIPPED,
        message,
        True,
    )


def relisted(
    status: RelistStatus,
    event: tuple[Reason, str, bool] | None,
    now: datetime,
    refused: Sequence[osbclient.catalog.Problem],
    body: JsonObject,
) -> list[Any]:
    """The Broker's status after its classes were written: as planned, or with the refused ones counted out and
    named (:func:`with_refusals`); ``body``: the Broker as last written. Pure."""
    if refused:
        status, event = with_refusals(status, refused, BrokerView.of(body).meta.generation, event, now)
    said = None if event is None else a.Event(event[0].value, event[1], warning=event[2])
    return [a.WriteStatus(status.wire(), event=said)]
