"""Typed, read-only views of the Service Catalog Instance and Binding as read (the plans decide on these).

Like :mod:`opbroker.controller.core.views`: built once from the body the API server returned, reading only the
fields they name (whatever else the server adds is ignored) and reading a field of the wrong type — a status
edited by hand — as absent. ``wire`` keeps the body for the pure status builders of :mod:`.operations` and
:mod:`.statuses`; nothing writes to it (the executor works from the versions its writes return).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from opbroker.api.servicecatalog import DeprovisionStatus, ProvisionStatus, UnbindStatus
from opbroker.controller.core.views import ConditionView, Meta, conditions_of, int_of, mapping_of, text_of

#: The Service Catalog kinds' finalizer (the executor Target's, for Instances and Bindings).
FINALIZER = "servicecatalog.k8s.io/opbroker"


@dataclass(frozen=True)
class OperationStatus:
    """What an Instance's or Binding's status says of its OSB operations."""

    async_op: bool
    """``asyncOpInProgress``: an accepted operation is being polled (no other starts)."""
    orphan_mitigation: bool
    current_operation: str | None
    last_operation: str | None
    """The broker's operation id, echoed on ``last_operation`` polls."""
    operation_start: str | None
    observed_generation: int | None
    provision_status: str | None
    deprovision_status: str | None
    unbind_status: str | None
    external_properties: Mapping[str, Any]
    in_progress_properties: Mapping[str, Any]
    secret_name: str | None
    conditions: tuple[ConditionView, ...]

    @classmethod
    def of(cls, status: object) -> OperationStatus:
        s = mapping_of(status)
        return cls(
            async_op=s.get("asyncOpInProgress") is True,
            orphan_mitigation=s.get("orphanMitigationInProgress") is True,
            current_operation=text_of(s.get("currentOperation")),
            last_operation=text_of(s.get("lastOperation")),
            operation_start=text_of(s.get("operationStartTime")),
            observed_generation=int_of(s.get("observedGeneration")),
            provision_status=text_of(s.get("provisionStatus")),
            deprovision_status=text_of(s.get("deprovisionStatus")),
            unbind_status=text_of(s.get("unbindStatus")),
            external_properties=mapping_of(s.get("externalProperties")),
            in_progress_properties=mapping_of(s.get("inProgressProperties")),
            secret_name=text_of(s.get("secretName")),
            conditions=conditions_of(s.get("conditions")),
        )

    @property
    def provisioned(self) -> bool:
        return self.provision_status == ProvisionStatus.PROVISIONED.value

    @property
    def deprovision_owed(self) -> bool:
        """The broker has (or may have) the instance: a deletion deprovisions it."""
        return self.deprovision_status in (DeprovisionStatus.REQUIRED.value, DeprovisionStatus.FAILED.value)

    @property
    def unbind_owed(self) -> bool:
        """The broker has (or may have) the binding: a deletion, or consent withdrawn, unbinds it."""
        return self.unbind_status in (UnbindStatus.REQUIRED.value, UnbindStatus.FAILED.value)

    def condition(self, type_: str) -> ConditionView | None:
        return next((c for c in self.conditions if c.type == type_), None)


@dataclass(frozen=True)
class CatalogObject:
    """A Service Catalog Instance or Binding as read."""

    meta: Meta
    status: OperationStatus
    wire: Mapping[str, Any] = field(repr=False, compare=False)

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> CatalogObject:
        return cls(Meta.of(body.get("metadata")), OperationStatus.of(body.get("status")), body)

    @property
    def held(self) -> bool:
        """Whether the Service Catalog finalizer is on it."""
        return FINALIZER in self.meta.finalizers

    @property
    def observed(self) -> bool:
        """The status has observed this generation (settled, or failed waiting for a spec change)."""
        return self.status.observed_generation == self.meta.generation

    @property
    def spec(self) -> Mapping[str, Any]:
        return mapping_of(self.wire.get("spec"))
