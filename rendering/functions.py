"""The functions and filters a plan template can call, beyond Jinja's safe built-ins.

Names follow Helm/Sprig and the Couchbase broker (``toYaml``, ``b64dec``, ``registry``, ``parameter`` ...), so
authors coming from Service Fabrik's gotemplates find what they know. Most are available both as a function
and as a filter (``toJson(x)`` or ``x | toJson``). Absent inputs (None, or an undefined attribute of a live
object that does not exist yet) flow through as None instead of failing, so ``secret.data.password | b64dec``
is simply null until the Secret exists; ``required`` is the way to insist.

Nothing here mutates its arguments: the sandbox forbids templates to change inputs, and ``merge``/``omit``/
``pick`` are the functional way to derive a changed object (the bind template adding a user, say).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

import jsonpointer
import yaml
from jinja2 import Undefined

from opbroker.rendering import generators, state
from opbroker.rendering.errors import RenderError
from opbroker.rendering.interpolation import plain


def _absent(value: Any) -> bool:
    return value is None or isinstance(value, Undefined)


def _written(value: Any, what: str, *, indent: int = 0) -> int:
    """Refuse a value whose text (JSON, YAML) would pass the render's output limit, before writing it."""
    return state.current().budget.check_written(value, what, indent=indent)


def b64enc(value: Any) -> str | None:
    """Base64 of the value's UTF-8 text (what Secret ``data`` wants)."""
    if _absent(value):
        return None
    size = _written(value, "b64enc's input")
    state.current().budget.check_size(-(-size // 3) * 4, "b64enc's result")
    text = value if isinstance(value, str) else json.dumps(plain(value))
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


def b64dec(value: Any) -> str | None:
    """The UTF-8 text behind a base64 string (what a Secret's ``data`` holds)."""
    if _absent(value):
        return None
    if not isinstance(value, str):
        raise RenderError(f"b64dec: expected a base64 string, got {type(value).__name__}")
    try:
        return base64.b64decode(value, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise RenderError(f"b64dec: not base64-encoded UTF-8 text ({exc})") from None


class _NoAliasLoader(yaml.SafeLoader):
    """Refuses anchors/aliases: a value parsed by ``fromYaml`` may come from a request, and aliases let a few
    hundred bytes expand into gigabytes once the result is walked or serialized ("billion laughs")."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(None, None, "YAML aliases are not allowed here", event.start_mark)
        return super().compose_node(parent, index)


def to_yaml(value: Any) -> str | None:
    """The value as block YAML (no trailing newline), e.g. for a config file inside a ConfigMap."""
    if _absent(value):
        return None
    _written(value, "toYaml's text", indent=2)
    dumped: str = yaml.safe_dump(plain(value), sort_keys=False, default_flow_style=False, allow_unicode=True)
    return dumped.removesuffix("\n...\n").rstrip("\n")


def from_yaml(text: Any) -> Any:
    """Parse a YAML string (aliases refused). The result is a value: it never alters the template's YAML."""
    if _absent(text):
        return None
    if not isinstance(text, str):
        raise RenderError(f"fromYaml: expected a string, got {type(text).__name__}")
    try:
        return yaml.load(text, Loader=_NoAliasLoader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        # Only the parser's complaint: its excerpt would copy request data into the message.
        raise RenderError(f"fromYaml: not valid YAML ({getattr(exc, 'problem', None) or type(exc).__name__})") from None


def to_json(value: Any) -> str | None:
    """Compact JSON text of the value."""
    if _absent(value):
        return None
    _written(value, "toJson's text")
    return json.dumps(plain(value), separators=(",", ":"), ensure_ascii=False)


def from_json(text: Any) -> Any:
    """Parse a JSON string."""
    if _absent(text):
        return None
    if not isinstance(text, str):
        raise RenderError(f"fromJson: expected a string, got {type(text).__name__}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise RenderError(f"fromJson: not valid JSON ({exc})") from None


def sha224(value: Any) -> str:
    """Hex sha224 of the value's UTF-8 text (how Service Fabrik shortens ids into Kubernetes names)."""
    _written(value, "sha224's input")
    text = value if isinstance(value, str) else json.dumps(plain(value))
    return hashlib.sha224(text.encode("utf-8")).hexdigest()


def default(value: Any, fallback: Any = "", boolean: bool = False) -> Any:
    """``fallback`` when the value is undefined or null (Jinja's own only covers undefined);
    with ``boolean=True`` also when it is falsy (empty string, 0, empty list)."""
    if _absent(value) or (boolean and not value):
        return fallback
    return value


def required(value: Any, what: str = "a required value") -> Any:
    """The value, or an error naming ``what`` when it is undefined, null or empty."""
    if _absent(value) or value == "":
        raise RenderError(f"required: {what} is missing")
    return value


def parameter(pointer: str, default: Any = None) -> Any:
    """Read the request's parameters by RFC 6901 JSON pointer (``/db/name``); ``default`` when absent.

    The parameters are the binding's for bind/unbind, the instance's otherwise.
    """
    if not isinstance(pointer, str) or (pointer and not pointer.startswith("/")):
        raise RenderError(f"parameter: {pointer!r} is not a JSON pointer (it must be empty or start with '/')")
    try:
        return jsonpointer.resolve_pointer(state.current().parameters, pointer, default)
    except jsonpointer.JsonPointerException as exc:
        raise RenderError(f"parameter: {pointer!r}: {exc}") from None


def registry_get(key: str, default: Any = None) -> Any:
    """The value stored in the instance (or, for bindings, binding) registry under ``key``."""
    value = state.current().registry.get(key)
    return default if value is None else value


def registry_set(key: str, value: Any) -> Any:
    """Store a value in the registry (read-write and user-defined keys) and return it."""
    state.current().registry.put(key, plain(value), by="setRegistry")
    return value


def merge(target: Any, *patches: Any) -> Any:
    """A new value: ``target`` with each patch applied as a JSON merge patch (RFC 7386).

    Objects merge key by key, deeply; a null in the patch deletes the key; anything else replaces.
    ``pg.spec | merge({"users": {id: ["superuser"]}})`` adds a user; ``{id: none}`` removes it.
    """
    result = plain(target)
    for patch in patches:
        result = _merge_patch(result, plain(patch))
    return result


def _merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = _merge_patch(merged.get(key), value)
    return merged


def omit(mapping: Any, *keys: str) -> dict[str, Any]:
    """A copy of the mapping without ``keys``."""
    if _absent(mapping):
        return {}
    if not isinstance(mapping, Mapping):
        raise RenderError(f"omit: expected a mapping, got {type(mapping).__name__}")
    return {k: plain(v) for k, v in mapping.items() if k not in keys}


def pick(mapping: Any, *keys: str) -> dict[str, Any]:
    """A copy of the mapping with only ``keys`` (those present)."""
    if _absent(mapping):
        return {}
    if not isinstance(mapping, Mapping):
        raise RenderError(f"pick: expected a mapping, got {type(mapping).__name__}")
    return {k: plain(mapping[k]) for k in keys if k in mapping}


def make_dict(*args: Any, **kwargs: Any) -> dict[Any, Any]:
    """``dict(...)`` without handing the template the ``dict`` type itself."""
    return dict(*args, **kwargs)


#: Available as ``name(...)`` in every template.
FUNCTIONS: dict[str, Callable[..., Any]] = {
    "b64enc": b64enc,
    "b64dec": b64dec,
    "toYaml": to_yaml,
    "fromYaml": from_yaml,
    "toJson": to_json,
    "fromJson": from_json,
    "sha224": sha224,
    "default": default,
    "required": required,
    "parameter": parameter,
    "registry": registry_get,
    "setRegistry": registry_set,
    "merge": merge,
    "omit": omit,
    "pick": pick,
    "dict": make_dict,
    "generatePassword": generators.generate_password,
    "generatePrivateKey": generators.generate_private_key,
    "generateCertificate": generators.generate_certificate,
}

#: Available as ``value | name(...)``; ``default``/``d`` replace Jinja's so that null counts as absent.
FILTERS: dict[str, Callable[..., Any]] = {
    "b64enc": b64enc,
    "b64dec": b64dec,
    "toYaml": to_yaml,
    "fromYaml": from_yaml,
    "toJson": to_json,
    "fromJson": from_json,
    "sha224": sha224,
    "default": default,
    "d": default,
    "required": required,
    "merge": merge,
    "omit": omit,
    "pick": pick,
}
