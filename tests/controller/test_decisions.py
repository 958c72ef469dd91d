"""The controller's pure state machine: what an instance or binding needs next, and the status it gets."""

from __future__ import annotations

import base64
import datetime
import json
from typing import Any

import pytest

from opbroker.api.conventions import CREDENTIALS_KEY, FINALIZER
from opbroker.api.meta import ResourceRef
from opbroker.controller.catalog.core import catalog_status
from opbroker.controller.core import conditions, decisions
from opbroker.controller.core.decisions import Step
from opbroker.controller.core.digests import DigestKey
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.views import (
    BindingView,
    EntryView,
    InstanceView,
    Meta,
    ObjectView,
    OperationView,
    SecretView,
    namespace_terminating,
)


def obj(
    *,
    state: str | None = None,
    generation: int = 1,
    observed: int | None = None,
    finalizer: bool = True,
    deleting: bool = False,
    applied_hash: str | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "i", "namespace": "n", "generation": generation}
    if finalizer:
        meta["finalizers"] = [FINALIZER]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status: dict[str, Any] = {}
    if state:
        status["state"] = state
    if observed is not None:
        status["observedGeneration"] = observed
    if applied_hash:
        status["appliedPlanHash"] = applied_hash
    return {"metadata": meta, "status": status}


INSTANCE_CASES = [
    # reason, object, plan hash, auto-update, live bindings, want
    ("new instance gets our finalizer first", obj(finalizer=False), "h", False, 0, Step.ADD_FINALIZER),
    ("queued provision is applied", obj(state="in_queue"), "h", False, 0, Step.APPLY),
    ("no state yet counts as queued", obj(), "h", False, 0, Step.APPLY),
    ("broker's update is applied", obj(state="update", observed=1), "h", False, 0, Step.APPLY),
    ("spec changed since last apply", obj(state="succeeded", generation=2, observed=1), "h", False, 0, Step.APPLY),
    ("in progress is evaluated", obj(state="in progress", observed=1), "h", False, 0, Step.EVALUATE),
    ("succeeded is checked (day two)", obj(state="succeeded", observed=1, applied_hash="h"), "h", False, 0, Step.CHECK),
    ("failed needs nothing", obj(state="failed", observed=1), "h", False, 0, Step.NOTHING),
    (
        "plan change re-renders with autoUpdate",
        obj(state="succeeded", observed=1, applied_hash="old"),
        "new",
        True,
        0,
        Step.APPLY,
    ),
    (
        "plan change not applied without autoUpdate (only checked)",
        obj(state="succeeded", observed=1, applied_hash="old"),
        "new",
        False,
        0,
        Step.CHECK,
    ),
    ("deletion tears down", obj(state="delete", observed=1, deleting=True), "h", False, 0, Step.TEARDOWN),
    ("deletion waits for bindings", obj(state="delete", observed=1, deleting=True), "h", False, 2, Step.BLOCKED),
    ("deleted without our finalizer", obj(deleting=True, finalizer=False), "h", False, 0, Step.NOTHING),
]


@pytest.mark.parametrize(
    ("reason", "instance", "plan_hash", "auto", "bindings", "want"), INSTANCE_CASES, ids=[c[0] for c in INSTANCE_CASES]
)
def test_next_instance_step(
    reason: str, instance: dict[str, Any], plan_hash: str, auto: bool, bindings: int, want: Step
) -> None:
    assert (
        decisions.next_instance_step(
            InstanceView.of(instance), plan_hash=plan_hash, auto_update=auto, live_bindings=bindings
        )
        == want
    )


BINDING_CASES = [
    ("finalizer first", obj(finalizer=False), "succeeded", Step.ADD_FINALIZER),
    ("bind once the instance succeeded", obj(state="in_queue"), "succeeded", Step.APPLY),
    ("wait while the instance is provisioning", obj(state="in_queue"), "in progress", Step.BLOCKED),
    ("in progress is evaluated", obj(state="in progress", observed=1), "succeeded", Step.EVALUATE),
    ("bound: credentials follow their source", obj(state="succeeded", observed=1), "succeeded", Step.REFRESH),
    ("bound, instance updating: still followed", obj(state="succeeded", observed=1), "in progress", Step.REFRESH),
    ("failed needs nothing", obj(state="failed", observed=1), "succeeded", Step.NOTHING),
    ("bound, spec changed: bind again", obj(state="succeeded", generation=2, observed=1), "succeeded", Step.APPLY),
    ("unbind on deletion", obj(state="delete", observed=1, deleting=True), "succeeded", Step.TEARDOWN),
    ("unbind even if the instance is gone", obj(state="delete", observed=1, deleting=True), None, Step.TEARDOWN),
]


@pytest.mark.parametrize(
    ("reason", "binding", "instance_state", "want"), BINDING_CASES, ids=[c[0] for c in BINDING_CASES]
)
def test_next_binding_step(reason: str, binding: dict[str, Any], instance_state: str | None, want: Step) -> None:
    assert decisions.next_binding_step(BindingView.of(binding), instance_state=instance_state) == want


def test_ready_condition_keeps_transition_time_while_unchanged() -> None:
    first = decisions.ready_condition(None, ready=False, reason=Reason.IN_PROGRESS, message="m", generation=1, at=AT)
    first[0]["lastTransitionTime"] = "2000-01-01T00:00:00Z"
    same = decisions.ready_condition(first, ready=False, reason=Reason.IN_PROGRESS, message="m2", generation=2, at=AT)
    assert same[0]["lastTransitionTime"] == "2000-01-01T00:00:00Z"
    assert same[0]["observedGeneration"] == 2
    flipped = decisions.ready_condition(first, ready=True, reason=Reason.PROVISIONED, message="ok", generation=2, at=AT)
    assert flipped[0]["status"] == "True" and flipped[0]["lastTransitionTime"] != "2000-01-01T00:00:00Z"


def test_errors_are_counted_then_the_operation_fails() -> None:
    instance = obj(state="in progress", observed=1)
    view = InstanceView.of(instance)
    patch, gave_up = decisions.error_status(view.status, view.meta.generation, message="boom", threshold=3, at=AT)
    assert (patch["errorCount"], gave_up) == (1, False)
    instance["status"]["errorCount"] = 2
    view = InstanceView.of(instance)
    patch, gave_up = decisions.error_status(view.status, view.meta.generation, message="boom", threshold=3, at=AT)
    assert gave_up
    assert patch["state"] == "failed"
    assert patch["error"] == "gave up after 3 consecutive errors: boom"
    assert patch["conditions"][0]["reason"] == "GaveUp"


# -- the maximum operation duration ------------------------------------------------------------------------


def status_of(instance: dict[str, Any]) -> OperationView:
    return InstanceView.of(instance).status


AT = datetime.datetime(2026, 1, 1, 1, 0, 0, tzinfo=datetime.UTC)


def started(at: str | None, state: str = "in progress", **last: Any) -> dict[str, Any]:
    found = obj(state=state)
    if at is not None or last:
        found["status"]["lastOperation"] = {"type": "provision", **({"startedAt": at} if at else {}), **last}
    return found


@pytest.mark.parametrize(
    ("reason", "instance", "limit", "want"),
    [
        ("younger than the limit", started("2026-01-01T00:30:00.000001Z"), 3600, None),
        ("older than the limit", started("2026-01-01T00:00:00Z"), 1800, 3600.0),
        ("exactly at the limit is not over it", started("2026-01-01T00:00:00Z"), 3600, None),
        ("a limit of 0 disables it", started("2025-01-01T00:00:00Z"), 0, None),
        ("no start recorded: nothing to measure", started(None), 1, None),
        ("an unreadable start is ignored, not a crash", started("yesterday"), 1, None),
        ("a start without zone is UTC", started("2026-01-01T00:00:00"), 60, 3600.0),
    ],
)
def test_overdue(reason: str, instance: dict[str, Any], limit: float, want: float | None) -> None:
    assert decisions.overdue(status_of(instance), max_seconds=limit, at=AT) == want, reason


def test_poll_after_comes_no_later_than_the_deadline() -> None:
    fresh = started(conditions.stamp(AT))
    assert decisions.poll_after(status_of(fresh), poll_seconds=10, max_seconds=3600, at=AT) == 10
    assert 0.5 <= decisions.poll_after(status_of(fresh), poll_seconds=10, max_seconds=3, at=AT) <= 3.5
    assert decisions.poll_after(status_of(started(None)), poll_seconds=10, max_seconds=3, at=AT) == 10
    assert decisions.poll_after(status_of(fresh), poll_seconds=10, max_seconds=0, at=AT) == 10


@pytest.mark.parametrize(
    ("reason", "started_at", "limit", "cap", "want"),
    [
        ("young: the poll interval", "2026-01-01T00:59:50Z", 3600, 300, 10.0),
        ("20 s old: still the poll interval (half its age)", "2026-01-01T00:59:40Z", 3600, 300, 10.0),
        ("two minutes old: half its age", "2026-01-01T00:58:00Z", 3600, 300, 60.0),
        ("an hour old: the cap", "2026-01-01T00:00:00Z", 7200, 300, 300.0),
        ("the deadline still comes first", "2026-01-01T00:00:00Z", 3620, 300, 20.5),
        ("no limit: the cap alone", "2025-12-31T00:00:00Z", 0, 300, 300.0),
        ("no cap: no growth", "2026-01-01T00:00:00Z", 7200, None, 10.0),
        ("a cap below the poll interval: no growth", "2026-01-01T00:00:00Z", 7200, 5, 10.0),
        ("no start recorded: the poll interval", None, 7200, 60, 10.0),
    ],
)
def test_poll_after_backs_off_with_the_operations_age(
    reason: str, started_at: str | None, limit: float, cap: float | None, want: float
) -> None:
    status = status_of(started(started_at))
    got = decisions.poll_after(status, poll_seconds=10, max_seconds=limit, max_poll_seconds=cap, at=AT)
    assert got == want, reason


@pytest.mark.parametrize(
    ("reason", "instance", "want"),
    [
        (
            "the broker asked: its start stands",
            started("2026-01-01T00:00:00Z", state="in_queue"),
            "2026-01-01T00:00:00Z",
        ),
        ("an update the broker asked for", started("2026-01-01T00:00:00Z", state="update"), "2026-01-01T00:00:00Z"),
        ("created without the broker", obj(), "2026-01-01T01:00:00.000000Z"),
        ("a spec change through the API", obj(state="succeeded", observed=1), "2026-01-01T01:00:00.000000Z"),
        (
            "an old broker request does not date a new change",
            started("2025-01-01T00:00:00Z", state="succeeded"),
            "2026-01-01T01:00:00.000000Z",
        ),
    ],
)
def test_started_operation(reason: str, instance: dict[str, Any], want: str) -> None:
    assert decisions.started_operation(status_of(instance), at=AT) == {"operationStartedAt": want}, reason


def test_the_controllers_start_wins_over_the_brokers_for_the_age() -> None:
    instance = started("2025-01-01T00:00:00Z", state="in progress")
    instance["status"]["operationStartedAt"] = "2026-01-01T00:59:00Z"
    assert decisions.operation_age(status_of(instance), at=AT) == 60.0


# -- the dashboard URL (issue 18: a registry's dashboard-url never reached dashboardUrl) ----------------------


@pytest.mark.parametrize(
    ("reason", "reported", "registry", "want"),
    [
        ("the status template's URL", "https://status/1", {}, "https://status/1"),
        ("the registry's dashboard-url", None, {"dashboard-url": "https://registry/1"}, "https://registry/1"),
        (
            "the status template wins over the registry",
            "https://status/1",
            {"dashboard-url": "https://r"},
            "https://status/1",
        ),
        (
            "an empty report falls back to the registry",
            "",
            {"dashboard-url": "https://registry/1"},
            "https://registry/1",
        ),
        ("neither", None, {"instance-id": "i"}, None),
        ("no registry at all", None, None, None),
        ("a non-string registry value is not a URL", None, {"dashboard-url": {"x": 1}}, None),
        ("an empty registry value is none", None, {"dashboard-url": ""}, None),
    ],
)
def test_dashboard_url(reason: str, reported: str | None, registry: dict[str, Any] | None, want: str | None) -> None:
    assert decisions.dashboard_url(reported, registry) == want, reason


# -- teardown in a terminating namespace (issue 18: the namespace's deletion deadlocked) ---------------------


def ref(name: str, namespace: str | None) -> ResourceRef:
    return ResourceRef(api_version="v1", kind="ConfigMap" if namespace else "Namespace", name=name, namespace=namespace)


@pytest.mark.parametrize(
    ("reason", "namespace", "want"),
    [
        ("an active namespace", {"metadata": {"name": "n"}, "status": {"phase": "Active"}}, False),
        ("phase Terminating", {"metadata": {"name": "n"}, "status": {"phase": "Terminating"}}, True),
        (
            "deletion requested, phase not yet written",
            {"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}},
            True,
        ),
        ("gone altogether", None, True),
    ],
)
def test_namespace_terminating(reason: str, namespace: dict[str, Any] | None, want: bool) -> None:
    assert namespace_terminating(namespace) is want, reason


HERE, ELSEWHERE, CLUSTER = ref("db", "n"), ref("db", "other"), ref("scoped", None)


@pytest.mark.parametrize(
    ("reason", "terminating", "want"),
    [
        ("normal teardown: templates, every object", False, decisions.TeardownScope(True, (HERE, ELSEWHERE, CLUSTER))),
        (
            "terminating: no templates, only what lives elsewhere",
            True,
            decisions.TeardownScope(False, (ELSEWHERE, CLUSTER), left=(HERE,)),
        ),
    ],
)
def test_teardown_scope(reason: str, terminating: bool, want: decisions.TeardownScope) -> None:
    got = decisions.teardown_scope([HERE, ELSEWHERE, CLUSTER], namespace="n", namespace_terminating=terminating)
    assert got == want, reason
    if terminating:
        message = decisions.terminating_teardown_message("n", got)
        assert message.startswith("namespace 'n' is being deleted") and "2 elsewhere released" in message


# -- credentials following their source (issue 18: binding credentials were written once) --------------------


def credentials_secret(value: Any) -> dict[str, Any]:
    raw = value if isinstance(value, str) else base64.b64encode(json.dumps(value).encode()).decode()
    return {"data": {CREDENTIALS_KEY: raw}}


CREDS = {"credentials": {"username": "u", "password": "p1"}}


@pytest.mark.parametrize(
    ("reason", "secret", "want"),
    [
        ("the same credentials: no write", credentials_secret(CREDS), False),
        (
            "the same, keys in another order: no write",
            credentials_secret({"credentials": {"password": "p1", "username": "u"}}),
            False,
        ),
        ("a rotated password", credentials_secret({"credentials": {"username": "u", "password": "p0"}}), True),
        ("the Secret is missing", None, True),
        ("the Secret has no response key", {"data": {}}, True),
        ("not base64", credentials_secret("not base64!"), True),
        ("not JSON", credentials_secret(base64.b64encode(b"{").decode()), True),
    ],
)
def test_credentials_changed(reason: str, secret: dict[str, Any] | None, want: bool) -> None:
    assert decisions.credentials_changed(SecretView.maybe(secret), CREDS) is want, reason


SECRET = ResourceRef(api_version="v1", kind="Secret", name="s", namespace="ns")
DATABASE = ResourceRef(api_version="demo.opbroker.io/v1alpha1", kind="Database", name="db", namespace="ns")


KEY = DigestKey(b"k" * 32)


def digest(**changes: Any) -> str:
    facts: dict[str, Any] = {
        "key": KEY,
        "plan_hash": "h1",
        "instance": {"metadata": {"uid": "i", "generation": 1}},
        "binding": {"metadata": {"uid": "b", "generation": 1}},
        "versions": [(SECRET, "10"), (DATABASE, "11")],
        **changes,
    }
    facts["instance"], facts["binding"] = (Meta.of(facts[k]["metadata"]) for k in ("instance", "binding"))
    return decisions.sources_digest(**facts)


@pytest.mark.parametrize(
    ("reason", "changes", "same"),
    [
        ("nothing moved", {}, True),
        ("the sources listed in another order", {"versions": [(DATABASE, "11"), (SECRET, "10")]}, True),
        ("a source changed (a rotated password)", {"versions": [(SECRET, "12"), (DATABASE, "11")]}, False),
        ("a source is gone", {"versions": [(SECRET, None), (DATABASE, "11")]}, False),
        ("another source", {"versions": [(SECRET, "10")]}, False),
        ("the plan changed", {"plan_hash": "h2"}, False),
        ("the instance's spec changed", {"instance": {"metadata": {"uid": "i", "generation": 2}}}, False),
        ("another instance of that name", {"instance": {"metadata": {"uid": "j", "generation": 1}}}, False),
        ("the binding's spec changed", {"binding": {"metadata": {"uid": "b", "generation": 2}}}, False),
        ("another controller's key (a tenant's hash of what it reads)", {"key": DigestKey(b"t" * 32)}, False),
    ],
)
def test_sources_digest(reason: str, changes: dict[str, Any], same: bool) -> None:
    assert (digest(**changes) == digest()) is same, reason


# -- SFPlans in use (issue 18: a plan could be deleted under live instances) --------------------------------


def plan(*, held: bool = False, deleting: bool = False) -> dict[str, Any]:
    found = obj(finalizer=held, deleting=deleting)
    found["spec"] = {"id": "p1"}
    return found


@pytest.mark.parametrize(
    ("reason", "the_plan", "users", "want"),
    [
        ("used, not held yet: hold", plan(), 2, decisions.PlanGuard.HOLD),
        ("used and held: nothing", plan(held=True), 2, decisions.PlanGuard.NOTHING),
        ("unused, not held: nothing", plan(), 0, decisions.PlanGuard.NOTHING),
        ("unused but held, not deleted: kept until its deletion", plan(held=True), 0, decisions.PlanGuard.NOTHING),
        ("deleted while used: wait", plan(held=True, deleting=True), 1, decisions.PlanGuard.WAIT),
        ("deleted and unused: release", plan(held=True, deleting=True), 0, decisions.PlanGuard.RELEASE),
        ("deleted, never held: nothing (none can be added)", plan(deleting=True), 3, decisions.PlanGuard.NOTHING),
    ],
)
def test_plan_guard_step(reason: str, the_plan: dict[str, Any], users: int, want: decisions.PlanGuard) -> None:
    assert decisions.entry_guard(EntryView.of(the_plan).meta, users=users) is want, reason


@pytest.mark.parametrize(
    ("reason", "the_plan", "want"),
    [
        ("not held: count, to hold it if used", plan(), True),
        ("held, not deleted: nothing to decide", plan(held=True), False),
        ("held and deleted: count, to release it", plan(held=True, deleting=True), True),
        ("deleted, not held: nothing to decide", plan(deleting=True), False),
    ],
)
def test_plan_needs_count(reason: str, the_plan: dict[str, Any], want: bool) -> None:
    assert decisions.entry_needs_count(EntryView.of(the_plan).meta) is want, reason


def user(name: str, plan_id: str = "p1", **kw: Any) -> dict[str, Any]:
    found = obj(**kw)
    found["metadata"]["name"] = name
    found["spec"] = {"planId": plan_id}
    return found


def test_plan_users() -> None:
    instances = [
        user("a"),
        user("b", deleting=True),  # deprovisioning: still uses the plan
        user("c", deleting=True, finalizer=False),  # released: gone
        user("d", plan_id="p2"),
        user("e"),
    ]
    assert decisions.plan_users(map(InstanceView.of, instances), "p1") == 3
    assert decisions.plan_users([], "p1") == 0


@pytest.mark.parametrize(
    ("reason", "instance", "the_plan", "want"),
    [
        ("new instance of a withdrawn plan", obj(state="in_queue"), plan(held=True, deleting=True), True),
        ("new instance of an offered plan", obj(state="in_queue"), plan(held=True), False),
        ("no plan at all (reported elsewhere)", obj(state="in_queue"), None, False),
        (
            "an existing instance's update",
            {**obj(state="update", observed=1), "status": {"state": "update", "appliedPlanHash": "h"}},
            plan(held=True, deleting=True),
            False,
        ),
        (
            "a first provision already applied",
            {**obj(), "status": {"state": "in progress", "resources": [{"kind": "ConfigMap"}]}},
            plan(held=True, deleting=True),
            False,
        ),
        ("a deprovision", obj(state="delete", deleting=True), plan(held=True, deleting=True), False),
    ],
)
def test_refuses_new_instance(
    reason: str, instance: dict[str, Any], the_plan: dict[str, Any] | None, want: bool
) -> None:
    assert (
        decisions.refuses_new_instance(InstanceView.of(instance), EntryView.of(the_plan) if the_plan else None) is want
    ), reason


def test_a_plan_in_use_is_not_ready_and_says_why() -> None:
    verdict = catalog_status.in_use_verdict(2)
    assert (verdict.ready, verdict.reason) == (False, Reason.PLAN_IN_USE)
    assert verdict.message.startswith("deletion waits: 2 service instance(s) still use this plan")
    assert catalog_status.plan_verdict(None).reason == Reason.ACCEPTED


def test_a_tracked_singleton_is_let_go_by_each_user_and_deleted_by_the_last() -> None:
    """Issue 29: a singleton owner references cannot hold lists its users; only the last one deletes it."""
    users = '["a","b"]'
    live = {"metadata": {"annotations": {"opbroker.io/singleton-users": users}, "resourceVersion": "1"}}
    assert decisions.letting_go(ObjectView.of(live), owner_uid="a") is decisions.Letting.UNOWN
    last = ObjectView.of({"metadata": {"annotations": {"opbroker.io/singleton-users": '["b"]'}}})
    assert decisions.letting_go(last, owner_uid="b") is decisions.Letting.DELETE
    assert decisions.letting_go(last, owner_uid="c") is decisions.Letting.LEAVE
    forged = ObjectView.of({"metadata": {"annotations": {"opbroker.io/singleton-users": '{"b": 1}'}}})
    assert decisions.singleton_users(forged.meta) == ()
    assert decisions.letting_go(forged, owner_uid="b") is decisions.Letting.LEAVE
    assert decisions.users_annotation(["b", "a", "b"]) == '["a","b"]'
    assert decisions.users_annotation([]) is None
