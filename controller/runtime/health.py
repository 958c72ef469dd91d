"""The controller's health, as its pod's probes see it: ``/healthz`` (liveness), ``/readyz`` (readiness), and
the Prometheus ``/metrics``, all on the metrics port.

:class:`Health` is the state the process reports (pure, with an injectable clock):

* **waiting** — before the controller starts, the API server does not serve every resource the controller watches yet
  (a starting kube-apiserver, CRDs not installed). Alive (the wait is bounded by itself), not ready.
* **standby** — the API is served and the replica campaigns for the lease without holding it. Alive and
  ready: a healthy standby must not count against the disruption budget, nor hold up a rollout.
* **running** — the controller's event loop runs (:mod:`.runtime.lifecycle`) and proves it with a heartbeat.
  Alive and ready while the heartbeat is fresh; a heartbeat older than ``stale_after`` (an event loop that hangs)
  is not alive.
* **stopped** — the controller is stopping on a signal, or its loop has ended unasked (it failed). Not alive, not
  ready; the process exits right after, and the probe catches the case where it would not.

Checks added with :meth:`Health.add_check` refine the picture in the standby and running phases: a *liveness*
check (workers stuck: :meth:`opbroker.controller.runtime.Runtime.stuck`; the API server silent past the
stuck bound: :class:`opbroker.controller.runtime.contact.ApiContact`) makes the process not alive — a restart re-dials
and re-lists; a *readiness* check (the API server silent past a probe period or two) only makes it not ready.

The server runs in every replica, the standby's included (only the leader runs the controller's loop).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

logger = logging.getLogger(__name__)

#: What the server answers (the ControlPlane component's probes point at the last two).
PATHS = ("/metrics", "/healthz", "/readyz")
#: How often the controller's event loop beats while it runs.
HEARTBEAT_SECONDS = 5.0
#: A heartbeat older than this means the controller's event loop no longer runs (liveness fails).
STALE_AFTER_SECONDS = 60.0


#: A check: None when fine, else why not.
Check = Callable[[], str | None]


@dataclass(frozen=True)
class _Check:
    check: Check
    liveness: bool


class Phase(Enum):
    WAITING = "waiting"
    STANDBY = "standby"
    RUNNING = "running"
    STOPPED = "stopped"


class Health:
    """What the probes report. Thread-safe: written by the main thread, the leader thread and the event loop,
    read by the HTTP server's threads."""

    def __init__(
        self, *, stale_after: float = STALE_AFTER_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._stale_after = stale_after
        self._phase = Phase.WAITING
        self._detail = "waiting for the API server"
        self._beat = clock()
        self._checks: list[_Check] = []

    def add_check(self, check: Check, *, liveness: bool) -> None:
        """Consult ``check`` while standing by or running: for liveness (a failing one also fails readiness)
        or for readiness only."""
        with self._lock:
            self._checks.append(_Check(check, liveness))

    def _failing(self, *, liveness: bool) -> str | None:
        with self._lock:
            if self._phase not in (Phase.STANDBY, Phase.RUNNING):
                return None
            checks = [c.check for c in self._checks if c.liveness or not liveness]
        for check in checks:
            problem = check()
            if problem:
                return problem
        return None

    @property
    def phase(self) -> Phase:
        with self._lock:
            return self._phase

    def waiting(self, detail: str) -> None:
        self._set(Phase.WAITING, detail)

    def standby(self) -> None:
        self._set(Phase.STANDBY, "standing by (another replica leads)")

    def running(self) -> None:
        self._set(Phase.RUNNING, "the controller's loop is running")

    def stopped(self, detail: str = "the controller's loop has stopped") -> None:
        self._set(Phase.STOPPED, detail)

    def beat(self) -> None:
        with self._lock:
            self._beat = self._clock()

    def liveness(self) -> tuple[bool, str]:
        """(alive, why): the process does what it should, or is on a bounded way to it."""
        with self._lock:
            if self._phase is Phase.STOPPED:
                return False, self._detail
            if self._phase is Phase.RUNNING:
                age = self._clock() - self._beat
                if age > self._stale_after:
                    return False, f"the controller's event loop has not beaten for {age:.0f} s"
            fine = f"{self._phase.value}: {self._detail}"
        problem = self._failing(liveness=True)
        return (False, problem) if problem else (True, fine)

    def readiness(self) -> tuple[bool, str]:
        """(ready, why): alive, and past waiting for the API server."""
        alive, why = self.liveness()
        if not alive:
            return False, why
        problem = self._failing(liveness=False)
        if problem:
            return False, problem
        with self._lock:
            return self._phase is not Phase.WAITING, f"{self._phase.value}: {self._detail}"

    def _set(self, phase: Phase, detail: str) -> None:
        with self._lock:
            self._phase = phase
            self._detail = detail
            self._beat = self._clock()


class _Handler(BaseHTTPRequestHandler):
    health: Health  # set on the subclass made by serve()

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._answer(200, generate_latest(REGISTRY), CONTENT_TYPE_LATEST)
        elif path == "/healthz":
            self._probe(self.health.liveness())
        elif path == "/readyz":
            self._probe(self.health.readiness())
        else:
            self._answer(404, b"not found: try /metrics, /healthz or /readyz\n")

    def _probe(self, verdict: tuple[bool, str]) -> None:
        ok, why = verdict
        self._answer(200 if ok else 503, f"{'ok' if ok else 'unhealthy'}: {why}\n".encode())

    def _answer(self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # probes every few seconds are not worth a log line


def serve(health: Health, port: int, host: str = "0.0.0.0") -> ThreadingHTTPServer:
    """Serve /metrics, /healthz and /readyz on ``host:port`` from a daemon thread."""
    handler = type("HealthHandler", (_Handler,), {"health": health})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="health-server", daemon=True).start()
    logger.info("serving /metrics, /healthz and /readyz on %s:%d", host, server.server_address[1])
    return server
