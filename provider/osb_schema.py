"""The wire shape of the provider's OSB resources, ``opbroker:index:ServiceInstance`` and
``opbroker:index:ServiceBinding``: every property with its camelCase name, type, secret flag and whether it is an
input, required or output only. One table serves the package schema (so YAML and every SDK generator see the
same resources), the gRPC edge's name translation, and the Python face's names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from opbroker.provider import osb_providers as logic

INSTANCE_TYPE = "opbroker:index:ServiceInstance"
BINDING_TYPE = "opbroker:index:ServiceBinding"

_ANY = {"$ref": "pulumi.json#/Any"}
_OBJECT = {"type": "object", "additionalProperties": _ANY}
_STRING = {"type": "string"}
_NUMBER = {"type": "number"}
_BOOLEAN = {"type": "boolean"}


@dataclass(frozen=True)
class Prop:
    """One property: ``name`` (Python, snake_case) and ``wire`` (schema, camelCase)."""

    name: str
    wire: str
    type: Mapping[str, Any]
    description: str
    input: bool = True
    required: bool = False
    secret: bool = False

    def spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {**self.type, "description": self.description}
        if self.secret:
            spec["secret"] = True
        return spec


def _p(name: str, type_: Mapping[str, Any], description: str, **flags: bool) -> Prop:
    head, *rest = name.split("_")
    return Prop(name, head + "".join(w.capitalize() for w in rest), type_, description, **flags)


_CONNECTION = (
    _p("broker_url", _STRING, "The broker's base URL (http or https).", required=True),
    _p("broker_username", _STRING, "Basic-auth user name at the broker.", required=True),
    _p("broker_password", _STRING, "Basic-auth password at the broker (a secret).", required=True, secret=True),
)
_SETTINGS = (
    _p(
        "api_version",
        _STRING,
        f"The OSB version spoken first (default {logic.CONNECTION_DEFAULTS['api_version']}); on 412 the provider "
        "steps down to an older one the broker accepts.",
    ),
    _p(
        "timeout",
        _NUMBER,
        f"Seconds an asynchronous operation may take (default {logic.DEFAULT_TIMEOUT:.0f}).",
    ),
    _p(
        "poll_interval",
        _NUMBER,
        f"First pause between last_operation polls in seconds (default {logic.DEFAULT_POLL_INTERVAL}); it doubles "
        f"up to {logic.MAX_POLL_INTERVAL:.0f} s, and the broker's Retry-After replaces it.",
    ),
    _p(
        "orphan_mitigation",
        _BOOLEAN,
        "After a failed create, ask the broker to delete what it may have left (default true).",
    ),
)

INSTANCE: tuple[Prop, ...] = (
    *_CONNECTION,
    _p("service_id", _STRING, "The catalog service's id.", required=True),
    _p("plan_id", _STRING, "The catalog plan's id (changed in place by an OSB update).", required=True),
    _p("parameters", _OBJECT, "Provision parameters (changed in place by an OSB update)."),
    _p("context", _OBJECT, "OSB context (default: platform pulumi, project, stack)."),
    _p("organization_guid", _STRING, "OSB organization_guid (default: the Pulumi project)."),
    _p("space_guid", _STRING, "OSB space_guid (default: <project>-<stack>)."),
    _p("instance_id", _STRING, "The OSB instance id (generated unless given)."),
    *_SETTINGS,
    _p("dashboard_url", _STRING, "Dashboard URL the broker returned, if any.", input=False),
    _p("state", _STRING, "State of the last operation (succeeded).", input=False),
    _p("description", _STRING, "The broker's description of the last operation.", input=False),
    _p("broker_api_version", _STRING, "The OSB version the broker accepted.", input=False),
)

BINDING: tuple[Prop, ...] = (
    *_CONNECTION,
    _p("instance_id", _STRING, "The instance's OSB id (a ServiceInstance's instanceId).", required=True),
    _p("service_id", _STRING, "The catalog service's id.", required=True),
    _p("plan_id", _STRING, "The instance's plan id.", required=True),
    _p("parameters", _OBJECT, "Bind parameters (a change binds anew)."),
    _p("bind_resource", _OBJECT, "OSB bind_resource (a change binds anew)."),
    _p("context", _OBJECT, "OSB context (default: platform pulumi, project, stack)."),
    _p("binding_id", _STRING, "The OSB binding id (generated unless given)."),
    *_SETTINGS,
    _p("credentials", _OBJECT, "The bind response's credentials (a secret).", input=False, secret=True),
    _p("syslog_drain_url", _STRING, "syslog_drain_url of the bind response, if any.", input=False),
    _p("route_service_url", _STRING, "route_service_url of the bind response, if any.", input=False),
    _p("volume_mounts", {"type": "array", "items": _ANY}, "volume_mounts of the bind response.", input=False),
    _p("broker_api_version", _STRING, "The OSB version the broker accepted.", input=False),
)

#: Outputs every create sets (the defaults check fills in, the generated ids, the accepted version).
_ALWAYS_SET = frozenset(
    ("instance_id", "binding_id", "api_version", "timeout", "poll_interval", "orphan_mitigation", "context")
) | {"broker_api_version"}

PROPS: Mapping[str, tuple[Prop, ...]] = {INSTANCE_TYPE: INSTANCE, BINDING_TYPE: BINDING}
DESCRIPTIONS: Mapping[str, str] = {
    INSTANCE_TYPE: "A service instance at any OSB broker: provisioned on create, updated in place for plan, parameter "
    "and context changes, deprovisioned on delete; asynchronous operations are polled until done or `timeout`.",
    BINDING_TYPE: "A binding at any OSB broker: bound on create, unbound on delete; any change binds anew. Its "
    "credentials are a secret output.",
}


def resource_spec(type_: str) -> dict[str, Any]:
    """The package-schema entry of one resource."""
    props = PROPS[type_]
    return {
        "description": DESCRIPTIONS[type_],
        "properties": {p.wire: p.spec() for p in props},
        "required": sorted(p.wire for p in props if p.required or p.name in _ALWAYS_SET),
        "inputProperties": {p.wire: p.spec() for p in props if p.input},
        "requiredInputs": sorted(p.wire for p in props if p.input and p.required),
    }


def resources() -> dict[str, dict[str, Any]]:
    return {type_: resource_spec(type_) for type_ in PROPS}


def to_python(type_: str, props: Mapping[str, Any]) -> dict[str, Any]:
    """Wire (camelCase) keys to the logic's snake_case; unknown keys pass unchanged."""
    names = {p.wire: p.name for p in PROPS[type_]}
    return {names.get(k, k): v for k, v in props.items()}


def to_wire(type_: str, props: Mapping[str, Any]) -> dict[str, Any]:
    names = {p.name: p.wire for p in PROPS[type_]}
    return {names.get(k, k): v for k, v in props.items()}


def secrets(type_: str) -> frozenset[str]:
    """snake_case names of the properties that are always secret."""
    return frozenset(p.name for p in PROPS[type_] if p.secret)
