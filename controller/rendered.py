"""Glue between the reconcilers and the renderer: building its inputs and fetching live sources (releasing
objects no longer rendered is :mod:`opbroker.controller.ownership`'s)."""

from __future__ import annotations

from typing import Any

from opbroker.api.meta import ResourceRef
from opbroker.controller.catalog import PlanEntry
from opbroker.controller.kube import Kube
from opbroker.controller.reconciling import Deps
from opbroker.rendering import RenderInputs


def inputs_for(
    deps: Deps,
    *,
    instance: dict[str, Any],
    plan: PlanEntry,
    registry: dict[str, Any] | None,
    binding: dict[str, Any] | None = None,
    binding_registry: dict[str, Any] | None = None,
    sources: dict[str, dict[str, Any] | None] | None = None,
) -> RenderInputs:
    """Everything a template may see. Namespace precedence (template → request → ours) is the renderer's."""
    service_id = (plan.body.get("spec") or {}).get("serviceId", "")
    service = deps.catalog.service(service_id)
    context = (instance.get("spec") or {}).get("context") or {}
    return RenderInputs(
        service=service.body if service else {},
        plan=plan.body,
        instance=instance,
        binding=binding,
        sources=sources or {},
        registry=registry or {},
        binding_registry=binding_registry,
        default_namespace=instance["metadata"]["namespace"],
        context_namespace=context.get("namespace"),
    )


def fetch_sources(kube: Kube, refs: dict[str, ResourceRef]) -> dict[str, dict[str, Any] | None]:
    """The live objects behind a rendered ``sources`` map; a missing one is None (templates skip it)."""
    return {name: kube.get(ref) for name, ref in refs.items()}
