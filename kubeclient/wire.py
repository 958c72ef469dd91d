"""The wire's JSON, typed, and the readers every view uses on it.

A body decoded from the API server is JSON: its values are ``None``, booleans, numbers, strings, lists and objects.
:data:`JsonObject` says so without ``Any``: every value read from one is an ``object`` the type checker makes the
reader narrow — through the readers below, which read a field of the wrong type as absent (a tenant may write
anything into an object the controller or the broker reads; it must not make either fail).

They live here, at the bottom of the client, because the informer, the broker and the controller's views all read
the wire and the layers keep those three apart (broker and controller never import each other; the client imports
neither).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

JsonObject = Mapping[str, object]
"""A decoded JSON object, read only: each value is narrowed before it is used (see the readers)."""
JsonBody = dict[str, object]
"""A JSON object being built (a body to send), or one handed on whole to whoever reads it through a view."""

EMPTY: JsonObject = MappingProxyType({})


def mapping_of(value: object) -> JsonObject:
    """``value`` if it is a JSON object, else an empty one."""
    if type(value) is dict:  # parsed JSON, the common case: spares the slower check against the Mapping ABC
        return value
    return value if isinstance(value, Mapping) else EMPTY


def text_of(value: object) -> str | None:
    """A non-empty string, or ``None``."""
    return value if isinstance(value, str) and value else None


def int_of(value: object) -> int | None:
    """An integer (not a boolean), or ``None``."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def bool_of(value: object) -> bool | None:
    """A boolean, or ``None``."""
    return value if isinstance(value, bool) else None


def list_of(value: object) -> tuple[object, ...]:
    """A JSON array's items, or none."""
    return tuple(value) if isinstance(value, list) else ()


def objects_of(value: object) -> tuple[JsonObject, ...]:
    """The JSON objects of an array (other items skipped), or none."""
    return tuple(item for item in value if isinstance(item, Mapping)) if isinstance(value, list) else ()


def strings_of(value: object) -> tuple[str, ...]:
    """The strings of an array (other items skipped), or none."""
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


def string_map_of(value: object) -> Mapping[str, str]:
    """An object of string values (labels, annotations, a Secret's data), other entries skipped."""
    if not isinstance(value, Mapping):
        return MappingProxyType({})
    return MappingProxyType({k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)})


def path_of(body: object, *keys: str) -> object:
    """The value at ``keys`` under ``body`` (``None`` where a step is missing or not an object)."""
    value: object = body
    for key in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value
