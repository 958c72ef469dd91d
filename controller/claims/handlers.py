"""The claims subsystem's entry point: kopf ``on.event`` handlers, its work queue, its dispatch.

Handlers do nothing but update the watch cache (:mod:`store`) and enqueue keys; reconciles run on a
work queue of their own (same semantics as the controller's), so claims never compete with instance
and binding reconciles. Keys: ``("registered", ns, name)``, ``("claim", ns, name)``,
``("catalog", ns, "")``, ``("registration", ns, binding)``.

What each watch enqueues:

* RegisteredService: itself; the namespace's catalog; the claim holding it (before and after the
  event) and every claim of the namespace that is not Resolved (it may match now);
* ServiceClaim: itself; the catalog when its environment appears, changes or goes;
* Secret: the registered services reading it (``valueFromSecret``) and the claims holding them; the
  broker binding whose credentials it holds (automatic registration);
* Deployment / StatefulSet / DaemonSet: the claims of the namespace binding into that kind (a workload
  created or relabelled later gets its projection);
* Job: the registered service owning a health-check Job;
* SFServiceBinding: its registration, when opted in (or when a generated service must go).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import kopf
from kubernetes.client.exceptions import ApiException

from opbroker.api.primaza import ClaimState, RegisteredService
from opbroker.controller.claims import names, registration
from opbroker.controller.claims.cataloging import CatalogReconciler
from opbroker.controller.claims.claiming import ClaimReconciler
from opbroker.controller.claims.context import Conflict, Context
from opbroker.controller.claims.kinds import CLAIMS, REGISTERED_SERVICES
from opbroker.controller.claims.probes import Prober
from opbroker.controller.claims.registered import RegisteredReconciler
from opbroker.controller.claims.registering import RegistrationReconciler
from opbroker.controller.claims.settings import ClaimsSettings
from opbroker.controller.claims.store import Store
from opbroker.controller.claims.workloads import SUPPORTED_KINDS
from opbroker.controller.kopfparts import plain_body
from opbroker.controller.kube import BINDINGS, Kube
from opbroker.controller.workqueue import DONE, Outcome, WorkQueue

if TYPE_CHECKING:
    from opbroker.controller.app import Controller
    from opbroker.controller.catalog import Catalog

logger = logging.getLogger(__name__)

CONFLICT_RETRY = 0.05


class ClaimsController:
    """The claims queue and reconcilers; knows nothing about kopf itself."""

    def __init__(self, kube: Kube, settings: ClaimsSettings, osb_catalog: Catalog) -> None:
        self.settings = settings
        self.store = Store()
        self.queue: WorkQueue | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.prober = Prober(self.enqueue_threadsafe)
        ctx = Context(
            kube=kube,
            store=self.store,
            settings=settings,
            prober=self.prober,
            enqueue=self.enqueue_threadsafe,
            osb_catalog=osb_catalog,
        )
        self.registered = RegisteredReconciler(ctx)
        self.claims = ClaimReconciler(ctx)
        self.catalogs = CatalogReconciler(ctx)
        self.registrations = RegistrationReconciler(ctx)
        self._scheduled: dict[Hashable, float] = {}

    # -- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.queue = WorkQueue(self._reconcile, workers=self.settings.workers)
        self.queue.start()

    async def stop(self) -> None:
        self.prober.shutdown()
        if self.queue is not None:
            await self.queue.stop()

    def enqueue(self, key: Hashable) -> None:
        if self.queue is not None:
            self.queue.add(key)

    def enqueue_threadsafe(self, key: Hashable) -> None:
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.enqueue, key)

    # -- events --------------------------------------------------------------------------------------

    def _enqueue_claims_for(self, namespace: str, *holders: str | None, pending: bool = True) -> None:
        """The holders (their binding may need re-rendering) and, if ``pending``, unresolved claims."""
        for holder in holders:
            if holder:
                self.enqueue(("claim", namespace, holder))
        if not pending:
            return
        for claim in self.store.claims(namespace):
            if claim.state != ClaimState.RESOLVED.value:
                self.enqueue(("claim", namespace, claim.name))

    def on_registered_service(self, event_type: str, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        key: Hashable = ("registered", namespace, name)
        if event_type == "DELETED":
            previous = self.store.remove_service(body)
            self.registered.forget(key)
            if self.queue is not None:
                self.queue.forget(key)
            self._enqueue_claims_for(namespace, previous.claimed_by if previous else None)
        else:
            previous, current = self.store.upsert_service(body)
            self.enqueue(key)
            # Unresolved claims only care about what matching sees; holders about everything (values too).
            matters = previous is None or replace(previous, resource_version=None) != replace(
                current, resource_version=None
            )
            self._enqueue_claims_for(
                namespace, previous.claimed_by if previous else None, current.claimed_by, pending=matters
            )
        self.enqueue(("catalog", namespace, ""))

    def on_claim(self, event_type: str, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        if event_type == "DELETED":
            previous = self.store.remove_claim(body)
            if self.queue is not None:
                self.queue.forget(("claim", namespace, name))
            if previous is not None:
                self.enqueue(("catalog", namespace, ""))
            return
        previous_info, current = self.store.upsert_claim(body)
        self.enqueue(("claim", namespace, name))
        if previous_info is None or previous_info.environment != current.environment:
            self.enqueue(("catalog", namespace, ""))

    def on_secret(self, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        namespace, name = meta.get("namespace", ""), meta["name"]
        for service in self.store.readers_of(namespace, name):
            self.enqueue(("registered", namespace, service))
            candidate = self.store.service(namespace, service)
            if candidate is not None and candidate.claimed_by:
                self.enqueue(("claim", namespace, candidate.claimed_by))
        binding = self.store.binding_reading(namespace, name)
        if binding is not None:
            self.enqueue(("registration", namespace, binding))

    def on_workload(self, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        namespace = meta.get("namespace", "")
        kind = (body.get("apiVersion", ""), body.get("kind", ""))
        for claim in self.store.claims(namespace):
            if claim.application_kind == kind:
                self.enqueue(("claim", namespace, claim.name))

    def on_job(self, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        if names.LABEL_REGISTERED_SERVICE not in (meta.get("labels") or {}):
            return
        for owner in meta.get("ownerReferences") or []:
            if owner.get("kind") == RegisteredService.KIND:
                self.enqueue(("registered", meta["namespace"], owner["name"]))

    def on_binding(self, event_type: str, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        plan = self.registrations.plan_of(body)
        generated = self.store.service(namespace, name)
        if registration.opted_in(body, plan) or generated is not None:
            self.enqueue(("registration", namespace, name))

    # -- reconciling ---------------------------------------------------------------------------------

    async def _reconcile(self, key: Hashable) -> Outcome:
        assert isinstance(key, tuple)
        kind, namespace, name = key
        now = time.monotonic()
        if self._scheduled.get(key, 0.0) <= now + 0.01:
            self._scheduled.pop(key, None)
        reconcilers: dict[str, Callable[[str, str], Outcome]] = {
            "registered": self.registered.reconcile,
            "claim": self.claims.reconcile,
            "catalog": self.catalogs.reconcile,
            "registration": self.registrations.reconcile,
        }
        reconcile = reconcilers[kind]
        try:
            outcome = await asyncio.to_thread(reconcile, namespace, name)
        except Conflict:
            return Outcome(requeue_after=CONFLICT_RETRY)
        except ApiException as exc:
            if exc.status != 409:
                raise
            return Outcome(requeue_after=CONFLICT_RETRY)
        if outcome.requeue_after is None:
            return DONE
        return self._schedule(key, outcome.requeue_after)

    def _schedule(self, key: Hashable, delay: float) -> Outcome:
        """Ask for a re-check unless an earlier one is already scheduled (no pile-up of timers)."""
        due = time.monotonic() + delay
        pending = self._scheduled.get(key)
        if pending is not None and time.monotonic() < pending <= due + 0.01:
            return DONE
        self._scheduled[key] = due
        return Outcome(requeue_after=delay)


def _workload_handler(claims: ClaimsController, api_version: str, kind: str) -> Callable[..., Awaitable[None]]:
    async def workload_event(**kwargs: Any) -> None:
        metadata = dict(kwargs["body"].get("metadata") or {})
        claims.on_workload({"apiVersion": api_version, "kind": kind, "metadata": metadata})

    return workload_event


def register_claims(registry: kopf.OperatorRegistry, controller: Controller) -> ClaimsController:
    """Add the claims subsystem's handlers to the controller's kopf registry (its only hook)."""
    claims = ClaimsController(controller.kube, ClaimsSettings.from_environ(), controller.catalog)

    @kopf.on.startup(registry=registry)
    async def claims_startup(**_: Any) -> None:
        claims.start()

    @kopf.on.cleanup(registry=registry)
    async def claims_cleanup(**_: Any) -> None:
        await claims.stop()

    @kopf.on.event(
        REGISTERED_SERVICES.group, REGISTERED_SERVICES.version, REGISTERED_SERVICES.plural, registry=registry
    )
    async def registered_service_event(**kwargs: Any) -> None:
        claims.on_registered_service(str(kwargs["event"].get("type")), plain_body(kwargs["body"]))

    @kopf.on.event(CLAIMS.group, CLAIMS.version, CLAIMS.plural, registry=registry)
    async def claim_event(**kwargs: Any) -> None:
        claims.on_claim(str(kwargs["event"].get("type")), plain_body(kwargs["body"]))

    @kopf.on.event("", "v1", "secrets", registry=registry)
    async def secret_event(**kwargs: Any) -> None:
        claims.on_secret({"metadata": dict(kwargs["body"].get("metadata") or {})})  # never the data

    @kopf.on.event("batch", "v1", "jobs", registry=registry)
    async def job_event(**kwargs: Any) -> None:
        claims.on_job(plain_body(kwargs["body"]))

    for api_version, kind in SUPPORTED_KINDS:
        group, version = api_version.split("/")
        kopf.on.event(group, version, kind.lower() + "s", registry=registry, id=f"claims-{kind.lower()}-event")(
            _workload_handler(claims, api_version, kind)
        )

    @kopf.on.event(BINDINGS.group, BINDINGS.version, BINDINGS.plural, registry=registry)
    async def claims_binding_event(**kwargs: Any) -> None:
        claims.on_binding(str(kwargs["event"].get("type")), plain_body(kwargs["body"]))

    return claims
