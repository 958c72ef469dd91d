"""The opbroker resource model: pydantic v2 models for every custom resource, and the CRDs derived from them.

The models are the single source of truth. The CRD manifests under ``crds/`` are generated from them
(``opbroker crds``) and a test fails when the checked-in files drift. Nothing here imports pulumi or
talks to a cluster, so every other package can depend on it.
"""

from opbroker.api.catalog import (
    DashboardClient,
    InstanceSchemas,
    ParameterSchema,
    PlanSchemas,
    SFPlan,
    SFPlanSpec,
    SFPlanStatus,
    SFService,
    SFServiceSpec,
    SFServiceStatus,
    TemplateAction,
    TemplateSpec,
    TemplateType,
)
from opbroker.api.cluster import SFCluster, SFClusterSpec, SFClusterStatus
from opbroker.api.errors import ManifestError, field_errors
from opbroker.api.meta import Condition, KubeResource, ObjectMeta, ResourceRef
from opbroker.api.osb import (
    BindingResponse,
    OperationState,
    SFServiceBinding,
    SFServiceBindingSpec,
    SFServiceBindingStatus,
    SFServiceInstance,
    SFServiceInstanceSpec,
    SFServiceInstanceStatus,
)
from opbroker.api.primaza import (
    ApplicationSelector,
    CatalogEntry,
    ClaimState,
    HealthCheck,
    RegisteredService,
    RegisteredServiceSpec,
    RegisteredServiceStatus,
    ServiceCatalog,
    ServiceCatalogSpec,
    ServiceClaim,
    ServiceClaimSpec,
    ServiceClaimStatus,
    ServiceState,
)
from opbroker.api.registry import RESOURCE_KINDS, model_for

__all__ = [
    "RESOURCE_KINDS",
    "ApplicationSelector",
    "BindingResponse",
    "CatalogEntry",
    "ClaimState",
    "Condition",
    "DashboardClient",
    "HealthCheck",
    "InstanceSchemas",
    "KubeResource",
    "ManifestError",
    "ObjectMeta",
    "OperationState",
    "ParameterSchema",
    "PlanSchemas",
    "RegisteredService",
    "RegisteredServiceSpec",
    "RegisteredServiceStatus",
    "ResourceRef",
    "SFCluster",
    "SFClusterSpec",
    "SFClusterStatus",
    "SFPlan",
    "SFPlanSpec",
    "SFPlanStatus",
    "SFService",
    "SFServiceBinding",
    "SFServiceBindingSpec",
    "SFServiceBindingStatus",
    "SFServiceInstance",
    "SFServiceInstanceSpec",
    "SFServiceInstanceStatus",
    "SFServiceSpec",
    "SFServiceStatus",
    "ServiceCatalog",
    "ServiceCatalogSpec",
    "ServiceClaim",
    "ServiceClaimSpec",
    "ServiceClaimStatus",
    "ServiceState",
    "TemplateAction",
    "TemplateSpec",
    "TemplateType",
    "field_errors",
    "model_for",
]
