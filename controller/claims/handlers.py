"""The claims subsystem's entry point: watch handlers and its four kinds on the controller's runtime.

Handlers do nothing but update the watch cache (:mod:`store`) and enqueue keys on the one runtime
(:mod:`opbroker.controller.runtime`), which dispatches them to the kind's reconciler. Keys:
``Key("registered", ns, name)``, ``Key("claim", ns, name)``, ``Key("catalog", ns, "")``,
``Key("registration", ns, binding)``.

What each watch enqueues:

* RegisteredService: itself; the catalogs of its namespace and of the namespaces it shares with (before and
  after the event; ``*``: every namespace known); the claim holding it (before and after the event, in
  whatever namespace) and every claim that is not Resolved of its namespace or of a namespace naming it in
  ``serviceNamespaces`` (it may match now);
* ServiceClaim: itself; the catalog when its environment appears, changes or goes;
* Secret: the registered services reading it (``valueFromSecret``) and the claims holding them; the
  broker binding whose credentials it holds (automatic registration). Secret events come from the
  controller's one Secret watch (``SourceWatchers.subscribe``), which also keeps the Secrets the plans'
  status templates read: a second watch of every Secret through kopf cost a list of them all and kopf's
  per-object memory and processing on every restart;
* Deployment / StatefulSet / DaemonSet: the claims of the namespace binding into that kind (a workload
  created or relabelled later gets its projection);
* Job: the registered service owning a health-check Job;
* SFServiceBinding: its registration, when opted in (or when a generated service must go).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from opbroker.api.primaza import ClaimState, RegisteredService
from opbroker.controller.catalog.catalog import Catalog
from opbroker.controller.claims.cataloging import CatalogReconciler
from opbroker.controller.claims.claiming import ClaimReconciler
from opbroker.controller.claims.context import Context
from opbroker.controller.claims.core import matching, names, registration
from opbroker.controller.claims.core.views import JobView, ObjectView, WorkloadView
from opbroker.controller.claims.kinds import CLAIMS, REGISTERED_SERVICES
from opbroker.controller.claims.probes import Prober
from opbroker.controller.claims.registered import RegisteredReconciler
from opbroker.controller.claims.registering import RegistrationReconciler
from opbroker.controller.claims.settings import ClaimsSettings
from opbroker.controller.claims.store import Store
from opbroker.controller.claims.workloads import SUPPORTED_KINDS
from opbroker.controller.core.views import BindingView
from opbroker.controller.kinds import BINDINGS
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.kube import Kube
from opbroker.controller.runtime.runner import Runtime
from opbroker.controller.runtime.watches import Watch
from opbroker.kubeclient.wire import JsonBody

logger = logging.getLogger(__name__)


class Claims:
    """The claims subsystem's watches and reconcilers, on the controller's runtime."""

    def __init__(
        self,
        kube: Kube,
        settings: ClaimsSettings,
        osb_catalog: Catalog,
        runtime: Runtime,
        writer: Callable[[str], Kube] | None = None,
    ) -> None:
        self.settings = settings
        self.runtime = runtime
        self.store = Store()
        self.prober = Prober(runtime.enqueue, lambda: runtime.loop)
        ctx = Context(
            kube=kube,
            store=self.store,
            settings=settings,
            prober=self.prober,
            enqueue=runtime.enqueue_threadsafe,
            osb_catalog=osb_catalog,
            writer=writer,
            clock=runtime.clock,
        )
        self.registered = RegisteredReconciler(ctx)
        self.claims = ClaimReconciler(ctx)
        self.catalogs = CatalogReconciler(ctx)
        self.registrations = RegistrationReconciler(ctx)
        for reconciler in (self.registered, self.claims, self.catalogs, self.registrations):
            runtime.register(reconciler)
        runtime.memories.keep(self.registered)

    def stop(self) -> None:
        self.prober.shutdown()

    def enqueue(self, key: Key) -> None:
        self.runtime.enqueue(key)

    # -- events --------------------------------------------------------------------------------------

    def watches(self) -> list[Watch]:
        """Registered services, claims, the health checks' Jobs, the workloads a claim projects into (their
        identity only) and the OSB bindings a registered service's credentials come from."""
        workloads = [
            Watch(
                api_version,
                kind.lower() + "s",
                self._on_workload,
                f"claims-{kind.lower()}",
                metadata_only=True,
                kind=kind,
            )
            for api_version, kind in SUPPORTED_KINDS
        ]
        return [
            Watch.of(REGISTERED_SERVICES, self.on_registered_service, id="claims-registeredservices"),
            Watch.of(CLAIMS, self.on_claim, id="claims-serviceclaims"),
            Watch("batch/v1", "jobs", lambda _type, body: self.on_job(body), "claims-jobs"),
            *workloads,
            Watch.of(BINDINGS, self.on_binding, id="claims-sfservicebindings"),
        ]

    def _on_workload(self, _event_type: str, body: JsonBody) -> None:
        self.on_workload(body)

    def _enqueue_claims_for(self, namespace: str, *holders: str | None, pending: bool = True) -> None:
        """The holders of a service of ``namespace`` (their binding may need re-rendering; ``claimedBy`` may name
        a claim of another namespace) and, if ``pending``, the unresolved claims that may see it."""
        for holder in holders:
            if holder:
                self.enqueue(Key("claim", *names.parse_ref(holder, home=namespace)))
        if not pending:
            return
        for claim in self.store.claims(namespace):
            if claim.state != ClaimState.RESOLVED.value:
                self.enqueue(Key("claim", namespace, claim.name))
        for other, claim in self.store.claims_looking_in(namespace):
            if claim.state != ClaimState.RESOLVED.value:
                self.enqueue(Key("claim", other, claim.name))

    def _enqueue_catalogs_for(self, namespace: str, *candidates: matching.Candidate | None) -> None:
        """The catalogs listing a service of ``namespace``: its own, and those of the namespaces it shares with."""
        targets = {namespace}
        for candidate in candidates:
            if candidate is None:
                continue
            if "*" in candidate.share_with:
                targets |= self.store.namespaces()
            targets |= set(candidate.share_with) - {"*"}
        for target in sorted(targets):
            self.enqueue(Key("catalog", target, ""))

    def on_registered_service(self, event_type: str, body: JsonBody) -> None:
        meta = ObjectView.of(body).meta
        namespace, name = meta.namespace, meta.name
        key = Key("registered", namespace, name)
        if event_type == "DELETED":
            previous = self.store.remove_service(body)
            self.runtime.forget(key)
            self._enqueue_claims_for(namespace, previous.claimed_by if previous else None)
            self._enqueue_catalogs_for(namespace, previous)
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
            if matters:
                self._enqueue_catalogs_for(namespace, previous, current)
            else:
                self.enqueue(Key("catalog", namespace, ""))

    def on_claim(self, event_type: str, body: JsonBody) -> None:
        meta = ObjectView.of(body).meta
        namespace, name = meta.namespace, meta.name
        if event_type == "DELETED":
            previous = self.store.remove_claim(body)
            self.runtime.forget(Key("claim", namespace, name))
            if previous is not None:
                self.enqueue(Key("catalog", namespace, ""))
            return
        previous_info, current = self.store.upsert_claim(body)
        self.enqueue(Key("claim", namespace, name))
        if previous_info is None or previous_info.environment != current.environment:
            self.enqueue(Key("catalog", namespace, ""))

    def on_secret(self, body: JsonBody) -> None:
        """A Secret was listed, added, changed or deleted. Called on the loop, by the Secret watch (keys go to
        the runtime's queue); only the Secret's metadata is looked at."""
        meta = ObjectView.of(body).meta
        namespace, name = meta.namespace, meta.name
        enqueue = self.runtime.enqueue
        for service in self.store.readers_of(namespace, name):
            enqueue(Key("registered", namespace, service))
            candidate = self.store.service(namespace, service)
            if candidate is not None and candidate.claimed_by:
                enqueue(Key("claim", *names.parse_ref(candidate.claimed_by, home=namespace)))
        binding = self.store.binding_reading(namespace, name)
        if binding is not None:
            enqueue(Key("registration", namespace, binding))

    def on_workload(self, body: JsonBody) -> None:
        workload = WorkloadView.of(body)
        namespace = workload.meta.namespace
        kind = (workload.api_version, workload.kind)
        for claim in self.store.claims(namespace):
            if claim.application_kind == kind:
                self.enqueue(Key("claim", namespace, claim.name))

    def on_job(self, body: JsonBody) -> None:
        job = JobView.of(body)
        if names.LABEL_REGISTERED_SERVICE not in job.meta.labels:
            return
        for kind, name, _uid in job.owners:
            if kind == RegisteredService.KIND and name:
                self.enqueue(Key("registered", job.meta.namespace, name))

    def on_binding(self, event_type: str, body: JsonBody) -> None:
        binding = BindingView.of(body)
        namespace, name = binding.meta.namespace, binding.meta.name
        plan = self.registrations.plan_of(binding)
        generated = self.store.service(namespace, name)
        if registration.opted_in(binding, plan) or generated is not None:
            self.enqueue(Key("registration", namespace, name))
