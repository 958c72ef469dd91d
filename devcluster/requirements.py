"""What a machine needs before ``opbroker cluster up --node`` can run a node, and how to get each piece.

Pure: the checks read the machine through a ``Probe`` (real one: ``Probe.local()``), so a test can
describe a machine that lacks something and see the message a user would get.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

#: Where Debian (containernetworking-plugins) and upstream (/opt/cni/bin) put the CNI plugins.
CNI_BIN_DIRS = (Path("/usr/lib/cni"), Path("/opt/cni/bin"))
CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap")
DEBIAN_PACKAGES = "containerd runc containernetworking-plugins iptables conntrack"
IMAGE_PACKAGES = "mmdebstrap umoci"


@dataclass(frozen=True)
class Missing:
    """One thing the machine lacks: what it is and the command or step that provides it."""

    what: str
    how: str

    def __str__(self) -> str:
        return f"{self.what} — {self.how}"


@dataclass(frozen=True)
class Probe:
    """How the checks see the machine."""

    which: Callable[[str], str | None]
    exists: Callable[[Path], bool]
    read_text: Callable[[Path], str]
    is_root: Callable[[], bool]

    @classmethod
    def local(cls) -> Probe:
        def read_text(path: Path) -> str:
            try:
                return path.read_text()
            except OSError:
                return ""

        return cls(which=shutil.which, exists=Path.exists, read_text=read_text, is_root=lambda: os.geteuid() == 0)


def cni_bin_dir(probe: Probe) -> Path | None:
    """The first directory holding every CNI plugin the node uses."""
    for directory in CNI_BIN_DIRS:
        if all(probe.exists(directory / plugin) for plugin in CNI_PLUGINS):
            return directory
    return None


def node_requirements(probe: Probe) -> list[Missing]:
    """Everything missing for a node, in the order a user would fix them (empty: ready)."""
    missing: list[Missing] = []
    if not probe.is_root():
        missing.append(
            Missing(
                "root privileges",
                "run as root: a node mounts filesystems, creates network interfaces and cgroups",
            )
        )
    install = f"apt-get install {DEBIAN_PACKAGES}"
    for command, package in (
        ("containerd", "containerd"),
        ("containerd-shim-runc-v2", "containerd"),
        ("ctr", "containerd"),
        ("runc", "runc"),
        ("iptables", "iptables"),
        ("ip", "iproute2"),
    ):
        if probe.which(command) is None:
            missing.append(Missing(f"the `{command}` command (Debian package {package})", install))
    if cni_bin_dir(probe) is None:
        wanted = ", ".join(CNI_PLUGINS)
        where = " or ".join(str(d) for d in CNI_BIN_DIRS)
        missing.append(Missing(f"the CNI plugins {wanted} in {where}", install))
    filesystems = probe.read_text(Path("/proc/filesystems"))
    if "overlay" not in filesystems:
        missing.append(Missing("the overlay filesystem (containerd's snapshotter)", "modprobe overlay"))
    if not (probe.exists(Path("/sys/fs/cgroup/cgroup.controllers")) or probe.exists(Path("/sys/fs/cgroup/memory"))):
        missing.append(
            Missing(
                "mounted cgroups (neither a cgroup v2 hierarchy nor the v1 memory controller under /sys/fs/cgroup)",
                "mount -t cgroup2 none /sys/fs/cgroup (or let the init system mount them)",
            )
        )
    if not probe.exists(Path("/proc/sys/net/bridge/bridge-nf-call-iptables")):
        missing.append(
            Missing("bridge netfilter (Services reached from pods on the same bridge)", "modprobe br_netfilter")
        )
    return missing


def image_requirements(probe: Probe) -> list[Missing]:
    """What building the opbroker and pause images locally needs."""
    install = f"apt-get install {IMAGE_PACKAGES}"
    return [
        Missing(f"the `{command}` command", install)
        for command in ("mmdebstrap", "umoci")
        if probe.which(command) is None
    ]


def explain(missing: list[Missing]) -> str:
    """One message naming every missing piece and how to get it."""
    lines = [f"  - {item}" for item in missing]
    return "this machine cannot run a node yet:\n" + "\n".join(lines)
