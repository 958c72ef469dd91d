"""Where the control-plane binaries live, and building them when they are missing."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

KUBE_VERSION = "1.20.2"


class BuildError(RuntimeError):
    """The one-time build of the control-plane binaries failed."""


def cache_dir() -> Path:
    """``$OPBROKER_CACHE`` or ``~/.cache/opbroker``: outside the repository, kept across clones."""
    return Path(os.environ.get("OPBROKER_CACHE") or Path.home() / ".cache" / "opbroker")


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kubectl: Path


def kube_bin_dir() -> Path:
    return cache_dir() / f"kube-{KUBE_VERSION}" / "bin"


def find_binaries() -> Binaries | None:
    """The binaries if all of them are present, else None."""
    bin_dir = kube_bin_dir()
    etcd = shutil.which("etcd")
    found = Binaries(
        etcd=Path(etcd) if etcd else Path("/usr/bin/etcd"),
        kube_apiserver=bin_dir / "kube-apiserver",
        kube_controller_manager=bin_dir / "kube-controller-manager",
        kubectl=bin_dir / "kubectl",
    )
    if all(p.is_file() and os.access(p, os.X_OK) for p in vars(found).values()):
        return found
    return None


def build_script() -> Path:
    return Path(str(resources.files("opbroker.devcluster") / "build.sh"))


def ensure_binaries() -> Binaries:
    """Return the binaries, building them first if needed (prints the build's progress as it goes)."""
    found = find_binaries()
    if found is not None:
        return found
    env = {**os.environ, "OPBROKER_CACHE": str(cache_dir())}
    result = subprocess.run(["bash", str(build_script())], env=env, check=False)
    if result.returncode != 0:
        raise BuildError(f"building the control plane failed (exit {result.returncode}); see the output above")
    found = find_binaries()
    if found is None:
        raise BuildError(f"the build finished but binaries are missing from {kube_bin_dir()}")
    return found
