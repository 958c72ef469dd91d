"""Names, labels and annotations of the claims subsystem: one place, so nothing is spelled twice. Pure."""

from __future__ import annotations

import hashlib

from opbroker.api.conventions import DOMAIN
from opbroker.controller.core import finalizers

CLAIMS_DOMAIN = f"claims.{DOMAIN}"
#: Finalizer on claims: released (service freed, projection removed) before the claim goes (its owner: the table).
FINALIZER = finalizers.CLAIM_RELEASE
#: Label on the objects made for a registered service (health-check Job and Secret).
LABEL_REGISTERED_SERVICE = f"{CLAIMS_DOMAIN}/registered-service"
#: Label on binding Secrets: the claim they belong to.
LABEL_CLAIM = f"{CLAIMS_DOMAIN}/claim"
#: Label on catalogs written by the controller (the only ones it deletes).
LABEL_CATALOG = f"{CLAIMS_DOMAIN}/catalog"
#: Label on RegisteredServices generated from a broker binding: the binding's name.
LABEL_SOURCE_BINDING = f"{CLAIMS_DOMAIN}/source-binding"
#: Fingerprint of the health check a Job runs (a changed check replaces the Job).
ANNOTATION_FINGERPRINT = f"{CLAIMS_DOMAIN}/fingerprint"
#: Prefix of the pod-template annotation holding a binding's content hash (a change rolls the pods).
BINDING_HASH_PREFIX = f"binding.{CLAIMS_DOMAIN}"

#: Opt-in for automatic registration of a broker binding (on the SFServiceBinding or its SFPlan).
ANNOTATION_REGISTER = f"{CLAIMS_DOMAIN}/register"
ANNOTATION_TYPE = f"{CLAIMS_DOMAIN}/type"
ANNOTATION_PROVIDER = f"{CLAIMS_DOMAIN}/provider"
ANNOTATION_SLA = f"{CLAIMS_DOMAIN}/sla"
ANNOTATION_ENVIRONMENTS = f"{CLAIMS_DOMAIN}/environments"

FIELD_MANAGER_PREFIX = "opbroker-claim-"


def bounded(base: str, suffix: str = "", limit: int = 63) -> str:
    """``base + suffix`` if it fits in ``limit`` characters, else a truncated base with a stable hash.

    Kubernetes limits label values, Job names and annotation names to 63 characters while object
    names may have 253; the hash keeps two long names from colliding after truncation.
    """
    name = f"{base}{suffix}"
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(base.encode()).hexdigest()[:8]
    keep = limit - len(suffix) - len(digest) - 1
    return f"{base[:keep].rstrip('-.')}-{digest}{suffix}"


def binding_secret_name(claim: str) -> str:
    return bounded(claim, "-binding", 253)


def healthcheck_name(service: str) -> str:
    """Name of a service's health-check Job and of the Secret it mounts."""
    return bounded(service, "-healthcheck")


def endpoint_secret_name(binding: str) -> str:
    """Name of the flattened-credentials Secret behind an automatically registered service."""
    return bounded(binding, "-endpoint", 253)


def field_manager(claim: str) -> str:
    """The server-side-apply field manager owning exactly one claim's projection into workloads."""
    return bounded(FIELD_MANAGER_PREFIX + claim, "", 128)


def label_value(name: str) -> str:
    return bounded(name)


def qualified(namespace: str, name: str, *, home: str) -> str:
    """How an object is named from ``home``: its name in the same namespace, ``namespace/name`` from another
    (``claimedBy`` of a service held by another namespace's claim, a claim's ``registeredService``)."""
    return name if namespace == home else f"{namespace}/{name}"


def parse_ref(ref: str, *, home: str) -> tuple[str, str]:
    """(namespace, name) of a :func:`qualified` reference written in ``home``."""
    namespace, _, name = ref.rpartition("/")
    return (namespace or home, name)
