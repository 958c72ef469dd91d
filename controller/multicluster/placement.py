"""The master's side of an instance or binding when multi-cluster is on: schedule, hand over, mirror back.

The instance and binding reconcilers read its facts in their observe (``Deps.placement``); their pure plans
branch on them first: the object is reconciled right here (placed on cluster ``"1"``, the master itself) or
placement decides, and the reconciler's one executor performs placement's actions. Per instance:

* **not placed yet** (``spec.clusterId`` empty) and a request is pending: the scheduler picks a cluster
  from memory (:mod:`scheduling`, :mod:`ledger`); the choice goes into ``spec.clusterId`` with a
  ``Scheduled`` condition and an event, or the instance fails with a reason naming, per cluster, the
  constraint that excluded it;
* **placed on a sister**: the master holds the teardown finalizer; a pending request (``in_queue`` /
  ``update``) is handed over — namespace, plan and service first, then the copy (same namespace and name,
  spec as on the master, ``replicated`` label) and its requested state — and the master says
  ``in progress``. From then on the sister's own controller provisions it, and every change of the copy
  (reported by the sister watch) is mirrored into the master status; a binding's credentials Secret is
  copied next to the master binding, which is what the broker reads;
* **deprovision / unbind** on the master deletes the copy; the master object is released once the copy is
  gone (the sister's controller has torn everything down by then). As in one cluster, an instance is not
  deprovisioned while bindings of it exist on the master (it fails with ``BindingsExist`` and resumes when
  the last one is gone), so a cluster never loses its last instance before that instance's bindings;
* **the copy vanished** although nothing was asked (the cluster was rebuilt): the instance fails, saying
  so; an update request hands it over again. It is not re-provisioned silently;
* **cluster out of reach** (probe failed, or no SFCluster of that name): the object gets
  ``ClusterReachable=False`` and a description saying so; its state is kept, nothing is lost, and it is
  reconciled again when the cluster answers.

Observe, plan, act as a branch of the instance's and binding's own: :meth:`MultiClusterPlacement.instance` and
:meth:`~MultiClusterPlacement.binding`, called from the reconcilers' observe, read
:class:`~.core.placement_plan.PlacementFacts` (the master object, the cluster's state, the copy, the scheduler's
choice) and write nothing — the scheduler's reservation in the ledger, in memory, is the one exception (see
:meth:`~MultiClusterPlacement._schedule`); carried in ``InstanceFacts.placement`` / ``BindingFacts.placement``, the
pure :mod:`.core.placement_plan` decides first in ``instance_plan.plan`` / ``binding_plan.plan``; the kind's one
executor (``osb_executor``) runs the actions (the teardown finalizer and status writes guarded; the writes to
sisters and to the master's spec are placement's own effects, here: :meth:`~MultiClusterPlacement.effects`). A
failed call to a sister — reading the copy or writing it — makes the cluster suspect and the reconcile retry
quietly (:meth:`~MultiClusterPlacement.performing`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from opbroker.api.conventions import credentials_secret_name, resource_name
from opbroker.api.osb import OperationState
from opbroker.api.selectors import SelectorError
from opbroker.api.selectors import parse as parse_selector
from opbroker.controller.catalog.catalog import PlanEntry
from opbroker.controller.core.views import BindingView, InstanceView, ObjectView, SecretView
from opbroker.controller.kinds import BINDINGS, INSTANCES
from opbroker.controller.multicluster import quantities
from opbroker.controller.multicluster.clusters import CatalogReplicator, ClusterRegistry, ClusterState, describe
from opbroker.controller.multicluster.core import placement_plan, replicas, scheduling
from opbroker.controller.multicluster.core.ledger import Ledger
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
from opbroker.controller.multicluster.core.scheduling import MASTER, Demand, SchedulerName
from opbroker.controller.multicluster.core.views import ReplicaView
from opbroker.controller.multicluster.quantities import QuantityError, Resources
from opbroker.controller.multicluster.reasons import ANNOTATION_CLUSTER
from opbroker.controller.multicluster.sisters import SisterKube
from opbroker.controller.osb import identities
from opbroker.controller.osb.reconciling import Deps
from opbroker.controller.osb.rendered import inputs_for
from opbroker.controller.runtime.concurrency import Event, Lock
from opbroker.controller.runtime.executor import Effect, Run
from opbroker.controller.runtime.failures import server_failing
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.kube import Kind, KubeError
from opbroker.controller.runtime.outcomes import TemporaryError
from opbroker.rendering import RenderError

logger = logging.getLogger(__name__)


class Gone(TemporaryError):
    """The master object vanished in the middle of an action list: the rest is not run; the retry finds it gone."""

    def __init__(self, key: Key) -> None:
        super().__init__(f"{key.kind} {key.namespace}/{key.name} is gone")


class SchedulingError(Exception):
    """The instance cannot be scheduled for a reason of its own (selector, requests); the message says why."""


class MultiClusterPlacement:
    def __init__(
        self,
        deps: Deps,
        registry: ClusterRegistry,
        ledger: Ledger,
        replicator: CatalogReplicator,
        requests_of: Callable[[str], Resources],
        suspect: Callable[[str, str], None],
        ready: Event,
    ) -> None:
        self.deps = deps
        self.registry = registry
        self.ledger = ledger
        self.replicator = replicator
        self.requests_of = requests_of
        self.suspect = suspect
        self.ready = ready
        self.policy = SchedulerName(deps.settings.scheduler)
        self.previous: str | None = None
        self._decisions = Lock()

    def effects(self, kind: Kind) -> Mapping[type, Effect]:
        """Placement's own actions on the objects of ``kind``, for the kind's one executor (``osb_executor``; the
        credentials Secret's writes are the OSB effects')."""
        return {
            SetCluster: self._set_cluster,
            AnnotateCluster: self._annotate_cluster,
            ReplicateCatalog: lambda run, action: self.replicator.replicate(
                self._state(action.cluster), only=[dict(b) for b in action.bodies]
            ),
            HandOver: lambda run, action: self._hand_over(run, kind, action),
            DeleteCopy: lambda run, action: self._delete_copy(run, kind, action),
        }

    def performing(self, facts: PlacementFacts) -> AbstractContextManager[None]:
        """Around the act of placement's actions: a failed call (to the sister, or to the master while working
        for an object placed on one) makes the cluster suspect and the reconcile retry, as when reading it."""
        return self._sister_calls(facts.cluster)

    # -- instances -----------------------------------------------------------------------------------

    def instance(self, instance: InstanceView) -> PlacementFacts:
        """Observe: what placing the instance depends on (the scheduler asked when it is to be placed)."""
        facts = self._facts("instance", ReplicaView.of(instance.wire))
        if facts.ready and facts.cluster is None and not facts.here and placement_plan.needs_schedule(facts.obj):
            facts = self._schedule(facts)
        elif facts.reach is not None and facts.reach.reachable and facts.meta.deleting:
            facts = _with(facts, live_bindings=self._live_bindings(facts.obj))
        return self._read(facts, self._instance_reads)

    def _instance_reads(self, facts: PlacementFacts) -> PlacementFacts:
        """The sister's copy and the catalog a hand-over needs."""
        entry = self.deps.catalog.plan(facts.obj.plan_id)
        service = self._service_of(entry)
        return _with(
            facts,
            copy=self._copy(facts, INSTANCES),
            plan_known=entry is not None and entry.model is not None,
            catalog=tuple(e.body for e in (entry, service) if e is not None),
        )

    def _schedule(self, facts: PlacementFacts) -> PlacementFacts:
        """Ask the scheduler, and reserve its choice in the ledger at once, so concurrent decisions see it: the
        one thing observing changes, and only in memory. The choice and its reservation are made under one lock;
        reserving when the spec is written (in act) would let two workers pick the same last room. The plan
        always acts on the choice (``SetCluster``); an instance gone meanwhile drops the reservation there."""
        entry = self.deps.catalog.plan(facts.obj.plan_id)
        if entry is None or entry.model is None:
            return _with(facts, plan_known=False)
        try:
            demand = self._demand(facts.obj, entry)
        except SchedulingError as exc:
            return _with(facts, scheduling=Scheduling(None, str(exc)))
        with self._decisions:
            views = self.registry.views(self.ledger, self.requests_of)
            decision = scheduling.schedule(self.policy, views, demand, previous=self.previous)
            if decision.cluster is not None:
                self.ledger.observe(facts.key, decision.cluster, entry.model.spec.id)
                self.previous = decision.cluster
        return _with(facts, scheduling=Scheduling(decision.cluster, decision.message, self.policy.value))

    def _live_bindings(self, instance: ReplicaView) -> int:
        name = instance.meta.name
        ids = {instance.instance_ref or name, name}
        bindings = self.deps.kube.list_custom(BINDINGS, instance.meta.namespace)
        return sum(1 for b in bindings if ReplicaView.of(b).instance_ref in ids)

    def _demand(self, instance: ReplicaView, entry: PlanEntry) -> Demand:
        assert entry.model is not None
        selector = None
        if self.policy in (SchedulerName.LABEL_SELECTOR, SchedulerName.CAPACITY_AWARE):
            try:
                rendered = self.deps.renderer.render_cluster_selector(
                    entry.model,
                    inputs_for(self.deps, instance=InstanceView.of(instance.wire), plan=entry, registry=None),
                )
                selector = parse_selector(rendered)
            except (RenderError, SelectorError) as exc:
                raise SchedulingError(f"the plan's clusterSelector is unusable: {exc}") from exc
        requests: Resources = {}
        if self.policy is SchedulerName.CAPACITY_AWARE:
            try:
                requests = plan_requests(entry)
            except QuantityError as exc:
                raise SchedulingError(f"the plan's context.requests are not quantities: {exc}") from exc
        return Demand(selector=selector, requests=requests) if selector is not None else Demand(requests=requests)

    def _service_of(self, entry: PlanEntry | None) -> Any:
        """The plan's service (only copied with a usable plan: without one nothing is handed over)."""
        if entry is None or entry.model is None:
            return None
        return self.deps.catalog.service(entry.model.spec.service_id)

    # -- bindings ------------------------------------------------------------------------------------

    def binding(self, binding: BindingView, instance: InstanceView | None) -> PlacementFacts:
        """Observe: what placing the binding depends on (``instance``: its instance, as the reconciler read it)."""
        found = None if instance is None else ReplicaView.of(instance.wire)
        facts = self._facts("binding", ReplicaView.of(binding.wire), found)
        return self._read(facts, self._binding_reads)

    def _binding_reads(self, facts: PlacementFacts) -> PlacementFacts:
        """The sister's copy, its instance's copy (while handing over) and the credentials it bound."""
        meta = facts.meta
        kube = self._sister(facts.cluster)
        copy = self._copy(facts, BINDINGS)
        instance_copied = True
        if not meta.deleting and replicas.pending(facts.obj):
            instance_name = resource_name(facts.obj.instance_ref)
            instance_copied = kube.get_custom(INSTANCES, meta.namespace, instance_name) is not None
        source_name = placement_plan.source_secret_name(copy)
        secret = kube.read_secret(meta.namespace, source_name) if source_name else None
        source = None if secret is None else SecretView.of(secret)
        entry = self.deps.catalog.plan(facts.obj.plan_id)
        user = identities.plan_user(entry.body, self.deps.settings) if entry is not None else None
        credentials = None
        if meta.deleting or source is not None:  # to delete, or to write over: the plan decides on it as read
            door = self.deps.door(None if meta.deleting else user)
            name = credentials_secret_name(meta.name)
            credentials = ObjectView.maybe(door.read_secret(meta.namespace, name, stored=True))
        return _with(
            facts, copy=copy, instance_copied=instance_copied, source=source, plan_user=user, credentials=credentials
        )

    # -- shared steps ----------------------------------------------------------------------------------

    def _facts(self, kind: str, obj: ReplicaView, instance: ReplicaView | None = None) -> PlacementFacts:
        """What is known without asking a sister: the object, where it is placed, whether that cluster answers
        (a binding's: its instance's ``instance``)."""
        settings = self.deps.settings
        policies = settings.policies
        key = Key(kind, obj.meta.namespace, obj.meta.name)
        facts = PlacementFacts(
            key, obj, self.ready.is_set(), poll_seconds=settings.status_poll_seconds,
            probe_seconds=settings.cluster_probe_seconds,
            not_ready_in=policies.delay(policies.placement_not_ready),
            handover_in=policies.delay(policies.placement_handover), now=self.deps.clock.now(),
        )  # fmt: skip
        if not facts.ready:
            return facts
        if kind == "instance":
            cluster = obj.cluster_id
            here = placement_plan.reconciled_here(obj)
        else:
            cluster = facts.meta.annotations.get(ANNOTATION_CLUSTER) or (
                None if instance is None else instance.cluster_id
            )
            here = instance is not None and placement_plan.reconciled_here(instance)
        if cluster is None or cluster == MASTER:
            return _with(facts, cluster=cluster, here=here)
        state = self.registry.get(cluster)
        if state is None:
            reach = Reach(registered=False, reachable=False)
        else:
            reach = Reach(True, bool(state.reachable) and state.kube is not None, state.reason)
        return _with(facts, cluster=cluster, here=here, reach=reach)

    def _read(self, facts: PlacementFacts, reads: Callable[[PlacementFacts], PlacementFacts]) -> PlacementFacts:
        """Complete ``facts`` with what the sister holds, when it answers (a failed read: suspect, retried)."""
        with self._sister_calls(facts.cluster):
            if facts.reach is not None and facts.reach.reachable:
                facts = reads(facts)
        return facts

    def _copy(self, facts: PlacementFacts, kind: Kind) -> ReplicaView | None:
        body = self._sister(facts.cluster).get_custom(kind, facts.key.namespace, facts.key.name)
        return None if body is None else ReplicaView.of(body)

    def _sister(self, cluster: str | None) -> SisterKube:
        """The door to ``cluster`` (it answered the last probe; gone since: retried)."""
        kube = self._state(cluster).kube
        assert kube is not None
        return kube

    def _state(self, cluster: str | None) -> ClusterState:
        state = self.registry.get(cluster) if cluster else None
        if state is None or state.kube is None:
            raise TemporaryError(f"cluster {cluster!r} is not connected")
        return state

    @contextmanager
    def _sister_calls(self, cluster: str | None) -> Iterator[None]:
        """A failed call to a sister makes the cluster suspect (probed at once) and the reconcile retry."""
        try:
            yield
        except Exception as exc:
            if cluster is None or cluster == MASTER:
                raise
            if server_failing(exc):
                self.suspect(cluster, describe(exc))
                raise TemporaryError(f"cluster {cluster!r} did not answer: {describe(exc)}") from exc
            if isinstance(exc, KubeError):
                raise TemporaryError(f"cluster {cluster!r}: {exc}") from exc
            raise

    # -- effects: placement's own writes -------------------------------------------------------------

    def _set_cluster(self, run: Run, action: SetCluster) -> None:
        version = ReplicaView.of(run.body).meta.resource_version
        patch = {"spec": {"clusterId": action.cluster}, "metadata": {"resourceVersion": version}}
        written = run.guarded(lambda: self.deps.kube.patch_custom(INSTANCES, run.key.namespace, run.key.name, patch))
        if written is None:
            self.ledger.forget(run.key)  # gone meanwhile: the reservation goes with it, and nothing more is done
            raise Gone(run.key)
        run.replace(written)

    def _annotate_cluster(self, run: Run, action: AnnotateCluster) -> None:
        patch = {"metadata": {"annotations": {ANNOTATION_CLUSTER: action.cluster}}}
        written = self.deps.kube.patch_custom(BINDINGS, run.key.namespace, run.key.name, patch)
        if written is None:
            raise Gone(run.key)  # nothing is handed over for a binding that no longer exists
        run.replace(written)

    def _hand_over(self, run: Run, kind: Kind, action: HandOver) -> None:
        kube = self._sister(action.cluster)
        kube.ensure_namespace(run.key.namespace)
        kube.apply(dict(action.copy))
        kube.patch_custom_status(kind, run.key.namespace, run.key.name, {"state": action.state})

    def _delete_copy(self, run: Run, kind: Kind, action: DeleteCopy) -> None:
        kube = self._sister(action.cluster)
        if action.deprovision:
            kube.patch_custom_status(kind, run.key.namespace, run.key.name, {"state": OperationState.DELETE.value})
        kube.delete_custom(kind, run.key.namespace, run.key.name, uid=action.uid)


def _with(facts: PlacementFacts, **changes: Any) -> PlacementFacts:
    return dataclasses.replace(facts, **changes)


def plan_requests(entry: PlanEntry) -> Resources:
    """The plan's ``context.requests`` (what one instance needs, for capacity-aware scheduling)."""
    assert entry.model is not None
    raw = (entry.model.spec.context or {}).get("requests")
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise QuantityError(f"requests must be a map of resource to quantity, not {type(raw).__name__}")
    return quantities.parse(raw)
