"""Placement's act on FakeKube (the master and a sister both fakes): hand over, mirror back, tear down, release —
the executor and placement's own effects, without an API server. The same with real clusters:
test_lifecycle.py."""

from __future__ import annotations

import threading
import types
from typing import Any

from opbroker.api.conventions import FINALIZER
from opbroker.controller.catalog import Catalog
from opbroker.controller.kube import INSTANCES
from opbroker.controller.multicluster.clusters import CLUSTERS, CatalogReplicator, ClusterRegistry
from opbroker.controller.multicluster.core.ledger import Ledger
from opbroker.controller.multicluster.core.views import SFClusterView
from opbroker.controller.multicluster.placement import MultiClusterPlacement
from opbroker.controller.multicluster.reasons import ANNOTATION_MASTER_UID
from opbroker.controller.reconciling import OwnWrites
from opbroker.controller.runtime.clock import FakeClock
from opbroker.controller.runtime.outcomes import DONE, Outcome
from opbroker.controller.settings import ControllerSettings
from tests.controller.test_reconcile_instances_bindings import NS, PLAN_ID, SERVICE_ID, plan_body
from tests.fake_kube import FakeKube, KindInfo


class FakeSister(FakeKube):
    """A sister cluster: the fake door plus what :class:`SisterKube` adds (namespaces are not modelled)."""

    def ensure_namespace(self, name: str) -> None:
        self.create_namespace(name)


def placement() -> tuple[MultiClusterPlacement, FakeKube, FakeSister]:
    master, sister = FakeKube(), FakeSister()
    master.register_kind(KindInfo(CLUSTERS.api_version, "SFCluster", "sfclusters"))
    catalog = Catalog()
    catalog.upsert_plan(plan_body())
    settings = ControllerSettings(multicluster=True, status_poll_seconds=7.0)
    deps = types.SimpleNamespace(
        kube=master,
        catalog=catalog,
        settings=settings,
        own_writes=OwnWrites(),
        index=types.SimpleNamespace(forget=print),
        clock=FakeClock(),
    )
    registry = ClusterRegistry()
    state = registry.upsert(
        SFClusterView.of({"metadata": {"name": "c2", "namespace": "opbroker"}, "spec": {"secretRef": "s"}})
    )
    state.kube, state.reachable = sister, True  # type: ignore[assignment]
    ready = threading.Event()
    ready.set()
    placed = MultiClusterPlacement(
        deps,  # type: ignore[arg-type]
        registry,
        Ledger(),
        CatalogReplicator("opbroker"),
        lambda _plan: {},
        lambda *_: None,
        ready,
    )
    return placed, master, sister


def instance(master: FakeKube) -> dict[str, Any]:
    found = master.custom_object(INSTANCES, NS, "db")
    assert found is not None
    return found


def test_an_instance_is_handed_over_mirrored_back_and_torn_down() -> None:
    placed, master, sister = placement()
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

    assert placed.instance(instance(master)) == Outcome(requeue_after=7.0)
    body = instance(master)
    assert body["metadata"]["finalizers"] == [FINALIZER] and body["status"]["state"] == "in progress"
    copy = sister.custom_object(INSTANCES, NS, "db")
    assert copy is not None and copy["status"]["state"] == "in_queue"
    assert copy["metadata"]["annotations"][ANNOTATION_MASTER_UID] == body["metadata"]["uid"]
    assert [e["reason"] for e in master.events] == ["Replicated"]

    sister.patch_custom_status(INSTANCES, NS, "db", {"state": "succeeded", "description": "ready"})
    assert placed.instance(instance(master)) == DONE
    assert instance(master)["status"]["state"] == "succeeded"
    assert [e["reason"] for e in master.events] == ["Replicated", "Replicated"]

    master.delete_custom(INSTANCES, NS, "db")  # held: marked for deletion
    assert placed.instance(instance(master)) == Outcome(requeue_after=7.0)
    assert sister.custom_object(INSTANCES, NS, "db") is None  # the copy had no finalizer of the sister's controller
    assert placed.instance(instance(master)) == DONE
    assert master.custom_object(INSTANCES, NS, "db") is None  # released: the copy is gone
