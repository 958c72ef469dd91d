"""How opbroker reads what an OSB peer sends — one rule for both sides (the broker reading requests, the
client reading answers).

Peers generated from the OSB OpenAPI document send what they did not set as empty values: an unset struct as
``{}`` (or with empty strings, ``{"version": ""}``), an unset string as ``""``. Others send numbers as
decimal strings (``"maximum_polling_duration": "3600"``) or add fields of their own. The rule:

* an object all of whose fields are ``None`` or ``""`` (``{}`` included), and an empty string, are **absent**
  (:func:`absent_if_blank`);
* unknown fields are **ignored** (OSB "Vendor Extension Fields": receivers MUST ignore them);
* an **optional** field of the wrong type is **dropped** and a warning says which one (:class:`Warnings`), so
  one odd field never fails the whole answer; a number sent as a decimal string, and a boolean sent as
  ``"true"``/``"false"``, are read as the number or boolean the specification means;
* a **required** field gets no leniency: missing, empty or of the wrong type, the entry (or the answer) it
  belongs to is refused, and what is refused says which field.

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: Longest text kept from a value quoted in a warning (a warning names the field; the value only hints).
_QUOTED = 40
_INTEGER = re.compile(r"^[+-]?[0-9]{1,18}$")


def absent_if_blank(value: Any) -> Any:
    """``None`` for an object whose every field is ``None`` or ``""`` (``{}`` included) and for ``""``."""
    if value == "":
        return None
    if isinstance(value, dict) and all(item is None or item == "" for item in value.values()):
        return None
    return value


def quoted(value: Any) -> str:
    """A short rendering of a value for a warning (cut, never the whole of a long value)."""
    text = repr(value)
    return text if len(text) <= _QUOTED else text[: _QUOTED - 1] + "…"


def type_name(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


@dataclass(frozen=True)
class Dropped:
    """One optional field dropped: its dotted path in the answer and why."""

    field: str
    message: str

    def describe(self) -> str:
        return f"{self.field}: {self.message}"


@dataclass
class Warnings:
    """Collects what was dropped while reading one answer."""

    found: list[Dropped] = field(default_factory=list)

    def add(self, field: str, message: str) -> None:
        self.found.append(Dropped(field, message))

    def frozen(self) -> tuple[Dropped, ...]:
        return tuple(self.found)

    def texts(self) -> tuple[str, ...]:
        return tuple(d.describe() for d in self.found)


def _path(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def optional_str(obj: Mapping[str, Any], key: str, warnings: Warnings, where: str = "") -> str | None:
    """A string field: absent when missing or empty; another type is dropped with a warning."""
    value = absent_if_blank(obj.get(key))
    if value is None or isinstance(value, str):
        return value
    warnings.add(_path(where, key), f"is {type_name(value)} ({quoted(value)}), not a string: ignored")
    return None


def optional_bool(obj: Mapping[str, Any], key: str, warnings: Warnings, where: str = "") -> bool | None:
    """A boolean field; ``"true"``/``"false"`` (any case) read as booleans; another type dropped with a warning."""
    value = absent_if_blank(obj.get(key))
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    warnings.add(_path(where, key), f"is {type_name(value)} ({quoted(value)}), not a boolean: ignored")
    return None


def optional_int(obj: Mapping[str, Any], key: str, warnings: Warnings, where: str = "") -> int | None:
    """An integer field; a decimal string (``"3600"``) and an integral float read as the integer; another
    type (or a fraction) dropped with a warning."""
    value = absent_if_blank(obj.get(key))
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _INTEGER.match(value.strip()):
        return int(value.strip())
    warnings.add(_path(where, key), f"is {type_name(value)} ({quoted(value)}), not an integer: ignored")
    return None


def optional_dict(
    obj: Mapping[str, Any], key: str, warnings: Warnings, where: str = "", *, secret: bool = False
) -> dict[str, Any] | None:
    """An object field: absent when missing or blank (:func:`absent_if_blank`); another type dropped with a
    warning — which, for a ``secret`` field (credentials), names the type but never shows the value."""
    value = absent_if_blank(obj.get(key))
    if value is None:
        return None
    if isinstance(value, dict):
        return value
    shown = "" if secret else f" ({quoted(value)})"
    warnings.add(_path(where, key), f"is {type_name(value)}{shown}, not an object: ignored")
    return None


def optional_list(obj: Mapping[str, Any], key: str, warnings: Warnings, where: str = "") -> list[Any] | None:
    """An array field: absent when missing, empty or ``""``; another type dropped with a warning."""
    value = obj.get(key)
    if value is None or value == "" or value == []:
        return None
    if isinstance(value, list):
        return value
    warnings.add(_path(where, key), f"is {type_name(value)} ({quoted(value)}), not an array: ignored")
    return None


def optional_strings(obj: Mapping[str, Any], key: str, warnings: Warnings, where: str = "") -> list[str] | None:
    """An array of strings (tags, requires): entries that are not non-empty strings are dropped with a warning."""
    values = optional_list(obj, key, warnings, where)
    if values is None:
        return None
    kept = [v for v in values if isinstance(v, str) and v]
    if len(kept) != len(values):
        warnings.add(_path(where, key), f"holds {len(values) - len(kept)} entr(ies) that are not strings: ignored")
    return kept or None
