"""Pulumi components: the catalog (SFService, SFPlan), clusters (SFCluster), registered services and claims
(RegisteredService, ServiceClaim), and the ControlPlane that installs opbroker itself.

Each component validates its args against ``opbroker.api`` before registering anything, so ``pulumi
preview`` stops on a bad plan and names the field; each registers one custom resource (or, for the
ControlPlane, typed Kubernetes objects) as children named after the component.
"""

from opbroker.components.catalog import (
    SFPlan,
    SFPlanArgs,
    SFService,
    SFServiceArgs,
    TemplateArgs,
)
from opbroker.components.cluster import SFCluster, SFClusterArgs
from opbroker.components.controlplane import ControlPlane, ControlPlaneArgs
from opbroker.components.primaza import (
    RegisteredService,
    RegisteredServiceArgs,
    ServiceClaim,
    ServiceClaimArgs,
)
from opbroker.components.resources import InvalidArgsError

#: Every component, in the order the component provider exposes them.
COMPONENTS = (ControlPlane, SFService, SFPlan, SFCluster, RegisteredService, ServiceClaim)

__all__ = [
    "COMPONENTS",
    "ControlPlane",
    "ControlPlaneArgs",
    "InvalidArgsError",
    "RegisteredService",
    "RegisteredServiceArgs",
    "SFCluster",
    "SFClusterArgs",
    "SFPlan",
    "SFPlanArgs",
    "SFService",
    "SFServiceArgs",
    "ServiceClaim",
    "ServiceClaimArgs",
    "TemplateArgs",
]
