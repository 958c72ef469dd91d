"""Reading and writing the four Service Catalog kinds and the Secrets they refer to: the thin Kubernetes edge.

Broker and ServiceClass are cluster-scoped, Instance and Binding namespaced; one small class hides which
call each needs. Reads go to the API server (these objects are few per reconcile, and fresh reads keep the
OSB calls they drive from acting on stale state); writes are guarded by resourceVersion where a stale copy
could undo a newer change.
"""

from __future__ import annotations

import base64
from typing import Any

from kubernetes.client.exceptions import ApiException

from opbroker.api.servicecatalog import Binding, Broker, Instance, ServiceClass
from opbroker.controller.kube import Kube
from opbroker.controller.reconciler import Conflict

GROUP, VERSION = Broker.GROUP, Broker.VERSION
BROKERS, CLASSES, INSTANCES, BINDINGS = Broker.PLURAL, ServiceClass.PLURAL, Instance.PLURAL, Binding.PLURAL
CLUSTER_SCOPED = frozenset({BROKERS, CLASSES})

#: The label naming the Broker a ServiceClass came from (relists find their classes by it).
BROKER_LABEL = "servicecatalog.k8s.io/broker"
FINALIZER = "servicecatalog.k8s.io/opbroker"


def _unless_404(call: Any) -> Any:
    try:
        return call()
    except ApiException as exc:
        if exc.status == 404:
            return None
        if exc.status == 409:
            raise Conflict(str(exc.reason)) from exc
        raise


class CatalogApi:
    """CRUD on the Service Catalog kinds; ``namespace`` is ignored for the cluster-scoped ones."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.custom = kube.custom

    def get(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        if plural in CLUSTER_SCOPED:
            return _unless_404(lambda: self.custom.get_cluster_custom_object(GROUP, VERSION, plural, name))  # type: ignore[no-any-return]
        return _unless_404(  # type: ignore[no-any-return]
            lambda: self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
        )

    def list(self, plural: str, namespace: str | None = None, label_selector: str = "") -> list[dict[str, Any]]:
        listed: Any
        if plural in CLUSTER_SCOPED or namespace is None:
            listed = self.custom.list_cluster_custom_object(GROUP, VERSION, plural, label_selector=label_selector)
        else:
            listed = self.custom.list_namespaced_custom_object(
                GROUP, VERSION, namespace, plural, label_selector=label_selector
            )
        items: list[dict[str, Any]] = listed.get("items") or []
        return items

    def create(self, plural: str, body: dict[str, Any]) -> dict[str, Any]:
        namespace = body["metadata"].get("namespace")
        if plural in CLUSTER_SCOPED:
            created = _unless_404(lambda: self.custom.create_cluster_custom_object(GROUP, VERSION, plural, body))
        else:
            created = _unless_404(
                lambda: self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, plural, body)
            )
        return created  # type: ignore[no-any-return]

    def patch(self, plural: str, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any] | None:
        """A merge patch; include ``metadata.resourceVersion`` to guard it (a 409 raises Conflict)."""
        if plural in CLUSTER_SCOPED:
            return _unless_404(  # type: ignore[no-any-return]
                lambda: self.custom.patch_cluster_custom_object(GROUP, VERSION, plural, name, patch)
            )
        return _unless_404(  # type: ignore[no-any-return]
            lambda: self.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, plural, name, patch)
        )

    def patch_status(
        self, plural: str, obj: dict[str, Any], status: dict[str, Any], *, guarded: bool = True
    ) -> dict[str, Any] | None:
        """Merge ``status`` into ``obj``'s status, guarded by the version it was read at; updates ``obj``."""
        meta = obj["metadata"]
        body: dict[str, Any] = {"status": status}
        if guarded:
            body["metadata"] = {"resourceVersion": meta["resourceVersion"]}
        if plural in CLUSTER_SCOPED:
            patched = _unless_404(
                lambda: self.custom.patch_cluster_custom_object_status(GROUP, VERSION, plural, meta["name"], body)
            )
        else:
            patched = _unless_404(
                lambda: self.custom.patch_namespaced_custom_object_status(
                    GROUP, VERSION, meta["namespace"], plural, meta["name"], body
                )
            )
        if patched is not None:
            obj.clear()
            obj.update(patched)
        return patched  # type: ignore[no-any-return]

    def set_finalizer(self, plural: str, obj: dict[str, Any], *, present: bool) -> dict[str, Any] | None:
        meta = obj["metadata"]
        finalizers = [f for f in meta.get("finalizers") or [] if f != FINALIZER]
        if present:
            finalizers.append(FINALIZER)
        patch = {"metadata": {"finalizers": finalizers or None, "resourceVersion": meta["resourceVersion"]}}
        patched = self.patch(plural, meta.get("namespace", ""), meta["name"], patch)
        if patched is not None:
            obj.clear()
            obj.update(patched)
        return patched

    # -- Secrets and Events: the controller's Kube does these ---------------------------------------------

    def secret_data(self, namespace: str, name: str) -> dict[str, str] | None:
        """A Secret's values, decoded; None if it does not exist."""
        secret = self.kube.read_secret(namespace, name)
        if secret is None:
            return None
        return {key: base64.b64decode(value).decode() for key, value in (secret.get("data") or {}).items()}
