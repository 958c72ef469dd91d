"""The multi-cluster part of the master's controller process: wiring, events, start-up and shutdown.

:class:`MultiCluster` is created by :class:`opbroker.controller.app.Controller` when ``--multicluster``
is on. It owns the ledger, the cluster registry, the SFCluster reconciler (a kind on the controller's one
runtime), and the
:class:`~opbroker.controller.multicluster.placement.MultiClusterPlacement` that the instance and binding
reconcilers consult. The controller forwards it the catalog and instance events it already receives;
SFCluster events come from one more watch handler (:meth:`register`).

Start-up lists SFClusters and instances once (the ledger's seed) and probes every cluster before the
first scheduling decision, so a restarted controller schedules from the same picture as before.
"""

from __future__ import annotations

import asyncio
import logging

from opbroker.controller.kinds import INSTANCES, PLANS, SERVICES
from opbroker.controller.multicluster.clusters import (
    CLUSTERS,
    CatalogReplicator,
    ClusterReconciler,
    ClusterRegistry,
)
from opbroker.controller.multicluster.core.ledger import Ledger
from opbroker.controller.multicluster.core.views import ReplicaView, SFClusterView
from opbroker.controller.multicluster.placement import MultiClusterPlacement, plan_requests
from opbroker.controller.multicluster.quantities import QuantityError, Resources
from opbroker.controller.osb.reconciling import Deps
from opbroker.controller.runtime.concurrency import Event, Lock
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.runner import Runtime
from opbroker.controller.runtime.watches import Watch
from opbroker.kubeclient.wire import JsonObject

logger = logging.getLogger(__name__)


class MultiCluster:
    def __init__(self, deps: Deps, runtime: Runtime) -> None:
        self.deps = deps
        self.runtime = runtime
        enqueue_master = runtime.enqueue_threadsafe
        self.ledger = Ledger(on_change=self.enqueue_cluster)  # its count is in the SFCluster's status
        self.registry = ClusterRegistry()
        self.replicator = CatalogReplicator(deps.settings.namespace)
        self.ready = Event()
        self._requests: dict[str, tuple[str, Resources]] = {}
        self._requests_lock = Lock()
        self.clusters = ClusterReconciler(
            deps,
            self.registry,
            self.ledger,
            self.replicator,
            self.requests_of,
            enqueue_master,
            self.suspect,
            loop=lambda: runtime.loop,
        )
        self.placement = MultiClusterPlacement(
            deps, self.registry, self.ledger, self.replicator, self.requests_of, self.suspect, self.ready
        )
        runtime.register(self.clusters)
        self._seeding: asyncio.Task[None] | None = None

    # -- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> None:
        self._seeding = asyncio.get_running_loop().create_task(self._seed(), name="multicluster-seed")

    async def stop(self) -> None:
        if self._seeding is not None:
            self._seeding.cancel()
        self.registry.close()

    async def _seed(self) -> None:
        while True:
            try:
                await asyncio.to_thread(self._seed_once)
                break
            except Exception as exc:
                logger.warning("multi-cluster start-up failed (%s); retrying", exc)
                policies = self.runtime.policies
                await self.runtime.clock.sleep(policies.delay(policies.seed_retry))
        for name in self.registry.names():
            self.enqueue_cluster(name)
        logger.info(
            "multi-cluster ready: scheduler %s, clusters %s", self.deps.settings.scheduler, self.registry.names()
        )

    def _seed_once(self) -> None:
        """The start-up picture, read once: catalog, clusters, placements; then every cluster probed.

        The catalog is read here too (the informers deliver it as well, but in their own time): a request that
        arrives during start-up must not be failed for a plan the controller has merely not seen yet.
        Watch events keep all of it current afterwards; what they delivered first is not overwritten.
        """
        kube = self.deps.kube
        catalog = self.deps.catalog
        for namespace in self.deps.settings.trusted_namespaces:  # nowhere else is a catalog entry trusted
            for body in kube.list_custom(SERVICES, namespace):
                if catalog.seed_service(body):
                    self.replicator.observe("sfservices", "ADDED", body)
            for body in kube.list_custom(PLANS, namespace):
                if catalog.seed_plan(body):
                    self.replicator.observe("sfplans", "ADDED", body)
        for body in kube.list_custom(CLUSTERS, self.deps.settings.namespace):
            self.registry.upsert(SFClusterView.of(body))
        newest: tuple[str, str] | None = None
        for item in kube.list_custom(INSTANCES, None):
            instance = ReplicaView.of(item)
            cluster = instance.cluster_id
            self.ledger.observe(Key("instance", instance.meta.namespace, instance.meta.name), cluster, instance.plan_id)
            created = instance.created or ""
            if cluster and (newest is None or created >= newest[0]):
                newest = (created, cluster)
        self.placement.previous = newest[1] if newest else None
        for name in self.registry.names():
            state = self.registry.get(name)
            if state is not None:
                self.clusters.refresh(state, announce=False)
        self.ready.set()

    # -- events (called on the event loop) ------------------------------------------------------------

    def watches(self) -> list[Watch]:
        """The SFClusters (the catalog, instances and bindings reach it through the controller's own watches)."""
        return [Watch.of(CLUSTERS, self.on_cluster, id="multicluster-sfclusters")]

    def on_cluster(self, event_type: str, body: JsonObject) -> None:
        cluster = SFClusterView.of(body)
        if cluster.meta.namespace != self.deps.settings.namespace:
            return
        if event_type != "DELETED":
            self.registry.upsert(cluster)
        self.enqueue_cluster(cluster.meta.name)

    def on_catalog(self, plural: str, event_type: str, body: JsonObject) -> None:
        if self.replicator.observe(plural, event_type, body):
            for name in self.registry.names():
                self.enqueue_cluster(name)

    def on_instance(self, event_type: str, body: JsonObject) -> None:
        instance = ReplicaView.of(body)
        key = Key("instance", instance.meta.namespace, instance.meta.name)
        if event_type == "DELETED":
            self.ledger.forget(key)  # the cluster's count changes (the ledger enqueues it): a removal may wait on it
            return
        cluster = instance.cluster_id
        if cluster is not None:  # a placement is never undone, so an older event without one is ignored
            self.ledger.observe(key, cluster, instance.plan_id)

    # -- helpers ---------------------------------------------------------------------------------------

    def enqueue_cluster(self, name: str) -> None:
        self.runtime.enqueue_threadsafe(Key(ClusterReconciler.kind, self.deps.settings.namespace, name))

    def suspect(self, cluster: str, _what: str) -> None:
        """A call to ``cluster`` failed: probe it now rather than at the next interval."""
        self.enqueue_cluster(cluster)

    def requests_of(self, plan_id: str) -> Resources:
        """A plan's ``context.requests``, parsed once per plan version."""
        entry = self.deps.catalog.plan(plan_id)
        if entry is None or entry.model is None:
            return {}
        with self._requests_lock:
            cached = self._requests.get(plan_id)
            if cached is not None and cached[0] == entry.hash:
                return cached[1]
        try:
            parsed = plan_requests(entry)
        except QuantityError:
            parsed = {}
        with self._requests_lock:
            self._requests[plan_id] = (entry.hash, parsed)
        return parsed
