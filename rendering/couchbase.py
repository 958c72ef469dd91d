"""The Couchbase service broker's configuration templates as a template type (``type: couchbase``).

A plan template of this type holds, as YAML, what a Couchbase configuration binding's ``serviceInstance`` or
``serviceBinding`` section names, with the templates written out:

* one configuration template, exactly as the Couchbase broker's configuration writes it
  (``name``, ``template``, ``singleton``); or
* a list of them; or
* a mapping with ``templates`` (that list) and ``registry`` (the binding's ``[{name, value}]`` registry
  entries, evaluated in order before the templates and stored in the instance's or binding's registry).

The string attributes are Go templates, so they are evaluated by the Go renderer, with Couchbase's
function map (``gorender/couchbase.go``); this module is the pure part around it: reading the content, what
the Go side is sent (the readable registry: never the reserved keys), and what comes back (the objects, and
the registry keys to persist: registry entries and newly generated values).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from opbroker.rendering import functions, output, registry
from opbroker.rendering.errors import RenderError, TemplateSourceError

#: Which plan actions a Couchbase template can serve: it renders objects (and registry entries), as the
#: broker's serviceInstance and serviceBinding sections do.
ACTIONS = frozenset({"provision", "bind", "unbind"})
#: What a registry key may be: registries are stored in Secrets, one data key per registry key.
REGISTRY_KEY = re.compile(r"[-._a-zA-Z0-9]{1,253}")


@dataclass(frozen=True)
class Configuration:
    """A parsed ``couchbase`` template: registry entries and configuration templates, as plain JSON."""

    registry: tuple[dict[str, str], ...]
    templates: tuple[dict[str, Any], ...]


def _load(text: str, what: str) -> Any:
    try:
        # No aliases: the content goes to the Go renderer as JSON, where an alias bomb would be expanded.
        return yaml.load(text, Loader=functions._NoAliasLoader)
    except yaml.YAMLError as exc:
        raise TemplateSourceError(f"{what} is not YAML: {exc}") from None


def _template(value: Any, default_name: str, what: str) -> dict[str, Any]:
    """One configuration template, checked: ``template`` must be an object (the seed's constraint)."""
    if not isinstance(value, Mapping):
        raise TemplateSourceError(f"{what} must be a configuration template (name, template, singleton)")
    unknown = sorted(set(value) - {"name", "template", "singleton"})
    if unknown:
        raise TemplateSourceError(
            f"{what}: unknown fields {unknown} (a configuration template has name, template, singleton)"
        )
    name = value.get("name", default_name)
    if not isinstance(name, str) or not name:
        raise TemplateSourceError(f"{what}: name must be a non-empty string")
    if not isinstance(value.get("template"), Mapping):
        raise TemplateSourceError(f"{what} ({name}): the resource template must be specified and be an object")
    singleton = value.get("singleton", False)
    if not isinstance(singleton, bool):
        raise TemplateSourceError(f"{what} ({name}): singleton must be true or false")
    return {"name": name, "template": _json(value["template"], what), "singleton": singleton}


def _json(value: Any, what: str) -> Any:
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as exc:
        raise TemplateSourceError(f"{what} is not JSON data: {exc}") from None


def parse(text: str, *, action: str) -> Configuration:
    """Read a ``couchbase`` template's content (see the module docstring); parsed once per text and action (a
    plan's template is rendered for every instance; the result is only read, never changed)."""
    return _parse(text, action)


@functools.lru_cache(maxsize=256)
def _parse(text: str, action: str) -> Configuration:
    document = _load(text, f"the {action} template")
    entries: Any = []
    if (
        isinstance(document, Mapping)
        and "template" not in document
        and ("templates" in document or "registry" in document)
    ):
        unknown = sorted(set(document) - {"templates", "registry"})
        if unknown:
            raise TemplateSourceError(f"the {action} template: unknown fields {unknown} (templates, registry)")
        entries = document.get("registry") or []
        templates: Any = document.get("templates") or []
    elif isinstance(document, list):
        templates = document
    else:
        templates = [document]
    if not isinstance(templates, list) or not isinstance(entries, list):
        raise TemplateSourceError(f"the {action} template: templates and registry must be lists")
    checked = tuple(
        _template(item, f"{action}-{index}", f"configuration template {index} of the {action} template")
        for index, item in enumerate(templates)
    )
    names = [t["name"] for t in checked]
    if len(set(names)) != len(names):
        raise TemplateSourceError(f"the {action} template names a configuration template twice: {names}")
    registry_entries = []
    for index, entry in enumerate(entries):
        if (
            not isinstance(entry, Mapping)
            or set(entry) != {"name", "value"}
            or not isinstance(entry["name"], str)
            or not isinstance(entry["value"], str)
        ):
            raise TemplateSourceError(
                f"registry entry {index} of the {action} template must be {{name: <key>, value: <string>}}"
            )
        if not REGISTRY_KEY.fullmatch(entry["name"]):
            raise TemplateSourceError(
                f"registry entry {index} of the {action} template: {entry['name']!r} cannot be a registry key "
                "(letters, digits, '-', '_' and '.', at most 253: registries are stored in Secrets)"
            )
        registry_entries.append({"name": entry["name"], "value": entry["value"]})
    return Configuration(registry=tuple(registry_entries), templates=checked)


def snippets(texts: Mapping[str, str] | None) -> dict[str, dict[str, Any]]:
    """The plan's snippets that are Couchbase templates: a configuration template, or a bare object (its
    resource template). Other snippets (jinja2 text) are left out: ``snippet`` cannot name them. Parsed once
    per set of snippets."""
    return dict(_snippets(tuple(sorted((texts or {}).items()))))


@functools.lru_cache(maxsize=64)
def _snippets(texts: tuple[tuple[str, str], ...]) -> tuple[tuple[str, dict[str, Any]], ...]:
    found: dict[str, dict[str, Any]] = {}
    for name, text in texts:
        try:
            value = yaml.load(text, Loader=functions._NoAliasLoader)
        except yaml.YAMLError:
            continue
        if isinstance(value, Mapping) and isinstance(value.get("template"), Mapping):
            found[name] = _template(value, name, f"snippet {name!r}")
        elif isinstance(value, Mapping):
            found[name] = {"name": name, "template": _json(value, f"snippet {name!r}")}
    return tuple(found.items())


def request(
    configuration: Configuration,
    *,
    values: Mapping[str, Any],
    parameters: Any,
    snippet_templates: Mapping[str, dict[str, Any]],
) -> dict[str, Any]:
    """What the Go renderer is sent: the readable registry (reserved keys stay here), the parameters, the
    registry entries, the templates and the snippets."""
    readable = {key: value for key, value in values.items() if not registry.is_reserved(key)}
    return {
        "registry": readable,
        "parameters": parameters if parameters is not None else {},
        "registryEntries": list(configuration.registry),
        "templates": list(configuration.templates),
        "snippets": dict(snippet_templates),
    }


def result(
    text: str, work: registry.Registry, *, namespace: str, singleton: bool, adopt: bool
) -> tuple[output.RenderedObject, ...]:
    """Apply the Go renderer's answer: store the registry keys it set (checked and counted by ``work``) and
    make the rendered resource templates into objects, each a singleton if its configuration template is."""
    try:
        answer = json.loads(text)
    except ValueError as exc:
        raise RenderError(f"the Go renderer's answer is not JSON ({exc})") from None
    for key, value in (answer.get("registry") or {}).items():
        work.put(key, value, by="couchbase registry")
    rendered: list[output.RenderedObject] = []
    for item in answer.get("objects") or []:
        try:
            rendered += output.objects(
                [item["template"]], namespace=namespace, singleton=singleton or bool(item.get("singleton")), adopt=adopt
            )
        except RenderError as exc:
            raise RenderError(f"configuration template {item.get('name')!r}: {exc}") from None
    return tuple(rendered)
