"""ServiceCatalogs: per namespace and environment, the services one can claim right now. Pure.

Which environments get a catalog (in each namespace holding RegisteredServices or ServiceClaims):

* every environment configured for the controller (``--catalog-environment``), so an environment nobody
  has named yet still shows what it offers;
* every ``environmentTag`` of a ServiceClaim in the namespace;
* every environment a RegisteredService's constraints name positively (``dev``; not ``!prod``).

The catalog is named after its environment (names that are not valid object names are skipped). It
lists the services that are Available and offered there: a claimed service leaves every catalog, a
deleted one too, an Unreachable or Undetermined one until it is Available again. A catalog whose
environment is no longer named by anything is deleted (only catalogs the controller labelled as its own).
Entries are sorted by name, so an unchanged catalog is never re-written.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from opbroker.api.conventions import LABEL_MANAGED_BY, MANAGED_BY
from opbroker.api.primaza import ServiceCatalog, ServiceState
from opbroker.controller.claims import constraints, names
from opbroker.controller.claims.matching import Candidate

_OBJECT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def valid_name(environment: str) -> bool:
    return len(environment) <= 253 and bool(_OBJECT_NAME.match(environment))


def environments(
    services: Iterable[Candidate], claim_environments: Iterable[str], configured: Iterable[str]
) -> frozenset[str]:
    """The environments that get a catalog (see the module docstring)."""
    named = set(configured) | set(claim_environments)
    for service in services:
        named |= constraints.named(service.environments)
    return frozenset(env for env in named if valid_name(env))


def listed(service: Candidate, environment: str) -> bool:
    return (
        service.problem is None
        and not service.deleting
        and service.state == ServiceState.AVAILABLE
        and service.claimed_by is None
        and constraints.offered(service.environments, environment)
    )


def entry(service: Candidate) -> dict[str, Any]:
    result: dict[str, Any] = {
        "name": service.name,
        "serviceClassIdentity": [{"name": n, "value": v} for n, v in sorted(service.identity)],
        "serviceEndpointDefinitionKeys": sorted(service.keys),
    }
    if service.sla:
        result["sla"] = service.sla
    return result


def entries(services: Iterable[Candidate], environment: str) -> list[dict[str, Any]]:
    return [entry(s) for s in sorted(services, key=lambda s: s.name) if listed(s, environment)]


def manifest(namespace: str, environment: str, services: Iterable[Candidate]) -> dict[str, Any]:
    return {
        "apiVersion": ServiceCatalog.api_version_string(),
        "kind": ServiceCatalog.KIND,
        "metadata": {
            "name": environment,
            "namespace": namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY, names.LABEL_CATALOG: "true"},
        },
        "spec": {"services": entries(services, environment)},
    }
