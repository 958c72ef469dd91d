"""Registered services and claims (the Primaza model): services that already exist, offered per
environment, claimed exclusively by applications.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from opbroker.api.meta import Condition, KubeResource, NamespaceName, WireModel

PRIMAZA_GROUP = "primaza.io"

#: A DNS-1123-ish key usable as a file name under $SERVICE_BINDING_ROOT and as a Secret key.
EndpointKey = str
#: In a ``shareWith`` list: a namespace's name, or ``*`` for every namespace.
ShareTarget = Annotated[str, Field(min_length=1, max_length=63, pattern=r"^(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$")]


class ServiceClassIdentityItem(WireModel):
    """One name/value pair of a service class identity, e.g. ``type=postgresql``."""

    name: str = Field(min_length=1)
    value: str


class SecretKeyRef(WireModel):
    """A key of a Secret in the registered service's own namespace (Secrets are never shared across
    namespaces, so there is no namespace to name)."""

    name: str = Field(min_length=1)
    key: str = Field(min_length=1)


class ServiceEndpointDefinitionItem(WireModel):
    """One connection or credential value: literal, or read from a Secret key."""

    name: EndpointKey = Field(min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    value: str | None = None
    value_from_secret: SecretKeyRef | None = None

    @model_validator(mode="after")
    def _one_value(self) -> ServiceEndpointDefinitionItem:
        if (self.value is None) == (self.value_from_secret is None):
            raise ValueError(f"endpoint {self.name!r}: exactly one of value or valueFromSecret is required")
        return self


class Constraints(WireModel):
    environments: list[str] | None = None
    """Environments the service is offered in; ``!env`` excludes one, and exclusion wins."""


class HealthCheckContainer(WireModel):
    """Primaza's health check: an image run with the endpoint definition mounted."""

    image: str = Field(min_length=1)
    command: str | None = None
    minutes: int | None = Field(default=None, ge=1)


class HealthCheckTcp(WireModel):
    host: str = Field(min_length=1)
    port: int = Field(ge=1, le=65535)


class HealthCheckHttp(WireModel):
    url: str = Field(pattern=r"^https?://")
    expected_status: int = Field(default=200, ge=100, le=599)


class HealthCheck(WireModel):
    """How to tell whether the service answers. One of ``container``, ``tcp``, ``http``."""

    container: HealthCheckContainer | None = None
    tcp: HealthCheckTcp | None = None
    http: HealthCheckHttp | None = None
    period_seconds: int = Field(default=60, ge=1)
    failure_threshold: int = Field(default=3, ge=1)
    """Consecutive failures before the service is marked Unreachable."""

    @model_validator(mode="after")
    def _one_probe(self) -> HealthCheck:
        probes = [p for p in (self.container, self.tcp, self.http) if p is not None]
        if len(probes) != 1:
            raise ValueError("healthcheck: exactly one of container, tcp or http is required")
        return self


class ServiceState(StrEnum):
    REGISTERED = "Registered"
    AVAILABLE = "Available"
    CLAIMED = "Claimed"
    UNREACHABLE = "Unreachable"
    UNDETERMINED = "Undetermined"


class RegisteredServiceSpec(WireModel):
    service_class_identity: list[ServiceClassIdentityItem] = Field(min_length=1)
    service_endpoint_definition: list[ServiceEndpointDefinitionItem] = Field(min_length=1)
    constraints: Constraints | None = None
    healthcheck: HealthCheck | None = None
    sla: str | None = None
    share_with: list[ShareTarget] | None = None
    """Other namespaces whose ServiceClaims may claim this service (``*``: every namespace); without it,
    only claims of its own namespace. The namespace's owner consents here (Gateway API's ReferenceGrant in
    spirit): a claim elsewhere must also name this namespace in its ``serviceNamespaces``. The environment
    constraints apply on top."""


class RegisteredServiceStatus(WireModel):
    state: ServiceState | None = None
    claimed_by: str | None = None
    """The claim holding the service, when Claimed: its name, or ``namespace/name`` for a claim of another
    namespace."""
    consecutive_failures: int | None = Field(default=None, ge=0)
    conditions: list[Condition] | None = None


class RegisteredService(KubeResource):
    GROUP: ClassVar[str] = PRIMAZA_GROUP
    KIND: ClassVar[str] = "RegisteredService"
    PLURAL: ClassVar[str] = "registeredservices"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("regsvc",)
    PRINTER_COLUMNS: ClassVar[tuple[tuple[str, str, str], ...]] = (
        ("State", ".status.state", "string"),
        ("SLA", ".spec.sla", "string"),
        ("Claimed-By", ".status.claimedBy", "string"),
    )

    spec: RegisteredServiceSpec
    status: RegisteredServiceStatus | None = None


class LabelSelectorRequirement(WireModel):
    """One requirement on a label: ``In``/``NotIn`` the values, or the label ``Exists``/``DoesNotExist``."""

    key: str = Field(min_length=1)
    """The label key."""
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    """How the label's value relates to values."""
    values: list[str] | None = None
    """The values for In and NotIn; empty for Exists and DoesNotExist."""


class LabelSelector(WireModel):
    """A Kubernetes label selector: every matchLabels entry and every matchExpressions requirement must hold."""

    match_labels: dict[str, str] | None = None
    """Labels the workload must carry with exactly these values."""
    match_expressions: list[LabelSelectorRequirement] | None = None
    """Further requirements on labels."""


class ApplicationSelector(WireModel):
    """The workloads a claim binds into: by name, or by label selector."""

    api_version: str = "apps/v1"
    """API version of the workloads (apps/v1)."""
    kind: str = "Deployment"
    """Kind of the workloads: Deployment (the default), StatefulSet or DaemonSet."""
    name: str | None = None
    """The one workload, by name (exclusive with selector)."""
    selector: LabelSelector | None = None
    """The workloads, in the same namespace, whose labels match (exclusive with name)."""

    @model_validator(mode="after")
    def _name_or_selector(self) -> ApplicationSelector:
        if (self.name is None) == (self.selector is None):
            raise ValueError("application: exactly one of name or selector is required")
        return self


class ClaimState(StrEnum):
    PENDING = "Pending"
    RESOLVED = "Resolved"
    INVALID = "Invalid"


class ServiceClaimSpec(WireModel):
    service_class_identity: list[ServiceClassIdentityItem] = Field(min_length=1)
    service_endpoint_definition_keys: list[EndpointKey] = Field(min_length=1)
    environment_tag: str = Field(min_length=1)
    application: ApplicationSelector | None = None
    service_namespaces: list[NamespaceName] | None = None
    """Other namespaces whose RegisteredServices this claim may take, each only if it shares with this
    claim's namespace (``shareWith``); the claim's own namespace is always looked in. The binding Secret and
    the projection stay in the claim's namespace."""


class CandidateVerdict(WireModel):
    """Why one registered service was (not) chosen for a claim."""

    name: str
    accepted: bool
    reason: str


class ServiceClaimStatus(WireModel):
    state: ClaimState | None = None
    registered_service: str | None = None
    """The service held: its name, or ``namespace/name`` for a service of another namespace."""
    binding_secret: str | None = None
    reason: str | None = None
    candidates: list[CandidateVerdict] | None = None
    conditions: list[Condition] | None = None


class ServiceClaim(KubeResource):
    GROUP: ClassVar[str] = PRIMAZA_GROUP
    KIND: ClassVar[str] = "ServiceClaim"
    PLURAL: ClassVar[str] = "serviceclaims"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("sclaim",)
    PRINTER_COLUMNS: ClassVar[tuple[tuple[str, str, str], ...]] = (
        ("State", ".status.state", "string"),
        ("Service", ".status.registeredService", "string"),
        ("Environment", ".spec.environmentTag", "string"),
    )

    spec: ServiceClaimSpec
    status: ServiceClaimStatus | None = None


class CatalogEntry(WireModel):
    name: str
    namespace: str | None = None
    """The service's namespace when it is another namespace's, shared with this one."""
    service_class_identity: list[ServiceClassIdentityItem]
    service_endpoint_definition_keys: list[EndpointKey]
    sla: str | None = None


class ServiceCatalogSpec(WireModel):
    """The Available services of one environment (the catalog's name is the environment)."""

    services: list[CatalogEntry] = Field(default_factory=list)


class ServiceCatalog(KubeResource):
    GROUP: ClassVar[str] = PRIMAZA_GROUP
    KIND: ClassVar[str] = "ServiceCatalog"
    PLURAL: ClassVar[str] = "servicecatalogs"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("scat",)

    spec: ServiceCatalogSpec = Field(default_factory=ServiceCatalogSpec)
