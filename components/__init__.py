"""Pulumi components: the catalog (SFService, SFPlan), clusters (SFCluster), registered services and claims
(RegisteredService, ServiceClaim), the Service Catalog kinds (Broker, Instance, Binding), the ControlPlane
that installs opbroker itself, and NamespaceOnboarding, which makes a consumer namespace ready for it.

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
from opbroker.components.onboarding import NamespaceOnboarding, NamespaceOnboardingArgs
from opbroker.components.primaza import (
    RegisteredService,
    RegisteredServiceArgs,
    ServiceClaim,
    ServiceClaimArgs,
)
from opbroker.components.resources import InvalidArgsError
from opbroker.components.servicecatalog import (
    BasicAuthArgs,
    Binding,
    BindingArgs,
    Broker,
    Instance,
    InstanceArgs,
    ServiceCatalogBrokerArgs,
)

#: Every component, in the order the component provider exposes them.
COMPONENTS = (
    ControlPlane,
    NamespaceOnboarding,
    SFService,
    SFPlan,
    SFCluster,
    RegisteredService,
    ServiceClaim,
    Broker,
    Instance,
    Binding,
)

__all__ = [
    "COMPONENTS",
    "BasicAuthArgs",
    "Binding",
    "BindingArgs",
    "Broker",
    "ControlPlane",
    "ControlPlaneArgs",
    "Instance",
    "InstanceArgs",
    "InvalidArgsError",
    "NamespaceOnboarding",
    "NamespaceOnboardingArgs",
    "RegisteredService",
    "RegisteredServiceArgs",
    "SFCluster",
    "SFClusterArgs",
    "SFPlan",
    "SFPlanArgs",
    "SFService",
    "SFServiceArgs",
    "ServiceCatalogBrokerArgs",
    "ServiceClaim",
    "ServiceClaimArgs",
    "TemplateArgs",
]
