"""Glue between the reconcilers and the renderer: building its inputs and fetching live sources (releasing
objects no longer rendered is :mod:`opbroker.controller.ownership`'s)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from opbroker.api.meta import ResourceRef
from opbroker.controller.catalog import PlanEntry
from opbroker.controller.core.template_inputs import template_inputs
from opbroker.controller.core.views import BindingView, InstanceView
from opbroker.controller.kube import Kube
from opbroker.controller.reconciler import PerKey
from opbroker.controller.reconciler.keys import Key
from opbroker.controller.reconciling import Deps
from opbroker.rendering import RenderInputs


def inputs_for(
    deps: Deps,
    *,
    instance: InstanceView,
    plan: PlanEntry,
    registry: Mapping[str, Any] | None,
    binding: BindingView | None = None,
    binding_registry: Mapping[str, Any] | None = None,
    sources: Mapping[str, Mapping[str, Any] | None] | None = None,
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


def fetch_sources(kube: Kube, refs: dict[str, ResourceRef]) -> dict[str, dict[str, Any] | None]:
    """The live objects behind a rendered ``sources`` map; a missing one is None (templates skip it)."""
    return {name: kube.get(ref) for name, ref in refs.items()}


class SourcesMemo:
    """The ``sources`` map an instance's plan rendered last, kept while what it was rendered from holds.

    Every evaluation of an operation and every day-two check asks the status template, which needs the sources map
    first: one more template rendered each time, though the map depends only on the plan, the service, the
    instance's identity, generation, labels and annotations, and its registry (``sources`` templates read no status:
    the status is the controller's own output). Kept per instance (forgotten with it), one entry each; a change of
    any of those renders it again (:func:`sources_inputs`)."""

    def __init__(self) -> None:
        self._memo: PerKey[tuple[tuple[object, ...], dict[str, ResourceRef]]] = PerKey()

    def refs(
        self, key: Key, inputs: tuple[object, ...], render: Callable[[], dict[str, ResourceRef]]
    ) -> dict[str, ResourceRef]:
        """The map rendered from ``inputs`` (:func:`sources_inputs`): remembered, else ``render()``-ed and kept."""
        found = self._memo.get(key)
        if found is not None and found[0] == inputs:
            return dict(found[1])
        refs = render()
        self._memo.put(key, (inputs, dict(refs)))
        return refs

    def forget(self, key: Key) -> None:
        self._memo.forget(key)


def sources_inputs(
    deps: Deps, instance: InstanceView, plan: PlanEntry, registry: Mapping[str, Any]
) -> tuple[object, ...]:
    """What an instance's ``sources`` map is rendered from, in a few comparable values (see :class:`SourcesMemo`)."""
    meta = instance.meta
    service = deps.catalog.service(plan.view.service_id)
    service_version = ((service.body.get("metadata") or {}).get("resourceVersion")) if service else None
    registry_digest = hashlib.sha256(json.dumps(registry, sort_keys=True, default=str).encode()).hexdigest()
    return (
        plan.hash,
        service_version,
        meta.uid,
        meta.generation,
        tuple(sorted(meta.labels.items())),
        tuple(sorted(meta.annotations.items())),
        registry_digest,
    )
