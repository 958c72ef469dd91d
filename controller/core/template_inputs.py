"""Every input a template sees, built in one place (issue 42): whatever renders an instance's or a binding's
templates — provision, update, bind, unbind, status, sources, teardown, placement's cluster selector, the admin
preview and rollout — takes its :class:`~opbroker.rendering.RenderInputs` from :func:`template_inputs`.

What is decided here, once: where the objects go. The request's ``context.namespace`` is honoured only where
:func:`~opbroker.controller.core.decisions.context_namespace_refused` lets it (an instance in a tenant's namespace
names only that namespace); otherwise the template sees no context namespace and objects default to the
instance's own. The renderer then refuses any object outside that namespace and the namespaces the plan declares
(``SFPlan.spec.namespaces``), whatever the template wrote into ``metadata.namespace``.

Pure: the views as read, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from opbroker.controller.core.decisions import context_namespace_refused
from opbroker.controller.core.views import InstanceView
from opbroker.kubeclient.wire import JsonObject
from opbroker.rendering import RenderInputs


def honoured_context_namespace(instance: InstanceView, *, control_plane: str) -> str | None:
    """The request's ``context.namespace`` when the instance may direct its objects there, else None.

    ``control_plane``: the control plane's namespace, where the broker records instances when it does not honour
    context namespaces itself (the broker then checked the namespace against the platform's allowed list)."""
    if context_namespace_refused(instance, trusted_namespaces=(control_plane,)) is not None:
        return None
    return instance.context_namespace


def template_inputs(
    instance: InstanceView,
    *,
    control_plane: str,
    service: JsonObject | None,
    plan: JsonObject,
    registry: JsonObject | None,
    binding: JsonObject | None = None,
    binding_registry: JsonObject | None = None,
    sources: Mapping[str, JsonObject | None] | None = None,
) -> RenderInputs:
    """The inputs of one render of ``instance`` (and ``binding``) under ``plan``: the objects as read, whole
    (templates may read any field); the namespaces as :func:`honoured_context_namespace` decides."""
    return RenderInputs(
        service=service or {},
        plan=plan,
        instance=instance.wire,
        binding=binding,
        sources=sources or {},
        registry=registry or {},
        binding_registry=binding_registry,
        default_namespace=instance.meta.namespace,
        context_namespace=honoured_context_namespace(instance, control_plane=control_plane),
    )
