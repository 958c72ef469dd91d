"""The ControlPlane component's Kubernetes objects as plain manifests, without an engine or a cluster.

``control_plane_manifests`` runs the ``ControlPlane`` component under Pulumi's mocks (:mod:`.testing`) and turns
every Kubernetes resource it registers into the manifest pulumi-kubernetes would send, in registration order
(which follows the component's dependencies: namespace and CRDs, then RBAC, then the workloads). One source of
truth for every way opbroker is installed: ``pulumi up`` (the component itself), ``opbroker dev --in-cluster``,
``opbroker manifests`` (kubectl) and the Helm chart ``opbroker manifests --helm-chart`` writes.
"""

from typing import Any

from opbroker.api.controllerinstall import MANAGED_BY_LABEL, Names

#: Where pulumi-kubernetes resource types put the API group and version: ``kubernetes:<group>/<version>:<Kind>``.
_CORE_GROUP = "core"


def manifest_of(resource_type: str, inputs: dict[str, Any]) -> dict[str, Any]:
    """The manifest for one registered pulumi-kubernetes resource (``kubernetes:apps/v1:Deployment``)."""
    _, group_version, kind = resource_type.split(":")
    group, _, version = group_version.partition("/")
    api_version = version if group == _CORE_GROUP else f"{group}/{version}"
    body = {k: v for k, v in inputs.items() if k not in ("apiVersion", "kind")}
    return {"apiVersion": api_version, "kind": kind, **body}


def control_plane_manifests(args: dict[str, Any]) -> list[dict[str, Any]]:
    """Every Kubernetes object the ControlPlane component creates for ``args``, in creation order.

    Raises ``resources.InvalidArgsError`` (naming each field) for args the component refuses. Without
    ``broker.password`` the component generates one with pulumi-random, which the mocks answer with a fixed
    fake: callers that hand the objects to a user must pass a password.
    """
    import pulumi

    from opbroker.components import testing
    from opbroker.components.controlplane import ControlPlane

    with testing.mocked(stack="manifests") as mocks:

        @pulumi.runtime.test  # type: ignore[untyped-decorator]  # pulumi's test decorator is unannotated
        def program() -> Any:
            return ControlPlane("opbroker", args).broker_url  # type: ignore[arg-type]

        program()
    return [
        manifest_of(r.type, r.plain_inputs())
        for r in mocks.registrations
        if r.custom and r.type.startswith("kubernetes:")
    ]


def relabel_managed_by(manifests: list[dict[str, Any]], manager: str) -> list[dict[str, Any]]:
    """The manifests with ``app.kubernetes.io/managed-by`` (the component says ``pulumi``) naming ``manager``,
    on the objects and on their pod templates: what ``kubectl`` or ``Helm`` installs is not managed by Pulumi."""

    def relabel(metadata: dict[str, Any]) -> None:
        labels = metadata.get("labels")
        if isinstance(labels, dict) and MANAGED_BY_LABEL in labels:
            labels[MANAGED_BY_LABEL] = manager

    for manifest in manifests:
        relabel(manifest.get("metadata", {}))
        template = manifest.get("spec", {}).get("template") if isinstance(manifest.get("spec"), dict) else None
        if isinstance(template, dict):
            relabel(template.get("metadata", {}))
    return manifests


def use_credentials_secret(manifests: list[dict[str, Any]], namespace: str, secret: str) -> list[dict[str, Any]]:
    """The manifests with the broker reading its basic-auth credentials (keys ``username`` and ``password``)
    from the Secret ``secret`` the user keeps, instead of the one the component writes (which is left out):
    so that no password needs to be printed into a file or a chart."""
    generated = Names(namespace).broker_credentials
    kept: list[dict[str, Any]] = []
    for manifest in manifests:
        if manifest["kind"] == "Secret" and manifest["metadata"]["name"] == generated:
            continue
        if manifest["kind"] == "Deployment":
            for container in manifest["spec"]["template"]["spec"]["containers"]:
                for variable in container.get("env", []):
                    reference = variable.get("valueFrom", {}).get("secretKeyRef")
                    if reference is not None and reference.get("name") == generated:
                        reference["name"] = secret
        kept.append(manifest)
    return kept
