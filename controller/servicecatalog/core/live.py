"""Day two for Service Catalog Instances (issue 43): a provisioned Instance is looked at again at its broker.

No watch tells of a remote broker's changes, so the only way to know what the broker thinks of an instance now is
to ask it: an Instance whose service class says ``instances_retrievable`` (``ServiceClass.instancesRetrievable``)
and that is settled — provisioned, its last operation succeeded (no ``Failed``), nothing in flight, no orphan
mitigation, not being deleted — gets one ``GET /v2/service_instances/:id`` per resync period
(``--resync-seconds``, spread ±10 % by its uid like ``decisions.resync_after``; 0: never). The first look comes one
period after the controller first sees it settled (a restart does not send a burst of GETs). An Instance of a
class without ``instances_retrievable`` costs nothing: no GET, no requeue.

The answer is shown without rewriting the operation's history (``lastOperation``, ``provisionStatus``,
``externalProperties`` stay as the operation left them):

* ``metadata.attributes.ready`` false: ``Ready`` False, the broker's ``reason`` (a CamelCase word; else
  ``BrokerReportsUnready``) and ``message``; ready (or no attributes): ``Ready`` True (``BrokerReportsReady``) if
  it was False — on a settled Instance whose operation succeeded only a live check writes it False;
* a ``dashboard_url`` other than the recorded one: ``status.dashboardURL`` updated;
* a ``plan_id`` other than the recorded one: ``Synced`` False, ``DriftDetected``, naming the field — never
  corrected: an OSB update is the platform's request, not the controller's; ``Synced`` True again once they agree;
* 404 or 410 (the client's None): ``Ready`` False, ``GoneAtBroker``, a Warning Event; nothing is deleted;
* an error or a timeout: nothing written, a log line; the next resync asks again.

Every change of a condition has its Event, and nothing is written when nothing changed. Pure: the clock's
readings and what is remembered of the last look are parameters; the GET is a :class:`~.calls.Call` whose answer
comes back to :func:`answered`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any

from opbroker import osbclient
from opbroker.controller.core import actions as a
from opbroker.controller.core.conditions import SYNCED_CONDITION, Condition, shows, with_conditions
from opbroker.controller.core.decisions import resync_after
from opbroker.controller.core.reasons import Reason
from opbroker.controller.servicecatalog.core import tenancy
from opbroker.controller.servicecatalog.core.calls import DUE_SLACK, Call
from opbroker.controller.servicecatalog.core.offering import Offering
from opbroker.controller.servicecatalog.core.statuses import said
from opbroker.controller.servicecatalog.core.views import CatalogObject
from opbroker.kubeclient.wire import JsonBody, JsonObject, mapping_of

#: A reason the broker gives is used as the condition's reason only when it is one CamelCase-ish word.
REASON_WORD = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
READY_AGAIN = "the broker reports the instance ready again"
UNREADY = "the broker reports the instance not ready"
IN_SYNC = "the broker has the instance on the plan this Instance records"


@dataclass(frozen=True)
class KeepLook:
    """Remember when the reconciled Instance was last looked at (monotonic seconds), or first seen settled."""

    at: float


def looked_after(instance: CatalogObject, offering: Offering | None) -> bool:
    """Whether a settled Instance is looked at again at its broker: its class is ``instances_retrievable`` and it is
    provisioned, its last operation succeeded, nothing is in flight and it is not being deleted."""
    status = instance.status
    failed = status.condition("Failed")
    return (
        offering is not None
        and offering.service_class.instances_retrievable
        and status.provisioned
        and instance.observed
        and not status.async_op
        and not status.orphan_mitigation
        and not instance.meta.deleting
        and (failed is None or failed.status != "True")
    )


def look(
    instance: CatalogObject,
    offering: Offering | None,
    *,
    last: float | None,
    monotonic: float,
    now: datetime,
    resync_seconds: float,
) -> list[Any]:
    """The actions of a settled Instance's reconcile: none when it is not looked after; else a GET when one resync
    period has passed since the last look (``last``, monotonic; None: first seen — the first GET one period on),
    and a requeue for the next one."""
    if resync_seconds <= 0 or not looked_after(instance, offering):
        return []
    assert offering is not None
    period = resync_after(instance.meta.uid, resync_seconds)
    if last is None:
        return [KeepLook(monotonic), a.Requeue(period)]
    wait = last + period - monotonic
    if wait > DUE_SLACK:
        return [a.Requeue(wait)]  # woken by an event: the GET waits for its time (one per period)
    kwargs = {"service_id": offering.service_id, "plan_id": offering.plan_id}
    get = Call(offering.broker, "get_instance", (tenancy.external_id(instance),), kwargs, partial(answered, now))
    return [KeepLook(monotonic), get, a.Requeue(period)]


def answered(now: datetime, answer: JsonObject | osbclient.BrokerError | None, body: JsonObject) -> list[Any]:
    """What the broker's answer to the GET leads to (``body``: the Instance as last written)."""
    written = CatalogObject.of(body)
    instance_id = tenancy.external_id(written)
    if isinstance(answer, osbclient.BrokerError):
        return [a.Log(f"live check at the broker failed, asked again at the next resync: {answer}", warning=True)]
    if answer is None:
        message = (
            f"the broker no longer knows instance {instance_id} (its GET answered 404 or 410); nothing was deleted"
        )
        return said(written, ready=False, reason=Reason.GONE_AT_BROKER, message=message, now=now)
    fetched = answer
    out: list[Any] = []
    patch: JsonBody = {}
    dashboard = fetched.get("dashboard_url")
    if dashboard and dashboard != mapping_of(written.wire.get("status")).get("dashboardURL"):
        patch["dashboardURL"] = dashboard
    changes: list[Condition] = []
    broker_reason: str | None = None
    ready = health(fetched)
    if ready is None:
        current = written.status.condition("Ready")
        if current is not None and current.status == "False":
            changes.append(Condition("Ready", True, Reason.BROKER_REPORTS_READY, READY_AGAIN))
    else:
        broker_reason, message = ready
        wanted = Condition("Ready", False, Reason.BROKER_REPORTS_UNREADY, message)
        current = written.status.condition("Ready")
        if current is None or (current.status, current.reason, current.message) != (
            "False",
            broker_reason or Reason.BROKER_REPORTS_UNREADY.value,
            message[:1024],
        ):
            changes.append(wanted)
    synced = plan_drift(written, fetched)
    if not shows(written, synced):
        changes.append(synced)
    if changes:
        listed: list[JsonBody] = with_conditions(written.status.conditions, changes, written.meta.generation, now)
        if broker_reason:
            listed = [{**c, "reason": broker_reason} if c.get("type") == "Ready" else c for c in listed]
        patch["conditions"] = listed
        for change in changes:
            reason = broker_reason if change.type == "Ready" and broker_reason else change.reason.value
            out.append(a.Event(reason, change.message, warning=not change.ok))
    return [a.WriteStatus(patch), *out] if patch else []


def health(fetched: JsonObject) -> tuple[str | None, str] | None:
    """None when the broker says the instance is ready (``metadata.attributes.ready`` true, or no word of it); else
    (the broker's reason when it is a usable one, its message)."""
    metadata = fetched.get("metadata")
    attributes = metadata.get("attributes") if isinstance(metadata, Mapping) else None
    if not isinstance(attributes, Mapping):
        return None
    flag = attributes.get("ready")
    if not (flag is False or (isinstance(flag, str) and flag.strip().lower() == "false")):
        return None
    reason = attributes.get("reason")
    message = attributes.get("message")
    usable = reason if isinstance(reason, str) and REASON_WORD.match(reason) else None
    return usable, (message if isinstance(message, str) and message else UNREADY)


def plan_drift(written: CatalogObject, fetched: JsonObject) -> Condition:
    """``Synced``: False (``DriftDetected``, naming the field) when the broker has the instance on another plan than
    the one recorded; never corrected here."""
    recorded = written.status.held_plan.external_id
    held = fetched.get("plan_id")
    if held and recorded and held != recorded:
        message = (
            f"plan_id: the broker has the instance on plan {held!r}, this Instance records {recorded!r} "
            "(status.externalProperties.planExternalID); not corrected: an update is the platform's to ask for"
        )
        return Condition(SYNCED_CONDITION, False, Reason.DRIFT_DETECTED, message)
    return Condition(SYNCED_CONDITION, True, Reason.IN_SYNC, IN_SYNC)
