"""Glue between the reconcilers and the renderer: building its inputs and fetching live sources (releasing
objects no longer rendered is :mod:`opbroker.controller.osb.ownership`'s)."""

from __future__ import annotations

from collections.abc import Mapping

from opbroker.api.meta import ResourceRef
from opbroker.controller.catalog.catalog import PlanEntry
from opbroker.controller.core.template_inputs import template_inputs
from opbroker.controller.core.views import BindingView, InstanceView
from opbroker.controller.osb.reconciling import Deps
from opbroker.controller.runtime.kube import Kube
from opbroker.kubeclient.wire import JsonBody, JsonObject
from opbroker.rendering import RenderInputs


def inputs_for(
    deps: Deps,
    *,
    instance: InstanceView,
    plan: PlanEntry,
    registry: JsonObject | None,
    binding: BindingView | None = None,
    binding_registry: JsonObject | None = None,
    sources: Mapping[str, JsonObject | None] | None = None,
) -> RenderInputs:
    """Everything a template may see, from the one builder (:func:`template_inputs`: which namespaces the objects
    may go to is decided there)."""
    service = deps.catalog.service(plan.view.service_id)
    return template_inputs(
        instance,
        control_plane=deps.settings.namespace,
        service=service.body if service else None,
        plan=plan.body,
        registry=registry,
        binding=binding.wire if binding is not None else None,
        binding_registry=binding_registry,
        sources=sources,
    )


def fetch_sources(kube: Kube, refs: dict[str, ResourceRef]) -> dict[str, JsonBody | None]:
    """The live objects behind a rendered ``sources`` map; a missing one is None (templates skip it)."""
    return {name: kube.get(ref) for name, ref in refs.items()}
