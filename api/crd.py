"""CustomResourceDefinitions generated from the models.

Pydantic emits JSON Schema (2020-12 flavoured, with ``$defs``/``$ref``, ``anyOf`` for optionals); the API
server wants a *structural* OpenAPI v3 schema: every node typed, no ``$ref``, ``nullable`` instead of a
null branch, free-form objects marked ``x-kubernetes-preserve-unknown-fields``. ``structural_schema`` does
that translation and nothing else; ``crd_for`` wraps it into the CRD with the class's CRD facts.
"""

from __future__ import annotations

from typing import Any

import yaml

from opbroker.api.meta import KubeResource
from opbroker.api.registry import RESOURCE_KINDS

_DROPPED_KEYS = frozenset({"title", "default", "examples", "$schema"})


class SchemaError(ValueError):
    """The model uses a construct the generator cannot express as a structural schema."""


def structural_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Translate a pydantic JSON schema (with its ``$defs``) into a structural OpenAPI v3 schema."""
    definitions = schema.get("$defs", {})
    return _convert(schema, definitions, path="")


def _convert(node: dict[str, Any], definitions: dict[str, Any], path: str) -> dict[str, Any]:
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        merged = {**definitions[name], **{k: v for k, v in node.items() if k != "$ref"}}
        return _convert(merged, definitions, path)

    if "anyOf" in node:
        return _convert_union(node, definitions, path)

    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED_KEYS or key == "$defs":
            continue
        if key == "const":
            out["enum"] = [value]
        elif key == "properties":
            out["properties"] = {name: _convert(child, definitions, f"{path}.{name}") for name, child in value.items()}
        elif key == "items":
            out["items"] = _convert(value, definitions, f"{path}[]")
        elif key == "additionalProperties":
            if isinstance(value, dict) and value:
                out["additionalProperties"] = _convert(value, definitions, f"{path}{{}}")
            elif value is True or value == {}:
                out["x-kubernetes-preserve-unknown-fields"] = True
            # ``false`` is the pydantic spelling of extra="forbid"; structural schemas may not say it.
        elif key == "description":
            out["description"] = _one_line(value)
        else:
            out[key] = value

    if not out.get("type") and not out.get("x-kubernetes-preserve-unknown-fields"):
        if "enum" in out:
            out["type"] = _enum_type(out["enum"], path)
        else:
            # ``Any``: any JSON value, kept as given.
            out["x-kubernetes-preserve-unknown-fields"] = True
    if out.get("type") == "object" and "properties" not in out and "additionalProperties" not in out:
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def _convert_union(node: dict[str, Any], definitions: dict[str, Any], path: str) -> dict[str, Any]:
    branches = [b for b in node["anyOf"] if b.get("type") != "null"]
    nullable = len(branches) < len(node["anyOf"])
    outer = {k: v for k, v in node.items() if k not in _DROPPED_KEYS and k != "anyOf"}
    if len(branches) == 1:
        converted = _convert({**branches[0], **outer}, definitions, path)
    elif sorted(b.get("type", "") for b in branches) == ["integer", "string"]:
        converted = {**outer, "x-kubernetes-int-or-string": True}
    else:
        raise SchemaError(f"{path or 'root'}: unions other than optional or int-or-string are not structural")
    if nullable:
        converted["nullable"] = True
    return converted


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _enum_type(values: list[Any], path: str) -> str:
    kinds = {type(v) for v in values}
    if kinds == {str}:
        return "string"
    if kinds <= {int}:
        return "integer"
    if kinds <= {bool}:
        return "boolean"
    raise SchemaError(f"{path}: enum mixes types {sorted(k.__name__ for k in kinds)}")


_TYPE_META = ("apiVersion", "kind", "metadata")


def resource_schema(model: type[KubeResource]) -> dict[str, Any]:
    """The openAPIV3Schema of a whole object: type meta, metadata, spec and (if any) status, and any other
    top-level field the model declares (ServiceClass keeps its fields there, without a spec)."""
    properties: dict[str, Any] = {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
    }
    whole = model.model_json_schema(by_alias=True, mode="validation")
    definitions = whole.get("$defs", {})
    for name, part in whole["properties"].items():
        if name not in _TYPE_META:
            properties[name] = structural_schema({**part, "$defs": definitions})
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if model.__doc__:
        schema["description"] = _one_line(model.__doc__)
    required = ["spec"] if model.SPEC_REQUIRED and "spec" in properties else []
    required += [n for n in whole.get("required", []) if n not in (*_TYPE_META, "spec", "status")]
    if required:
        schema["required"] = required
    for key in ("x-kubernetes-validations",):
        if key in whole:
            schema[key] = whole[key]
    return schema


#: The annotation the API server requires on CRDs of the Kubernetes project's own groups (KEP 1111).
API_APPROVAL_ANNOTATION = "api-approved.kubernetes.io"


def is_protected_group(group: str) -> bool:
    """Whether the API server treats ``group`` as the Kubernetes project's (k8s.io, kubernetes.io)."""
    return any(group == d or group.endswith("." + d) for d in ("k8s.io", "kubernetes.io"))


def crd_for(model: type[KubeResource]) -> dict[str, Any]:
    """The apiextensions.k8s.io/v1 CRD for one resource model."""
    metadata: dict[str, Any] = {
        "name": f"{model.PLURAL}.{model.GROUP}",
        "labels": {"app.kubernetes.io/part-of": "opbroker"},
    }
    if is_protected_group(model.GROUP):
        if not model.API_APPROVAL:
            raise SchemaError(f"{model.KIND}: group {model.GROUP} is protected; set API_APPROVAL")
        metadata["annotations"] = {API_APPROVAL_ANNOTATION: model.API_APPROVAL}
    columns = [{"name": name, "type": kind, "jsonPath": json_path} for name, json_path, kind in model.PRINTER_COLUMNS]
    columns.append({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"})
    version: dict[str, Any] = {
        "name": model.VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": resource_schema(model)},
        "additionalPrinterColumns": columns,
    }
    if "status" in model.model_fields:
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata,
        "spec": {
            "group": model.GROUP,
            "scope": model.SCOPE,
            "names": {
                "kind": model.KIND,
                "listKind": f"{model.KIND}List",
                "plural": model.PLURAL,
                "singular": model.KIND.lower(),
                "shortNames": list(model.SHORT_NAMES),
                "categories": list(model.CATEGORIES),
            },
            "versions": [version],
        },
    }


def all_crds() -> list[dict[str, Any]]:
    return [crd_for(model) for model in RESOURCE_KINDS]


def crd_file_name(crd: dict[str, Any]) -> str:
    return f"{crd['metadata']['name']}.yaml"


def to_yaml(documents: list[dict[str, Any]]) -> str:
    """Stable YAML (key order as built, no aliases) so the checked-in files diff cleanly."""

    class _NoAliases(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True

    return yaml.dump_all(documents, Dumper=_NoAliases, sort_keys=False, explicit_start=True, width=110)
