"""``ControlPlane``: everything opbroker runs in a cluster, as typed children Pulumi can diff and order.

CRDs (from ``opbroker.api.crd``), the namespace, least-privilege RBAC, the controller (active-passive,
leader election through a Lease), the broker (active-active behind a Service, optionally autoscaled), the
broker's credentials Secret, disruption budgets and zone spreading. Catalog objects created by other
components wait for the CRDs and the namespace through ``depends_on=control_plane.catalog_prerequisites``
(``depends_on=[control_plane]`` works too, but waits for the Deployments to become Available first).

Contract with the processes (``opbroker.cli``): the broker runs ``opbroker broker serve --host 0.0.0.0
--port 8080 --namespace <ns> --metrics-port 9090``, serves ``/healthz`` and ``/readyz`` on 8080 and ``/metrics``
on 9090 (a port its Service does not expose: OSB clients cannot reach it, a pod scrape can), and reads its basic-auth
credentials from ``OPBROKER_BROKER_USERNAME`` / ``OPBROKER_BROKER_PASSWORD`` (filled from the credentials
Secret). The controller runs ``opbroker controller run --namespace <ns> --metrics-port 9090``, campaigns for
the Lease ``opbroker-controller`` in ``<ns>`` and serves ``/metrics``, ``/healthz`` and ``/readyz`` on 9090; a
leader that loses its lease, or whose loop stops, exits (so the pod restarts).
Every controller replica (leader or not) also serves the Service Catalog admission webhook on 9443 (``--webhook-*``
flags) behind the Service ``opbroker-controller-webhook``; the component registers the
ValidatingWebhookConfiguration ``opbroker-servicecatalog-<ns>`` without a CA, and the controller fills in the CA
it keeps in the Secret ``opbroker-webhook-tls`` (``controller.webhook``, default true).
Sharded (``controller.shards`` M > 1, issue 46), the controller is the StatefulSet ``opbroker-controller`` (governed by
the headless Service of that name) of M * ``controller.replicas`` pods running ``... --shards M
--shard-from-hostname`` (shard: the pod's ordinal modulo M), campaigning for the Leases
``opbroker-controller-shard-<i>``; the broker then runs ``... --shards M``.

No ``from __future__ import annotations`` here: the component provider reads these annotations at run time.
"""

from typing import Annotated, Any, Literal, NotRequired, TypedDict

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from opbroker.api import admission, controllerinstall, errors, selectors
from opbroker.api.controllerinstall import (
    CONTROLLER_RESOURCES,
    HOST_KEY,  # noqa: F401  # re-exported: the tests and the dev tooling read them from here
    METRICS_PORT,
    RUN_AS_USER,  # noqa: F401
    SKIP_AWAIT_ANNOTATION,
    WEBHOOK_PORT,  # noqa: F401
    ZONE_KEY,  # noqa: F401
    ControllerSpec,
    PodSettings,
    common_labels,
    controller_objects,
    downward_env,
    role_ref,
    selector_labels,
)
from opbroker.api.controllerinstall import (
    Names as Names,
)
from opbroker.api.conventions import DEFAULT_NAMESPACE
from opbroker.api.crd import all_crds
from opbroker.components import rbac, resources
from opbroker.components.onboarding import NamespaceOnboarding
from opbroker.rendering.urlpolicy import FetchPolicy

CONTROL_PLANE_TYPE = "opbroker:index:ControlPlane"
#: Port of the broker's OSB API, /healthz and /readyz.
PORT = 8080
USERNAME_KEY = "username"
PASSWORD_KEY = "password"


class ResourceRequirementsArgs(TypedDict):
    """Compute resources of a container (Kubernetes quantities)."""

    requests: NotRequired[dict[str, str]]
    """Requested resources, e.g. ``{"cpu": "100m", "memory": "128Mi"}``."""
    limits: NotRequired[dict[str, str]]
    """Resource limits, e.g. ``{"memory": "512Mi"}``."""


class PolicyRuleArgs(TypedDict):
    """An RBAC rule; ``*`` verbs on ``*`` resources is refused."""

    api_groups: list[str]
    """API groups (``""`` is the core group)."""
    resources: list[str]
    """Resources (plural names, ``<plural>/status`` for subresources)."""
    verbs: list[str]
    """Verbs (``get``, ``list``, ``watch``, ``create``, ``update``, ``patch``, ``delete``)."""
    resource_names: NotRequired[list[str]]
    """Restrict the rule to these object names."""


class ControllerArgs(TypedDict):
    """The controller: active-passive replicas with leader election."""

    replicas: NotRequired[int]
    """Replicas of each shard (default 2: one leader, one standby)."""
    shards: NotRequired[int]
    """Shards the controller's work is split into (default 1; at most 64). More than 1 makes the controller a
    StatefulSet of ``shards * replicas`` pods instead of a Deployment: each pod's shard is its ordinal modulo
    ``shards`` (``--shards --shard-from-hostname``), each shard's pods campaign for its own Lease
    (``opbroker-controller-shard-<i>``), and the broker is given the same count (``--shards``)."""
    shard_takeover: NotRequired[bool]
    """With ``shards``: a standby pod campaigns for every shard's Lease, its own first, and runs as the shard whose
    Lease it takes (``--shard-takeover``; default false) — a shard whose own pods are gone (a lost node holds a
    StatefulSet's pod until the node is known dead) is taken over by a standby of another within the lease."""
    image: NotRequired[str]
    """Image override for the controller (default: the control plane's ``image``)."""
    resources: NotRequired[ResourceRequirementsArgs]
    """Compute resources (default: requests 100m CPU / 128Mi, limit 512Mi)."""
    operator_rules: NotRequired[list[PolicyRuleArgs]]
    """Rules for the operator kinds the plans render (e.g. ``acid.zalan.do`` ``postgresqls``): granted to the
    default plan account ``opbroker-plans``, which plans act as, in the control plane's namespace and each of
    ``tenant_namespaces`` (RoleBindings; the controller itself gets only their read verbs, for its watch cache)."""
    cluster_operator_rules: NotRequired[list[PolicyRuleArgs]]
    """Rules for cluster-scoped kinds the plans render (e.g. a ClusterRole), which no RoleBinding can grant:
    granted to ``opbroker-plans`` cluster-wide (a ClusterRoleBinding). Only these are cluster-wide."""
    plan_accounts: NotRequired[list[str]]
    """Names of further plan accounts (SFPlans' ``serviceAccountName``) the controller may impersonate, besides
    ``opbroker-plans`` and the namespaces' ``opbroker``: it may impersonate no other ServiceAccount."""
    single_tenant: NotRequired[bool]
    """Act with the controller's own rights instead of the plans' accounts (``--single-tenant``; default
    false): only for a cluster with one tenant. The controller's ClusterRole then writes the operator kinds,
    Secrets, ConfigMaps, Jobs and workloads itself."""
    workers: NotRequired[int]
    """Concurrent reconciles (``--workers``; default: the controller's own, 4)."""
    namespace_workers: NotRequired[int]
    """Concurrent reconciles of one namespace (``--namespace-workers``; default 2): a tenant flooding its
    namespace holds at most this many workers while the other namespaces are served in turn."""
    namespace_operations: NotRequired[int]
    """Operations in progress at once in one namespace (``--namespace-operations``; default 64; 0: no budget)."""
    namespace_cache_mib: NotRequired[int]
    """MiB of one namespace's objects the controller keeps in memory (``--namespace-cache-mib``; default 64;
    0: no budget)."""
    error_threshold: NotRequired[int]
    """Consecutive errors before an operation is failed (``--error-threshold``; default 8)."""
    max_operation_seconds: NotRequired[float]
    """A provision, update or bind with no outcome this long after it was requested is failed
    (``--max-operation-seconds``; default 7200; 0: no limit)."""
    resync_seconds: NotRequired[float]
    """Day two: the safety net for a missed event (``--resync-seconds``; default 600; 0: never): every this long,
    provisioned instances whose objects moved without an event are checked and bound bindings looked at again."""
    multicluster: NotRequired[bool]
    """Run as the master of several clusters (``--multicluster``): SFClusters get scheduled onto and report
    Ready (default false)."""
    scheduler: NotRequired[str]
    """With ``multicluster``: ``default``, ``round-robin``, ``least-utilized``, ``label-selector`` or
    ``capacity-aware`` (``--scheduler``)."""
    template_allow_networks: NotRequired[list[str]]
    """Networks (CIDR) ``url`` templates may be fetched from although they are not public, e.g. the Service
    network of an in-cluster template server (``--template-allow-network``; default: public addresses only)."""
    template_proxy: NotRequired[str]
    """The http(s) proxy ``url`` templates are fetched through (``--template-proxy``; default none: the
    ``*_PROXY`` variables are never read)."""
    webhook: NotRequired[bool]
    """Serve the Service Catalog admission webhook that refuses deleting an Instance with Bindings (default
    true): a Service for the controller's webhook port, the ValidatingWebhookConfiguration pointing at it, and
    the rights to fill in its CA (that one configuration, by name) and keep the CA in a Secret of the namespace.
    False: such a deletion is accepted and held by the finalizer until the Bindings are gone."""


class BrokerAutoscalingArgs(TypedDict):
    """A HorizontalPodAutoscaler for the broker (CPU utilisation)."""

    min_replicas: NotRequired[int]
    """Lower bound (default 2)."""
    max_replicas: NotRequired[int]
    """Upper bound (default 6)."""
    target_cpu_utilization: NotRequired[int]
    """Average CPU utilisation to aim for, in percent of requests (default 70)."""


class BrokerArgs(TypedDict):
    """The OSB broker: active-active replicas behind a Service."""

    replicas: NotRequired[int]
    """Replicas (default 2); ignored when ``autoscaling`` is set."""
    image: NotRequired[str]
    """Image override for the broker (default: the control plane's ``image``)."""
    resources: NotRequired[ResourceRequirementsArgs]
    """Compute resources (default: requests 100m CPU / 128Mi, limit 256Mi)."""
    username: NotRequired[str]
    """Basic-auth user platforms use against the broker (default ``opbroker``)."""
    password: NotRequired[pulumi.Input[str]]
    """Basic-auth password (a secret); generated with pulumi-random when omitted."""
    service_type: NotRequired[str]
    """Type of the broker's Service: ``ClusterIP`` (default), ``NodePort`` or ``LoadBalancer``."""
    autoscaling: NotRequired[BrokerAutoscalingArgs]
    """Scale the broker on CPU instead of a fixed replica count."""
    context_namespaces: NotRequired[bool]
    """Record each instance in the namespace its request's ``context.namespace`` names (the OSB Kubernetes
    profile; default true): the broker then gets a ClusterRole for instances, bindings and credentials
    Secrets. False keeps every instance in the control plane's namespace and the broker's rights in it."""
    allowed_namespaces: NotRequired[list[str]]
    """Namespaces a request's ``context.namespace`` may name, besides the control plane's
    (``--allowed-namespace``): any other is refused with 400 unless it matches ``allowed_namespace_selector``.
    Default: none — only the control plane's namespace."""
    allowed_namespace_selector: NotRequired[str]
    """A label selector on Namespaces (``tenant=true``, ``team in (a,b)``): a request's ``context.namespace``
    may name a namespace whose labels match (``--allowed-namespace-selector``); the broker then may read
    Namespaces (a ClusterRole)."""


class ControlPlaneArgs(TypedDict):
    """Everything opbroker runs in a cluster: CRDs, namespace, RBAC, controller and broker."""

    image: str
    """The opbroker image (it holds the ``opbroker`` command for controller and broker)."""
    namespace: NotRequired[str]
    """Namespace of the control plane and the catalog (default ``opbroker``)."""
    create_namespace: NotRequired[bool]
    """Create the namespace (default true); false when it exists already."""
    install_crds: NotRequired[bool]
    """Install the CRDs (default true); false for a second control plane in the same cluster."""
    retain_crds: NotRequired[bool]
    """Leave the CRDs in the cluster when they leave the stack (default true): ``pulumi destroy``, removing or
    renaming the component only forget them, so every SFService, SFPlan, instance and binding stays. False
    deletes them, and with them every such object. Retained CRDs exist when a stack installs them again:
    ``pulumi import`` them, or set the Kubernetes provider's ``upsertExistingObjects``."""
    image_pull_policy: NotRequired[str]
    """``IfNotPresent`` (default), ``Always`` or ``Never``."""
    image_pull_secrets: NotRequired[list[str]]
    """Names of Secrets for pulling the image."""
    zone_spread: NotRequired[str]
    """What to do when replicas cannot be spread over zones: ``ScheduleAnyway`` (default) or ``DoNotSchedule``."""
    labels: NotRequired[dict[str, str]]
    """Extra labels on every object."""
    await_deployments: NotRequired[bool]
    """Whether ``pulumi up`` waits for the controller and broker Deployments (the controller's StatefulSet when
    sharded) to become Available and for the broker and webhook Services to find ready pods (default true). False
    (``pulumi.com/skipAwait`` on those four) for a cluster whose pods cannot start yet, e.g. a control plane without
    nodes: the objects are created and ``up`` goes on."""
    controller: NotRequired[ControllerArgs]
    """Controller settings."""
    broker: NotRequired[BrokerArgs]
    """Broker settings."""
    tenant_namespaces: NotRequired[list[str]]
    """Consumer namespaces to onboard: each gets its ``opbroker`` account bound to what opbroker writes there for
    no plan, and ``opbroker-plans`` bound to its rules there (default none; a namespace onboarded by other means
    needs the same objects: the ``NamespaceOnboarding`` component or ``opbroker namespace onboard``)."""
    tenant_namespace_selector: NotRequired[str]
    """A label selector on Namespaces (``opbroker.io/tenant=true``): the controller onboards every namespace whose
    labels match, now or labelled later, and offboards one that stops matching (``--onboard-namespace-selector``).
    It does so as the account ``opbroker-onboarder``, which may create only the onboarding's ServiceAccount and
    RoleBindings and bind only opbroker's ClusterRoles. Labelling a Namespace is the platform's act: a tenant with
    rights in its namespace cannot label the Namespace object itself."""


# -- validation: the args as a frozen settings model with the defaults ------------------------------------


class _Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Resources(_Settings):
    requests: dict[str, str | int] | None = None
    limits: dict[str, str | int] | None = None

    def to_manifest(self) -> dict[str, Any]:
        parts = (("requests", self.requests), ("limits", self.limits))
        return {key: {n: str(q) for n, q in value.items()} for key, value in parts if value}


class OperatorRule(_Settings):
    api_groups: list[str]
    resources: list[str]
    verbs: list[str]
    resource_names: list[str] | None = None


class Controller(_Settings):
    replicas: int = Field(default=2, ge=1)
    """Per shard."""
    shards: int = Field(default=1, ge=1, le=rbac.MAX_SHARDS)
    image: str | None = Field(default=None, min_length=1)
    resources: Resources = Resources.model_validate(CONTROLLER_RESOURCES)
    operator_rules: list[OperatorRule] = Field(default_factory=list)
    cluster_operator_rules: list[OperatorRule] = Field(default_factory=list)
    plan_accounts: list[Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", max_length=253)]] = Field(
        default_factory=list
    )
    workers: int | None = Field(default=None, ge=1, le=256)
    namespace_workers: int | None = Field(default=None, ge=1, le=256)
    namespace_operations: int | None = Field(default=None, ge=0)
    namespace_cache_mib: int | None = Field(default=None, ge=0)
    error_threshold: int | None = Field(default=None, ge=1)
    max_operation_seconds: float | None = Field(default=None, ge=0)
    resync_seconds: float | None = Field(default=None, ge=0)
    shard_takeover: bool = False
    multicluster: bool = False
    single_tenant: bool = False
    scheduler: Literal["default", "round-robin", "least-utilized", "label-selector", "capacity-aware"] | None = None
    template_allow_networks: list[str] = Field(default_factory=list)
    template_proxy: str | None = None
    webhook: bool = True

    @field_validator("template_allow_networks")
    @classmethod
    def _networks(cls, networks: list[str]) -> list[str]:
        FetchPolicy.from_flags(networks)  # ValueError names the bad value
        return networks

    @field_validator("template_proxy")
    @classmethod
    def _proxy(cls, proxy: str | None) -> str | None:
        FetchPolicy.from_flags(proxy=proxy)
        return proxy

    @model_validator(mode="after")
    def _scheduler_needs_multicluster(self) -> "Controller":
        if self.scheduler is not None and not self.multicluster:
            raise ValueError("scheduler: only a multicluster controller schedules; set multicluster: true")
        return self

    @model_validator(mode="after")
    def _takeover_needs_shards(self) -> "Controller":
        if self.shard_takeover and self.shards < 2:
            raise ValueError("shard_takeover: a standby takes another shard's Lease; set shards to 2 or more")
        return self

    def flags(self) -> list[str]:
        """The ``opbroker controller run`` flags these settings stand for."""
        flags: list[str] = []
        if self.workers is not None:
            flags += ["--workers", str(self.workers)]
        if self.namespace_workers is not None:
            flags += ["--namespace-workers", str(self.namespace_workers)]
        if self.namespace_operations is not None:
            flags += ["--namespace-operations", str(self.namespace_operations)]
        if self.namespace_cache_mib is not None:
            flags += ["--namespace-cache-mib", str(self.namespace_cache_mib)]
        if self.error_threshold is not None:
            flags += ["--error-threshold", str(self.error_threshold)]
        if self.max_operation_seconds is not None:
            flags += ["--max-operation-seconds", f"{self.max_operation_seconds:g}"]
        if self.resync_seconds is not None:
            flags += ["--resync-seconds", f"{self.resync_seconds:g}"]
        if self.shard_takeover:
            flags.append("--shard-takeover")
        if self.multicluster:
            flags.append("--multicluster")
        if self.scheduler is not None:
            flags += ["--scheduler", self.scheduler]
        if self.single_tenant:
            flags.append("--single-tenant")
        for network in self.template_allow_networks:
            flags += ["--template-allow-network", network]
        if self.template_proxy is not None:
            flags += ["--template-proxy", self.template_proxy]
        return flags


class Autoscaling(_Settings):
    min_replicas: int = Field(default=2, ge=1)
    max_replicas: int = Field(default=6, ge=1)
    target_cpu_utilization: int = Field(default=70, ge=1, le=100)

    @model_validator(mode="after")
    def _bounds(self) -> "Autoscaling":
        if self.max_replicas < self.min_replicas:
            raise ValueError(f"max_replicas ({self.max_replicas}) is below min_replicas ({self.min_replicas})")
        return self


class Broker(_Settings):
    replicas: int = Field(default=2, ge=1)
    image: str | None = Field(default=None, min_length=1)
    resources: Resources = Resources(requests={"cpu": "100m", "memory": "128Mi"}, limits={"memory": "256Mi"})
    username: str = Field(default="opbroker", min_length=1, pattern=r"^[^:]+$")
    service_type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = "ClusterIP"
    autoscaling: Autoscaling | None = None
    context_namespaces: bool = True
    allowed_namespaces: list[Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)]] = Field(
        default_factory=list
    )
    allowed_namespace_selector: str | None = Field(default=None, min_length=1)

    @field_validator("allowed_namespace_selector")
    @classmethod
    def _selector_parses(cls, value: str | None) -> str | None:
        if value is not None:
            selectors.parse(value)  # a SelectorError is a ValueError: reported with the field
        return value

    def flags(self) -> list[str]:
        """The ``opbroker broker serve`` flags these settings stand for."""
        flags = [] if self.context_namespaces else ["--no-context-namespaces"]
        for namespace in self.allowed_namespaces:
            flags += ["--allowed-namespace", namespace]
        if self.allowed_namespace_selector is not None:
            flags += ["--allowed-namespace-selector", self.allowed_namespace_selector]
        return flags


class Settings(_Settings):
    """The ControlPlane's args, validated, with every default filled in (the password is kept apart)."""

    image: str = Field(min_length=1)
    namespace: str = Field(default=DEFAULT_NAMESPACE, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    create_namespace: bool = True
    install_crds: bool = True
    retain_crds: bool = True
    image_pull_policy: Literal["IfNotPresent", "Always", "Never"] = "IfNotPresent"
    image_pull_secrets: list[str] = Field(default_factory=list)
    zone_spread: Literal["ScheduleAnyway", "DoNotSchedule"] = "ScheduleAnyway"
    labels: dict[str, str] = Field(default_factory=dict)
    await_deployments: bool = True
    controller: Controller = Controller()
    broker: Broker = Broker()
    tenant_namespaces: list[Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)]] = Field(
        default_factory=list
    )
    tenant_namespace_selector: str | None = Field(default=None, min_length=1)

    @field_validator("tenant_namespace_selector")
    @classmethod
    def _tenant_selector_parses(cls, value: str | None) -> str | None:
        if value is not None:
            selectors.parse(value)  # a SelectorError is a ValueError: reported with the field
        return value


def settings(name: str, args: ControlPlaneArgs) -> Settings:
    """Validated settings for ``args``, or InvalidArgsError naming each field (the password may be an Output)."""
    plain: dict[str, Any] = dict(args)
    if isinstance(plain.get("broker"), dict):
        plain["broker"] = {k: v for k, v in plain["broker"].items() if k != "password"}
    resources.require_plain("ControlPlane", name, plain)
    try:
        validated = Settings.model_validate(plain)
    except ValidationError as exc:
        problems = [line.partition(": ")[::2] for line in errors.field_errors(exc)]
        raise resources.InvalidArgsError("ControlPlane", name, problems) from None
    rule_problems = [
        problem
        for field in ("operator_rules", "cluster_operator_rules")
        for problem in rbac.rule_problems(
            [rule.model_dump(exclude_none=True) for rule in getattr(validated.controller, field)],
            f"controller.{field}",
        )
    ]
    if rule_problems:
        raise resources.InvalidArgsError("ControlPlane", name, rule_problems)
    return validated


# -- pure builders: names, labels, pod specs ------------------------------------------------------------------


def broker_probes() -> dict[str, Any]:
    return {
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "http"},
            "initialDelaySeconds": 10,
            "periodSeconds": 10,
            "timeoutSeconds": 2,
            "failureThreshold": 3,
        },
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": "http"},
            "periodSeconds": 5,
            "timeoutSeconds": 2,
            "failureThreshold": 3,
        },
    }


def pod_template(
    s: Settings,
    *,
    component: str,
    service_account: str,
    image: str,
    command: list[str],
    env: list[dict[str, Any]],
    ports: list[dict[str, Any]],
    probes: dict[str, Any],
    resources_: Resources,
) -> dict[str, Any]:
    """A hardened pod (:func:`opbroker.api.controllerinstall.pod_template`) with the settings' pulling and spreading."""
    return controllerinstall.pod_template(
        pod_settings(s),
        component=component,
        service_account=service_account,
        image=image,
        command=command,
        env=env,
        ports=ports,
        probes=probes,
        resources=resources_.to_manifest(),
    )


def pod_settings(s: Settings) -> PodSettings:
    return PodSettings(
        image_pull_policy=s.image_pull_policy,
        image_pull_secrets=tuple(s.image_pull_secrets),
        zone_spread=s.zone_spread,
        labels=dict(s.labels),
    )


def controller_spec(s: Settings) -> ControllerSpec:
    """The controller's part of the settings, as the pure source of its objects takes it."""
    return ControllerSpec(
        namespace=s.namespace,
        image=s.controller.image or s.image,
        replicas=s.controller.replicas,
        shards=s.controller.shards,
        resources=s.controller.resources.to_manifest(),
        operator_rules=tuple(rule.model_dump(exclude_none=True) for rule in s.controller.operator_rules),
        cluster_operator_rules=tuple(
            rule.model_dump(exclude_none=True) for rule in s.controller.cluster_operator_rules
        ),
        plan_accounts=tuple(s.controller.plan_accounts),
        tenant_namespaces=tuple(s.tenant_namespaces),
        onboard_namespace_selector=s.tenant_namespace_selector,
        single_tenant=s.controller.single_tenant,
        webhook=s.controller.webhook,
        flags=tuple(s.controller.flags()),
        pods=pod_settings(s),
        await_deployments=s.await_deployments,
    )


def broker_command(namespace: str, flags: list[str] | None = None) -> list[str]:
    command = ["opbroker", "broker", "serve", "--host", "0.0.0.0", "--port", str(PORT), "--namespace", namespace]
    return command + ["--metrics-port", str(METRICS_PORT)] + (flags or [])


# -- the component -------------------------------------------------------------------------------------------


class ControlPlane(pulumi.ComponentResource):
    """Installs opbroker into a cluster: CRDs, namespace, RBAC, the controller and the OSB broker."""

    # Its ``tenant_namespaces`` were its own children before NamespaceOnboarding existed: theirs keep those URNs.
    onboarded_namespaces_as_children = True

    namespace: pulumi.Output[str]
    """Namespace of the control plane (where SFService, SFPlan and SFCluster objects go), known once the namespace
    and the CRDs exist: a catalog component given it as its ``namespace`` waits for exactly those."""
    crd_names: pulumi.Output[list[str]]
    """Names of the installed CRDs; depending on this output waits for them."""
    broker_url: pulumi.Output[str]
    """In-cluster URL of the OSB broker."""
    broker_username: pulumi.Output[str]
    """Basic-auth user of the broker."""
    broker_password: pulumi.Output[str]
    """Basic-auth password of the broker (secret)."""
    broker_credentials_secret: pulumi.Output[str]
    """Name of the Secret holding the broker's credentials."""

    def __init__(self, name: str, args: ControlPlaneArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        s = settings(name, args)
        super().__init__(CONTROL_PLANE_TYPE, name, None, opts)
        if s.broker.autoscaling is None and s.broker.replicas < 2:
            pulumi.log.warn("the broker runs active-active: one replica means no availability during restarts", self)
        names = Names(s.namespace)
        ns = s.namespace

        def child(*depends_on: pulumi.Resource) -> pulumi.ResourceOptions:
            return pulumi.ResourceOptions(parent=self, depends_on=list(depends_on) or None)

        def meta(object_name: str, component: str, namespaced: bool = True) -> dict[str, Any]:
            m: dict[str, Any] = {"name": object_name, "labels": common_labels(component, s.labels)}
            if namespaced:
                m["namespace"] = ns
            return m

        def deployment_meta(object_name: str, component: str) -> dict[str, Any]:
            m = meta(object_name, component)
            if not s.await_deployments:
                m["annotations"] = {SKIP_AWAIT_ANNOTATION: "true"}
            return m

        # Namespace and CRDs first: everything else waits for them.
        self.namespace_resource: k8s.core.v1.Namespace | None = None
        in_namespace: list[pulumi.Resource] = []
        if s.create_namespace:
            self.namespace_resource = k8s.core.v1.Namespace(
                f"{name}-namespace", metadata=meta(ns, "control-plane", namespaced=False), opts=child()
            )
            in_namespace.append(self.namespace_resource)

        self.crds: list[k8s.apiextensions.v1.CustomResourceDefinition] = []
        crd_names = []
        if s.install_crds:
            for crd in all_crds():
                crd_name = crd["metadata"]["name"]
                crd_names.append(crd_name)
                # Deleting a CRD deletes every object of its kind, in every namespace: retained by default.
                self.crds.append(
                    k8s.apiextensions.v1.CustomResourceDefinition(
                        f"{name}-{crd_name}",
                        metadata=crd["metadata"],
                        spec=crd["spec"],
                        opts=pulumi.ResourceOptions.merge(
                            child(), pulumi.ResourceOptions(retain_on_delete=s.retain_crds)
                        ),
                    )
                )
        #: What catalog objects (SFService, SFPlan, SFCluster, RegisteredService, ...) must wait for: the CRDs and
        #: the namespace. Not the component itself: that would wait for the Deployments to become Available
        #: (pulumi-kubernetes awaits them) before a single plan is created.
        self.catalog_prerequisites: list[pulumi.Resource] = [*in_namespace, *self.crds]

        # The facts opbroker acts on (status, its labels and annotations, placement, admin requests) are kept by
        # the API server: only the controller's and the broker's accounts may write them (issue 42).
        self.admission_policies: list[pulumi.CustomResource] = []
        for role, manifest in admission.manifests(ns):
            policy_kind = (
                k8s.admissionregistration.v1.ValidatingAdmissionPolicy
                if manifest["kind"] == "ValidatingAdmissionPolicy"
                else k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding
            )
            self.admission_policies.append(
                policy_kind(
                    f"{name}-{role}",
                    metadata=manifest["metadata"],
                    spec=manifest["spec"],
                    opts=child(*self.crds, *self.admission_policies),
                )
            )

        # The controller's objects come from one pure source (opbroker.api.controllerinstall), which the master
        # also applies into sister clusters; each is wrapped here in its typed resource, with its dependencies.
        objects = dict(controller_objects(controller_spec(s)))

        def rbac_child(cls: Any, resource_name: str, role: str, *depends_on: pulumi.Resource) -> pulumi.CustomResource:
            body = {k: v for k, v in objects[role].items() if k not in ("apiVersion", "kind")}
            if "roleRef" in body:
                body["role_ref"] = body.pop("roleRef")
            return cls(resource_name, **body, opts=child(*depends_on))  # type: ignore[no-any-return]

        controller_sa = rbac_child(
            k8s.core.v1.ServiceAccount, f"{name}-controller", "controller-account", *in_namespace
        )
        broker_sa = k8s.core.v1.ServiceAccount(
            f"{name}-broker", metadata=meta(names.broker, "broker"), opts=child(*in_namespace)
        )
        controller_role = rbac_child(k8s.rbac.v1.ClusterRole, f"{name}-controller", "controller-cluster-role")
        # The default plan account: what plans that name no account of their own act as (issue 24).
        plan_sa = rbac_child(k8s.core.v1.ServiceAccount, f"{name}-plans", "plans-account", *in_namespace)
        plan_role = rbac_child(k8s.rbac.v1.ClusterRole, f"{name}-plans", "plans-cluster-role")
        # Bound per namespace (issue 42): here, and in each onboarded namespace (below); cluster-wide only the
        # cluster-scoped kinds, when there are any.
        rbac_child(k8s.rbac.v1.RoleBinding, f"{name}-plans", "plans-role-binding", plan_role, plan_sa, *in_namespace)
        if "plans-cluster-scoped-role" in objects:
            scoped = rbac_child(k8s.rbac.v1.ClusterRole, f"{name}-plans-cluster", "plans-cluster-scoped-role")
            rbac_child(
                k8s.rbac.v1.ClusterRoleBinding,
                f"{name}-plans-cluster",
                "plans-cluster-scoped-role-binding",
                scoped,
                plan_sa,
            )
        # The namespace writer's ClusterRole (always: a namespace onboarded later, by a NamespaceOnboarding of a
        # team's program or ``opbroker namespace onboard``, is bound to it), then each of ``tenant_namespaces``
        # onboarded by the component of its own (its children keep the URNs they had as this component's).
        writer_role = rbac_child(
            k8s.rbac.v1.ClusterRole, f"{name}-namespace-writer-cluster-role", "namespace-writer-cluster-role"
        )
        for tenant in s.tenant_namespaces:
            NamespaceOnboarding(
                f"{name}-tenant-{tenant}",
                {"namespace": tenant, "control_plane": ns, "labels": dict(s.labels)},
                opts=child(writer_role, plan_role),
            )
        controller_binding = rbac_child(
            k8s.rbac.v1.ClusterRoleBinding,
            f"{name}-controller",
            "controller-cluster-role-binding",
            controller_role,
            controller_sa,
        )
        controller_needs: list[pulumi.Resource] = [controller_binding]
        if "onboarder-account" in objects:  # ``tenant_namespace_selector``: the account the controller onboards as
            onboarder_sa = rbac_child(
                k8s.core.v1.ServiceAccount, f"{name}-onboarder", "onboarder-account", *in_namespace
            )
            onboarder_role = rbac_child(k8s.rbac.v1.ClusterRole, f"{name}-onboarder", "onboarder-cluster-role")
            controller_needs.append(
                rbac_child(
                    k8s.rbac.v1.ClusterRoleBinding,
                    f"{name}-onboarder",
                    "onboarder-cluster-role-binding",
                    onboarder_role,
                    onboarder_sa,
                    writer_role,
                    plan_role,
                )
            )
        for role, suffix in (("leader-election", "leader-election"), ("registries", "registries")):
            namespace_role = rbac_child(
                k8s.rbac.v1.Role, f"{name}-controller-{suffix}", f"controller-{role}-role", *in_namespace
            )
            controller_needs.append(
                rbac_child(
                    k8s.rbac.v1.RoleBinding,
                    f"{name}-controller-{suffix}",
                    f"controller-{role}-role-binding",
                    namespace_role,
                    controller_sa,
                )
            )
        # The admission webhook: its Secret's rights, its Service, and its registration (the CA filled in by the
        # controller, the one right it has on the configuration).
        if s.controller.webhook:
            webhook_role = rbac_child(
                k8s.rbac.v1.Role, f"{name}-controller-webhook", "controller-webhook-role", *in_namespace
            )
            controller_needs.append(
                rbac_child(
                    k8s.rbac.v1.RoleBinding,
                    f"{name}-controller-webhook",
                    "controller-webhook-role-binding",
                    webhook_role,
                    controller_sa,
                )
            )
            service = objects["controller-webhook-service"]
            self.webhook_service: k8s.core.v1.Service | None = k8s.core.v1.Service(
                f"{name}-controller-webhook",
                metadata=service["metadata"],
                spec=service["spec"],
                opts=child(*in_namespace),
            )
            registration = objects["webhook-configuration"]
            self.webhook_configuration: k8s.admissionregistration.v1.ValidatingWebhookConfiguration | None = (
                k8s.admissionregistration.v1.ValidatingWebhookConfiguration(
                    f"{name}-webhook",
                    metadata=registration["metadata"],
                    webhooks=registration["webhooks"],
                    opts=child(self.webhook_service, *self.crds),
                )
            )
            controller_needs.append(self.webhook_configuration)
        else:
            self.webhook_service = None
            self.webhook_configuration = None

        broker_role = k8s.rbac.v1.Role(
            f"{name}-broker",
            metadata=meta(names.broker, "broker"),
            rules=[r.to_manifest() for r in rbac.broker_rules(request_rules=not s.broker.context_namespaces)],
            opts=child(*in_namespace),
        )
        broker_binding = k8s.rbac.v1.RoleBinding(
            f"{name}-broker",
            metadata=meta(names.broker, "broker"),
            role_ref=role_ref("Role", names.broker),
            subjects=[{"kind": "ServiceAccount", "name": names.broker, "namespace": ns}],
            opts=child(broker_role, broker_sa),
        )
        broker_grants: list[pulumi.Resource] = [broker_binding]
        broker_cluster_rules = rbac.broker_cluster_rules() if s.broker.context_namespaces else []
        if s.broker.allowed_namespace_selector is not None:  # it reads a Namespace's labels to match them
            broker_cluster_rules.append(rbac.Rule(("",), ("namespaces",), ("get",)))
        if broker_cluster_rules:
            broker_cluster_role = k8s.rbac.v1.ClusterRole(
                f"{name}-broker",
                metadata=meta(names.broker_cluster_role, "broker", namespaced=False),
                rules=[r.to_manifest() for r in broker_cluster_rules],
                opts=child(),
            )
            broker_grants.append(
                k8s.rbac.v1.ClusterRoleBinding(
                    f"{name}-broker",
                    metadata=meta(names.broker_cluster_role, "broker", namespaced=False),
                    role_ref=role_ref("ClusterRole", names.broker_cluster_role),
                    subjects=[{"kind": "ServiceAccount", "name": names.broker, "namespace": ns}],
                    opts=child(broker_cluster_role, broker_sa),
                )
            )

        # The broker's basic-auth credentials: given, or generated (never in plain text in the state).
        given_password = (args.get("broker") or {}).get("password")
        if given_password is not None:
            password: pulumi.Output[str] = pulumi.Output.secret(given_password)
        else:
            generated = pulumi_random.RandomPassword(f"{name}-broker-password", length=32, special=False, opts=child())
            password = pulumi.Output.secret(generated.result)
        credentials = k8s.core.v1.Secret(
            f"{name}-broker-credentials",
            metadata=meta(names.broker_credentials, "broker"),
            type="kubernetes.io/basic-auth",
            string_data={USERNAME_KEY: s.broker.username, PASSWORD_KEY: password},
            opts=child(*in_namespace),
        )

        # The controller: active-passive, leader election through a Lease — or sharded, one Lease per shard and the
        # pods a StatefulSet's (ordinal modulo the shard count), governed by a headless Service. ``controller`` is
        # the Deployment or the StatefulSet (``opbroker-controller`` either way): what a catalog's ``depends_on``
        # names so that ``destroy`` removes the controller after the catalog.
        self.controller: k8s.apps.v1.Deployment | k8s.apps.v1.StatefulSet
        if "controller-deployment" in objects:
            deployment = objects["controller-deployment"]
            self.controller = k8s.apps.v1.Deployment(
                f"{name}-controller",
                metadata=deployment["metadata"],
                spec=deployment["spec"],
                opts=child(*self.crds, *controller_needs),
            )
        else:
            headless = objects["controller-headless-service"]
            governing = k8s.core.v1.Service(
                f"{name}-controller",
                metadata=headless["metadata"],
                spec=headless["spec"],
                opts=child(*in_namespace),
            )
            stateful = objects["controller-statefulset"]
            self.controller = k8s.apps.v1.StatefulSet(
                f"{name}-controller",
                metadata=stateful["metadata"],
                spec=stateful["spec"],
                opts=child(*self.crds, *controller_needs, governing),
            )

        # The broker: active-active behind a Service.
        secret_env = [
            {
                "name": "OPBROKER_BROKER_USERNAME",
                "valueFrom": {"secretKeyRef": {"name": names.broker_credentials, "key": USERNAME_KEY}},
            },
            {
                "name": "OPBROKER_BROKER_PASSWORD",
                "valueFrom": {"secretKeyRef": {"name": names.broker_credentials, "key": PASSWORD_KEY}},
            },
        ]
        broker_spec: dict[str, Any] = {
            "selector": {"matchLabels": selector_labels("broker")},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "template": pod_template(
                s,
                component="broker",
                service_account=names.broker,
                image=s.broker.image or s.image,
                command=broker_command(
                    ns, s.broker.flags() + controllerinstall.broker_shard_flags(s.controller.shards)
                ),
                env=[*downward_env(), *secret_env],
                ports=[
                    {"name": "http", "containerPort": PORT, "protocol": "TCP"},
                    {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
                ],
                probes=broker_probes(),
                resources_=s.broker.resources,
            ),
        }
        if s.broker.autoscaling is None:
            # With an autoscaler the replica count is the HPA's: setting it here would fight it on every up.
            broker_spec["replicas"] = s.broker.replicas
        self.broker = k8s.apps.v1.Deployment(
            f"{name}-broker",
            metadata=deployment_meta(names.broker, "broker"),
            spec=broker_spec,
            opts=child(*self.crds, *broker_grants, credentials),
        )
        self.broker_service = k8s.core.v1.Service(
            f"{name}-broker",
            # pulumi-kubernetes awaits a Service until its selector finds ready pods: like the Deployments.
            metadata=deployment_meta(names.broker, "broker"),
            spec={
                "type": s.broker.service_type,
                "selector": selector_labels("broker"),
                "ports": [{"name": "http", "port": PORT, "targetPort": "http", "protocol": "TCP"}],
            },
            opts=child(*in_namespace),
        )
        budget = objects["controller-disruption-budget"]
        k8s.policy.v1.PodDisruptionBudget(
            f"{name}-controller", metadata=budget["metadata"], spec=budget["spec"], opts=child(*in_namespace)
        )
        k8s.policy.v1.PodDisruptionBudget(
            f"{name}-broker",
            metadata=meta(names.broker, "broker"),
            spec={"maxUnavailable": 1, "selector": {"matchLabels": selector_labels("broker")}},
            opts=child(*in_namespace),
        )
        if s.broker.autoscaling is not None:
            scaling = s.broker.autoscaling
            k8s.autoscaling.v2.HorizontalPodAutoscaler(
                f"{name}-broker",
                metadata=meta(names.broker, "broker"),
                spec={
                    "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": names.broker},
                    "minReplicas": scaling.min_replicas,
                    "maxReplicas": scaling.max_replicas,
                    "metrics": [
                        {
                            "type": "Resource",
                            "resource": {
                                "name": "cpu",
                                "target": {"type": "Utilization", "averageUtilization": scaling.target_cpu_utilization},
                            },
                        }
                    ],
                },
                opts=child(self.broker),
            )

        anchor = self.namespace_resource or controller_sa
        # Resolves once the namespace and the CRDs exist: what a catalog object needs before it can be created.
        self.namespace = pulumi.Output.all(anchor.id, *(crd.id for crd in self.crds)).apply(lambda _: ns)
        self.crd_names = pulumi.Output.all(*(crd.id for crd in self.crds)).apply(lambda _: list(crd_names))
        self.broker_url = resources.name_of(self.broker_service, f"http://{names.broker}.{ns}.svc:{PORT}")
        self.broker_username = resources.name_of(credentials, s.broker.username)
        self.broker_password = pulumi.Output.secret(password)
        self.broker_credentials_secret = resources.name_of(credentials, names.broker_credentials)
        self.register_outputs(
            {
                "namespace": self.namespace,
                "crd_names": self.crd_names,
                "broker_url": self.broker_url,
                "broker_username": self.broker_username,
                "broker_password": self.broker_password,
                "broker_credentials_secret": self.broker_credentials_secret,
            }
        )
