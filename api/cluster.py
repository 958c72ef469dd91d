"""SFCluster: a Kubernetes cluster instances can be scheduled onto.

The cluster named ``"1"`` is the master when it also provisions. Its kubeconfig lives in a Secret named by
``secretRef`` (key ``kubeconfig``) in the SFCluster's namespace.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from opbroker.api.meta import Condition, KubeResource, WireModel

RESOURCE_GROUP = "resource.servicefabrik.io"

#: A Kubernetes quantity: ``2``, ``"500m"``, ``"16Gi"``.
Quantity = int | str


class SFClusterSpec(WireModel):
    secret_ref: str = Field(min_length=1)
    total_capacity: dict[str, Quantity] | None = None
    """Capacity declared by the operator of the cluster, used where nodes cannot be read."""
    scheduling_limit_percentage: int | None = Field(default=None, ge=0, le=100)
    """Capacity-aware scheduling keeps requests below this share of allocatable."""


class SFClusterStatus(WireModel):
    service_instance_count: int | None = Field(default=None, ge=0)
    capacity: dict[str, Quantity] | None = None
    allocatable: dict[str, Quantity] | None = None
    requests: dict[str, Quantity] | None = None
    reachable: bool | None = None
    observed_generation: int | None = None
    conditions: list[Condition] | None = None


class SFCluster(KubeResource):
    GROUP: ClassVar[str] = RESOURCE_GROUP
    KIND: ClassVar[str] = "SFCluster"
    PLURAL: ClassVar[str] = "sfclusters"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("sfc",)
    PRINTER_COLUMNS: ClassVar[tuple[tuple[str, str, str], ...]] = (
        ("Instances", ".status.serviceInstanceCount", "integer"),
        ("Reachable", ".status.reachable", "boolean"),
    )

    spec: SFClusterSpec
    status: SFClusterStatus | None = None
