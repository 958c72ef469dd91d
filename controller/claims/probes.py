"""Built-in TCP and HTTP health probes, run by the controller on its loop with bounded timeouts.

A probe reaches the service the way a client would, with the service's own endpoint definition:

* ``host``, ``port`` (TCP) and ``url`` (HTTP) may refer to endpoint values as ``$(key)``, e.g.
  ``host: $(host)`` or ``url: http://$(host):$(port)/health``; a reference to an unknown key makes the
  check Undetermined (it cannot run), never Unreachable;
* HTTP probes authenticate with the endpoint's credentials: HTTP basic auth when it defines ``username``
  and ``password``, else ``Authorization: Bearer`` when it defines ``token``.

Results: connected / expected status → Passed. Refused, timed out, reset, TLS failure, unexpected
status, **and a host name that does not resolve** → Failed: the check ran and the service was not there
at the address it is registered with (a stale DNS name is an unreachable service, not a broken check).
An unusable check (bad URL after expansion, unknown ``$(key)``) → Undetermined. Messages name the host
and port only — never a URL path or query that could carry credentials.

Probes never block a reconcile: :class:`Prober` runs them as tasks on the controller's loop (asyncio's own
connections: no thread waits on a probe) and enqueues the service when a result is in; the reconcile consumes it.
A response's body is never read (a registered service could make it as large as it likes).
"""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from opbroker.api.primaza import HealthCheck
from opbroker.controller.claims.core.states import CheckOutcome, Result
from opbroker.controller.core.reasons import Reason
from opbroker.controller.runtime.concurrency import Lock
from opbroker.controller.runtime.keys import Key

_REFERENCE = re.compile(r"\$\(([A-Za-z0-9._-]+)\)")


class UnknownReference(ValueError):
    """A ``$(key)`` that the endpoint definition does not define."""


def expand(template: str, values: Mapping[str, str]) -> str:
    """Replace every ``$(key)`` by the endpoint value of ``key``."""

    def value_of(found: re.Match[str]) -> str:
        key = found.group(1)
        if key not in values:
            raise UnknownReference(f"$({key}) is not in the endpoint definition")
        return values[key]

    return _REFERENCE.sub(value_of, template)


@dataclass(frozen=True)
class TcpProbe:
    host: str
    port: int
    timeout: float


@dataclass(frozen=True)
class HttpProbe:
    url: str
    expected_status: int
    timeout: float
    auth: tuple[str, str] | None = None
    token: str | None = None


Probe = TcpProbe | HttpProbe


def probe_for(check: HealthCheck, values: Mapping[str, str], *, timeout: float) -> Probe | CheckOutcome:
    """The probe to run for a TCP/HTTP check, or an Undetermined outcome when it cannot be built."""
    try:
        if check.tcp is not None:
            return TcpProbe(host=expand(check.tcp.host, values), port=check.tcp.port, timeout=timeout)
        assert check.http is not None
        url = expand(check.http.url, values)
    except UnknownReference as exc:
        return CheckOutcome(Result.UNDETERMINED, Reason.CHECK_INVALID, str(exc))
    auth = (values["username"], values["password"]) if "username" in values and "password" in values else None
    token = values.get("token") if auth is None else None
    return HttpProbe(url=url, expected_status=check.http.expected_status, timeout=timeout, auth=auth, token=token)


def _where(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port}" if parts.port else str(parts.hostname)


async def run(probe: Probe) -> CheckOutcome:
    """Run one probe on the running loop (at most about ``timeout`` seconds; nothing of a response body is read)."""
    if isinstance(probe, TcpProbe):
        where = f"{probe.host}:{probe.port}"
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(probe.host, probe.port), probe.timeout)
        except socket.gaierror:
            return CheckOutcome(Result.FAILED, Reason.PROBE_FAILED, f"host {probe.host!r} does not resolve")
        except TimeoutError:
            return CheckOutcome(Result.FAILED, Reason.PROBE_FAILED, f"TCP connect to {where} timed out")
        except OSError as exc:
            return CheckOutcome(
                Result.FAILED, Reason.PROBE_FAILED, f"TCP connect to {where} failed: {exc.strerror or exc}"
            )
        writer.close()
        return CheckOutcome(Result.PASSED, Reason.HEALTHY, f"TCP connect to {where} succeeded")
    try:
        where = _where(probe.url)
    except ValueError as exc:
        return CheckOutcome(Result.UNDETERMINED, Reason.CHECK_INVALID, f"unusable URL: {exc}")
    headers = {"Authorization": f"Bearer {probe.token}"} if probe.token else None
    try:
        # The status line is all a probe needs: the body (a registered service's to make as large as it likes) is
        # never read — the stream is closed unread.
        async with (
            httpx.AsyncClient(timeout=probe.timeout, follow_redirects=False) as client,
            client.stream("GET", probe.url, auth=probe.auth, headers=headers) as response,
        ):
            status = response.status_code
    except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:
        return CheckOutcome(Result.UNDETERMINED, Reason.CHECK_INVALID, f"unusable URL: {type(exc).__name__}")
    except httpx.ConnectError as exc:
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, socket.gaierror) or "Name or service not known" in str(exc):
            return CheckOutcome(Result.FAILED, Reason.PROBE_FAILED, f"host of {where} does not resolve")
        return CheckOutcome(Result.FAILED, Reason.PROBE_FAILED, f"HTTP connect to {where} failed")
    except httpx.TimeoutException:
        return CheckOutcome(Result.FAILED, Reason.PROBE_FAILED, f"HTTP request to {where} timed out")
    except httpx.HTTPError as exc:
        return CheckOutcome(
            Result.FAILED, Reason.PROBE_FAILED, f"HTTP request to {where} failed ({type(exc).__name__})"
        )
    if status == probe.expected_status:
        return CheckOutcome(Result.PASSED, Reason.HEALTHY, f"HTTP {status} from {where}")
    return CheckOutcome(
        Result.FAILED, Reason.PROBE_FAILED, f"HTTP {status} from {where}, expected {probe.expected_status}"
    )


@dataclass(frozen=True)
class Finished:
    fingerprint: str
    outcome: CheckOutcome


class Prober:
    """Runs probes as tasks on the controller's loop (no thread of their own, none of the runtime's pool): at most
    ``workers`` at once, one at a time per key; results kept until taken. ``submit`` may be called from any thread
    (a reconcile's); ``on_done`` is called on the loop."""

    def __init__(
        self,
        on_done: Callable[[Key], None],
        loop: Callable[[], asyncio.AbstractEventLoop | None],
        *,
        workers: int = 8,
    ) -> None:
        self._on_done = on_done
        self._loop = loop
        """The loop the probes run on (the runtime's, once it started)."""
        self._bound = asyncio.Semaphore(workers)
        """At most ``workers`` probes at once (bound to the loop that first waits on it)."""
        self._lock = Lock()
        self._running: set[Key] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._finished: dict[Key, Finished] = {}

    def running(self, key: Key) -> bool:
        with self._lock:
            return key in self._running

    def submit(self, key: Key, fingerprint: str, probe: Probe) -> bool:
        """Start ``probe`` for ``key`` unless one is already running (or no loop runs yet); True if started."""
        loop = self._loop()
        if loop is None:
            return False
        with self._lock:
            if key in self._running:
                return False
            self._running.add(key)
        loop.call_soon_threadsafe(self._start, key, fingerprint, probe)
        return True

    def _start(self, key: Key, fingerprint: str, probe: Probe) -> None:
        task = asyncio.get_running_loop().create_task(self._run(key, fingerprint, probe), name=f"probe {key}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, key: Key, fingerprint: str, probe: Probe) -> None:
        try:
            async with self._bound:
                outcome = await run(probe)
        except asyncio.CancelledError:
            with self._lock:
                self._running.discard(key)
            raise
        except Exception as exc:  # a probe that crashes is an outcome, never a lost key
            outcome = CheckOutcome(Result.UNDETERMINED, Reason.CHECK_INVALID, f"probe crashed: {type(exc).__name__}")
        with self._lock:
            self._running.discard(key)
            self._finished[key] = Finished(fingerprint, outcome)
        self._on_done(key)

    def take(self, key: Key) -> Finished | None:
        with self._lock:
            return self._finished.pop(key, None)

    def forget(self, key: Key) -> None:
        with self._lock:
            self._finished.pop(key, None)

    def shutdown(self) -> None:
        """Cancel the probes running (call on the loop)."""
        for task in list(self._tasks):
            task.cancel()
