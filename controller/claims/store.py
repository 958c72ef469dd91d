"""The claims subsystem's watch cache: RegisteredServices and ServiceClaims by namespace, plus indexes.

Fed by the watch event handlers (the watch is the single writer), read by the reconcilers from worker
threads, so every access holds a lock. Matching reads candidates from here rather than listing them per
claim; a stale entry is harmless because taking a service is a write guarded by the resourceVersion the
cache saw (a 409 makes the claim look again). Secret *contents* are never cached: only which Secrets
each service reads, so a Secret event can find the services and claims to refresh.
"""

from __future__ import annotations

from dataclasses import dataclass

from opbroker.controller.claims.core import matching
from opbroker.controller.claims.core.views import ClaimView, ServiceView
from opbroker.controller.core.views import Meta
from opbroker.controller.runtime.concurrency import Lock
from opbroker.kubeclient.wire import JsonObject


@dataclass(frozen=True)
class ClaimInfo:
    name: str
    environment: str
    application_kind: tuple[str, str] | None
    registered_service: str | None
    state: str | None
    service_namespaces: tuple[str, ...] = ()
    """The other namespaces the claim looks in (``spec.serviceNamespaces``)."""


def claim_info(body: JsonObject) -> ClaimInfo:
    claim = ClaimView.of(body)
    return ClaimInfo(
        name=claim.meta.name,
        environment=claim.environment,
        application_kind=claim.application_kind,
        registered_service=claim.registered_service,
        state=claim.state,
        service_namespaces=claim.service_namespaces,
    )


class Store:
    def __init__(self) -> None:
        self._lock = Lock()
        self._services: dict[str, dict[str, matching.Candidate]] = {}
        self._service_secrets: dict[tuple[str, str], frozenset[str]] = {}
        self._secret_readers: dict[tuple[str, str], set[str]] = {}
        self._claims: dict[str, dict[str, ClaimInfo]] = {}
        self._indexes: dict[str, matching.Index] = {}
        self._credentials: dict[tuple[str, str], str] = {}
        self._sharing: dict[str, set[tuple[str, str]]] = {}
        """Namespace (or ``*``) → the services of other namespaces that share with it."""

    # -- registered services -------------------------------------------------------------------------

    def upsert_service(self, body: JsonObject) -> tuple[matching.Candidate | None, matching.Candidate]:
        view = ServiceView.of(body)
        candidate = matching.candidate_of(view)
        namespace = view.meta.namespace
        with self._lock:
            previous = self._services.setdefault(namespace, {}).get(candidate.name)
            self._services[namespace][candidate.name] = candidate
            self._indexes.pop(namespace, None)
            self._track_secrets(namespace, candidate.name, view.endpoint_secrets)
            self._track_sharing(previous, candidate)
        return previous, candidate

    def remove_service(self, body: JsonObject) -> matching.Candidate | None:
        meta = Meta.of(body.get("metadata"))
        namespace, name = meta.namespace, meta.name
        with self._lock:
            previous = self._services.get(namespace, {}).pop(name, None)
            self._indexes.pop(namespace, None)
            self._track_secrets(namespace, name, frozenset())
            self._track_sharing(previous, None)
        return previous

    def _track_sharing(self, previous: matching.Candidate | None, current: matching.Candidate | None) -> None:
        for candidate, add in ((previous, False), (current, True)):
            if candidate is None:
                continue
            for target in candidate.share_with - {candidate.namespace}:
                sharing = self._sharing.setdefault(target, set())
                if add:
                    sharing.add(candidate.key)
                else:
                    sharing.discard(candidate.key)
                    if not sharing:
                        del self._sharing[target]

    def _track_secrets(self, namespace: str, service: str, secrets: frozenset[str]) -> None:
        old = self._service_secrets.get((namespace, service), frozenset())
        for secret in old - secrets:
            readers = self._secret_readers.get((namespace, secret))
            if readers is not None:
                readers.discard(service)
                if not readers:
                    del self._secret_readers[(namespace, secret)]
        for secret in secrets:
            self._secret_readers.setdefault((namespace, secret), set()).add(service)
        if secrets:
            self._service_secrets[(namespace, service)] = secrets
        else:
            self._service_secrets.pop((namespace, service), None)

    def service(self, namespace: str, name: str) -> matching.Candidate | None:
        with self._lock:
            return self._services.get(namespace, {}).get(name)

    def services(self, namespace: str) -> list[matching.Candidate]:
        with self._lock:
            return list(self._services.get(namespace, {}).values())

    def index(self, namespace: str) -> matching.Index:
        """The namespace's candidates, indexed for matching (rebuilt after any change)."""
        with self._lock:
            index = self._indexes.get(namespace)
            if index is None:
                index = matching.Index(self._services.get(namespace, {}).values())
                self._indexes[namespace] = index
            return index

    def shared_with(self, namespace: str) -> list[matching.Candidate]:
        """The services of other namespaces that share with ``namespace`` (by name or ``*``)."""
        with self._lock:
            keys = self._sharing.get(namespace, set()) | self._sharing.get("*", set())
            found = (self._services.get(ns, {}).get(name) for ns, name in keys if ns != namespace)
            return [candidate for candidate in found if candidate is not None]

    def namespaces(self) -> set[str]:
        """Every namespace holding registered services or claims."""
        with self._lock:
            services = {ns for ns, held in self._services.items() if held}
            return services | {ns for ns, held in self._claims.items() if held}

    def readers_of(self, namespace: str, secret: str) -> set[str]:
        with self._lock:
            return set(self._secret_readers.get((namespace, secret), set()))

    # -- claims --------------------------------------------------------------------------------------

    def upsert_claim(self, body: JsonObject) -> tuple[ClaimInfo | None, ClaimInfo]:
        info = claim_info(body)
        namespace = Meta.of(body.get("metadata")).namespace
        with self._lock:
            previous = self._claims.setdefault(namespace, {}).get(info.name)
            self._claims[namespace][info.name] = info
        return previous, info

    def remove_claim(self, body: JsonObject) -> ClaimInfo | None:
        meta = Meta.of(body.get("metadata"))
        with self._lock:
            return self._claims.get(meta.namespace, {}).pop(meta.name, None)

    def claim(self, namespace: str, name: str) -> ClaimInfo | None:
        with self._lock:
            return self._claims.get(namespace, {}).get(name)

    def claims(self, namespace: str) -> list[ClaimInfo]:
        with self._lock:
            return list(self._claims.get(namespace, {}).values())

    def claims_looking_in(self, namespace: str) -> list[tuple[str, ClaimInfo]]:
        """(namespace, claim) of the claims of other namespaces that name ``namespace`` in ``serviceNamespaces``."""
        with self._lock:
            return [
                (ns, info)
                for ns, held in self._claims.items()
                if ns != namespace
                for info in held.values()
                if namespace in info.service_namespaces
            ]

    # -- broker bindings registered as services ------------------------------------------------------

    def track_credentials(self, namespace: str, secret: str | None, binding: str) -> None:
        with self._lock:
            for key in [k for k, v in self._credentials.items() if v == binding and k[0] == namespace]:
                del self._credentials[key]
            if secret:
                self._credentials[(namespace, secret)] = binding

    def binding_reading(self, namespace: str, secret: str) -> str | None:
        with self._lock:
            return self._credentials.get((namespace, secret))
