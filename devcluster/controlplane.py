"""A local Kubernetes cluster: etcd, kube-apiserver, kube-controller-manager and kube-scheduler on this
machine, and optionally a real node (``opbroker.devcluster.node``: containerd, kubelet, kube-proxy).

Each control plane has a name and a state folder (``<cache>/clusters/<name>``) holding its PKI, token,
kubeconfig, logs and ``state.json`` (ports and pids). Several can run side by side: ports are picked
free at start unless given. ``down`` stops exactly the processes ``up`` started — by pid, after checking
the pid still runs the binary we started — and wipes the etcd data (a dev cluster starts clean).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from opbroker.devcluster import node as node_setup
from opbroker.devcluster.binaries import Binaries, NodeBinaries, cache_dir, ensure_binaries, ensure_node_binaries
from opbroker.devcluster.images import pause_image
from opbroker.devcluster.node import NODE_IP, NODE_NAME, NodeError, NodeFiles, NodeTokens
from opbroker.devcluster.pki import Pki, ensure_pki
from opbroker.devcluster.requirements import Probe, explain, node_requirements

Progress = Callable[[str], None]
CONTROL_PLANE_COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
NODE_COMPONENTS = ("containerd", "kubelet", "kube-proxy")
#: Controllers a node-less cluster needs: objects are collected and namespaces emptied; nothing else runs
#: (no pod can start, so Deployments and ReplicaSets need no controller).
NODELESS_CONTROLLERS = "garbagecollector,namespace"


class ControlPlaneError(RuntimeError):
    """The control plane could not be started, or is not in the state asked for."""


@dataclass(frozen=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int


@dataclass
class State:
    """What ``up`` records so that ``status`` and ``down`` (from another process) can find it all."""

    name: str
    ports: Ports
    pids: dict[str, int] = field(default_factory=dict)
    commands: dict[str, str] = field(default_factory=dict)
    etcd_data: str = ""
    started_at: float = 0.0
    ready_seconds: float | None = None
    node: bool = False

    @classmethod
    def load(cls, path: Path) -> State:
        raw = json.loads(path.read_text())
        raw["ports"] = Ports(**raw["ports"])
        return cls(**raw)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2))


@dataclass(frozen=True)
class ComponentStatus:
    name: str
    pid: int | None
    running: bool
    rss_mib: float | None


@dataclass(frozen=True)
class Status:
    name: str
    running: bool
    ready: bool
    server: str | None
    kubeconfig: Path
    components: tuple[ComponentStatus, ...]

    @property
    def total_rss_mib(self) -> float:
        return sum(c.rss_mib or 0.0 for c in self.components)


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports: all sockets stay open until every port is picked, so the kernel
    cannot hand out the same port twice."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


#: Where etcd keeps a dev cluster's data: memory (see ``ControlPlane._etcd_data_dir``).
SHM = Path("/dev/shm")


def sweep_orphaned_etcd_data(shm: Path) -> list[Path]:
    """Remove this user's etcd data directories in ``shm`` that no running process names with ``--data-dir``,
    and return them. A control plane whose ``down`` never ran (a killed test run) leaves its directory behind, about
    125 MB of memory each, until the machine restarts. A process being started this instant, not yet showing its
    command line, could lose a directory it has not created yet: etcd creates it itself once running."""
    pattern = f"opbroker-*-{os.getuid()}-etcd"
    candidates = sorted(shm.glob(pattern)) if shm.is_dir() else []
    if not candidates:
        return []
    in_use: set[str] = set()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            arguments = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue  # gone meanwhile, or not ours to read
        in_use.update(
            a[len(b"--data-dir=") :].decode(errors="replace") for a in arguments if a.startswith(b"--data-dir=")
        )
    removed = [path for path in candidates if str(path) not in in_use]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed


def _pid_runs(pid: int, executable: str) -> bool:
    """True if ``pid`` is alive and still runs ``executable`` (guards against pid reuse).

    An empty command line counts as ours: a process we just spawned can be caught in the middle of
    ``exec`` (Popen returns once the exec pipe closes, before the kernel has set up the new arguments).
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    if stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X"):
        return False
    program = cmdline.split(b"\0", 1)[0].decode(errors="replace")
    return not program or os.path.basename(program) == os.path.basename(executable)


def _rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


class ControlPlane:
    """One named local control plane."""

    def __init__(self, name: str = "default", *, base_dir: Path | None = None, audit: bool = False) -> None:
        if not name.replace("-", "").isalnum():
            raise ControlPlaneError(f"cluster name {name!r}: use letters, digits and dashes only")
        self.name = name
        self.dir = (base_dir or cache_dir() / "clusters") / name
        self.kubeconfig = self.dir / "kubeconfig"
        self.state_file = self.dir / "state.json"
        self.log_dir = self.dir / "logs"
        self.audit = audit
        """Log every request (verb, resource, user agent) to ``audit.log``: how benchmarks count API calls."""
        self.audit_log = self.dir / "audit.log"

    # -- queries -------------------------------------------------------------------------------------

    def state(self) -> State | None:
        if not self.state_file.exists():
            return None
        return State.load(self.state_file)

    def status(self) -> Status:
        state = self.state()
        components = []
        expected = CONTROL_PLANE_COMPONENTS + (NODE_COMPONENTS if state and state.node else ())
        for component in expected:
            pid = state.pids.get(component) if state else None
            running = bool(pid and state and _pid_runs(pid, state.commands[component]))
            components.append(ComponentStatus(component, pid, running, _rss_mib(pid) if running and pid else None))
        running = bool(state) and all(c.running for c in components)
        server = f"https://127.0.0.1:{state.ports.apiserver}" if state else None
        ready = running and self._ready()
        return Status(self.name, running, ready, server, self.kubeconfig, tuple(components))

    def _ready(self) -> bool:
        return self._get("/readyz") is not None

    def _get(self, path: str) -> bytes | None:
        """GET ``path`` from the API server as admin; None when it does not answer 200."""
        state = self.state()
        if state is None:
            return None
        token = (self.dir / "token").read_text().strip()
        context = ssl.create_default_context(cafile=str(self.dir / "pki" / "ca.crt"))
        request = urllib.request.Request(
            f"https://127.0.0.1:{state.ports.apiserver}{path}",
            headers={"Authorization": f"Bearer {token}"},
        )
        try:
            with urllib.request.urlopen(request, context=context, timeout=2) as response:
                return response.read() if response.status == 200 else None
        except (urllib.error.URLError, OSError, ssl.SSLError):
            return None

    def node_ready(self) -> bool:
        """Whether the node is registered and its Ready condition is True."""
        raw = self._get(f"/api/v1/nodes/{NODE_NAME}")
        if raw is None:
            return False
        conditions = json.loads(raw).get("status", {}).get("conditions") or []
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

    # -- lifecycle -----------------------------------------------------------------------------------

    def up(
        self,
        *,
        apiserver_port: int | None = None,
        timeout: float = 90.0,
        node: bool = False,
        progress: Progress = print,
    ) -> Status:
        """Start the control plane (building the binaries first if needed) and wait until it is ready.

        ``node``: also run a real node on this machine (needs root and Debian's containerd, runc and CNI
        plugins; ``opbroker.devcluster.requirements`` says what is missing) and wait until it is Ready.
        """
        current = self.status()
        if current.running:
            state = self.state()
            if node and state is not None and not state.node:
                raise ControlPlaneError(
                    f"control plane {self.name!r} runs without a node; stop it first (cluster down -n {self.name})"
                )
            progress(f"control plane {self.name!r} already running at {current.server}")
            return current
        if self.state_file.exists():
            self.down(progress=lambda _msg: None)  # leftovers of a crashed run
        for orphan in sweep_orphaned_etcd_data(SHM):
            progress(f"removed {orphan}: etcd data in memory no running etcd uses (a control plane never stopped)")

        if apiserver_port is not None and not port_is_free(apiserver_port):
            raise ControlPlaneError(
                f"port {apiserver_port} on 127.0.0.1 is taken; pick another with --port or stop what uses it"
            )
        node_binaries: NodeBinaries | None = None
        pause_archive: Path | None = None
        if node:
            missing = node_requirements(Probe.local())
            if missing:
                raise ControlPlaneError(explain(missing))
            other = self._other_node()
            if other:
                raise ControlPlaneError(
                    f"control plane {other!r} already runs this machine's node (one per machine): "
                    f"stop it first (opbroker cluster down -n {other})"
                )
            node_binaries = ensure_node_binaries()
            pause_archive = pause_image(node_binaries.pause, progress)
        binaries = ensure_binaries()
        started = time.monotonic()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(exist_ok=True)
        pki = ensure_pki(self.dir / "pki", extra_ips=(NODE_IP, node_setup.KUBERNETES_SERVICE_IP))
        tokens = NodeTokens(kubelet=secrets.token_urlsafe(32), kube_proxy=secrets.token_urlsafe(32)) if node else None
        token = self._ensure_token(tokens)
        etcd_client, etcd_peer, api = free_ports(3)
        ports = Ports(etcd_client, etcd_peer, apiserver_port or api)
        etcd_data = self._etcd_data_dir()
        shutil.rmtree(etcd_data, ignore_errors=True)
        state = State(name=self.name, ports=ports, etcd_data=str(etcd_data), started_at=time.time(), node=node)
        self._write_kubeconfig(ports.apiserver, token, pki.ca_cert)

        try:
            if node:
                node_setup.prepare_host()
            progress(f"starting etcd on 127.0.0.1:{ports.etcd_client}")
            self._spawn(state, "etcd", self._etcd_command(binaries, ports, etcd_data))
            progress(f"starting kube-apiserver on 127.0.0.1:{ports.apiserver}")
            self._spawn(state, "kube-apiserver", self._apiserver_command(binaries, ports, pki, node=node))
            self._wait_ready(state, started, timeout, progress)
            progress("starting kube-controller-manager and kube-scheduler")
            self._spawn(state, "kube-controller-manager", self._controller_manager_command(binaries, pki, node=node))
            self._spawn(state, "kube-scheduler", self._scheduler_command(binaries))
            if node_binaries is not None and pause_archive is not None and tokens is not None:
                self._start_node(state, node_binaries, pause_archive, pki, tokens, started, timeout, progress)
        except NodeError as exc:
            self.down(progress=lambda _msg: None)
            raise ControlPlaneError(f"the node failed to start: {exc}") from None
        except BaseException:
            self.down(progress=lambda _msg: None)
            raise
        state.ready_seconds = round(time.monotonic() - started, 2)
        state.save(self.state_file)
        progress(f"control plane {self.name!r} ready in {state.ready_seconds:.1f}s; kubeconfig: {self.kubeconfig}")
        return self.status()

    def down(self, *, progress: Progress = print) -> None:
        """Stop every process ``up`` started (by recorded pid), tear the node down, wipe the etcd data."""
        state = self.state()
        if state is None:
            progress(f"control plane {self.name!r} is not running")
            return
        if state.node:
            self._stop_node(state, progress)
        for component in reversed(CONTROL_PLANE_COMPONENTS):
            pid = state.pids.get(component)
            if pid and _pid_runs(pid, state.commands[component]):
                progress(f"stopping {component} (pid {pid})")
                _terminate(pid, state.commands[component])
        if state.etcd_data:
            shutil.rmtree(state.etcd_data, ignore_errors=True)
        self.state_file.unlink(missing_ok=True)
        progress(f"control plane {self.name!r} stopped")

    def restart_apiserver(self, *, timeout: float = 60.0, progress: Progress = print) -> float:
        """Stop kube-apiserver and start it again in place; returns the seconds until it was ready again.

        The new process gets exactly the old command line (read back from ``/proc``: same flags, port,
        certificates, token file and audit log, which it appends to) and the same etcd, so every object
        survives. Clients see what a control-plane upgrade does to them: connections and watches drop,
        and the API refuses connections for a few seconds. For fault-injection runs (bench/reliability.py).
        """
        component = "kube-apiserver"
        state = self.state()
        pid = state.pids.get(component) if state else None
        if state is None or not pid or not _pid_runs(pid, state.commands[component]):
            raise ControlPlaneError(f"{component} of control plane {self.name!r} is not running")
        command = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").decode().split("\0")
        started = time.monotonic()
        progress(f"stopping {component} (pid {pid})")
        _terminate(pid, state.commands[component])
        progress(f"starting {component} again on 127.0.0.1:{state.ports.apiserver}")
        self._spawn(state, component, command)
        self._wait_ready(state, time.monotonic(), timeout, progress)
        return round(time.monotonic() - started, 2)

    # -- pieces --------------------------------------------------------------------------------------

    # -- the node ------------------------------------------------------------------------------------

    def _other_node(self) -> str | None:
        """The name of another control plane on this machine whose node is running, if any."""
        for state_file in self.dir.parent.glob("*/state.json"):
            if state_file == self.state_file:
                continue
            other = ControlPlane(state_file.parent.name, base_dir=self.dir.parent)
            state = other.state()
            if state and state.node and other.status().running:
                return other.name
        return None

    @property
    def node_files(self) -> NodeFiles:
        return NodeFiles(self.dir)

    def _start_node(
        self,
        state: State,
        binaries: NodeBinaries,
        pause_archive: Path,
        pki: Pki,
        tokens: NodeTokens,
        started: float,
        timeout: float,
        progress: Progress,
    ) -> None:
        files = self.node_files
        shutil.rmtree(files.dir, ignore_errors=True)
        node_setup.write_configs(
            files,
            server=f"https://{NODE_IP}:{state.ports.apiserver}",
            ca_cert=pki.ca_cert,
            tokens=tokens,
            probe=Probe.local(),
        )
        progress("starting containerd (runc, overlayfs, CNI bridge)")
        self._spawn(state, "containerd", node_setup.containerd_command(files))
        pid = state.pids["containerd"]
        node_setup.wait_for_socket(files, lambda: _pid_runs(pid, "containerd"))
        node_setup.import_image(files, pause_archive, node_setup.PAUSE_IMAGE)
        progress(f"starting kubelet (node {NODE_NAME} at {NODE_IP}) and kube-proxy")
        self._spawn(state, "kubelet", node_setup.kubelet_command(binaries, files))
        self._spawn(state, "kube-proxy", node_setup.kube_proxy_command(binaries, files))
        deadline = started + timeout
        announced = 0.0
        while not self.node_ready():
            for component in NODE_COMPONENTS:
                if not _pid_runs(state.pids[component], state.commands[component]):
                    raise ControlPlaneError(
                        f"{component} exited during start-up; last log lines:\n{self._log_tail(component)}"
                    )
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"node {NODE_NAME} not Ready after {timeout:.0f}s; last kubelet log lines:\n"
                    f"{self._log_tail('kubelet')}"
                )
            if time.monotonic() - announced > 5:
                progress(f"waiting for node {NODE_NAME} to become Ready ({time.monotonic() - started:.0f}s)")
                announced = time.monotonic()
            time.sleep(0.5)

    def _stop_node(self, state: State, progress: Progress) -> None:
        """Stop kubelet first (so it restarts nothing), kill every pod, then kube-proxy and containerd, and
        undo what the node did to the machine."""
        files = self.node_files
        for component in ("kubelet", "kube-proxy"):
            pid = state.pids.get(component)
            if pid and _pid_runs(pid, state.commands[component]):
                progress(f"stopping {component} (pid {pid})")
                _terminate(pid, state.commands[component])
        progress("killing the node's pods")
        node_setup.kill_pods(files)
        pid = state.pids.get("containerd")
        if pid and _pid_runs(pid, state.commands["containerd"]):
            progress(f"stopping containerd (pid {pid})")
            _terminate(pid, state.commands["containerd"])
        node_setup.unmount_under(files.dir)
        node_setup.remove_cgroups()
        proxy = Path(state.commands.get("kube-proxy", "")) if state.commands.get("kube-proxy") else None
        node_setup.remove_network(proxy)
        shutil.rmtree(files.dir, ignore_errors=True)

    def import_image(self, archive: Path, name: str) -> None:
        """Import an OCI archive into the node's containerd (the cluster must run with a node)."""
        state = self.state()
        if state is None or not state.node:
            raise ControlPlaneError(f"control plane {self.name!r} runs no node to import images into")
        try:
            node_setup.import_image(self.node_files, archive, name)
        except NodeError as exc:
            raise ControlPlaneError(str(exc)) from None

    # -- pieces --------------------------------------------------------------------------------------

    def _ensure_token(self, node_tokens: NodeTokens | None = None) -> str:
        token_file = self.dir / "token"
        if not token_file.exists():
            token_file.write_text(secrets.token_urlsafe(32))
            token_file.chmod(0o600)
        token = token_file.read_text().strip()
        lines = [f'{token},admin,admin,"system:masters"']
        if node_tokens is not None:
            lines += node_tokens.token_file_lines()
        tokens_csv = self.dir / "tokens.csv"
        tokens_csv.write_text("\n".join(lines) + "\n")
        tokens_csv.chmod(0o600)
        return token

    def _etcd_data_dir(self) -> Path:
        """etcd data in memory (/dev/shm) where possible: a dev cluster needs speed, not durability."""
        if SHM.is_dir() and os.access(SHM, os.W_OK):
            return SHM / f"opbroker-{self.name}-{os.getuid()}-etcd"
        return self.dir / "etcd"

    def _write_kubeconfig(self, port: int, token: str, ca_cert: Path) -> None:
        name = f"opbroker-{self.name}"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": name,
                    "cluster": {
                        "server": f"https://127.0.0.1:{port}",
                        "certificate-authority-data": base64.b64encode(ca_cert.read_bytes()).decode(),
                    },
                }
            ],
            "users": [{"name": f"{name}-admin", "user": {"token": token}}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": f"{name}-admin", "namespace": "default"}}],
            "current-context": name,
        }
        self.kubeconfig.write_text(yaml.safe_dump(config, sort_keys=False))
        self.kubeconfig.chmod(0o600)

    def _etcd_command(self, binaries: Binaries, ports: Ports, data: Path) -> list[str]:
        peer = f"http://127.0.0.1:{ports.etcd_peer}"
        client = f"http://127.0.0.1:{ports.etcd_client}"
        return [
            str(binaries.etcd),
            f"--name={self.name}",
            f"--data-dir={data}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster={self.name}={peer}",
            "--log-level=warn",
            "--quota-backend-bytes=4294967296",
        ]

    def _apiserver_command(self, binaries: Binaries, ports: Ports, pki: Pki, *, node: bool) -> list[str]:
        """Authorization as in production (Node + RBAC); with a node, listening where pods reach it and
        advertised as the ``kubernetes`` Service's endpoint, with service-account tokens for pods."""
        if node:
            # Pods reach the API server at the node's address (through the kubernetes Service).
            addresses = ["--bind-address=0.0.0.0", f"--advertise-address={NODE_IP}"]
            admission: list[str] = []
        else:
            # Loopback may not be advertised as the kubernetes Service's endpoint, and nothing in the
            # cluster would use it: no endpoint reconciliation.
            addresses = [
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                "--endpoint-reconciler-type=none",
            ]
            # No pod ever runs without a node: they must not wait for service-account tokens.
            admission = ["--disable-admission-plugins=ServiceAccount"]
        return [
            str(binaries.kube_apiserver),
            f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
            *addresses,
            f"--secure-port={ports.apiserver}",
            f"--tls-cert-file={pki.serving_cert}",
            f"--tls-private-key-file={pki.serving_key}",
            f"--client-ca-file={pki.ca_cert}",
            f"--token-auth-file={self.dir / 'tokens.csv'}",
            "--authorization-mode=Node,RBAC",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={pki.service_account_key}",
            f"--service-account-signing-key-file={pki.service_account_key}",
            f"--service-cluster-ip-range={node_setup.SERVICE_CIDR}",
            f"--kubelet-client-certificate={pki.kubelet_client_cert}",
            f"--kubelet-client-key={pki.kubelet_client_key}",
            "--kubelet-preferred-address-types=InternalIP",
            "--allow-privileged=true",
            *admission,
            "--profiling=false",
            "--v=1",
            *self._audit_flags(),
        ]

    def _audit_flags(self) -> list[str]:
        if not self.audit:
            return []
        policy = self.dir / "audit-policy.yaml"
        policy.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "audit.k8s.io/v1",
                    "kind": "Policy",
                    "omitStages": ["RequestReceived"],
                    "rules": [{"level": "Metadata"}],
                }
            )
        )
        self.audit_log.unlink(missing_ok=True)
        return [
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-maxsize=2048",
        ]

    def _controller_manager_command(self, binaries: Binaries, pki: Pki, *, node: bool) -> list[str]:
        """Without a node, only what objects need (garbage collection, namespace deletion); with one, every
        default controller (Deployments, ReplicaSets, EndpointSlices, service accounts, disruption budgets,
        autoscalers, the kube-root-ca.crt ConfigMaps pods mount)."""
        controllers = ["--controllers=*"] if node else [f"--controllers={NODELESS_CONTROLLERS}"]
        return [
            str(binaries.kube_controller_manager),
            f"--kubeconfig={self.kubeconfig}",
            *controllers,
            f"--root-ca-file={pki.ca_cert}",
            f"--service-account-private-key-file={pki.service_account_key}",
            "--leader-elect=false",
            "--secure-port=0",
            "--concurrent-gc-syncs=10",
            "--v=1",
        ]

    def _scheduler_command(self, binaries: Binaries) -> list[str]:
        return [
            str(binaries.kube_scheduler),
            f"--kubeconfig={self.kubeconfig}",
            "--leader-elect=false",
            "--secure-port=0",
            "--v=1",
        ]

    def _spawn(self, state: State, component: str, command: list[str]) -> None:
        log = (self.log_dir / f"{component}.log").open("ab")
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # survives the CLI that started it; not killed by its Ctrl-C
        )
        log.close()
        state.pids[component] = process.pid
        state.commands[component] = command[0]
        state.save(self.state_file)

    def _wait_ready(self, state: State, started: float, timeout: float, progress: Progress) -> None:
        deadline = started + timeout
        announced = 0.0
        while time.monotonic() < deadline:
            for component, pid in state.pids.items():
                if not _pid_runs(pid, state.commands[component]):
                    raise ControlPlaneError(
                        f"{component} exited during start-up; last log lines:\n{self._log_tail(component)}"
                    )
            if self._ready():
                return
            if time.monotonic() - announced > 5:
                progress(f"waiting for kube-apiserver to become ready ({time.monotonic() - started:.0f}s)")
                announced = time.monotonic()
            time.sleep(0.25)
        raise ControlPlaneError(
            f"kube-apiserver not ready after {timeout:.0f}s; last log lines:\n{self._log_tail('kube-apiserver')}"
        )

    def _log_tail(self, component: str, lines: int = 15) -> str:
        path = self.log_dir / f"{component}.log"
        if not path.exists():
            return f"(no log at {path})"
        tail = path.read_text(errors="replace").splitlines()[-lines:]
        return "\n".join([*tail, f"(full log: {path})"])


def _terminate(pid: int, executable: str, grace: float = 10.0) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not _pid_runs(pid, executable):
            _reap(pid)
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    _reap(pid)


def _reap(pid: int) -> None:
    """Collect the exit status when we are the parent, so no zombie is left behind."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
