"""A real local Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager) for development,
tests and the quickstart, built once from Debian's source package and cached outside the repository."""

from opbroker.devcluster.binaries import BuildError, cache_dir, ensure_binaries, find_binaries
from opbroker.devcluster.controlplane import ControlPlane, ControlPlaneError, Status

__all__ = [
    "BuildError",
    "ControlPlane",
    "ControlPlaneError",
    "Status",
    "cache_dir",
    "ensure_binaries",
    "find_binaries",
]
