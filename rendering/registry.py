"""Instance and binding registries (Couchbase's model): a small JSON key/value store per instance and binding.

The controller persists each registry in a Secret (``api.conventions.instance_registry_name``); this module is
the pure part: which keys exist, who may write them, and how a new registry starts.

* Read-only keys (:data:`READ_ONLY_KEYS`) are defined from the request and are always recomputed, so a
  template can read them but never change them.
* Read-write keys (:data:`READ_WRITE_KEYS`) and any user-defined key may be written by templates, through
  the generators (``generatePassword`` ...) or ``setRegistry``.
* Reserved keys (:data:`RESERVED_KEYS`, and anything starting with ``operation``) hold the request context,
  parameters and operation bookkeeping: templates can neither read nor write them (``parameter()`` reads the
  parameters; the ``namespace`` key gives the namespace).

A binding registry inherits every key of its instance's registry *when the binding is created* and is not
updated afterwards, so a binding keeps the values it was given even if the instance's change later.
Values are JSON: anything stored here survives ``json.dumps``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from opbroker.rendering import sizing
from opbroker.rendering.errors import RenderError, RenderLimitError

NAMESPACE = "namespace"
INSTANCE_ID = "instance-id"
BINDING_ID = "binding-id"
SERVICE_ID = "service-id"
PLAN_ID = "plan-id"
DASHBOARD_URL = "dashboard-url"
CREDENTIALS = "credentials"
CONTEXT = "context"
PARAMETERS = "parameters"

READ_ONLY_KEYS = frozenset({NAMESPACE, INSTANCE_ID, BINDING_ID, SERVICE_ID, PLAN_ID})
READ_WRITE_KEYS = frozenset({DASHBOARD_URL, CREDENTIALS})
RESERVED_KEYS = frozenset({CONTEXT, PARAMETERS})
RESERVED_PREFIX = "operation"


def is_reserved(key: str) -> bool:
    return key in RESERVED_KEYS or key.startswith(RESERVED_PREFIX)


def _spec(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    spec = (obj or {}).get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _name(obj: Mapping[str, Any] | None) -> str | None:
    metadata = (obj or {}).get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return name if isinstance(name, str) else None


def _json(value: Any) -> Any:
    """A deep copy that is plain JSON (and proves the value is JSON at all)."""
    return json.loads(json.dumps(value))


def _json_object(value: Mapping[str, Any]) -> dict[str, Any]:
    copied: dict[str, Any] = _json(dict(value))
    return copied


def instance_registry(instance: Mapping[str, Any], *, namespace: str) -> dict[str, Any]:
    """The keys a new instance registry starts with, derived from the SFServiceInstance (pure).

    ``namespace`` is the namespace the instance's objects go to by default (request context namespace, else
    the controller's default); ``instance-id`` is the OSB id (``spec.instanceId``), else the object name.
    """
    spec = _spec(instance)
    return {
        NAMESPACE: namespace,
        INSTANCE_ID: spec.get("instanceId") or _name(instance),
        SERVICE_ID: spec.get("serviceId"),
        PLAN_ID: spec.get("planId"),
        CONTEXT: _json(spec.get("context")),
        PARAMETERS: _json(spec.get("parameters")),
    }


def binding_registry(instance_registry: Mapping[str, Any], binding: Mapping[str, Any]) -> dict[str, Any]:
    """A new binding registry: every key of the instance registry, plus the binding's own (pure).

    Called once, when the binding is created; afterwards the binding registry is read as stored, so later
    changes to the instance registry do not reach it (Couchbase's scoping rule).
    """
    spec = _spec(binding)
    inherited = _json_object(instance_registry)
    inherited.update(
        {
            BINDING_ID: spec.get("id") or _name(binding),
            CONTEXT: _json(spec.get("context")),
            PARAMETERS: _json(spec.get("parameters")),
        }
    )
    return inherited


class Registry:
    """The registry a template sees during one render: reads anywhere, writes only where allowed.

    ``writable`` is False for the actions that only observe (``sources``, ``status``, ``clusterSelector``):
    a value generated there could never be persisted, so generating one is an error instead of a silently
    changing password.

    ``max_bytes`` bounds what one render writes (keys and values as JSON text, each key counted once however
    often it is written): every write is a copy the controller then stores in a Secret, so a loop writing one
    large value under many keys is refused before the copies are made.
    """

    def __init__(self, values: Mapping[str, Any], *, writable: bool, max_bytes: int | None = None) -> None:
        self._values = dict(values)
        self.writable = writable
        self._max_bytes = max_bytes
        self._written: dict[str, int] = {}

    def get(self, key: str) -> Any:
        """The value stored under ``key``, or None. Reserved keys are refused."""
        if not isinstance(key, str):
            raise RenderError(f"registry: the key must be a string, got {type(key).__name__}")
        if is_reserved(key):
            raise RenderError(f"registry: key {key!r} is reserved (use parameter() for request parameters)")
        return self._values.get(key)

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def put(self, key: str, value: Any, *, by: str) -> None:
        """Store ``value`` under ``key``; ``by`` names the function for the error message."""
        if not isinstance(key, str) or not key:
            raise RenderError(f"{by}: the registry key must be a non-empty string")
        if key in READ_ONLY_KEYS or is_reserved(key):
            raise RenderError(f"{by}: registry key {key!r} is read-only")
        if not self.writable:
            raise RenderError(
                f"{by}: cannot store {key!r} here; values are generated by the provision and bind templates"
            )
        self._account(key, value, by)
        try:
            self._values[key] = _json(value)
        except (TypeError, ValueError) as exc:
            raise RenderError(f"{by}: the value for {key!r} is not JSON ({exc})") from None

    def _account(self, key: str, value: Any, by: str) -> None:
        if self._max_bytes is None:
            return
        others = sum(self._written.values()) - self._written.get(key, 0)
        size = len(key) + sizing.estimate(value, self._max_bytes - others)
        if others + size > self._max_bytes:
            raise RenderLimitError(
                f"{by}: the values written to the registry would be over {others + size} bytes, over the limit of "
                f"{self._max_bytes}"
            )
        self._written[key] = size

    def snapshot(self) -> dict[str, Any]:
        """The registry contents as they stand, for the controller to persist."""
        return dict(self._values)
