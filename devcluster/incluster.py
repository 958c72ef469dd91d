"""opbroker in the cluster, locally: the objects the ``ControlPlane`` component creates, applied to a local
cluster with a node, so the controller and the broker run as pods from the locally built image.

"Exactly the component's objects": ``control_plane_manifests`` renders them with
``opbroker.components.objects`` (the component under Pulumi's mocks), as ``opbroker manifests`` does. Needs the
``pulumi`` extra.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kubernetes import client

from opbroker.controller.runtime.kube import Kube
from opbroker.devcluster.devstack import DEMO_NAMESPACE

Progress = Callable[[str], None]
#: The demo operator's kind: the dev catalog's plans render it, so the controller must be allowed to manage it.
DEMO_OPERATOR_RULE = {
    "api_groups": ["demo.opbroker.io"],
    "resources": ["databases"],
    "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
}


class InClusterError(RuntimeError):
    """The control plane's objects could not be rendered, applied, or did not become available."""


def dev_control_plane_args(image: str, password: str, controller_replicas: int = 2) -> dict[str, Any]:
    """The ControlPlane args ``opbroker dev --in-cluster`` uses: the root stack's, with the local image."""
    return {
        "image": image,
        "image_pull_policy": "IfNotPresent",
        # An autoscaler as production would run one: without a metrics server it holds the broker at its
        # minimum, which is what the node tests check it does.
        "broker": {
            "password": password,
            "autoscaling": {"min_replicas": 2, "max_replicas": 4},
            "allowed_namespaces": [DEMO_NAMESPACE],  # the demo's requests name it in their context
        },
        "controller": {"replicas": controller_replicas, "operator_rules": [DEMO_OPERATOR_RULE]},
        "tenant_namespaces": [DEMO_NAMESPACE],  # onboarded: the plan account writes there, and only there
    }


def control_plane_manifests(args: dict[str, Any]) -> list[dict[str, Any]]:
    """Every Kubernetes object the ControlPlane component creates for ``args``, in creation order
    (:func:`opbroker.components.objects.control_plane_manifests`, which ``opbroker manifests`` prints too)."""
    try:
        from opbroker.components.objects import control_plane_manifests as rendered
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise InClusterError(
            f"rendering the ControlPlane needs the pulumi extra (pip install 'opbroker[pulumi]'): {exc}"
        ) from exc
    return rendered(args)


def apply_all(api: client.ApiClient, manifests: list[dict[str, Any]], progress: Progress) -> None:
    """Server-side apply each manifest in order; CRDs are waited on before anything that may use them."""
    kube = Kube(api)
    extensions = client.ApiextensionsV1Api(api)
    crds = []
    for manifest in manifests:
        kube.apply(manifest, field_manager="opbroker-dev")
        if manifest["kind"] == "CustomResourceDefinition":
            crds.append(manifest["metadata"]["name"])
    deadline = time.monotonic() + 30
    for name in crds:
        while True:
            status = extensions.read_custom_resource_definition(name).status
            conditions = (status.conditions if status is not None else None) or []
            if any(c.type == "Established" and c.status == "True" for c in conditions):
                break
            if time.monotonic() > deadline:
                raise InClusterError(f"CRD {name} not established after 30s")
            time.sleep(0.1)
    progress(f"applied {len(manifests)} objects of the ControlPlane component")


def wait_available(api: client.ApiClient, namespace: str, names: list[str], timeout: float, progress: Progress) -> None:
    """Wait until every Deployment in ``names`` has all its replicas updated and available."""
    apps = client.AppsV1Api(api)
    deadline = time.monotonic() + timeout
    pending = list(names)
    announced = 0.0
    while pending:
        for name in list(pending):
            deployment = apps.read_namespaced_deployment(name, namespace)
            wanted = deployment.spec.replicas or 0
            status = deployment.status or client.V1DeploymentStatus()
            if (status.updated_replicas or 0) >= wanted and (status.available_replicas or 0) >= wanted:
                pending.remove(name)
        if not pending:
            return
        if time.monotonic() > deadline:
            raise InClusterError(
                f"Deployments not available after {timeout:.0f}s: {', '.join(pending)}; "
                f"see `kubectl -n {namespace} get pods` and their logs"
            )
        if time.monotonic() - announced > 10:
            progress(f"waiting for {', '.join(pending)} to become available")
            announced = time.monotonic()
        time.sleep(1)


def broker_service_url(api: client.ApiClient, namespace: str, name: str, port: int) -> str:
    """The broker Service's cluster IP URL (kube-proxy routes it from this machine too)."""
    spec = client.CoreV1Api(api).read_namespaced_service(name, namespace).spec
    if spec is None or not spec.cluster_ip:
        raise InClusterError(f"Service {namespace}/{name} has no cluster IP")
    return f"http://{spec.cluster_ip}:{port}"
