"""Reading and writing the four Service Catalog kinds and the Secrets they refer to: the thin Kubernetes edge.

Broker and ServiceClass are cluster-scoped, Instance and Binding namespaced; one small class hides which
call each needs, and every call goes through the controller's one door (:class:`Kube`: its deadlines, its
store, ``FakeKube`` in tests).

Reads are served from the controller's store (``controller.store``), as the OSB kinds' are: the four kinds are
watched, and the watch handlers (``handlers``) keep each event's object there before they enqueue anything
(:meth:`CatalogApi.keep`), so a reconcile never reads older than the event that woke it; our own writes keep
the server's answer there, so a reconcile right after one of them reads what it wrote. The Secrets read
(a Broker's credentials, ``parametersFrom``, a Binding's credentials) come from the store too while the body
held is of the newest version the Secret watch reported (``Kube.read_secret(stored=True)``). Reading the API
instead cost some 18 GETs per Instance and 25 per Binding. A copy that is nevertheless behind is caught where
it matters: every write that could undo a newer change is guarded by resourceVersion, and its 409 makes the
runtime drop the copy (:meth:`CatalogApi.forget`, the reconcilers' ``reread``) and observe again from the API.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from contextlib import contextmanager

from kubernetes.client.exceptions import ApiException

from opbroker.api.servicecatalog import Binding, Broker, Instance, ServiceClass
from opbroker.controller.core.views import Meta
from opbroker.controller.runtime.kube import Kind, Kube
from opbroker.controller.runtime.outcomes import Conflict
from opbroker.controller.servicecatalog.core.views import FINALIZER as FINALIZER
from opbroker.kubeclient.wire import JsonBody, string_map_of

GROUP, VERSION = Broker.GROUP, Broker.VERSION
BROKERS, CLASSES, INSTANCES, BINDINGS = Broker.PLURAL, ServiceClass.PLURAL, Instance.PLURAL, Binding.PLURAL
CLUSTER_SCOPED = frozenset({BROKERS, CLASSES})

#: The label naming the Broker a ServiceClass came from (relists find their classes by it).


#: Where each kind lives in the API (the Kube door's own addressing).
KINDS = {
    plural: Kind(GROUP, VERSION, plural, namespaced=plural not in CLUSTER_SCOPED)
    for plural in (BROKERS, CLASSES, INSTANCES, BINDINGS)
}


@contextmanager
def _conflicts() -> Iterator[None]:
    """A 409 from a guarded write is the runtime's :class:`Conflict` (re-read, reconcile again at once)."""
    try:
        yield
    except ApiException as exc:
        if exc.status == 409:
            raise Conflict(str(exc.reason)) from exc
        raise


class CatalogApi:
    """CRUD on the Service Catalog kinds through the controller's one door (:class:`Kube`, its deadlines and
    store); ``namespace`` is ignored for the cluster-scoped ones. Reads come from the store when it holds the
    object (see the module's docstring), else from the API."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    def watched(self) -> None:
        """The four kinds are watched from now on (their handlers call :meth:`keep`): serve them from the store."""
        for kind in KINDS.values():
            self.kube.store.feed(kind.store_key)

    def keep(self, plural: str, event_type: str, body: JsonBody) -> None:
        """A watch event of ``plural``: keep the store current — before anything is enqueued for it."""
        if event_type == "DELETED":
            self.kube.store.remove(KINDS[plural].store_key, body)
        else:
            self.kube.store.put(KINDS[plural].store_key, body)

    def forget(self, plural: str, namespace: str, name: str) -> None:
        """A guarded write met a conflict: drop the copy held, so the next read goes to the API."""
        self.kube.store.stale(KINDS[plural].store_key, namespace if plural not in CLUSTER_SCOPED else None, name)

    def get(self, plural: str, namespace: str, name: str) -> JsonBody | None:
        return self.kube.get_custom(KINDS[plural], namespace, name)

    def list(self, plural: str, namespace: str | None = None, label_selector: str = "") -> list[JsonBody]:
        return self.kube.list_custom(KINDS[plural], namespace, label_selector)

    def create(self, plural: str, body: JsonBody) -> JsonBody:
        with _conflicts():
            return self.kube.create_custom(KINDS[plural], body)

    def patch(self, plural: str, namespace: str, name: str, patch: JsonBody) -> JsonBody | None:
        """A merge patch; include ``metadata.resourceVersion`` to guard it (a 409 raises Conflict)."""
        with _conflicts():
            return self.kube.patch_custom(KINDS[plural], namespace, name, patch)

    def patch_status(self, plural: str, obj: JsonBody, status: JsonBody, *, guarded: bool = True) -> JsonBody | None:
        """Merge ``status`` into ``obj``'s status, guarded by the version it was read at; updates ``obj``."""
        meta = Meta.of(obj.get("metadata"))
        if guarded and meta.resource_version is None:
            raise ValueError(f"a guarded status write of {meta.name!r} needs the resourceVersion it was read at")
        version = meta.resource_version if guarded else None
        with _conflicts():
            patched = self.kube.patch_custom_status(
                KINDS[plural], meta.namespace, meta.name, status, resource_version=version
            )
        if patched is not None:
            obj.clear()
            obj.update(patched)
        return patched

    # -- Secrets and Events: the controller's Kube does these ---------------------------------------------

    def secret_data(self, namespace: str, name: str) -> dict[str, str] | None:
        """A Secret's values, decoded; None if it does not exist."""
        secret = self.read_secret(namespace, name)
        if secret is None:
            return None
        return {key: base64.b64decode(value).decode() for key, value in string_map_of(secret.get("data")).items()}

    def read_secret(self, namespace: str, name: str) -> JsonBody | None:
        """The Secret (None if it does not exist): from the store while it holds the newest version's body."""
        return self.kube.read_secret(namespace, name, stored=True)
