"""A plan rendered for a sample instance and binding: the objects its ``provision``, ``bind`` and ``unbind``
templates write, to compute the rights its account needs (:mod:`opbroker.api.planrights`).

The instance is a new one (empty registry, no live sources: what a first provision sees), in ``namespace``, with
the request ``parameters`` given; the binding is a new binding of it. A template whose kinds depend on parameters
or on live sources renders what these inputs make it render — pass the parameters that select the other kinds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opbroker.api.catalog import SFPlan, TemplateAction
from opbroker.api.osb import SFServiceBinding, SFServiceInstance
from opbroker.rendering.renderer import OBJECT_ACTIONS, Renderer, RenderInputs

SAMPLE_INSTANCE = "sample-instance"
SAMPLE_BINDING = "sample-binding"


def _instance(plan: SFPlan, namespace: str, parameters: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": SFServiceInstance.api_version_string(),
        "kind": SFServiceInstance.KIND,
        "metadata": {"name": SAMPLE_INSTANCE, "namespace": namespace, "uid": "00000000-0000-0000-0000-000000000001"},
        "spec": {
            "instanceId": SAMPLE_INSTANCE,
            "serviceId": plan.spec.service_id,
            "planId": plan.spec.id,
            "context": {"platform": "kubernetes", "namespace": namespace},
            "parameters": dict(parameters),
        },
    }


def _binding(plan: SFPlan, namespace: str, parameters: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": SFServiceBinding.api_version_string(),
        "kind": SFServiceBinding.KIND,
        "metadata": {"name": SAMPLE_BINDING, "namespace": namespace, "uid": "00000000-0000-0000-0000-000000000002"},
        "spec": {
            "id": SAMPLE_BINDING,
            "instanceId": SAMPLE_INSTANCE,
            "serviceId": plan.spec.service_id,
            "planId": plan.spec.id,
            "context": {"platform": "kubernetes", "namespace": namespace},
            "parameters": dict(parameters),
        },
    }


def rendered_objects(
    plan: SFPlan,
    *,
    namespace: str,
    parameters: Mapping[str, Any] | None = None,
    service: Mapping[str, Any] | None = None,
    renderer: Renderer | None = None,
) -> list[dict[str, Any]]:
    """Every object ``plan``'s object templates render for a new instance and binding in ``namespace`` (a
    :class:`opbroker.rendering.RenderError` names the plan and template that cannot render)."""
    renderer = renderer or Renderer()
    params = dict(parameters or {})
    inputs = RenderInputs(
        instance=_instance(plan, namespace, params),
        binding=_binding(plan, namespace, params),
        service=service,
        default_namespace=namespace,
        context_namespace=namespace,
    )
    actions = {template.action for template in plan.spec.templates}
    objects: list[dict[str, Any]] = []
    for action in (TemplateAction.PROVISION, TemplateAction.BIND, TemplateAction.UNBIND):
        if action in OBJECT_ACTIONS and action in actions:
            objects += [o.manifest for o in renderer.render_objects(plan, action, inputs).objects]
    return objects
