"""OSB requests recorded as resources: SFServiceInstance (provision/update/deprovision) and SFServiceBinding.

The broker writes spec and the request states (``in_queue``, ``update``, ``delete``); the controller moves
them to ``in progress`` and, from the plan's status template, to ``succeeded`` or ``failed``. Credentials
never appear here: a binding's status only names the Secret that holds them.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, ClassVar

from pydantic import AfterValidator, Field, WithJsonSchema

from opbroker.api.catalog import OSB_GROUP, DeletionPolicy, MaintenanceInfo
from opbroker.api.meta import Condition, FreeForm, KubeResource, ResourceRef, WireModel
from opbroker.osbclient.paths import ID_PATTERN, ID_RULE, MAX_ID_BYTES, check_id

#: The CEL rule the API server checks an OSB id with: the client's own pattern (RE2 reads it as Python does) and
#: byte bound (``maxLength`` counts characters, and keeps the rule's cost bounded).
OSB_ID_RULE = f"self.matches(r'{ID_PATTERN}') && size(bytes(self)) <= {MAX_ID_BYTES}"

#: An OSB instance or binding id that is sent in a URL path: the OSB client's one rule
#: (``opbroker.osbclient.paths``), checked by pydantic with the client's own check and by the API server with
#: the same pattern, so a tenant cannot create an object whose id would point the client's URL elsewhere.
OSBId = Annotated[
    str,
    AfterValidator(lambda value: check_id(value, what="externalID")),
    WithJsonSchema(
        {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_ID_BYTES,
            "x-kubernetes-validations": [{"rule": OSB_ID_RULE, "message": f"externalID: {ID_RULE}"}],
        }
    ),
]


class OperationState(StrEnum):
    """States of an instance or binding, as Service Fabrik spells them."""

    IN_QUEUE = "in_queue"
    UPDATE = "update"
    DELETE = "delete"
    IN_PROGRESS = "in progress"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class LastOperation(WireModel):
    """The operation the broker reports through ``last_operation``."""

    type: str = Field(pattern=r"^(provision|update|deprovision|bind|unbind)$")
    id: str | None = None
    """The opaque ``operation`` token returned to the OSB client with 202."""
    started_at: datetime | None = None


class RecordedResource(ResourceRef):
    """An object applied for an instance or binding (a ``status.resources`` entry): where it is, and what opbroker
    does with it when it lets go of it.

    The policy is recorded when the object is applied, from the template that rendered it: the plan may change
    (or go) before the teardown, and what was promised for an object must hold for it then."""

    deletion_policy: DeletionPolicy | None = None
    """The rendering template's ``deletionPolicy`` at the apply; absent (a status written before policies were
    recorded, or the default) is ``delete``."""


class SFServiceInstanceSpec(WireModel):
    """An OSB provision (or update) request, recorded verbatim."""

    instance_id: str | None = None
    service_id: str = Field(min_length=1)
    plan_id: str = Field(min_length=1)
    context: FreeForm | None = None
    organization_guid: str | None = None
    space_guid: str | None = None
    parameters: FreeForm | None = None
    previous_values: FreeForm | None = None
    maintenance_info: MaintenanceInfo | None = Field(default=None, alias="maintenance_info")
    cluster_id: str | None = None
    """The SFCluster the scheduler assigned; empty until scheduled."""


class CheckedRecord(WireModel):
    """A settled instance's last check found as declared: what it read beside ``resources`` (the status template's
    sources) and a digest of the plan's version, the instance's generation and every object's resourceVersion, made
    with the controller's key (a digest the controller did not make matches nothing)."""

    sources: list[ResourceRef] | None = None
    digest: str = Field(max_length=64)
    health: str | None = Field(default=None, max_length=16)
    """What the check found the operator saying (``ready``, ``unready``, ``unknown``): the instance-health metric's."""


class SFServiceInstanceStatus(WireModel):
    state: OperationState | None = None
    description: str | None = None
    error: str | None = None
    dashboard_url: str | None = None
    instance_usable: bool | None = None
    update_repeatable: bool | None = None
    last_operation: LastOperation | None = None
    operation_started_at: datetime | None = None
    """When the controller's current operation began: the broker's ``lastOperation.startedAt`` when the broker
    asked for it, else when the controller started it (a change through the API, a plan roll-out). The
    controller fails an operation still in progress ``--max-operation-seconds`` after this."""
    applied_spec: FreeForm | None = None
    """The spec the current resources were rendered from."""
    applied_plan_hash: str | None = None
    """Hash of the plan spec the resources were rendered from (``autoUpdateInstances`` compares it)."""
    resources: list[RecordedResource] | None = None
    """Every object applied for the instance; one no longer rendered is let go (deleted, unless its template's
    ``deletionPolicy`` is ``orphan``)."""
    error_count: int | None = Field(default=None, ge=0)
    """Consecutive reconcile errors; past the controller's threshold the operation is marked failed."""
    observed_generation: int | None = None
    conditions: list[Condition] | None = None
    checked: CheckedRecord | None = None
    """What the last day-two check found as declared: a restarted controller whose store holds the same versions
    skips rendering the instance again."""


class SFServiceInstance(KubeResource):
    GROUP: ClassVar[str] = OSB_GROUP
    KIND: ClassVar[str] = "SFServiceInstance"
    PLURAL: ClassVar[str] = "sfserviceinstances"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("sfsi",)
    PRINTER_COLUMNS: ClassVar[tuple[tuple[str, str, str], ...]] = (
        ("State", ".status.state", "string"),
        ("Cluster", ".spec.clusterId", "string"),
        ("Plan", ".spec.planId", "string"),
    )

    spec: SFServiceInstanceSpec
    status: SFServiceInstanceStatus | None = None


class SFServiceBindingSpec(WireModel):
    """An OSB bind request, recorded verbatim."""

    id: str = Field(min_length=1)
    instance_id: str = Field(min_length=1)
    service_id: str = Field(min_length=1)
    plan_id: str = Field(min_length=1)
    bind_resource: FreeForm | None = None
    context: FreeForm | None = None
    parameters: FreeForm | None = None
    accepts_incomplete: bool = False


class BindingResponse(WireModel):
    """Where the bind response lives: a Secret owned by the binding, never the status itself."""

    secret_ref: str | None = None


class SFServiceBindingStatus(WireModel):
    state: OperationState | None = None
    description: str | None = None
    error: str | None = None
    response: BindingResponse | None = None
    last_operation: LastOperation | None = None
    operation_started_at: datetime | None = None
    """When the controller's current operation began: the broker's ``lastOperation.startedAt`` when the broker
    asked for it, else when the controller started it (a change through the API, a plan roll-out). The
    controller fails an operation still in progress ``--max-operation-seconds`` after this."""
    applied_spec: FreeForm | None = None
    resources: list[RecordedResource] | None = None
    """Every object applied for the binding (its ``bind`` template's own), each with its deletion policy."""
    sources: list[ResourceRef] | None = None
    """The objects the plan's ``sources`` named when the credentials were read: a bound binding follows them
    (a rotated password reaches its credentials Secret)."""
    sources_digest: str | None = None
    """A digest of what the credentials were rendered from (the plan version, the instance's and binding's
    generations, the ``sources``' resourceVersions). Unchanged, the credentials are not rendered again."""
    error_count: int | None = Field(default=None, ge=0)
    observed_generation: int | None = None
    conditions: list[Condition] | None = None


class SFServiceBinding(KubeResource):
    GROUP: ClassVar[str] = OSB_GROUP
    KIND: ClassVar[str] = "SFServiceBinding"
    PLURAL: ClassVar[str] = "sfservicebindings"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("sfsb",)
    PRINTER_COLUMNS: ClassVar[tuple[tuple[str, str, str], ...]] = (
        ("State", ".status.state", "string"),
        ("Instance", ".spec.instanceId", "string"),
    )

    spec: SFServiceBindingSpec
    status: SFServiceBindingStatus | None = None
