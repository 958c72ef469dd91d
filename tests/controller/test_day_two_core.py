"""Day two's pure core, without a cluster and on a fixed clock: what counts as drift (``core.drift``), when an object
is set back or left to a fight, what the status template's verdict does to Ready (``core.live_status``), and the
whole check of a settled instance (``instance_plan.check``), tabled as facts in, actions out."""

from __future__ import annotations

import base64
import dataclasses
import datetime
from typing import Any

import pytest

from opbroker.api.catalog import DriftPolicy
from opbroker.api.meta import ResourceRef
from opbroker.controller.core import actions as a
from opbroker.controller.core import decisions
from opbroker.controller.core.views import ConditionView, InstanceView
from opbroker.controller.osb.core import drift, live_status
from opbroker.controller.osb.core.binding_plan import BindPiece, ObservedBind, Refresh, bind_apply
from opbroker.controller.osb.core.binding_plan import plan as binding_plan
from opbroker.controller.osb.core.instance_plan import Check, Observed, Piece, Report, apply_action, plan
from opbroker.controller.runtime.policies import INF
from opbroker.osbclient import Backoff
from tests.controller.test_binding_plan import REPORTED, binding
from tests.controller.test_binding_plan import facts as binding_facts
from tests.controller.test_instance_plan import FAILED, NOW, SUCCEEDED, WORKING, body, facts

DB = {"apiVersion": "demo/v1", "kind": "Database", "metadata": {"name": "db", "namespace": "team"}}


def manifest(**spec: Any) -> dict[str, Any]:
    return {**DB, "spec": spec}


# -- what counts as drift ---------------------------------------------------------------------------------------


DIFFERENCES = [
    ("the same", manifest(size=1), manifest(size=1), ()),
    ("a field set differently", manifest(size=1), manifest(size=2), ("spec.size",)),
    ("a field it never set, added by someone", manifest(size=1), manifest(size=1, extra="x"), ()),
    ("a field it sets, removed", manifest(size=1, tier="a"), manifest(size=1), ("spec.tier",)),
    ("a number as a float", manifest(size=1), manifest(size=1.0), ()),
    ("a bool is not a number", manifest(on=True), manifest(on=1), ("spec.on",)),
    ("a null sets nothing", manifest(size=None), manifest(), ()),
    (
        "list items defaulted by the server",
        manifest(ports=[{"port": 80}]),
        manifest(ports=[{"port": 80, "protocol": "TCP"}]),
        (),
    ),
    ("a list grown", manifest(users=["a"]), manifest(users=["a", "b"]), ("spec.users",)),
    ("a list item changed", manifest(users=["a", "b"]), manifest(users=["a", "c"]), ("spec.users[1]",)),
    (
        "a label it sets, changed; another label left",
        {**DB, "metadata": {"name": "db", "labels": {"app": "x"}}},
        {**DB, "metadata": {"name": "db", "labels": {"app": "y", "team": "blue"}}},
        ("metadata.labels.app",),
    ),
    (
        "owner references and status are not drift",
        {**DB, "metadata": {"name": "db", "ownerReferences": [{"uid": "1"}]}, "status": {"phase": "Running"}},
        {**DB, "metadata": {"name": "db", "ownerReferences": [{"uid": "1"}, {"uid": "2"}]}, "status": {}},
        (),
    ),
    ("deleted", manifest(size=1), None, (drift.DELETED,)),
    (
        "a Secret's stringData compared as its data",
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"password": "hunter2"}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"password": "aHVudGVyMg=="}},
        (),
    ),
    (
        "a Secret's value changed: named, not shown",
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"password": "hunter2"}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"password": "b3RoZXI="}},
        ("data.password",),
    ),
]


@pytest.mark.parametrize(("desired", "live", "expected"), [r[1:] for r in DIFFERENCES], ids=[r[0] for r in DIFFERENCES])
def test_differences(desired: dict[str, Any], live: dict[str, Any] | None, expected: tuple[str, ...]) -> None:
    assert drift.differences(desired, live) == expected


def test_a_drift_message_names_fields_never_values() -> None:
    ref = ResourceRef(api_version="v1", kind="Secret", name="s", namespace="team")
    message = drift.drift_message(ref, ("data.password",), corrected=True)
    assert message == "Secret team/s changed outside opbroker, fields data.password: set back"
    secret = base64.b64encode(b"hunter2").decode()
    assert secret not in message and "hunter2" not in message
    many = drift.drift_message(ref, tuple(f"spec.f{i}" for i in range(12)), corrected=False)
    assert "and 4 more" in many and "left as they are (drift: report)" in many


# -- the fight bound ---------------------------------------------------------------------------------------------

BOUNDS = drift.Bounds(max_corrections=3, window_seconds=300, backoff=Backoff(base=2, maximum=300, max_duration=INF))


def at(seconds: float) -> datetime.datetime:
    return NOW + datetime.timedelta(seconds=seconds)


VERDICTS = [
    ("never corrected", (), 0, drift.Decision(drift.Verdict.CORRECT)),
    ("corrected 1 s ago: waits out the 2 s", (at(-1),), 0, drift.Decision(drift.Verdict.WAIT, 1.0)),
    ("corrected 3 s ago", (at(-3),), 0, drift.Decision(drift.Verdict.CORRECT)),
    ("twice: the backoff doubles", (at(-10), at(-3)), 0, drift.Decision(drift.Verdict.WAIT, 1.0)),
    ("three times in the window: a fight", (at(-100), at(-50), at(-10)), 0, drift.Decision(drift.Verdict.FIGHT, 200.0)),
    ("three, the first out of the window", (at(-400), at(-50), at(-10)), 0, drift.Decision(drift.Verdict.CORRECT)),
]


@pytest.mark.parametrize(("history", "now", "expected"), [r[1:] for r in VERDICTS], ids=[r[0] for r in VERDICTS])
def test_verdict(history: tuple[datetime.datetime, ...], now: float, expected: drift.Decision) -> None:
    assert drift.verdict(history, at(now), BOUNDS) == expected


def test_a_writer_that_never_stops_gets_at_most_the_bound_of_corrections_per_window() -> None:
    """Fake time: another writer changes the field back every 0.1 s for an hour; opbroker corrects whenever its
    verdict says so. It corrects at most ``max_corrections`` times per window, not 36 000 times."""
    history: list[datetime.datetime] = []
    corrections = 0
    for tick in range(36_000):
        now = at(tick * 0.1)
        if drift.verdict(history, now, BOUNDS).verdict is drift.Verdict.CORRECT:
            history = [*drift.recent(history, now, BOUNDS), now]
            corrections += 1
    assert corrections <= BOUNDS.max_corrections * (3600 // BOUNDS.window_seconds + 1)


def test_other_managers_most_recent_first_never_opbroker_nor_status_writers() -> None:
    live = {
        "metadata": {
            "managedFields": [
                {"manager": "opbroker-controller", "operation": "Apply", "time": "2026-06-01T12:00:05Z"},
                {"manager": "helm", "operation": "Update", "time": "2026-06-01T11:00:00Z"},
                {"manager": "rival", "operation": "Update", "time": "2026-06-01T12:00:04Z"},
                {"manager": "operator", "operation": "Update", "time": "2026-06-01T12:00:09Z", "subresource": "status"},
                {"manager": "opbroker-binding-b1", "operation": "Apply", "time": "2026-06-01T12:00:08Z"},
            ]
        }
    }
    assert drift.other_managers(live, "opbroker-") == ("rival", "helm")
    assert drift.other_managers(None, "opbroker-") == ()


# -- live status --------------------------------------------------------------------------------------------------


def ready(status: str, reason: str = "Provisioned", message: str = "ready") -> ConditionView:
    return ConditionView(type="Ready", status=status, reason=reason, message=message, last_transition_time=None)


def test_verdicts_of_the_status_template() -> None:
    healthy = live_status.verdict_of(SUCCEEDED)
    failed = live_status.verdict_of(FAILED)
    working = live_status.verdict_of(WORKING)
    assert healthy is not None and healthy.ready and healthy.health is live_status.Health.READY
    assert failed is not None and (failed.health, failed.reason.value, failed.message) == (
        live_status.Health.UNREADY,
        "OperatorFailed",
        "disk full",
    )
    assert working is not None and working.reason.value == "OperatorProgressing"
    assert live_status.verdict_of(None) is None


def test_a_healthy_instance_keeps_the_ready_its_operation_gave_it() -> None:
    healthy = live_status.verdict_of(SUCCEEDED)
    assert healthy is not None
    assert live_status.change(ready("True"), healthy, last_write=None, now=NOW, min_seconds=10) is None


def test_a_change_within_the_interval_waits_for_the_rest_of_it() -> None:
    failed = live_status.verdict_of(FAILED)
    assert failed is not None
    waited = live_status.change(ready("True"), failed, last_write=at(-3), now=NOW, min_seconds=10)
    assert waited == live_status.Change(write=False, wait=7.0)
    assert live_status.change(ready("True"), failed, last_write=at(-11), now=NOW, min_seconds=10) == (
        live_status.Change(write=True)
    )


def test_a_flapping_operator_costs_at_most_one_write_per_interval() -> None:
    """Fake time: the operator flips every 0.2 s for ten minutes; the instance is checked at every flip. Ready is
    written at most once per 10 s: 60 writes, not 3 000."""
    condition: ConditionView | None = ready("True")
    last_write: datetime.datetime | None = None
    writes = 0
    for tick in range(3000):
        now = at(tick * 0.2)
        verdict = live_status.verdict_of(FAILED if tick % 2 else SUCCEEDED)
        assert verdict is not None
        change = live_status.change(condition, verdict, last_write=last_write, now=now, min_seconds=10)
        if change is not None and change.write:
            writes += 1
            last_write = now
            condition = ready("True" if verdict.ready else "False", verdict.reason.value, verdict.message)
    assert 1 <= writes <= 61


# -- the check of a settled instance -------------------------------------------------------------------------------

CM_PIECE = Piece({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "db", "namespace": "team"},
                  "data": {"size": "1"}})  # fmt: skip
SETTLED = body(state="succeeded", observed=1)


def live_of(piece: Piece, **data: str) -> dict[str, Any]:
    """What the apply of ``piece`` left in the cluster (stamped), with ``data`` changed."""
    the_facts = facts(SETTLED)
    applied = dict(apply_action(the_facts, piece).manifest)
    return {**applied, "data": {**applied.get("data", {}), **data}, "metadata": {**applied["metadata"], "uid": "x"}}


def checking(*observed: Observed, report: Report | None = None, instance: dict[str, Any] = SETTLED, **kw: Any) -> Any:
    return facts(instance, check=Check("digest-1", observed=observed, **kw), report=report)


def kinds(actions: tuple[a.Action, ...]) -> list[str]:
    return [type(action).__name__ for action in actions]


def test_nothing_moved_costs_nothing() -> None:
    assert plan(facts(SETTLED, check=Check("d", unchanged=True, recorded=True))) == ()


SOURCE = ResourceRef(api_version="v1", kind="Secret", name="creds", namespace="team")


def test_nothing_moved_since_a_check_the_status_does_not_record_writes_nothing_for_the_record_alone() -> None:
    """A write of its own per settled instance would meet the broker's guarded writes of a client's next request."""
    assert plan(facts(SETTLED, check=Check("d", unchanged=True, sources=(SOURCE,), health="unready"))) == ()


def test_a_first_check_answered_by_the_status_record_remembers_and_follows_what_it_read() -> None:
    """A restart's first check whose ``status.checked`` digest matches the store: no render, no write; what it read
    is followed and remembered (the resync sweep compares those versions), as a rendering check would have left it;
    the health the record says is what the instance-health metric counts (no status template was asked)."""
    refs = (SOURCE, CM_PIECE.ref)
    check = Check("d", True, refs=refs, versions=("3", "7"), sources=(SOURCE,), recorded=True, recovered=True,
                  health="ready")  # fmt: skip
    track, checked, health = plan(facts(SETTLED, check=check))
    assert track == a.Track(refs, seen=((SOURCE, "3"), (CM_PIECE.ref, "7"))) and health == a.ReportHealth("ready")
    assert isinstance(checked, a.Checked)
    assert (checked.digest, checked.refs, checked.versions, checked.live_written) == ("d", refs, ("3", "7"), False)


APPLIED = {"resources": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "db", "namespace": "team"}],
           "observedGeneration": 1, "appliedPlanHash": "h"}  # fmt: skip


REPORTED_READY = Report(True, SUCCEEDED)


def succeeding(first_check: Check | None, report: Report = REPORTED_READY) -> tuple[a.Action, ...]:
    """The pass that reads an operation's success, with the first check it made (None: none could be made)."""
    return plan(facts(body(state="in progress"), pending=APPLIED, report=report, first_check=first_check))


def first_check(*observed: Observed) -> Check:
    return Check("digest-1", observed=observed, refs=(CM_PIECE.ref,), versions=("7",), sources=())


@pytest.mark.parametrize(
    ("report", "health"), [(REPORTED_READY, "ready"), (Report(False), "unknown")], ids=["verdict", "none"]
)
def test_a_success_found_as_declared_carries_its_first_check_in_its_own_write(report: Report, health: str) -> None:
    """No write of its own: the record rides on the success (a restart then renders nothing for the instance)."""
    actions = succeeding(first_check(Observed(CM_PIECE, live_of(CM_PIECE))), report)
    (write,) = [x for x in actions if isinstance(x, a.WriteStatus)]
    assert write.patch["state"] == "succeeded"
    assert write.patch["checked"] == {"sources": [], "digest": "digest-1", "health": health}
    (checked,) = [x for x in actions if isinstance(x, a.Checked)]
    assert (checked.digest, checked.refs, checked.versions) == ("digest-1", (CM_PIECE.ref,), ("7",))


@pytest.mark.parametrize(
    "found",
    [
        first_check(Observed(CM_PIECE, live_of(CM_PIECE, size="9"))),
        first_check(Observed(CM_PIECE, None)),
        first_check(Observed(dataclasses.replace(CM_PIECE, drift=DriftPolicy.REPORT), live_of(CM_PIECE, size="9"))),
        None,
    ],
    ids=["changed", "deleted", "reported", "no check made"],
)
def test_a_success_not_found_as_declared_records_nothing_and_leaves_it_to_the_first_sweep(found: Check | None) -> None:
    """Nothing is set back in the success's pass (its write is the outcome's); nothing is recorded, and what it
    reads is remembered without versions: the resync sweep checks it, and the check corrects or reports."""
    actions = succeeding(found)
    assert "Correct" not in kinds(actions)
    (write,) = [x for x in actions if isinstance(x, a.WriteStatus)]
    assert write.patch["state"] == "succeeded" and "checked" not in write.patch
    (checked,) = [x for x in actions if isinstance(x, a.Checked)]
    assert (checked.digest, checked.versions) == ("", ())


def test_as_declared_records_the_digest_and_the_versions_and_writes_nothing() -> None:
    actions = plan(
        checking(Observed(CM_PIECE, live_of(CM_PIECE)), refs=(CM_PIECE.ref,), versions=("7",), recorded=True)
    )
    assert "WriteStatus" not in kinds(actions) and "Correct" not in kinds(actions) and "Requeue" not in kinds(actions)
    (checked,) = [x for x in actions if isinstance(x, a.Checked)]
    assert (checked.digest, checked.refs, checked.versions) == ("digest-1", (CM_PIECE.ref,), ("7",))


def test_as_declared_and_not_recorded_in_the_status_writes_nothing_for_the_record_alone() -> None:
    actions = plan(checking(Observed(CM_PIECE, live_of(CM_PIECE)), refs=(CM_PIECE.ref,), versions=("7",)))
    assert "WriteStatus" not in kinds(actions) and "Requeue" not in kinds(actions)


def test_a_deleted_object_is_corrected_and_the_digest_not_recorded() -> None:
    actions = plan(checking(Observed(CM_PIECE, None)))
    (correct,) = [x for x in actions if isinstance(x, a.Correct)]
    assert correct.fields == (drift.DELETED,) and correct.apply.as_user is None
    assert correct.apply.manifest["metadata"]["annotations"]["opbroker.io/owner-uid"] == "u-1"
    (checked,) = [x for x in actions if isinstance(x, a.Checked)]
    assert (checked.digest, checked.versions) == ("", ())  # not as declared: the sweep must not take it for so
    assert any(isinstance(x, a.Requeue) and x.seconds == 2.0 for x in actions)  # looked at again soon


def test_a_drifted_object_that_is_someone_elses_now_is_not_set_back() -> None:
    """The correction is decided on the object as observed: its stamp gone (someone else's now), nothing is written
    over it and ``Synced=False`` says why; the operation stays as it ended."""
    taken = live_of(CM_PIECE, size="9")
    taken["metadata"] = {key: value for key, value in taken["metadata"].items() if key != "annotations"}
    actions = plan(checking(Observed(CM_PIECE, taken)))
    assert "Correct" not in kinds(actions)
    (write,) = [x for x in actions if isinstance(x, a.WriteStatus)]
    (synced,) = write.patch["conditions"]
    assert (synced["type"], synced["status"], synced["reason"]) == ("Synced", "False", "ApplyRefused")
    assert "was not created by opbroker for this object" in synced["message"]


def test_report_and_ignore() -> None:
    changed = live_of(CM_PIECE, size="9")
    reported = plan(checking(Observed(dataclasses.replace(CM_PIECE, drift=DriftPolicy.REPORT), changed)))
    assert "Correct" not in kinds(reported)
    (write,) = [x for x in reported if isinstance(x, a.WriteStatus)]
    (synced,) = [c for c in write.patch["conditions"] if c["type"] == "Synced"]
    assert (synced["status"], synced["reason"]) == ("False", "DriftDetected") and "data.size" in synced["message"]
    assert [x.reason for x in reported if isinstance(x, a.Event)] == ["DriftDetected"]
    said = body(state="succeeded", observed=1, conditions=[synced])
    again = plan(checking(Observed(dataclasses.replace(CM_PIECE, drift=DriftPolicy.REPORT), changed), instance=said))
    assert "WriteStatus" not in kinds(again) and "Event" not in kinds(again)  # said once
    ignored = plan(checking(Observed(dataclasses.replace(CM_PIECE, drift=DriftPolicy.IGNORE), None)))
    assert "Correct" not in kinds(ignored) and "WriteStatus" not in kinds(ignored)


def test_a_fight_stops_correcting_and_names_the_other_writer() -> None:
    history = (at(-100), at(-50), at(-10))
    seen = Observed(CM_PIECE, live_of(CM_PIECE, size="9"), history, ("rival",))
    actions = plan(checking(seen))
    assert "Correct" not in kinds(actions)
    (write,) = [x for x in actions if isinstance(x, a.WriteStatus)]
    (synced,) = [c for c in write.patch["conditions"] if c["type"] == "Synced"]
    assert synced["reason"] == "DriftFight" and "'rival'" in synced["message"]
    assert any(isinstance(x, a.Requeue) and x.seconds == 200.0 for x in actions)  # when the window has passed
    back_in_sync = body(state="succeeded", observed=1, conditions=[synced])
    healed = plan(checking(Observed(CM_PIECE, live_of(CM_PIECE)), instance=back_in_sync))
    (write,) = [x for x in healed if isinstance(x, a.WriteStatus)]
    assert [c["reason"] for c in write.patch["conditions"] if c["type"] == "Synced"] == ["InSync"]


def test_a_render_error_is_said_once_and_decides_nothing_else() -> None:
    actions = plan(dataclasses.replace(checking(), render_error="template: line 3: boom"))
    (write,) = [x for x in actions if isinstance(x, a.WriteStatus)]
    (synced,) = write.patch["conditions"]
    assert synced["reason"] == "RenderFailed" and "boom" in synced["message"]
    assert "state" not in write.patch  # the operation's outcome stands
    said = body(state="succeeded", observed=1, conditions=[synced])
    assert "WriteStatus" not in kinds(
        plan(dataclasses.replace(checking(instance=said), render_error="template: line 3: boom"))
    )


def test_the_operators_failure_becomes_ready_false_and_a_debounced_change_waits() -> None:
    provisioned = {"type": "Ready", "status": "True", "reason": "Provisioned", "message": "ready"}
    instance = body(state="succeeded", observed=1, conditions=[provisioned])
    actions = plan(checking(Observed(CM_PIECE, live_of(CM_PIECE)), report=Report(True, FAILED), instance=instance))
    (write,) = [x for x in actions if isinstance(x, a.WriteStatus)]
    (condition,) = [c for c in write.patch["conditions"] if c["type"] == "Ready"]
    assert (condition["status"], condition["reason"], condition["message"]) == ("False", "OperatorFailed", "disk full")
    assert "state" not in write.patch and "lastOperation" not in write.patch
    assert [(x.reason, x.warning) for x in actions if isinstance(x, a.Event)] == [("OperatorFailed", True)]
    assert [x.health for x in actions if isinstance(x, a.ReportHealth)] == ["unready"]
    (checked,) = [x for x in actions if isinstance(x, a.Checked)]
    assert checked.live_written and checked.at == NOW
    assert write.patch["checked"] == {"sources": [], "digest": "digest-1", "health": "unready"}, (
        "with a write made anyway"
    )
    soon = plan(
        checking(
            Observed(CM_PIECE, live_of(CM_PIECE)),
            report=Report(True, FAILED),
            instance=instance,
            last_live_write=at(-4),
        )
    )
    assert "WriteStatus" not in kinds(soon) and any(isinstance(x, a.Requeue) and x.seconds == 6.0 for x in soon)
    assert [x.digest for x in soon if isinstance(x, a.Checked)] == [""]  # the waiting change is not forgotten


def test_a_status_template_saying_nothing_leaves_ready_alone() -> None:
    actions = plan(checking(Observed(CM_PIECE, live_of(CM_PIECE)), report=Report(False)))
    assert "WriteStatus" not in kinds(actions)
    assert [x.health for x in actions if isinstance(x, a.ReportHealth)] == ["unknown"]


def test_a_shared_singleton_is_never_corrected() -> None:
    singleton = dataclasses.replace(CM_PIECE, singleton=True)
    assert "Correct" not in kinds(plan(checking(Observed(singleton, None))))


def test_drift_is_checked_only_against_the_plan_version_the_instance_was_applied_with() -> None:
    def applied(plan_hash: str | None) -> InstanceView:
        wire = body(state="succeeded", observed=1)
        if plan_hash is not None:
            wire["status"]["appliedPlanHash"] = plan_hash
        return InstanceView.of(wire)

    assert decisions.drift_checked(applied("h1"), plan_hash="h1")
    assert decisions.drift_checked(applied(None), plan_hash="h1")  # applied before the hash was recorded
    assert not decisions.drift_checked(applied("h0"), plan_hash="h1")  # the plan changed, not rolled out


# -- a bound binding's objects -------------------------------------------------------------------------------------


def test_a_bound_binding_sets_back_its_part_of_the_instances_object_never_creating_it() -> None:
    part = Piece({**DB, "spec": {"users": {"u1": ["login"]}}})
    instance_own = {**DB["metadata"], "uid": "db-uid", "annotations": {"opbroker.io/owner-uid": "u-1"}}
    live = {**DB, "metadata": instance_own, "spec": {"users": {"main": ["owner"]}}}  # someone removed the user
    seen = ObservedBind(Observed(part, live), instance_own=True)
    the_facts = binding_facts(
        binding(state="succeeded", observed=1, digest="d-new"), refresh=Refresh(report=REPORTED, observed=(seen,))
    )
    actions = binding_plan(the_facts)
    (correct,) = [x for x in actions if isinstance(x, a.Correct)]
    assert correct.fields == ("spec.users.u1",)
    assert correct.apply == dataclasses.replace(bind_apply(the_facts, BindPiece(part, instance_own=True)), uid="db-uid")
    assert correct.apply.must_exist and correct.apply.field_manager == "opbroker-binding-b"
    gone = ObservedBind(Observed(part, None), instance_own=True)  # the instance's object is gone: never created
    quiet = binding_plan(dataclasses.replace(the_facts, refresh=Refresh(report=REPORTED, observed=(gone,))))
    assert not [x for x in quiet if isinstance(x, a.Correct)]
    in_sync = ObservedBind(
        Observed(part, {**DB, "metadata": instance_own, "spec": {"users": {"main": ["owner"], "u1": ["login"]}}}), True
    )
    quiet = binding_plan(dataclasses.replace(the_facts, refresh=Refresh(report=REPORTED, observed=(in_sync,))))
    assert not [x for x in quiet if isinstance(x, (a.Correct, a.WriteStatus))]


# -- what a check may skip ------------------------------------------------------------------------------------------


def test_a_shape_moves_with_the_spec_and_the_metadata_never_with_the_status() -> None:
    database = {**DB, "metadata": {**DB["metadata"], "uid": "u", "generation": 3, "labels": {"a": "1"}}}
    shape = drift.shape(database)
    assert shape is not None
    assert drift.shape({**database, "status": {"phase": "Failed"}}) == shape  # the operator reporting
    assert drift.shape({**database, "metadata": {**database["metadata"], "generation": 4}}) != shape  # spec edited
    assert drift.shape({**database, "metadata": {**database["metadata"], "labels": {"a": "2"}}}) != shape
    assert drift.shape({**database, "metadata": {**database["metadata"], "uid": "v"}}) != shape  # created again
    assert drift.shape({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}) is None  # no generation
    assert drift.shape(None) is None  # gone
    assert drift.unmoved({"k": shape}, {"k": shape})
    assert not drift.unmoved({"k": shape}, {})  # nothing remembered
    assert not drift.unmoved({"k": None}, {"k": "x"})  # must be compared
    assert not drift.unmoved({}, {})  # nothing recorded: nothing to vouch for


def test_shapes_are_remembered_only_when_everything_was_found_as_declared() -> None:
    shapes = {("v1", "ConfigMap", "team", "db"): "s1"}
    as_declared = plan(checking(Observed(CM_PIECE, live_of(CM_PIECE)), shapes=shapes))
    assert [x.shapes for x in as_declared if isinstance(x, a.Checked)] == [shapes]
    changed = live_of(CM_PIECE, size="9")
    reported = plan(checking(Observed(dataclasses.replace(CM_PIECE, drift=DriftPolicy.REPORT), changed), shapes=shapes))
    assert [x.shapes for x in reported if isinstance(x, a.Checked)] == [{}]  # the drift reported is still there
    corrected = plan(checking(Observed(CM_PIECE, None), shapes=shapes))
    assert [x.shapes for x in corrected if isinstance(x, a.Checked)] == [{}]
