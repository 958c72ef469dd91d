"""The instance's pure plan, tabled: facts in, the exact action list out (no cluster, no fake, fixed clock).

Each row names a situation of an SFServiceInstance and the actions its plan must return, summarised as tuples
(:func:`summary`) so a row reads as the list it asserts; a few tests below check whole patches. Then the one
executor, against ``FakeKube``: each action of the vocabulary makes exactly the calls it should.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import json
from collections.abc import Sequence
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from opbroker.api.catalog import DeletionPolicy
from opbroker.api.conventions import (
    ANNOTATION_OWNER_UID,
    ANNOTATION_PAUSED,
    ANNOTATION_SINGLETON,
    ANNOTATION_SINGLETON_USERS,
    FINALIZER,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    LABEL_PLAN,
    MANAGED_BY,
    PAUSED,
)
from opbroker.api.meta import ResourceRef
from opbroker.controller.catalog.catalog import Catalog, PlanEntry
from opbroker.controller.core import actions as a
from opbroker.controller.core import decisions, finalizers
from opbroker.controller.core.decisions import Letting
from opbroker.controller.core.refusals import refusal
from opbroker.controller.core.views import BindingView, InstanceView, Meta, ObjectView
from opbroker.controller.kinds import INSTANCES, PLANS
from opbroker.controller.multicluster.core.placement_plan import (
    AnnotateCluster,
    DeleteCopy,
    HandOver,
    PlacementFacts,
    Reach,
    ReplicateCatalog,
    Scheduling,
    SetCluster,
)
from opbroker.controller.multicluster.core.scheduling import MASTER
from opbroker.controller.multicluster.core.views import ReplicaView
from opbroker.controller.osb import ownership
from opbroker.controller.osb.core import instance_plan
from opbroker.controller.osb.core.instance_plan import (
    Held,
    InstanceFacts,
    Limits,
    Piece,
    Rendering,
    Report,
    Teardown,
    apply_action,
    guarded,
    plan,
    refused,
    steps,
)
from opbroker.controller.osb.instances import InstanceReconciler
from opbroker.controller.osb.osb_effects import osb_executor
from opbroker.controller.osb.reconciling import AppliedMemory, Deps
from opbroker.controller.runtime.executor import AGAIN, MAX_PASSES, Executor, OwnWrites
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.kube import Refused
from opbroker.controller.runtime.memory import Memories
from opbroker.controller.runtime.objects import recorded, stamp
from opbroker.controller.runtime.outcomes import DONE, Conflict, Outcome, TemporaryError
from opbroker.controller.runtime.policies import DEFAULTS
from opbroker.controller.runtime.sources import SourceIndex
from opbroker.controller.settings import ControllerSettings
from opbroker.rendering import Renderer
from opbroker.rendering.status import SectionStatus
from tests.fake_kube import FakeKube

NS = "team"
PLAN_ID = "plan-1"
NOW = datetime.datetime(2026, 6, 1, 12, 0, 0, tzinfo=datetime.UTC)
LIMITS = Limits(poll_seconds=30.0, max_operation_seconds=3600.0, error_threshold=3)
CM = ResourceRef(api_version="v1", kind="ConfigMap", name="db", namespace=NS)
OLD = ResourceRef(api_version="v1", kind="ConfigMap", name="old", namespace=NS)
ELSEWHERE = ResourceRef(api_version="v1", kind="ConfigMap", name="far", namespace="other")


def plan_body(*, held: bool = True, deleting: bool = False, paused: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "plan", "namespace": "opbroker"}
    if paused:
        meta["annotations"] = {ANNOTATION_PAUSED: PAUSED}
    if held:
        meta["finalizers"] = [FINALIZER]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    templates = [
        {"action": "provision", "type": "jinja2", "content": "{}"},
        {"action": "status", "type": "jinja2", "content": "{}"},
    ]
    spec = {"name": "small", "id": PLAN_ID, "serviceId": "svc-1", "description": "d", "templates": templates}
    return {"apiVersion": "osb.servicefabrik.io/v1alpha1", "kind": "SFPlan", "metadata": meta, "spec": spec}


ENTRY = Catalog().upsert_plan(plan_body())
UNHELD = Catalog().upsert_plan(plan_body(held=False))
WITHDRAWN = Catalog().upsert_plan(plan_body(deleting=True))
INVALID = PlanEntry(body=plan_body(), model=None, problem="spec.templates: broken", hash="h")
PAUSED_PLAN = Catalog().upsert_plan(plan_body(paused=True))


def ago(seconds: float) -> str:
    return (NOW - datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def body(
    *,
    state: str | None = None,
    finalizer: bool = True,
    deleting: bool = False,
    observed: int | None = None,
    resources: Sequence[ResourceRef] = (),
    errors: int = 0,
    started: float = 60.0,
    context_namespace: str | None = None,
    namespace: str = NS,
    orphans: Sequence[ResourceRef] = (),
    paused: bool = False,
    conditions: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """An SFServiceInstance as read. ``orphans``: the ``resources`` recorded with ``deletionPolicy: orphan``;
    ``paused``: the pause annotation on it; ``conditions``: its status' conditions."""
    meta: dict[str, Any] = {"name": "db", "namespace": namespace, "generation": 1, "uid": "u-1"}
    meta["resourceVersion"] = "7"
    if paused:
        meta["annotations"] = {ANNOTATION_PAUSED: PAUSED}
    if finalizer:
        meta["finalizers"] = [FINALIZER]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status: dict[str, Any] = {"operationStartedAt": ago(started)}
    if state is not None:
        status["state"] = state
    if observed is not None:
        status["observedGeneration"] = observed
    if resources:
        status["resources"] = recorded(list(resources), orphans)
    if errors:
        status["errorCount"] = errors
    if conditions:
        status["conditions"] = list(conditions)
    spec: dict[str, Any] = {"planId": PLAN_ID, "serviceId": "svc-1", "instanceId": "db"}
    if context_namespace:
        spec["context"] = {"namespace": context_namespace}
    return {"apiVersion": INSTANCES.api_version, "kind": "SFServiceInstance", "metadata": meta, "spec": spec,
            "status": status}  # fmt: skip


def cm(name: str = "db", *, orphan: bool = False) -> Piece:
    policy = DeletionPolicy.ORPHAN if orphan else DeletionPolicy.DELETE
    return Piece({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS}},
                 deletion_policy=policy)  # fmt: skip


def said_paused(where: str) -> dict[str, Any]:
    """A ``Paused`` condition as a pause found on ``where`` wrote it."""
    return {"type": "Paused", "status": "True", "reason": "Paused", "message": decisions.paused_message(where)}


RESUMED = {"type": "Paused", "status": "False", "reason": "Resumed", "message": decisions.RESUMED_MESSAGE}


PENDING = {"resources": [], "observedGeneration": 1, "appliedPlanHash": ENTRY.hash}
RENDERED = Rendering((cm(),), {})
SUCCEEDED = SectionStatus(state="succeeded", description="ready")  # type: ignore[arg-type]
FAILED = SectionStatus(state="failed", error="disk full")  # type: ignore[arg-type]
WORKING = SectionStatus(state="in progress")  # type: ignore[arg-type]
STATUS = Report(True, SUCCEEDED)


def facts(instance: dict[str, Any], entry: PlanEntry | None = ENTRY, **kw: Any) -> InstanceFacts:
    fields: dict[str, Any] = {"live_bindings": 0, "pending": None, "trusted": ("opbroker",), "limits": LIMITS}
    fields.update(kw)
    return InstanceFacts(Key("instance", NS, "db"), InstanceView.of(instance), entry, now=NOW, **fields)


def held(ref: ResourceRef, letting: Letting, owner: str = "u-1") -> Held:
    """``ref`` as observe read it: an object that ``letting`` describes for ``owner`` (GONE: none), at version 5 —
    stamped as ``owner``'s (DELETE; WAIT: being deleted), owned by it and another (UNOWN), or by nobody (LEAVE)."""
    if letting is Letting.GONE:
        return Held(ref, None)
    meta: dict[str, Any] = {"name": ref.name, "namespace": ref.namespace, "uid": f"{ref.name}-uid"}
    meta["resourceVersion"] = "5"
    if letting is Letting.UNOWN:
        meta["ownerReferences"] = [
            {"apiVersion": "osb.servicefabrik.io/v1alpha1", "kind": "SFServiceInstance", "name": n, "uid": uid}
            for n, uid in (("db", owner), ("other", "u-other"))
        ]
    elif letting is not Letting.LEAVE:
        meta["annotations"] = {ANNOTATION_OWNER_UID: owner}
    if letting is Letting.WAIT:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    live = ObjectView.of({"apiVersion": ref.api_version, "kind": ref.kind, "metadata": meta})
    assert decisions.letting_go(live, owner_uid=owner) is letting
    return Held(ref, live)


def summary(actions: Sequence[a.Action]) -> list[tuple[Any, ...]]:
    """Each action as a short tuple: its kind and what distinguishes it."""
    out: list[tuple[Any, ...]] = []
    for act in actions:
        match act:
            case a.WriteStatus(patch=patch, guarded=guarded, event=event):
                reason = next((c["reason"] for c in patch.get("conditions") or [] if c["type"] == "Ready"), None)
                row: tuple[Any, ...] = ("status", patch.get("state"), reason, "guarded" if guarded else "unguarded")
                out.append(row + ((("event", event.reason, event.warning),) if event else ()))
            case a.Event(reason=reason, warning=warning):
                out.append(("event", reason, warning))
            case a.Apply(manifest=manifest, singleton=singleton, owned=owned):
                out.append(("apply", manifest["metadata"]["name"], singleton, owned))
            case a.Delete(ref=ref, resource_version=version):
                out.append(("delete", ref.name, version))
            case (
                a.LeaveSingleton(ref=ref, resource_version=version)
                | a.DeleteSingleton(ref=ref, resource_version=version)
            ):
                out.append((type(act).__name__, ref.name, version))
            case a.Orphan(ref=ref, patch=patch):
                out.append(("orphan", ref.name, patch.get("resourceVersion")))
            case a.EnsureFinalizer(present=present):
                out.append(("finalizer", present))
            case a.Track(refs=refs):
                out.append(("track", tuple(r.name for r in refs)))
            case a.Remember():
                out.append(("remember",))
            case a.Forget():
                out.append(("forget",))
            case a.Requeue(seconds=seconds) if seconds >= 0.9 * Limits().resync_seconds:
                out.append(("resync",))
            case a.Requeue(seconds=seconds):
                out.append(("requeue", seconds))
            case _:
                out.append((type(act).__name__,))
    return out


def failed(reason: str) -> list[tuple[Any, ...]]:
    return [("status", "failed", reason, "guarded", ("event", reason, True))]


FIN = ("finalizer", True)
RETRY = ("Retry",)
GOING = ("status", "in progress", "Deprovisioning", "guarded")
FINISH = [("DropRegistry",), ("finalizer", False), ("ForgetObject",)]
NOT_OURS = ("Log",)  # the line says it is left alone: tests/controller/test_instance_plan.py::letting_go's test
APPLYING = ("status", "in progress", "InProgress", "guarded")
PAUSING = [("status", None, None, "guarded", ("event", "Paused", False))]  # the Paused condition alone, said once
RESUMING = [("status", None, None, "guarded", ("event", "Resumed", False)), ("Continue",)]
ORPHANED = ("event", "Orphaned", False)
ITSELF, BY_PLAN = "the instance itself", "its plan opbroker/plan"

ROWS: list[tuple[str, InstanceFacts, list[tuple[Any, ...]]]] = [
    ("new instance: finalizer, then observe again", facts(body(finalizer=False)), [FIN, ("Continue",)]),
    ("deleted, finalizer released: nothing", facts(body(deleting=True, finalizer=False)), []),
    (
        "deleting with bindings: blocked",
        facts(body(state="succeeded", deleting=True), live_bindings=2),
        [("status", "failed", "BindingsExist", "guarded", ("event", "BindingsExist", True))],
    ),
    (
        "deleting, nothing recorded, the template confirms",
        facts(body(state="succeeded", deleting=True), teardown=Teardown(False), report=Report(True, SUCCEEDED)),
        [("forget",), GOING, ("track", ()), *FINISH],
    ),
    (
        "deleting: a recorded object is deleted, then waited for",
        facts(
            body(state="succeeded", deleting=True, resources=[CM]),
            teardown=Teardown(False, (held(CM, Letting.DELETE),)),
            report=Report(True, WORKING),
        ),
        [("forget",), GOING, ("delete", "db", "5"), ("track", ("db",)), ("requeue", 30.0)],
    ),
    (
        "deleting: the template says gone, but a deleted object is still there: wait",
        facts(
            body(state="in progress", deleting=True, resources=[CM]),
            teardown=Teardown(False, (held(CM, Letting.WAIT),)),
            report=Report(True, SUCCEEDED),
        ),
        [("forget",), ("track", ("db",)), ("requeue", 30.0)],
    ),
    (
        "deleting, already in progress, everything gone",
        facts(
            body(state="in progress", deleting=True, resources=[CM]),
            teardown=Teardown(False, (held(CM, Letting.GONE),)),
            report=Report(True, SUCCEEDED),
        ),
        [("forget",), ("track", ("db",)), *FINISH],
    ),
    (
        "deleting: an object not ours is let go without waiting",
        facts(
            body(state="in progress", deleting=True, resources=[CM]),
            teardown=Teardown(False, (held(CM, Letting.LEAVE),)),
            report=Report(True, SUCCEEDED),
        ),
        [("forget",), NOT_OURS, ("track", ("db",)), *FINISH],
    ),
    (
        "deleting: the operator reports the deprovision failed",
        facts(body(state="in progress", deleting=True), teardown=Teardown(False), report=Report(True, FAILED)),
        [("forget",), ("track", ()), ("status", "failed", "Failed", "guarded", ("event", "Failed", True))],
    ),
    (
        "deleting: the template fails once all is gone: finish, with a warning",
        facts(
            body(state="in progress", deleting=True),
            teardown=Teardown(False),
            report=Report(True),
            render_error="boom",
        ),
        [("forget",), ("track", ()), ("event", "DeprovisionUnconfirmed", True), *FINISH],
    ),
    (
        "deleting: the template fails while objects remain: count, retry",
        facts(
            body(state="in progress", deleting=True, resources=[CM]),
            teardown=Teardown(False, (held(CM, Letting.WAIT),)),
            report=Report(True),
            render_error="boom",
        ),
        [
            ("forget",),
            ("track", ("db",)),
            ("status", None, None, "unguarded"),
            ("event", "RenderFailed", True),
            RETRY,
        ],
    ),
    (
        "deleting in a terminating namespace: no templates, only what lives elsewhere",
        facts(
            body(state="succeeded", deleting=True, resources=[CM, ELSEWHERE]),
            teardown=Teardown(True, (held(ELSEWHERE, Letting.GONE),)),
        ),
        [("forget",), GOING, ("event", "NamespaceTerminating", False), *FINISH],
    ),
    (
        "deleting with the plan gone: released all the same",
        facts(
            body(state="succeeded", deleting=True, resources=[CM]),
            None,
            teardown=Teardown(False, (held(CM, Letting.GONE),)),
        ),
        [("forget",), GOING, *FINISH],
    ),
    (
        "plan missing",
        facts(body(state="in_queue"), None),
        [("status", "failed", "PlanNotFound", "guarded", ("event", "PlanNotFound", True))],
    ),
    (
        "plan missing, failed already: the status again, no second event",
        facts(body(state="failed"), None),
        [("status", "failed", "PlanNotFound", "guarded")],
    ),
    (
        "plan invalid",
        facts(body(state="in_queue"), INVALID),
        [("status", "failed", "PlanInvalid", "guarded", ("event", "PlanInvalid", True))],
    ),
    (
        "new instance of a withdrawn plan",
        facts(body(state="in_queue"), WITHDRAWN),
        [("status", "failed", "PlanWithdrawn", "guarded", ("event", "PlanWithdrawn", True))],
    ),
    (
        "context names another tenant's namespace",
        facts(body(state="in_queue", context_namespace="victim")),
        [("status", "failed", "ContextNamespaceRefused", "guarded", ("event", "ContextNamespaceRefused", True))],
    ),
    (
        "apply due: record, apply, remember, observe again",
        facts(body(state="in_queue"), rendering=RENDERED),
        [APPLYING, ("apply", "db", False, True), ("remember",), ("Continue",)],
    ),
    (
        "apply due: the registry changed and an object is no longer rendered",
        facts(
            body(state="update", observed=1, resources=[OLD]),
            rendering=Rendering((cm(),), {"k": "v"}, True, released=(held(OLD, Letting.DELETE),)),
        ),
        [
            APPLYING,
            ("SaveRegistry",),
            ("apply", "db", False, True),
            ("delete", "old", "5"),
            ("remember",),
            ("Continue",),
        ],
    ),
    (
        "apply due, the plan not held yet: nothing applied, its own reconciler holds it (its event brings us back)",
        facts(body(state="in_queue"), UNHELD, rendering=RENDERED),
        [("requeue", LIMITS.poll_seconds)],
    ),
    (
        "apply due, the template fails: count, retry",
        facts(body(state="in_queue"), render_error="ZeroDivisionError"),
        [("status", None, None, "unguarded"), ("event", "RenderFailed", True), RETRY],
    ),
    (
        "apply due, a source the plan's account may not read: failed, masked",
        facts(body(state="in_queue"), refusal=a.Refusal(a.Refused.OBJECT, "403 Forbidden: Secret other/x")),
        failed("ApplyRefused"),
    ),
    (
        "apply due, the template fails past the threshold: give up",
        facts(body(state="in_queue", errors=2), render_error="ZeroDivisionError"),
        [("status", "failed", "GaveUp", "unguarded"), ("event", "GaveUp", True)],
    ),
    (
        "in progress, apply pending, operator working: remember, poll",
        facts(body(state="in progress"), pending=PENDING, report=Report(True, WORKING)),
        [("track", ()), ("remember",), ("requeue", 30.0)],
    ),
    (
        "in progress, recorded, template renders no section: poll",
        facts(body(state="in progress", observed=1, resources=[CM]), report=Report(True, None)),
        [("track", ("db",)), ("requeue", 30.0)],
    ),
    (
        "in progress for 160 s, nothing to watch: the poll backs off to half the operation's age",
        facts(body(state="in progress", observed=1, started=160), report=Report(True, WORKING)),
        [("track", ()), ("requeue", 80.0)],
    ),
    (
        "in progress for 20 minutes, nothing to watch: the poll backs off no further than its cap",
        facts(body(state="in progress", observed=1, started=1200), report=Report(True, WORKING)),
        [("track", ()), ("requeue", 300.0)],
    ),
    (
        "in progress for 160 s, its object's kind not watched: the poll is the only news, at the fixed interval",
        facts(body(state="in progress", observed=1, resources=[CM], started=160), report=Report(True, WORKING)),
        [("track", ("db",)), ("requeue", 30.0)],
    ),
    (
        "in progress for 160 s, its object's kind watched: the poll backs off",
        facts(
            body(state="in progress", observed=1, resources=[CM], started=160),
            report=Report(True, WORKING),
            watched_kinds=frozenset({("v1", "ConfigMap")}),
        ),
        [("track", ("db",)), ("requeue", 80.0)],
    ),
    (
        "in progress near its deadline: look again at the deadline, not a poll later",
        facts(body(state="in progress", observed=1, started=3590), report=Report(True, WORKING)),
        [("track", ()), ("requeue", 10.5)],
    ),
    (
        "in progress past its deadline: timed out",
        facts(body(state="in progress", observed=1, started=7200), report=Report(True, WORKING)),
        [
            ("track", ()),
            ("forget",),
            ("status", "failed", "OperationTimedOut", "guarded", ("event", "OperationTimedOut", True)),
        ],
    ),
    (
        "apply pending, the operator reports success",
        facts(body(state="in progress"), pending=PENDING, report=STATUS),
        [
            ("track", ()),
            ("forget",),
            ("status", "succeeded", "Provisioned", "guarded", ("event", "Provisioned", False)),
            ("Checked",),
        ],
    ),
    (
        "apply pending, the operator reports failure",
        facts(body(state="in progress"), pending=PENDING, report=Report(True, FAILED)),
        [("track", ()), ("forget",), ("status", "failed", "Failed", "guarded", ("event", "Failed", True))],
    ),
    (
        "a plan without status template: succeeded once applied",
        facts(body(state="in progress"), pending=PENDING, report=Report(False)),
        [
            ("track", ()),
            ("forget",),
            ("status", "succeeded", "Provisioned", "guarded", ("event", "Provisioned", False)),
            ("Checked",),
        ],
    ),
    ("succeeded, nothing read for its check: nothing (the resync sweep looks again)",
     facts(body(state="succeeded", observed=1)), []),
    ("failed: nothing", facts(body(state="failed", observed=1)), []),
    ("plan missing, nothing to do: nothing", facts(body(state="succeeded", observed=1), None), []),
    # -- pause: an administrator stops everything but the deletion -------------------------------------------------
    ("paused, apply due: the Paused condition and its event, nothing applied",
     facts(body(state="in_queue", paused=True), rendering=RENDERED), PAUSING),
    ("paused before its finalizer: not even that", facts(body(finalizer=False, paused=True)), PAUSING),
    ("paused and said so: nothing at all", facts(body(state="in_queue", paused=True, conditions=[said_paused(ITSELF)]),
                                                 rendering=RENDERED), []),
    ("paused in progress and said so: no evaluation, no poll",
     facts(body(state="in progress", observed=1, paused=True, conditions=[said_paused(ITSELF)]),
           pending=PENDING, report=Report(True, WORKING)), []),
    ("paused in progress past its deadline: not even failed", facts(
        body(state="in progress", observed=1, started=7200, paused=True, conditions=[said_paused(ITSELF)]),
        report=Report(True, WORKING)), []),
    ("paused, succeeded: said all the same", facts(body(state="succeeded", observed=1, paused=True)), PAUSING),
    ("paused by its plan", facts(body(state="in_queue"), PAUSED_PLAN, rendering=RENDERED), PAUSING),
    ("paused by its plan and said so", facts(body(state="in_queue", conditions=[said_paused(BY_PLAN)]), PAUSED_PLAN),
     []),
    ("paused by its plan, said of the instance: said again, naming the plan",
     facts(body(state="succeeded", observed=1, conditions=[said_paused(ITSELF)]), PAUSED_PLAN), PAUSING),
    ("paused and deleted: the teardown proceeds",
     facts(body(state="succeeded", deleting=True, resources=[CM], paused=True, conditions=[said_paused(ITSELF)]),
           teardown=Teardown(False, (held(CM, Letting.DELETE),)), report=Report(True, WORKING)),
     [("forget",), GOING, ("delete", "db", "5"), ("track", ("db",)), ("requeue", 30.0)]),
    ("paused by its plan and deleted: the teardown finishes",
     facts(body(state="in progress", deleting=True, resources=[CM]), PAUSED_PLAN,
           teardown=Teardown(False, (held(CM, Letting.GONE),)), report=Report(True, SUCCEEDED)),
     [("forget",), ("track", ("db",)), *FINISH]),
    ("paused, deleted with bindings: blocked as ever", facts(body(state="succeeded", deleting=True, paused=True),
                                                            live_bindings=1), failed("BindingsExist")),
    ("resumed: Paused False, then a fresh pass",
     facts(body(state="in_queue", conditions=[said_paused(ITSELF)]), rendering=RENDERED), RESUMING),
    ("resumed, deleted meanwhile: the teardown, the condition left as it is",
     facts(body(state="in progress", deleting=True, conditions=[said_paused(ITSELF)]), teardown=Teardown(False),
           report=Report(True, SUCCEEDED)), [("forget",), ("track", ()), *FINISH]),
    ("resumed and said so: the apply due is made", facts(body(state="in_queue", conditions=[RESUMED]),
                                                         rendering=RENDERED),
     [APPLYING, ("apply", "db", False, True), ("remember",), ("Continue",)]),
    ("resumed in progress: evaluated from the live state",
     facts(body(state="in progress", observed=1, conditions=[RESUMED]), report=STATUS),
     [("track", ()), ("forget",), ("status", "succeeded", "Provisioned", "guarded", ("event", "Provisioned", False)),
      ("Checked",)]),
    # -- deletion policy: orphan leaves the object in place, without opbroker's stamp --------------------------------
    ("deleting: an object recorded as an orphan is orphaned, not waited for, and named",
     facts(body(state="succeeded", deleting=True, resources=[CM], orphans=[CM]),
           teardown=Teardown(False, (held(CM, Letting.DELETE),)), report=Report(True, SUCCEEDED)),
     [("forget",), GOING, ("orphan", "db", "5"), ("track", ("db",)), ORPHANED, *FINISH]),
    ("deleting: an orphan shared with other instances: our share dropped, it stays",
     facts(body(state="succeeded", deleting=True, resources=[CM], orphans=[CM]),
           teardown=Teardown(False, (held(CM, Letting.UNOWN),)), report=Report(True, SUCCEEDED)),
     [("forget",), GOING, ("orphan", "db", "5"), ("track", ("db",)), ORPHANED, *FINISH]),
    ("deleting: an orphan and an object to delete: the deleted one is waited for",
     facts(body(state="succeeded", deleting=True, resources=[CM, OLD], orphans=[CM]),
           teardown=Teardown(False, (held(CM, Letting.DELETE), held(OLD, Letting.DELETE))),
           report=Report(True, SUCCEEDED)),
     [("forget",), GOING, ("orphan", "db", "5"), ("delete", "old", "5"), ("track", ("db", "old")),
      ("requeue", 30.0)]),
    ("deleting: orphaned on the pass before (not ours any more): no action, named when done",
     facts(body(state="in progress", deleting=True, resources=[CM, OLD], orphans=[CM]),
           teardown=Teardown(False, (held(CM, Letting.LEAVE), held(OLD, Letting.GONE))),
           report=Report(True, SUCCEEDED)),
     [("forget",), ("track", ("db", "old")), ORPHANED, *FINISH]),
    ("deleting: an orphan someone deletes already, or gone: no action, not named",
     facts(body(state="in progress", deleting=True, resources=[CM, OLD], orphans=[CM, OLD]),
           teardown=Teardown(False, (held(CM, Letting.WAIT), held(OLD, Letting.GONE))),
           report=Report(True, SUCCEEDED)),
     [("forget",), ("track", ("db", "old")), *FINISH]),
    ("deleting in a terminating namespace: an orphan elsewhere is orphaned",
     facts(body(state="succeeded", deleting=True, resources=[CM, ELSEWHERE], orphans=[ELSEWHERE]),
           teardown=Teardown(True, (held(ELSEWHERE, Letting.DELETE),))),
     [("forget",), GOING, ("orphan", "far", "5"), ORPHANED, ("event", "NamespaceTerminating", False), *FINISH]),
    ("apply: an object recorded as an orphan and no longer rendered is orphaned, and named",
     facts(body(state="update", observed=1, resources=[OLD], orphans=[OLD]),
           rendering=dataclasses.replace(RENDERED, released=(held(OLD, Letting.DELETE),))),
     [APPLYING, ("apply", "db", False, True), ("orphan", "old", "5"), ORPHANED, ("remember",), ("Continue",)]),
    ("apply: an orphan template's object is applied as any other",
     facts(body(state="in_queue"), rendering=Rendering((cm(orphan=True),), {})),
     [APPLYING, ("apply", "db", False, True), ("remember",), ("Continue",)]),
]  # fmt: skip


@pytest.mark.parametrize(("the_facts", "expected"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_instance_plan_actions(the_facts: InstanceFacts, expected: list[tuple[Any, ...]]) -> None:
    assert summary(plan(the_facts)) == expected


def test_the_apply_records_before_it_applies_and_remembers_what_it_applied() -> None:
    rendering = dataclasses.replace(RENDERED, released=(held(OLD, Letting.DELETE),))
    actions = plan(facts(body(state="update", observed=1, resources=[OLD]), rendering=rendering))
    record, apply, remember = actions[0], actions[1], actions[3]
    assert isinstance(record, a.WriteStatus) and isinstance(apply, a.Apply) and isinstance(remember, a.Remember)
    assert record.patch["resources"] == [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "old", "namespace": NS},
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "db", "namespace": NS},
    ]
    assert record.patch["operationStartedAt"] == "2026-06-01T12:00:00.000000Z"  # the facts' clock
    (ready,) = record.patch["conditions"]
    assert ready["lastTransitionTime"] == "2026-06-01T12:00:00Z" and ready["status"] == "False"
    assert apply.owner_uid == "u-1" and apply.manifest["metadata"]["labels"]["opbroker.io/instance"] == "db"
    assert remember.version == (1, ENTRY.hash)
    assert remember.record["resources"] == [{"apiVersion": "v1", "kind": "ConfigMap", "name": "db", "namespace": NS}]
    assert remember.record["observedGeneration"] == 1 and remember.record["errorCount"] == 0


def test_the_apply_records_each_objects_deletion_policy() -> None:
    """The policy is recorded with the object at the apply (the teardown acts on the record, not on the plan as it
    is then): a rendered object takes its template's policy now; one no longer rendered keeps its recorded one until
    the outcome's record, which holds what is rendered now."""
    actions = plan(
        facts(
            body(state="update", observed=1, resources=[CM, OLD], orphans=[CM, OLD]),
            rendering=Rendering((cm(), cm("new", orphan=True)), {}, released=(held(OLD, Letting.DELETE),)),
        )
    )
    record, remember = actions[0], next(x for x in actions if isinstance(x, a.Remember))
    assert isinstance(record, a.WriteStatus)
    new = {"apiVersion": "v1", "kind": "ConfigMap", "name": "new", "namespace": NS}
    assert record.patch["resources"] == [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "db", "namespace": NS},  # its template says delete now
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "old", "namespace": NS, "deletionPolicy": "orphan"},
        {**new, "deletionPolicy": "orphan"},
    ]
    assert remember.record["resources"] == [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "db", "namespace": NS},
        {**new, "deletionPolicy": "orphan"},
    ]
    assert [x.ref.name for x in actions if isinstance(x, a.Orphan)] == ["old"]
    assert not any(isinstance(x, a.Delete) for x in actions)


def test_the_orphans_event_names_each_object_by_kind_namespace_and_name() -> None:
    actions = plan(
        facts(
            body(state="in progress", deleting=True, resources=[CM, ELSEWHERE], orphans=[CM, ELSEWHERE]),
            teardown=Teardown(False, (held(CM, Letting.DELETE), held(ELSEWHERE, Letting.LEAVE))),
            report=Report(True, SUCCEEDED),
        )
    )
    (event,) = [x for x in actions if isinstance(x, a.Event)]
    assert event.reason == "Orphaned" and not event.warning
    assert event.message == (
        "deprovisioned: left in place, no longer managed by opbroker (deletionPolicy: orphan): "
        "ConfigMap team/db, ConfigMap other/far"
    )
    orphan = next(x for x in actions if isinstance(x, a.Orphan))
    assert (orphan.owner_uid, orphan.as_user) == ("u-1", None)
    many = [ResourceRef(api_version="v1", kind="ConfigMap", name=f"c{i}", namespace=NS) for i in range(12)]
    assert decisions.orphaned_message(many, why="x").endswith("ConfigMap team/c9 and 2 more")


def test_a_pause_writes_its_condition_alone_and_keeps_the_others() -> None:
    ready = {"type": "Ready", "status": "True", "reason": "Provisioned", "message": "ok"}
    (write,) = plan(facts(body(state="succeeded", observed=1, conditions=[ready]), PAUSED_PLAN))
    assert isinstance(write, a.WriteStatus) and write.guarded and not write.settled
    assert set(write.patch) == {"conditions"}, "the operation's state stays as it was"
    kept, paused = write.patch["conditions"]
    assert kept == ready
    assert paused == {
        "type": "Paused",
        "status": "True",
        "reason": "Paused",
        "message": decisions.paused_message("its plan opbroker/plan"),
        "lastTransitionTime": "2026-06-01T12:00:00Z",
        "observedGeneration": 1,
    }
    assert write.event is not None and write.event.message == paused["message"]
    both = plan(facts(body(state="succeeded", observed=1, paused=True), PAUSED_PLAN))[0]
    assert isinstance(both, a.WriteStatus)
    assert "on the instance itself and its plan opbroker/plan" in both.patch["conditions"][-1]["message"]


def test_a_resume_turns_the_condition_false_and_looks_again() -> None:
    paused = {**said_paused(ITSELF), "lastTransitionTime": "2026-05-01T00:00:00Z"}
    write, again = plan(facts(body(state="succeeded", observed=1, conditions=[paused])))
    assert isinstance(write, a.WriteStatus) and isinstance(again, a.Continue)
    (condition,) = write.patch["conditions"]
    assert (condition["status"], condition["reason"], condition["lastTransitionTime"]) == (
        "False",
        "Resumed",
        "2026-06-01T12:00:00Z",
    )
    assert plan(facts(body(state="succeeded", observed=1, conditions=[condition]))) == ()  # said once


def test_the_outcome_carries_the_apply_record_and_the_report() -> None:
    report = Report(True, SectionStatus(state="succeeded", dashboard_url="https://d", instance_usable=True))  # type: ignore[arg-type]
    write = next(
        x
        for x in plan(facts(body(state="in progress"), pending=PENDING, report=report))
        if isinstance(x, a.WriteStatus)
    )
    assert not write.settled  # provisioned: its objects stay followed (day two)
    assert write.patch["observedGeneration"] == 1 and write.patch["appliedPlanHash"] == ENTRY.hash
    assert write.patch["dashboardUrl"] == "https://d" and write.patch["instanceUsable"] is True


def test_a_re_render_of_the_same_generation_still_writes_its_apply_record_with_the_outcome() -> None:
    """A mass update (state ``update``, no new generation) is applied, then evaluated on the next pass as
    EVALUATE: the record waiting in memory (the new appliedPlanHash, the resources now rendered) must ride along
    with the outcome, or the instance stays "outdated" for ever (``update-instances --only-outdated`` marks it
    again) and keeps objects it no longer renders in ``status.resources``."""
    write = next(
        x
        for x in plan(facts(body(state="in progress", observed=1), pending=PENDING, report=STATUS))
        if isinstance(x, a.WriteStatus)
    )
    assert write.patch["appliedPlanHash"] == ENTRY.hash and write.patch["state"] == "succeeded"


REFUSALS = [
    ("permanent refusal", a.Refusal(a.Refused.OBJECT, "forbidden: masked"), failed("ApplyRefused")),
    (
        "refusal fixable outside",
        a.Refusal(a.Refused.OBJECT, "quota", permanent=False),
        [("status", None, None, "unguarded"), ("event", "ApplyFailed", True), RETRY],
    ),
    ("object not ours", a.Refusal(a.Refused.NOT_OWNED, "not ours"), failed("ObjectNotOwned")),
    ("singleton full", a.Refusal(a.Refused.SINGLETON_FULL, "full"), failed("SingletonFull")),
]


@pytest.mark.parametrize(("refusal", "expected"), [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS])
def test_instance_refusal_actions(refusal: a.Refusal, expected: list[tuple[Any, ...]]) -> None:
    assert summary(refused(facts(body(state="in progress")), refusal)) == expected


@pytest.mark.parametrize(
    "refusal",
    [
        a.Refusal(a.Refused.OBJECT, "forbidden"),
        a.Refusal(a.Refused.NOT_OWNED, "x"),
        a.Refusal(a.Refused.SINGLETON_FULL, "x"),
    ],
)
def test_a_refusal_for_good_answers_the_generation(refusal: a.Refusal) -> None:
    """A refused request is answered (``observedGeneration``): a later event of the same generation (the plan's
    hold, a watched object) must not apply it again — CI caught a second apply flipping the failed instance back
    to in progress for a moment; only a new request (update, new generation) applies again."""
    (write, *_) = refused(facts(body(state="in progress")), refusal)
    assert isinstance(write, a.WriteStatus) and write.patch["observedGeneration"] == 1
    answered = body(state="failed", observed=1)
    assert plan(facts(answered, rendering=RENDERED)) == ()


def test_views_tolerate_what_the_server_adds_and_what_a_hand_wrote() -> None:
    wire = body(state="succeeded", observed=1, resources=[CM])
    wire["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    wire["metadata"]["ownerReferences"] = [{"uid": "o-1"}, "junk"]
    wire["status"]["resources"].append({"kind": "no apiVersion"})
    wire["status"]["futureField"] = {"x": 1}
    wire["status"]["errorCount"] = "three"
    view = InstanceView.of(wire)
    assert view.meta.held and view.meta.uid == "u-1" and view.meta.owner_uids == ("o-1",)
    assert view.status.resources == (CM,) and view.status.error_count == 0
    assert view.instance_id == "db" and not view.generation_pending
    binding = BindingView.of({"metadata": {"name": "b"}, "spec": {"instanceId": "db"}})
    assert binding.binds(view) and binding.binding_id == "b" and binding.status.state is None


# -- the executor, against FakeKube ---------------------------------------------------------------------------


class Watchers:
    def __init__(self) -> None:
        self.kinds: set[tuple[str, str]] = set()

    def ensure(self, kinds: Any) -> None:
        self.kinds.update(kinds)

    @property
    def live(self) -> frozenset[tuple[str, str]]:
        """The kinds asked for, as if each watch were live at once."""
        return frozenset(self.kinds)


@dataclasses.dataclass(frozen=True)
class Harness:
    """The instance executor and the dependencies it was built from."""

    executor: Executor
    deps: Deps

    def run(self, key: Key, body: dict[str, Any], actions: Sequence[a.Action], on_refusal: Any = None) -> Outcome:
        return self.executor.run(key, body, actions, on_refusal)


def executor() -> tuple[Harness, FakeKube, dict[str, Any]]:
    kube = FakeKube()
    deps = Deps(
        kube,  # type: ignore[arg-type]
        Catalog(),
        Renderer(),
        ControllerSettings(),
        SourceIndex(),
        Watchers(),  # type: ignore[arg-type]
        own_writes=OwnWrites(),
    )
    created = kube.create({**body(state="in_queue", finalizer=False), "status": None})
    assert created is not None
    kube.calls.clear()
    return Harness(osb_executor(deps, INSTANCES, "instance", AppliedMemory()), deps), kube, created


KEY = Key("instance", NS, "db")
STAMPED = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "db", "namespace": NS}, "data": {"a": "b"}}
EXECUTED: list[tuple[str, list[a.Action], list[tuple[str, str]], Outcome]] = [
    ("finalizer", [a.EnsureFinalizer()], [("patch", "SFServiceInstance")], DONE),
    ("status with its event", [a.WriteStatus({"state": "failed"}, event=a.Event("Failed", "x", warning=True))],
     [("patch_status", "SFServiceInstance"), ("event", "SFServiceInstance")], DONE),
    ("event", [a.Event("Why", "because")], [("event", "SFServiceInstance")], DONE),
    ("apply", [a.Apply(STAMPED, owner_uid="u-1", owner_reference={})], [("apply", "ConfigMap")], DONE),
    ("delete", [a.Delete(CM)], [("delete", "ConfigMap")], DONE),
    ("orphan: the patch decided", [a.Orphan(CM, "u-1", {"resourceVersion": "1"})], [("patch", "ConfigMap")], DONE),
    ("guarded delete", [a.Delete(CM, resource_version="1")], [("delete", "ConfigMap")], DONE),
    ("secret", [a.WriteSecret({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": NS}})],
     [("apply_secret", "Secret")], DONE),
    ("registry", [a.SaveRegistry({"k": "v"}, {})], [("apply_secret", "Secret")], DONE),
    ("registry dropped", [a.DropRegistry()], [("delete_secret", "Secret")], DONE),
    ("memory and tracking write nothing", [a.Remember((1, "h"), {}), a.Forget(), a.Track((CM,)), a.ForgetObject()],
     [], DONE),
    ("requeue: the shortest", [a.Requeue(30.0), a.Requeue(5.0)], [], Outcome(requeue_after=5.0)),
    ("continue", [a.Continue()], [], AGAIN),
]  # fmt: skip


@pytest.mark.parametrize(("actions", "verbs", "outcome"), [r[1:] for r in EXECUTED], ids=[r[0] for r in EXECUTED])
def test_executor_maps_each_action_to_its_calls(
    actions: list[a.Action], verbs: list[tuple[str, str]], outcome: Outcome
) -> None:
    run, kube, created = executor()
    assert run.run(KEY, created, actions) == outcome
    assert [(c.verb, c.kind) for c in kube.calls] == verbs


def test_executor_guards_with_its_own_last_write_and_never_touches_the_body_read() -> None:
    run, kube, created = executor()
    before = repr(created)
    run.run(KEY, created, [a.WriteStatus({"state": "in progress"}), a.EnsureFinalizer(), a.WriteStatus({"x": 1})])
    live = kube.custom_object(INSTANCES, NS, "db")
    assert live is not None and live["metadata"]["finalizers"] == [FINALIZER] and live["status"]["x"] == 1
    assert repr(created) == before  # the facts' body is not the executor's scratch pad
    assert run.deps.own_writes.caused(KEY, live["metadata"]["resourceVersion"])


def test_executor_turns_a_stale_guarded_write_into_a_conflict() -> None:
    run, kube, created = executor()
    kube.patch_custom(INSTANCES, NS, "db", {"metadata": {"labels": {"moved": "on"}}})
    with pytest.raises(Conflict):
        run.run(KEY, created, [a.EnsureFinalizer()])
    with pytest.raises(Conflict):
        run.run(KEY, created, [a.WriteStatus({"state": "failed"})])
    run.run(KEY, created, [a.WriteStatus({"state": "failed"}, guarded=False)])  # an error count is not guarded


def test_executor_stops_at_a_refusal_and_runs_what_the_plan_says_of_it() -> None:
    run, kube, created = executor()
    seen: list[a.Refusal] = []

    def on_refusal(refusal: a.Refusal) -> list[a.Action]:
        seen.append(refusal)
        return [a.Event("Refused", refusal.message)]

    def refuse(manifest: dict[str, Any], **_: Any) -> None:  # the API server's answer to the object: invalid
        raise Refused(refusal(422, {"reason": "Invalid", "message": "spec.x: Invalid value"}, manifest))

    kube.apply = refuse  # type: ignore[method-assign]
    kube.calls.clear()
    actions = [a.Apply(STAMPED, owner_uid="u-1", owner_reference={}), a.Requeue(1.0)]
    assert run.run(KEY, created, actions, on_refusal) == DONE  # the requeue after the refusal never ran
    assert [r.why for r in seen] == [a.Refused.OBJECT]
    assert [(c.verb, c.kind) for c in kube.calls] == [("event", "SFServiceInstance")]


def live(*, stamp_of: str | None) -> ObjectView:
    """The ConfigMap ``db`` as observe read it: stamped as ``stamp_of``'s (None: unstamped, someone else's)."""
    meta: dict[str, Any] = {"name": "db", "namespace": NS, "uid": "live-uid", "resourceVersion": "4"}
    if stamp_of is not None:
        meta["annotations"] = {ANNOTATION_OWNER_UID: stamp_of}
    return ObjectView.of({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta})


GUARDED = [
    ("none there: applied", None, a.Apply(STAMPED, "u-1", {}), a.Apply(STAMPED, "u-1", {})),
    ("the owner's: applied", live(stamp_of="u-1"), a.Apply(STAMPED, "u-1", {}), a.Apply(STAMPED, "u-1", {})),
    ("a co-owner's: applied", live(stamp_of="i-1"), a.Apply(STAMPED, "b-1", {}, co_owners=("i-1",)),
     a.Apply(STAMPED, "b-1", {}, co_owners=("i-1",))),
    ("someone else's: refused", live(stamp_of=None), a.Apply(STAMPED, "u-1", {}),
     a.Refusal(a.Refused.NOT_OWNED, decisions.not_owned_message(CM))),
    ("a record in a status proves nothing: refused", live(stamp_of="other"), a.Apply(STAMPED, "u-1", {}),
     a.Refusal(a.Refused.NOT_OWNED, decisions.not_owned_message(CM))),
    ("someone else's, the template adopts: applied", live(stamp_of=None), a.Apply(STAMPED, "u-1", {}, adopt=True),
     a.Apply(STAMPED, "u-1", {}, adopt=True)),
    ("an amendment of the instance's object: onto its uid", live(stamp_of="i-1"),
     a.Apply(STAMPED, "i-1", {}, must_exist=True), a.Apply(STAMPED, "i-1", {}, must_exist=True, uid="live-uid")),
    ("an amendment of an object gone: nothing", None, a.Apply(STAMPED, "i-1", {}, must_exist=True), None),
    ("an amendment of someone else's: refused", live(stamp_of=None), a.Apply(STAMPED, "i-1", {}, must_exist=True),
     a.Refusal(a.Refused.NOT_OWNED, decisions.not_owned_message(CM))),
]  # fmt: skip


@pytest.mark.parametrize(("seen", "apply", "wanted"), [r[1:] for r in GUARDED], ids=[r[0] for r in GUARDED])
def test_an_apply_is_decided_on_the_object_as_observed(
    seen: ObjectView | None, apply: a.Apply, wanted: a.Apply | a.Refusal | None
) -> None:
    """The plan decides whether a rendered object may be written over the live one (the effect only performs)."""
    assert guarded(apply, CM, seen) == wanted


def test_the_apply_effect_performs_what_the_plan_decided_without_reading() -> None:
    run, kube, created = executor()
    kube.calls.clear()
    run.run(KEY, created, [a.Apply(STAMPED, owner_uid="u-1", owner_reference={})])
    assert [c.verb for c in kube.calls] == ["apply"]  # no read: the plan decided on the object observed


def test_executor_retry_raises_after_the_writes_before_it() -> None:
    run, kube, created = executor()
    with pytest.raises(TemporaryError, match="again"):
        run.run(KEY, created, [a.WriteStatus({"errorCount": 1}, guarded=False), a.Retry("again"), a.Requeue(1)])
    assert [(c.verb, c.kind) for c in kube.calls] == [("patch_status", "SFServiceInstance")]


def stamped_cm(kube: FakeKube, *, owners: Sequence[str], users: Sequence[str] = ()) -> dict[str, Any]:
    """The instance's ConfigMap as its apply left it (stamped for ``u-1`` unless shared), with a label and an
    annotation of the operator's own beside opbroker's."""
    manifest = stamp(
        {**STAMPED, "metadata": {"name": "db", "namespace": NS, "labels": {"app": "db"}, "annotations": {"x": "y"}}},
        owner=InstanceView.of(body()),
        labels={LABEL_INSTANCE: "db", LABEL_PLAN: "plan"},
        owned=False,
        shared=bool(users),
    )
    meta = manifest["metadata"]
    meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "SFServiceInstance", "name": o, "uid": o} for o in owners]
    if users:
        meta["annotations"][ANNOTATION_SINGLETON_USERS] = json.dumps(list(users))
    return kube.apply(manifest)


def test_a_sharded_instances_objects_carry_its_shard_and_a_shared_singleton_none() -> None:
    """Issue 46: only the instance's shard's source watch follows its objects; a singleton is shared by instances of
    any shard, so every shard's watch follows it."""
    sharded = facts(body(), shard_labels={"opbroker.io/shard": "2"})
    assert apply_action(sharded, cm()).manifest["metadata"]["labels"]["opbroker.io/shard"] == "2"
    assert "opbroker.io/shard" not in apply_action(sharded, SHARED).manifest["metadata"]["labels"]
    assert "opbroker.io/shard" not in apply_action(facts(body()), cm()).manifest["metadata"]["labels"]


def test_a_singleton_is_stamped_as_one_whatever_made_it_one() -> None:
    """A template's ``singleton: true`` (or a Couchbase configuration template's) marks no annotation in the
    rendered object; the stamp writes it, so the plan's next instance recognises the live object as a singleton
    it may share (found end to end: a second instance of the imported Couchbase plan failed ``ObjectNotOwned``)."""
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "reader"}}
    labels = {LABEL_INSTANCE: "db", LABEL_PLAN: "plan"}
    shared = stamp(role, owner=InstanceView.of(body()), labels=labels, owned=False, shared=True)
    assert shared["metadata"]["annotations"] == {ANNOTATION_SINGLETON: "true"}
    assert decisions.shared_singleton(Meta.of(shared["metadata"]), plan_label="plan")
    own = stamp(role, owner=InstanceView.of(body()), labels=labels, owned=False)
    assert ANNOTATION_SINGLETON not in own["metadata"]["annotations"]
    assert not decisions.shared_singleton(Meta.of(own["metadata"]), plan_label="plan")
    # One made before the stamp said so is still its users' own: applying it again is no takeover.
    made_before = {"name": "reader", "annotations": {ANNOTATION_SINGLETON_USERS: '["u-1"]'}}
    assert decisions.singleton_user(Meta.of(made_before), "u-1")
    assert not decisions.singleton_user(Meta.of(made_before), "u-2")
    owned_before = {"name": "reader", "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "a", "uid": "u-1"}]}
    assert decisions.singleton_user(Meta.of(owned_before), "u-1")


def letting_go(
    kube: FakeKube, *, orphaning: bool = True, as_user: str | None = None, ref: ResourceRef = CM
) -> tuple[a.Action, ...]:
    """What the plan decides for ``ref`` as observe reads it (``ownership.held``): orphaned or released by u-1."""
    seen = ownership.held(kube, ref)  # type: ignore[arg-type]
    return (instance_plan.orphan if orphaning else instance_plan.release)(seen, "u-1", as_user)


def test_executor_orphans_an_object_of_ours_alone_as_the_plans_account() -> None:
    """``deletionPolicy: orphan``: the object stays, without our owner reference (the garbage collector would delete
    it with the instance), our stamp and opbroker's labels; what the operator wrote on it stays. Once orphaned it is
    nobody's of opbroker's: a second orphan writes nothing, and a release never deletes it."""
    run, kube, created = executor()
    stamped_cm(kube, owners=["u-1"])
    kube.calls.clear()
    assert run.run(KEY, created, letting_go(kube, as_user="system:serviceaccount:opbroker:plans")) == DONE
    assert [(c.verb, c.kind, c.name) for c in kube.calls] == [("patch", "ConfigMap", "db")]
    assert kube.acted_as == ["system:serviceaccount:opbroker:plans"]
    live = kube.get(CM)
    assert live is not None
    meta = live["metadata"]
    assert meta["labels"] == {"app": "db"} and meta["annotations"] == {"x": "y"}
    assert meta.get("ownerReferences", []) == [] and live["data"] == {"a": "b"}
    kube.calls.clear()
    assert letting_go(kube) == ()
    assert letting_go(kube, orphaning=False) == (
        a.Log("left ConfigMap team/db alone: recorded as released, but it is not ours"),
    )
    assert kube.calls == [] and kube.get(CM) is not None


def test_executor_orphans_only_its_share_of_an_object_others_hold() -> None:
    """A singleton other instances use: our owner reference and our entry among its users go, opbroker's labels
    stay (the other users' rules read them), and it is not deleted even though we were the last tracked user."""
    run, kube, created = executor()
    stamped_cm(kube, owners=["u-1", "u-2"], users=["u-1"])
    kube.calls.clear()
    run.run(KEY, created, letting_go(kube))
    live = kube.get(CM)
    assert live is not None
    meta = live["metadata"]
    assert [o["uid"] for o in meta["ownerReferences"]] == ["u-2"]
    assert ANNOTATION_SINGLETON_USERS not in meta["annotations"]
    assert meta["labels"][LABEL_PLAN] == "plan" and meta["labels"][LABEL_MANAGED_BY] == MANAGED_BY


def test_executor_leaves_an_object_not_ours_untouched_when_orphaning() -> None:
    _, kube, _ = executor()
    kube.apply({**STAMPED, "metadata": {"name": "db", "namespace": NS, "labels": {LABEL_MANAGED_BY: MANAGED_BY}}})
    kube.calls.clear()
    assert letting_go(kube) == ()
    live = kube.get(CM)
    assert kube.calls == [] and live is not None and live["metadata"]["labels"] == {LABEL_MANAGED_BY: MANAGED_BY}


def test_an_orphan_is_guarded_by_the_version_it_read() -> None:
    """The patch carries the version read: an object changed since (a singleton another instance joined) is a 409,
    and the reconcile reads again rather than writing over the change."""
    live = ObjectView.of(
        {
            "metadata": {
                "name": "db",
                "resourceVersion": "5",
                "labels": {LABEL_MANAGED_BY: "someone-else", LABEL_INSTANCE: "db"},
                "annotations": {ANNOTATION_OWNER_UID: "u-1"},
                "ownerReferences": [{"uid": "u-1", "kind": "SFServiceInstance"}],
            }
        }
    )
    patch = decisions.orphaning(live, owner_uid="u-1")
    assert patch == {
        "resourceVersion": "5",
        "ownerReferences": [],
        "annotations": {ANNOTATION_OWNER_UID: None},
        "labels": {LABEL_INSTANCE: None},  # a managed-by that is not ours is not ours to remove
    }
    assert decisions.orphaning(None, owner_uid="u-1") is None
    going = ObjectView.of({"metadata": {**live.wire["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}})
    assert decisions.orphaning(going, owner_uid="u-1") is None
    run, kube, created = executor()
    stale = stamped_cm(kube, owners=["u-1"])
    kube.merge_patch(CM, {"metadata": {"labels": {"moved": "on"}}})  # changed after the copy the read will get
    kube.store.feed(("v1", "ConfigMap"))
    kube.store.put(("v1", "ConfigMap"), stale)
    with pytest.raises(ApiException) as refused:
        run.run(KEY, created, letting_go(kube))
    assert refused.value.status == 409


def test_the_instance_reconciler_cannot_write_its_plans_finalizer() -> None:
    """Issue 45: the SFPlan's finalizer is the plan reconciler's alone; an instance's executor has no way to write
    it (the action writes the reconciled object's, and the table gives the instance reconciler none on SFPlans)."""
    run, kube, _ = executor()
    plan = kube.create(plan_body(held=False))
    assert plan is not None
    plans = Executor(dataclasses.replace(run.executor.target, kind=PLANS))
    with pytest.raises(finalizers.NotOwner, match="plan's to write"):
        plans.run(Key("instance", "opbroker", "plan"), plan, [a.EnsureFinalizer()])
    live = kube.custom_object(PLANS, "opbroker", "plan")
    assert live is not None and not live["metadata"].get("finalizers")


def test_a_reconcile_makes_at_most_max_passes_then_asks_to_be_requeued_at_once() -> None:
    """No recursion: a plan that keeps saying Continue gets MAX_PASSES fresh observations, then the queue."""
    run, _, _ = executor()
    reconciler = InstanceReconciler(run.deps, Memories())
    passes: list[InstanceFacts] = []

    def always_continue(the_facts: InstanceFacts) -> tuple[a.Action, ...]:
        passes.append(the_facts)
        return (a.Continue(),)

    reconciler.plan = always_continue  # type: ignore[method-assign]
    assert reconciler.reconcile(KEY) == AGAIN
    assert len(passes) == MAX_PASSES


# -- multi-cluster placement: the plan's first branch -------------------------------------------------------


def on(cluster: str | None, instance: dict[str, Any], **known: Any) -> PlacementFacts:
    """What placement's observe read for ``instance`` placed on ``cluster`` (None: not placed yet); a sister
    (neither None nor the master ``"1"``) answers unless ``reach`` says otherwise."""
    placed_body = copy.deepcopy(instance)
    if cluster is not None:
        placed_body["spec"]["clusterId"] = cluster
    reach = known.pop("reach", Reach(True, True) if cluster not in (None, MASTER) else None)
    if known.get("copy") is not None:
        known["copy"] = ReplicaView.of(known["copy"])
    return PlacementFacts(KEY, ReplicaView.of(placed_body), cluster=cluster, reach=reach, now=NOW, **known)


def placed_facts(instance: dict[str, Any], placement: PlacementFacts, **kw: Any) -> InstanceFacts:
    """The instance's facts with placement's, both read from the same body."""
    return facts(copy.deepcopy(placement.obj.wire), placement=placement, **kw)


def placing(actions: Sequence[Any]) -> list[tuple[Any, ...]]:
    """As :func:`summary`, with placement's own actions spelled out."""
    out: list[tuple[Any, ...]] = []
    for act in actions:
        match act:
            case SetCluster(cluster=cluster):
                out.append(("set cluster", cluster))
            case AnnotateCluster(cluster=cluster):
                out.append(("annotate", cluster))
            case ReplicateCatalog(cluster=cluster):
                out.append(("replicate catalog", cluster))
            case HandOver(cluster=cluster, state=state):
                out.append(("hand over", cluster, state))
            case DeleteCopy(cluster=cluster, uid=uid, deprovision=deprovision):
                out.append(("delete copy", cluster, uid, deprovision))
            case a.Log():
                out.append(("log",))
            case _:
                out.extend(summary([act]))
    return out


SISTER_COPY = {**body(state="succeeded"), "metadata": {"name": "db", "namespace": NS, "uid": "cu"}}
HAND_OVER = [
    ("replicate catalog", "c2"),
    ("hand over", "c2", "in_queue"),
    ("status", "in progress", "InProgress", "guarded", ("event", "Replicated", False)),
    ("requeue", 5.0),
]
LOCAL_APPLY = [APPLYING, ("apply", "db", False, True), ("remember",), ("Continue",)]

PLACED: list[tuple[str, InstanceFacts, list[tuple[Any, ...]]]] = [
    ("start-up not over: nothing rendered, looked at again soon",
     placed_facts(body(state="in_queue"), on("c2", body(state="in_queue"), ready=False), rendering=RENDERED),
     [("requeue", DEFAULTS.placement_not_ready.base)]),
    ("on the master: reconciled here, as in one cluster",
     placed_facts(body(state="in_queue"), on(MASTER, body(state="in_queue")), rendering=RENDERED),
     LOCAL_APPLY),
    ("unplaced, rendered here before multi-cluster: reconciled here",
     placed_facts(body(state="in_queue"), on(None, body(state="in_queue"), here=True), rendering=RENDERED),
     LOCAL_APPLY),
    ("unplaced, no usable plan: the local plan reports it",
     placed_facts(body(state="in_queue"), on(None, body(state="in_queue"), plan_known=False), entry=INVALID),
     failed("PlanInvalid")),
    ("placed on a sister, a request pending: handed over, nothing applied here",
     placed_facts(body(state="in_queue"), on("c2", body(state="in_queue")), rendering=RENDERED),
     HAND_OVER),
    ("unplaced, the scheduler chose: recorded in the spec, said, looked at again at once",
     placed_facts(body(state="in_queue"), on(None, body(state="in_queue"), scheduling=Scheduling("c2", "on c2", "x"))),
     [("set cluster", "c2"), ("status", None, None, "unguarded", ("event", "Scheduled", False)), ("log",),
      ("requeue", 0.0)]),
    ("unplaced, the scheduling failed in observe: the instance fails, with a Warning",
     placed_facts(body(state="in_queue"), on(None, body(state="in_queue"), scheduling=Scheduling(None, "no fit"))),
     [("status", "failed", "SchedulingFailed", "guarded", ("event", "SchedulingFailed", True)), ("log",)]),
    ("placed on a sister that does not answer: said, its state kept",
     placed_facts(body(state="in_queue"), on("c2", body(state="in_queue"), reach=Reach(True, False, "down"))),
     [("status", None, None, "guarded", ("event", "ClusterUnreachable", True)), ("requeue", 30.0)]),
    ("deleted, placed on a sister: the copy deleted first (no teardown here)",
     placed_facts(body(state="delete", deleting=True),
                  on("c2", body(state="delete", deleting=True), copy=SISTER_COPY)),
     [("delete copy", "c2", "cu", True), ("requeue", 5.0)]),
    ("deleted, placed on a sister, bindings left on the master: refused, as in one cluster",
     placed_facts(body(state="delete", deleting=True),
                  on("c2", body(state="delete", deleting=True), copy=SISTER_COPY, live_bindings=1)),
     failed("BindingsExist")),
]  # fmt: skip


@pytest.mark.parametrize(("the_facts", "expected"), [r[1:] for r in PLACED], ids=[r[0] for r in PLACED])
def test_placement_is_the_plans_first_branch(the_facts: InstanceFacts, expected: list[tuple[Any, ...]]) -> None:
    assert placing(plan(the_facts)) == expected


def test_nothing_is_gathered_for_an_instance_placement_decides_on() -> None:
    handed = placed_facts(body(state="in_queue"), on("c2", body(state="in_queue")))
    here = placed_facts(body(state="in_queue"), on(MASTER, body(state="in_queue")))
    assert steps(handed) == () and steps(here) == steps(facts(body(state="in_queue")))


def tracked(users: Sequence[str], *, owners: Sequence[str] = ()) -> Held:
    """CM as read, a singleton whose tracked users are ``users`` (and owner references ``owners``), at version 5."""
    meta: dict[str, Any] = {"name": "db", "namespace": NS, "resourceVersion": "5"}
    meta["annotations"] = {ANNOTATION_SINGLETON_USERS: json.dumps(list(users))}
    meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "SFServiceInstance", "name": o, "uid": o} for o in owners]
    return Held(CM, ObjectView.of({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}))


OTHER_OWNER = {"apiVersion": "osb.servicefabrik.io/v1alpha1", "kind": "SFServiceInstance", "name": "other",
               "uid": "u-other"}  # fmt: skip
"""The other owner ``held(..., Letting.UNOWN)`` names."""
OWNERS_LEFT = ({"apiVersion": "v1", "kind": "SFServiceInstance", "name": "u-2", "uid": "u-2"},)
RELEASE_ROWS: list[tuple[str, Held, tuple[a.Action, ...]]] = [
    ("ours alone: deleted at the version read", held(CM, Letting.DELETE),
     (a.Delete(CM, "sa", resource_version="5"),)),
    ("being deleted already: nothing, waited for", held(CM, Letting.WAIT), ()),
    ("gone: nothing", held(CM, Letting.GONE), ()),
    ("not ours: never touched, a log line", held(CM, Letting.LEAVE),
     (a.Log("left ConfigMap team/db alone: recorded as released, but it is not ours"),)),
    ("not readable with the plan's rights: not ours", Held(CM, None, readable=False),
     (a.Log("left ConfigMap team/db alone: recorded as released, but it is not ours"),)),
    ("shared by owner references: ours dropped at the version read", held(CM, Letting.UNOWN),
     (a.LeaveSingleton(CM, (OTHER_OWNER,), None, "5", as_user="sa"),)),
    ("a tracked singleton with other users: our entry dropped", tracked(["u-1", "u-2"]),
     (a.LeaveSingleton(CM, None, ("u-2",), "5", as_user="sa"),)),
    ("a tracked singleton, its last user: deleted at the version read", tracked(["u-1"]),
     (a.DeleteSingleton(CM, "5", as_user="sa"),)),
    ("owned and tracked with another owner: both our shares dropped in one write",
     tracked(["u-1"], owners=["u-1", "u-2"]),
     (a.LeaveSingleton(CM, OWNERS_LEFT, (), "5", as_user="sa"),)),
]  # fmt: skip


@pytest.mark.parametrize(("seen", "expected"), [r[1:] for r in RELEASE_ROWS], ids=[r[0] for r in RELEASE_ROWS])
def test_a_release_is_decided_from_the_object_as_observe_read_it(seen: Held, expected: tuple[a.Action, ...]) -> None:
    """Issue 45: the plan decides what letting go writes, from the object read; each write carries that version."""
    assert instance_plan.release(seen, "u-1", "sa") == expected


def test_a_release_deletes_only_the_version_it_decided_on() -> None:
    """The object changed between observe and act (an owner reference added, say): the delete is a 409 — the
    reconcile decides again on what it reads then — and the object stays."""
    run, kube, created = executor()
    stamped_cm(kube, owners=[])
    actions = letting_go(kube, orphaning=False)
    assert [type(x) for x in actions] == [a.Delete]
    kube.merge_patch(CM, {"metadata": {"labels": {"moved": "on"}}})
    with pytest.raises(ApiException) as refused:
        run.run(KEY, created, actions)
    assert refused.value.status == 409 and kube.get(CM) is not None
    run.run(KEY, created, letting_go(kube, orphaning=False))
    assert kube.get(CM) is None


SHARED = Piece({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "db", "namespace": NS}}, singleton=True)


def shared_cm(*, owners: Sequence[str] = ("u-2",), plan: str = "plan", users: int = 0) -> Held:
    """CM as observe read it before the apply: a singleton made for ``plan`` (its label), owned by ``owners``, listing
    ``users`` tracked users, at version 8."""
    meta: dict[str, Any] = {"name": "db", "namespace": NS, "resourceVersion": "8", "labels": {LABEL_PLAN: plan}}
    meta["annotations"] = {ANNOTATION_SINGLETON: "true"}
    if users:
        meta["annotations"][ANNOTATION_SINGLETON_USERS] = json.dumps([f"u-{i}" for i in range(100, 100 + users)])
    meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "SFServiceInstance", "name": o, "uid": o} for o in owners]
    return Held(CM, ObjectView.of({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}))


def joined(*shared: Held, piece: Piece = SHARED) -> InstanceFacts:
    return facts(body(state="in_queue"), rendering=Rendering((piece,), {}, live=shared))


NOT_OWNED_HERE = [("status", "failed", "ObjectNotOwned", "guarded", ("event", "ObjectNotOwned", True))]
JOIN_ROWS: list[tuple[str, InstanceFacts, list[tuple[Any, ...]]]] = [
    ("none made yet: created", joined(), [APPLYING, ("apply", "db", True, True), ("remember",), ("Continue",)]),
    ("made for the plan by another instance: our owner reference added, at the version read", joined(shared_cm()),
     [APPLYING, ("ShareSingleton",), ("remember",), ("Continue",)]),
    ("ours already: nothing written", joined(shared_cm(owners=("u-2", "u-1"))),
     [APPLYING, ("remember",), ("Continue",)]),
    ("made for another plan: not ours, refused, nothing after it applied", joined(shared_cm(plan="other")),
     [APPLYING, *NOT_OWNED_HERE]),
    ("out of owner references' reach, listing the most users: refused",
     joined(shared_cm(users=decisions.MAX_SINGLETON_USERS),
            piece=dataclasses.replace(SHARED, namespaced=False)),
     [APPLYING, ("status", "failed", "SingletonFull", "guarded", ("event", "SingletonFull", True))]),
]  # fmt: skip


@pytest.mark.parametrize(("the_facts", "expected"), [r[1:] for r in JOIN_ROWS], ids=[r[0] for r in JOIN_ROWS])
def test_a_singleton_made_already_is_joined_as_the_plan_decides_from_it(
    the_facts: InstanceFacts, expected: list[tuple[Any, ...]]
) -> None:
    """Issue 45: the apply's effect no longer reads a singleton it found made and decides there; observe reads it
    (``Rendering.singletons``) and the plan writes the join, guarded by the version read (``apply_or_join``)."""
    assert summary(plan(the_facts)) == expected


def test_the_join_carries_the_owners_read_and_ours_at_the_version_read() -> None:
    share = next(x for x in plan(joined(shared_cm())) if isinstance(x, a.ShareSingleton))
    assert share.resource_version == "8" and [o["uid"] for o in share.owners] == ["u-2", "u-1"]


def test_a_singleton_made_between_observe_and_its_create_is_a_conflict_not_a_decision() -> None:
    """The create finds it made meanwhile: the effect decides nothing, the reconcile observes it again."""
    run, kube, created = executor()
    kube.create({**SHARED.manifest, "metadata": {"name": "db", "namespace": NS}})
    kube.calls.clear()
    apply = apply_action(facts(body(state="in_queue")), SHARED)
    with pytest.raises(Conflict, match="made meanwhile"):
        run.run(KEY, created, [apply])
    assert [c.verb for c in kube.calls] == ["create"]  # no read, no join written
