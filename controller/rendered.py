"""Glue between the reconcilers and the renderer: building its inputs, fetching live sources, and
releasing objects an instance or binding no longer renders."""

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


def release(kube: Kube, ref: ResourceRef, *, owner_uid: str) -> bool:
    """Let go of an object: drop our owner reference if others own it too, else delete it.

    Returns True while the object still exists and is ours to wait for (deletion in progress).
    """
    obj = kube.get(ref)
    if obj is None:
        return False
    meta = obj.get("metadata") or {}
    owners = meta.get("ownerReferences") or []
    others = [o for o in owners if o.get("uid") != owner_uid]
    if others:
        if len(others) < len(owners):
            kube.merge_patch(ref, {"metadata": {"ownerReferences": others}})
        return False  # shared, or no longer ours at all: it lives on with its other owners
    if not meta.get("deletionTimestamp"):
        kube.delete(ref)
    return True
