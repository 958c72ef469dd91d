"""Import a Couchbase service broker configuration (``ServiceBrokerConfig``) as SFService and SFPlan manifests.

The Couchbase broker's configuration has three parts: the OSB ``catalog`` (services and their plans), the
configuration ``templates`` (``name``, ``template``, ``singleton``) and the configuration ``bindings`` that map
each plan to the templates its instances and bindings render (``serviceInstance``/``serviceBinding``: an
ordered ``templates`` list of names plus ``registry`` entries). Here:

* each service becomes an SFService (``metadata.name`` is its id, as Service Fabrik names them);
* each plan a binding names becomes an SFPlan whose ``provision`` template (and ``bind`` template, when the
  binding has a ``serviceBinding``) is a ``type: couchbase`` template holding that section's registry entries
  and its templates written out, in order, unchanged;
* every configuration template a dynamic attribute names with ``snippet "..."`` (directly or through another
  snippet) goes into the plan's ``snippets``, as YAML;
* a plan no binding names is left out, with a note; so are ``readinessChecks`` (opbroker reports readiness
  through a plan's ``status`` template, which has no Couchbase counterpart to convert mechanically).

Pure: a document in, manifests and notes out; the CLI (``opbroker import couchbase``) reads and prints.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from opbroker.api.catalog import OSB_GROUP, SFPlan, SFService
from opbroker.rendering.errors import TemplateSourceError

API_VERSION = f"{OSB_GROUP}/v1alpha1"
_SNIPPET = re.compile(r'snippet\s+"((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Imported:
    """The manifests (SFServices first, then SFPlans) and notes on what was left out."""

    manifests: tuple[dict[str, Any], ...]
    notes: tuple[str, ...]


def _spec(document: Any) -> Mapping[str, Any]:
    if not isinstance(document, Mapping):
        raise TemplateSourceError("a Couchbase broker configuration is a mapping (a ServiceBrokerConfig or its spec)")
    spec = document.get("spec") if "spec" in document else document
    if not isinstance(spec, Mapping) or not {"catalog", "templates", "bindings"} <= set(spec):
        raise TemplateSourceError(
            "the configuration needs catalog, templates and bindings (a ServiceBrokerConfig spec)"
        )
    return spec


def _strings(value: Any) -> list[str]:
    """Every string inside value (the dynamic attributes among them)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


def _snippets(roots: list[Any], templates: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """The configuration templates named by ``snippet`` from roots, transitively, as YAML texts."""
    found: dict[str, str] = {}
    pending = [name for text in _strings(roots) for name in _SNIPPET.findall(text)]
    while pending:
        name = pending.pop()
        if name in found:
            continue
        template = templates.get(name)
        if template is None:
            raise TemplateSourceError(f"snippet {name!r} names no configuration template")
        found[name] = yaml.safe_dump(dict(template), sort_keys=False)
        pending += [n for text in _strings(template.get("template")) for n in _SNIPPET.findall(text)]
    return dict(sorted(found.items()))


def _section(
    section: Mapping[str, Any], templates: Mapping[str, Mapping[str, Any]], where: str
) -> tuple[dict[str, Any], list[Any]]:
    """A serviceInstance/serviceBinding section as a couchbase template's content, and what it references."""
    names = section.get("templates") or []
    missing = [name for name in names if name not in templates]
    if missing:
        raise TemplateSourceError(f"{where} names templates that do not exist: {missing}")
    content: dict[str, Any] = {}
    if section.get("registry"):
        content["registry"] = [dict(entry) for entry in section["registry"]]
    content["templates"] = [dict(templates[name]) for name in names]
    return content, [content.get("registry"), content["templates"]]


def _service(service: Mapping[str, Any], namespace: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        key: service[key]
        for key in ("name", "id", "description", "tags", "requires", "bindable", "metadata", "planUpdatable")
        if key in service
    }
    spec.setdefault("bindable", False)
    spec["instancesRetrievable"] = bool(service.get("instancesRetrievable", False))
    spec["bindingsRetrievable"] = bool(service.get("bindingsRetrievable", False))
    client = service.get("dashboardClient")
    if isinstance(client, Mapping):
        spec["dashboardClient"] = {
            "id": client.get("id"),
            "secret": client.get("secret"),
            **({"redirectURI": client["redirectedURI"]} if client.get("redirectedURI") else {}),
        }
    metadata: dict[str, Any] = {"name": service["id"]}
    if namespace:
        metadata["namespace"] = namespace
    return SFService.model_validate(
        {"apiVersion": API_VERSION, "kind": "SFService", "metadata": metadata, "spec": spec}
    ).to_manifest()


def _schemas(schemas: Any) -> dict[str, Any] | None:
    if not isinstance(schemas, Mapping):
        return None
    out: dict[str, Any] = {}
    if isinstance(schemas.get("serviceInstance"), Mapping):
        out["service_instance"] = dict(schemas["serviceInstance"])
    if isinstance(schemas.get("serviceBinding"), Mapping):
        out["service_binding"] = dict(schemas["serviceBinding"])
    return out or None


def convert(document: Any, *, namespace: str | None = None) -> Imported:
    """Convert a ServiceBrokerConfig (or its spec) into SFService and SFPlan manifests."""
    spec = _spec(document)
    templates = {t["name"]: t for t in spec["templates"] if isinstance(t, Mapping) and isinstance(t.get("name"), str)}
    if len(templates) != len(spec["templates"]):
        raise TemplateSourceError("every configuration template needs a unique name")
    services = spec["catalog"].get("services") or []
    bindings = {(b.get("service"), b.get("plan")): b for b in spec["bindings"] if isinstance(b, Mapping)}
    manifests: list[dict[str, Any]] = []
    plans: list[dict[str, Any]] = []
    notes: list[str] = []
    for service in services:
        manifests.append(_service(service, namespace))
        for plan in service.get("plans") or []:
            binding = bindings.pop((service["name"], plan["name"]), None)
            if binding is None:
                notes.append(f"plan {service['name']}/{plan['name']}: no configuration binding names it; left out")
                continue
            plans.append(_plan(service, plan, binding, templates, namespace, notes))
    for service_name, plan_name in bindings:
        notes.append(f"configuration binding for {service_name}/{plan_name}: no such plan in the catalog; left out")
    return Imported(manifests=tuple(manifests + plans), notes=tuple(notes))


def _plan(
    service: Mapping[str, Any],
    plan: Mapping[str, Any],
    binding: Mapping[str, Any],
    templates: Mapping[str, Mapping[str, Any]],
    namespace: str | None,
    notes: list[str],
) -> dict[str, Any]:
    where = f"configuration binding {binding.get('name')!r}"
    roots: list[Any] = []
    plan_templates: list[dict[str, Any]] = []
    for action, key in (("provision", "serviceInstance"), ("bind", "serviceBinding")):
        section = binding.get(key)
        if not isinstance(section, Mapping):
            continue
        content, referenced = _section(section, templates, f"{where} {key}")
        roots += referenced
        plan_templates.append(
            {"action": action, "type": "couchbase", "content": yaml.safe_dump(content, sort_keys=False)}
        )
        if section.get("readinessChecks"):
            notes.append(f"{where} {key}: readinessChecks are not converted; write a status template for the plan")
    spec: dict[str, Any] = {
        key: plan[key] for key in ("name", "id", "description", "metadata", "free", "bindable") if key in plan
    }
    spec["serviceId"] = service["id"]
    spec["planUpdatable"] = bool(service.get("planUpdatable", False))
    schemas = _schemas(plan.get("schemas"))
    if schemas:
        spec["schemas"] = schemas
    spec["templates"] = plan_templates
    snippets = _snippets(roots, templates)
    if snippets:
        spec["snippets"] = snippets
    metadata: dict[str, Any] = {"name": plan["id"], "labels": {"serviceId": service["id"], "planId": plan["id"]}}
    if namespace:
        metadata["namespace"] = namespace
    manifest = {"apiVersion": API_VERSION, "kind": "SFPlan", "metadata": metadata, "spec": spec}
    return SFPlan.model_validate(manifest).to_manifest()
