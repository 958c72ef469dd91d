"""Reconciling the ServiceCatalogs of one namespace from the watch cache (see :mod:`catalogs`)."""

from __future__ import annotations

import logging
from typing import ClassVar

from kubernetes.client.exceptions import ApiException

from opbroker.api.meta import ResourceRef
from opbroker.api.primaza import ServiceCatalog
from opbroker.controller.claims import catalogs, names
from opbroker.controller.claims.context import Context
from opbroker.controller.claims.kinds import CATALOGS
from opbroker.controller.reconciler import DONE, Key, Outcome

logger = logging.getLogger(__name__)


class CatalogReconciler:
    kind: ClassVar[str] = "catalog"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def reconcile(self, key: Key) -> Outcome:
        return self.reconcile_object(key.namespace, key.name)

    def reread(self, key: Key) -> None:
        return None  # reads come from the watch cache or the API; nothing to drop

    def reconcile_object(self, namespace: str, _: str = "") -> Outcome:
        store, kube = self.ctx.store, self.ctx.kube
        services = store.services(namespace)
        claims = store.claims(namespace)
        wanted = (
            catalogs.environments(services, [c.environment for c in claims], self.ctx.settings.environments)
            if services or claims
            else frozenset()
        )
        existing = {
            item["metadata"]["name"]: item
            for item in kube.list_custom(CATALOGS, namespace, label_selector=f"{names.LABEL_CATALOG}=true")
        }
        try:
            for environment in sorted(wanted):
                manifest = catalogs.manifest(namespace, environment, services)
                current = existing.get(environment)
                if current is None or (current.get("spec") or {}).get("services", []) != manifest["spec"]["services"]:
                    kube.apply(manifest)
            for environment in sorted(set(existing) - wanted):
                kube.delete(
                    ResourceRef(
                        api_version=ServiceCatalog.api_version_string(),
                        kind=ServiceCatalog.KIND,
                        name=environment,
                        namespace=namespace,
                    )
                )
        except ApiException as exc:
            if exc.status == 403 and "terminat" in str(exc.body or ""):
                return DONE  # the namespace is going away with its catalogs
            raise
        return DONE
