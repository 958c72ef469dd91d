"""A local Kubernetes control plane: etcd + kube-apiserver + kube-controller-manager on 127.0.0.1.

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

from opbroker.devcluster.binaries import Binaries, cache_dir, ensure_binaries
from opbroker.devcluster.pki import Pki, ensure_pki

Progress = Callable[[str], None]
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager")


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
        for component in COMPONENTS:
            pid = state.pids.get(component) if state else None
            running = bool(pid and state and _pid_runs(pid, state.commands[component]))
            components.append(ComponentStatus(component, pid, running, _rss_mib(pid) if running and pid else None))
        running = bool(state) and all(c.running for c in components)
        server = f"https://127.0.0.1:{state.ports.apiserver}" if state else None
        ready = running and self._ready()
        return Status(self.name, running, ready, server, self.kubeconfig, tuple(components))

    def _ready(self) -> bool:
        state = self.state()
        if state is None:
            return False
        token = (self.dir / "token").read_text().strip()
        context = ssl.create_default_context(cafile=str(self.dir / "pki" / "ca.crt"))
        request = urllib.request.Request(
            f"https://127.0.0.1:{state.ports.apiserver}/readyz",
            headers={"Authorization": f"Bearer {token}"},
        )
        try:
            with urllib.request.urlopen(request, context=context, timeout=2) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError, ssl.SSLError):
            return False

    # -- lifecycle -----------------------------------------------------------------------------------

    def up(
        self,
        *,
        apiserver_port: int | None = None,
        timeout: float = 90.0,
        progress: Progress = print,
    ) -> Status:
        """Start the control plane (building the binaries first if needed) and wait until it is ready."""
        current = self.status()
        if current.running:
            progress(f"control plane {self.name!r} already running at {current.server}")
            return current
        if self.state_file.exists():
            self.down(progress=lambda _msg: None)  # leftovers of a crashed run

        if apiserver_port is not None and not port_is_free(apiserver_port):
            raise ControlPlaneError(
                f"port {apiserver_port} on 127.0.0.1 is taken; pick another with --port or stop what uses it"
            )
        binaries = ensure_binaries()
        started = time.monotonic()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(exist_ok=True)
        pki = ensure_pki(self.dir / "pki")
        token = self._ensure_token()
        etcd_client, etcd_peer, api = free_ports(3)
        ports = Ports(etcd_client, etcd_peer, apiserver_port or api)
        etcd_data = self._etcd_data_dir()
        shutil.rmtree(etcd_data, ignore_errors=True)
        state = State(name=self.name, ports=ports, etcd_data=str(etcd_data), started_at=time.time())
        self._write_kubeconfig(ports.apiserver, token, pki.ca_cert)

        try:
            progress(f"starting etcd on 127.0.0.1:{ports.etcd_client}")
            self._spawn(state, "etcd", self._etcd_command(binaries, ports, etcd_data))
            progress(f"starting kube-apiserver on 127.0.0.1:{ports.apiserver}")
            self._spawn(state, "kube-apiserver", self._apiserver_command(binaries, ports, pki))
            self._wait_ready(state, started, timeout, progress)
            progress("starting kube-controller-manager (garbage collector, namespace controllers)")
            self._spawn(state, "kube-controller-manager", self._controller_manager_command(binaries))
        except BaseException:
            self.down(progress=lambda _msg: None)
            raise
        state.ready_seconds = round(time.monotonic() - started, 2)
        state.save(self.state_file)
        progress(f"control plane {self.name!r} ready in {state.ready_seconds:.1f}s; kubeconfig: {self.kubeconfig}")
        return self.status()

    def down(self, *, progress: Progress = print) -> None:
        """Stop every process ``up`` started (by recorded pid) and wipe the etcd data."""
        state = self.state()
        if state is None:
            progress(f"control plane {self.name!r} is not running")
            return
        for component in reversed(COMPONENTS):
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

    def _ensure_token(self) -> str:
        token_file = self.dir / "token"
        if not token_file.exists():
            token_file.write_text(secrets.token_urlsafe(32))
            token_file.chmod(0o600)
        token = token_file.read_text().strip()
        tokens_csv = self.dir / "tokens.csv"
        tokens_csv.write_text(f'{token},admin,admin,"system:masters"\n')
        tokens_csv.chmod(0o600)
        return token

    def _etcd_data_dir(self) -> Path:
        """etcd data in memory (/dev/shm) where possible: a dev cluster needs speed, not durability."""
        shm = Path("/dev/shm")
        if shm.is_dir() and os.access(shm, os.W_OK):
            return shm / f"opbroker-{self.name}-{os.getuid()}-etcd"
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

    def _apiserver_command(self, binaries: Binaries, ports: Ports, pki: Pki) -> list[str]:
        return [
            str(binaries.kube_apiserver),
            f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={ports.apiserver}",
            "--insecure-port=0",
            f"--tls-cert-file={pki.serving_cert}",
            f"--tls-private-key-file={pki.serving_key}",
            f"--token-auth-file={self.dir / 'tokens.csv'}",
            "--authorization-mode=AlwaysAllow",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={pki.service_account_key}",
            f"--service-account-signing-key-file={pki.service_account_key}",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--allow-privileged=true",
            # No kubelet or service-account controller runs here, so pods must not wait for tokens.
            "--disable-admission-plugins=ServiceAccount",
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

    def _controller_manager_command(self, binaries: Binaries) -> list[str]:
        return [
            str(binaries.kube_controller_manager),
            f"--kubeconfig={self.kubeconfig}",
            "--controllers=garbagecollector,namespace",
            "--leader-elect=false",
            "--port=0",
            "--secure-port=0",
            "--concurrent-gc-syncs=10",
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
