"""``SFCluster``: a cluster instances can be scheduled onto, optionally with the kubeconfig Secret it points to.

The kubeconfig is the one input that is *not* plain: it is typically a secret Output (from config or from
the resource that created the cluster). It goes into a Secret, never into the custom resource.

No ``from __future__ import annotations`` here: the component provider reads these annotations at run time.
"""

from typing import Any, NotRequired, TypedDict

import pulumi
import pulumi_kubernetes as k8s

from opbroker.api import SFCluster as SFClusterModel
from opbroker.components import resources

CLUSTER_TYPE = "opbroker:index:SFCluster"
#: Key of the kubeconfig in the Secret named by ``secretRef`` (Service Fabrik's convention).
KUBECONFIG_KEY = "kubeconfig"


class SFClusterArgs(TypedDict):
    """A Kubernetes cluster that service instances can be scheduled onto."""

    cluster_id: str
    """Name of the SFCluster object; ``"1"`` is the master cluster when it also provisions."""
    secret_ref: NotRequired[str]
    """Name of the Secret (key ``kubeconfig``) in the same namespace; defaults to ``<cluster_id>-kubeconfig``."""
    kubeconfig: NotRequired[pulumi.Input[str]]
    """Kubeconfig of the cluster. When given, the component creates the Secret ``secret_ref`` holding it
    (as a secret); when omitted, that Secret must exist already."""
    total_capacity: NotRequired[dict[str, str]]
    """Capacity declared for the cluster (``cpu``, ``memory`` quantities), used where nodes cannot be read."""
    scheduling_limit_percentage: NotRequired[int]
    """Capacity-aware scheduling keeps requests below this share of allocatable (0-100)."""
    namespace: NotRequired[pulumi.Input[str]]
    """Namespace of the control plane; defaults to ``opbroker``.
    Pass the ControlPlane's ``namespace`` output to wait for its CRDs and namespace (not its pods)."""
    labels: NotRequired[dict[str, str]]
    """Labels on the object (label-selector scheduling selects clusters by them)."""
    annotations: NotRequired[dict[str, str]]
    """Extra annotations on the object."""
    wait_for_ready: NotRequired[bool]
    """Wait until the controller reports the cluster Ready (reachable) (``pulumi.com/waitFor``). Only a
    multi-cluster controller (ControlPlane ``controller.multicluster: true``) reports on SFClusters; with a
    single-cluster controller this would wait until the provider's timeout."""


def cluster_model(name: str, args: SFClusterArgs) -> SFClusterModel:
    """The validated SFCluster for ``args``, or InvalidArgsError naming each field."""
    resources.require_plain("SFCluster", name, args, except_keys=("kubeconfig",))
    cluster_id = str(args.get("cluster_id") or "")
    if not cluster_id:
        raise resources.InvalidArgsError("SFCluster", name, [("cluster_id", "is required")])
    object_name = resources.object_name("SFCluster", name, cluster_id, cluster_id, field="cluster_id")
    spec = {
        "secret_ref": args.get("secret_ref") or f"{object_name}-kubeconfig",
        "total_capacity": args.get("total_capacity"),
        "scheduling_limit_percentage": args.get("scheduling_limit_percentage"),
    }
    meta = resources.metadata(
        args, name=object_name, component_type=CLUSTER_TYPE, wait_for_ready=bool(args.get("wait_for_ready"))
    )
    spec = {k: v for k, v in spec.items() if v is not None}
    model = resources.validate(SFClusterModel, "SFCluster", name, {"metadata": meta, "spec": spec})
    assert isinstance(model, SFClusterModel)
    return model


class SFCluster(pulumi.ComponentResource):
    """A cluster for scheduling (an ``SFCluster`` custom resource), plus its kubeconfig Secret when given."""

    object_name: pulumi.Output[str]
    """Name of the SFCluster object (the cluster id)."""
    namespace: pulumi.Output[str]
    """Namespace of the SFCluster object."""
    secret_name: pulumi.Output[str]
    """Name of the kubeconfig Secret the cluster points at."""

    def __init__(self, name: str, args: SFClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        model = cluster_model(name, args)
        super().__init__(CLUSTER_TYPE, name, None, opts)
        given_namespace = args.get("namespace")
        namespace: Any = given_namespace if resources.is_output(given_namespace) else str(model.metadata.namespace)
        waits_for: list[pulumi.Resource] = []
        self.secret: k8s.core.v1.Secret | None = None
        kubeconfig = args.get("kubeconfig")
        if kubeconfig is not None:
            self.secret = k8s.core.v1.Secret(
                f"{name}-kubeconfig",
                metadata={
                    "name": model.spec.secret_ref,
                    "namespace": namespace,
                    "labels": {resources.LABEL_COMPONENT: "SFCluster"},
                },
                type="Opaque",
                string_data={KUBECONFIG_KEY: pulumi.Output.secret(kubeconfig)},
                opts=resources.child_options(self, opts),
            )
            waits_for.append(self.secret)
        self.resource = resources.custom_resource(self, name, model, opts, *waits_for, namespace=args.get("namespace"))
        self.object_name = resources.name_of(self.resource, str(model.metadata.name))
        self.namespace = resources.namespace_of(self.resource, model, args.get("namespace"))
        self.secret_name = resources.name_of(self.secret or self.resource, model.spec.secret_ref)
        self.register_outputs(
            {"object_name": self.object_name, "namespace": self.namespace, "secret_name": self.secret_name}
        )
