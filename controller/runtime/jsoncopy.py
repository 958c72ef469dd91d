"""Deep copies of JSON-shaped data (what the API server sends and the store keeps)."""

from __future__ import annotations

from typing import Any


def copy_json(value: Any) -> Any:
    """A deep copy of JSON-shaped data (dicts, lists, scalars): a few times faster than ``copy.deepcopy``,
    which keeps a memo for shared and cyclic references that objects from the API never have."""
    if isinstance(value, dict):
        return {key: copy_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [copy_json(item) for item in value]
    return value
