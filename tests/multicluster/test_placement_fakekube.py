"""Placement as a branch of the instance reconciler, on FakeKube (the master and a sister both fakes): hand over,
mirror back, tear down, release — observed with the instance, decided by its plan, performed by its one executor
(placement's own effects registered in it), without an API server. The same with real clusters:
test_lifecycle.py."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import pytest

from opbroker.api.conventions import FINALIZER
from opbroker.controller.core import actions as a
from opbroker.controller.kinds import BINDINGS, INSTANCES
from opbroker.controller.multicluster.clusters import CLUSTERS, CatalogReplicator, ClusterRegistry
from opbroker.controller.multicluster.core.ledger import Ledger
from opbroker.controller.multicluster.core.placement_plan import (
    AnnotateCluster,
    DeleteCopy,
    HandOver,
    ReplicateCatalog,
    SetCluster,
)
from opbroker.controller.multicluster.core.scheduling import MASTER
from opbroker.controller.multicluster.core.views import SFClusterView
from opbroker.controller.multicluster.placement import MultiClusterPlacement
from opbroker.controller.multicluster.reasons import ANNOTATION_MASTER_UID
from opbroker.controller.osb.instances import InstanceReconciler
from opbroker.controller.osb.osb_effects import osb_executor
from opbroker.controller.osb.reconciling import AppliedMemory
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.memory import Memories
from opbroker.controller.runtime.outcomes import DONE, Outcome
from opbroker.controller.settings import ControllerSettings
from tests.controller.test_reconcile_instances_bindings import NS, PLAN_ID, SERVICE_ID, World, plan_body
from tests.fake_kube import FakeKube, KindInfo
from tests.multicluster.test_placement_plan import BINDING_ROWS, ROWS


class FakeSister(FakeKube):
    """A sister cluster: the fake door plus what :class:`SisterKube` adds (namespaces are not modelled)."""

    def ensure_namespace(self, name: str) -> None:
        self.create_namespace(name)


def placement() -> tuple[InstanceReconciler, FakeKube, FakeSister]:
    """The master's instance reconciler with multi-cluster placement on (one sister, ``c2``, reachable; the
    round-robin scheduler, whose last choice was the master: the next is ``c2``)."""
    master, sister = FakeKube(), FakeSister()
    master.register_kind(KindInfo(CLUSTERS.api_version, "SFCluster", "sfclusters"))
    settings = ControllerSettings(multicluster=True, status_poll_seconds=7.0, scheduler="round-robin")
    world = World(kube=master, settings=settings)
    world.catalog.upsert_plan(plan_body())
    registry = ClusterRegistry()
    state = registry.upsert(
        SFClusterView.of({"metadata": {"name": "c2", "namespace": "opbroker"}, "spec": {"secretRef": "s"}})
    )
    state.kube, state.reachable = sister, True  # type: ignore[assignment]
    ready = threading.Event()
    ready.set()
    placed = MultiClusterPlacement(
        world.deps,
        registry,
        Ledger(),
        CatalogReplicator("opbroker"),
        lambda _plan: {},
        lambda *_: None,
        ready,
    )
    placed.previous = MASTER
    return InstanceReconciler(dataclasses.replace(world.deps, placement=placed), Memories()), master, sister


KEY = Key("instance", NS, "db")


def instance(master: FakeKube) -> dict[str, Any]:
    found = master.custom_object(INSTANCES, NS, "db")
    assert found is not None
    return found


def test_an_instance_is_handed_over_mirrored_back_and_torn_down() -> None:
    reconciler, master, sister = placement()
    master.create_custom(
        INSTANCES,
        {
            "apiVersion": INSTANCES.api_version,
            "kind": "SFServiceInstance",
            "metadata": {"name": "db", "namespace": NS},
            "spec": {"instanceId": "db", "serviceId": SERVICE_ID, "planId": PLAN_ID, "clusterId": "c2"},
        },
    )
    master.patch_custom_status(INSTANCES, NS, "db", {"state": "in_queue"})

    assert reconciler.reconcile(KEY) == Outcome(requeue_after=7.0)
    body = instance(master)
    assert body["metadata"]["finalizers"] == [FINALIZER] and body["status"]["state"] == "in progress"
    copy = sister.custom_object(INSTANCES, NS, "db")
    assert copy is not None and copy["status"]["state"] == "in_queue"
    assert copy["metadata"]["annotations"][ANNOTATION_MASTER_UID] == body["metadata"]["uid"]
    assert [e["reason"] for e in master.events] == ["Replicated"]

    sister.patch_custom_status(INSTANCES, NS, "db", {"state": "succeeded", "description": "ready"})
    assert reconciler.reconcile(KEY) == DONE
    assert instance(master)["status"]["state"] == "succeeded"
    assert [e["reason"] for e in master.events] == ["Replicated", "Replicated"]

    master.delete_custom(INSTANCES, NS, "db")  # held: marked for deletion
    assert reconciler.reconcile(KEY) == Outcome(requeue_after=7.0)
    assert sister.custom_object(INSTANCES, NS, "db") is None  # the copy had no finalizer of the sister's controller
    assert reconciler.reconcile(KEY) == DONE
    assert master.custom_object(INSTANCES, NS, "db") is None  # released: the copy is gone


def test_a_scheduling_is_written_and_the_queue_looks_again_then_the_hand_over_follows() -> None:
    """The scheduler's choice is the pass's last word: its look again at once goes to the queue (no second pass in
    the same reconcile), and the next reconcile hands the instance over to the chosen cluster."""
    reconciler, master, sister = placement()
    master.create_custom(
        INSTANCES,
        {
            "apiVersion": INSTANCES.api_version,
            "kind": "SFServiceInstance",
            "metadata": {"name": "db", "namespace": NS},
            "spec": {"instanceId": "db", "serviceId": SERVICE_ID, "planId": PLAN_ID},
        },
    )
    master.patch_custom_status(INSTANCES, NS, "db", {"state": "in_queue"})

    assert reconciler.reconcile(KEY) == Outcome(requeue_after=0.0)
    body = instance(master)
    assert body["spec"]["clusterId"] == "c2" and body["status"]["state"] == "in_queue"
    assert [c["type"] for c in body["status"]["conditions"]] == ["Scheduled"]
    assert sister.custom_object(INSTANCES, NS, "db") is None  # handed over by the next reconcile, not this one
    assert [e["reason"] for e in master.events] == ["Scheduled"]

    assert reconciler.reconcile(KEY) == Outcome(requeue_after=7.0)
    copy = sister.custom_object(INSTANCES, NS, "db")
    assert copy is not None and copy["status"]["state"] == "in_queue"
    assert instance(master)["status"]["state"] == "in progress"


#: What the executor performs itself, whatever the kind (``executor.Run.perform``).
GENERIC = (a.EnsureFinalizer, a.WriteStatus, a.Event, a.Delete, a.Log, a.ForgetObject, a.Requeue, a.Continue, a.Retry)


@pytest.mark.parametrize(
    ("kind", "wanted"),
    [("instance", row[2]) for row in ROWS] + [("binding", row[2]) for row in BINDING_ROWS],
    ids=[f"instance: {row[0]}" for row in ROWS] + [f"binding: {row[0]}" for row in BINDING_ROWS],
)
def test_the_reconcilers_executor_performs_every_action_placement_plans(kind: str, wanted: list[Any] | None) -> None:
    """Each action of placement's plan tables has its performer in the instance's or binding's one executor once
    multi-cluster is on (the generic ones in the executor, placement's own among its effects)."""
    reconciler, _, _ = placement()
    osb = osb_executor(reconciler.deps, INSTANCES if kind == "instance" else BINDINGS, kind, AppliedMemory())
    for action in wanted or []:
        assert isinstance(action, GENERIC) or type(action) in osb.effects, action


def test_one_cluster_registers_no_placement_effect() -> None:
    world = World()
    effects = osb_executor(world.deps, INSTANCES, "instance", AppliedMemory()).effects
    assert not {SetCluster, AnnotateCluster, ReplicateCatalog, HandOver, DeleteCopy} & set(effects)
