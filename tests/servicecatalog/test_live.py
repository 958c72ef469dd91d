"""Day two for Service Catalog Instances (``servicecatalog.core.live``), table-tested on a fixed clock: when a
settled Instance is looked at at its broker, and what the broker's answer to the GET leads to."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from opbroker import osbclient
from opbroker.controller.core import actions as a
from opbroker.controller.core.decisions import resync_after
from opbroker.controller.core.reasons import Reason
from opbroker.controller.runtime.keys import Key
from opbroker.controller.servicecatalog.core import instance_plan, live
from opbroker.controller.servicecatalog.core.calls import Call
from opbroker.controller.servicecatalog.core.offering import Offering
from opbroker.controller.servicecatalog.core.views import CatalogObject, PlanEntry, ServiceClassView
from opbroker.controller.servicecatalog.resources import FINALIZER

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
UID = "0b7c1c4e-5a9d-4d44-8f1e-2f5c1d7c9a01"
RESYNC = 600.0
PERIOD = resync_after(UID, RESYNC)
READY_TRUE = {"type": "Ready", "status": "True", "reason": "Provisioned", "message": "the broker provisioned it"}


def offering(retrievable: bool = True) -> Offering:
    body = {
        "metadata": {"name": "db"},
        "brokerName": "b",
        "externalID": "svc",
        "instancesRetrievable": retrievable,
        "plans": [{"name": "small", "externalID": "plan-small"}],
    }
    return Offering(ServiceClassView.of(body), PlanEntry("small", "plan-small", None), osbclient.Broker("http://b.x"))


def instance(
    *,
    ready: dict[str, Any] | None = None,
    deleting: bool = False,
    generation: int = 1,
    conditions: list[dict[str, Any]] | None = None,
    **status: Any,
) -> CatalogObject:
    meta: dict[str, Any] = {
        "name": "db",
        "namespace": "team",
        "uid": UID,
        "generation": generation,
        "finalizers": [FINALIZER],
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    settled = {
        "provisionStatus": "Provisioned",
        "deprovisionStatus": "Required",
        "observedGeneration": 1,
        "externalID": "ext-1",
        "dashboardURL": "https://dash/1",
        "externalProperties": {"planName": "small", "planExternalID": "plan-small"},
        "conditions": conditions if conditions is not None else [ready or READY_TRUE],
    }
    return CatalogObject.of({"metadata": meta, "spec": {"externalID": "ext-1"}, "status": {**settled, **status}})


def look(obj: CatalogObject, *, last: float | None, at: float, retrievable: bool = True, resync: float = RESYNC) -> Any:
    return live.look(obj, offering(retrievable), last=last, monotonic=at, now=NOW, resync_seconds=resync)


# -- when: one GET per period, nothing for a class without instances_retrievable -----------------------------------

FAILED = {"type": "Failed", "status": "True", "reason": "UpdateInstanceCallFailed", "message": "no"}
NOT_LOOKED_AFTER = [
    ("class without instances_retrievable", instance(), False, RESYNC),
    ("resync off", instance(), True, 0.0),
    ("not provisioned", instance(provisionStatus="NotProvisioned"), True, RESYNC),
    ("operation in flight", instance(asyncOpInProgress=True), True, RESYNC),
    ("orphan mitigation", instance(orphanMitigationInProgress=True), True, RESYNC),
    ("being deleted", instance(deleting=True), True, RESYNC),
    ("spec changed, not yet observed", instance(generation=2), True, RESYNC),
    ("last operation failed", instance(conditions=[READY_TRUE, FAILED]), True, RESYNC),
]


@pytest.mark.parametrize(
    ("obj", "retrievable", "resync"), [c[1:] for c in NOT_LOOKED_AFTER], ids=[c[0] for c in NOT_LOOKED_AFTER]
)
def test_an_instance_not_looked_after_costs_nothing_no_get_no_requeue(
    obj: CatalogObject, retrievable: bool, resync: float
) -> None:
    assert look(obj, last=None, at=100.0, retrievable=retrievable, resync=resync) == []
    assert look(obj, last=0.0, at=100_000.0, retrievable=retrievable, resync=resync) == []


def test_first_seen_settled_the_first_get_comes_one_jittered_period_on() -> None:
    assert 0.9 * RESYNC <= PERIOD <= 1.1 * RESYNC
    assert look(instance(), last=None, at=100.0) == [live.KeepLook(100.0), a.Requeue(PERIOD)]


def test_woken_early_it_waits_for_the_rest_of_the_period_without_a_get() -> None:
    assert look(instance(), last=100.0, at=160.0) == [a.Requeue(PERIOD - 60.0)]


def test_once_the_period_passed_one_get_with_the_ids_then_the_next_period() -> None:
    actions = look(instance(), last=100.0, at=100.0 + PERIOD)
    keep, get, requeue = actions
    assert keep == live.KeepLook(100.0 + PERIOD) and requeue == a.Requeue(PERIOD)
    assert isinstance(get, Call) and get.method == "get_instance" and get.args == ("ext-1",)
    assert get.kwargs == {"service_id": "svc", "plan_id": "plan-small"}
    # The look is remembered before the GET: a conflict or an event right after it asks nothing more this period.
    assert look(instance(), last=100.0 + PERIOD, at=101.0 + PERIOD) == [a.Requeue(PERIOD - 1.0)]


def test_the_instance_plan_looks_only_at_a_settled_instance() -> None:
    obj = instance()
    facts = instance_plan.InstanceFacts(
        Key("scinstance", "team", "db"),
        obj.wire,
        offering(),
        {},
        None,
        (),
        monotonic=50.0,
        now=NOW,
        last_look=None,
        resync_seconds=RESYNC,
    )
    assert instance_plan.next_step(facts) is instance_plan.Step.NOTHING
    assert instance_plan.plan(facts) == [live.KeepLook(50.0), a.Requeue(PERIOD)]


# -- what the answer leads to -------------------------------------------------------------------------------------


def fetched(**fields: Any) -> dict[str, Any]:
    return {"service_id": "svc", "plan_id": "plan-small", "dashboard_url": "https://dash/1", **fields}


def attributes(**values: Any) -> dict[str, Any]:
    return {"metadata": {"attributes": values}}


def ready_of(patch: dict[str, Any], kind: str = "Ready") -> dict[str, Any]:
    return next(c for c in patch["conditions"] if c["type"] == kind)


UNREADY_LIVE = {"type": "Ready", "status": "False", "reason": "OperatorFailed", "message": "replica lost"}
GONE_LIVE = {"type": "Ready", "status": "False", "reason": "GoneAtBroker", "message": "x"}

#: (case, Ready before, answer, (Ready status, reason, message) written or None, Events (reason, warning))
ANSWERS: list[tuple[str, dict[str, Any], Any, tuple[str, str, str] | None, list[tuple[str, bool]]]] = [
    ("ready, no attributes: nothing", READY_TRUE, fetched(), None, []),
    ("ready true: nothing", READY_TRUE, fetched(**attributes(ready="true")), None, []),
    (
        "ready false with the broker's words",
        READY_TRUE,
        fetched(**attributes(ready="false", reason="OperatorFailed", message="replica lost")),
        ("False", "OperatorFailed", "replica lost"),
        [("OperatorFailed", True)],
    ),
    (
        "ready false (a JSON false), no reason: the fallback",
        READY_TRUE,
        fetched(**attributes(ready=False, message="down")),
        ("False", "BrokerReportsUnready", "down"),
        [("BrokerReportsUnready", True)],
    ),
    (
        "a reason that is no word: the fallback",
        READY_TRUE,
        fetched(**attributes(ready="false", reason="not a word!", message="down")),
        ("False", "BrokerReportsUnready", "down"),
        [("BrokerReportsUnready", True)],
    ),
    (
        "no message: the fallback's",
        READY_TRUE,
        fetched(**attributes(ready="false")),
        ("False", "BrokerReportsUnready", live.UNREADY),
        [("BrokerReportsUnready", True)],
    ),
    (
        "unready, said already: no write, no Event",
        UNREADY_LIVE,
        fetched(**attributes(ready="false", reason="OperatorFailed", message="replica lost")),
        None,
        [],
    ),
    (
        "ready again after a live check",
        UNREADY_LIVE,
        fetched(**attributes(ready="true", reason="OperatorReady", message="fine")),
        ("True", "BrokerReportsReady", live.READY_AGAIN),
        [("BrokerReportsReady", False)],
    ),
    (
        "back after GoneAtBroker, no attributes",
        GONE_LIVE,
        fetched(),
        ("True", "BrokerReportsReady", live.READY_AGAIN),
        [("BrokerReportsReady", False)],
    ),
]


@pytest.mark.parametrize(
    ("before", "answer", "written", "events"), [c[1:] for c in ANSWERS], ids=[c[0] for c in ANSWERS]
)
def test_the_brokers_health_is_shown_in_ready(
    before: dict[str, Any], answer: Any, written: tuple[str, str, str] | None, events: list[tuple[str, bool]]
) -> None:
    obj = instance(ready=before)
    actions = live.answered(NOW, answer, obj.wire)
    if written is None:
        assert actions == []
        return
    write, *rest = actions
    assert isinstance(write, a.WriteStatus) and set(write.patch) == {"conditions"}  # the operation's history kept
    ready = ready_of(dict(write.patch))
    assert (ready["status"], ready["reason"], ready["message"]) == written
    assert [(e.reason, e.warning) for e in rest] == events


def test_a_404_or_410_is_gone_at_the_broker_and_nothing_is_deleted() -> None:
    obj = instance()
    (write,) = live.answered(NOW, None, obj.wire)
    assert isinstance(write, a.WriteStatus) and set(write.patch) == {"conditions"}
    ready = ready_of(dict(write.patch))
    assert (ready["status"], ready["reason"]) == ("False", Reason.GONE_AT_BROKER.value)
    assert "no longer knows instance ext-1" in ready["message"] and "nothing was deleted" in ready["message"]
    assert write.event is not None and write.event.warning and write.event.reason == "GoneAtBroker"
    # Said already: the next resync's 404 writes nothing.
    again = instance(conditions=write.patch["conditions"])
    assert live.answered(NOW, None, again.wire) == []


@pytest.mark.parametrize(
    "error",
    [
        osbclient.ServerError(500, None, "boom", what="fetch of instance ext-1"),
        osbclient.BrokerUnreachable("fetch of instance ext-1", "timed out", timed_out=True),
        osbclient.BadRequest(400, None, "no fetch here", what="fetch of instance ext-1"),
    ],
    ids=["5xx", "timeout", "400"],
)
def test_an_error_or_a_timeout_writes_nothing_only_a_log_line(error: osbclient.BrokerError) -> None:
    (log,) = live.answered(NOW, error, instance().wire)
    assert isinstance(log, a.Log) and "next resync" in log.message


def test_a_new_dashboard_url_is_recorded() -> None:
    (write,) = live.answered(NOW, fetched(dashboard_url="https://dash/2"), instance().wire)
    assert isinstance(write, a.WriteStatus) and write.patch == {"dashboardURL": "https://dash/2"}


def test_another_plan_at_the_broker_is_drift_reported_never_corrected() -> None:
    obj = instance()
    actions = live.answered(NOW, fetched(plan_id="plan-large"), obj.wire)
    write, event = actions
    assert isinstance(write, a.WriteStatus) and set(write.patch) == {"conditions"}
    synced = ready_of(dict(write.patch), "Synced")
    assert (synced["status"], synced["reason"]) == ("False", "DriftDetected")
    assert synced["message"].startswith("plan_id:") and "'plan-large'" in synced["message"]
    assert ready_of(dict(write.patch)) == {**READY_TRUE}  # Ready kept as it was
    assert (event.reason, event.warning) == ("DriftDetected", True)
    assert not any(isinstance(x, Call) for x in actions)  # no update sent: that is the platform's to ask

    drifted = instance(conditions=write.patch["conditions"])
    assert live.answered(NOW, fetched(plan_id="plan-large"), drifted.wire) == []  # said already
    back, back_event = live.answered(NOW, fetched(), drifted.wire)
    assert (ready_of(dict(back.patch), "Synced")["status"], back_event.reason) == ("True", "InSync")


def test_unready_dashboard_and_drift_at_once_are_one_write() -> None:
    answer = fetched(plan_id="plan-large", dashboard_url="https://dash/2", **attributes(ready="false", message="m"))
    write, *events = live.answered(NOW, answer, instance().wire)
    assert write.patch["dashboardURL"] == "https://dash/2"
    assert (
        ready_of(dict(write.patch))["status"] == "False" and ready_of(dict(write.patch), "Synced")["status"] == "False"
    )
    assert sorted(e.reason for e in events) == ["BrokerReportsUnready", "DriftDetected"]
