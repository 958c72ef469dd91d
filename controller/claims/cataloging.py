"""Reconciling the ServiceCatalogs of one namespace from the watch cache (see :mod:`catalogs`).

observe reads the namespace's services and claims (watch cache) and the catalogs that exist; plan (pure) calls
:mod:`catalogs` for the environments and manifests and returns what to apply and what to delete; act does it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from kubernetes.client.exceptions import ApiException

from opbroker.api.meta import ResourceRef
from opbroker.api.primaza import ServiceCatalog
from opbroker.controller.claims.context import Context
from opbroker.controller.claims.core import catalogs, names
from opbroker.controller.claims.core.matching import Candidate
from opbroker.controller.claims.kinds import CATALOGS
from opbroker.controller.reconciler import DONE, Key, ObservePlanAct, Outcome, namespace_terminating

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CatalogFacts:
    namespace: str
    services: tuple[Candidate, ...]
    claim_environments: tuple[str, ...]
    configured: tuple[str, ...]
    """The environments configured for the controller (``--catalog-environment``)."""
    existing: Mapping[str, Any]
    """The controller's catalogs in the namespace: name (the environment) → ``spec.services``."""
    any_claims: bool = False
    shared: tuple[Candidate, ...] = ()
    """Services of other namespaces that share with this one."""


@dataclass(frozen=True)
class ApplyCatalog:
    manifest: dict[str, Any]


@dataclass(frozen=True)
class DeleteCatalog:
    environment: str


CatalogAction = ApplyCatalog | DeleteCatalog


class CatalogReconciler(ObservePlanAct[CatalogFacts, CatalogAction]):
    kind: ClassVar[str] = "catalog"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def observe(self, key: Key) -> CatalogFacts:
        store, namespace = self.ctx.store, key.namespace
        claims = store.claims(namespace)
        existing = {
            item["metadata"]["name"]: (item.get("spec") or {}).get("services", [])
            for item in self.ctx.kube.list_custom(CATALOGS, namespace, label_selector=f"{names.LABEL_CATALOG}=true")
        }
        return CatalogFacts(
            namespace=namespace,
            services=tuple(store.services(namespace)),
            claim_environments=tuple(c.environment for c in claims),
            configured=tuple(self.ctx.settings.environments),
            existing=existing,
            any_claims=bool(claims),
            shared=tuple(store.shared_with(namespace)),
        )

    @staticmethod
    def plan(facts: CatalogFacts) -> Sequence[CatalogAction]:
        wanted = (
            catalogs.environments(facts.services, facts.claim_environments, facts.configured)
            if facts.services or facts.any_claims
            else frozenset()
        )
        actions: list[CatalogAction] = []
        for environment in sorted(wanted):
            manifest = catalogs.manifest(facts.namespace, environment, facts.services, facts.shared)
            if environment not in facts.existing or facts.existing[environment] != manifest["spec"]["services"]:
                actions.append(ApplyCatalog(manifest))
        actions.extend(DeleteCatalog(environment) for environment in sorted(set(facts.existing) - wanted))
        return actions

    def act(self, facts: CatalogFacts, actions: Sequence[CatalogAction]) -> Outcome:
        kube = self.ctx.kube
        try:
            for action in actions:
                if isinstance(action, ApplyCatalog):
                    kube.apply(action.manifest)
                else:
                    kube.delete(
                        ResourceRef(
                            api_version=ServiceCatalog.api_version_string(),
                            kind=ServiceCatalog.KIND,
                            name=action.environment,
                            namespace=facts.namespace,
                        )
                    )
        except ApiException as exc:
            if namespace_terminating(exc):
                return DONE  # the namespace is going away with its catalogs
            raise
        return DONE
