"""Validating request ``parameters`` against the plan's JSON schemas, with errors that name the field.

The draft is taken from the schema's ``$schema`` (OSB requires it; draft 4 at least), falling back to
the newest draft ``jsonschema`` knows. A schema that is itself invalid is the catalog author's fault and
is reported as such (500), not blamed on the client.

Pure.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import jsonschema
import jsonschema.exceptions
import jsonschema.validators
from jsonschema.protocols import Validator

from opbroker.broker import errors


def _path(parts: list[str | int]) -> str:
    path = "parameters"
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


#: Schemas up to this size (of their JSON text) keep their checked validator (:func:`_checked`); a larger one is
#: checked on each request, so the cache holds at most ``maxsize`` times this.
CACHED_SCHEMA_BYTES = 64 * 1024


def _validator(text: str) -> Validator:
    """The validator for the schema whose JSON is ``text`` (its draft's), the schema checked against its draft's
    metaschema first."""
    schema = json.loads(text)
    validator_class = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    validator_class.check_schema(schema)
    return validator_class(schema)


@functools.lru_cache(maxsize=64)
def _checked(text: str) -> Validator:
    """:func:`_validator`, kept per canonical schema text. Checking a schema against its metaschema costs more than
    validating a request's parameters with it (a provision's broker CPU showed it), and a catalog has few schemas:
    each is checked once, not on every request. An invalid one raises each time (not cached)."""
    return _validator(text)


def problems(schema: dict[str, Any], parameters: dict[str, Any]) -> list[str]:
    """One ``field: message`` per violation, sorted by field; empty when ``parameters`` fit ``schema``."""
    text = json.dumps(schema, sort_keys=True, separators=(",", ":"))
    try:
        validator = _checked(text) if len(text) <= CACHED_SCHEMA_BYTES else _validator(text)
    except jsonschema.exceptions.SchemaError as exc:
        raise errors.BrokerError(
            errors.Reason.INTERNAL_ERROR, f"the plan's parameter schema is invalid: {exc.message}"
        ) from None
    found: set[str] = set()
    for error in validator.iter_errors(parameters):
        where = list(error.absolute_path)
        required = error.validator_value
        if error.validator == "required" and isinstance(error.instance, dict) and isinstance(required, list):
            for name in required:
                if name not in error.instance:
                    found.add(f"{_path([*where, name])}: is required")
            continue
        found.add(f"{_path(where)}: {_describe(error)}")
    return sorted(found)


def _describe(error: jsonschema.exceptions.ValidationError) -> str:
    """What is wrong, without echoing the offending value (parameters may hold secrets; messages get logged)."""
    rule, expected = error.validator, error.validator_value
    if rule == "type":
        return f"must be of type {expected}"
    if rule == "enum":
        return f"must be one of {json.dumps(expected)[:200]}"
    if rule == "const":
        return f"must be {json.dumps(expected)[:200]}"
    if rule in ("additionalProperties", "unevaluatedProperties") and isinstance(error.instance, dict):
        return error.message  # names the unexpected keys, not their values
    if rule in ("anyOf", "oneOf", "allOf", "not", "if"):
        return f"does not satisfy the schema's {rule}"
    return f"fails {rule} {json.dumps(expected, default=str)[:200]}"


def validate(schema: dict[str, Any] | None, parameters: dict[str, Any] | None, *, action: str) -> None:
    """400 naming every offending field when ``parameters`` do not fit the plan's ``action`` schema."""
    if schema is None:
        return
    found = problems(schema, parameters or {})
    if found:
        raise errors.bad_request(f"parameters do not match the plan's {action} schema: " + "; ".join(found))
