"""Multi-cluster placement's plan, table-tested: where an instance or binding is reconciled and the exact actions
the master runs (None: reconciled right here). The end-to-end behaviour: test_lifecycle.py."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from opbroker.api.conventions import ANNOTATION_OWNER_UID, FINALIZER, credentials_secret_name
from opbroker.api.meta import ResourceRef
from opbroker.controller.core import actions as a
from opbroker.controller.core import decisions
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.views import ObjectView, SecretView
from opbroker.controller.multicluster.core import placement_plan as p
from opbroker.controller.multicluster.core import replicas
from opbroker.controller.multicluster.core.placement_plan import (
    DeleteCopy,
    HandOver,
    PlacementFacts,
    Reach,
    ReplicateCatalog,
    Scheduling,
    SetCluster,
)
from opbroker.controller.multicluster.core.views import ReplicaView
from opbroker.controller.multicluster.reasons import ANNOTATION_CLUSTER, ANNOTATION_MASTER_UID
from opbroker.controller.runtime.clock import FAKE_EPOCH as NOW
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.policies import DEFAULTS
from tests.plan_support import timeless

UP = Reach(True, True)
V = ReplicaView.of
PLAN = {"kind": "SFPlan", "metadata": {"name": "small"}, "spec": {"id": "p1"}}


def instance(
    *,
    cluster: str | None = "c2",
    state: str | None = "in_queue",
    held: bool = False,
    deleting: bool = False,
    **status: Any,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "db", "namespace": "team", "uid": "u1", "generation": 1, "resourceVersion": "9"}
    if held:
        meta["finalizers"] = [FINALIZER]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: dict[str, Any] = {"instanceId": "db", "planId": "p1", "serviceId": "s1"}
    if cluster:
        spec["clusterId"] = cluster
    return {
        "apiVersion": "osb.servicefabrik.io/v1alpha1",
        "kind": "SFServiceInstance",
        "metadata": meta,
        "spec": spec,
        "status": {"state": state, **status},
    }


def binding(
    *, state: str | None = "in_queue", held: bool = True, deleting: bool = False, **status: Any
) -> dict[str, Any]:
    body = instance(cluster=None, state=state, held=held, deleting=deleting, **status)
    body["kind"] = "SFServiceBinding"
    body["metadata"] = {**body["metadata"], "name": "b", "uid": "ub", "annotations": {ANNOTATION_CLUSTER: "c2"}}
    body["spec"] = {"id": "b", "instanceId": "db", "planId": "p1"}
    return body


def sister_copy(obj: dict[str, Any], *, state: str = "succeeded", uid: str = "cu", **extra: Any) -> dict[str, Any]:
    made = replicas.copy_of(V(obj))
    made["metadata"]["uid"] = uid
    made["metadata"].update(extra)
    made["status"] = {"state": state, "description": "done", "error": None}
    return made


def facts(obj: dict[str, Any], *, kind: str = "instance", **known: Any) -> PlacementFacts:
    cluster = known.pop("cluster", "c2" if kind == "binding" else (obj["spec"].get("clusterId") or None))
    reach = known.pop("reach", UP if cluster not in (None, "1") else None)
    if known.get("copy") is not None:
        known["copy"] = V(known["copy"])
    if known.get("source") is not None:
        known["source"] = SecretView.of(known["source"])
    return PlacementFacts(
        Key(kind, "team", obj["metadata"]["name"]),
        V(obj),
        cluster=cluster,
        reach=reach,
        catalog=(PLAN,),
        **known,
        now=NOW,
    )


def timeless_or_none(actions: Any) -> Any:
    return None if actions is None else timeless(actions)


PENDING = instance()
HELD = instance(held=True)
PLACED = instance(state="succeeded", held=True, observedGeneration=1, description="done", error=None)
DELETING = instance(state="delete", held=True, deleting=True)
UNPLACED = instance(cluster=None)
HANDED = replicas.handed_over(V(PENDING), cluster="c2", now=NOW)
UNREACHABLE = "cluster 'c2' is not registered (no SFCluster)"
LOST = "the copy in cluster 'c2' has disappeared; a new update request re-creates it"
SUCCEEDED_COPY = sister_copy(PLACED)
BOUND = binding(state="in progress", observedGeneration=1)
BOUND_COPY = sister_copy(BOUND)
BOUND_COPY["status"]["response"] = {"secretRef": "theirs"}
SOURCE = {"metadata": {"name": "theirs"}, "data": {"response": "e30="}}


SAID_UNREACHABLE = copy.deepcopy(DELETING)
SAID_UNREACHABLE["status"].update(
    replicas.unreachable(
        V(DELETING),
        cluster="c2",
        reason=Reason.CLUSTER_UNREACHABLE,
        message="cluster 'c2' is unreachable: timed out",
        now=NOW,
    )
)


def lost_patch(obj: dict[str, Any]) -> dict[str, Any]:
    conditions = replicas.set_condition(
        replicas.reachable_condition(V(obj), "c2", NOW), replicas.ConditionType.READY, status=False,
        reason=Reason.CLUSTER_UNREACHABLE.value, message=LOST, generation=1, now=NOW,
    )  # fmt: skip
    return {"state": "failed", "error": LOST, "description": LOST, "conditions": replicas.wire(conditions)}


ROWS: list[tuple[str, PlacementFacts, list[Any] | None]] = [
    ("start-up not over: look again soon", facts(PENDING, ready=False), [a.Requeue(DEFAULTS.placement_not_ready.base)]),
    ("on the master: reconciled here", facts(instance(cluster="1")), None),
    ("unplaced, rendered here before: reconciled here", facts(UNPLACED, here=True), None),
    ("unplaced and deleted: released", facts(instance(cluster=None, deleting=True)), [a.EnsureFinalizer(False)]),
    ("unplaced, no usable plan: the local reconciler says so", facts(UNPLACED, plan_known=False), None),
    ("unplaced after a failure: stays failed", facts(instance(cluster=None, state="failed", observedGeneration=1)), []),
    (
        "scheduled: the choice recorded, said, looked at again at once",
        facts(UNPLACED, scheduling=Scheduling("c2", "placed on c2", "round-robin")),
        [
            SetCluster("c2"),
            a.WriteStatus(
                {
                    "conditions": [
                        {
                            "type": "Scheduled",
                            "status": "True",
                            "reason": "Scheduled",
                            "message": "placed on c2 by the round-robin scheduler",
                            "observedGeneration": 2,
                        }
                    ]
                },
                guarded=False,
                event=a.Event(Reason.SCHEDULED.value, "placed on c2 by the round-robin scheduler"),
            ),
            a.Log("instance team/db placed on c2 by the round-robin scheduler", warning=False),
            a.Requeue(0.0),
        ],
    ),
    (
        "unschedulable: failed, with a Warning",
        facts(UNPLACED, scheduling=Scheduling(None, "no cluster fits")),
        [
            a.WriteStatus(
                {
                    "state": "failed",
                    "description": "no cluster fits",
                    "error": "no cluster fits",
                    "observedGeneration": 1,
                    "conditions": [
                        {
                            "type": t,
                            "status": "False",
                            "reason": "SchedulingFailed",
                            "message": "no cluster fits",
                            "observedGeneration": 1,
                        }
                        for t in ("Scheduled", "Ready")
                    ],
                },
                event=a.Event(Reason.SCHEDULING_FAILED.value, "no cluster fits", True),
            ),
            a.Log("instance team/db: no cluster fits"),
        ],
    ),
    (
        "its cluster is not registered: said, state kept, probed again",
        facts(HELD, reach=Reach(False, False)),
        [
            a.WriteStatus(
                replicas.unreachable(
                    V(HELD), cluster="c2", reason=Reason.CLUSTER_NOT_REGISTERED, message=UNREACHABLE, now=NOW
                ),
                event=a.Event(Reason.CLUSTER_NOT_REGISTERED.value, UNREACHABLE, True),
            ),
            a.Requeue(30.0),
        ],
    ),
    (
        "new request: held, catalog first, handed over",
        facts(PENDING),
        [
            a.EnsureFinalizer(True),
            ReplicateCatalog("c2", (PLAN,)),
            HandOver("c2", replicas.copy_of(V(PENDING)), "in_queue"),
            a.WriteStatus(HANDED, event=a.Event(Reason.REPLICATED.value, "handed to cluster 'c2'")),
            a.Requeue(5.0),
        ],
    ),
    (
        "a copy left by an earlier instance of the name: deleted first",
        facts(HELD, copy=sister_copy(HELD, uid="old", annotations={ANNOTATION_MASTER_UID: "u0"})),
        [DeleteCopy("c2", "old"), a.Requeue(5.0)],
    ),
    (
        "the copy succeeded: mirrored, done",
        facts(instance(state="in progress", held=True, observedGeneration=1), copy=SUCCEEDED_COPY),
        [
            a.WriteStatus(
                replicas.mirror(
                    V(instance(state="in progress", held=True)),
                    V(SUCCEEDED_COPY),
                    cluster="c2",
                    fields=replicas.INSTANCE_FIELDS,
                    now=NOW,
                ),
                event=a.Event(Reason.REPLICATED.value, "succeeded (reported by cluster 'c2')"),
            ),
        ],
    ),
    (
        "the copy still works on a request: looked at again",
        facts(
            HELD | {"status": {"state": "in progress", "observedGeneration": 1}}, copy=sister_copy(HELD, state="update")
        ),
        [a.Requeue(5.0)],
    ),
    (
        "the copy vanished unasked: failed, said",
        facts(PLACED),
        [a.WriteStatus(lost_patch(PLACED), event=a.Event(Reason.CLUSTER_UNREACHABLE.value, LOST, True))],
    ),
    (
        "deprovision under live bindings: failed once, said",
        facts(DELETING, live_bindings=2),
        [
            a.WriteStatus(
                {
                    "state": "failed",
                    "description": None,
                    "error": "cannot deprovision: 2 binding(s) still exist; unbind them first",
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "False",
                            "reason": "BindingsExist",
                            "message": "cannot deprovision: 2 binding(s) still exist; unbind them first",
                            "observedGeneration": 1,
                        }
                    ],
                },
                settled=True,
                event=a.Event(
                    Reason.BINDINGS_EXIST.value,
                    "cannot deprovision: 2 binding(s) still exist; unbind them first",
                    warning=True,
                ),
            )
        ],
    ),
    (
        "deprovision under live bindings, said already: nothing more",
        facts(
            instance(
                state="failed",
                held=True,
                deleting=True,
                error="cannot deprovision: 2 binding(s) still exist; unbind them first",
            ),
            live_bindings=2,
        ),
        [],
    ),
    (
        "deprovision: the copy is asked to go",
        facts(DELETING, copy=sister_copy(DELETING)),
        [DeleteCopy("c2", "cu", deprovision=True), a.Requeue(5.0)],
    ),
    ("deprovision: the copy is gone, released", facts(DELETING), [a.EnsureFinalizer(False)]),
    (
        "deprovision while the cluster is out of reach (said already): waits, not released",
        facts(SAID_UNREACHABLE, reach=Reach(True, False, "timed out")),
        [a.Requeue(30.0)],
    ),
]


def credentials(owner: str | None, *, stamped: bool = True) -> ObjectView:
    """The binding's credentials Secret on the master as read: with an owner reference to ``owner`` and its stamp
    (None: a Secret of that name someone else made)."""
    meta: dict[str, Any] = {
        "name": credentials_secret_name("b"),
        "namespace": "team",
        "uid": "su",
        "resourceVersion": "7",
    }
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "X", "name": "b", "uid": owner, "controller": True}]
        if stamped:
            meta["annotations"] = {ANNOTATION_OWNER_UID: owner}
    return ObjectView.of({"apiVersion": "v1", "kind": "Secret", "metadata": meta})


NOT_OURS = decisions.not_owned_message(
    ResourceRef(api_version="v1", kind="Secret", namespace="team", name=credentials_secret_name("b"))
)

WRITTEN_OVER = [
    a.WriteSecret(
        replicas.credentials_secret(V(BOUND), SecretView.of(SOURCE), credentials_secret_name("b")),
        resource_version="7",
    ),
    a.WriteStatus(
        {
            **replicas.mirror(V(BOUND), V(BOUND_COPY), cluster="c2", fields=replicas.BINDING_FIELDS, now=NOW),
            "response": {"secretRef": credentials_secret_name("b")},
        },
        event=a.Event(Reason.REPLICATED.value, "succeeded (reported by cluster 'c2')"),
    ),
]
"""The binding's credentials Secret written over at the version read, the status mirrored."""

BINDING_ROWS: list[tuple[str, PlacementFacts, list[Any] | None]] = [
    ("binding on the master: reconciled here", facts(binding(), kind="binding", cluster="1"), None),
    (
        "binding of an unplaced instance, deleted: released",
        facts(binding(deleting=True), kind="binding", cluster=None),
        [a.EnsureFinalizer(False)],
    ),
    (
        "binding whose instance is not in the sister yet: waits",
        facts(binding(), kind="binding", instance_copied=False),
        [a.Requeue(DEFAULTS.placement_handover.base)],
    ),
    (
        "bound in the sister: credentials copied as the plan's account, status mirrored",
        facts(BOUND, kind="binding", copy=BOUND_COPY, source=SOURCE, plan_user="system:serviceaccount:x:plan"),
        [
            a.WriteSecret(
                replicas.credentials_secret(V(BOUND), SecretView.of(SOURCE), credentials_secret_name("b")),
                as_user="system:serviceaccount:x:plan",
                create=True,
            ),
            a.WriteStatus(
                {
                    **replicas.mirror(V(BOUND), V(BOUND_COPY), cluster="c2", fields=replicas.BINDING_FIELDS, now=NOW),
                    "response": {"secretRef": credentials_secret_name("b")},
                },
                event=a.Event(Reason.REPLICATED.value, "succeeded (reported by cluster 'c2')"),
            ),
        ],
    ),
    (
        "bound, the sister's Secret not there yet: looked at again",
        facts(BOUND, kind="binding", copy=BOUND_COPY),
        [a.Requeue(5.0)],
    ),
    (
        "bound, its Secret written before: written over the version read",
        facts(BOUND, kind="binding", copy=BOUND_COPY, source=SOURCE, credentials=credentials("ub")),
        WRITTEN_OVER,
    ),
    (
        "bound, its Secret written before the copies were stamped (owner reference only): written over",
        facts(BOUND, kind="binding", copy=BOUND_COPY, source=SOURCE, credentials=credentials("ub", stamped=False)),
        WRITTEN_OVER,
    ),
    (
        "bound, a Secret of its name is someone else's: not written, the binding fails on the master",
        facts(BOUND, kind="binding", copy=BOUND_COPY, source=SOURCE, credentials=credentials(None)),
        [
            a.WriteStatus(
                {
                    "state": "failed",
                    "error": NOT_OURS,
                    "description": NOT_OURS,
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "False",
                            "reason": "ObjectNotOwned",
                            "message": NOT_OURS,
                            "observedGeneration": 1,
                        }
                    ],
                },
                event=a.Event(Reason.OBJECT_NOT_OWNED.value, NOT_OURS, warning=True),
            )
        ],
    ),
    (
        "unbound, the copy gone: the binding's credentials deleted at the version read, released",
        facts(binding(state="delete", deleting=True), kind="binding", credentials=credentials("ub")),
        [
            a.DeleteSecret("team", credentials_secret_name("b"), "ub", uid="su", resource_version="7"),
            a.EnsureFinalizer(False),
        ],
    ),
    (
        "unbound, the copy gone, a Secret of its name not the binding's: left alone, released",
        facts(binding(state="delete", deleting=True), kind="binding", credentials=credentials("someone")),
        [a.EnsureFinalizer(False)],
    ),
    (
        "unbound, the copy gone, no Secret: released",
        facts(binding(state="delete", deleting=True), kind="binding"),
        [a.EnsureFinalizer(False)],
    ),
]


@pytest.mark.parametrize(("given", "wanted"), [(f, w) for _, f, w in ROWS], ids=[i for i, _, _ in ROWS])
def test_instance_placement(given: PlacementFacts, wanted: list[Any] | None) -> None:
    assert timeless_or_none(p.instance(given)) == timeless_or_none(wanted)


@pytest.mark.parametrize(("given", "wanted"), [(f, w) for _, f, w in BINDING_ROWS], ids=[i for i, _, _ in BINDING_ROWS])
def test_binding_placement(given: PlacementFacts, wanted: list[Any] | None) -> None:
    assert timeless_or_none(p.binding(given)) == timeless_or_none(wanted)


def test_the_credentials_secret_is_named_only_once_the_copy_is_bound() -> None:
    assert p.source_secret_name(V(BOUND_COPY)) == "theirs"
    assert p.source_secret_name(V(sister_copy(BOUND, state="in progress"))) is None
    assert p.source_secret_name(None) is None
