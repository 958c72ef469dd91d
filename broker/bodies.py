"""OSB v2.17 request and response bodies as pydantic models (snake_case, exactly as on the wire).

Requests ignore unknown fields (the specification's "Vendor Extension Fields": receivers MUST ignore
them). Required strings must be non-empty, so a missing or empty ``service_id`` is a 400 before anything
is looked up. Response models document the OpenAPI schema and shape what the routes send; fields left
``None`` are not sent.

Clients generated from the OSB OpenAPI document send what they do not set as empty values: an unset
struct as ``{}`` (or with empty strings, ``{"version": ""}``), an unset string as ``""``. For an optional
object every field of which is empty, and for an optional string that is empty, "empty" means "not sent":
they read as absent. Required fields get no such leniency (an empty ``plan_id`` on provision stays 400),
and an object with one real value is validated as sent (``{"version": 3}`` stays 400). Fields a newer API
version defines are ignored in a request of an older version, as unknown fields are (:func:`as_of`). The rule
and the version table are the OSB client's (``opbroker.osbclient.tolerance``, ``opbroker.osbclient.versions``):
opbroker reads what a platform sends exactly as it reads what a broker answers.

Pure: no I/O.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints

from opbroker.osbclient import versions
from opbroker.osbclient.tolerance import absent_if_blank

NonEmpty = Annotated[str, StringConstraints(min_length=1)]
FreeForm = dict[str, Any]

#: An optional string a generated client may send as ``""`` when unset.
OptionalId = Annotated[NonEmpty | None, BeforeValidator(absent_if_blank)]


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


#: ``maintenance_info`` as requests carry it: ``{}`` (an unset struct of a generated client) is absent.
OptionalMaintenanceInfo = Annotated[MaintenanceInfo | None, BeforeValidator(absent_if_blank)]

#: The first API version that defines ``maintenance_info``; older requests have it ignored.
MAINTENANCE_INFO_SINCE = versions.SINCE[versions.Feature.MAINTENANCE_INFO]


class PreviousValues(RequestBody):
    service_id: str | None = None
    plan_id: str | None = None
    organization_id: str | None = None
    space_id: str | None = None
    maintenance_info: OptionalMaintenanceInfo = None


class ProvisionRequest(RequestBody):
    service_id: NonEmpty
    plan_id: NonEmpty
    organization_guid: NonEmpty
    space_guid: NonEmpty
    context: FreeForm | None = None
    parameters: FreeForm | None = None
    maintenance_info: OptionalMaintenanceInfo = None


class UpdateRequest(RequestBody):
    service_id: NonEmpty
    plan_id: OptionalId = None
    context: FreeForm | None = None
    parameters: FreeForm | None = None
    previous_values: PreviousValues | None = None
    maintenance_info: OptionalMaintenanceInfo = None


class BindRequest(RequestBody):
    service_id: NonEmpty
    plan_id: NonEmpty
    context: FreeForm | None = None
    app_guid: OptionalId = None
    bind_resource: FreeForm | None = None
    parameters: FreeForm | None = None


Versioned = TypeVar("Versioned", ProvisionRequest, UpdateRequest)


def as_of(request: Versioned, version: tuple[int, int]) -> Versioned:
    """``request`` as a platform speaking ``version`` meant it: fields defined only by later versions are
    unknown to it, so they are ignored like any unknown field (an older platform's client may still send
    them, generated from a newer document). Today that is ``maintenance_info`` (2.15)."""
    if version >= MAINTENANCE_INFO_SINCE:
        return request
    if isinstance(request, UpdateRequest) and request.previous_values is not None:
        previous = request.previous_values.model_copy(update={"maintenance_info": None})
        return request.model_copy(update={"maintenance_info": None, "previous_values": previous})
    return request.model_copy(update={"maintenance_info": None})


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


class InstanceMetadataBody(ResponseBody):
    """OSB's ``metadata`` of a fetched instance: ``attributes`` are the broker's, for display (v2.17)."""

    attributes: dict[str, str] | None = None


class InstanceBody(ResponseBody):
    """A fetched service instance."""

    service_id: str | None = None
    plan_id: str | None = None
    dashboard_url: str | None = None
    parameters: FreeForm | None = None
    maintenance_info: MaintenanceInfoBody | None = None
    metadata: InstanceMetadataBody | None = None
    """What the instance's operator says of it now (day two: its Ready condition), for the platform to show."""


class BindingBody(BaseModel):
    """A binding as the controller rendered it (credentials, endpoints, ...); extra fields pass through."""

    model_config = ConfigDict(extra="allow", frozen=True)

    credentials: FreeForm | None = None
    syslog_drain_url: str | None = None
    route_service_url: str | None = None
    volume_mounts: list[FreeForm] | None = None
    endpoints: list[FreeForm] | None = None
    parameters: FreeForm | None = None
