"""OSB v2.17 request and response bodies as pydantic models (snake_case, exactly as on the wire).

Requests ignore unknown fields (the specification's "Vendor Extension Fields": receivers MUST ignore
them). Required strings must be non-empty, so a missing or empty ``service_id`` is a 400 before anything
is looked up. Response models document the OpenAPI schema and shape what the routes send; fields left
``None`` are not sent.

Pure: no I/O.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

NonEmpty = Annotated[str, StringConstraints(min_length=1)]
FreeForm = dict[str, Any]


class RequestBody(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class ResponseBody(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    def wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


# -- requests ----------------------------------------------------------------------------------------


class MaintenanceInfo(RequestBody):
    """Only ``version`` counts; any other field is ignored, as the specification says."""

    version: NonEmpty
    description: str | None = None


class PreviousValues(RequestBody):
    service_id: str | None = None
    plan_id: str | None = None
    organization_id: str | None = None
    space_id: str | None = None
    maintenance_info: MaintenanceInfo | None = None


class ProvisionRequest(RequestBody):
    service_id: NonEmpty
    plan_id: NonEmpty
    organization_guid: NonEmpty
    space_guid: NonEmpty
    context: FreeForm | None = None
    parameters: FreeForm | None = None
    maintenance_info: MaintenanceInfo | None = None


class UpdateRequest(RequestBody):
    service_id: NonEmpty
    plan_id: NonEmpty | None = None
    context: FreeForm | None = None
    parameters: FreeForm | None = None
    previous_values: PreviousValues | None = None
    maintenance_info: MaintenanceInfo | None = None


class BindRequest(RequestBody):
    service_id: NonEmpty
    plan_id: NonEmpty
    context: FreeForm | None = None
    app_guid: NonEmpty | None = None
    bind_resource: FreeForm | None = None
    parameters: FreeForm | None = None


# -- responses ---------------------------------------------------------------------------------------


class ErrorBody(ResponseBody):
    """An OSB error. ``error`` is a single camel-case word (``AsyncRequired``, ``ConcurrencyError``, ...)."""

    error: str | None = None
    description: str | None = None
    instance_usable: bool | None = None
    update_repeatable: bool | None = None


class EmptyBody(ResponseBody):
    """``{}``."""


class MaintenanceInfoBody(ResponseBody):
    version: str
    description: str | None = None


class InputParameters(ResponseBody):
    parameters: FreeForm | None = None


class InstanceSchemasBody(ResponseBody):
    create: InputParameters | None = None
    update: InputParameters | None = None


class BindingSchemasBody(ResponseBody):
    create: InputParameters | None = None


class SchemasBody(ResponseBody):
    service_instance: InstanceSchemasBody | None = None
    service_binding: BindingSchemasBody | None = None


class DashboardClientBody(ResponseBody):
    id: str | None = None
    secret: str | None = None
    redirect_uri: str | None = None


class PlanBody(ResponseBody):
    id: str
    name: str
    description: str
    metadata: FreeForm | None = None
    free: bool | None = None
    bindable: bool | None = None
    plan_updateable: bool | None = None
    schemas: SchemasBody | None = None
    maximum_polling_duration: int | None = None
    maintenance_info: MaintenanceInfoBody | None = None


class ServiceBody(ResponseBody):
    name: str
    id: str
    description: str
    tags: list[str] | None = None
    requires: list[str] | None = None
    bindable: bool
    instances_retrievable: bool | None = None
    bindings_retrievable: bool | None = None
    allow_context_updates: bool | None = None
    metadata: FreeForm | None = None
    dashboard_client: DashboardClientBody | None = None
    plan_updateable: bool | None = None
    plans: list[PlanBody] = Field(min_length=1)


class CatalogBody(ResponseBody):
    services: list[ServiceBody]


class ProvisionBody(ResponseBody):
    """Answer to provision and update (200/201/202)."""

    dashboard_url: str | None = None
    operation: str | None = None


class OperationBody(ResponseBody):
    """Answer to an accepted asynchronous deprovision, bind or unbind (202)."""

    operation: str | None = None


class LastOperationBody(ResponseBody):
    state: Literal["in progress", "succeeded", "failed"]
    description: str | None = None
    instance_usable: bool | None = None
    update_repeatable: bool | None = None


class InstanceBody(ResponseBody):
    """A fetched service instance."""

    service_id: str | None = None
    plan_id: str | None = None
    dashboard_url: str | None = None
    parameters: FreeForm | None = None
    maintenance_info: MaintenanceInfoBody | None = None


class BindingBody(BaseModel):
    """A binding as the controller rendered it (credentials, endpoints, ...); extra fields pass through."""

    model_config = ConfigDict(extra="allow", frozen=True)

    credentials: FreeForm | None = None
    syslog_drain_url: str | None = None
    route_service_url: str | None = None
    volume_mounts: list[FreeForm] | None = None
    endpoints: list[FreeForm] | None = None
    parameters: FreeForm | None = None
