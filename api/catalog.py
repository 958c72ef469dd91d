"""The catalog: SFService (an OSB service offering) and SFPlan (an OSB plan plus its operator templates).

Field names follow Service Fabrik's CRDs so that its manifests apply unchanged, including the few that
are not camelCase there (``maintenance_info``, ``service_instance``, ``service_binding``, ``redirectURI``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

from pydantic import Field, model_validator

from opbroker.api.meta import Condition, FreeForm, KubeResource, NamespaceName, WireModel

OSB_GROUP = "osb.servicefabrik.io"


class TemplateAction(StrEnum):
    """What a template is rendered for (Service Fabrik's set)."""

    PROVISION = "provision"
    BIND = "bind"
    UNBIND = "unbind"
    SOURCES = "sources"
    STATUS = "status"
    CLUSTER_SELECTOR = "clusterSelector"


class TemplateType(StrEnum):
    """The template language. ``jinja2`` is rendered in-process; Service Fabrik's ``gotemplate`` (Go's
    text/template with sprig), ``helm`` (a chart rendered by helm's engine) and the Couchbase service broker's
    configuration templates (``couchbase``: objects whose string attributes are Go templates) by the Go
    renderer."""

    JINJA2 = "jinja2"
    GOTEMPLATE = "gotemplate"
    HELM = "helm"
    COUCHBASE = "couchbase"


class DeletionPolicy(StrEnum):
    """What opbroker does with an object a template rendered when it lets go of it: when its instance is
    deprovisioned, its binding unbound, or an update no longer renders it."""

    DELETE = "delete"
    """Delete it (the default): opbroker manages the object for as long as its owner lives."""
    ORPHAN = "orphan"
    """Leave it in place, no longer opbroker's: its stamp (``opbroker.io/`` labels, ``opbroker.io/owner-uid``)
    and its owner reference are removed, so neither opbroker nor the garbage collector deletes it."""


class DriftPolicy(StrEnum):
    """What opbroker does when an object a template rendered no longer holds what it renders (issue 43, day two):
    someone deleted it, or changed a field the template sets."""

    CORRECT = "correct"
    """Set it back (the default): created again, or the fields the template sets applied again; an Event names the
    object and the fields."""
    REPORT = "report"
    """Leave it, and say so: ``Synced=False`` (reason ``DriftDetected``) and an Event."""
    IGNORE = "ignore"
    """Do not compare it at all (an object an operator or a person is expected to change)."""


#: The templates whose objects are recorded in ``status.resources``: the only ones a deletion policy applies to.
RECORDED_ACTIONS = frozenset({TemplateAction.PROVISION, TemplateAction.BIND})


class TemplateSpec(WireModel):
    """One template of a plan. Exactly one source: inline ``content``, base64 ``contentEncoded`` or ``url``.

    ``helm`` templates, as in Service Fabrik, name a chart archive (``.tgz``) by ``url`` or ship it base64 in
    ``contentEncoded``, and may add ``content``: the values template (a gotemplate) rendered first.
    """

    action: TemplateAction
    type: TemplateType
    content: str | None = None
    content_encoded: str | None = None
    url: str | None = Field(default=None, pattern=r"^https?://")
    """Where the controller fetches the template (a helm template: its chart archive). ``https`` only, unless
    ``allowHttp`` says otherwise; redirects stay on the same scheme and never lead into the cluster's own
    networks (see docs/plans.md, "Template URLs")."""
    allow_http: bool = False
    """Fetch ``url`` over plain ``http``. Off by default: anyone on the path could change what the controller
    renders with the plan's rights. Pin the content with ``digest`` when you turn it on."""
    digest: str | None = Field(default=None, pattern=r"^sha256:[0-9a-f]{64}$")
    """The sha256 of ``url``'s content (``sha256:<64 hex digits>``): a fetched body with another digest is
    refused and nothing is rendered, so a changed or tampered template never reaches the cluster."""
    singleton: bool = False
    """Objects rendered by a singleton template are shared by all instances of the plan: "already exists"
    is tolerated and the object gains an owner reference instead of being recreated."""
    adopt: bool = False
    """Objects this template renders may already exist without opbroker having made them: adopt them (stamp
    them as the instance's or binding's own, and delete them with it). Without it, an existing object opbroker
    did not make for this owner is never taken over: the operation fails (reason ``ObjectNotOwned``)."""
    deletion_policy: DeletionPolicy | None = None
    """What happens to this template's objects when opbroker lets go of them (deprovision, unbind, an update
    that no longer renders them): ``delete`` (absent: the default), or ``orphan`` — left in place without
    opbroker's stamp and owner reference (a database whose data must outlive the instance). Recorded with each
    object when it is applied (``status.resources``): a change takes effect for an instance at its next apply.
    ``provision`` and ``bind`` templates only (their objects are the recorded ones)."""

    drift: DriftPolicy | None = None
    """What happens when one of this template's objects is changed or deleted outside opbroker once its instance is
    provisioned: ``correct`` (absent: the default) sets it back, ``report`` only says so (``Synced=False``, an Event),
    ``ignore`` leaves it alone. ``provision`` and ``bind`` templates only (docs/controller.md, "Day two")."""

    @property
    def drift_policy(self) -> DriftPolicy:
        """The template's drift policy, the default (correct) when it names none (absent stays absent on the wire,
        so existing plans keep their hash)."""
        return self.drift or DriftPolicy.CORRECT

    @model_validator(mode="after")
    def _drift_provision_only(self) -> TemplateSpec:
        if self.drift is not None and self.action is not TemplateAction.PROVISION:
            raise ValueError(
                f"drift applies to provision templates (the objects kept as declared), not to {self.action.value}"
            )
        return self

    @model_validator(mode="after")
    def _url_options(self) -> TemplateSpec:
        if self.url is not None and self.url.startswith("http://") and not self.allow_http:
            raise ValueError(
                f"url {self.url} is plain http: use https, or set allowHttp: true to accept that anyone on the "
                "network path can change the template"
            )
        if self.url is None and (self.allow_http or self.digest is not None):
            raise ValueError("allowHttp and digest apply to a url template only")
        return self

    @property
    def deletion(self) -> DeletionPolicy:
        """The template's deletion policy, the default (delete) when it names none. Absent stays absent on the
        wire: a plan written before policies (or through the Pulumi components) keeps its spec, and its hash."""
        return self.deletion_policy or DeletionPolicy.DELETE

    @model_validator(mode="after")
    def _deletion_policy(self) -> TemplateSpec:
        if self.deletion is DeletionPolicy.ORPHAN and self.action not in RECORDED_ACTIONS:
            raise ValueError(
                f"deletionPolicy: orphan applies to provision and bind templates (whose objects opbroker records and "
                f"later lets go of), not to {self.action.value}"
            )
        return self

    @model_validator(mode="after")
    def _couchbase_actions(self) -> TemplateSpec:
        if self.type is TemplateType.COUCHBASE and self.action not in (
            TemplateAction.PROVISION,
            TemplateAction.BIND,
            TemplateAction.UNBIND,
        ):
            raise ValueError(
                f"a couchbase template renders objects (provision, bind, unbind), not {self.action.value}; "
                "write this template as gotemplate or jinja2"
            )
        return self

    @model_validator(mode="after")
    def _one_source(self) -> TemplateSpec:
        given = [n for n in ("content", "content_encoded", "url") if getattr(self, n) is not None]
        if self.type is TemplateType.HELM:
            charts = [n for n in given if n != "content"]
            if len(charts) != 1:
                named = ", ".join({"content_encoded": "contentEncoded", "url": "url"}[n] for n in charts) or "none"
                raise ValueError(
                    "a helm template needs its chart archive in exactly one of url or contentEncoded (base64 .tgz), "
                    f"plus an optional values template in content (got {named})"
                )
            return self
        if len(given) != 1:
            wire = {"content": "content", "content_encoded": "contentEncoded", "url": "url"}
            named = ", ".join(wire[n] for n in given) or "none"
            raise ValueError(f"exactly one of content, contentEncoded or url is required (got {named})")
        return self


class ParameterSchema(WireModel):
    """An OSB schema object: ``{"parameters": <JSON schema>}``."""

    parameters: FreeForm | None = None


class InstanceSchemas(WireModel):
    create: ParameterSchema | None = None
    update: ParameterSchema | None = None


class BindingSchemas(WireModel):
    create: ParameterSchema | None = None


class PlanSchemas(WireModel):
    """The plan's parameter schemas, spelt as in the OSB catalog."""

    service_instance: InstanceSchemas | None = Field(default=None, alias="service_instance")
    service_binding: BindingSchemas | None = Field(default=None, alias="service_binding")


class MaintenanceInfo(WireModel):
    """OSB maintenance_info: the version of the plan's software, for upgrades."""

    version: str = Field(pattern=r"^\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?$")
    """A semantic version (1.2.3)."""
    description: str | None = None
    """What the version changes."""


class Manager(WireModel):
    """How the broker treats the plan's operations."""

    async_: bool = Field(default=True, alias="async")
    """Provision/update/deprovision answer 202 and are polled through last_operation."""
    async_binding: bool = False
    """Bind/unbind answer 202 and are polled through the binding's last_operation."""


class DashboardClient(WireModel):
    id: str | None = None
    secret: str | None = None
    redirect_uri: str | None = Field(default=None, alias="redirectURI")


class SFServiceSpec(WireModel):
    """An OSB service offering as served from ``/v2/catalog``."""

    name: str = Field(min_length=1, pattern=r"^\S+$")
    id: str = Field(min_length=1)
    description: str = Field(min_length=1)
    tags: list[str] | None = None
    requires: list[str] | None = None
    bindable: bool
    instances_retrievable: bool = False
    bindings_retrievable: bool = False
    allow_context_updates: bool = False
    plan_updatable: bool = False
    metadata: FreeForm | None = None
    dashboard_client: DashboardClient | None = None
    context: FreeForm | None = None
    """Context for opbroker and the operator, available to templates as ``service.spec.context``."""

    @model_validator(mode="after")
    def _requires(self) -> SFServiceSpec:
        allowed = {"syslog_drain", "route_forwarding", "volume_mount"}
        unknown = sorted(set(self.requires or ()) - allowed)
        if unknown:
            raise ValueError(f"requires: unknown permission(s) {unknown}; allowed: {sorted(allowed)}")
        return self


class SFServiceStatus(WireModel):
    observed_generation: int | None = None
    conditions: list[Condition] | None = None


class SFService(KubeResource):
    GROUP: ClassVar[str] = OSB_GROUP
    KIND: ClassVar[str] = "SFService"
    PLURAL: ClassVar[str] = "sfservices"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("sfs",)
    PRINTER_COLUMNS: ClassVar[tuple[tuple[str, str, str], ...]] = (
        ("Display", ".spec.name", "string"),
        ("Bindable", ".spec.bindable", "boolean"),
        ("Ready", '.status.conditions[?(@.type=="Ready")].status', "string"),
    )

    spec: SFServiceSpec
    status: SFServiceStatus | None = None


class SFPlanSpec(WireModel):
    """An OSB plan and everything the controller needs to serve it."""

    name: str = Field(min_length=1, pattern=r"^\S+$")
    id: str = Field(min_length=1)
    description: str = Field(min_length=1)
    service_id: str = Field(min_length=1)
    metadata: FreeForm | None = None
    maintenance_info: MaintenanceInfo | None = Field(default=None, alias="maintenance_info")
    free: bool = True
    bindable: bool | None = None
    plan_updatable: bool | None = None
    auto_update_instances: bool = False
    """Re-render every instance of the plan when this spec changes (hash kept in status)."""
    maximum_polling_duration: int | None = Field(default=None, ge=1)
    schemas: PlanSchemas | None = None
    templates: list[TemplateSpec] = Field(min_length=1)
    snippets: dict[str, str] | None = None
    """Named template fragments shared by the plan's templates (``{% include "snippet-name" %}``)."""
    manager: Manager | None = None
    context: FreeForm | None = None
    """Context for the templates (``plan.spec.context``); ``requests`` feeds capacity-aware scheduling."""
    namespaces: list[NamespaceName] | None = Field(default=None, max_length=64)
    """Namespaces the plan's templates may write into besides the one the instance's objects go to (its own, or
    its request's ``context.namespace`` where honoured): shared infrastructure a platform team grants the plan's
    account. A rendered object in any other namespace is refused at render (``RenderFailed``), whichever step
    renders it — a tenant's parameters or context cannot move a plan's objects into another team's namespace."""
    service_account_name: str | None = Field(
        default=None, min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
    )
    """The ServiceAccount (in the plan's namespace) whose rights the plan acts with: the controller impersonates
    it to apply, read (``sources``) and release what the templates render, and to write the instance's and its
    bindings' Secrets. Default: the control plane's plan account (``opbroker-plans``). The platform team grants
    it exactly what the plan may touch."""

    @model_validator(mode="after")
    def _one_template_per_action(self) -> SFPlanSpec:
        seen: set[TemplateAction] = set()
        for template in self.templates:
            if template.action in seen:
                raise ValueError(f"templates: action {template.action.value!r} is defined more than once")
            seen.add(template.action)
        return self

    def template(self, action: TemplateAction) -> TemplateSpec | None:
        """The plan's template for ``action``, if it has one."""
        return next((t for t in self.templates if t.action == action), None)


class SFPlanStatus(WireModel):
    observed_generation: int | None = None
    spec_hash: str | None = None
    """sha256 of the spec the instances were last rendered with (``autoUpdateInstances``)."""
    conditions: list[Condition] | None = None


class SFPlan(KubeResource):
    GROUP: ClassVar[str] = OSB_GROUP
    KIND: ClassVar[str] = "SFPlan"
    PLURAL: ClassVar[str] = "sfplans"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("sfp",)
    PRINTER_COLUMNS: ClassVar[tuple[tuple[str, str, str], ...]] = (
        ("Display", ".spec.name", "string"),
        ("Service", ".spec.serviceId", "string"),
        ("Ready", '.status.conditions[?(@.type=="Ready")].status', "string"),
    )

    spec: SFPlanSpec
    status: SFPlanStatus | None = None
