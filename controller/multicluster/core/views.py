"""Typed, read-only views over the wire objects multi-cluster decides on.

Built once per reconcile pass by ``.of(body)`` from what the API server (the master's or a sister's) returned;
the plans (:mod:`.placement_plan`, :mod:`.cluster_plan`, :mod:`.replicas`) read their attributes, never string
keys. As the shared views of :mod:`opbroker.controller.core.views`: fields the server adds are ignored, and a
field of the wrong type (an object edited by hand) reads as absent instead of failing the reconcile. ``wire``
keeps the body as read for what needs the whole object (the executor's guarded writes, owner references); nothing
writes to it.

* :class:`ReplicaView` — an instance or binding on the master, or its copy in a sister (and a catalog entry
  being copied there): what is copied over, and what its status says.
(A Secret is read through the shared :class:`~opbroker.controller.core.views.SecretView`.)
* :class:`SFClusterView` — an SFCluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from opbroker.controller.core.views import ConditionView, Meta, OperationView, conditions_of
from opbroker.controller.multicluster import quantities
from opbroker.controller.multicluster.quantities import QuantityError, Resources
from opbroker.controller.multicluster.reasons import ANNOTATION_MASTER_UID, ConditionType
from opbroker.kubeclient.wire import JsonObject, int_of, mapping_of, text_of

__all__ = ["ReplicaView", "SFClusterView"]


@dataclass(frozen=True)
class ReplicaView:
    """An SFServiceInstance or SFServiceBinding (on the master, or its copy in a sister), or the SFService or
    SFPlan copied ahead of an instance."""

    api_version: str
    kind: str
    meta: Meta
    spec: JsonObject
    """The spec as read: copied verbatim into the sister (never interpreted beyond the fields below)."""
    cluster_id: str | None
    """An instance's ``spec.clusterId``: the cluster it is placed on (None: not placed)."""
    plan_id: str
    instance_ref: str
    """``spec.instanceId``: an instance's OSB id, a binding's instance ("" when absent)."""
    status: OperationView
    secret_ref: str | None
    """A binding's ``status.response.secretRef``: the Secret its credentials are in."""
    rendered: bool
    """``status.resources`` is not empty: this controller applied objects for it."""
    created: str | None
    """``metadata.creationTimestamp`` (RFC 3339, so it sorts as text)."""
    reported: JsonObject = field(repr=False, compare=False)
    """The status as read; the fields the master mirrors from a copy are taken over verbatim from it."""
    wire: JsonObject = field(repr=False, compare=False)

    @classmethod
    def of(cls, body: JsonObject) -> ReplicaView:
        spec = mapping_of(body.get("spec"))
        status = mapping_of(body.get("status"))
        return cls(
            api_version=text_of(body.get("apiVersion")) or "",
            kind=text_of(body.get("kind")) or "",
            meta=Meta.of(body.get("metadata")),
            spec=spec,
            cluster_id=text_of(spec.get("clusterId")),
            plan_id=text_of(spec.get("planId")) or "",
            instance_ref=text_of(spec.get("instanceId")) or "",
            status=OperationView.of(status),
            secret_ref=text_of(mapping_of(status.get("response")).get("secretRef")),
            rendered=bool(status.get("resources")),
            created=text_of(mapping_of(body.get("metadata")).get("creationTimestamp")),
            reported=status,
            wire=body,
        )

    @property
    def master_uid(self) -> str | None:
        """On a copy: the uid of the master object it was made for."""
        return self.meta.annotations.get(ANNOTATION_MASTER_UID)

    def condition(self, type_: ConditionType) -> ConditionView | None:
        return self.status.condition(type_.value)


@dataclass(frozen=True)
class SFClusterView:
    """An SFCluster as read."""

    meta: Meta
    secret_ref: str
    """The Secret (in the control-plane namespace) holding the cluster's kubeconfig."""
    total_capacity: JsonObject | None
    """``spec.totalCapacity`` as written (quantities, parsed by :meth:`declared`)."""
    limit_percentage: int | None
    """``spec.schedulingLimitPercentage``."""
    controller: JsonObject | None
    """``spec.controller``: opbroker's controller asked for in the sister (None: not asked; validated by the
    api's model where it is used)."""
    reported: JsonObject = field(repr=False, compare=False)
    """The status as read, compared field by field with the wanted one (a write only when something changed)."""
    conditions: tuple[ConditionView, ...] = ()
    wire: JsonObject = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def of(cls, body: JsonObject) -> SFClusterView:
        spec = mapping_of(body.get("spec"))
        status = mapping_of(body.get("status"))
        controller = spec.get("controller")
        return cls(
            meta=Meta.of(body.get("metadata")),
            secret_ref=text_of(spec.get("secretRef")) or "",
            total_capacity=mapping_of(spec.get("totalCapacity")) or None,
            limit_percentage=int_of(spec.get("schedulingLimitPercentage")),
            controller=controller if isinstance(controller, Mapping) else None,
            reported=status,
            conditions=conditions_of(status.get("conditions")),
            wire=body,
        )

    def declared(self) -> Resources | None:
        """``spec.totalCapacity`` parsed; None when absent or not made of quantities."""
        try:
            return quantities.parse(self.total_capacity) if self.total_capacity else None
        except QuantityError:
            return None

    def has_condition(self, kind: ConditionType) -> bool:
        return any(c.type == kind.value for c in self.conditions)
