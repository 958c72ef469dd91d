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

from opbroker.api.conventions import ANNOTATION_OWNER_UID, CREDENTIALS_KEY, LABEL_MANAGED_BY, MANAGED_BY
from opbroker.api.osb import SFServiceBinding
from opbroker.api.primaza import RegisteredService
from opbroker.controller.claims.core import names
from opbroker.controller.claims.core.views import CatalogEntry, ObjectView, service_id_of
from opbroker.controller.core.views import BindingView
from opbroker.kubeclient.wire import JsonBody, JsonObject

_KEY = re.compile(r"^[A-Za-z0-9._-]+$")
DEFAULT_PROVIDER = "opbroker"


Binding = BindingView | JsonObject
"""A broker binding: its view, or its body as on the wire (the watch handlers hand in bodies)."""


def _view(binding: Binding) -> BindingView:
    return binding if isinstance(binding, BindingView) else BindingView.of(binding)


def opted_in(binding: Binding, plan: CatalogEntry | None) -> bool:
    own = _view(binding).meta.annotations.get(names.ANNOTATION_REGISTER)
    if own is not None:
        return own.strip().lower() == "true"
    if plan is None:
        return False
    plan_value = plan.meta.labels.get(names.ANNOTATION_REGISTER) or plan.meta.annotations.get(names.ANNOTATION_REGISTER)
    return (plan_value or "").strip().lower() == "true"


def setting(binding: Binding, plan: CatalogEntry | None, key: str) -> str | None:
    return _view(binding).meta.annotations.get(key) or (plan.meta.annotations.get(key) if plan is not None else None)


def credentials_of(secret_data: Mapping[str, str] | None) -> JsonBody | None:
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


def flatten(credentials: JsonObject) -> dict[str, str]:
    """One text value per credential key usable as a file name; non-strings JSON-encoded."""
    flat = {}
    for key, value in credentials.items():
        if not _KEY.match(str(key)) or value is None:
            continue
        flat[str(key)] = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return dict(sorted(flat.items()))


def _owner(binding: BindingView) -> JsonBody:
    return {
        "apiVersion": SFServiceBinding.api_version_string(),
        "kind": SFServiceBinding.KIND,
        "name": binding.meta.name,
        "uid": binding.meta.uid,
        "blockOwnerDeletion": True,
    }


def _labels(binding: BindingView) -> dict[str, str]:
    return {LABEL_MANAGED_BY: MANAGED_BY, names.LABEL_SOURCE_BINDING: names.label_value(binding.meta.name)}


def endpoint_secret(binding: Binding, flat: Mapping[str, str]) -> JsonBody:
    view = _view(binding)
    meta = view.meta
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": names.endpoint_secret_name(meta.name),
            "namespace": meta.namespace,
            "labels": _labels(view),
            "annotations": {ANNOTATION_OWNER_UID: meta.uid},
            "ownerReferences": [_owner(view)],
        },
        "type": "Opaque",
        "data": {key: base64.b64encode(value.encode()).decode() for key, value in flat.items()},
    }


def registered_service(
    binding: Binding,
    keys: list[str],
    *,
    service: CatalogEntry | None,
    plan: CatalogEntry | None,
) -> JsonBody:
    """The RegisteredService standing for a broker binding (see the module docstring)."""
    view = _view(binding)
    meta = view.meta
    service_name = (service.name if service is not None else None) or service_id(view)
    plan_name = (plan.name if plan is not None else None) or view.plan_id
    identity = [
        {"name": "type", "value": setting(binding, plan, names.ANNOTATION_TYPE) or service_name},
        {"name": "provider", "value": setting(binding, plan, names.ANNOTATION_PROVIDER) or DEFAULT_PROVIDER},
        {"name": "plan", "value": plan_name},
    ]
    secret = names.endpoint_secret_name(meta.name)
    body: JsonBody = {
        "serviceClassIdentity": identity,
        "serviceEndpointDefinition": [{"name": k, "valueFromSecret": {"name": secret, "key": k}} for k in keys],
    }
    sla = setting(binding, plan, names.ANNOTATION_SLA)
    if sla:
        body["sla"] = sla
    environments = setting(binding, plan, names.ANNOTATION_ENVIRONMENTS)
    if environments:
        body["constraints"] = {"environments": [e.strip() for e in environments.split(",") if e.strip()]}
    manifest: JsonBody = {
        "apiVersion": RegisteredService.api_version_string(),
        "kind": RegisteredService.KIND,
        "metadata": {
            "name": meta.name,
            "namespace": meta.namespace,
            "labels": _labels(view),
            "annotations": {ANNOTATION_OWNER_UID: meta.uid},
            "ownerReferences": [_owner(view)],
        },
        "spec": body,
    }
    RegisteredService.model_validate(manifest)  # what we generate must be what the CRD accepts
    return manifest


def generated_by(obj: ObjectView | None, binding_name: str, binding_uid: str | None = None) -> bool:
    """Whether ``obj`` (the RegisteredService or the endpoint Secret) is the one generated for the binding
    (never touch others): stamped with the binding's uid — ``binding_uid``, or, once the binding is gone, the uid
    of the binding of that name the object is owned by."""
    if obj is None:
        return False
    if binding_uid is None:
        binding_uid = next(
            (uid for kind, name, uid in obj.owners if kind == "SFServiceBinding" and name == binding_name), None
        )
    return binding_uid is not None and obj.owned_by(binding_uid)


def service_id(binding: BindingView) -> str:
    """The binding's ``spec.serviceId`` (the SFService it is of), "" when absent."""
    return service_id_of(binding)
