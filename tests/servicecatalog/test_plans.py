"""The Service Catalog plans as tables: the facts (or a broker's answer) in, the exact actions out.

Pure: no cluster, no broker, no clock (the facts carry the clock's reading). A :class:`Call`'s continuation is
not compared (a function); the rows that follow an answer call the continuation functions directly.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from opbroker import osbclient
from opbroker.controller.core import actions as a
from opbroker.controller.core.reasons import Reason
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.policies import DEFAULTS
from opbroker.controller.servicecatalog.core import binding_plan as bp
from opbroker.controller.servicecatalog.core import instance_plan as ip
from opbroker.controller.servicecatalog.core.calls import Call, KeepPacing, Pacing
from opbroker.controller.servicecatalog.core.offering import Offering, Unresolved
from opbroker.controller.servicecatalog.core.views import FINALIZER, PlanEntry, ServiceClassView

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 1, tzinfo=UTC)
STAMP = "2026-01-01T00:00:00Z"
BROKER = osbclient.Broker(url="http://broker")
OFFERING = Offering(
    ServiceClassView.of({"externalID": "svc"}), PlanEntry.of({"name": "small", "externalID": "plan-1"}), BROKER
)
KEY = Key("scinstance", "n", "db")
BKEY = Key("scbinding", "n", "creds")


def obj(*, held: bool = True, deleting: bool = False, generation: int = 1, **status: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "db", "namespace": "n", "uid": "u-1", "generation": generation}
    meta["resourceVersion"] = "7"
    if held:
        meta["finalizers"] = [FINALIZER]
    if deleting:
        meta["deletionTimestamp"] = STAMP
    return {
        "apiVersion": "servicecatalog.k8s.io/v1beta1",
        "kind": "ServiceInstance",
        "metadata": meta,
        "spec": {"externalID": "ext-1"},
        "status": status,
    }


def facts(body: dict[str, Any], **extra: Any) -> ip.InstanceFacts:
    base: dict[str, Any] = {"offering": OFFERING, "parameters": {}, "problem": None, "bindings": ()}
    base.update(extra)
    return ip.InstanceFacts(KEY, body, **base, now=NOW, monotonic=100.0)


def ready(status: str, reason: Reason, message: str) -> dict[str, Any]:
    return {
        "type": "Ready",
        "status": status,
        "reason": reason.value,
        "message": message,
        "lastTransitionTime": STAMP,
        "observedGeneration": 1,
    }


def calls_of(actions: list[Any]) -> list[tuple[str, tuple[Any, ...]]]:
    return [(c.method, c.args) for c in actions if isinstance(c, Call)]


HELD = {"planName": "small", "planExternalID": "plan-1", "parametersChecksum": "c1"}
PROBLEM = Unresolved(Reason.REFERENCES_NON_EXISTENT_CLASS, "no class")
BLOCKED = "deletion waits: 1 binding(s) still use this instance (n/b); delete them first"

INSTANCE_ROWS: list[tuple[str, ip.InstanceFacts, list[Any]]] = [
    ("new: the finalizer, then look again", facts(obj(held=False)), [a.EnsureFinalizer(True), a.Continue()]),
    ("released while deleted: nothing", facts(obj(held=False, deleting=True)), []),
    ("settled: nothing", facts(obj(provisionStatus="Provisioned", observedGeneration=1)), []),
    (
        "failed for good (Failed, this generation observed): nothing is retried without a spec change",
        facts(obj(provisionStatus="NotProvisioned", observedGeneration=1)),
        [],
    ),
    (
        "only shareWith changed: observed, nothing sent",
        facts(
            obj(generation=2, provisionStatus="Provisioned", observedGeneration=1, externalProperties=HELD),
            desired={**HELD, "updateRequests": 0},
        ),
        [a.WriteStatus({"observedGeneration": 2})],
    ),
    (
        "deleted, nothing at the broker: the finalizer goes",
        facts(obj(deleting=True, deprovisionStatus="NotRequired")),
        [a.EnsureFinalizer(False)],
    ),
    (
        "deleted with a binding: held, said once",
        facts(obj(deleting=True, deprovisionStatus="Required"), bindings=("n/b",)),
        [
            a.WriteStatus(
                {"conditions": [ready("False", Reason.INSTANCE_DELETE_BLOCKED, BLOCKED)]},
                event=a.Event(Reason.INSTANCE_DELETE_BLOCKED.value, BLOCKED, warning=True),
            )
        ],
    ),
    (
        "deleted with a binding, said already: no write, no event",
        facts(
            obj(
                deleting=True,
                deprovisionStatus="Required",
                conditions=[ready("False", Reason.INSTANCE_DELETE_BLOCKED, BLOCKED)],
            ),
            bindings=("n/b",),
        ),
        [],
    ),
    (
        "class missing: said, looked at again in 30 s",
        facts(obj(), offering=None, problem=PROBLEM),
        [
            a.WriteStatus(
                {"conditions": [ready("False", PROBLEM.reason, "no class")]},
                event=a.Event(PROBLEM.reason.value, "no class", warning=True),
            ),
            a.Requeue(30.0),
        ],
    ),
    (
        "a poll not due yet (woken early): only the rest of the wait",
        facts(obj(asyncOpInProgress=True), pacing=Pacing(polls=1, due=120.0)),
        [a.Requeue(20.0)],
    ),
    (
        "someone else's id, deleted: released, nothing sent",
        facts(obj(deleting=True, deprovisionStatus="Required"), owns_id=False, problem=PROBLEM),
        [a.EnsureFinalizer(False)],
    ),
]


@pytest.mark.parametrize(("row", "given", "want"), INSTANCE_ROWS, ids=[r[0] for r in INSTANCE_ROWS])
def test_instance_plan(row: str, given: ip.InstanceFacts, want: list[Any]) -> None:
    assert ip.plan(given) == want, row


def test_a_provision_is_recorded_before_it_is_sent() -> None:
    record, call = ip.plan(facts(obj()))
    assert isinstance(record, a.WriteStatus) and isinstance(call, Call)
    assert record.patch["currentOperation"] == "Provision" and record.patch["operationStartTime"] == STAMP
    assert record.patch["externalID"] == "ext-1" and record.patch["deprovisionStatus"] == "Required"
    assert (call.method, call.args, call.broker) == ("provision", ("ext-1",), BROKER)
    assert call.kwargs["plan_id"] == "plan-1" and call.kwargs["organization_guid"] == "n"


@pytest.mark.parametrize(
    ("row", "body", "want"),
    [
        ("due poll", obj(asyncOpInProgress=True, lastOperation="op-1"), [("last_operation", ("ext-1",))]),
        ("mitigation: a deprovision", obj(orphanMitigationInProgress=True), [("deprovision", ("ext-1",))]),
        ("deleted: a deprovision", obj(deleting=True, deprovisionStatus="Failed"), [("deprovision", ("ext-1",))]),
        (
            "spec changed: an update",
            obj(generation=2, provisionStatus="Provisioned", observedGeneration=1),
            [("update", ("ext-1",))],
        ),
    ],
)
def test_the_call_each_step_sends(row: str, body: dict[str, Any], want: list[Any]) -> None:
    assert calls_of(ip.plan(facts(body))) == want, row


# -- what an answer leads to -------------------------------------------------------------------------------------

RECORDED = obj(currentOperation="Provision", inProgressProperties={"planName": "small"})
IN_PROGRESS = osbclient.LastOperation(state=osbclient.IN_PROGRESS)


def test_an_accepted_provision_is_polled_after_the_pacings_base() -> None:
    accepted = osbclient.InstanceResult(202, operation="op-1")
    actions = ip.answered(facts(obj()), ip.InstanceOperation.PROVISION, accepted, RECORDED)
    assert actions[1:] == [KeepPacing(Pacing(polls=0, due=101.0)), a.Requeue(1.0)]
    assert actions[0].patch["asyncOpInProgress"] is True and actions[0].patch["lastOperation"] == "op-1"


def test_an_in_progress_poll_is_paced_and_counted() -> None:
    given = facts(obj(asyncOpInProgress=True, operationStartTime=STAMP), pacing=Pacing(polls=1))
    actions = ip.polled(given, ip.InstanceOperation.PROVISION, IN_PROGRESS, RECORDED)
    assert actions == [KeepPacing(Pacing(polls=2, due=102.0)), a.Requeue(2.0)]  # the backoff's 2nd delay


def test_a_transient_refusal_is_said_and_retried_with_the_one_backoff() -> None:
    error = osbclient.OSBError(503, None, "busy", what="update")
    given = facts(obj(), pacing=Pacing(retries=2))
    actions = ip.answered(given, ip.InstanceOperation.UPDATE, error, RECORDED)
    assert actions[-2:] == [KeepPacing(Pacing(retries=3)), a.Requeue(DEFAULTS.broker_retries.delay(3))]
    (said,) = actions[:-2]
    assert said.event is not None and said.event.reason == Reason.UPDATE_CALL_FAILED.value


def test_a_refused_provision_says_how_to_send_it_again_once_fixed_and_a_bumped_update_request_does() -> None:
    """A 400 (a namespace the broker does not allow) fails for good: the message names the retry, and a spec that
    only increases updateRequests (a new generation) provisions again."""
    error = osbclient.OSBError(400, None, "context.namespace 'team-a' is not allowed", what="provision")
    (said,) = ip.answered(facts(obj()), ip.InstanceOperation.PROVISION, error, RECORDED)
    failed = [c for c in said.patch["conditions"] if c["type"] == "Failed"]
    assert failed and "increase spec.updateRequests" in failed[0]["message"], said.patch
    assert said.event is not None and "increase spec.updateRequests" in said.event.message
    settled = obj(provisionStatus="NotProvisioned", observedGeneration=1)
    assert ip.next_step(facts(settled)) is ip.Step.NOTHING
    bumped = {**settled, "metadata": {**settled["metadata"], "generation": 2}}
    assert ip.next_step(facts(bumped)) is ip.Step.PROVISION


def test_a_provision_done_at_once_is_provisioned_with_its_event() -> None:
    done = osbclient.InstanceResult(201, dashboard_url="http://dash")
    (write,) = ip.answered(facts(obj()), ip.InstanceOperation.PROVISION, done, RECORDED)
    assert write.patch["provisionStatus"] == "Provisioned" and write.patch["dashboardURL"] == "http://dash"
    assert write.patch["externalProperties"] == {"planName": "small"} and write.patch["observedGeneration"] == 1
    assert write.event == a.Event(Reason.PROVISIONED.value, "the broker provisioned the instance")


def test_a_deletions_deprovision_done_releases_the_finalizer() -> None:
    body = obj(deleting=True, currentOperation="Deprovision")
    actions = ip.removal_answered(facts(body), osbclient.InstanceResult(200), body)
    assert [type(x) for x in actions] == [a.WriteStatus, a.EnsureFinalizer] and actions[1] == a.EnsureFinalizer(False)


def test_a_failed_deprovision_is_recorded_and_sent_again() -> None:
    body = obj(deleting=True, currentOperation="Deprovision")
    error = osbclient.OSBError(400, None, "no", what="deprovision")
    actions = ip.removal_answered(facts(body), error, body)
    assert actions[-2:] == [KeepPacing(Pacing(retries=1)), a.Requeue(1.0)]
    assert actions[0].patch["deprovisionStatus"] == "Failed"


def test_a_provision_the_broker_reports_failed_is_final_and_mitigated_at_once() -> None:
    failed = osbclient.LastOperation(state=osbclient.FAILED, description="no capacity")
    given = facts(obj(asyncOpInProgress=True, operationStartTime=STAMP))
    write, requeue = ip.polled(given, ip.InstanceOperation.PROVISION, failed, RECORDED)
    assert requeue == a.Requeue(0)
    assert write.patch["orphanMitigationInProgress"] is True and write.patch["observedGeneration"] == 1
    assert [c["type"] for c in write.patch["conditions"]] == ["Ready", "Failed"]


# -- Bindings ----------------------------------------------------------------------------------------------------


def binding(**status: Any) -> dict[str, Any]:
    body = obj(**status)
    body["metadata"]["name"] = "creds"
    body["kind"] = "ServiceBinding"
    return body


def bfacts(body: dict[str, Any], **extra: Any) -> bp.BindingFacts:
    base: dict[str, Any] = {"instance": obj(), "offering": OFFERING, "parameters": {}, "problem": None}
    base.update(extra)
    return bp.BindingFacts(BKEY, body, **base, now=NOW, monotonic=100.0)


BINDING_ROWS: list[tuple[str, bp.BindingFacts, list[Any]]] = [
    ("new: the finalizer, then look again", bfacts(binding(held=False)), [a.EnsureFinalizer(True), a.Continue()]),
    ("bound, no application: nothing", bfacts(binding(observedGeneration=1, unbindStatus="Required")), []),
    (
        "deleted, never bound: the Secret released (if ours), then the finalizer",
        bfacts(binding(deleting=True)),
        [bp.ReleaseCredentials("n", "creds", "u-1"), a.EnsureFinalizer(False)],
    ),
    (
        "failed for good: nothing is retried without a spec change",
        bfacts(binding(observedGeneration=1, unbindStatus="NotRequired")),
        [],
    ),
]


@pytest.mark.parametrize(("row", "given", "want"), BINDING_ROWS, ids=[r[0] for r in BINDING_ROWS])
def test_binding_plan(row: str, given: bp.BindingFacts, want: list[Any]) -> None:
    assert bp.plan(given) == want, row


def test_a_bind_is_recorded_then_sent_with_both_ids() -> None:
    record, call = bp.plan(bfacts(binding()))
    assert record.patch["currentOperation"] == "Bind" and record.patch["unbindStatus"] == "Required"
    assert (call.method, call.args) == ("bind", ("ext-1", "ext-1"))


def test_a_bind_answered_stores_the_credentials_then_the_plan_decides_on_the_outcome() -> None:
    body = binding(currentOperation="Bind", inProgressProperties={"parametersChecksum": "c"})
    (store,) = bp.answered(bfacts(body), osbclient.BindingResult(201, credentials={"user": "u"}), body)
    assert isinstance(store, bp.StoreCredentials) and store.owner_uid == "u-1"
    assert store.manifest["metadata"]["annotations"] == {"opbroker.io/owner-uid": "u-1"}
    (write,) = bp.stored(bfacts(body), store.manifest["data"], bp.Stored.WRITTEN, body)
    assert write.patch["secretName"] == "creds" and write.event.reason == Reason.INJECTED_BINDING.value
    not_ours, again = bp.stored(bfacts(body), store.manifest["data"], bp.Stored.NOT_OURS, body)
    assert not_ours.patch["orphanMitigationInProgress"] is True and again == a.Requeue(0)


def test_credentials_a_secret_cannot_hold_fail_the_bind_for_good() -> None:
    body = binding(currentOperation="Bind")
    write, again = bp.answered(bfacts(body), osbclient.BindingResult(201, credentials={"a b": "x"}), body)
    assert again == a.Requeue(0) and [c["type"] for c in write.patch["conditions"]] == ["Ready", "Failed"]


def test_an_async_binds_success_is_fetched() -> None:
    body = binding(asyncOpInProgress=True, currentOperation="Bind", operationStartTime=STAMP)
    done = osbclient.LastOperation(state=osbclient.SUCCEEDED)
    assert calls_of(bp.polled(bfacts(body), bp.Request.BIND, done, body)) == [("get_binding", ("ext-1", "ext-1"))]


# -- what the API-server tests used to sleep on: nothing is sent (the decision, not a wait) ---------------------

NOT_SHARED = Unresolved(Reason.REFERENCE_NOT_SHARED, "instance p/orders-db is not shared with namespace 'n'")
NOT_OWNED = Unresolved(Reason.SECRET_NOT_OWNED, "Secret 'db-admin' exists and was not made by this Binding")
IN_USE = Unresolved(Reason.EXTERNAL_ID_IN_USE, "the id is held by another object")


def unresolved(problem: Unresolved) -> list[Any]:
    """What an object that may not act writes: its Ready condition and Event, a look again in 30 s — no Call."""
    event = a.Event(problem.reason.value, str(problem), warning=True)
    written = a.WriteStatus({"conditions": [ready("False", problem.reason, str(problem))]}, event=event)
    return [written, a.Requeue(30.0)]


@pytest.mark.parametrize(
    ("row", "given"),
    [
        ("not shared with its namespace", bfacts(binding(), consented=False, offering=None, problem=NOT_SHARED)),
        ("shared, but not resolved (no consent)", bfacts(binding(), consented=False, problem=NOT_SHARED)),
        ("its secretName is someone else's Secret", bfacts(binding(), problem=NOT_OWNED)),
    ],
)
def test_a_binding_that_may_not_use_its_instance_sends_nothing(row: str, given: bp.BindingFacts) -> None:
    assert given.problem is not None
    assert bp.plan(given) == unresolved(given.problem), row


FORGED = {"provisionStatus": "Provisioned", "deprovisionStatus": "Required", "externalID": "victims"}


@pytest.mark.parametrize(
    ("row", "given", "want"),
    [
        ("instance, status forged", facts(obj(**FORGED), owns_id=False, problem=IN_USE), unresolved(IN_USE)),
        (
            "instance, forged operation in flight",
            facts(obj(asyncOpInProgress=True, **FORGED), owns_id=False, problem=IN_USE),
            unresolved(IN_USE),
        ),
        (
            "instance deleted, forged: no deprovision",
            facts(obj(deleting=True, **FORGED), owns_id=False, problem=IN_USE),
            [a.EnsureFinalizer(False)],
        ),
        (
            "binding, forged bound",
            bfacts(binding(unbindStatus="Required"), owns_ids=False, problem=IN_USE),
            unresolved(IN_USE),
        ),
        (
            "binding deleted, forged bound: no unbind",
            bfacts(binding(deleting=True, unbindStatus="Required"), owns_ids=False, problem=IN_USE),
            [bp.ReleaseCredentials("n", "creds", "u-1"), a.EnsureFinalizer(False)],
        ),
    ],
)
def test_an_object_without_its_id_sends_nothing(row: str, given: Any, want: list[Any]) -> None:
    plan = bp.plan if isinstance(given, bp.BindingFacts) else ip.plan
    assert plan(given) == want, row


FAILED = {"type": "Failed", "status": "True", "reason": "ProvisionCallFailed", "message": "no", "observedGeneration": 1}


def test_a_final_mitigation_ends_without_a_retry_and_then_nothing_is_due() -> None:
    """A provision failed for good, its orphan mitigation done: one status write, no requeue, no pacing — and
    the status it leaves plans nothing (no provision until the spec changes)."""
    mitigating = obj(orphanMitigationInProgress=True, observedGeneration=1, conditions=[FAILED])
    (write,) = ip.removal_answered(facts(mitigating), osbclient.InstanceResult(200), mitigating)
    assert isinstance(write, a.WriteStatus) and write.event is None
    after = {**mitigating, "status": {**mitigating["status"], **write.patch}}
    assert (
        after["status"]["deprovisionStatus"] == "Succeeded" and after["status"]["orphanMitigationInProgress"] is False
    )
    ready_now = next(c for c in after["status"]["conditions"] if c["type"] == "Ready")
    assert ready_now["reason"] == Reason.ORPHAN_MITIGATION_SUCCESSFUL.value and "stays failed" in ready_now["message"]
    assert ip.plan(facts(after)) == []


def test_a_final_bind_mitigation_ends_without_a_retry_and_then_nothing_is_due() -> None:
    failed = {**FAILED, "reason": "BindCallFailed"}
    mitigating = binding(orphanMitigationInProgress=True, observedGeneration=1, conditions=[failed])
    mitigating["status"]["unbindStatus"] = "Required"
    release, write = bp.removal_answered(bfacts(mitigating), osbclient.BindingResult(200), mitigating)
    assert release == bp.ReleaseCredentials("n", "creds", "u-1") and isinstance(write, a.WriteStatus)
    after = {**mitigating, "status": {**mitigating["status"], **write.patch}}
    ready_now = next(c for c in after["status"]["conditions"] if c["type"] == "Ready")
    assert ready_now["reason"] == Reason.ORPHAN_MITIGATION_SUCCESSFUL.value and "stays failed" in ready_now["message"]
    assert bp.plan(bfacts(after)) == []
