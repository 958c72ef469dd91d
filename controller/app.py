"""The controller process: kopf delivers watch events, a work queue runs level-triggered reconciles.

kopf watches SFService, SFPlan, SFServiceInstance and SFServiceBinding (reconnects, resourceVersions,
login). Its event handlers do nothing but update the in-memory catalog and indexes and enqueue keys;
``kopf.on.event`` is used on purpose: it keeps no progress annotations on our objects (no extra writes).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Hashable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import kopf
import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException
from pydantic import ValidationError

from opbroker.api import SFPlan, SFService
from opbroker.api.conventions import resource_name
from opbroker.api.errors import field_errors
from opbroker.controller import catalog_status, decisions, metrics
from opbroker.controller.bindings import BindingReconciler
from opbroker.controller.catalog import Catalog
from opbroker.controller.claims.handlers import register_claims
from opbroker.controller.instances import InstanceReconciler
from opbroker.controller.kopfparts import EventsOnlyDiffBase, events_only, plain_body
from opbroker.controller.kube import BINDINGS, INSTANCES, PLANS, SERVICES, Kube
from opbroker.controller.multicluster.runtime import MultiCluster
from opbroker.controller.reconciling import Conflict, Deps
from opbroker.controller.settings import ControllerSettings
from opbroker.controller.sources import SourceIndex, SourceWatchers
from opbroker.controller.workqueue import DONE, Outcome, TemporaryError, WorkQueue
from opbroker.rendering import Renderer
from opbroker.rendering.checking import check_plan

logger = logging.getLogger(__name__)


class Controller:
    """Wires the catalog, the reconcilers and the queue; knows nothing about kopf itself."""

    def __init__(self, api_client: client.ApiClient, settings: ControllerSettings) -> None:
        self.settings = settings
        self.kube = Kube(api_client)
        # kopf's watches keep our instances and bindings in the store: reconciles read them from there.
        self.kube.store.feed(INSTANCES.store_key)
        self.kube.store.feed(BINDINGS.store_key)
        self.catalog = Catalog()
        self.index = SourceIndex()
        self.queue: WorkQueue | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.watchers = SourceWatchers(self.kube, self.index, self._enqueue_threadsafe)
        self.renderer = Renderer()
        deps = Deps(self.kube, self.catalog, self.renderer, settings, self.index, self.watchers)
        self.own_writes = deps.own_writes
        self.multicluster = MultiCluster(deps, self._enqueue_threadsafe) if settings.multicluster else None
        if self.multicluster is not None:
            deps = dataclasses.replace(deps, placement=self.multicluster.placement)
        self.instances = InstanceReconciler(deps)
        self.bindings = BindingReconciler(deps)
        self._plan_members: dict[str, set[Hashable]] = {}
        self._instance_bindings: dict[Hashable, set[Hashable]] = {}
        self._fingerprints: dict[Hashable, tuple[Any, ...]] = {}

    # -- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> None:
        self.load_catalog()
        self.loop = asyncio.get_running_loop()
        # Reconciles run their blocking API calls in threads: one per worker (asyncio's default pool is
        # only cpu+4 threads, which would silently cap the workers).
        self.loop.set_default_executor(ThreadPoolExecutor(self.settings.workers, thread_name_prefix="reconcile"))
        queue = self.queue = WorkQueue(self._reconcile, workers=self.settings.workers)
        metrics.WORKQUEUE_DEPTH.set_function(lambda: queue.depth)
        metrics.WORKQUEUE_IN_FLIGHT.set_function(lambda: queue.in_flight)
        queue.start()
        if self.multicluster is not None:
            self.multicluster.start()

    def load_catalog(self) -> None:
        """Read every SFService and SFPlan once, before the first reconcile.

        kopf watches each kind in a stream of its own, so after a (re)start an instance's event can arrive
        before its plan's; reconciled then, the instance would be failed with "plan not in the catalog"
        (the reliability suite's controller kills found three). The watches keep the catalog current after.
        """
        for body in self.kube.list_custom(SERVICES, None):
            self.catalog.upsert_service(body)
        for body in self.kube.list_custom(PLANS, None):
            self.catalog.upsert_plan(body)

    async def stop(self) -> None:
        self.watchers.stop()
        if self.multicluster is not None:
            await self.multicluster.stop()
        if self.queue is not None:
            await self.queue.stop()

    # -- events --------------------------------------------------------------------------------------

    def _enqueue(self, key: Hashable) -> None:
        if self.queue is not None:
            self.queue.add(key)

    def _enqueue_threadsafe(self, key: Hashable) -> None:
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self._enqueue, key)

    def on_service(self, event_type: str, body: dict[str, Any]) -> None:
        if event_type == "DELETED":
            self.catalog.remove_service(body)
        else:
            self.catalog.upsert_service(body)
            self._enqueue_unreported("service", body)
        if self.multicluster is not None:
            self.multicluster.on_catalog("sfservices", event_type, body)

    def _enqueue_unreported(self, kind: str, body: dict[str, Any]) -> None:
        """Queue a catalog entry whose Ready condition does not yet speak of its current generation."""
        meta, status = body["metadata"], body.get("status") or {}
        reported = any(c.get("type") == "Ready" for c in status.get("conditions") or [])
        if not reported or status.get("observedGeneration") != meta.get("generation"):
            self._enqueue((kind, meta.get("namespace", ""), meta["name"]))

    def on_plan(self, event_type: str, body: dict[str, Any]) -> None:
        if event_type == "DELETED":
            self.catalog.remove_plan(body)
        else:
            self.catalog.upsert_plan(body)
            self._enqueue_unreported("plan", body)
        if self.multicluster is not None:
            self.multicluster.on_catalog("sfplans", event_type, body)
        plan_id = (body.get("spec") or {}).get("id") or body["metadata"]["name"]
        for key in sorted(self._plan_members.get(plan_id, set()), key=str):
            self._enqueue(key)

    def on_instance(self, event_type: str, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        key: Hashable = ("instance", meta["namespace"], meta["name"])
        plan_id = (body.get("spec") or {}).get("planId", "")
        if self.multicluster is not None:
            self.multicluster.on_instance(event_type, body)
        for members in self._plan_members.values():
            members.discard(key)
        self._store(INSTANCES.store_key, event_type, body)
        if event_type == "DELETED":
            self.index.forget(key)
            self.own_writes.forget(key)
            self._fingerprints.pop(key, None)
            self._instance_bindings.pop(key, None)
            if self.queue:
                self.queue.forget(key)
            return
        self._plan_members.setdefault(plan_id, set()).add(key)
        if self._worth_a_reconcile(key, body):
            self._enqueue(key)
        for binding in self._instance_bindings.get(key, set()):
            self._enqueue(binding)
        metrics.observe_state("instance", key, (body.get("status") or {}).get("state") or "none")

    def on_binding(self, event_type: str, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        key: Hashable = ("binding", meta["namespace"], meta["name"])
        instance_key: Hashable = (
            "instance",
            meta["namespace"],
            resource_name((body.get("spec") or {}).get("instanceId", "")),
        )
        self._store(BINDINGS.store_key, event_type, body)
        if event_type == "DELETED":
            self.index.forget(key)
            self.own_writes.forget(key)
            self._fingerprints.pop(key, None)
            self._instance_bindings.get(instance_key, set()).discard(key)
            if self.queue:
                self.queue.forget(key)
            self._enqueue(instance_key)  # a deprovision may have been waiting for this binding to go
            metrics.observe_state("binding", key, None)
            return
        self._instance_bindings.setdefault(instance_key, set()).add(key)
        if self._worth_a_reconcile(key, body):
            self._enqueue(key)
        metrics.observe_state("binding", key, (body.get("status") or {}).get("state") or "none")

    def _store(self, type_key: tuple[str, str], event_type: str, body: dict[str, Any]) -> None:
        """Keep the store current — before anything is enqueued, so a reconcile never reads older."""
        if event_type == "DELETED":
            self.kube.store.remove(type_key, body)
        else:
            self.kube.store.put(type_key, body)

    def _worth_a_reconcile(self, key: Hashable, body: dict[str, Any]) -> bool:
        """False for events that change nothing a reconcile decides on.

        Our own writes (their reconcile already decided what comes next), and changes that leave the spec
        generation, the requested state, deletion and our finalizer as they were — such as the broker
        recording ``lastOperation`` after the controller had already started.
        """
        meta = body["metadata"]
        seen = decisions.fingerprint(body)
        previous = self._fingerprints.get(key)
        self._fingerprints[key] = seen
        if self.own_writes.caused(key, meta.get("resourceVersion")):
            return False
        return previous != seen

    # -- reconciling ---------------------------------------------------------------------------------

    async def _reconcile(self, key: Hashable) -> Outcome:
        assert isinstance(key, tuple)
        kind, namespace, name = key
        if kind in ("plan", "service"):
            return await asyncio.to_thread(self._report_catalog_status, kind, namespace, name)
        reconciler = self.instances if kind == "instance" else self.bindings
        stored = INSTANCES if kind == "instance" else BINDINGS
        with metrics.reconcile_timer(kind):
            try:
                return await asyncio.to_thread(reconciler.reconcile, namespace, name)
            except urllib3.exceptions.HTTPError as exc:
                # The API server is unreachable (restarting, a cut connection): expected, retried with
                # backoff, one line in the log instead of a traceback per reconcile.
                metrics.RECONCILE_ERRORS.labels(kind=kind, reason="unreachable").inc()
                raise TemporaryError(f"the API server did not answer ({type(exc).__name__})") from exc
            except (Conflict, ApiException) as exc:
                if isinstance(exc, ApiException) and exc.status != 409:
                    if exc.status in (429, 500, 502, 503, 504):
                        metrics.RECONCILE_ERRORS.labels(kind=kind, reason="unavailable").inc()
                        raise TemporaryError(f"the API server answered HTTP {exc.status}") from exc
                    raise
                # Someone (the broker, usually) changed the object between our read and write: read it
                # again, from the API (the store may not have seen that change yet).
                self.kube.store.discard(stored.store_key, namespace, name)
                metrics.RECONCILE_ERRORS.labels(kind=kind, reason="conflict").inc()
                return Outcome(requeue_after=0.05)
            except Exception:
                metrics.RECONCILE_ERRORS.labels(kind=kind, reason="error").inc()
                raise

    def _report_catalog_status(self, kind: str, namespace: str, name: str) -> Outcome:
        """Write the Ready condition of an SFService or SFPlan (see :mod:`opbroker.controller.catalog_status`)."""
        which = PLANS if kind == "plan" else SERVICES
        body = self.kube.get_custom(which, namespace, name, fresh=True)
        if body is None:
            return DONE
        model_type = SFPlan if kind == "plan" else SFService
        try:
            model = model_type.model_validate(body)
            problem = None
        except ValidationError as exc:
            model, problem = None, "; ".join(field_errors(exc))
        if kind == "plan":
            findings = check_plan(model, self.renderer).errors if isinstance(model, SFPlan) else ()
            verdict = catalog_status.plan_verdict(problem, tuple(str(f) for f in findings))
        else:
            verdict = catalog_status.service_verdict(problem)
        patch = catalog_status.status_patch(body, verdict)
        if patch is None:
            return DONE
        try:
            self.kube.patch_custom_status(
                which, namespace, name, patch, resource_version=body["metadata"]["resourceVersion"]
            )
        except ApiException as exc:
            if exc.status == 409:
                return Outcome(requeue_after=0.1)  # changed meanwhile: decided again on the newer version
            raise
        return DONE


def build_registry(controller: Controller, *, kubeconfig: str | None) -> kopf.OperatorRegistry:
    """The kopf handlers: thin adapters from watch events to the controller."""
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)  # type: ignore[arg-type]
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        if kubeconfig:
            return kopf.login_with_kubeconfig(**kwargs)
        # In a pod: the official client's in-cluster configuration, which reaches the API server at
        # KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT as client-go does. kopf's own service-account
        # login names https://kubernetes.default.svc, which needs cluster DNS (found on a node without it).
        return kopf.login_via_client(**kwargs)

    @kopf.on.startup(registry=registry)  # type: ignore[arg-type]
    async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.enabled = False  # our Events are posted deliberately, on state changes only
        settings.watching.server_timeout = 300
        settings.watching.client_timeout = 330
        settings.batching.idle_timeout = 0.5
        settings.batching.batch_window = 0.05
        if events_only(registry):
            settings.persistence.diffbase_storage = EventsOnlyDiffBase()
        controller.start()

    @kopf.on.cleanup(registry=registry)  # type: ignore[arg-type]
    async def cleanup(**_: Any) -> None:
        await controller.stop()

    @kopf.on.event(SERVICES.group, SERVICES.version, SERVICES.plural, registry=registry)  # type: ignore[arg-type]
    async def service_event(event: dict[str, Any], body: Any, **_: Any) -> None:
        controller.on_service(str(event.get("type")), plain_body(body))

    @kopf.on.event(PLANS.group, PLANS.version, PLANS.plural, registry=registry)  # type: ignore[arg-type]
    async def plan_event(event: dict[str, Any], body: Any, **_: Any) -> None:
        controller.on_plan(str(event.get("type")), plain_body(body))

    @kopf.on.event(INSTANCES.group, INSTANCES.version, INSTANCES.plural, registry=registry)  # type: ignore[arg-type]
    async def instance_event(event: dict[str, Any], body: Any, **_: Any) -> None:
        controller.on_instance(str(event.get("type")), plain_body(body))

    @kopf.on.event(BINDINGS.group, BINDINGS.version, BINDINGS.plural, registry=registry)  # type: ignore[arg-type]
    async def binding_event(event: dict[str, Any], body: Any, **_: Any) -> None:
        controller.on_binding(str(event.get("type")), plain_body(body))

    if controller.multicluster is not None:
        controller.multicluster.register(registry)  # SFClusters: scheduling targets, sister clusters
    register_claims(registry, controller)  # registered services and claims: own handlers and queue
    return registry


__all__ = ["DONE", "Controller", "build_registry"]
