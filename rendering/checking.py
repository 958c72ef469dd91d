"""Checking a plan offline, before rollout: what ``pulumi preview`` and ``opbroker validate`` can tell.

Two kinds of findings:

* **errors** — the plan cannot work: a template that does not compile (jinja2 in-process; ``gotemplate`` and
  ``helm`` parsed by the Go renderer, so an unknown function is caught here), a helm chart for an action a
  chart cannot render, a Go renderer that cannot run on this machine, a template that tries to escape the
  sandbox or blows its limits. These fail a preview, not a provision.
* **warnings** — a trial render with a made-up instance (and binding) failed in a way that may only be
  because no real request or live objects exist yet (a ``required`` parameter, a source object the
  template reads, output that is not an object for this made-up request). Worth a look, not a failure.

``url`` templates are not fetched (a preview must not depend on the network); they are checked at rollout.
For a helm template given by ``url`` only the values template is checked; a chart in ``contentEncoded`` is
loaded and trial-rendered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from opbroker.api import SFPlan, TemplateAction, TemplateType
from opbroker.rendering.errors import RenderError, RenderLimitError, TemplateSecurityError, TemplateSourceError
from opbroker.rendering.goengine import EngineCrashed
from opbroker.rendering.renderer import Renderer, RenderInputs

PREVIEW_NAMESPACE = "preview"


@dataclass(frozen=True)
class Finding:
    """One problem, located by the field of the plan's spec it concerns (``templates[2]``)."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass(frozen=True)
class PlanCheck:
    errors: tuple[Finding, ...] = ()
    warnings: tuple[Finding, ...] = field(default=())
    settled: bool = True
    """The findings follow from the plan alone, so checking the same spec again finds the same: False when a
    finding may be the machine's (the Go renderer crashed or could not start, a template source failed)."""

    @property
    def ok(self) -> bool:
        return not self.errors


def sample_instance(plan: SFPlan) -> dict[str, Any]:
    """A made-up SFServiceInstance of ``plan``: what a trial render pretends was requested."""
    return {
        "apiVersion": "osb.servicefabrik.io/v1alpha1",
        "kind": "SFServiceInstance",
        "metadata": {"name": "preview-instance", "namespace": PREVIEW_NAMESPACE, "uid": "00000000-preview"},
        "spec": {
            "instanceId": "preview-instance",
            "serviceId": plan.spec.service_id,
            "planId": plan.spec.id,
            "context": {"platform": "kubernetes", "namespace": PREVIEW_NAMESPACE},
            "parameters": {},
        },
    }


def sample_binding(plan: SFPlan) -> dict[str, Any]:
    return {
        "apiVersion": "osb.servicefabrik.io/v1alpha1",
        "kind": "SFServiceBinding",
        "metadata": {"name": "preview-binding", "namespace": PREVIEW_NAMESPACE, "uid": "00000000-preview-b"},
        "spec": {
            "id": "preview-binding",
            "instanceId": "preview-instance",
            "serviceId": plan.spec.service_id,
            "planId": plan.spec.id,
            "parameters": {},
        },
    }


FATAL = (TemplateSecurityError, RenderLimitError, TemplateSourceError)
#: Failures that may be the machine's rather than the plan's: checking again can find otherwise.
UNSETTLED = (EngineCrashed, TemplateSourceError)

#: Every action rendered in a trial, and whether with a made-up binding too.
TRIALS: tuple[tuple[TemplateAction, bool], ...] = (
    (TemplateAction.SOURCES, False),
    (TemplateAction.PROVISION, False),
    (TemplateAction.STATUS, False),
    (TemplateAction.CLUSTER_SELECTOR, False),
    (TemplateAction.BIND, True),
    (TemplateAction.UNBIND, True),
    (TemplateAction.STATUS, True),
)


def _render(renderer: Renderer, plan: SFPlan, action: TemplateAction, inputs: RenderInputs) -> object:
    if action in (TemplateAction.PROVISION, TemplateAction.BIND, TemplateAction.UNBIND):
        return renderer.render_objects(plan, action, inputs)
    if action is TemplateAction.SOURCES:
        return renderer.render_sources(plan, inputs)
    if action is TemplateAction.STATUS:
        return renderer.render_status(plan, inputs)
    return renderer.render_cluster_selector(plan, inputs)


def check_plan(plan: SFPlan, renderer: Renderer | None = None) -> PlanCheck:
    """Compile every template of ``plan``, then trial-render each action with a made-up request."""
    renderer = renderer or Renderer()
    errors: list[Finding] = []
    settled = True
    position = {template.action: index for index, template in enumerate(plan.spec.templates)}
    for index, template in enumerate(plan.spec.templates):
        where = f"templates[{index}]"
        if template.url is not None and template.type is not TemplateType.HELM:
            continue
        try:
            renderer.compile(plan, template)
        except RenderError as exc:
            errors.append(Finding(where, str(exc)))
            settled = settled and not isinstance(exc, UNSETTLED)
    if errors:
        return PlanCheck(errors=tuple(errors), settled=settled)

    warnings: list[Finding] = []
    instance, binding = sample_instance(plan), sample_binding(plan)
    for action, for_binding in TRIALS:
        spec = plan.spec.template(action)
        if spec is None or spec.url is not None:  # a preview must not depend on the network
            continue
        where = f"templates[{position[action]}]"
        what = f"{action.value} (binding)" if for_binding and action is TemplateAction.STATUS else action.value
        inputs = RenderInputs(
            instance=instance, binding=binding if for_binding else None, default_namespace=PREVIEW_NAMESPACE
        )
        try:
            _render(renderer, plan, action, inputs)
        except FATAL as exc:
            errors.append(Finding(where, str(exc)))
            settled = settled and not isinstance(exc, UNSETTLED)
        except RenderError as exc:
            warnings.append(Finding(where, f"trial render of {what} with a made-up request failed: {exc}"))
            settled = settled and not isinstance(exc, UNSETTLED)
    return PlanCheck(errors=tuple(errors), warnings=tuple(warnings), settled=settled)
