"""Broker-provisioned services registered automatically, so claims and OSB share one catalog. Pure.

Opt-in, per binding or per plan: the annotation ``claims.opbroker.io/register: "true"`` on an
``SFServiceBinding``, or the same label or annotation on its ``SFPlan`` (``"false"`` on the binding opts
one binding out of a plan that opted in). Once the binding has ``succeeded``, its credentials Secret
(named by ``status.response.secretRef``, key ``response``, JSON ``{"credentials": {...}}``) backs:

* an endpoint Secret ``<binding>-endpoint`` with one key per credential (strings as they are, other JSON
  values JSON-encoded; keys that cannot be file names are skipped), re-rendered when the credentials
  change;
* a RegisteredService named after the binding, in its namespace, with ``valueFromSecret`` endpoints
  into that Secret and the identity ``type`` (the SFService's name, or ``claims.opbroker.io/type``),
  ``provider`` (``opbroker``, or ``claims.opbroker.io/provider``) and ``plan`` (the SFPlan's name);
  ``claims.opbroker.io/sla`` and ``claims.opbroker.io/environments`` (comma-separated, ``!`` allowed)
  fill ``sla`` and ``constraints``. Binding annotations win over the plan's.

Both are owned by the binding and stamped with its uid (``opbroker.io/owner-uid``); when the binding is
deleted (unbind), the RegisteredService is deleted at once, which makes any claim holding it re-match. An
object of either name without the binding's stamp is never overwritten or deleted. Both live in the binding's
namespace, read only the binding's credentials Secret there, and share with no other namespace.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from typing import Any

from opbroker.api.conventions import ANNOTATION_OWNER_UID, CREDENTIALS_KEY, LABEL_MANAGED_BY, MANAGED_BY, owned_by
from opbroker.api.primaza import RegisteredService
from opbroker.controller.claims.core import names

_KEY = re.compile(r"^[A-Za-z0-9._-]+$")
DEFAULT_PROVIDER = "opbroker"


def _meta(obj: Mapping[str, Any] | None, field: str) -> dict[str, str]:
    found: dict[str, str] = ((obj or {}).get("metadata") or {}).get(field) or {}
    return found


def opted_in(binding: Mapping[str, Any], plan: Mapping[str, Any] | None) -> bool:
    own = _meta(binding, "annotations").get(names.ANNOTATION_REGISTER)
    if own is not None:
        return own.strip().lower() == "true"
    plan_value = _meta(plan, "labels").get(names.ANNOTATION_REGISTER) or _meta(plan, "annotations").get(
        names.ANNOTATION_REGISTER
    )
    return (plan_value or "").strip().lower() == "true"


def setting(binding: Mapping[str, Any], plan: Mapping[str, Any] | None, key: str) -> str | None:
    return _meta(binding, "annotations").get(key) or _meta(plan, "annotations").get(key)


def credentials_of(secret_data: Mapping[str, str] | None) -> dict[str, Any] | None:
    """The ``credentials`` object of a credentials Secret (decoded data), or None if unusable."""
    raw = (secret_data or {}).get(CREDENTIALS_KEY)
    if raw is None:
        return None
    try:
        response = json.loads(raw)
    except ValueError:
        return None
    credentials = response.get("credentials") if isinstance(response, dict) else None
    return credentials if isinstance(credentials, dict) else None


def flatten(credentials: Mapping[str, Any]) -> dict[str, str]:
    """One text value per credential key usable as a file name; non-strings JSON-encoded."""
    flat = {}
    for key, value in credentials.items():
        if not _KEY.match(str(key)) or value is None:
            continue
        flat[str(key)] = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return dict(sorted(flat.items()))


def _owner(binding: Mapping[str, Any]) -> dict[str, Any]:
    meta = binding["metadata"]
    return {
        "apiVersion": binding["apiVersion"],
        "kind": binding["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "blockOwnerDeletion": True,
    }


def _labels(binding: Mapping[str, Any]) -> dict[str, str]:
    return {LABEL_MANAGED_BY: MANAGED_BY, names.LABEL_SOURCE_BINDING: names.label_value(binding["metadata"]["name"])}


def endpoint_secret(binding: Mapping[str, Any], flat: Mapping[str, str]) -> dict[str, Any]:
    meta = binding["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": names.endpoint_secret_name(meta["name"]),
            "namespace": meta["namespace"],
            "labels": _labels(binding),
            "annotations": {ANNOTATION_OWNER_UID: meta["uid"]},
            "ownerReferences": [_owner(binding)],
        },
        "type": "Opaque",
        "data": {key: base64.b64encode(value.encode()).decode() for key, value in flat.items()},
    }


def registered_service(
    binding: Mapping[str, Any],
    keys: list[str],
    *,
    service: Mapping[str, Any] | None,
    plan: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The RegisteredService standing for a broker binding (see the module docstring)."""
    meta = binding["metadata"]
    spec = binding.get("spec") or {}
    service_name = ((service or {}).get("spec") or {}).get("name") or spec.get("serviceId", "")
    plan_name = ((plan or {}).get("spec") or {}).get("name") or spec.get("planId", "")
    identity = [
        {"name": "type", "value": setting(binding, plan, names.ANNOTATION_TYPE) or service_name},
        {"name": "provider", "value": setting(binding, plan, names.ANNOTATION_PROVIDER) or DEFAULT_PROVIDER},
        {"name": "plan", "value": plan_name},
    ]
    secret = names.endpoint_secret_name(meta["name"])
    body: dict[str, Any] = {
        "serviceClassIdentity": identity,
        "serviceEndpointDefinition": [{"name": k, "valueFromSecret": {"name": secret, "key": k}} for k in keys],
    }
    sla = setting(binding, plan, names.ANNOTATION_SLA)
    if sla:
        body["sla"] = sla
    environments = setting(binding, plan, names.ANNOTATION_ENVIRONMENTS)
    if environments:
        body["constraints"] = {"environments": [e.strip() for e in environments.split(",") if e.strip()]}
    manifest = {
        "apiVersion": RegisteredService.api_version_string(),
        "kind": RegisteredService.KIND,
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": _labels(binding),
            "annotations": {ANNOTATION_OWNER_UID: meta["uid"]},
            "ownerReferences": [_owner(binding)],
        },
        "spec": body,
    }
    RegisteredService.model_validate(manifest)  # what we generate must be what the CRD accepts
    return manifest


def generated_by(obj: Mapping[str, Any] | None, binding_name: str, binding_uid: str | None = None) -> bool:
    """Whether ``obj`` (the RegisteredService or the endpoint Secret) is the one generated for the binding
    (never touch others): stamped with the binding's uid — ``binding_uid``, or, once the binding is gone, the uid
    of the binding of that name the object is owned by."""
    if obj is None:
        return False
    if binding_uid is None:
        binding_uid = next(
            (
                str(owner.get("uid"))
                for owner in (obj.get("metadata") or {}).get("ownerReferences") or []
                if owner.get("kind") == "SFServiceBinding" and owner.get("name") == binding_name
            ),
            None,
        )
    return binding_uid is not None and owned_by(dict(obj), binding_uid)
