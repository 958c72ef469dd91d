"""The Service Catalog reconcilers' pure parts, table-tested: the next step of an Instance and a Binding, and a
relist's class changes and timing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from opbroker.controller.reasons import Reason
from opbroker.controller.reconciler import Key
from opbroker.controller.servicecatalog import bindings, instances, relisting
from opbroker.controller.servicecatalog.common import Unresolved
from opbroker.controller.servicecatalog.resources import FINALIZER

OFFERING: Any = object()  # next_step only asks whether there is one


def obj(*, held: bool = True, deleting: bool = False, generation: int = 1, **status: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "x", "namespace": "n", "generation": generation}
    if held:
        meta["finalizers"] = [FINALIZER]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {}, "status": status}


PROBLEM = Unresolved(Reason.REFERENCES_NON_EXISTENT_CLASS, "no class")
IS = instances.Step

INSTANCE_CASES = [
    ("new: finalizer first", obj(held=False), OFFERING, None, (), IS.ADD_FINALIZER),
    ("held, never provisioned", obj(), OFFERING, None, (), IS.PROVISION),
    ("class missing", obj(), None, PROBLEM, (), IS.UNRESOLVED),
    ("provisioned, settled", obj(provisionStatus="Provisioned", observedGeneration=1), OFFERING, None, (), IS.NOTHING),
    (
        "spec changed: update",
        obj(generation=2, provisionStatus="Provisioned", observedGeneration=1),
        OFFERING,
        None,
        (),
        IS.UPDATE,
    ),
    (
        "failed, waiting for a spec change",
        obj(observedGeneration=1, provisionStatus="NotProvisioned"),
        OFFERING,
        None,
        (),
        IS.NOTHING,
    ),
    ("operation in flight: poll, nothing else", obj(generation=2, asyncOpInProgress=True), OFFERING, None, (), IS.POLL),
    ("in flight while deleted: poll first", obj(deleting=True, asyncOpInProgress=True), OFFERING, None, (), IS.POLL),
    ("orphan mitigation pending", obj(orphanMitigationInProgress=True), OFFERING, None, (), IS.MITIGATE),
    (
        "deleted with bindings: blocked",
        obj(deleting=True, deprovisionStatus="Required"),
        OFFERING,
        None,
        ("n/b",),
        IS.BLOCKED,
    ),
    (
        "deleted, provisioned: deprovision",
        obj(deleting=True, deprovisionStatus="Required"),
        OFFERING,
        None,
        (),
        IS.DEPROVISION,
    ),
    (
        "deleted, deprovision failed: again",
        obj(deleting=True, deprovisionStatus="Failed"),
        OFFERING,
        None,
        (),
        IS.DEPROVISION,
    ),
    (
        "deleted, nothing at the broker",
        obj(deleting=True, deprovisionStatus="NotRequired"),
        OFFERING,
        None,
        (),
        IS.REMOVE_FINALIZER,
    ),
    ("deleted, never sent", obj(deleting=True), OFFERING, None, (), IS.REMOVE_FINALIZER),
    ("deleted, class gone", obj(deleting=True, deprovisionStatus="Required"), None, PROBLEM, (), IS.UNRESOLVED),
    ("deleted, released", obj(held=False, deleting=True), OFFERING, None, (), IS.NOTHING),
]


@pytest.mark.parametrize(
    ("body", "offering", "problem", "bound", "want"),
    [c[1:] for c in INSTANCE_CASES],
    ids=[c[0] for c in INSTANCE_CASES],
)
def test_instance_next_step(
    body: dict[str, Any], offering: Any, problem: Any, bound: tuple[str, ...], want: instances.Step
) -> None:
    facts = instances.InstanceFacts(Key("scinstance", "n", "x"), body, offering, {}, problem, bound)
    assert instances.next_step(facts) is want


B = bindings.Step
NOT_READY = Unresolved(Reason.ERROR_INSTANCE_NOT_READY, "not ready")
BINDING_CASES = [
    ("new: finalizer first", obj(held=False), OFFERING, None, B.ADD_FINALIZER),
    ("instance ready: bind", obj(), OFFERING, None, B.BIND),
    ("instance not ready: wait", obj(), OFFERING, NOT_READY, B.UNRESOLVED),
    ("bound", obj(observedGeneration=1, unbindStatus="Required"), OFFERING, None, B.NOTHING),
    ("async bind in flight", obj(asyncOpInProgress=True), OFFERING, None, B.POLL),
    ("mitigation pending", obj(orphanMitigationInProgress=True), OFFERING, None, B.MITIGATE),
    ("deleted, bound: unbind", obj(deleting=True, unbindStatus="Required"), OFFERING, None, B.UNBIND),
    ("deleted, never bound", obj(deleting=True), OFFERING, None, B.REMOVE_FINALIZER),
    ("deleted, unbound", obj(deleting=True, unbindStatus="Succeeded"), OFFERING, None, B.REMOVE_FINALIZER),
]


@pytest.mark.parametrize(
    ("body", "offering", "problem", "want"), [c[1:] for c in BINDING_CASES], ids=[c[0] for c in BINDING_CASES]
)
def test_binding_next_step(body: dict[str, Any], offering: Any, problem: Any, want: bindings.Step) -> None:
    facts = bindings.BindingFacts(Key("scbinding", "n", "x"), body, {}, offering, {}, problem)
    assert bindings.next_step(facts) is want


BROKER = {"apiVersion": "servicecatalog.k8s.io/v1alpha1", "kind": "Broker", "metadata": {"name": "b", "uid": "u"}}


def service(name: str, sid: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "id": sid,
        "description": "d",
        "bindable": True,
        "plans": [{"name": "p", "id": f"{sid}-p"}],
        **extra,
    }


def held(body: dict[str, Any], **status: Any) -> dict[str, Any]:
    return {**body, "metadata": {**body["metadata"], "resourceVersion": "7"}, "status": status}


def test_class_changes() -> None:
    same = relisting.desired_class(BROKER, service("Same", "1"))
    changed = relisting.desired_class(BROKER, service("Changed", "2"))
    gone = relisting.desired_class(BROKER, service("Gone", "3"))
    back = relisting.desired_class(BROKER, service("Back", "4"))
    theirs = {**relisting.desired_class(BROKER, service("Taken", "5")), "brokerName": "other"}
    catalog = {
        "services": [
            service("Same", "1"),
            service("Changed", "2", description="new"),
            service("Back", "4"),
            service("Taken", "5"),
            service("New_One", "6"),
        ]
    }
    changes = relisting.class_changes(
        BROKER,
        catalog,
        [held(same), held(changed), held(gone), held(back, removedFromBrokerCatalog=True), held(theirs)],
    )
    assert [c["metadata"]["name"] for c in changes.create] == ["new-one"]
    assert [(c["metadata"]["name"], c["description"]) for c in changes.update] == [("changed", "new")]
    assert changes.update[0]["metadata"]["resourceVersion"] == "7"  # guarded by the version held
    assert changes.removed == ("gone",)
    assert changes.restored == ("back",)
    assert changes.conflicts == ("Taken",)


NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def broker(
    *, relist: str = "15m", behavior: str = "Duration", requests: int = 0, status: dict[str, Any] | None = None
) -> dict[str, Any]:
    spec = {"url": "http://b", "relistDuration": relist, "relistBehavior": behavior, "relistRequests": requests}
    return {"metadata": {"name": "b", "generation": 1}, "spec": spec, "status": status or {}}


def listed(minutes_ago: int, **extra: Any) -> dict[str, Any]:
    when = (NOW - timedelta(minutes=minutes_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "observedGeneration": 1,
        "lastCatalogRetrievalTime": when,
        "conditions": [{"type": "Ready", "status": "True"}],
        **extra,
    }


@pytest.mark.parametrize(
    ("reason", "body", "want"),
    [
        ("never listed", broker(), 0.0),
        ("listed 5 of 15 minutes ago", broker(status=listed(5)), 600.0),
        ("listed 20 minutes ago", broker(status=listed(20)), -300.0),
        ("manual, listed", broker(behavior="Manual", status=listed(500)), None),
        ("manual, requested", broker(behavior="Manual", requests=1, status=listed(1)), 0.0),
        ("requested again", broker(requests=2, status=listed(1, reconciledRelistRequests=1)), 0.0),
        (
            "last attempt failed",
            broker(status={**listed(1), "conditions": [{"type": "Ready", "status": "False"}]}),
            0.0,
        ),
    ],
)
def test_relist_due(reason: str, body: dict[str, Any], want: float | None) -> None:
    assert relisting.relist_due(body, NOW) == want, reason


def test_admission_refuses_deleting_an_instance_with_bindings() -> None:
    from opbroker.controller.servicecatalog import admission

    instance = {"metadata": {"name": "db", "namespace": "a"}}
    bindings_ = [
        {"metadata": {"name": "same-ns", "namespace": "a"}, "spec": {"instanceRef": {"name": "db"}}},
        {"metadata": {"name": "other-ns", "namespace": "b"}, "spec": {"instanceRef": {"name": "db", "namespace": "a"}}},
        {"metadata": {"name": "unrelated", "namespace": "b"}, "spec": {"instanceRef": {"name": "db"}}},
    ]
    found = admission.bindings_of(instance, bindings_)
    assert found == ["a/same-ns", "b/other-ns"]
    refused = admission.review({"uid": "u1", "operation": "DELETE", "oldObject": instance}, found)["response"]
    assert refused["uid"] == "u1" and refused["allowed"] is False and refused["status"]["code"] == 409
    assert "a/same-ns, b/other-ns" in refused["status"]["message"]
    assert admission.review({"uid": "u2", "operation": "DELETE", "oldObject": instance}, [])["response"]["allowed"]
    assert admission.review({"uid": "u3", "operation": "UPDATE"}, found)["response"]["allowed"]


def test_a_plans_maximum_polling_duration_is_listed_and_shortens_the_polling() -> None:
    from opbroker import osbclient
    from opbroker.controller.servicecatalog.common import Offering, pacing

    limited = service("Limited", "7")
    limited["plans"][0]["maximum_polling_duration"] = 30
    listed_plan = relisting.desired_class(BROKER, limited)["plans"][0]
    assert listed_plan["maximumPollingDuration"] == 30
    for bad in (0, -5, "30", True, 1.5):  # a broker's mistake in an optional field is left out, not fatal
        broken = service("Broken", "8")
        broken["plans"][0]["maximum_polling_duration"] = bad
        assert "maximumPollingDuration" not in relisting.desired_class(BROKER, broken)["plans"][0]

    controllers = osbclient.Backoff(base=1.0, maximum=30.0, max_duration=3600.0)
    broker_ = osbclient.Broker(url="http://b")
    assert pacing(controllers, Offering({}, listed_plan, broker_)).max_duration == 30.0
    assert pacing(controllers, Offering({}, {"maximumPollingDuration": 7200}, broker_)) is controllers  # never longer
    assert pacing(controllers, Offering({}, {"name": "p"}, broker_)) is controllers
    assert pacing(controllers, None) is controllers


def test_a_final_failure_survives_its_orphan_mitigation() -> None:
    from opbroker.controller.servicecatalog.common import conditions, keeping_failed, terminal_mitigation

    failed = {"type": "Failed", "status": "True", "reason": "AsyncOperationTimedOut", "message": "too slow"}
    final = obj(generation=2, observedGeneration=2, orphanMitigationInProgress=True, conditions=[failed])
    retried = obj(generation=2, orphanMitigationInProgress=True)  # a 5xx: no verdict for this generation
    changed = obj(generation=3, observedGeneration=2, orphanMitigationInProgress=True, conditions=[failed])
    assert terminal_mitigation(final)
    assert not terminal_mitigation(retried) and not terminal_mitigation(changed)  # a spec change means retry

    listed = conditions(final, ready=False, reason=Reason.ORPHAN_MITIGATION, message="deprovisioning")
    assert [c["type"] for c in listed] == ["Ready"]  # new conditions drop Failed...
    kept = keeping_failed(final, listed, keep=True)
    assert [c["type"] for c in kept] == ["Ready", "Failed"] and kept[1] == failed  # ...unless it is kept
    assert keeping_failed(final, listed, keep=False) == listed
