"""The Service Catalog kinds' watches: events mapped to keys on the controller's one runtime.

Each event of the four kinds is first kept in the controller's store (``CatalogApi.keep``), where the
reconcilers read it from, then mapped to the keys it concerns. What each watch enqueues:

* Broker: itself (a relist is due when its spec or ``relistRequests`` changed);
* ServiceClass: the Instances naming it (a class appearing or changing may resolve them);
* Instance: itself, and the Bindings of it (they wait for it to be ready);
* Binding: itself; when it is deleted, its Instance (whose deletion may have waited for it);
* Secret (the controller's one Secret watch, metadata only): the Instances and Bindings whose ``parametersFrom``
  names it — a missing parameter Secret is fixed outside the object, and the object goes on by itself once it
  is there (the 30 s re-check of an unresolved object is the fallback);
* Deployment / StatefulSet / DaemonSet: the Bindings of its namespace that project into workloads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from opbroker.api.osb import OperationState
from opbroker.api.servicecatalog import Binding, Broker, Instance, ServiceClass
from opbroker.controller.budgets import Budgeting
from opbroker.controller.claims.workloads import SUPPORTED_KINDS
from opbroker.controller.core.views import Meta
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.kube import Kube
from opbroker.controller.runtime.memory import Dependents, Readers
from opbroker.controller.runtime.runner import Runtime
from opbroker.controller.runtime.watches import Watch
from opbroker.controller.servicecatalog.bindings import BindingReconciler
from opbroker.controller.servicecatalog.brokers import BrokerReconciler
from opbroker.controller.servicecatalog.core.views import CatalogObject, SecretKeyRef, ServiceClassView
from opbroker.controller.servicecatalog.instances import InstanceReconciler
from opbroker.controller.servicecatalog.resources import (
    BINDINGS,
    BROKERS,
    CLASSES,
    GROUP,
    INSTANCES,
    VERSION,
    CatalogApi,
)
from opbroker.controller.settings import ControllerSettings
from opbroker.kubeclient.wire import JsonBody

if TYPE_CHECKING:
    from opbroker.controller.servicecatalog.webhook import Webhook

logger = logging.getLogger(__name__)


class ServiceCatalog:
    """The three reconcilers on the runtime, and the indexes that map events to keys."""

    def __init__(
        self,
        kube: Kube,
        runtime: Runtime,
        *,
        control_plane: str,
        max_operation_seconds: float,
        writer: Callable[[str], Kube] | None = None,
        budgets: Budgeting | None = None,
        resync_seconds: float = 600.0,
    ) -> None:
        """``control_plane``: the controller's namespace, the only one Brokers' auth Secrets are read from;
        ``writer``: the door writes into a consumer's namespace go through; ``budgets``: the namespaces' budgets
        (``controller.budgets``), which count the Instances' and Bindings' operations in progress too;
        ``resync_seconds``: how often a settled Instance is looked at at its broker (``core.live``)."""
        self.budgets = budgets if budgets is not None else Budgeting()
        self.runtime = runtime
        api = self.api = CatalogApi(kube)
        api.watched()  # the watches below keep the four kinds in the store: reconciles read them from there
        memories = runtime.memories
        self.brokers = BrokerReconciler(
            api, control_plane=control_plane, clock=runtime.clock, policies=runtime.policies
        )
        self.instances = InstanceReconciler(
            api,
            memories,
            control_plane=control_plane,
            max_operation_seconds=max_operation_seconds,
            clock=runtime.clock,
            budgets=self.budgets,
            resync_seconds=resync_seconds,
            policies=runtime.policies,
        )
        self.bindings = BindingReconciler(
            api,
            memories,
            control_plane=control_plane,
            max_operation_seconds=max_operation_seconds,
            writer=writer,
            clock=runtime.clock,
            budgets=self.budgets,
            policies=runtime.policies,
        )
        for reconciler in (self.brokers, self.instances, self.bindings):
            runtime.register(reconciler)
        self._class_users: Dependents[str] = memories.keep(Dependents())
        self._instance_bindings: Dependents[Key] = memories.keep(Dependents())
        self._projecting: Dependents[str] = memories.keep(Dependents())
        self._secret_readers: Readers[tuple[str, str]] = memories.keep(Readers())
        """(namespace, name) of a Secret -> the Instances and Bindings whose ``parametersFrom`` names it."""
        self.webhook: Webhook | None = None
        """The admission webhook once it serves (:meth:`serve_webhook`)."""
        self._webhook_task: asyncio.Task[None] | None = None
        """The webhook's start and refresh (:meth:`keep_webhook`), cancelled by :meth:`stop_webhook`."""

    def serve_webhook(self, settings: ControllerSettings) -> None:
        """Serve the admission webhook (``admission``), every replica, leader or not, in the background: a task
        (:meth:`keep_webhook`) on the process's loop (call on it; it runs from the process's start, before any
        leadership). Retried until the shared certificate can be read or made (an API server still starting, a
        missing grant): meanwhile deletions take the finalizer path."""
        self._webhook_task = asyncio.get_running_loop().create_task(self.keep_webhook(settings), name="webhook")

    def stop_webhook(self) -> None:
        """Cancel the webhook's start retries and refreshes (from any thread). The server serves on until the
        process exits, as before: a replica that stops leading still answers reviews."""
        task = self._webhook_task
        if task is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed already: nothing left to cancel
                task.get_loop().call_soon_threadsafe(task.cancel)

    async def keep_webhook(self, settings: ControllerSettings) -> None:
        """Start the webhook — retried after each ``webhook_start`` of the policy table until the certificate can
        be read or made; nothing listens meanwhile — then refresh it until cancelled. Its blocking calls (the
        certificate's, the server's start, each refresh) run in pool threads, its pauses on the runtime's clock."""
        from opbroker.controller.servicecatalog import webhook

        assert settings.webhook_port is not None
        api_client = self.api.kube.api_client
        register: Callable[[bytes], None]
        if settings.webhook_service:
            hosts = webhook.service_hosts(settings.namespace, settings.webhook_service)
            name = settings.webhook_configuration

            def register(ca: bytes) -> None:
                webhook.register_ca(api_client, name, ca)
        else:
            url = settings.webhook_url or f"https://127.0.0.1:{settings.webhook_port}"
            hosts = [_host_of(url)]
            register = webhook.register_url(api_client, url, settings.webhook_configuration)

        policies = self.runtime.policies

        def made() -> webhook.Webhook:
            return webhook.Webhook(
                api_client,
                port=settings.webhook_port or 0,
                hosts=hosts,
                namespace=settings.namespace,
                secret=settings.webhook_secret,
                register=register,
                policies=policies,
                clock=self.runtime.clock,
            )

        while True:
            try:  # the certificate: until it is there, nothing listens
                server = await asyncio.to_thread(made)
            except Exception as exc:
                status = getattr(exc, "status", None)
                pause = policies.delay(policies.webhook_start)
                logger.error(
                    "the admission webhook could not start (%s); retrying in %.0f s",
                    f"HTTP {status}" if status else type(exc).__name__,
                    pause,
                )
                await self.runtime.clock.sleep(pause)
                continue
            break
        await asyncio.to_thread(server.start, asyncio.get_running_loop())  # registering: retried by the refreshes
        self.webhook = server
        await server.refresh_forever()

    def watches(self) -> list[Watch]:
        """Brokers, their classes, Instances, Bindings, and the workloads a Binding's credentials project into."""
        api = f"{GROUP}/{VERSION}"
        workloads = [
            Watch(api_version, kind.lower() + "s", self._on_workload, f"servicecatalog-{kind.lower()}")
            for api_version, kind in SUPPORTED_KINDS
        ]
        return [
            Watch(api, Broker.PLURAL, self.on_broker, "servicecatalog-brokers"),
            Watch(api, ServiceClass.PLURAL, self._on_class, "servicecatalog-classes"),
            Watch(api, Instance.PLURAL, self.on_instance, "servicecatalog-instances"),
            Watch(api, Binding.PLURAL, self.on_binding, "servicecatalog-bindings"),
            *workloads,
        ]

    def _on_workload(self, _event_type: str, body: JsonBody) -> None:
        self.on_workload(body)

    def _on_class(self, event_type: str, body: JsonBody) -> None:
        self.api.keep(CLASSES, event_type, body)
        self.on_class(body)

    def on_broker(self, event_type: str, body: JsonBody) -> None:
        self.api.keep(BROKERS, event_type, body)
        key = Key.of(BrokerReconciler.kind, body)
        if event_type == "DELETED":
            self.runtime.forget(key)
        else:
            self.runtime.enqueue(key)

    def on_class(self, body: JsonBody) -> None:
        service_class = ServiceClassView.of(body)
        for name in {service_class.meta.name, service_class.external_name}:
            for key in self._class_users.of(name):
                self.runtime.enqueue(key)

    def on_instance(self, event_type: str, body: JsonBody) -> None:
        self.api.keep(INSTANCES, event_type, body)
        key = Key.of(InstanceReconciler.kind, body)
        self._count(key, event_type, body)
        if event_type == "DELETED":
            self.runtime.forget(key)
            return
        instance = CatalogObject.of(body)
        self._class_users.link(instance.instance_spec.class_name, key)
        self._secret_readers.link(key, _parameter_secrets(key.namespace, instance.instance_spec.parameters_from))
        self.runtime.enqueue(key)
        for binding in self._instance_bindings.of(key):
            self.runtime.enqueue(binding)

    def on_binding(self, event_type: str, body: JsonBody) -> None:
        self.api.keep(BINDINGS, event_type, body)
        key = Key.of(BindingReconciler.kind, body)
        binding = CatalogObject.of(body)
        namespace, name = binding.instance_ref
        instance = Key(InstanceReconciler.kind, namespace, name)
        self._count(key, event_type, body)
        if event_type == "DELETED":
            self.runtime.forget(key)
            self.runtime.enqueue(instance)
            return
        self._instance_bindings.link(instance, key)
        self._secret_readers.link(key, _parameter_secrets(key.namespace, binding.binding_spec.parameters_from))
        if binding.binding_spec.application:
            self._projecting.link(key.namespace, key)
        self.runtime.enqueue(key)
        if binding.meta.deleting:
            self.runtime.enqueue(instance)

    def _count(self, key: Key, event_type: str, body: JsonBody) -> None:
        """Keep the budgets' count of operations in progress: an asynchronous operation the broker still runs."""
        running = event_type != "DELETED" and CatalogObject.of(body).status.async_op
        self.budgets.observe(key, OperationState.IN_PROGRESS.value if running else None)

    def on_workload(self, body: JsonBody) -> None:
        for key in self._projecting.of(Meta.of(body.get("metadata")).namespace):
            self.runtime.enqueue(key)

    def on_secret(self, body: JsonBody) -> None:
        """A Secret was listed, added, changed or deleted (called on the loop by the Secret watch; only its
        metadata is looked at): the Instances and Bindings reading it as parameters look again."""
        meta = Meta.of(body.get("metadata"))
        for key in self._secret_readers.of((meta.namespace, meta.name)):
            self.runtime.enqueue(key)


def _parameter_secrets(namespace: str, sources: tuple[SecretKeyRef, ...]) -> frozenset[tuple[str, str]]:
    """The Secrets ``parametersFrom`` (``sources``) reads: in the object's own namespace only."""
    return frozenset((namespace, ref.name) for ref in sources if ref.name)


def _host_of(url: str) -> str:
    return url.split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0]
