"""The catalog as components: ``SFService`` (an OSB service offering) and ``SFPlan`` (a plan and its templates).

Args mirror the resource model's spec (snake_case here, camelCase in other Pulumi languages) plus where the
object lives. Everything is plain data and validated against ``opbroker.api`` before anything is registered.
Templates come inline (``content``) or from files (``file``, read at preview time and sent inline).

This module must not use ``from __future__ import annotations``: the component provider reads the args'
annotations at run time to build its schema.
"""

import functools
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import pulumi

from opbroker.api import DeletionPolicy, DriftPolicy, TemplateAction, TemplateType
from opbroker.api import SFPlan as SFPlanModel
from opbroker.api import SFService as SFServiceModel
from opbroker.api.conventions import resource_name
from opbroker.components import impact, resources
from opbroker.rendering import Renderer
from opbroker.rendering.checking import check_plan

SERVICE_TYPE = "opbroker:index:SFService"
PLAN_TYPE = "opbroker:index:SFPlan"


class DashboardClientArgs(TypedDict):
    """OSB dashboard client (SSO) of a service offering."""

    id: NotRequired[str]
    """The client id."""
    secret: NotRequired[str]
    """The client secret."""
    redirect_uri: NotRequired[str]
    """Where the dashboard redirects after login (``redirectURI`` in the resource)."""


class SFServiceArgs(TypedDict):
    """An OSB service offering, as served from ``/v2/catalog``."""

    id: str
    """OSB service id (globally unique, usually a GUID)."""
    name: str
    """OSB service name (CLI-friendly, no spaces)."""
    description: str
    """Short description shown in marketplaces."""
    bindable: bool
    """Whether instances of the service can be bound."""
    tags: NotRequired[list[str]]
    """Tags for discovery."""
    requires: NotRequired[list[str]]
    """Permissions the service needs: ``syslog_drain``, ``route_forwarding``, ``volume_mount``."""
    instances_retrievable: NotRequired[bool]
    """Whether ``GET /v2/service_instances/:id`` is supported."""
    bindings_retrievable: NotRequired[bool]
    """Whether ``GET .../service_bindings/:id`` is supported."""
    allow_context_updates: NotRequired[bool]
    """Whether context changes may be sent through update."""
    plan_updatable: NotRequired[bool]
    """Whether instances may change plan."""
    metadata: NotRequired[dict[str, Any]]
    """OSB catalog metadata (displayName, longDescription, ...), passed through."""
    dashboard_client: NotRequired[DashboardClientArgs]
    """Dashboard SSO client."""
    context: NotRequired[dict[str, Any]]
    """Context for opbroker and the operator, available to templates as ``service.spec.context``."""
    object_name: NotRequired[str]
    """Name of the SFService object; defaults to the service id (Service Fabrik's convention)."""
    namespace: NotRequired[pulumi.Input[str]]
    """Namespace of the control plane the broker serves from; defaults to ``opbroker``.
    Pass the ControlPlane's ``namespace`` output to wait for its CRDs and namespace (not its pods)."""
    labels: NotRequired[dict[str, str]]
    """Extra labels on the object."""
    annotations: NotRequired[dict[str, str]]
    """Extra annotations on the object."""
    wait_for_ready: NotRequired[bool]
    """Wait until the controller reports the object Ready (``pulumi.com/waitFor``)."""


class TemplateArgs(TypedDict):
    """One template of a plan. Exactly one source: ``content``, ``content_encoded``, ``url`` or ``file``."""

    action: TemplateAction
    """What the template is rendered for."""
    type: NotRequired[TemplateType]
    """Template language: ``jinja2`` (the default), or Service Fabrik's ``gotemplate`` and ``helm`` (rendered by
    opbroker's Go renderer; a helm template gives its chart by ``url`` or ``content_encoded`` and its values
    template in ``content``)."""
    content: NotRequired[str]
    """The template text."""
    content_encoded: NotRequired[str]
    """The template text, base64-encoded."""
    url: NotRequired[str]
    """Where the controller fetches the template: https (plain http only with ``allow_http``)."""
    allow_http: NotRequired[bool]
    """Fetch ``url`` over plain http: anyone on the network path could change the template, so pin it with
    ``digest``."""
    digest: NotRequired[str]
    """``sha256:<hex>`` of ``url``'s content: a fetched body with another digest is refused, nothing is rendered."""
    file: NotRequired[str]
    """A local file with the template text, read at preview time (relative paths: see ``base_dir``)."""
    singleton: NotRequired[bool]
    """Objects rendered by this template are shared by all instances of the plan."""
    adopt: NotRequired[bool]
    """Objects this template renders may already exist without opbroker having made them: take them over (stamp
    them as the instance's or binding's own). Without it such an object is left alone and the operation fails."""
    deletion_policy: NotRequired[DeletionPolicy]
    """What happens to this template's objects when opbroker lets go of them (deprovision, unbind, an update that
    no longer renders them): ``delete`` (the default), or ``orphan``: left in place without opbroker's stamp and
    owner reference. ``provision`` and ``bind`` templates only."""
    drift: NotRequired[DriftPolicy]
    """What happens when one of this template's objects is changed or deleted outside opbroker once its instance is
    provisioned: ``correct`` (the default) sets it back, ``report`` only says so, ``ignore`` leaves it alone.
    ``provision`` and ``bind`` templates only."""


class ParameterSchemaArgs(TypedDict):
    """An OSB schema object."""

    parameters: NotRequired[dict[str, Any]]
    """The JSON Schema the request parameters must satisfy."""


class InstanceSchemasArgs(TypedDict):
    """Parameter schemas of provision and update."""

    create: NotRequired[ParameterSchemaArgs]
    """Schema of provision parameters."""
    update: NotRequired[ParameterSchemaArgs]
    """Schema of update parameters."""


class BindingSchemasArgs(TypedDict):
    """Parameter schemas of bind."""

    create: NotRequired[ParameterSchemaArgs]
    """Schema of bind parameters."""


class PlanSchemasArgs(TypedDict):
    """The plan's parameter schemas, as in the OSB catalog."""

    service_instance: NotRequired[InstanceSchemasArgs]
    """Schemas of instance operations (``service_instance`` in the resource)."""
    service_binding: NotRequired[BindingSchemasArgs]
    """Schemas of binding operations (``service_binding`` in the resource)."""


class MaintenanceInfoArgs(TypedDict):
    """OSB maintenance info of a plan."""

    version: str
    """Semantic version of the plan's maintenance level."""
    description: NotRequired[str]
    """What changes with this version."""


class ManagerArgs(TypedDict):
    """How the broker treats the plan's operations."""

    async_: NotRequired[bool]
    """Provision/update/deprovision answer 202 and are polled (``async``; default true)."""
    async_binding: NotRequired[bool]
    """Bind/unbind answer 202 and are polled (default false)."""


class SFPlanArgs(TypedDict):
    """An OSB plan and the templates that turn its requests into operator resources."""

    id: str
    """OSB plan id (globally unique, usually a GUID)."""
    name: str
    """OSB plan name (CLI-friendly, no spaces)."""
    description: str
    """Short description shown in marketplaces."""
    service_id: str
    """Id of the SFService the plan belongs to."""
    templates: list[TemplateArgs]
    """The plan's templates, at most one per action."""
    metadata: NotRequired[dict[str, Any]]
    """OSB catalog metadata (costs, bullets, ...), passed through."""
    maintenance_info: NotRequired[MaintenanceInfoArgs]
    """OSB maintenance info."""
    free: NotRequired[bool]
    """Whether the plan is free (default true)."""
    bindable: NotRequired[bool]
    """Overrides the service's ``bindable``."""
    plan_updatable: NotRequired[bool]
    """Overrides the service's ``plan_updatable``."""
    auto_update_instances: NotRequired[bool]
    """Re-render every instance of the plan when this spec changes."""
    maximum_polling_duration: NotRequired[int]
    """Seconds a platform should poll an operation before giving up."""
    schemas: NotRequired[PlanSchemasArgs]
    """Parameter schemas."""
    snippets: NotRequired[dict[str, str]]
    """Named template fragments shared by the plan's templates."""
    manager: NotRequired[ManagerArgs]
    """How the broker treats the plan's operations."""
    context: NotRequired[dict[str, Any]]
    """Context for the templates (``plan.spec.context``); ``requests`` feeds capacity-aware scheduling."""
    service_account_name: NotRequired[str]
    """The ServiceAccount (in the plan's namespace) the plan acts as (default: ``opbroker-plans``, which the
    ControlPlane component creates and grants ``controller.operator_rules``)."""
    base_dir: NotRequired[str]
    """Directory that relative template ``file`` paths are read from; defaults to the working directory."""
    object_name: NotRequired[str]
    """Name of the SFPlan object; defaults to the plan id (Service Fabrik's convention)."""
    namespace: NotRequired[pulumi.Input[str]]
    """Namespace of the control plane; defaults to ``opbroker``.
    Pass the ControlPlane's ``namespace`` output to wait for its CRDs and namespace (not its pods)."""
    labels: NotRequired[dict[str, str]]
    """Extra labels on the object."""
    annotations: NotRequired[dict[str, str]]
    """Extra annotations on the object."""
    wait_for_ready: NotRequired[bool]
    """Wait until the controller reports the plan Ready (``pulumi.com/waitFor``)."""
    preview_impact: NotRequired[bool]
    """At ``pulumi preview``, show under the plan what its change does to each running instance, read from the
    cluster as the plan's ServiceAccount (default true; see ``preview_kubeconfig``)."""
    preview_kubeconfig: NotRequired[pulumi.Input[str]]
    """The cluster ``preview_impact`` reads (a kubeconfig file's path or its text; a secret config value may be
    given); default: the stack's ``kubernetes:kubeconfig``, else ``KUBECONFIG``, else ``~/.kube/config``."""


#: Args that describe where the object lives or how the component behaves, not the spec.
_OBJECT_KEYS = (
    "object_name",
    "namespace",
    "labels",
    "annotations",
    "wait_for_ready",
    "base_dir",
    "preview_impact",
    "preview_kubeconfig",
)


def _spec(args: Any) -> dict[str, Any]:
    return {k: v for k, v in dict(args).items() if k not in _OBJECT_KEYS and v is not None}


@functools.cache
def _preview_renderer() -> Renderer:
    """One renderer for every SFPlan of a preview: gotemplate and helm plans share one Go renderer process."""
    return Renderer()


def load_templates(templates: Any, base_dir: str | None) -> tuple[list[Any], list[tuple[str, str]]]:
    """Templates with every ``file`` replaced by its ``content``, and (field, reason) for unreadable files.

    ``file`` is a source like the others: a template that also has ``content``, ``content_encoded`` or
    ``url`` is refused here, naming the template.
    """
    if not isinstance(templates, list):
        return templates, []
    base = Path(base_dir) if base_dir else Path.cwd()
    loaded: list[Any] = []
    problems = []
    for index, template in enumerate(templates):
        if not isinstance(template, dict) or "file" not in template:
            loaded.append(template)
            continue
        entry = {k: v for k, v in template.items() if k != "file"}
        others = [k for k in ("content", "content_encoded", "url") if entry.get(k) is not None]
        if others:
            problems.append((f"templates[{index}]", f"exactly one of file, {', '.join(others)} is allowed"))
            continue
        path = base / str(template["file"])
        try:
            entry["content"] = path.read_text(encoding="utf-8")
        except OSError as exc:
            problems.append((f"templates[{index}].file", f"cannot read {str(path)!r}: {exc.strerror or exc}"))
            continue
        loaded.append(entry)
    return loaded, problems


def _with_default_type(templates: Any) -> Any:
    if not isinstance(templates, list):
        return templates
    return [{"type": TemplateType.JINJA2, **t} if isinstance(t, dict) else t for t in templates]


def plan_model(name: str, args: SFPlanArgs) -> SFPlanModel:
    """The validated SFPlan for ``args`` (templates loaded from files), or InvalidArgsError naming each field."""
    resources.require_plain("SFPlan", name, args, except_keys=("preview_kubeconfig",))
    spec = _spec(args)
    templates, problems = load_templates(spec.get("templates"), args.get("base_dir"))
    if problems:
        raise resources.InvalidArgsError("SFPlan", name, problems)
    spec["templates"] = _with_default_type(templates)
    object_name = resources.object_name("SFPlan", name, args.get("object_name"), resource_name(str(args.get("id"))))
    meta = resources.metadata(
        args, name=object_name, component_type=PLAN_TYPE, wait_for_ready=bool(args.get("wait_for_ready"))
    )
    model = resources.validate(SFPlanModel, "SFPlan", name, {"metadata": meta, "spec": spec})
    assert isinstance(model, SFPlanModel)
    # Render the templates offline, so a broken template fails `pulumi preview`, not the first provision.
    verdict = check_plan(model, _preview_renderer())
    if verdict.errors:
        raise resources.InvalidArgsError("SFPlan", name, [(f.path, f.message) for f in verdict.errors])
    for warning in verdict.warnings:
        pulumi.log.warn(f"SFPlan {name!r}: {warning}")
    return model


def service_model(name: str, args: SFServiceArgs) -> SFServiceModel:
    """The validated SFService for ``args``, or InvalidArgsError naming each field."""
    resources.require_plain("SFService", name, args)
    object_name = resources.object_name("SFService", name, args.get("object_name"), resource_name(str(args.get("id"))))
    meta = resources.metadata(
        args, name=object_name, component_type=SERVICE_TYPE, wait_for_ready=bool(args.get("wait_for_ready"))
    )
    model = resources.validate(SFServiceModel, "SFService", name, {"metadata": meta, "spec": _spec(args)})
    assert isinstance(model, SFServiceModel)
    return model


class SFService(pulumi.ComponentResource):
    """An OSB service offering served by the opbroker broker (an ``SFService`` custom resource)."""

    object_name: pulumi.Output[str]
    """Name of the SFService object."""
    namespace: pulumi.Output[str]
    """Namespace of the SFService object."""
    service_id: pulumi.Output[str]
    """The OSB service id."""

    def __init__(self, name: str, args: SFServiceArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        model = service_model(name, args)
        super().__init__(SERVICE_TYPE, name, None, opts)
        self.resource = resources.custom_resource(self, name, model, opts, namespace=args.get("namespace"))
        self.object_name = resources.name_of(self.resource, str(model.metadata.name))
        self.namespace = resources.namespace_of(self.resource, model, args.get("namespace"))
        self.service_id = resources.name_of(self.resource, model.spec.id)
        self.register_outputs(
            {"object_name": self.object_name, "namespace": self.namespace, "service_id": self.service_id}
        )


class SFPlan(pulumi.ComponentResource):
    """An OSB plan with its operator templates (an ``SFPlan`` custom resource), validated at preview time."""

    object_name: pulumi.Output[str]
    """Name of the SFPlan object."""
    namespace: pulumi.Output[str]
    """Namespace of the SFPlan object."""
    plan_id: pulumi.Output[str]
    """The OSB plan id."""
    service_id: pulumi.Output[str]
    """The OSB service id the plan belongs to."""

    def __init__(self, name: str, args: SFPlanArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        model = plan_model(name, args)
        super().__init__(PLAN_TYPE, name, None, opts)
        self.resource = resources.custom_resource(self, name, model, opts, namespace=args.get("namespace"))
        self.object_name = resources.name_of(self.resource, str(model.metadata.name))
        self.namespace = resources.namespace_of(self.resource, model, args.get("namespace"))
        self.plan_id = resources.name_of(self.resource, model.spec.id)
        self.service_id = resources.name_of(self.resource, model.spec.service_id)
        if pulumi.runtime.is_dry_run() and args.get("preview_impact", True) is not False:
            # What the change does to the instances already running: logged under this plan, nothing applied.
            namespace = args.get("namespace") or str(model.metadata.namespace)
            impact.show_under(self, model, namespace, args.get("preview_kubeconfig"))
        self.register_outputs(
            {
                "object_name": self.object_name,
                "namespace": self.namespace,
                "plan_id": self.plan_id,
                "service_id": self.service_id,
            }
        )
