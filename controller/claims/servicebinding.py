"""servicebinding.io binding Secrets: resolving endpoint values and building the Secret. Pure.

The Secret follows the Service Binding specification for Kubernetes (servicebinding.io, "Provisioned
Service" / "Workload Projection"): Secret ``type`` ``servicebinding.io/<type>``; keys ``type`` (required)
and ``provider`` (when the service class identity names one), then the endpoint keys the claim asked
for. Values come from the RegisteredService's ``serviceEndpointDefinition``: literal ``value``, or
``valueFromSecret`` (a key of a Secret in the service's own namespace — read there and nowhere else, also
for a claim of another namespace the service is shared with). Identity wins over an endpoint key
of the same name (``type``/``provider`` are reserved by the specification).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from opbroker.api.conventions import ANNOTATION_OWNER_UID, LABEL_MANAGED_BY, MANAGED_BY
from opbroker.api.primaza import ServiceEndpointDefinitionItem
from opbroker.controller.claims.core import names
from opbroker.controller.claims.core.views import OwnerRef
from opbroker.kubeclient.wire import JsonBody, JsonObject, mapping_of

SECRET_TYPE_PREFIX = "servicebinding.io/"
RESERVED_KEYS = ("type", "provider")


@dataclass(frozen=True)
class Resolution:
    """Endpoint values by key, or the references that could not be resolved."""

    values: dict[str, str]
    missing: tuple[str, ...]

    @property
    def complete(self) -> bool:
        return not self.missing


def referenced_secrets(definition: Iterable[ServiceEndpointDefinitionItem]) -> frozenset[str]:
    """Names of the Secrets an endpoint definition reads (all in the service's namespace)."""
    return frozenset(item.value_from_secret.name for item in definition if item.value_from_secret)


def decode(secret: JsonObject | None) -> dict[str, str] | None:
    """A Secret's ``data`` decoded to text (``stringData`` too, if a caller hands in a manifest)."""
    if secret is None:
        return None
    decoded: dict[str, str] = {}
    for key, value in mapping_of(secret.get("data")).items():
        if value is not None and not isinstance(value, str):
            continue  # not base64 text: no value
        try:
            decoded[key] = base64.b64decode(value or "", validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            continue
    decoded.update({k: str(v) for k, v in mapping_of(secret.get("stringData")).items()})
    return decoded


def resolve(
    definition: Iterable[ServiceEndpointDefinitionItem], secrets: Mapping[str, Mapping[str, str] | None]
) -> Resolution:
    """Every endpoint value; ``secrets`` maps each referenced Secret name to its decoded data or None."""
    values: dict[str, str] = {}
    missing: list[str] = []
    for item in definition:
        if item.value is not None:
            values[item.name] = item.value
            continue
        ref = item.value_from_secret
        assert ref is not None
        data = secrets.get(ref.name)
        if data is None:
            missing.append(f"Secret {ref.name!r} (endpoint {item.name!r}) not found")
        elif ref.key not in data:
            missing.append(f"key {ref.key!r} of Secret {ref.name!r} (endpoint {item.name!r}) not found")
        else:
            values[item.name] = data[ref.key]
    return Resolution(values=values, missing=tuple(missing))


def binding_data(
    *, service_type: str, provider: str | None, values: Mapping[str, str], keys: Iterable[str]
) -> dict[str, str]:
    """The binding's entries: ``type``, ``provider`` (if known), then the requested endpoint keys."""
    data = {key: values[key] for key in keys if key in values and key not in RESERVED_KEYS}
    data["type"] = service_type
    if provider:
        data["provider"] = provider
    return dict(sorted(data.items()))


def content_hash(data: Mapping[str, str]) -> str:
    """A short stable hash of a binding's content (goes into the pod template: a change rolls pods)."""
    canonical = json.dumps(dict(sorted(data.items())), separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def secret_type(service_type: str) -> str:
    return f"{SECRET_TYPE_PREFIX}{service_type}"


def binding_secret(
    *,
    name: str,
    namespace: str,
    data: Mapping[str, str],
    service_type: str,
    owner: OwnerRef,
    labels: Mapping[str, str] | None = None,
) -> JsonBody:
    """The binding Secret manifest, owned (as controller) by ``owner`` and stamped with its uid
    (``opbroker.io/owner-uid``: only a Secret carrying it is ever rewritten or deleted); values base64-encoded."""
    stamped: dict[str, str] = {LABEL_MANAGED_BY: MANAGED_BY, **(labels or {})}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": stamped,
            "annotations": {ANNOTATION_OWNER_UID: owner.uid},
            "ownerReferences": [owner.controlling()],
        },
        "type": secret_type(service_type),
        "data": {key: base64.b64encode(value.encode()).decode() for key, value in sorted(data.items())},
    }


def claim_binding_secret(claim: OwnerRef, data: Mapping[str, str], service_type: str) -> JsonBody:
    """The claim's binding Secret (in its namespace, named after it)."""
    return binding_secret(
        name=names.binding_secret_name(claim.name),
        namespace=claim.namespace,
        data=data,
        service_type=service_type,
        owner=claim,
        labels={names.LABEL_CLAIM: names.label_value(claim.name)},
    )
