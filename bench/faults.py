"""Fault injectors for the reliability suite: each runs in a thread, is bounded, and stops by itself.

* :class:`ControllerKiller` — SIGKILLs the controller process at random moments and starts it again at once
  (a crashed or evicted pod, restarted by its Deployment).
* :class:`ApiserverRestarter` — restarts kube-apiserver in place (``ControlPlane.restart_apiserver``) at
  random moments inside given windows (a control-plane upgrade).
* :class:`TcpProxy` + :class:`ConnectionCutter` — a plain TCP relay on 127.0.0.1 between the controller and
  the API server (TLS passes through untouched) that drops every relayed connection every few seconds (a
  flaky load balancer, a NAT table flush): watches break mid-stream, requests lose their answers.

Every injector records what it did (``events``), so the results say exactly which faults happened when.

:class:`OperatorNurse` is not a fault but the harness compensating for one of the *demo operator*: it makes
a Database ready from an in-memory timer, and a timer that hits an API error (or a restart of the operator)
is lost, leaving the Database ``Creating`` forever. The nurse clears the phase of a Database stuck there, so
the operator starts over; every such repair is recorded and reported (it is not opbroker's doing).
"""

from __future__ import annotations

import contextlib
import random
import socket
import ssl
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from kubernetes import client

from opbroker.devcluster.controlplane import ControlPlane
from opbroker.devcluster.processes import Process


class Injector:
    """A fault loop in a daemon thread; ``events`` is its log (seconds since start, what happened)."""

    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)
        self.events: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.started = 0.0
        self.finished: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name=type(self).__name__, daemon=True)

    def start(self) -> None:
        self.started = time.monotonic()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    @property
    def done(self) -> bool:
        return self.finished is not None

    def note(self, what: str, **details: Any) -> None:
        self.events.append({"t": round(time.monotonic() - self.started, 2), "event": what, **details})

    def _main(self) -> None:
        try:
            self.run()
        except Exception as exc:
            self.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            self.finished = time.monotonic()

    def run(self) -> None:
        raise NotImplementedError


class ControllerKiller(Injector):
    """``kills`` SIGKILLs of ``process``, each ``delay`` seconds (uniform) after the previous restart."""

    def __init__(
        self, process: Process, *, kills: int, delay: tuple[float, float], seed: int, lock: threading.Lock | None = None
    ) -> None:
        super().__init__(seed)
        self.process = process
        self.lock = lock or threading.Lock()
        """Held while killing and restarting, so that a :class:`Supervisor` never restarts it too."""
        self.kills = kills
        self.delay = delay
        self.done_kills = 0
        self._restarted = 0.0
        self.probe: Callable[[], Any] | None = None
        """Called right before each kill; its answer is recorded (e.g. how much work was pending)."""

    def run(self) -> None:
        while self.done_kills < self.kills and not self._stop.is_set():
            if self._stop.wait(self.random.uniform(*self.delay)):
                break
            pending = self.probe() if self.probe else None
            was_running = self.process.running
            up = time.monotonic() - self._restarted if self._restarted else None
            with self.lock:
                self.process.kill()
                self.process.start()
            self._restarted = time.monotonic()
            self.done_kills += 1
            self.note(
                "controller SIGKILL + restart",
                was_running=was_running,
                seconds_since_its_start=round(up, 2) if up is not None else None,
                pending=pending,
            )


class ApiserverRestarter(Injector):
    """One in-place kube-apiserver restart at a random moment of each window (seconds from start)."""

    def __init__(self, plane: ControlPlane, *, windows: list[tuple[float, float]], seed: int) -> None:
        super().__init__(seed)
        self.plane = plane
        self.windows = windows
        self.restarts: list[float] = []
        self.outage_until = 0.0

    def run(self) -> None:
        for low, high in self.windows:
            at = self.started + self.random.uniform(low, high)
            if self._stop.wait(max(0.0, at - time.monotonic())):
                return
            began = time.monotonic()
            seconds = self.plane.restart_apiserver(progress=lambda _message: None)
            self.outage_until = time.monotonic()
            self.restarts.append(seconds)
            self.note("kube-apiserver restarted", seconds_until_ready=seconds, began=round(began - self.started, 2))


class TcpProxy:
    """Relays TCP connections from ``127.0.0.1:port`` to ``upstream()``; ``cut()`` drops them all.

    ``upstream`` is asked at every new connection, so the proxy can start before the API server's port is
    known. Two threads per connection; connections are few (the controller's pool and its watches).
    """

    def __init__(self, port: int, upstream: Callable[[], tuple[str, int]]) -> None:
        self.port = port
        self.upstream = upstream
        self.accepted = 0
        self.failed_upstream = 0
        self._lock = threading.Lock()
        self._live: set[tuple[socket.socket, socket.socket]] = set()
        self._listener = socket.create_server(("127.0.0.1", port), reuse_port=False)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="tcp-proxy", daemon=True)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        self.cut()

    def cut(self) -> int:
        """Drop every relayed connection (both directions, at once); returns how many there were."""
        with self._lock:
            pairs = list(self._live)
            self._live.clear()
        for pair in pairs:
            for sock in pair:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()
        return len(pairs)

    @property
    def live(self) -> int:
        with self._lock:
            return len(self._live)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream(), timeout=5)
                server.settimeout(None)
            except OSError:
                self.failed_upstream += 1
                client.close()
                continue
            pair = (client, server)
            with self._lock:
                self._live.add(pair)
                self.accepted += 1
            for source, target in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, target, pair), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, pair: tuple[socket.socket, socket.socket]) -> None:
        """Copy one direction; when either side ends, the whole connection ends (clients never half-close)."""
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                target.sendall(data)
        except OSError:
            pass
        with self._lock:
            self._live.discard(pair)
        for sock in pair:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()


class ConnectionCutter(Injector):
    """Cuts every connection through ``proxy`` every ``interval`` seconds (uniform), ``cuts`` times."""

    def __init__(self, proxy: TcpProxy, *, cuts: int, interval: tuple[float, float], seed: int) -> None:
        super().__init__(seed)
        self.proxy = proxy
        self.cuts = cuts
        self.interval = interval
        self.done_cuts = 0
        self.connections_cut = 0

    def run(self) -> None:
        while self.done_cuts < self.cuts and not self._stop.is_set():
            if self._stop.wait(self.random.uniform(*self.interval)):
                break
            dropped = self.proxy.cut()
            self.done_cuts += 1
            self.connections_cut += dropped
            self.note("cut all proxied connections", connections=dropped)


class OperatorNurse(Injector):
    """Every ``every`` seconds until stopped: restart the operator's work on Databases stuck ``Creating``.

    Stuck means: phase ``Creating`` with the same resourceVersion for ``stall`` seconds (a healthy one is
    ``Running`` about a second after creation).
    """

    def __init__(self, api: client.ApiClient, namespace: str, *, stall: float = 10.0, every: float = 2.0) -> None:
        super().__init__(seed=0)
        self.custom = client.CustomObjectsApi(api)
        self.namespace = namespace
        self.stall = stall
        self.every = every
        self.repairs = 0
        self._seen: dict[tuple[str, str], float] = {}

    def run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                listed = self.custom.list_namespaced_custom_object(
                    "demo.opbroker.io", "v1alpha1", self.namespace, "databases"
                )
            except Exception:  # the API may be down (that is the scenario): try again later
                self._seen.clear()  # a stall counts only while the API serves (the operator cannot act meanwhile)
                continue
            now = time.monotonic()
            for database in listed["items"]:
                meta = database["metadata"]
                if (database.get("status") or {}).get("phase") != "Creating":
                    continue
                first = self._seen.setdefault((meta["name"], meta["resourceVersion"]), now)
                if now - first < self.stall:
                    continue
                with contextlib.suppress(Exception):
                    self.custom.patch_namespaced_custom_object_status(
                        "demo.opbroker.io", "v1alpha1", self.namespace, "databases", meta["name"],
                        {"status": {"phase": None, "message": None}},
                    )  # fmt: skip
                    self.repairs += 1
                    self.note("demo operator stalled: Database phase reset", database=meta["name"])


class Supervisor(Injector):
    """Plays the kubelet: a process of the stack that exits by itself is started again, and the exit recorded.

    A crash is a finding (each one is reported with its exit code and last log lines); restarting it keeps
    the run measuring what a deployment (restartPolicy Always) would see afterwards.
    """

    def __init__(self, processes: list[Process], *, lock: threading.Lock, every: float = 1.0) -> None:
        super().__init__(seed=0)
        self.processes = processes
        self.lock = lock
        self.every = every

    def run(self) -> None:
        while not self._stop.wait(self.every):
            with self.lock:
                for process in self.processes:
                    if process.popen is None or process.running:
                        continue
                    code = process.popen.returncode
                    self.note("process exited by itself; restarted", process=process.name, exit_code=code,
                              log_tail=process.tail(6)[-1500:])  # fmt: skip
                    process.start()


class NotReadyApiserver:
    """A TLS server with the API server's own certificate that answers every request ``404 page not found``.

    That is what a kube-apiserver answers for custom resources in the first moments after it starts, before
    its CRD handlers are installed; :class:`TcpProxy` can point the controller here for a few seconds.
    """

    def __init__(self, certificate: Path, key: Path, port: int) -> None:
        self.port = port
        self.answered = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _not_found(self) -> None:
                outer.answered += 1
                body = b"404 page not found\n"
                self.send_response(404)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _not_found

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(certificate), str(key))
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self._thread = threading.Thread(target=self.server.serve_forever, name="not-ready-apiserver", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
