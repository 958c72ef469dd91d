"""Where the Kubernetes binaries live, and building them when they are missing.

Kubernetes and etcd are built from their Go modules by ``build.sh`` (once per machine, cached outside
the repository by version and by the fingerprint of the committed wrapper module ``kubebuild/``: its go.mod
and go.sum pin every module, so binaries built from other pins are never taken for these). The control plane
needs etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl; the opt-in node also kubelet,
kube-proxy and the pause binary.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

#: The Kubernetes release the local cluster runs (``k8s.io/kubernetes`` module version).
KUBE_VERSION = "1.37.2"
#: The etcd release (``go.etcd.io/etcd/server/v3`` module version), as that Kubernetes release pins it.
ETCD_VERSION = "3.7.3"
#: The helm release (``helm.sh/helm/v4`` module version) the wrapper module ``helmbuild/`` pins and
#: ``scripts/build-helm.sh`` builds: the tests install opbroker's chart (``opbroker manifests --helm-chart``) with it.
HELM_VERSION = "4.3.2"


class BuildError(RuntimeError):
    """The one-time build of the Kubernetes binaries failed."""


def cache_dir() -> Path:
    """``$OPBROKER_CACHE`` or ``~/.cache/opbroker``: outside the repository, kept across clones."""
    return Path(os.environ.get("OPBROKER_CACHE") or Path.home() / ".cache" / "opbroker")


def kube_module() -> Path:
    """The committed wrapper module Kubernetes and etcd are compiled from (go.mod, go.sum, two Go files)."""
    return Path(str(resources.files("opbroker.devcluster") / "kubebuild"))


@functools.cache
def module_key(module: Path) -> str:
    """The fingerprint of a committed Go wrapper module (or a folder of them), which names its build's cache
    folder: a change of any pin in go.mod or go.sum (or of its Go files) builds anew beside the old binaries.
    The same digest as the build scripts' ``module_key``: sha256 over ``sha256sum``'s lines for the folder's
    go.mod, go.sum and ``*.go`` files, in byte order of their ``./``-relative paths."""
    names = ("go.mod", "go.sum")
    files = sorted(
        "./" + path.relative_to(module).as_posix()
        for path in module.rglob("*")
        if path.is_file() and (path.name in names or path.suffix == ".go")
    )
    lines = "".join(f"{hashlib.sha256((module / name).read_bytes()).hexdigest()}  {name}\n" for name in files)
    return hashlib.sha256(lines.encode()).hexdigest()[:12]


def helm_module() -> Path:
    """The committed wrapper module helm is compiled from (go.mod, go.sum, upstream's main)."""
    return Path(__file__).resolve().parent / "helmbuild"  # used by the tests only: not package data


def helm_binary() -> Path | None:
    """The helm binary ``scripts/build-helm.sh`` built from the committed pins, or None when it was not built on
    this machine (the cache folder is keyed like the script's: version and the module's fingerprint)."""
    path = cache_dir() / f"helm-{HELM_VERSION}-{module_key(helm_module())}" / "bin" / "helm"
    return path if path.is_file() else None


def kube_bin_dir() -> Path:
    return cache_dir() / f"kube-{KUBE_VERSION}-{module_key(kube_module())}" / "bin"


@dataclass(frozen=True)
class Binaries:
    """The control plane's binaries."""

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path


@dataclass(frozen=True)
class NodeBinaries:
    """What a node runs beside containerd and runc (which come from the distribution)."""

    kubelet: Path
    kube_proxy: Path
    pause: Path


def _all_present(found: Binaries | NodeBinaries) -> bool:
    return all(p.is_file() and os.access(p, os.X_OK) for p in vars(found).values())


def find_binaries() -> Binaries | None:
    """The control plane's binaries if all of them are present, else None."""
    bin_dir = kube_bin_dir()
    found = Binaries(
        etcd=bin_dir / "etcd",
        kube_apiserver=bin_dir / "kube-apiserver",
        kube_controller_manager=bin_dir / "kube-controller-manager",
        kube_scheduler=bin_dir / "kube-scheduler",
        kubectl=bin_dir / "kubectl",
    )
    return found if _all_present(found) else None


def find_node_binaries() -> NodeBinaries | None:
    bin_dir = kube_bin_dir()
    found = NodeBinaries(kubelet=bin_dir / "kubelet", kube_proxy=bin_dir / "kube-proxy", pause=bin_dir / "pause")
    return found if _all_present(found) else None


def build_script() -> Path:
    return Path(str(resources.files("opbroker.devcluster") / "build.sh"))


def _build(*flags: str) -> None:
    # The versions are the wrapper module's; passed so that the script refuses a module pinning others.
    env = {
        **os.environ,
        "OPBROKER_CACHE": str(cache_dir()),
        "KUBE_VERSION": KUBE_VERSION,
        "ETCD_VERSION": ETCD_VERSION,
    }
    result = subprocess.run(["bash", str(build_script()), *flags], env=env, check=False)
    if result.returncode != 0:
        raise BuildError(f"building Kubernetes {KUBE_VERSION} failed (exit {result.returncode}); see the output above")


def ensure_binaries() -> Binaries:
    """Return the control plane's binaries, building them first if needed (prints the build's progress)."""
    found = find_binaries()
    if found is None:
        _build()
        found = find_binaries()
    if found is None:
        raise BuildError(f"the build finished but binaries are missing from {kube_bin_dir()}")
    return found


def ensure_node_binaries() -> NodeBinaries:
    """Return kubelet, kube-proxy and pause, building them first if needed."""
    found = find_node_binaries()
    if found is None:
        _build("--node")
        found = find_node_binaries()
    if found is None:
        raise BuildError(f"the build finished but the node's binaries are missing from {kube_bin_dir()}")
    return found
