"""Names of the multi-cluster contract: labels, annotations, finalizer, condition types.

Their reasons are members of :class:`opbroker.controller.core.reasons.Reason`.
"""

from __future__ import annotations

from enum import StrEnum

from opbroker.api.conventions import DOMAIN
from opbroker.controller.core import finalizers

#: On every object the master copies into a sister cluster (instances, bindings, SFService, SFPlan).
LABEL_REPLICATED = f"{DOMAIN}/replicated"
#: On a copy: the uid of the master object it was made from (a recreated master object gets a new copy).
ANNOTATION_MASTER_UID = f"{DOMAIN}/master-uid"
#: On a master binding: the cluster its copy was made in (still known once the instance is gone).
ANNOTATION_CLUSTER = f"{DOMAIN}/cluster"
#: Held on an SFCluster while instances are placed on it: removal waits until none remain.
CLUSTER_FINALIZER = finalizers.CLUSTER_PROTECTION  # its owner: the table of :mod:`opbroker.controller.core.finalizers`


class ConditionType(StrEnum):
    READY = "Ready"
    SCHEDULED = "Scheduled"
    CLUSTER_REACHABLE = "ClusterReachable"
    REMOVABLE = "Removable"
    CONTROLLER_INSTALLED = "ControllerInstalled"
    """Whether the master installed opbroker's controller into the cluster (``spec.controller``, issue 29)."""
