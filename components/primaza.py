"""Registered services and claims as components: ``RegisteredService`` and ``ServiceClaim`` (Primaza's model).

No ``from __future__ import annotations`` here: the component provider reads these annotations at run time.
"""

from typing import Any, NotRequired, TypedDict

import pulumi

from opbroker.api import RegisteredService as RegisteredServiceModel
from opbroker.api import ServiceClaim as ServiceClaimModel
from opbroker.api.meta import KubeResource
from opbroker.components import resources

REGISTERED_SERVICE_TYPE = "opbroker:index:RegisteredService"
SERVICE_CLAIM_TYPE = "opbroker:index:ServiceClaim"


class ServiceClassIdentityItemArgs(TypedDict):
    """One name/value pair of a service class identity, e.g. ``type=postgresql``."""

    name: str
    """Identity key (``type``, ``provider``, ``version``, ...)."""
    value: str
    """Identity value."""


class SecretKeyRefArgs(TypedDict):
    """A key of a Secret in the registered service's namespace."""

    name: str
    """Secret name."""
    key: str
    """Key in the Secret."""


class ServiceEndpointDefinitionItemArgs(TypedDict):
    """One connection or credential value: literal, or read from a Secret key."""

    name: str
    """Key the application sees (a file name under ``$SERVICE_BINDING_ROOT``)."""
    value: NotRequired[str]
    """Literal value; use ``value_from_secret`` for anything confidential."""
    value_from_secret: NotRequired[SecretKeyRefArgs]
    """Read the value from a Secret key."""


class ConstraintsArgs(TypedDict):
    """Where the service is offered."""

    environments: NotRequired[list[str]]
    """Environments the service is offered in; ``!env`` excludes one, and exclusion wins."""


class HealthCheckContainerArgs(TypedDict):
    """A health check image run with the endpoint definition mounted."""

    image: str
    """Image of the check."""
    command: NotRequired[str]
    """Command the image runs."""
    minutes: NotRequired[int]
    """Minutes between runs."""


class HealthCheckTcpArgs(TypedDict):
    """A TCP connect health check."""

    host: str
    """Host to connect to."""
    port: int
    """Port to connect to."""


class HealthCheckHttpArgs(TypedDict):
    """An HTTP GET health check."""

    url: str
    """URL to GET (http or https)."""
    expected_status: NotRequired[int]
    """Status code that means healthy (default 200)."""


class HealthCheckArgs(TypedDict):
    """How to tell whether the service answers: exactly one of ``container``, ``tcp``, ``http``."""

    container: NotRequired[HealthCheckContainerArgs]
    """Run an image."""
    tcp: NotRequired[HealthCheckTcpArgs]
    """Connect over TCP."""
    http: NotRequired[HealthCheckHttpArgs]
    """GET a URL."""
    period_seconds: NotRequired[int]
    """Seconds between checks (default 60)."""
    failure_threshold: NotRequired[int]
    """Consecutive failures before the service is marked Unreachable (default 3)."""


class RegisteredServiceArgs(TypedDict):
    """A service that already exists, offered for claiming per environment."""

    service_class_identity: list[ServiceClassIdentityItemArgs]
    """What the service is (``type``, ``provider``, ``version``, ...)."""
    service_endpoint_definition: list[ServiceEndpointDefinitionItemArgs]
    """How to reach it: connection values and credentials."""
    constraints: NotRequired[ConstraintsArgs]
    """Where it is offered."""
    healthcheck: NotRequired[HealthCheckArgs]
    """How to tell whether it answers."""
    sla: NotRequired[str]
    """Service level (``L1``, ``L2``, ...)."""
    share_with: NotRequired[list[str]]
    """Other namespaces whose claims may claim it (``*``: every namespace); without it, only its own."""
    object_name: NotRequired[str]
    """Name of the RegisteredService object; defaults to the component's name."""
    namespace: NotRequired[pulumi.Input[str]]
    """Namespace of the object; defaults to ``opbroker``.
    Pass the ControlPlane's ``namespace`` output to wait for its CRDs and namespace (not its pods)."""
    labels: NotRequired[dict[str, str]]
    """Extra labels on the object."""
    annotations: NotRequired[dict[str, str]]
    """Extra annotations on the object."""
    wait_for_ready: NotRequired[bool]
    """Wait until the controller reports the service Ready (``pulumi.com/waitFor``)."""


class LabelSelectorRequirementArgs(TypedDict):
    """One requirement of a label selector."""

    key: str
    """Label key."""
    operator: str
    """``In``, ``NotIn``, ``Exists`` or ``DoesNotExist``."""
    values: NotRequired[list[str]]
    """Values for ``In`` / ``NotIn``."""


class LabelSelectorArgs(TypedDict):
    """A Kubernetes label selector."""

    match_labels: NotRequired[dict[str, str]]
    """Labels that must all match."""
    match_expressions: NotRequired[list[LabelSelectorRequirementArgs]]
    """Requirements that must all hold."""


class ApplicationSelectorArgs(TypedDict):
    """The workloads a claim binds into: by name, or by label selector."""

    api_version: NotRequired[str]
    """API version of the workload (default ``apps/v1``)."""
    kind: NotRequired[str]
    """Kind of the workload (default ``Deployment``)."""
    name: NotRequired[str]
    """Name of one workload."""
    selector: NotRequired[LabelSelectorArgs]
    """Label selector over workloads."""


class ServiceClaimArgs(TypedDict):
    """A claim for a registered service by identity, in an environment; a match is exclusive."""

    service_class_identity: list[ServiceClassIdentityItemArgs]
    """The identity the claimed service must have."""
    service_endpoint_definition_keys: list[str]
    """The endpoint keys the application needs."""
    environment_tag: str
    """The environment the application runs in."""
    application: NotRequired[ApplicationSelectorArgs]
    """The workloads to bind the service into."""
    service_namespaces: NotRequired[list[str]]
    """Other namespaces whose registered services it may take (each only if shared with its namespace)."""
    object_name: NotRequired[str]
    """Name of the ServiceClaim object; defaults to the component's name."""
    namespace: NotRequired[pulumi.Input[str]]
    """Namespace of the object; defaults to ``opbroker``.
    Pass the ControlPlane's ``namespace`` output to wait for its CRDs and namespace (not its pods)."""
    labels: NotRequired[dict[str, str]]
    """Extra labels on the object."""
    annotations: NotRequired[dict[str, str]]
    """Extra annotations on the object."""
    wait_for_ready: NotRequired[bool]
    """Wait until the claim is Resolved and Ready (``pulumi.com/waitFor``)."""


_OBJECT_KEYS = ("object_name", "namespace", "labels", "annotations", "wait_for_ready")


def _model(model: type[KubeResource], type_token: str, name: str, args: Any) -> KubeResource:
    kind = model.KIND
    resources.require_plain(kind, name, args)
    object_name = resources.object_name(kind, name, args.get("object_name"), name)
    meta = resources.metadata(
        args, name=object_name, component_type=type_token, wait_for_ready=bool(args.get("wait_for_ready"))
    )
    spec = {k: v for k, v in dict(args).items() if k not in _OBJECT_KEYS and v is not None}
    return resources.validate(model, kind, name, {"metadata": meta, "spec": spec})


def registered_service_model(name: str, args: RegisteredServiceArgs) -> RegisteredServiceModel:
    """The validated RegisteredService for ``args``, or InvalidArgsError naming each field."""
    model = _model(RegisteredServiceModel, REGISTERED_SERVICE_TYPE, name, args)
    assert isinstance(model, RegisteredServiceModel)
    return model


def service_claim_model(name: str, args: ServiceClaimArgs) -> ServiceClaimModel:
    """The validated ServiceClaim for ``args``, or InvalidArgsError naming each field."""
    model = _model(ServiceClaimModel, SERVICE_CLAIM_TYPE, name, args)
    assert isinstance(model, ServiceClaimModel)
    return model


class RegisteredService(pulumi.ComponentResource):
    """An existing service offered for claims (a ``RegisteredService`` custom resource)."""

    object_name: pulumi.Output[str]
    """Name of the RegisteredService object."""
    namespace: pulumi.Output[str]
    """Namespace of the RegisteredService object."""

    def __init__(self, name: str, args: RegisteredServiceArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        model = registered_service_model(name, args)
        super().__init__(REGISTERED_SERVICE_TYPE, name, None, opts)
        self.resource = resources.custom_resource(self, name, model, opts, namespace=args.get("namespace"))
        self.object_name = resources.name_of(self.resource, str(model.metadata.name))
        self.namespace = resources.namespace_of(self.resource, model, args.get("namespace"))
        self.register_outputs({"object_name": self.object_name, "namespace": self.namespace})


class ServiceClaim(pulumi.ComponentResource):
    """A claim on a registered service (a ``ServiceClaim`` custom resource)."""

    object_name: pulumi.Output[str]
    """Name of the ServiceClaim object."""
    namespace: pulumi.Output[str]
    """Namespace of the ServiceClaim object."""

    def __init__(self, name: str, args: ServiceClaimArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        model = service_claim_model(name, args)
        super().__init__(SERVICE_CLAIM_TYPE, name, None, opts)
        self.resource = resources.custom_resource(self, name, model, opts, namespace=args.get("namespace"))
        self.object_name = resources.name_of(self.resource, str(model.metadata.name))
        self.namespace = resources.namespace_of(self.resource, model, args.get("namespace"))
        self.register_outputs({"object_name": self.object_name, "namespace": self.namespace})
