"""The binding's pure plan, tabled: facts in, the exact action list out (no cluster, fixed clock).

Rows as in ``tests/controller/test_instance_plan.py`` (whose :func:`summary` they share): wait for the instance or give
up on it, bind, read the credentials back and publish them, follow a rotation, unbind.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from opbroker.api.catalog import DeletionPolicy
from opbroker.api.conventions import ANNOTATION_OWNER_UID, ANNOTATION_PAUSED, CREDENTIALS_KEY, FINALIZER, PAUSED
from opbroker.api.meta import ResourceRef
from opbroker.controller.catalog.catalog import PlanEntry
from opbroker.controller.core import actions as a
from opbroker.controller.core import decisions
from opbroker.controller.core.decisions import Letting
from opbroker.controller.core.views import BindingView, InstanceView, ObjectView, SecretView
from opbroker.controller.kinds import BINDINGS
from opbroker.controller.multicluster.core.placement_plan import PlacementFacts, Reach
from opbroker.controller.multicluster.core.scheduling import MASTER
from opbroker.controller.multicluster.core.views import ReplicaView
from opbroker.controller.osb.core import binding_plan
from opbroker.controller.osb.core.binding_plan import (
    BindingFacts,
    BindPiece,
    BindRendering,
    BindReport,
    Refresh,
    SecretRead,
    plan,
    refused,
    steps,
)
from opbroker.controller.osb.core.instance_plan import Held, Piece, Teardown
from opbroker.controller.osb.osb_effects import osb_executor
from opbroker.controller.osb.reconciling import AppliedMemory
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.memory import PerKey
from opbroker.controller.runtime.objects import recorded
from opbroker.controller.runtime.outcomes import DONE
from opbroker.controller.runtime.policies import DEFAULTS
from opbroker.rendering.status import SectionStatus
from tests.controller.test_instance_plan import (
    CM,
    ENTRY,
    KEY,
    LIMITS,
    NOW,
    NS,
    PAUSED_PLAN,
    RETRY,
    ago,
    executor,
    failed,
    held,
    placing,
    said_paused,
    summary,
)
from tests.controller.test_instance_plan import body as instance_body

#: The look after the resync period every bound binding ends with (``summary`` shows it so).
RESYNC = ("resync",)

USER = ResourceRef(api_version="v1", kind="ConfigMap", name="b-user", namespace=NS)
OLD = ResourceRef(api_version="v1", kind="ConfigMap", name="b-old", namespace=NS)
READY = instance_body(state="succeeded", observed=1, resources=[CM])
SECRET_VALUE = "s3cr3t-value"
CREDENTIALS = {"credentials": {"user": "b", "password": SECRET_VALUE}}


def binding(
    *,
    state: str | None = None,
    finalizer: bool = True,
    deleting: bool = False,
    observed: int | None = None,
    resources: Sequence[ResourceRef] = (),
    responded: bool = False,
    digest: str | None = None,
    started: float = 60.0,
    orphans: Sequence[ResourceRef] = (),
    paused: bool = False,
    conditions: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "b", "namespace": NS, "generation": 1, "uid": "b-1", "resourceVersion": "9"}
    if paused:
        meta["annotations"] = {ANNOTATION_PAUSED: PAUSED}
    if finalizer:
        meta["finalizers"] = [FINALIZER]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status: dict[str, Any] = {"operationStartedAt": ago(started)}
    for key, value in (("state", state), ("observedGeneration", observed), ("sourcesDigest", digest)):
        if value is not None:
            status[key] = value
    if resources:
        status["resources"] = recorded(list(resources), orphans)
    if conditions:
        status["conditions"] = list(conditions)
    if responded:
        status["response"] = {"secretRef": "b-credentials"}
    spec = {"id": "b", "instanceId": "db", "serviceId": "svc-1", "planId": "plan-1"}
    return {"apiVersion": "osb.servicefabrik.io/v1alpha1", "kind": "SFServiceBinding", "metadata": meta,
            "spec": spec, "status": status}  # fmt: skip


def facts(
    the_binding: dict[str, Any], instance: dict[str, Any] | None = READY, entry: PlanEntry | None = ENTRY, **kw: Any
) -> BindingFacts:
    view = InstanceView.of(instance) if instance is not None else None
    fields: dict[str, Any] = {"pending": None, "limits": LIMITS}
    fields.update(kw)
    return BindingFacts(Key("binding", NS, "b"), BindingView.of(the_binding), view, entry, now=NOW, **fields)


def piece(name: str, *, instance_own: bool = False, orphan: bool = False) -> BindPiece:
    policy = DeletionPolicy.ORPHAN if orphan else DeletionPolicy.DELETE
    return BindPiece(
        Piece({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS}},
              deletion_policy=policy),
        instance_own,
    )  # fmt: skip


INSTANCE_DB = Held(
    ResourceRef(api_version="v1", kind="ConfigMap", name="db", namespace=NS),
    ObjectView.of(
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": "db", "namespace": NS, "uid": "db-uid", "annotations": {ANNOTATION_OWNER_UID: "u-1"}}}
    ),
)  # fmt: skip
"""The instance's object ``db`` as observe read it before an apply: stamped as the instance's."""


OWN_SECRET = SecretRead(
    ObjectView.of(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": "b-credentials",
                "namespace": NS,
                "uid": "s-1",
                "resourceVersion": "3",
                "ownerReferences": [{"apiVersion": "v1", "kind": "SFServiceBinding", "name": "b", "uid": "b-1"}],
            },
        }
    )
)
"""The credentials Secret as an unbind reads it: the binding's (an owner reference says so)."""


def mine(ref: ResourceRef, letting: Letting) -> Held:
    """``ref`` as read, ``letting`` describing it for the binding (``test_instance_plan.held``)."""
    return held(ref, letting, "b-1")


def Unbind(*args: Any, secret: SecretRead | None = OWN_SECRET, **kw: Any) -> binding_plan.Unbind:
    """The unbind's facts, its credentials Secret read as the binding's unless a row says otherwise."""
    return binding_plan.Unbind(*args, secret=secret, **kw)


def section(state: str, response: dict[str, Any] | None = None, error: str | None = None) -> SectionStatus:
    return SectionStatus(state=state, response=response, error=error)  # type: ignore[arg-type]


PENDING = {"resources": [], "observedGeneration": 1}
BOUND = section("succeeded", CREDENTIALS)
NO_CREDENTIALS = section("succeeded", {})
NO_SECRET = SecretRead(None)
"""The credentials Secret read before its write: there is none yet."""
REPORTED = BindReport(True, BOUND, source_refs=(CM,), digest="d-new", secret=NO_SECRET)
GOING = ("status", "in progress", "Unbinding", "guarded")
PAUSING = [("status", None, None, "guarded", ("event", "Paused", False))]
ITSELF, BY_PLAN = "the binding itself", "its plan opbroker/plan"
FINISH = [("DeleteSecret",), ("DropRegistry",), ("finalizer", False), ("ForgetObject",)]
PUBLISH = [
    ("forget",),
    ("WriteSecret",),
    ("Unfollow",),
    ("status", "succeeded", "Bound", "guarded", ("event", "Bound", False)),
]

ROWS: list[tuple[str, BindingFacts, list[tuple[Any, ...]]]] = [
    ("new binding: finalizer, then observe again", facts(binding(finalizer=False)),
     [("finalizer", True), ("Continue",)]),
    ("instance still provisioning: look again later", facts(binding(), instance_body(state="in progress")),
     [("requeue", 30.0)]),
    ("instance failed", facts(binding(), instance_body(state="failed", observed=1)), failed("InstanceNotReady")),
    ("instance gone, never bound: failed and removed", facts(binding(state="in_queue"), None),
     [*failed("InstanceNotFound"), ("delete", "b", None)]),
    ("instance gone, bound once: failed, kept", facts(binding(state="in_queue", responded=True), None),
     failed("InstanceNotFound")),
    ("plan missing", facts(binding(), entry=None), failed("PlanNotFound")),
    (
        "bind due: record, apply its own (stamped) and the instance's (its field manager), remember, continue",
        facts(binding(state="in_queue"),
              rendering=BindRendering((piece("b-user"), piece("db", instance_own=True)), live=(INSTANCE_DB,))),
        [("status", "in progress", "InProgress", "guarded"), ("apply", "b-user", False, True),
         ("apply", "db", False, True), ("remember",), ("Continue",)],
    ),
    (
        "re-bind: the registry changed, an object no longer rendered is released",
        facts(binding(state="update", observed=1, resources=[OLD]),
              rendering=BindRendering((piece("b-user"),), {"k": "v"}, True, (mine(OLD, Letting.DELETE),))),
        [("status", "in progress", "InProgress", "guarded"), ("SaveRegistry",), ("apply", "b-user", False, True),
         ("delete", "b-old", "5"), ("remember",), ("Continue",)],
    ),
    ("bind due, the template fails: count, retry", facts(binding(state="in_queue"), render_error="boom"),
     [("status", None, None, "unguarded"), ("event", "RenderFailed", True), RETRY]),
    ("bind pending, credentials reported: publish, bound, follow the sources",
     facts(binding(state="in progress"), pending=PENDING, report=REPORTED), [("track", ("db",)), *PUBLISH,
                                                                              ("track", ("db",))]),
    ("no status template: the registry's credentials are published",
     facts(binding(state="in progress"), pending=PENDING,
           report=BindReport(False, credentials={"u": "x"}, secret=NO_SECRET)),
     [("track", ()), *PUBLISH, ("track", ())]),
    ("succeeded without credentials: still in progress",
     facts(binding(state="in progress"), pending=PENDING, report=BindReport(True, NO_CREDENTIALS)),
     [("track", ()), ("remember",), ("requeue", 30.0)]),
    ("in progress for 10 minutes, its sources' kind not watched: the fixed poll",
     facts(binding(state="in progress", started=600), pending=PENDING,
           report=BindReport(True, NO_CREDENTIALS, source_refs=(CM,))),
     [("track", ("db",)), ("remember",), ("requeue", 30.0)]),
    ("in progress for 10 minutes, its sources' kind watched: the poll backs off to the cap",
     facts(binding(state="in progress", started=600), pending=PENDING, watched_kinds=frozenset({("v1", "ConfigMap")}),
           report=BindReport(True, NO_CREDENTIALS, source_refs=(CM,))),
     [("track", ("db",)), ("remember",), ("requeue", 300.0)]),
    ("the operator reports the bind failed",
     facts(binding(state="in progress"), pending=PENDING, report=BindReport(True, section("failed", error="no"))),
     [("track", ()), ("forget",), *failed("Failed")]),
    ("past its deadline: timed out",
     facts(binding(state="in progress", observed=1, started=7200), report=BindReport(True, None)),
     [("track", ()), ("forget",), *failed("OperationTimedOut")]),
    ("bound, sources stand still: only the next resync",
     facts(binding(state="succeeded", observed=1), refresh=Refresh(True)), [RESYNC]),
    ("bound, no status template: nothing", facts(binding(state="succeeded", observed=1)), []),
    ("bound, the refresh cannot render: a log line, nothing written",
     facts(binding(state="succeeded", observed=1), refresh=Refresh(render_error="boom")), [("Log",), RESYNC]),
    ("bound, mid-rotation (no credentials reported): keep the Secret, remember what was read",
     facts(binding(state="succeeded", observed=1), refresh=Refresh(report=BindReport(True, NO_CREDENTIALS))),
     [("track", ()), ("Follow",), RESYNC]),
    ("bound, the credentials rotated: rewrite, say so, record the sources",
     facts(binding(state="succeeded", observed=1, digest="d-old"),
           refresh=Refresh(report=REPORTED, secret_changed=True, secret=NO_SECRET)),
     [("track", ("db",)), ("WriteSecret",), ("Log",), ("event", "CredentialsRotated", False),
      ("status", None, None, "unguarded"), ("Unfollow",), RESYNC]),
    ("bound, a source touched, credentials the same: remembered, not written",
     facts(binding(state="succeeded", observed=1, digest="d-old"), refresh=Refresh(report=REPORTED)),
     [("track", ("db",)), ("Follow",), RESYNC]),
    ("bound before digests were: the digest is recorded once",
     facts(binding(state="succeeded", observed=1), refresh=Refresh(report=REPORTED)),
     [("track", ("db",)), ("status", None, None, "unguarded"), ("Unfollow",), RESYNC]),
    ("unbind, instance gone, nothing recorded: done",
     facts(binding(state="succeeded", deleting=True), None, None, unbind=Unbind(Teardown(False))),
     [("forget",), GOING, *FINISH]),
    ("unbind: its objects are applied first, the verdict read on the next pass",
     facts(binding(state="succeeded", deleting=True, resources=[USER]),
           unbind=Unbind(Teardown(False, (mine(USER, Letting.DELETE),)), True, (piece("b-drop"),),
                         section("succeeded"))),
     [("forget",), GOING, ("apply", "b-drop", False, True), ("Continue",)]),
    ("unbind, applied on the pass before: release what it recorded, wait for it",
     facts(binding(state="in progress", deleting=True, resources=[USER]),
           unbind=Unbind(Teardown(False, (mine(USER, Letting.DELETE),)), True, (piece("b-drop"),), section("succeeded"),
                         applied_before=True)),
     [("forget",), ("delete", "b-user", "5"), ("requeue", 30.0)]),
    ("unbind: the operator still working",
     facts(binding(state="in progress", deleting=True),
           unbind=Unbind(Teardown(False), True, (), section("in progress"))),
     [("forget",), ("requeue", 30.0)]),
    ("unbind: the operator reports failure",
     facts(binding(state="in progress", deleting=True), unbind=Unbind(Teardown(False), True, (), section("failed"))),
     [("forget",), *failed("Failed")]),
    ("unbind: the template fails: count, retry",
     facts(binding(state="in progress", deleting=True), unbind=Unbind(Teardown(False), True), render_error="x"),
     [("forget",), ("status", None, None, "unguarded"), ("event", "RenderFailed", True), RETRY]),
    ("unbind in a terminating namespace: no templates, said in an event; its Secret goes with the namespace",
     facts(binding(state="succeeded", deleting=True, resources=[USER]), unbind=Unbind(Teardown(True))),
     [("forget",), GOING, ("event", "NamespaceTerminating", False), *FINISH[1:]]),
    # -- pause ---------------------------------------------------------------------------------------------------
    ("paused, bind due: the Paused condition and its event, nothing bound",
     facts(binding(state="in_queue", paused=True), rendering=BindRendering((piece("b-user"),))), PAUSING),
    ("paused and said so: nothing", facts(binding(state="in_queue", paused=True, conditions=[said_paused(ITSELF)])),
     []),
    ("bound, paused and said so: no refresh, the credentials stay",
     facts(binding(state="succeeded", observed=1, paused=True, conditions=[said_paused(ITSELF)]),
           refresh=Refresh(report=REPORTED, secret_changed=True)), []),
    ("in progress, paused by its plan: no evaluation", facts(binding(state="in progress"), entry=PAUSED_PLAN,
                                                            pending=PENDING, report=REPORTED), PAUSING),
    ("its instance gone, paused: not abandoned meanwhile", facts(binding(state="in_queue", paused=True), None),
     PAUSING),
    ("paused and deleted: the unbind proceeds",
     facts(binding(state="succeeded", deleting=True, paused=True, conditions=[said_paused(ITSELF)]), None, None,
           unbind=Unbind(Teardown(False))),
     [("forget",), GOING, *FINISH]),
    ("paused by its plan and deleted: the unbind proceeds",
     facts(binding(state="succeeded", deleting=True, resources=[USER]), entry=PAUSED_PLAN,
           unbind=Unbind(Teardown(False, (mine(USER, Letting.DELETE),)), True, (), section("succeeded"))),
     [("forget",), GOING, ("delete", "b-user", "5"), ("requeue", 30.0)]),
    ("resumed: Paused False, then a fresh pass",
     facts(binding(state="succeeded", observed=1, conditions=[said_paused(BY_PLAN)]), refresh=Refresh(True)),
     [("status", None, None, "guarded", ("event", "Resumed", False)), ("Continue",)]),
    # -- deletion policy ---------------------------------------------------------------------------------------------
    ("unbind: an object recorded as an orphan is orphaned, not waited for, and named",
     facts(binding(state="in progress", deleting=True, resources=[USER, OLD], orphans=[USER]),
           unbind=Unbind(Teardown(False, (mine(USER, Letting.DELETE), mine(OLD, Letting.GONE))), True, (),
                         section("succeeded"))),
     [("forget",), ("orphan", "b-user", "5"), ("event", "Orphaned", False), *FINISH]),
    ("unbind: an orphan and an object to delete: the deleted one is waited for",
     facts(binding(state="in progress", deleting=True, resources=[USER, OLD], orphans=[USER]),
           unbind=Unbind(Teardown(False, (mine(USER, Letting.DELETE), mine(OLD, Letting.DELETE))), True, (),
                         section("succeeded"))),
     [("forget",), ("orphan", "b-user", "5"), ("delete", "b-old", "5"), ("requeue", 30.0)]),
    ("re-bind: an object recorded as an orphan and no longer rendered is orphaned, and named",
     facts(binding(state="update", observed=1, resources=[OLD], orphans=[OLD]),
           rendering=BindRendering((piece("b-user", orphan=True),), released=(mine(OLD, Letting.DELETE),))),
     [("status", "in progress", "InProgress", "guarded"), ("apply", "b-user", False, True), ("orphan", "b-old", "5"),
      ("event", "Orphaned", False), ("remember",), ("Continue",)]),
]  # fmt: skip


@pytest.mark.parametrize(("the_facts", "expected"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_binding_plan_actions(the_facts: BindingFacts, expected: list[tuple[Any, ...]]) -> None:
    assert summary(plan(the_facts)) == expected


def test_a_bind_records_the_deletion_policy_of_its_own_objects_only() -> None:
    """The binding's own objects are recorded with their template's policy; the instance's objects it amends are
    the instance's records, never the binding's."""
    rendering = BindRendering(
        (piece("b-user", orphan=True), piece("db", instance_own=True, orphan=True)), live=(INSTANCE_DB,)
    )
    actions = plan(facts(binding(state="in_queue"), rendering=rendering))
    record, remember = actions[0], next(x for x in actions if isinstance(x, a.Remember))
    assert isinstance(record, a.WriteStatus)
    user = {"apiVersion": "v1", "kind": "ConfigMap", "name": "b-user", "namespace": NS, "deletionPolicy": "orphan"}
    assert record.patch["resources"] == [user] and remember.record["resources"] == [user]


def test_a_binding_paused_by_its_plan_says_so_in_its_condition() -> None:
    (write,) = plan(facts(binding(state="succeeded", observed=1), entry=PAUSED_PLAN, refresh=Refresh(True)))
    assert isinstance(write, a.WriteStatus) and set(write.patch) == {"conditions"}
    (paused,) = write.patch["conditions"]
    assert (paused["type"], paused["status"], paused["reason"]) == ("Paused", "True", "Paused")
    assert paused["message"] == decisions.paused_message(BY_PLAN)


def test_the_credentials_go_only_into_the_secret_the_binding_owns() -> None:
    actions = plan(facts(binding(state="in progress"), pending=PENDING, report=REPORTED))
    (write,) = [act for act in actions if isinstance(act, a.WriteSecret)]
    assert json.loads(base64.b64decode(write.manifest["data"][CREDENTIALS_KEY])) == CREDENTIALS
    assert write.manifest["metadata"]["ownerReferences"][0]["uid"] == "b-1"
    status = next(act for act in actions if isinstance(act, a.WriteStatus))
    assert status.patch["response"] == {"secretRef": "b-credentials"}
    assert status.patch["sourcesDigest"] == "d-new"
    assert SECRET_VALUE not in repr(actions) and SECRET_VALUE not in json.dumps(dict(status.patch))


def test_a_refused_refresh_only_logs_and_a_refused_bind_fails() -> None:
    bound = facts(
        binding(state="succeeded", observed=1, digest="d"), refresh=Refresh(report=REPORTED, secret_changed=True)
    )
    refusal = a.Refusal(a.Refused.NOT_OWNED, "Secret b-credentials is not ours")
    assert summary(refused(bound, refusal)) == [("Log",)]
    pending = facts(binding(state="in progress"), pending=PENDING, report=REPORTED)
    assert summary(refused(pending, refusal)) == failed("ObjectNotOwned")
    (write,) = refused(pending, refusal)
    assert isinstance(write, a.WriteStatus) and write.patch["observedGeneration"] == 1  # answered: not re-applied


def stamped_secret(uid: str | None) -> SecretRead:
    """The credentials Secret as observed: stamped as ``uid``'s (None: unstamped, someone else's)."""
    annotations = {} if uid is None else {ANNOTATION_OWNER_UID: uid}
    meta = {"name": "b-credentials", "namespace": NS, "annotations": annotations, "resourceVersion": "7"}
    return SecretRead(ObjectView.of({"apiVersion": "v1", "kind": "Secret", "metadata": meta}))


SECRET_ROWS: list[tuple[str, SecretRead | None, list[tuple[Any, ...]]]] = [
    ("none yet: written", NO_SECRET, [("track", ("db",)), *PUBLISH, ("track", ("db",))]),
    ("the binding's own: written over", stamped_secret("b-1"), [("track", ("db",)), *PUBLISH, ("track", ("db",))]),
    ("someone else's: untouched, the bind fails", stamped_secret(None),
     [("track", ("db",)), ("forget",), *failed("ObjectNotOwned")]),
    ("another binding's: untouched, the bind fails", stamped_secret("b-2"),
     [("track", ("db",)), ("forget",), *failed("ObjectNotOwned")]),
    ("not read (observe's mistake): never written unchecked", None, [("track", ("db",)), ("Retry",)]),
]  # fmt: skip


@pytest.mark.parametrize(("seen", "expected"), [r[1:] for r in SECRET_ROWS], ids=[r[0] for r in SECRET_ROWS])
def test_the_plan_writes_the_credentials_only_into_a_secret_absent_or_the_bindings(
    seen: SecretRead | None, expected: list[tuple[Any, ...]]
) -> None:
    report = dataclasses.replace(REPORTED, secret=seen)
    assert summary(plan(facts(binding(state="in progress"), pending=PENDING, report=report))) == expected


REFRESH_SECRET_ROWS: list[tuple[str, SecretRead | None, list[tuple[Any, ...]]]] = [
    ("the binding's own: rewritten", stamped_secret("b-1"),
     [("track", ("db",)), ("WriteSecret",), ("Log",), ("event", "CredentialsRotated", False),
      ("status", None, None, "unguarded"), ("Unfollow",), RESYNC]),
    ("someone else's: left, the last credentials stay, a log line", stamped_secret(None),
     [("track", ("db",)), ("Log",)]),
    ("not read: never written unchecked", None, [("track", ("db",)), ("Retry",)]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("seen", "expected"), [r[1:] for r in REFRESH_SECRET_ROWS], ids=[r[0] for r in REFRESH_SECRET_ROWS]
)
def test_a_rotation_rewrites_only_the_bindings_own_secret(
    seen: SecretRead | None, expected: list[tuple[Any, ...]]
) -> None:
    bound = binding(state="succeeded", observed=1, digest="d-old")
    refresh = Refresh(report=REPORTED, secret_changed=True, secret=seen)
    assert summary(plan(facts(bound, refresh=refresh))) == expected


def test_a_bound_binding_not_following_its_sources_starts_to_before_it_renders() -> None:
    bound = binding(state="succeeded", observed=1, digest="d")
    assert summary(plan(facts(bound, refresh=Refresh(follow=(CM,))))) == [("track", ("db",)), ("Continue",)]


def test_a_bound_binding_not_following_its_unchanged_sources_follows_them_with_the_versions_it_read() -> None:
    """A restart's check: compared and followed in one pass; the versions read go with the Track (a change landing
    before the following is found by it)."""
    bound = binding(state="succeeded", observed=1, digest="d")
    track, resync = plan(facts(bound, refresh=Refresh(True, follow=(CM,), seen=((CM, "3"),))))
    assert track == a.Track((CM,), seen=((CM, "3"),)) and isinstance(resync, a.Requeue)


def test_the_credentials_write_only_performs() -> None:
    run, kube, created = executor()
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "b-credentials", "namespace": NS}}
    assert run.run(KEY, created, [a.WriteSecret(secret)]) == DONE
    assert [c.verb for c in kube.calls] == ["apply_secret"]  # no read: the plan decided on the Secret observed


def test_the_credentials_delete_only_performs() -> None:
    """Which Secret is the owner's is the plan's decision (``delete_secret``, on the Secret observed): the effect
    deletes the one it names, at the uid and version the plan found, with no read of its own."""
    run, kube, created = executor()
    owned = {"name": "mine", "namespace": NS, "ownerReferences": [{"uid": "b-1", "kind": "SFServiceBinding"}]}
    written = kube.apply_secret({"apiVersion": "v1", "kind": "Secret", "metadata": owned})
    meta = written["metadata"]
    kube.calls.clear()
    uid, version = meta.get("uid"), meta.get("resourceVersion")
    run.run(KEY, created, [a.DeleteSecret(NS, "mine", "b-1", uid=uid, resource_version=version)])
    assert [(c.verb, c.name) for c in kube.calls] == [("delete_secret", "mine")]
    assert kube.read_secret(NS, "mine") is None


def test_executor_keeps_what_a_binding_follows_in_memory() -> None:
    base, kube, created = executor()
    followed: PerKey[tuple[tuple[ResourceRef, ...], str]] = PerKey()
    run = osb_executor(base.deps, BINDINGS, "binding", AppliedMemory(), followed)
    run.run(KEY, created, [a.Follow((CM,), "d"), a.Log("noted", warning=False)])
    assert followed.get(KEY) == ((CM,), "d") and kube.calls == []
    run.run(KEY, created, [a.Unfollow()])
    assert followed.get(KEY) is None


def test_a_bindings_part_of_its_instances_object_is_applied_only_while_that_object_exists() -> None:
    """Found racing a deprovision: an unbind's partial database, applied after the deprovision deleted it, came back
    unstamped and the deprovision waited on it for ever. Only the instance's object is marked; the binding's own
    objects are still created."""
    pieces = (piece("b-user"), piece("db", instance_own=True))
    bind = plan(facts(binding(state="in_queue"), rendering=BindRendering(pieces, live=(INSTANCE_DB,))))
    pieces = (piece("b-drop"), piece("db", instance_own=True))
    unbind = plan(
        facts(binding(state="succeeded", deleting=True, resources=[USER]),
              unbind=Unbind(Teardown(False), True, pieces, section("succeeded"), live=(INSTANCE_DB,)))
    )  # fmt: skip
    for actions in (bind, unbind):
        applied = {x.manifest["metadata"]["name"]: (x.must_exist, x.uid) for x in actions if isinstance(x, a.Apply)}
        assert applied.get("db") == (True, "db-uid") and (False, None) in applied.values()
    gone = plan(facts(binding(state="in_queue"), rendering=BindRendering(pieces)))  # the instance's object gone
    assert [x.manifest["metadata"]["name"] for x in gone if isinstance(x, a.Apply)] == ["b-drop"]


def test_an_amendment_is_written_onto_the_object_the_plan_read_only() -> None:
    """The plan decided the amendment on the object it read (its uid in the apply): deleted since, nothing is
    written (never re-created half-specified); still there, it is amended in place."""
    run, kube, created = executor()
    manifest = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "db", "namespace": NS},
        "data": {"u": "b"},
    }
    assert run.run(KEY, created, [a.Apply(manifest, "u-1", {}, must_exist=True, uid="read-before")]) == DONE
    assert kube.get(CM) is None  # not brought back
    stamped = {**manifest, "metadata": {**manifest["metadata"], "annotations": {"opbroker.io/owner-uid": "u-1"}}}
    live = kube.apply({**stamped, "data": {}})
    kube.calls.clear()
    run.run(KEY, created, [a.Apply(manifest, "u-1", {}, must_exist=True, uid=live["metadata"]["uid"])])
    amended = kube.get(CM)
    assert (
        amended is not None and amended["data"] == {"u": "b"} and amended["metadata"]["uid"] == live["metadata"]["uid"]
    )


# -- multi-cluster placement: the plan's first branch -------------------------------------------------------


def on(cluster: str | None, the_binding: dict[str, Any], **known: Any) -> PlacementFacts:
    """What placement's observe read for ``the_binding`` (its instance placed on ``cluster``; None: not placed); a
    sister answers unless ``reach`` says otherwise."""
    reach = known.pop("reach", Reach(True, True) if cluster not in (None, MASTER) else None)
    for name, view in (("copy", ReplicaView.of), ("source", SecretView.of)):
        if known.get(name) is not None:
            known[name] = view(known[name])
    return PlacementFacts(
        Key("binding", NS, "b"), ReplicaView.of(the_binding), cluster=cluster, reach=reach, now=NOW, **known
    )


def bound_copy() -> dict[str, Any]:
    made = binding(state="succeeded", observed=1)
    made["metadata"] = {"name": "b", "namespace": NS, "uid": "cb"}
    made["status"]["response"] = {"secretRef": "theirs"}
    return made


SOURCE = {"metadata": {"name": "theirs", "namespace": NS}, "data": {"response": "e30="}}
OWN_SECRET = ObjectView.of(
    {"metadata": {"name": "b-credentials", "namespace": NS, "uid": "s-1", "resourceVersion": "3",
                  "ownerReferences": [{"uid": "b-1", "kind": "SFServiceBinding"}]}}
)  # fmt: skip
NEW = binding(finalizer=False)
QUEUED = binding(state="in_queue")
BOUND_HERE = binding(state="in progress", observed=1)
GOING_AWAY = binding(state="delete", deleting=True)

PLACED: list[tuple[str, BindingFacts, list[tuple[Any, ...]]]] = [
    ("start-up not over: nothing rendered, looked at again soon",
     facts(QUEUED, placement=on("c2", QUEUED, ready=False)), [("requeue", DEFAULTS.placement_not_ready.base)]),
    ("its instance on the master: reconciled here, as in one cluster",
     facts(NEW, placement=on(MASTER, NEW)), [("finalizer", True), ("Continue",)]),
    ("its instance not placed yet: the local plan waits for it",
     facts(NEW, placement=on(None, NEW)), [("finalizer", True), ("Continue",)]),
    ("deleted, its instance never placed: released, nothing to undo anywhere",
     facts(GOING_AWAY, placement=on(None, GOING_AWAY)), [("finalizer", False)]),
    ("its instance on a sister, a request pending: annotated, handed over, nothing applied here",
     facts(QUEUED, placement=on("c2", QUEUED)),
     [("annotate", "c2"), ("hand over", "c2", "in_queue"),
      ("status", "in progress", "InProgress", "guarded", ("event", "Replicated", False)), ("requeue", 5.0)]),
    ("its instance still being handed over: looked at again soon",
     facts(QUEUED, placement=on("c2", QUEUED, instance_copied=False)),
     [("requeue", DEFAULTS.placement_handover.base)]),
    ("bound in the sister: the credentials copied next to it, the status mirrored",
     facts(BOUND_HERE, placement=on("c2", BOUND_HERE, copy=bound_copy(), source=SOURCE)),
     [("WriteSecret",), ("status", "succeeded", None, "guarded", ("event", "Replicated", False))]),
    ("deleted, the copy gone: the credentials Secret deleted, released",
     facts(GOING_AWAY, placement=on("c2", GOING_AWAY, credentials=OWN_SECRET)),
     [("DeleteSecret",), ("finalizer", False)]),
    ("deleted, the copy gone, no credentials Secret: released",
     facts(GOING_AWAY, placement=on("c2", GOING_AWAY)), [("finalizer", False)]),
]  # fmt: skip


@pytest.mark.parametrize(("the_facts", "expected"), [r[1:] for r in PLACED], ids=[r[0] for r in PLACED])
def test_placement_is_the_plans_first_branch(the_facts: BindingFacts, expected: list[tuple[Any, ...]]) -> None:
    assert placing(plan(the_facts)) == expected


def test_nothing_is_gathered_for_a_binding_placement_decides_on() -> None:
    assert steps(facts(QUEUED, placement=on("c2", QUEUED))) == ()
    assert steps(facts(QUEUED, placement=on(MASTER, QUEUED))) == steps(facts(QUEUED)) != ()


def secret_owned_by(uid: str | None) -> SecretRead:
    """The credentials Secret as an unbind reads it, an owner reference naming ``uid`` (None: no owner)."""
    meta: dict[str, Any] = {"name": "b-credentials", "namespace": NS, "uid": "s-2", "resourceVersion": "4"}
    if uid is not None:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "SFServiceBinding", "name": "b", "uid": uid}]
    return SecretRead(ObjectView.of({"apiVersion": "v1", "kind": "Secret", "metadata": meta}))


UNBIND_SECRET_ROWS: list[tuple[str, bool, SecretRead | None, list[a.Action]]] = [
    ("the binding's: deleted at the uid and version read", False, secret_owned_by("b-1"),
     [a.DeleteSecret(NS, "b-credentials", "b-1", uid="s-2", resource_version="4")]),
    ("another's of that name: left alone", False, secret_owned_by("b-2"), []),
    ("no owner reference (someone else's): left alone", False, secret_owned_by(None), []),
    ("none: nothing to delete", False, SecretRead(None), []),
    ("not read (observe's mistake): never deleted unchecked, retried", False, None,
     [a.Retry(binding_plan.SECRET_NOT_READ)]),
    ("in a terminating namespace: it goes with the namespace, unread", True, None, []),
]  # fmt: skip


@pytest.mark.parametrize(
    ("terminating", "seen", "expected"), [r[1:] for r in UNBIND_SECRET_ROWS], ids=[r[0] for r in UNBIND_SECRET_ROWS]
)
def test_an_unbind_deletes_the_credentials_secret_it_read_only_when_it_is_the_bindings(
    terminating: bool, seen: SecretRead | None, expected: list[a.Action]
) -> None:
    unbind = Unbind(Teardown(terminating), secret=seen)
    actions = plan(facts(binding(state="in progress", deleting=True), None, None, unbind=unbind))
    secret = [x for x in actions if isinstance(x, (a.DeleteSecret, a.Retry))]
    assert secret == expected


def test_the_credentials_write_is_guarded_by_the_secret_it_decided_on() -> None:
    """None read: a create (never over a Secret made since); the binding's own: over the version read."""
    for seen, create, version in ((NO_SECRET, True, None), (stamped_secret("b-1"), False, "7")):
        report = dataclasses.replace(REPORTED, secret=seen)
        (write,) = [x for x in plan(facts(binding(state="in progress"), pending=PENDING, report=report))
                    if isinstance(x, a.WriteSecret)]  # fmt: skip
        assert (write.create, write.resource_version) == (create, version)
    rotated = Refresh(report=REPORTED, secret_changed=True, secret=stamped_secret("b-1"))
    (write,) = [x for x in plan(facts(binding(state="succeeded", observed=1, digest="d-old"), refresh=rotated))
                if isinstance(x, a.WriteSecret)]  # fmt: skip
    assert (write.create, write.resource_version) == (False, "7")


def test_a_guarded_credentials_write_or_deletion_over_a_secret_changed_since_is_a_conflict() -> None:
    """What the plan decided on moved between observe and act: a 409 (the runtime's conflict policy reads again),
    nothing written over, nothing deleted."""
    run, kube, created = executor()
    owner = [{"apiVersion": "v1", "kind": "SFServiceBinding", "name": "b", "uid": "b-1"}]
    meta = {"name": "b-credentials", "namespace": NS, "ownerReferences": owner}
    manifest = {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "data": {"k": "MQ=="}}
    made = kube.apply_secret(manifest)
    version, uid = made["metadata"]["resourceVersion"], made["metadata"]["uid"]
    with pytest.raises(ApiException) as exc:  # made since the plan saw none
        run.run(KEY, created, [a.WriteSecret({**manifest, "data": {"k": "Mg=="}}, create=True)])
    assert exc.value.status == 409
    kube.apply_secret({**manifest, "data": {"k": "Mw=="}})  # written since the plan read it
    with pytest.raises(ApiException) as exc:
        run.run(KEY, created, [a.WriteSecret({**manifest, "data": {"k": "Mg=="}}, resource_version=version)])
    assert exc.value.status == 409
    with pytest.raises(ApiException) as exc:
        run.run(KEY, created, [a.DeleteSecret(NS, "b-credentials", "b-1", uid=uid, resource_version=version)])
    assert exc.value.status == 409
    live = kube.read_secret(NS, "b-credentials")
    assert live is not None and live["data"] == {"k": "Mw=="}
    now = live["metadata"]["resourceVersion"]
    kube.calls.clear()
    run.run(KEY, created, [a.WriteSecret({**manifest, "data": {"k": "NA=="}}, resource_version=now)])
    latest = kube.read_secret(NS, "b-credentials")
    assert latest is not None and latest["data"] == {"k": "NA=="}
    run.run(KEY, created, [a.DeleteSecret(NS, "b-credentials", "b-1", uid=uid,
                                          resource_version=latest["metadata"]["resourceVersion"])])  # fmt: skip
    assert kube.read_secret(NS, "b-credentials") is None
    assert [c.verb for c in kube.calls] == ["apply_secret", "delete_secret"]  # no read: the plan decided
