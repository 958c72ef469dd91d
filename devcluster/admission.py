"""Installing the admission policies that keep opbroker's facts (``opbroker.api.admission``) into a cluster, for
``opbroker dev`` and the tests' control plane. The ControlPlane component creates the same manifests in a stack."""

from __future__ import annotations

from kubernetes import client

from opbroker.api import admission
from opbroker.api.conventions import DEFAULT_NAMESPACE
from opbroker.controller.runtime.kube import Kube


def install_admission(api: client.ApiClient, namespace: str = DEFAULT_NAMESPACE) -> None:
    """Create or update the policies and their bindings for the control plane in ``namespace`` (idempotent).
    The API server enforces a new policy within about a second (its policy informer); callers that must see it
    enforced at once wait with :func:`wait_enforced`."""
    kube = Kube(api)
    for _, manifest in admission.manifests(namespace):
        kube.apply(manifest, field_manager="opbroker-dev")
