"""A real node for a local control plane: containerd + runc, a CNI bridge, kubelet and kube-proxy.

One node per machine (kubelet's ports, the ``kubepods`` cgroups and kube-proxy's iptables rules are
machine-wide). Its files live in ``<cluster dir>/node``; ``teardown`` undoes everything ``setup`` did to
the machine: containers killed, mounts and network namespaces removed, iptables rules, the bridge and
the node's address dropped. What ``setup`` changes on the host, and why:

- ``net.ipv4.ip_forward=1`` and ``net.bridge.bridge-nf-call-iptables=1``: pods reach Services and the
  outside through the host (the usual node prerequisites; left set on teardown).
- ``NODE_IP`` on the loopback interface (labelled ``lo:opbroker``): an address of this machine that pods can
  route to (127.0.0.1 inside a pod is the pod itself), so the API server advertises it as the ``kubernetes``
  Service's endpoint. Loopback, not a dummy interface: it exists on every kernel, offline too.
- a bridge ``opbroker-cni0`` with the pod network ``POD_CIDR`` (CNI bridge + host-local + portmap).

The node's name is ``opbroker-node``; pods get addresses in ``POD_CIDR``; ClusterIPs (``SERVICE_CIDR``)
route from pods and from the host through kube-proxy's iptables rules. No cluster DNS is installed: in-cluster
configuration finds the API server through ``KUBERNETES_SERVICE_HOST``, and Services are reached by IP.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from opbroker.devcluster.binaries import KUBE_VERSION, NodeBinaries
from opbroker.devcluster.requirements import Probe, cni_bin_dir

Progress = Callable[[str], None]

NODE_NAME = "opbroker-node"
NODE_ADDRESS_LABEL = "lo:opbroker"
#: The node's address: on the loopback interface, so it exists offline and on any machine.
NODE_IP = "172.30.255.1"
POD_CIDR = "10.244.0.0/24"
CLUSTER_CIDR = "10.244.0.0/16"
SERVICE_CIDR = "10.96.0.0/16"
#: The ``kubernetes`` Service's cluster IP (the first of SERVICE_CIDR): the API server's certificate names it.
KUBERNETES_SERVICE_IP = "10.96.0.1"
BRIDGE = "opbroker-cni0"
#: The sandbox image: Kubernetes's own pause.c, built by build.sh and packed by opbroker.devcluster.images.
PAUSE_IMAGE = f"localhost/opbroker/pause:{KUBE_VERSION}"
#: containerd's namespace for Kubernetes (the CRI plugin's), where images must be imported.
CRI_NAMESPACE = "k8s.io"
KUBELET_PORT = 10250


class NodeError(RuntimeError):
    """The node could not be set up, or a piece of it failed."""


@dataclass(frozen=True)
class NodeTokens:
    """Static tokens the node's processes authenticate with (lines of the API server's token file)."""

    kubelet: str
    kube_proxy: str

    def token_file_lines(self) -> list[str]:
        return [
            f'{self.kubelet},system:node:{NODE_NAME},system:node:{NODE_NAME},"system:nodes"',
            f"{self.kube_proxy},system:kube-proxy,system:kube-proxy",
        ]


class NodeFiles:
    """Paths and configuration files of the node, all under ``<cluster dir>/node``."""

    def __init__(self, cluster_dir: Path) -> None:
        self.dir = cluster_dir / "node"
        self.containerd_root = self.dir / "containerd" / "root"
        self.containerd_state = self.dir / "containerd" / "state"
        self.containerd_socket = self.dir / "containerd" / "containerd.sock"
        self.containerd_config = self.dir / "containerd" / "config.toml"
        self.cni_conf_dir = self.dir / "cni" / "net.d"
        self.cni_ipam_dir = self.dir / "cni" / "ipam"
        self.kubelet_root = self.dir / "kubelet"
        self.kubelet_config = self.dir / "kubelet-config.yaml"
        self.kubelet_kubeconfig = self.dir / "kubelet.kubeconfig"
        self.pod_logs = self.dir / "pod-logs"
        self.proxy_config = self.dir / "kube-proxy-config.yaml"
        self.proxy_kubeconfig = self.dir / "kube-proxy.kubeconfig"
        self.images = self.dir / "images"


def containerd_config(files: NodeFiles, cni_bin: Path) -> str:
    """containerd 1.6+ configuration (version 2 schema): CRI with runc through cgroupfs, overlayfs, our
    CNI folders, and the locally built sandbox image. Pulls are never needed: images are imported."""
    return f"""version = 2
root = "{files.containerd_root}"
state = "{files.containerd_state}"
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
]

[grpc]
  address = "{files.containerd_socket}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  stream_server_address = "127.0.0.1"
  enable_selinux = false
  # Never ask for an OOM score below containerd's own: lowering one needs CAP_SYS_RESOURCE, which VMs and
  # containers often withhold (runc then fails with "failed to update /proc/self/oom_score_adj").
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin}"
    conf_dir = "{files.cni_conf_dir}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{files.dir / "containerd" / "opt"}"
"""


def cni_config(files: NodeFiles) -> dict[str, object]:
    """The pod network: a bridge with host-local addresses, masquerading to the outside, hairpin so a pod
    reaches itself through its own Service, and portmap for hostPort."""
    return {
        "cniVersion": "0.4.0",
        "name": "opbroker",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": True,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(files.cni_ipam_dir),
                    "ranges": [[{"subnet": POD_CIDR}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def kubeconfig(server: str, ca_cert: Path, user: str, token: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": server, "certificate-authority": str(ca_cert)}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
        "current-context": "local",
    }


def kubelet_config(files: NodeFiles, ca_cert: Path, cgroup_v1: bool) -> dict[str, object]:
    """kubelet's configuration: authenticated by client certificate (the API server's) or token, authorised
    through the API server (webhook), cgroupfs (there is no systemd), and the node's own folders."""
    config: dict[str, object] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": NODE_IP,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca_cert)},
        },
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs",
        "containerRuntimeEndpoint": f"unix://{files.containerd_socket}",
        "failSwapOn": False,
        "podLogsDir": str(files.pod_logs),
        "podCIDR": POD_CIDR,
        "resolvConf": "/etc/resolv.conf",
        "serializeImagePulls": False,
        # A dev machine's disk is shared with everything else: do not evict pods or collect images for it.
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "nodeStatusReportFrequency": "10s",
        "nodeStatusUpdateFrequency": "5s",
    }
    if cgroup_v1:
        # Kubernetes 1.35+ refuses cgroup v1 unless told otherwise (KEP-5573); many VMs still boot with it.
        config["failCgroupV1"] = False
    return config


def kube_proxy_config(files: NodeFiles) -> dict[str, object]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": str(files.proxy_kubeconfig)},
        "clusterCIDR": CLUSTER_CIDR,
        "hostnameOverride": NODE_NAME,
        "bindAddress": NODE_IP,
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        # Leave the machine's conntrack table size alone (a VM may not allow changing it).
        "conntrack": {"maxPerCore": 0},
    }


def cgroup_v1(probe: Probe) -> bool:
    return not probe.exists(Path("/sys/fs/cgroup/cgroup.controllers"))


def run(command: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise NodeError(f"`{' '.join(command)}` failed (exit {result.returncode}): {result.stderr.strip()}")
    return result


def write_configs(files: NodeFiles, *, server: str, ca_cert: Path, tokens: NodeTokens, probe: Probe) -> None:
    cni_bin = cni_bin_dir(probe)
    if cni_bin is None:
        raise NodeError("the CNI plugins are missing (apt-get install containernetworking-plugins)")
    for directory in (files.containerd_root, files.containerd_state, files.cni_conf_dir, files.cni_ipam_dir):
        directory.mkdir(parents=True, exist_ok=True)
    files.kubelet_root.mkdir(parents=True, exist_ok=True)
    files.pod_logs.mkdir(parents=True, exist_ok=True)
    files.containerd_config.write_text(containerd_config(files, cni_bin))
    (files.cni_conf_dir / "10-opbroker.conflist").write_text(json.dumps(cni_config(files), indent=2))
    files.kubelet_config.write_text(yaml.safe_dump(kubelet_config(files, ca_cert, cgroup_v1(probe))))
    files.proxy_config.write_text(yaml.safe_dump(kube_proxy_config(files)))
    for path, user, token in (
        (files.kubelet_kubeconfig, f"system:node:{NODE_NAME}", tokens.kubelet),
        (files.proxy_kubeconfig, "system:kube-proxy", tokens.kube_proxy),
    ):
        path.write_text(yaml.safe_dump(kubeconfig(server, ca_cert, user, token)))
        path.chmod(0o600)


def prepare_host() -> None:
    """The host settings a node needs (see the module docstring), idempotently."""
    for key, value in (("net/ipv4/ip_forward", "1"), ("net/bridge/bridge-nf-call-iptables", "1")):
        Path("/proc/sys", key).write_text(value)
    run(["ip", "addr", "replace", f"{NODE_IP}/32", "dev", "lo", "label", NODE_ADDRESS_LABEL])


def containerd_command(files: NodeFiles) -> list[str]:
    return ["containerd", "--config", str(files.containerd_config), "--log-level", "warn"]


def kubelet_command(binaries: NodeBinaries, files: NodeFiles) -> list[str]:
    return [
        str(binaries.kubelet),
        f"--config={files.kubelet_config}",
        f"--kubeconfig={files.kubelet_kubeconfig}",
        f"--root-dir={files.kubelet_root}",
        f"--cert-dir={files.dir / 'kubelet-pki'}",
        f"--hostname-override={NODE_NAME}",
        f"--node-ip={NODE_IP}",
        "--v=1",
    ]


def kube_proxy_command(binaries: NodeBinaries, files: NodeFiles) -> list[str]:
    return [str(binaries.kube_proxy), f"--config={files.proxy_config}", "--v=1"]


def ctr(files: NodeFiles, *args: str) -> list[str]:
    return ["ctr", "--address", str(files.containerd_socket), "--namespace", CRI_NAMESPACE, *args]


def wait_for_socket(files: NodeFiles, alive: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            raise NodeError("containerd exited during start-up")
        if files.containerd_socket.exists() and run(ctr(files, "version"), check=False).returncode == 0:
            return
        time.sleep(0.2)
    raise NodeError(f"containerd did not answer on {files.containerd_socket} within {timeout:.0f}s")


def import_image(files: NodeFiles, archive: Path, name: str) -> None:
    """Import an OCI archive into the node's containerd as ``name`` (no registry involved), unpacked into
    the overlayfs snapshotter the CRI plugin uses. The archive's tag must be ``name``'s tag: ctr names the
    image ``<repository>:<tag in the archive>``."""
    repository = name.rpartition(":")[0]
    result = run(ctr(files, "images", "import", "--base-name", repository, str(archive)), check=False)
    if result.returncode != 0:
        raise NodeError(f"importing {archive} as {name} failed: {result.stderr.strip()}")
    if name not in run(ctr(files, "images", "ls", "-q")).stdout.split():
        raise NodeError(f"{archive} was imported but {name} is not among the node's images")


def node_images(files: NodeFiles) -> list[str]:
    """Names of the images the node's containerd holds (empty when containerd is not running)."""
    result = run(ctr(files, "images", "ls", "-q"), check=False)
    return result.stdout.split() if result.returncode == 0 else []


# -- teardown ------------------------------------------------------------------------------------------------


def _kubepods_pids() -> set[int]:
    """Every process in a pod's cgroup (cgroupfs driver: ``kubepods`` under each controller)."""
    pids: set[int] = set()
    base = Path("/sys/fs/cgroup")
    roots = [base / "kubepods", base / "memory" / "kubepods", base / "pids" / "kubepods"]
    for root in roots:
        if not root.is_dir():
            continue
        # os.walk, not Path.rglob: cgroups vanish while pods stop, and rglob raises on a folder that went away
        # between listing and entering it (seen in test_node); walk skips it (errors go to onerror, ignored).
        for folder, _, names in os.walk(root, onerror=lambda _: None):
            if "cgroup.procs" in names:
                with contextlib.suppress(OSError, ValueError):
                    pids.update(int(line) for line in (Path(folder) / "cgroup.procs").read_text().split())
    return pids


def _shim_pids(files: NodeFiles) -> set[int]:
    """containerd shims serving this node's containerd (they outlive containerd on purpose)."""
    marker = str(files.containerd_socket).encode()
    pids: set[int] = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if b"containerd-shim" in cmdline.split(b"\0", 1)[0] and marker in cmdline:
            pids.add(int(proc.name))
    return pids


def kill_pods(files: NodeFiles) -> None:
    """SIGKILL every container and shim of this node: a dev node is torn down, not drained."""
    for pid in _kubepods_pids() | _shim_pids(files):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while (_kubepods_pids() or _shim_pids(files)) and time.monotonic() < deadline:
        time.sleep(0.1)


def unmount_under(directory: Path) -> None:
    """Unmount everything mounted below ``directory`` (deepest first): pod volumes, rootfs, shm."""
    prefix = str(directory.resolve()) + "/"
    mounts = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mounts").read_text().splitlines():
            target = line.split()[1].replace("\\040", " ")
            if target.startswith(prefix):
                mounts.append(target)
    for target in sorted(set(mounts), key=lambda m: m.count("/"), reverse=True):
        run(["umount", "-l", target], check=False)


def remove_cgroups() -> None:
    """Remove the (empty) ``kubepods`` cgroups kubelet created, deepest first."""
    base = Path("/sys/fs/cgroup")
    roots = [base / "kubepods", *(c / "kubepods" for c in base.iterdir() if c.is_dir())] if base.is_dir() else []
    for root in roots:
        if not root.is_dir():
            continue
        for directory in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                directory.rmdir()
        with contextlib.suppress(OSError):
            root.rmdir()


def remove_network(proxy: Path | None) -> None:
    """kube-proxy's iptables rules, the pod bridge, the node address and CNI's network namespaces."""
    if proxy is not None and proxy.exists():
        run([str(proxy), "--cleanup"], check=False)
    _remove_chains()
    run(["ip", "link", "delete", BRIDGE], check=False)
    run(["ip", "addr", "del", f"{NODE_IP}/32", "dev", "lo"], check=False)
    netns = Path("/var/run/netns")
    if netns.is_dir():
        for entry in netns.iterdir():
            if entry.name.startswith("cni-"):
                run(["ip", "netns", "delete", entry.name], check=False)


def _remove_chains(prefixes: tuple[str, ...] = ("CNI-", "KUBE-")) -> None:
    """What kube-proxy's cleanup leaves: the bridge plugin's masquerade chains (``CNI-<hash>``) and kubelet's
    canary chains (``KUBE-KUBELET-CANARY``), with the rules jumping to them, in every table, IPv4 and IPv6."""
    for tool in ("iptables", "ip6tables"):
        for table in ("nat", "filter", "mangle"):
            listing = run([tool, "-t", table, "-S"], check=False).stdout.splitlines()
            for rule in listing:
                if rule.startswith("-A ") and any(f"-j {p}" in rule for p in prefixes):
                    # shlex: the bridge plugin's rules carry quoted comments with spaces.
                    run([tool, "-t", table, *shlex.split(rule.replace("-A", "-D", 1))], check=False)
            chains = [r.split()[1] for r in listing if r.startswith("-N ") and r.split()[1].startswith(prefixes)]
            for chain in chains:
                run([tool, "-t", table, "-F", chain], check=False)
            for chain in chains:
                run([tool, "-t", table, "-X", chain], check=False)
