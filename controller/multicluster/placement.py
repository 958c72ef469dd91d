"""The master's side of an instance or binding when multi-cluster is on: schedule, hand over, mirror back.

Called by the instance and binding reconcilers first thing (``Deps.placement``); returns None when the
object is reconciled right here (placed on cluster ``"1"``, the master itself), otherwise does the work
and returns the queue's outcome. Per instance:

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
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from kubernetes.client.exceptions import ApiException

from opbroker.api.conventions import FINALIZER, credentials_secret_name, resource_name
from opbroker.api.osb import OperationState
from opbroker.api.selectors import SelectorError
from opbroker.api.selectors import parse as parse_selector
from opbroker.controller import identities
from opbroker.controller.bindings import delete_credentials
from opbroker.controller.catalog import PlanEntry
from opbroker.controller.core import finalizers
from opbroker.controller.core.decisions import TERMINAL, is_deleting
from opbroker.controller.core.reasons import Reason
from opbroker.controller.kube import BINDINGS, INSTANCES, Kind, KubeError
from opbroker.controller.multicluster import quantities
from opbroker.controller.multicluster.clusters import CatalogReplicator, ClusterRegistry, ClusterState, describe
from opbroker.controller.multicluster.core import replicas, scheduling
from opbroker.controller.multicluster.core.ledger import Ledger
from opbroker.controller.multicluster.core.scheduling import MASTER, Demand, SchedulerName
from opbroker.controller.multicluster.quantities import QuantityError, Resources
from opbroker.controller.multicluster.reasons import ANNOTATION_CLUSTER, ANNOTATION_MASTER_UID, ConditionType
from opbroker.controller.reconciler import DONE, Key, Outcome, TemporaryError
from opbroker.controller.reconciler.failures import server_failing
from opbroker.controller.reconciling import Deps, StatusWriter
from opbroker.controller.rendered import inputs_for
from opbroker.rendering import RenderError

logger = logging.getLogger(__name__)

#: How soon a reconcile waiting for the controller's start-up (first list, first probes) looks again.
NOT_READY_DELAY = 0.2


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
        ready: threading.Event,
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
        self._decisions = threading.Lock()
        self.instances = StatusWriter(deps, INSTANCES)
        self.bindings = StatusWriter(deps, BINDINGS)

    # -- instances -----------------------------------------------------------------------------------

    def instance(self, instance: dict[str, Any]) -> Outcome | None:
        if not self.ready.is_set():  # nothing is decided before the start-up picture (catalog, clusters) is whole
            return Outcome(requeue_after=NOT_READY_DELAY)
        cluster = (instance.get("spec") or {}).get("clusterId") or None
        if cluster == MASTER or (cluster is None and _reconciled_here(instance)):
            return None
        if cluster is None:
            return self._unscheduled(instance)
        state = self._reachable(instance, cluster, self.instances)
        if state is None:
            return Outcome(requeue_after=self.deps.settings.cluster_probe_seconds)
        with self._guard(cluster):
            if is_deleting(instance):
                live = self._live_bindings(instance)
                if live:  # as in one cluster: no deprovision under live bindings (a binding's removal re-enqueues)
                    return self._blocked(instance, live)
                return self._teardown(instance, state, INSTANCES, self.instances, fields=replicas.INSTANCE_FIELDS)
            self._hold(instance, INSTANCES)
            return self._instance_on(instance, state)

    def _live_bindings(self, instance: dict[str, Any]) -> int:
        meta = instance["metadata"]
        ids = {(instance.get("spec") or {}).get("instanceId") or meta["name"], meta["name"]}
        bindings = self.deps.kube.list_custom(BINDINGS, meta["namespace"])
        return sum(1 for b in bindings if (b.get("spec") or {}).get("instanceId") in ids)

    def _blocked(self, instance: dict[str, Any], live: int) -> Outcome:
        error = f"cannot deprovision: {live} binding(s) still exist; unbind them first"
        status = instance.get("status") or {}
        if status.get("state") != OperationState.FAILED.value or status.get("error") != error:
            self.instances.transition(instance, state=OperationState.FAILED, reason=Reason.BINDINGS_EXIST, error=error)
        return DONE

    def _unscheduled(self, instance: dict[str, Any]) -> Outcome | None:
        if is_deleting(instance):
            self._release(instance, INSTANCES)  # never placed anywhere: nothing to tear down
            return DONE
        if not replicas.pending(instance):
            return DONE  # a scheduling failure stays until the next request
        entry = self.deps.catalog.plan((instance.get("spec") or {}).get("planId", ""))
        if entry is None or entry.model is None:
            return None  # the local reconciler reports the plan problem; it never applies without a plan
        meta = instance["metadata"]
        key = Key("instance", meta["namespace"], meta["name"])
        try:
            demand = self._demand(instance, entry)
        except SchedulingError as exc:
            return self._unschedulable(instance, str(exc))
        with self._decisions:
            views = self.registry.views(self.ledger, self.requests_of)
            decision = scheduling.schedule(self.policy, views, demand, previous=self.previous)
            if decision.cluster is not None:
                self.ledger.observe(key, decision.cluster, entry.body["spec"]["id"])
                self.previous = decision.cluster
        if decision.cluster is None:
            return self._unschedulable(instance, decision.message)
        patched = self.deps.kube.patch_custom(
            INSTANCES,
            meta["namespace"],
            meta["name"],
            {"spec": {"clusterId": decision.cluster}, "metadata": {"resourceVersion": meta["resourceVersion"]}},
        )
        if patched is None:
            self.ledger.forget(key)
            return DONE
        message = f"{decision.message} by the {self.policy.value} scheduler"
        conditions = replicas.set_condition(
            (patched.get("status") or {}).get("conditions"),
            ConditionType.SCHEDULED,
            status=True,
            reason=Reason.SCHEDULED.value,
            message=message,
            generation=patched["metadata"].get("generation"),
        )
        self.instances.patch(patched, {"conditions": conditions}, guarded=False)
        self.deps.kube.emit_event(patched, reason=Reason.SCHEDULED.value, message=message)
        logger.info("instance %s/%s %s", meta["namespace"], meta["name"], message)
        return Outcome(requeue_after=0.0)

    def _demand(self, instance: dict[str, Any], entry: PlanEntry) -> Demand:
        assert entry.model is not None
        selector = None
        if self.policy in (SchedulerName.LABEL_SELECTOR, SchedulerName.CAPACITY_AWARE):
            try:
                rendered = self.deps.renderer.render_cluster_selector(
                    entry.model, inputs_for(self.deps, instance=instance, plan=entry, registry=None)
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

    def _unschedulable(self, instance: dict[str, Any], message: str) -> Outcome:
        meta = instance["metadata"]
        conditions = (instance.get("status") or {}).get("conditions")
        for kind in (ConditionType.SCHEDULED, ConditionType.READY):
            conditions = replicas.set_condition(
                conditions,
                kind,
                status=False,
                reason=Reason.SCHEDULING_FAILED.value,
                message=message,
                generation=meta.get("generation"),
            )
        before = (instance.get("status") or {}).get("state")
        self.instances.patch(
            instance,
            {
                "state": OperationState.FAILED.value,
                "description": message,
                "error": message,
                "observedGeneration": meta.get("generation"),
                "conditions": conditions,
            },
        )
        if before != OperationState.FAILED.value:
            self.deps.kube.emit_event(instance, reason=Reason.SCHEDULING_FAILED.value, message=message, warning=True)
        logger.warning("instance %s/%s: %s", meta["namespace"], meta["name"], message)
        return DONE

    def _instance_on(self, instance: dict[str, Any], state: ClusterState) -> Outcome | None:
        kube = state.kube
        assert kube is not None
        meta = instance["metadata"]
        copy = kube.get_custom(INSTANCES, meta["namespace"], meta["name"])
        if copy is not None and _stale(copy, instance):
            _delete(kube, INSTANCES, copy)  # left by an earlier instance of the same name: wait until it is gone
            return Outcome(requeue_after=self.deps.settings.status_poll_seconds)
        if replicas.pending(instance):
            entry = self.deps.catalog.plan(instance["spec"].get("planId", ""))
            if entry is None or entry.model is None:
                return None  # the local reconciler reports the plan problem (it applies nothing without a plan)
            bodies = [e.body for e in (entry, self._service_of(entry)) if e is not None]
            self.replicator.replicate(state, only=bodies)
            return self._hand_over(instance, state, INSTANCES, self.instances, copy_exists=copy is not None)
        if copy is None:
            return self._lost(instance, state, self.instances)
        return self._mirror(instance, copy, state, self.instances, fields=replicas.INSTANCE_FIELDS)

    def _service_of(self, entry: PlanEntry | None) -> Any:
        if entry is None:
            return None
        return self.deps.catalog.service((entry.body.get("spec") or {}).get("serviceId", ""))

    # -- bindings ------------------------------------------------------------------------------------

    def binding(self, binding: dict[str, Any]) -> Outcome | None:
        if not self.ready.is_set():
            return Outcome(requeue_after=NOT_READY_DELAY)
        meta = binding["metadata"]
        instance = self.deps.kube.get_custom(
            INSTANCES, meta["namespace"], resource_name((binding.get("spec") or {}).get("instanceId", ""))
        )
        cluster = (meta.get("annotations") or {}).get(ANNOTATION_CLUSTER) or (
            ((instance or {}).get("spec") or {}).get("clusterId") or None
        )
        if cluster == MASTER:
            return None
        if cluster is None:
            if instance is not None and _reconciled_here(instance):
                return None
            if is_deleting(binding):
                self._release(binding, BINDINGS)  # its instance was never placed: nothing to undo anywhere
                return DONE
            return None  # the local reconciler waits for (or fails with) the instance; it applies nothing
        state = self._reachable(binding, cluster, self.bindings)
        if state is None:
            return Outcome(requeue_after=self.deps.settings.cluster_probe_seconds)
        with self._guard(cluster):
            if is_deleting(binding):  # the master's credentials Secret goes with it (owner reference)
                return self._teardown(binding, state, BINDINGS, self.bindings, fields=replicas.BINDING_FIELDS)
            self._hold(binding, BINDINGS)
            return self._binding_on(binding, state)

    def _binding_on(self, binding: dict[str, Any], state: ClusterState) -> Outcome:
        kube = state.kube
        assert kube is not None
        meta = binding["metadata"]
        copy = kube.get_custom(BINDINGS, meta["namespace"], meta["name"])
        if copy is not None and _stale(copy, binding):
            _delete(kube, BINDINGS, copy)
            return Outcome(requeue_after=self.deps.settings.status_poll_seconds)
        if replicas.pending(binding):
            instance_name = resource_name(binding["spec"]["instanceId"])
            if kube.get_custom(INSTANCES, meta["namespace"], instance_name) is None:
                return Outcome(requeue_after=1.0)  # the instance is still being handed over
            if (meta.get("annotations") or {}).get(ANNOTATION_CLUSTER) != state.name:
                patched = self.deps.kube.patch_custom(
                    BINDINGS,
                    meta["namespace"],
                    meta["name"],
                    {"metadata": {"annotations": {ANNOTATION_CLUSTER: state.name}}},
                )
                if patched is None:
                    return DONE
                binding.clear()
                binding.update(patched)
            return self._hand_over(binding, state, BINDINGS, self.bindings, copy_exists=copy is not None)
        if copy is None:
            return self._lost(binding, state, self.bindings)
        if not replicas.settled(copy):
            return Outcome(requeue_after=self.deps.settings.status_poll_seconds)
        theirs = copy.get("status") or {}
        if theirs.get("state") == OperationState.SUCCEEDED.value:
            source_name = (theirs.get("response") or {}).get("secretRef")
            source = kube.read_secret(meta["namespace"], source_name) if source_name else None
            if source is None:
                return Outcome(requeue_after=self.deps.settings.status_poll_seconds)
            name = credentials_secret_name(meta["name"])
            # Into the consumer's namespace: as the plan's account, like every credentials Secret (issue 24).
            entry = self.deps.catalog.plan((binding.get("spec") or {}).get("planId", ""))
            user = identities.plan_user(entry.body, self.deps.settings) if entry is not None else None
            self.deps.kube.acting_as(user).apply_secret(replicas.credentials_secret(binding, source, name))
            patch = replicas.mirror(binding, copy, cluster=state.name, fields=replicas.BINDING_FIELDS)
            if ((binding.get("status") or {}).get("response") or {}).get("secretRef") != name:
                patch["response"] = {"secretRef": name}
            self._write(binding, patch, self.bindings)
            return DONE
        return self._mirror(binding, copy, state, self.bindings, fields=replicas.BINDING_FIELDS)

    # -- shared steps ----------------------------------------------------------------------------------

    def _reachable(self, obj: dict[str, Any], cluster: str, writer: StatusWriter) -> ClusterState | None:
        """The cluster's state if it can be worked with; else the object is marked and None returned."""
        state = self.registry.get(cluster)
        if state is None:
            reason, message = Reason.CLUSTER_NOT_REGISTERED, f"cluster {cluster!r} is not registered (no SFCluster)"
        elif not state.reachable or state.kube is None:
            reason = Reason.CLUSTER_UNREACHABLE
            message = f"cluster {cluster!r} is unreachable: {state.reason or 'not probed yet'}"
        else:
            return state
        patch = replicas.unreachable(obj, cluster=cluster, reason=reason, message=message)
        if patch:
            self._write(obj, patch, writer, event=(reason, message))
        return None

    def _guard(self, cluster: str) -> _SisterCalls:
        return _SisterCalls(cluster, self.suspect)

    def _hold(self, obj: dict[str, Any], kind: Kind) -> None:
        meta = obj["metadata"]
        patch = finalizers.adding(meta, FINALIZER)
        if patch is None:
            return
        patched = self.deps.kube.patch_custom(kind, meta["namespace"], meta["name"], patch)
        if patched is not None:
            obj.clear()
            obj.update(patched)

    def _release(self, obj: dict[str, Any], kind: Kind) -> None:
        meta = obj["metadata"]
        patch = finalizers.removing(meta, FINALIZER)
        if patch is not None:
            self.deps.kube.patch_custom(kind, meta["namespace"], meta["name"], patch)

    def _hand_over(
        self, obj: dict[str, Any], state: ClusterState, kind: Kind, writer: StatusWriter, *, copy_exists: bool
    ) -> Outcome:
        """Copy the object and its requested state into the cluster; the master then says in progress."""
        kube = state.kube
        assert kube is not None
        meta = obj["metadata"]
        requested = replicas.requested_state(obj, copy_exists=copy_exists)
        kube.ensure_namespace(meta["namespace"])
        kube.apply(replicas.copy_of(obj))
        kube.patch_custom_status(kind, meta["namespace"], meta["name"], {"state": requested})
        message = f"handed to cluster {state.name!r}"
        self._write(obj, replicas.handed_over(obj, cluster=state.name), writer, event=(Reason.REPLICATED, message))
        return Outcome(requeue_after=self.deps.settings.status_poll_seconds)

    def _mirror(
        self,
        obj: dict[str, Any],
        copy: dict[str, Any],
        state: ClusterState,
        writer: StatusWriter,
        *,
        fields: tuple[str, ...],
    ) -> Outcome:
        if not replicas.settled(copy):
            return Outcome(requeue_after=self.deps.settings.status_poll_seconds)
        self._write(obj, replicas.mirror(obj, copy, cluster=state.name, fields=fields), writer)
        if (copy.get("status") or {}).get("state") in TERMINAL:
            return DONE
        return Outcome(requeue_after=self.deps.settings.status_poll_seconds)

    def _lost(self, obj: dict[str, Any], state: ClusterState, writer: StatusWriter) -> Outcome:
        """The copy is gone although the master asked for nothing: the cluster lost it. Said, not redone."""
        message = f"the copy in cluster {state.name!r} has disappeared; a new update request re-creates it"
        meta = obj["metadata"]
        conditions = replicas.set_condition(
            replicas.reachable_condition(obj, state.name),
            ConditionType.READY,
            status=False,
            reason=Reason.CLUSTER_UNREACHABLE.value,
            message=message,
            generation=meta.get("generation"),
        )
        status = obj.get("status") or {}
        patch: dict[str, Any] = {}
        if status.get("state") != OperationState.FAILED.value or status.get("error") != message:
            patch = {"state": OperationState.FAILED.value, "error": message, "description": message}
        if not replicas.same_conditions(conditions, status.get("conditions")):
            patch["conditions"] = conditions
        self._write(obj, patch, writer, event=(Reason.CLUSTER_UNREACHABLE, message))
        return DONE

    def _teardown(
        self, obj: dict[str, Any], state: ClusterState, kind: Kind, writer: StatusWriter, *, fields: tuple[str, ...]
    ) -> Outcome:
        """Delete the copy, report its teardown, release the master object once the copy is gone."""
        kube = state.kube
        assert kube is not None
        meta = obj["metadata"]
        if FINALIZER not in (meta.get("finalizers") or []):
            return DONE
        copy = kube.get_custom(kind, meta["namespace"], meta["name"])
        if copy is not None:
            if not is_deleting(copy):
                kube.patch_custom_status(kind, meta["namespace"], meta["name"], {"state": OperationState.DELETE.value})
                _delete(kube, kind, copy)
            elif replicas.settled(copy):
                self._write(obj, replicas.mirror(obj, copy, cluster=state.name, fields=fields), writer)
            return Outcome(requeue_after=self.deps.settings.status_poll_seconds)
        if kind is BINDINGS:
            delete_credentials(self.deps.kube, obj)
        self._release(obj, kind)
        return DONE

    def _write(
        self,
        obj: dict[str, Any],
        patch: dict[str, Any],
        writer: StatusWriter,
        *,
        event: tuple[Reason, str] | None = None,
    ) -> None:
        """Patch the master status; an Event goes with it when given, or when the state changed."""
        if not patch:
            return
        before = (obj.get("status") or {}).get("state")
        writer.patch(obj, patch)
        after = patch.get("state", before)
        if event is None and after != before:
            event = (Reason.REPLICATED, f"{after} (reported by cluster {_cluster_of(obj)!r})")
        if event is not None:
            reason, message = event
            warning = reason in _WARNINGS or after == OperationState.FAILED.value
            self.deps.kube.emit_event(obj, reason=reason.value, message=message, warning=warning)


_WARNINGS = frozenset({Reason.CLUSTER_UNREACHABLE, Reason.CLUSTER_NOT_REGISTERED, Reason.SCHEDULING_FAILED})


def _cluster_of(obj: dict[str, Any]) -> str | None:
    annotations = obj["metadata"].get("annotations") or {}
    cluster: str | None = (obj.get("spec") or {}).get("clusterId") or annotations.get(ANNOTATION_CLUSTER)
    return cluster


class _SisterCalls:
    """Turns a failed call to a sister into a probe of that cluster and a quiet retry with backoff."""

    def __init__(self, cluster: str, suspect: Callable[[str, str], None]) -> None:
        self.cluster = cluster
        self.suspect = suspect

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, _: Any) -> None:
        if exc is None:
            return
        if server_failing(exc):
            self.suspect(self.cluster, describe(exc))
            raise TemporaryError(f"cluster {self.cluster!r} did not answer: {describe(exc)}") from exc
        if isinstance(exc, KubeError):
            raise TemporaryError(f"cluster {self.cluster!r}: {exc}") from exc


def _reconciled_here(instance: dict[str, Any]) -> bool:
    """An unplaced instance already rendered by this controller (before multi-cluster was switched on)."""
    status = instance.get("status") or {}
    return bool(status.get("resources")) and not (instance.get("spec") or {}).get("clusterId")


def _stale(copy: dict[str, Any], obj: dict[str, Any]) -> bool:
    uid = (copy["metadata"].get("annotations") or {}).get(ANNOTATION_MASTER_UID)
    return uid is not None and uid != obj["metadata"].get("uid")


def _delete(kube: Any, kind: Kind, obj: dict[str, Any]) -> None:
    meta = obj["metadata"]
    try:
        kube.custom.delete_namespaced_custom_object(
            kind.group,
            kind.version,
            meta["namespace"],
            kind.plural,
            meta["name"],
            body={"preconditions": {"uid": meta["uid"]}},
        )
    except ApiException as exc:
        if exc.status not in (404, 409):
            raise


def plan_requests(entry: PlanEntry) -> Resources:
    """The plan's ``context.requests`` (what one instance needs, for capacity-aware scheduling)."""
    assert entry.model is not None
    raw = (entry.model.spec.context or {}).get("requests")
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise QuantityError(f"requests must be a map of resource to quantity, not {type(raw).__name__}")
    return quantities.parse(raw)
