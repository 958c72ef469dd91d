"""A namespace's ServiceCatalogs' decisions (pure): which catalogs to write and which to delete.

Deleting is the executor's generic :class:`~opbroker.controller.core.actions.Delete`; writing a catalog is the
one effect of :mod:`opbroker.controller.claims.cataloging`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from opbroker.api.meta import ResourceRef
from opbroker.api.primaza import ServiceCatalog
from opbroker.controller.claims.core import catalogs
from opbroker.controller.claims.core.matching import Candidate
from opbroker.controller.core import actions as a
from opbroker.kubeclient.wire import JsonObject


@dataclass(frozen=True)
class CatalogFacts:
    namespace: str
    services: tuple[Candidate, ...]
    claim_environments: tuple[str, ...]
    configured: tuple[str, ...]
    """The environments configured for the controller (``--catalog-environment``)."""
    existing: JsonObject
    """The controller's catalogs in the namespace: name (the environment) → ``spec.services``."""
    any_claims: bool = False
    shared: tuple[Candidate, ...] = ()
    """Services of other namespaces that share with this one."""


@dataclass(frozen=True)
class ApplyCatalog:
    """Server-side apply a catalog (a namespace being deleted meanwhile takes its catalogs with it)."""

    manifest: JsonObject = field(repr=False)


CatalogAction = ApplyCatalog | a.Delete


def catalog_ref(namespace: str, environment: str) -> ResourceRef:
    return ResourceRef(
        api_version=ServiceCatalog.api_version_string(), kind=ServiceCatalog.KIND, name=environment, namespace=namespace
    )


def plan(facts: CatalogFacts) -> list[CatalogAction]:
    wanted = (
        catalogs.environments(facts.services, facts.claim_environments, facts.configured)
        if facts.services or facts.any_claims
        else frozenset()
    )
    actions: list[CatalogAction] = []
    for environment in sorted(wanted):
        listed = catalogs.entries(facts.services, environment, facts.shared, facts.namespace)
        if environment not in facts.existing or facts.existing[environment] != listed:
            actions.append(ApplyCatalog(catalogs.manifest_of(facts.namespace, environment, listed)))
    actions.extend(a.Delete(catalog_ref(facts.namespace, env)) for env in sorted(set(facts.existing) - wanted))
    return actions
