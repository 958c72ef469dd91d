"""The SFClusters: what the master knows of each (in memory), and the reconciler that keeps it true.

:class:`ClusterRegistry` holds, per SFCluster of the control-plane namespace, the latest object, a client
for the cluster (built from the kubeconfig Secret named by ``spec.secretRef``; the master's own client for
cluster ``"1"``), the last probe's verdict and the watch of its copies. The scheduler reads it without I/O.

:class:`ClusterReconciler` runs per SFCluster key, on events and every ``cluster_probe_seconds``:

1. holds the ``cluster-protection`` finalizer; an SFCluster being deleted is released only once the ledger
   has no instance placed on it (until then its ``Removable`` condition names them, and nothing new is
   scheduled there);
2. (re)builds the client when the kubeconfig changes and probes the cluster; a change of reachability
   re-enqueues every instance placed there, so they are marked unreachable (or cleared) at once. A kubeconfig
   naming a command or a file (``exec``, ``auth-provider``, ``tokenFile``, file paths) is refused before any
   client is built: not Ready, reason ``KubeconfigRefused``, the fields named (:mod:`.kubeconfigs`);
3. replicates the catalog (SFService, SFPlan of the control-plane namespace) into sister clusters;
3a. installs opbroker's controller into a sister whose ``spec.controller`` asks for it (:mod:`.installer`): applied
   again when the definitions change (an upgrade), removed when the opt-in is withdrawn or the SFCluster is
   deleted (before the finalizer goes); the ``ControllerInstalled`` condition says how it went, and a failed
   installation makes the SFCluster not Ready;
4. writes the status: instance count, capacity/allocatable (summed from nodes, else the declared
   ``spec.totalCapacity``), requests (from running pods where there are any, and from the plans of the
   instances placed there), reachability and the ``Ready`` condition — only when something changed.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from kubernetes.client.exceptions import ApiException

from opbroker.api.cluster import RESOURCE_GROUP, SFClusterController
from opbroker.api.controllerinstall import digest as objects_digest
from opbroker.api.meta import ResourceRef
from opbroker.controller.catalog.catalog import spec_hash
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.views import SecretView
from opbroker.controller.multicluster import installer, quantities
from opbroker.controller.multicluster.core import cluster_plan, replicas
from opbroker.controller.multicluster.core.availability import Availability, availability
from opbroker.controller.multicluster.core.cluster_plan import (
    ClusterFacts,
    Installation,
    Replicate,
    Unregister,
)
from opbroker.controller.multicluster.core.ledger import Ledger
from opbroker.controller.multicluster.core.scheduling import MASTER, ClusterView
from opbroker.controller.multicluster.core.views import ReplicaView, SFClusterView
from opbroker.controller.multicluster.installer import InstallError
from opbroker.controller.multicluster.quantities import Resources
from opbroker.controller.multicluster.reasons import LABEL_REPLICATED, ConditionType
from opbroker.controller.multicluster.sisters import (
    KubeconfigError,
    KubeconfigRefused,
    SisterKube,
    SisterWatch,
    client_from_kubeconfig,
)
from opbroker.controller.multicluster.sisters import kubeconfig_digest as digest_of
from opbroker.controller.osb.reconciling import Deps
from opbroker.controller.runtime.concurrency import Lock
from opbroker.controller.runtime.executor import Executor, Run, Target
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.kinds import ObservePlanAct
from opbroker.controller.runtime.kube import Kind
from opbroker.controller.runtime.outcomes import DONE, Outcome
from opbroker.controller.runtime.showing import ShowsFailuresOnObject
from opbroker.kubeclient.wire import JsonObject

logger = logging.getLogger(__name__)

CLUSTERS = Kind(RESOURCE_GROUP, "v1alpha1", "sfclusters")
KUBECONFIG_KEY = "kubeconfig"


def describe(exc: BaseException) -> str:
    """A short, stable account of why a cluster did not answer (no object addresses, no payloads)."""
    if isinstance(exc, ApiException):
        return f"the API server answered HTTP {exc.status} {exc.reason or ''}".rstrip()
    text = str(getattr(exc, "reason", None) or exc) or type(exc).__name__
    text = re.sub(r"<[^>]*>:?\s*", "", text)
    text = re.sub(r"\(Caused by [^)]*\)", "", text).strip()
    return text[:300] or type(exc).__name__


@dataclass
class ClusterState:
    name: str
    cluster: SFClusterView
    """The SFCluster as last read."""
    kube: SisterKube | None = None
    shared: bool = False
    """The client is the master's own (cluster "1"): never closed here."""
    digest: str | None = None
    watch: SisterWatch | None = None
    reachable: bool | None = None
    reason: str = ""
    refused: bool = False
    """The kubeconfig was refused (it names a command or a file): no client was built."""
    observed: tuple[Resources, Resources, Resources] | None = None
    """(capacity, allocatable, requests) summed from the cluster's nodes and pods; None without nodes."""
    catalog: dict[tuple[str, str], str] = field(default_factory=dict)
    """Catalog objects replicated into the cluster: (plural, name) → hash of what was applied."""
    installed: str | None = None
    """Digest of the controller's objects applied into the cluster through this connection (None: not yet)."""
    install: Installation | None = None
    applied: str = ""
    """What the last installation applied (image, replicas, object count, digest), for ``ControllerInstalled``."""
    controller_pending: bool = False
    lock: Lock = field(default_factory=Lock)

    @property
    def removing(self) -> bool:
        return self.cluster.meta.deleting

    def allocatable(self) -> Resources | None:
        return self.observed[1] if self.observed is not None else self.cluster.declared()

    def close(self) -> None:
        if self.watch is not None:
            self.watch.stop()
            self.watch = None
        if self.kube is not None and not self.shared:
            self.kube.close()
        self.kube = None
        self.digest = None
        self.installed = None


class ClusterRegistry:
    """Thread-safe map of cluster name → :class:`ClusterState`."""

    def __init__(self) -> None:
        self._lock = Lock()
        self._clusters: dict[str, ClusterState] = {}

    def upsert(self, cluster: SFClusterView) -> ClusterState:
        name = cluster.meta.name
        with self._lock:
            state = self._clusters.get(name)
            if state is None:
                state = self._clusters[name] = ClusterState(name, cluster)
            else:
                state.cluster = cluster
            return state

    def remove(self, name: str) -> None:
        with self._lock:
            state = self._clusters.pop(name, None)
        if state is not None:
            state.close()

    def get(self, name: str) -> ClusterState | None:
        with self._lock:
            return self._clusters.get(name)

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._clusters)

    def close(self) -> None:
        for name in self.names():
            self.remove(name)

    def views(self, ledger: Ledger, requests_of: Callable[[str], Resources]) -> list[ClusterView]:
        """The scheduler's picture of every cluster, from memory only."""
        with self._lock:
            states = list(self._clusters.values())
        views = []
        for state in states:
            views.append(
                ClusterView(
                    name=state.name,
                    labels=dict(state.cluster.meta.labels),
                    reachable=bool(state.reachable),
                    removing=state.removing,
                    instances=ledger.count(state.name),
                    allocatable=state.allocatable(),
                    used=used_by(state, ledger, requests_of),
                    limit_percentage=state.cluster.limit_percentage,
                    reason=state.reason or ("not probed yet" if state.reachable is None else ""),
                )
            )
        return views


def used_by(state: ClusterState, ledger: Ledger, requests_of: Callable[[str], Resources]) -> Resources:
    """Requests in use: the plans' requests of the instances placed there, or the pods' where larger.

    Both views count the same workloads, so they are never added up.
    """
    planned = ledger.requested(state.name, requests_of)
    if state.observed is None:
        return planned
    return quantities.largest(planned, state.observed[2])


class CatalogReplicator:
    """Copies the master's SFServices and SFPlans into sister clusters (only what changed)."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self._lock = Lock()
        self._bodies: dict[tuple[str, str], ReplicaView] = {}

    def observe(self, plural: str, event_type: str, body: JsonObject) -> bool:
        """Remember a catalog event; True if it concerns the control-plane namespace."""
        entry = ReplicaView.of(body)
        if entry.meta.namespace != self.namespace:
            return False
        with self._lock:
            if event_type == "DELETED":
                self._bodies.pop((plural, entry.meta.name), None)
            else:
                self._bodies[(plural, entry.meta.name)] = entry
        return True

    def bodies(self) -> dict[tuple[str, str], ReplicaView]:
        with self._lock:
            return dict(self._bodies)

    def replicate(self, state: ClusterState, only: Iterable[JsonObject] | None = None) -> None:
        """Apply what the cluster lacks; without ``only`` also delete copies the master no longer has."""
        kube = state.kube
        if kube is None or state.name == MASTER:
            return
        bodies = self.bodies()
        if only is not None:
            entries = [ReplicaView.of(b) for b in only]
            wanted = {(_plural(e), e.meta.name): e for e in entries if e.meta.namespace == self.namespace}
        else:
            wanted = bodies
        with state.lock:
            for key, body in sorted(wanted.items()):
                copy = replicas.copy_of(body)
                digest = spec_hash({"metadata": copy["metadata"], "spec": copy["spec"]})  # the manifest written
                if state.catalog.get(key) == digest:
                    continue
                kube.ensure_namespace(self.namespace)
                kube.apply(copy)
                state.catalog[key] = digest
            if only is not None:
                return
            for key in sorted(set(state.catalog) - set(bodies)):
                plural, name = key
                kind = "SFService" if plural == "sfservices" else "SFPlan"
                ref = ResourceRef(api_version=f"{_GROUP}/v1alpha1", kind=kind, name=name, namespace=self.namespace)
                live = kube.get(ref)
                if live is not None and ReplicaView.of(live).meta.labels.get(LABEL_REPLICATED) == "true":
                    kube.delete(ref)
                state.catalog.pop(key, None)


_GROUP = "osb.servicefabrik.io"


def _plural(entry: ReplicaView) -> str:
    return "sfservices" if entry.kind == "SFService" else "sfplans"


class ClusterReconciler(ShowsFailuresOnObject, ObservePlanAct[ClusterFacts, Any]):
    kind: ClassVar[str] = "cluster"

    def __init__(
        self,
        deps: Deps,
        registry: ClusterRegistry,
        ledger: Ledger,
        replicator: CatalogReplicator,
        requests_of: Callable[[str], Resources],
        enqueue_master: Callable[[Key], None],
        suspect: Callable[[str, str], None],
        *,
        loop: Callable[[], asyncio.AbstractEventLoop | None] = lambda: None,
    ) -> None:
        """``loop``: the controller's, where the sisters' watches run (None, as a reconciler without a runtime has
        it in tests: the sisters are not watched)."""
        self.deps = deps
        self.loop = loop
        self.registry = registry
        self.ledger = ledger
        self.replicator = replicator
        self.requests_of = requests_of
        self.enqueue_master = enqueue_master
        self.suspect = suspect
        self.executor = Executor(
            Target(deps.kube, CLUSTERS, self.kind),
            effects={Replicate: self._replicate, Unregister: self._unregister},
        )

    @property
    def namespace(self) -> str:
        return self.deps.settings.namespace

    def observe(self, key: Key) -> ClusterFacts | None:
        """Read the SFCluster, connect to the cluster and probe it (the registry keeps the connection)."""
        body = self.deps.kube.get_custom(CLUSTERS, self.namespace, key.name)
        if body is None:
            return None
        state = self.registry.upsert(SFClusterView.of(body))
        self.refresh(state)
        remaining = tuple(self.ledger.members(state.name)) if state.removing else None
        self.converge_controller(state, blocked=bool(remaining))
        return ClusterFacts(
            name=state.name,
            cluster=state.cluster,
            reachable=state.reachable,
            reason=state.reason,
            observed=state.observed,
            instances=self.ledger.count(state.name),
            used=used_by(state, self.ledger, self.requests_of),
            remaining=remaining,
            probe_seconds=self.deps.settings.cluster_probe_seconds,
            refused=state.refused,
            install=state.install,
            controller_pending=state.controller_pending,
            now=self.deps.clock.now(),
        )

    def gone(self, key: Key) -> Outcome:
        self.registry.remove(key.name)
        return DONE

    def reread(self, key: Key) -> None:
        """A guarded write conflicted: the next observe reads the SFCluster from the API, not a cached copy."""
        self.deps.kube.store.stale(CLUSTERS.store_key, self.namespace, key.name)

    @staticmethod
    def plan(facts: ClusterFacts) -> Sequence[Any]:
        return cluster_plan.plan(facts)

    def act(self, facts: ClusterFacts, actions: Sequence[Any]) -> Outcome:
        return self.executor.run(Key(self.kind, self.namespace, facts.name), facts.cluster.wire, actions)

    def _replicate(self, run: Run, _: Replicate) -> None:
        state = self.registry.get(run.key.name)
        if state is None:
            return
        try:
            self.replicator.replicate(state)
        except Exception as exc:  # a sister without our CRDs, say: reported, retried at the next probe
            logger.warning("replicating the catalog into cluster %s failed: %s", run.key.name, describe(exc))

    def _unregister(self, run: Run, _: Unregister) -> None:
        self.registry.remove(run.key.name)

    # -- the controller in the sister (issue 29) --------------------------------------------------------

    def converge_controller(self, state: ClusterState, *, blocked: bool) -> None:
        """Install, upgrade or remove the controller in the cluster as ``spec.controller`` and the SFCluster's
        life say; the outcome lands in ``state.install`` (and the status, through :func:`cluster_status`).

        The master's own cluster is never touched (its control plane is installed by Pulumi). Applying happens
        when the objects' digest differs from the one applied through this connection, so an unchanged cluster
        costs nothing per probe; a failed step is retried at the next probe."""
        if state.name == MASTER:
            return
        wanted_raw = state.cluster.controller
        had = state.cluster.has_condition(ConditionType.CONTROLLER_INSTALLED)
        state.controller_pending = False
        if state.removing:
            if wanted_raw is None or blocked or (state.install is not None and state.install.removed):
                return  # withdrawn during deletion: left in place, the finalizer goes; or instances remain
            self._remove_controller(state, pending_on_failure=True)
            return
        if wanted_raw is None:
            if had and not (state.install is not None and state.install.removed):
                self._remove_controller(state, pending_on_failure=False)
            return
        if not state.reachable or state.kube is None:
            return
        try:
            wanted = SFClusterController.model_validate(wanted_raw)
        except ValueError as exc:
            state.install = Installation(False, Reason.CONTROLLER_INSTALL_FAILED.value, f"spec.controller: {exc}")
            return
        objects = installer.desired(self.namespace, wanted)
        digest = objects_digest(objects)
        if state.installed != digest:
            try:
                count = installer.install(state.kube, self.namespace, objects)
            except InstallError as exc:
                state.installed = None
                state.install = Installation(False, Reason.CONTROLLER_INSTALL_FAILED.value, str(exc))
                logger.warning("installing the controller into cluster %s failed: %s", state.name, exc)
                return
            state.installed = digest
            state.applied = (
                f"image {wanted.image}, {wanted.replicas} replica(s): {count} objects applied (definitions {digest})"
            )
            logger.info("controller %s installed into cluster %s (%s)", wanted.image, state.name, digest)
        self._judge_availability(state)

    def _judge_availability(self, state: ClusterState) -> None:
        """``ControllerInstalled`` once the applied controller's Deployment is available (one GET per probe):
        applied objects whose pods do not run reconcile nothing placed there."""
        assert state.kube is not None
        ref = installer.controller_deployment(self.namespace)
        where = f"Deployment {ref.namespace}/{ref.name}"
        try:
            judged = availability(where, state.kube.get(ref, fresh=True))
        except Exception as exc:  # a failed read: said, and read again at the next probe
            judged = Availability(False, f"{where} could not be read: {describe(exc)}")
        if judged.available:
            state.install = Installation(True, Reason.CONTROLLER_INSTALLED.value, f"{state.applied}; {judged.message}")
        else:
            state.install = Installation(
                False, Reason.CONTROLLER_UNAVAILABLE.value, f"{state.applied}; {judged.message}"
            )

    def _remove_controller(self, state: ClusterState, *, pending_on_failure: bool) -> None:
        if not state.reachable or state.kube is None:
            state.controller_pending = pending_on_failure
            state.install = Installation(
                False,
                Reason.CONTROLLER_REMOVAL_FAILED.value,
                f"the cluster is unreachable: the controller cannot be removed ({state.reason or 'not probed'})",
            )
            return
        try:
            deleted = installer.uninstall(state.kube, self.namespace)
        except InstallError as exc:
            state.controller_pending = pending_on_failure
            state.install = Installation(False, Reason.CONTROLLER_REMOVAL_FAILED.value, str(exc))
            logger.warning("removing the controller from cluster %s failed: %s", state.name, exc)
            return
        state.installed = None
        state.install = Installation(True, Reason.CONTROLLER_INSTALLED.value, "removed", removed=True)
        logger.info("controller removed from cluster %s (%d objects deleted)", state.name, deleted)

    # -- connection and probe ------------------------------------------------------------------------

    def refresh(self, state: ClusterState, *, announce: bool = True) -> None:
        """Connect (if the kubeconfig changed) and probe; a change of reachability re-enqueues its instances
        (unless ``announce`` is off: at start-up the watch events enqueue every instance anyway)."""
        try:
            self._connect(state)
            assert state.kube is not None
            state.kube.probe()
        except KubeconfigRefused as exc:
            state.close()  # whatever client an earlier kubeconfig built goes with it
            self._mark(state, False, str(exc), announce=announce, refused=True)
            return
        except Exception as exc:
            self._mark(state, False, describe(exc), announce=announce)
            return
        try:
            state.observed = state.kube.capacity()
        except Exception as exc:
            logger.warning("reading the nodes of cluster %s failed: %s", state.name, describe(exc))
        loop = self.loop()
        if state.watch is None and not state.shared and loop is not None:
            state.watch = SisterWatch(
                state.name,
                state.kube,
                self.enqueue_master,
                self.suspect,
                retry=self.deps.settings.policies.watches,
            )
            state.watch.start(loop)
        self._mark(state, True, "", announce=announce)

    def _connect(self, state: ClusterState) -> None:
        if state.name == MASTER:
            if state.kube is None:
                state.kube = SisterKube(self.deps.kube.api_client)
                state.shared = True
            return
        ref = state.cluster.secret_ref
        secret = self.deps.kube.read_secret(self.namespace, ref)
        if secret is None:
            raise KubeconfigError(f"the kubeconfig Secret {self.namespace}/{ref} does not exist")
        encoded = SecretView.of(secret).data.get(KUBECONFIG_KEY)
        if not encoded:
            raise KubeconfigError(f"the Secret {self.namespace}/{ref} has no key {KUBECONFIG_KEY!r}")
        text = base64.b64decode(encoded).decode("utf-8", errors="replace")
        digest = digest_of(text)
        if digest == state.digest and state.kube is not None:
            return
        state.close()
        state.kube = SisterKube(client_from_kubeconfig(text), control_plane=self.namespace)
        state.digest = digest
        state.catalog.clear()

    def _mark(
        self, state: ClusterState, reachable: bool, reason: str, *, announce: bool, refused: bool = False
    ) -> None:
        flipped = state.reachable is not reachable
        state.reachable, state.reason, state.refused = reachable, reason, refused
        if not flipped:
            return
        if reachable:
            logger.info("cluster %s is reachable", state.name)
            state.catalog.clear()  # it may have been rebuilt meanwhile: compare everything again
            if state.kube is not None:
                state.kube.forget_namespaces()
        else:
            logger.warning("cluster %s is unreachable: %s", state.name, reason)
        if announce:
            for key in self.ledger.members(state.name):
                self.enqueue_master(key)
