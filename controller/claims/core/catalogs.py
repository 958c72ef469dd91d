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

Services of other namespaces that share with this one (``shareWith``) are listed too, after its own, each
with its ``namespace``: the catalog is where a team learns what it may name in a claim's
``serviceNamespaces``. Nothing that is not shared with the namespace is ever listed there. Shared services
do not make environments appear (only this namespace's claims and services, and the configured ones, do).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from opbroker.api.conventions import LABEL_MANAGED_BY, MANAGED_BY
from opbroker.api.primaza import ServiceCatalog, ServiceState
from opbroker.controller.claims.core import constraints, names
from opbroker.controller.claims.core.matching import Candidate
from opbroker.kubeclient.wire import JsonBody

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


def entry(service: Candidate, home: str | None = None) -> JsonBody:
    result: JsonBody = {"name": service.name}
    if home is not None and service.namespace and service.namespace != home:
        result["namespace"] = service.namespace
    result |= {
        "serviceClassIdentity": [{"name": n, "value": v} for n, v in sorted(service.identity)],
        "serviceEndpointDefinitionKeys": sorted(service.keys),
    }
    if service.sla:
        result["sla"] = service.sla
    return result


def entries(
    services: Iterable[Candidate], environment: str, shared: Iterable[Candidate] = (), home: str | None = None
) -> list[JsonBody]:
    """The namespace's own services, by name, then the ones other namespaces share with ``home``."""
    own = [entry(s) for s in sorted(services, key=lambda s: s.name) if listed(s, environment)]
    others = sorted(
        (s for s in shared if home is not None and s.namespace != home), key=lambda s: (s.namespace, s.name)
    )
    return own + [entry(s, home) for s in others if listed(s, environment)]


def manifest(
    namespace: str, environment: str, services: Iterable[Candidate], shared: Iterable[Candidate] = ()
) -> JsonBody:
    return manifest_of(namespace, environment, entries(services, environment, shared, namespace))


def manifest_of(namespace: str, environment: str, listed: list[JsonBody]) -> JsonBody:
    """The catalog listing ``listed`` (:func:`entries`)."""
    return {
        "apiVersion": ServiceCatalog.api_version_string(),
        "kind": ServiceCatalog.KIND,
        "metadata": {
            "name": environment,
            "namespace": namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY, names.LABEL_CATALOG: "true"},
        },
        "spec": {"services": listed},
    }
