"""The Service Catalog kinds' watches: kopf events mapped to keys on the controller's one runtime.

What each watch enqueues:

* Broker: itself (a relist is due when its spec or ``relistRequests`` changed);
* ServiceClass: the Instances naming it (a class appearing or changing may resolve them);
* Instance: itself, and the Bindings of it (they wait for it to be ready);
* Binding: itself; when it is deleted, its Instance (whose deletion may have waited for it);
* Deployment / StatefulSet / DaemonSet: the Bindings of its namespace that project into workloads.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import kopf

from opbroker.api.servicecatalog import Binding, Broker, Instance, ServiceClass
from opbroker.controller.claims.workloads import SUPPORTED_KINDS
from opbroker.controller.kopfparts import plain_body
from opbroker.controller.kube import Kube
from opbroker.controller.reconciler import Key, Runtime
from opbroker.controller.reconciler.memory import Dependents
from opbroker.controller.servicecatalog.bindings import BindingReconciler, instance_ref
from opbroker.controller.servicecatalog.brokers import BrokerReconciler
from opbroker.controller.servicecatalog.instances import InstanceReconciler
from opbroker.controller.servicecatalog.resources import BINDINGS, GROUP, VERSION, CatalogApi


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
    ) -> None:
        """``control_plane``: the controller's namespace, the only one Brokers' auth Secrets are read from;
        ``writer``: the door writes into a consumer's namespace go through."""
        self.runtime = runtime
        api = self.api = CatalogApi(kube)
        memories = runtime.memories
        self.brokers = BrokerReconciler(api, control_plane=control_plane)
        self.instances = InstanceReconciler(
            api, memories, control_plane=control_plane, max_operation_seconds=max_operation_seconds
        )
        self.bindings = BindingReconciler(
            api, memories, control_plane=control_plane, max_operation_seconds=max_operation_seconds, writer=writer
        )
        for reconciler in (self.brokers, self.instances, self.bindings):
            runtime.register(reconciler)
        self._class_users: Dependents[str] = memories.keep(Dependents())
        self._instance_bindings: Dependents[Key] = memories.keep(Dependents())
        self._projecting: Dependents[str] = memories.keep(Dependents())

    def serve_webhook(self, port: int, url: str | None) -> None:
        """Serve and register the admission webhook (``admission``): every replica serves it, leader or not."""
        from opbroker.controller.servicecatalog import webhook

        server = webhook.WebhookServer(port, [_host_of(url) if url else "127.0.0.1"], lambda: self.api.list(BINDINGS))
        server.start()
        webhook.register(self.api.kube, webhook.configuration(server.ca, url=url or f"https://127.0.0.1:{server.port}"))

    def on_broker(self, event_type: str, body: dict[str, Any]) -> None:
        key = Key.of(BrokerReconciler.kind, body)
        if event_type == "DELETED":
            self.runtime.forget(key)
        else:
            self.runtime.enqueue(key)

    def on_class(self, body: dict[str, Any]) -> None:
        for name in {body["metadata"]["name"], body.get("externalName") or ""}:
            for key in self._class_users.of(name):
                self.runtime.enqueue(key)

    def on_instance(self, event_type: str, body: dict[str, Any]) -> None:
        key = Key.of(InstanceReconciler.kind, body)
        if event_type == "DELETED":
            self.runtime.forget(key)
            return
        self._class_users.link((body.get("spec") or {}).get("serviceClassName", ""), key)
        self.runtime.enqueue(key)
        for binding in self._instance_bindings.of(key):
            self.runtime.enqueue(binding)

    def on_binding(self, event_type: str, body: dict[str, Any]) -> None:
        key = Key.of(BindingReconciler.kind, body)
        namespace, name = instance_ref(body)
        instance = Key(InstanceReconciler.kind, namespace, name)
        if event_type == "DELETED":
            self.runtime.forget(key)
            self.runtime.enqueue(instance)
            return
        self._instance_bindings.link(instance, key)
        if (body.get("spec") or {}).get("application"):
            self._projecting.link(key.namespace, key)
        self.runtime.enqueue(key)
        if body["metadata"].get("deletionTimestamp"):
            self.runtime.enqueue(instance)

    def on_workload(self, body: dict[str, Any]) -> None:
        for key in self._projecting.of(body["metadata"].get("namespace", "")):
            self.runtime.enqueue(key)


def register_service_catalog(registry: kopf.OperatorRegistry, catalog: ServiceCatalog) -> None:
    @kopf.on.event(GROUP, VERSION, Broker.PLURAL, registry=registry)  # type: ignore[arg-type]
    async def broker_event(event: dict[str, Any], body: Any, **_: Any) -> None:
        catalog.on_broker(str(event.get("type")), plain_body(body))

    @kopf.on.event(GROUP, VERSION, ServiceClass.PLURAL, registry=registry)  # type: ignore[arg-type]
    async def class_event(event: dict[str, Any], body: Any, **_: Any) -> None:
        catalog.on_class(plain_body(body))

    @kopf.on.event(GROUP, VERSION, Instance.PLURAL, registry=registry)  # type: ignore[arg-type]
    async def instance_event(event: dict[str, Any], body: Any, **_: Any) -> None:
        catalog.on_instance(str(event.get("type")), plain_body(body))

    @kopf.on.event(GROUP, VERSION, Binding.PLURAL, registry=registry)  # type: ignore[arg-type]
    async def binding_event(event: dict[str, Any], body: Any, **_: Any) -> None:
        catalog.on_binding(str(event.get("type")), plain_body(body))

    for api_version, kind in SUPPORTED_KINDS:
        group, version = api_version.split("/")
        kopf.on.event(group, version, kind.lower() + "s", registry=registry, id=f"servicecatalog-{kind}")(
            _workload_handler(catalog)
        )


def _workload_handler(catalog: ServiceCatalog) -> Callable[..., Awaitable[None]]:
    async def workload_event(body: Any, **_: Any) -> None:
        catalog.on_workload(plain_body(body))

    return workload_event


def _host_of(url: str) -> str:
    return url.split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0]
