"""The controller's in-cluster objects as plain data: the one source of the ``ControlPlane`` component's controller
part and of the master's installer for sister clusters (issue 29). Pure: no Pulumi, no Kubernetes client.

:func:`controller_objects` returns, in creation order, every object the controller needs in a cluster — its
ServiceAccount, ClusterRole and Roles with their bindings (rules from :mod:`opbroker.api.rbac`), the default plan
account, the admission webhook's Service and registration, the Deployment (command line from the settings) — or,
sharded (``shards`` > 1, issue 46), a StatefulSet and its headless Service — and its disruption budget — each keyed
by the role it plays (``controller-deployment``, ``controller-statefulset``), so the component wraps each in its
typed Pulumi resource and the installer server-side-applies them as they are. Names, labels and pod specs are built
here too, and the broker's pods share the pod builder.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opbroker.api import rbac, webhooks
from opbroker.api.conventions import DEFAULT_PLAN_SERVICE_ACCOUNT

#: Port of the Prometheus metrics of controller and broker (and of the controller's health checks).
METRICS_PORT = 9090
#: Container port of the controller's admission webhook (HTTPS; the Service listens on ``webhooks.SERVICE_PORT``).
WEBHOOK_PORT = 9443
ZONE_KEY = "topology.kubernetes.io/zone"
HOST_KEY = "kubernetes.io/hostname"
#: Non-root user the containers run as (the conventional "nonroot" uid of distroless images).
RUN_AS_USER = 65532
#: pulumi-kubernetes: create or update the object without waiting for it to become ready.
SKIP_AWAIT_ANNOTATION = "pulumi.com/skipAwait"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
#: The controller's default compute resources (requests 100m CPU / 128Mi, limit 512Mi).
CONTROLLER_RESOURCES: Mapping[str, Mapping[str, str]] = {
    "requests": {"cpu": "100m", "memory": "128Mi"},
    "limits": {"memory": "512Mi"},
}


class Names:
    """Kubernetes names of the control plane's objects. Cluster-scoped ones carry the namespace, so two
    control planes in one cluster do not collide."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.controller = "opbroker-controller"
        self.broker = "opbroker-broker"
        self.broker_credentials = "opbroker-broker-credentials"
        self.leader_election = "opbroker-controller-leader-election"
        self.registries = "opbroker-controller-registries"
        self.controller_cluster_role = f"opbroker:{namespace}:controller"
        self.plan_account = DEFAULT_PLAN_SERVICE_ACCOUNT
        self.plan_cluster_role = rbac.plan_role_name(namespace)
        """The default plan account's ClusterRole, bound per namespace (RoleBindings of the same name)."""
        self.plan_cluster_scoped_role = rbac.plan_cluster_role_name(namespace)
        """Its cluster-scoped kinds' ClusterRole, bound cluster-wide (only with ``cluster_operator_rules``)."""
        self.namespace_writer = rbac.namespace_writer_name(namespace)
        """What onboarded namespaces' ``opbroker`` accounts are bound to (:func:`rbac.tenant_write_rules`)."""
        self.broker_cluster_role = f"opbroker:{namespace}:broker"
        self.onboarder = rbac.ONBOARDER_ACCOUNT
        self.onboarder_cluster_role = f"opbroker:{namespace}:onboarder"
        """What the controller onboards namespaces as (only with ``onboard_namespace_selector``)."""
        self.webhook = "opbroker-controller-webhook"
        """The webhook's Service, Role and RoleBinding."""
        self.webhook_configuration = f"opbroker-servicecatalog-{namespace}"
        self.webhook_secret = webhooks.SECRET


def webhook_flags(names: Names) -> list[str]:
    """The ``opbroker controller run`` flags that serve the webhook behind the ControlPlane's Service."""
    return [
        "--webhook-port", str(WEBHOOK_PORT),
        "--webhook-service", names.webhook,
        "--webhook-configuration", names.webhook_configuration,
        "--webhook-secret", names.webhook_secret,
    ]  # fmt: skip


def selector_labels(component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "opbroker", "app.kubernetes.io/component": component}


def common_labels(component: str, extra: Mapping[str, str], managed_by: str = "pulumi") -> dict[str, str]:
    return {
        **extra,
        **selector_labels(component),
        "app.kubernetes.io/part-of": "opbroker",
        MANAGED_BY_LABEL: managed_by,
    }


def topology_spread(component: str, when_unsatisfiable: str) -> list[dict[str, Any]]:
    """Spread replicas over zones (as configured) and, always softly, over nodes."""
    selector = {"matchLabels": selector_labels(component)}
    return [
        {"maxSkew": 1, "topologyKey": ZONE_KEY, "whenUnsatisfiable": when_unsatisfiable, "labelSelector": selector},
        {"maxSkew": 1, "topologyKey": HOST_KEY, "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": selector},
    ]


def controller_probes() -> dict[str, Any]:
    """The controller's health endpoints on its metrics port (``opbroker.controller.runtime.health``). Liveness fails
    once the controller's loop has stopped or hangs; readiness also waits for the API server to serve
    the watched resources at start. A standby that does not lead is live and ready (it must not count against
    the disruption budget); the startup wait is bounded by the process itself (``--api-wait-seconds``)."""
    return {
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "metrics"},
            "initialDelaySeconds": 10,
            "periodSeconds": 10,
            "timeoutSeconds": 2,
            "failureThreshold": 3,
        },
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": "metrics"},
            "periodSeconds": 5,
            "timeoutSeconds": 2,
            "failureThreshold": 3,
        },
    }


def downward_env() -> list[dict[str, Any]]:
    return [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    ]


@dataclass(frozen=True)
class PodSettings:
    """What every pod of the control plane shares: pulling, spreading, extra labels."""

    image_pull_policy: str = "IfNotPresent"
    image_pull_secrets: tuple[str, ...] = ()
    zone_spread: str = "ScheduleAnyway"
    labels: Mapping[str, str] = field(default_factory=dict)
    managed_by: str = "pulumi"


def pod_template(
    pods: PodSettings,
    *,
    component: str,
    service_account: str,
    image: str,
    command: list[str],
    env: list[dict[str, Any]],
    ports: list[dict[str, Any]],
    probes: dict[str, Any],
    resources: dict[str, Any],
) -> dict[str, Any]:
    """A hardened pod: non-root, read-only root filesystem, no privilege escalation, spread over zones."""
    container = {
        "name": component,
        "image": image,
        "imagePullPolicy": pods.image_pull_policy,
        "command": command,
        "env": env,
        "ports": ports,
        **probes,
        "resources": resources,
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    spec: dict[str, Any] = {
        "serviceAccountName": service_account,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_USER,
            "runAsGroup": RUN_AS_USER,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "topologySpreadConstraints": topology_spread(component, pods.zone_spread),
        "containers": [container],
        "volumes": [{"name": "tmp", "emptyDir": {}}],
    }
    if pods.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": n} for n in pods.image_pull_secrets]
    return {"metadata": {"labels": common_labels(component, pods.labels, pods.managed_by)}, "spec": spec}


def role_ref(kind: str, name: str) -> dict[str, str]:
    return {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name}


def controller_shard_flags(shards: int) -> list[str]:
    """The ``opbroker controller run`` flags of a controller split into ``shards`` shards: none unsharded; else the
    count and ``--shard-from-hostname``, each pod taking its StatefulSet ordinal (its hostname's ``-<n>``) modulo
    the count as its shard, so ``shards * replicas`` pods give each shard ``replicas`` (one leads its Lease)."""
    return [] if shards == 1 else ["--shards", str(shards), "--shard-from-hostname"]


def broker_shard_flags(shards: int) -> list[str]:
    """The ``opbroker broker serve`` flags for a controller of ``shards`` shards: the broker labels what it creates
    with its shard, so it must count as the controller does; none unsharded."""
    return [] if shards == 1 else ["--shards", str(shards)]


def controller_command(namespace: str, flags: Sequence[str] = ()) -> list[str]:
    command = ["opbroker", "controller", "run", "--namespace", namespace, "--metrics-port", str(METRICS_PORT)]
    return command + list(flags)


@dataclass(frozen=True)
class ControllerSpec:
    """What decides the controller's objects: the ControlPlane's settings, or an SFCluster's ``spec.controller``."""

    namespace: str
    image: str
    replicas: int = 2
    """Pods per shard (one leads, the others stand by): the StatefulSet of a sharded controller has
    ``shards * replicas``."""
    shards: int = 1
    """Shards the controller is split into (1..``rbac.MAX_SHARDS``): 1 is a Deployment campaigning for one Lease;
    more is a StatefulSet whose pods campaign for their shard's Lease (``rbac.shard_leases``)."""
    resources: Mapping[str, Mapping[str, str]] = field(default_factory=lambda: dict(CONTROLLER_RESOURCES))
    operator_rules: tuple[Mapping[str, Any], ...] = ()
    """The operator kinds plans render, granted to the default plan account per namespace."""
    cluster_operator_rules: tuple[Mapping[str, Any], ...] = ()
    """Rules of cluster-scoped kinds plans render, granted to the default plan account cluster-wide."""
    plan_accounts: tuple[str, ...] = ()
    """Further plan accounts' names (SFPlans' ``serviceAccountName``) the controller may impersonate."""
    tenant_namespaces: tuple[str, ...] = ()
    """Consumer namespaces to onboard: their ``opbroker`` account and the default plan account's rights there."""
    onboard_namespace_selector: str | None = None
    """A label selector: the controller onboards the namespaces whose labels match (as the onboarder account)."""
    single_tenant: bool = False
    webhook: bool = True
    flags: tuple[str, ...] = ()
    """``opbroker controller run`` flags besides namespace, metrics port and webhook."""
    pods: PodSettings = PodSettings()
    await_deployments: bool = True
    """False: the Deployment (or StatefulSet) and the webhook Service carry ``pulumi.com/skipAwait`` (the
    component's option)."""

    def __post_init__(self) -> None:
        rbac.shard_leases(shards=self.shards)  # ValueError naming the bound: refused before any object is built


def controller_objects(spec: ControllerSpec) -> list[tuple[str, dict[str, Any]]]:
    """(role, manifest) of every object the controller needs in a cluster, in creation order (accounts and
    roles before their bindings, everything before the Deployment or StatefulSet). The namespace and the CRDs are
    not among them: the ControlPlane creates those itself, the installer first (:func:`prerequisites`)."""
    names = Names(spec.namespace)
    ns = spec.namespace
    pods = spec.pods

    def meta(name: str, component: str, namespaced: bool = True) -> dict[str, Any]:
        m: dict[str, Any] = {"name": name, "labels": common_labels(component, pods.labels, pods.managed_by)}
        if namespaced:
            m["namespace"] = ns
        return m

    def awaited_meta(name: str, component: str) -> dict[str, Any]:
        m = meta(name, component)
        if not spec.await_deployments:
            m["annotations"] = {SKIP_AWAIT_ANNOTATION: "true"}
        return m

    def rbac_object(kind: str, name: str, component: str, **body: Any) -> dict[str, Any]:
        namespaced = kind in ("Role", "RoleBinding")
        return {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": kind,
            "metadata": meta(name, component, namespaced),
            **body,
        }

    def meta_labels(component: str) -> dict[str, Any]:
        return {"labels": common_labels(component, pods.labels, pods.managed_by)}

    def account(name: str, component: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(name, component)}

    def subjects(account_name: str) -> list[dict[str, str]]:
        return [{"kind": "ServiceAccount", "name": account_name, "namespace": ns}]

    def rules(found: Sequence[rbac.Rule]) -> list[dict[str, Any]]:
        return [r.to_manifest() for r in found]

    operator_rules = [dict(rule) for rule in spec.operator_rules]
    cluster_operator_rules = [dict(rule) for rule in spec.cluster_operator_rules]
    objects: list[tuple[str, dict[str, Any]]] = [
        ("controller-account", account(names.controller, "controller")),
        (
            "controller-cluster-role",
            rbac_object(
                "ClusterRole",
                names.controller_cluster_role,
                "controller",
                rules=rules(
                    rbac.controller_cluster_rules(
                        operator_rules,
                        single_tenant=spec.single_tenant,
                        webhook_configuration=names.webhook_configuration if spec.webhook else None,
                        cluster_operator_rules=cluster_operator_rules,
                        plan_accounts=spec.plan_accounts,
                        onboards=spec.onboard_namespace_selector is not None,
                    )
                ),
            ),
        ),
        # The default plan account: what plans that name no account of their own act as (issue 24).
        ("plans-account", account(names.plan_account, "plans")),
        (
            "plans-cluster-role",
            rbac_object(
                "ClusterRole", names.plan_cluster_role, "plans", rules=rules(rbac.plan_account_rules(operator_rules))
            ),
        ),
        # Bound where plans act, never cluster-wide: this namespace here, each onboarded one below (issue 42).
        (
            "plans-role-binding",
            rbac_object(
                "RoleBinding",
                names.plan_cluster_role,
                "plans",
                roleRef=role_ref("ClusterRole", names.plan_cluster_role),
                subjects=subjects(names.plan_account),
            ),
        ),
        *plan_cluster_scoped(spec, names, rbac_object, subjects),
        (
            "controller-cluster-role-binding",
            rbac_object(
                "ClusterRoleBinding",
                names.controller_cluster_role,
                "controller",
                roleRef=role_ref("ClusterRole", names.controller_cluster_role),
                subjects=subjects(names.controller),
            ),
        ),
    ]
    objects += onboarded(spec, names, lambda m: {**m, "metadata": {**m["metadata"], **meta_labels("namespaces")}})
    if spec.onboard_namespace_selector is not None:
        objects += [
            ("onboarder-account", account(names.onboarder, "controller")),
            (
                "onboarder-cluster-role",
                rbac_object(
                    "ClusterRole",
                    names.onboarder_cluster_role,
                    "controller",
                    rules=rules(rbac.onboarder_rules(ns, (names.plan_account,))),
                ),
            ),
            (
                "onboarder-cluster-role-binding",
                rbac_object(
                    "ClusterRoleBinding",
                    names.onboarder_cluster_role,
                    "controller",
                    roleRef=role_ref("ClusterRole", names.onboarder_cluster_role),
                    subjects=subjects(names.onboarder),
                ),
            ),
        ]
    for role, name, found in (
        ("leader-election", names.leader_election, rbac.controller_namespace_rules(shards=spec.shards)),
        # The registries of instances and bindings (issue 29), kept here where no consumer can read them.
        ("registries", names.registries, rbac.registry_rules()),
        *((("webhook", names.webhook, rbac.webhook_namespace_rules(names.webhook_secret)),) if spec.webhook else ()),
    ):
        objects.append((f"controller-{role}-role", rbac_object("Role", name, "controller", rules=rules(found))))
        objects.append(
            (
                f"controller-{role}-role-binding",
                rbac_object(
                    "RoleBinding",
                    name,
                    "controller",
                    roleRef=role_ref("Role", name),
                    subjects=subjects(names.controller),
                ),
            )
        )
    ports: list[dict[str, Any]] = [{"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}]
    flags = list(spec.flags) + controller_shard_flags(spec.shards)
    if spec.onboard_namespace_selector is not None:
        flags += ["--onboard-namespace-selector", spec.onboard_namespace_selector]
    if spec.webhook:
        objects.append(
            (
                "controller-webhook-service",
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": awaited_meta(names.webhook, "controller"),
                    "spec": {
                        "type": "ClusterIP",
                        "selector": selector_labels("controller"),
                        "ports": [
                            {
                                "name": "webhook",
                                "port": webhooks.SERVICE_PORT,
                                "targetPort": "webhook",
                                "protocol": "TCP",
                            }
                        ],
                    },
                },
            )
        )
        registration = webhooks.configuration(
            b"", service=(ns, names.webhook, webhooks.SERVICE_PORT), name=names.webhook_configuration
        )
        objects.append(
            (
                "webhook-configuration",
                {
                    "apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": "ValidatingWebhookConfiguration",
                    "metadata": meta(names.webhook_configuration, "controller", namespaced=False),
                    "webhooks": registration["webhooks"],
                },
            )
        )
        ports.append({"name": "webhook", "containerPort": WEBHOOK_PORT, "protocol": "TCP"})
        flags += webhook_flags(names)
    template = pod_template(
        pods,
        component="controller",
        service_account=names.controller,
        image=spec.image,
        command=controller_command(ns, flags),
        env=downward_env(),
        ports=ports,
        probes=controller_probes(),
        resources={k: dict(v) for k, v in spec.resources.items()},
    )
    if spec.shards == 1:
        objects.append(
            (
                "controller-deployment",
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": awaited_meta(names.controller, "controller"),
                    "spec": {
                        "replicas": spec.replicas,
                        "selector": {"matchLabels": selector_labels("controller")},
                        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
                        "template": template,
                    },
                },
            )
        )
    else:
        # Sharded (issue 46): a StatefulSet, so each pod has a stable ordinal in its hostname
        # (``opbroker-controller-<n>``) that ``--shard-from-hostname`` turns into shard ``n mod shards`` — ``shards *
        # replicas`` pods give every shard ``replicas`` — and the headless Service that governs it (``serviceName``:
        # the API server needs none, but the OpenAPI schema before Kubernetes 1.33, which kubectl and Helm validate
        # against, requires the field; headless, so pulumi-kubernetes does not wait for its endpoints). ``Parallel``:
        # the shards start together, not one pod after the other; updates still roll one pod at a time, highest
        # ordinal first, so with ``replicas`` >= 2 no shard is ever without a pod. No volume claims: no state.
        objects.append(
            (
                "controller-headless-service",
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": meta(names.controller, "controller"),
                    "spec": {"clusterIP": "None", "selector": selector_labels("controller")},
                },
            )
        )
        objects.append(
            (
                "controller-statefulset",
                {
                    "apiVersion": "apps/v1",
                    "kind": "StatefulSet",
                    "metadata": awaited_meta(names.controller, "controller"),
                    "spec": {
                        "replicas": spec.shards * spec.replicas,
                        "serviceName": names.controller,
                        "podManagementPolicy": "Parallel",
                        "selector": {"matchLabels": selector_labels("controller")},
                        "updateStrategy": {"type": "RollingUpdate"},
                        "template": template,
                    },
                },
            )
        )
    objects.append(
        (
            "controller-disruption-budget",
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": meta(names.controller, "controller"),
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_labels("controller")}},
            },
        )
    )
    return objects


def plan_cluster_scoped(
    spec: ControllerSpec, names: Names, rbac_object: Callable[..., dict[str, Any]], subjects: Callable[[str], Any]
) -> list[tuple[str, dict[str, Any]]]:
    """The default plan account's cluster-scoped kinds (``cluster_operator_rules``): a ClusterRole and its
    ClusterRoleBinding — none without such rules."""
    if not spec.cluster_operator_rules:
        return []
    rules = [rbac.Rule.from_args(rule).to_manifest() for rule in spec.cluster_operator_rules]
    role = names.plan_cluster_scoped_role
    return [
        ("plans-cluster-scoped-role", rbac_object("ClusterRole", role, "plans", rules=rules)),
        (
            "plans-cluster-scoped-role-binding",
            rbac_object(
                "ClusterRoleBinding",
                role,
                "plans",
                roleRef=role_ref("ClusterRole", role),
                subjects=subjects(names.plan_account),
            ),
        ),
    ]


def onboarding_objects(
    namespace: str,
    control_plane: str,
    plan_accounts: Sequence[str] = (DEFAULT_PLAN_SERVICE_ACCOUNT,),
    *,
    labels: Mapping[str, str] | None = None,
    managed_by: str = "pulumi",
) -> list[tuple[str, dict[str, Any]]]:
    """The onboarding of one consumer ``namespace`` by the control plane in ``control_plane``
    (:func:`rbac.onboarding_manifests`), the one source of the ``NamespaceOnboarding`` component, the ControlPlane's
    ``tenant_namespaces``, ``opbroker namespace onboard`` and ``opbroker dev``: its ``opbroker`` account, that
    account's RoleBinding to the control plane's namespace writer (:attr:`Names.namespace_writer`, which the
    ControlPlane creates) and a RoleBinding per plan account — keyed ``account``, ``writer-binding``,
    ``plans-binding`` (the default plan account) and ``plan-<account>-binding`` (any other)."""
    names = Names(control_plane)
    account, writer_binding, *plan_bindings = rbac.onboarding_manifests(
        namespace, control_plane, plan_accounts, writer=names.namespace_writer
    )
    keys = ["account", "writer-binding"] + [
        "plans-binding" if plan == DEFAULT_PLAN_SERVICE_ACCOUNT else f"plan-{plan}-binding" for plan in plan_accounts
    ]
    stamp = common_labels("namespaces", labels or {}, managed_by)
    return [
        (key, {**manifest, "metadata": {**manifest["metadata"], "labels": stamp}})
        for key, manifest in zip(keys, [account, writer_binding, *plan_bindings], strict=True)
    ]


def namespace_writer(
    control_plane: str, *, labels: Mapping[str, str] | None = None, managed_by: str = "pulumi"
) -> dict[str, Any]:
    """The control plane's namespace writer ClusterRole (:func:`rbac.tenant_write_rules`): what every onboarded
    namespace's ``opbroker`` account is bound to there."""
    writer = rbac.namespace_writer_manifest(Names(control_plane).namespace_writer)
    return {
        **writer,
        "metadata": {**writer["metadata"], "labels": common_labels("namespaces", labels or {}, managed_by)},
    }


def onboarded(
    spec: ControllerSpec, names: Names, labelled: Callable[[dict[str, Any]], dict[str, Any]]
) -> list[tuple[str, dict[str, Any]]]:
    """The namespace writer's ClusterRole — always, so a namespace onboarded later (the ``NamespaceOnboarding``
    component, ``opbroker namespace onboard``) finds it — then the onboarding of each of ``tenant_namespaces``
    (:func:`onboarding_objects`), keyed ``tenant-<namespace>-<key>``."""
    pods = spec.pods
    objects = [("namespace-writer-cluster-role", labelled(rbac.namespace_writer_manifest(names.namespace_writer)))]
    for namespace in spec.tenant_namespaces:
        objects += [
            (f"tenant-{namespace}-{key}", manifest)
            for key, manifest in onboarding_objects(
                namespace, spec.namespace, (names.plan_account,), labels=pods.labels, managed_by=pods.managed_by
            )
        ]
    return objects


def digest(objects: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """A short digest of the objects: what changed when an installation must be applied again."""
    text = json.dumps([o for _, o in objects], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
