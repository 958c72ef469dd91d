"""The broker's HTTP edge against hostile clients and a stuck API server (issue 25): metric labels bounded
whatever the method and path, request heads bounded in bytes and in time, ``/metrics`` behind the broker's
credentials or on a port of its own, and health endpoints that answer while every request thread hangs.
"""

# ruff: noqa: F811  (test functions take the imported fixtures as arguments)

from __future__ import annotations

import base64
import contextlib
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from kubernetes import client

from opbroker.broker.metrics import METHODS, OTHER
from opbroker.broker.server import BackgroundServer, server
from opbroker.broker.settings import Settings
from opbroker.devcluster import ControlPlane
from opbroker.devcluster.controlplane import free_ports
from tests.broker_support import (  # noqa: F401  (pytest fixtures)
    PASSWORD,
    USERNAME,
    Harness,
    broker,
    start_broker,
    wait_for,
)

AUTH = (USERNAME, PASSWORD)
SERIES = re.compile(r"^(\w+)\{(.*)\} ", re.MULTILINE)
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def exchange(port: int, head: bytes, timeout: float = 30.0) -> bytes:
    """Send a raw request head on a new connection; what came back before the broker closed it (or reset)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        answer = b""
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):
            sock.sendall(head)
            while chunk := sock.recv(65536):
                answer += chunk
        return answer


def head(method: str, path: str, *extra: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: broker", "Connection: close", *extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def label_values(exposition: str) -> dict[str, set[str]]:
    values: dict[str, set[str]] = {}
    for _name, labels in SERIES.findall(exposition):
        for key, value in LABEL.findall(labels):
            values.setdefault(key, set()).add(value)
    return values


# -- metrics cardinality: a method flood against a broker process ----------------------------------------------


@pytest.fixture
def broker_process(control_plane: ControlPlane, broker: Harness, tmp_path: Path) -> Iterator[tuple[int, int]]:
    """``opbroker broker serve`` as its own process (its RSS is the broker's alone); yields (pid, port)."""
    (port,) = free_ports(1)
    env = {**os.environ, "OPBROKER_BROKER_USERNAME": USERNAME, "OPBROKER_BROKER_PASSWORD": PASSWORD}
    log = (tmp_path / "broker.log").open("w")
    command = [sys.executable, "-m", "opbroker.cli.main", "broker", "serve", "--port", str(port)]
    command += ["--kubeconfig", str(control_plane.kubeconfig), "--namespace", broker.namespace]
    process = subprocess.Popen([*command, "--log-level", "warning"], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:

        def ready() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(ready, timeout=60, what="the broker process to be ready")
        yield process.pid, port
    finally:
        process.terminate()
        process.wait(timeout=20)
        log.close()


def test_a_method_flood_leaves_metrics_and_memory_bounded(broker_process: tuple[int, int]) -> None:
    """Issue 25: 50 requests with 250 KB method names made one ``GET /metrics`` 250 MB and the broker's RSS went
    from 86 to 865 MB (its limit is 256 Mi). Here: 400 unauthenticated requests with distinct 8 KB methods, to an
    OSB route and to random paths, then the 250 KB ones; /metrics stays small, its labels come from fixed sets,
    and the process grows by a few MiB at most."""
    pid, port = broker_process
    url = f"http://127.0.0.1:{port}"
    for _ in range(20):  # warm up: every code path once, so growth afterwards is the flood's
        httpx.get(url + "/v2/catalog", auth=AUTH, headers={"X-Broker-API-Version": "2.17"})
        exchange(port, head("GET", "/no/such/path"))
        httpx.get(url + "/metrics", auth=AUTH)
    before = rss_kib(pid)

    for i in range(400):
        method = f"M{i:04d}" + "X" * 8000
        path = "/v2/catalog" if i % 2 else f"/random/{i}/{'p' * 200}"
        answer = exchange(port, head(method, path))
        assert answer.startswith(b"HTTP/1.1 "), answer[:100]
    for i in range(50):
        exchange(port, head(f"B{i:02d}" + "Y" * 250_000, "/v2/catalog"))  # refused (400) or reset: too large

    metrics = httpx.get(url + "/metrics", auth=AUTH)
    assert metrics.status_code == 200
    assert len(metrics.content) < 64 * 1024, f"/metrics is {len(metrics.content)} bytes"
    text = metrics.text
    series = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert len(series) < 300, f"{len(series)} series"
    labels = label_values(text)
    assert labels["method"] <= METHODS | {OTHER}, sorted(labels["method"])[:5]
    assert OTHER in labels["method"] and "unmatched" in labels["endpoint"]
    assert max(len(value) for values in labels.values() for value in values) < 100
    # The flood was counted: 200 unauthenticated OSB requests (an unknown method matches no route), 200 to no route.
    assert re.search(r'opbroker_broker_requests_total\{code="401",endpoint="unmatched",method="other"\} 200', text)
    assert re.search(r'opbroker_broker_requests_total\{code="404",endpoint="unmatched",method="other"\} 200', text)
    growth = rss_kib(pid) - before
    assert growth < 20 * 1024, f"RSS grew by {growth} KiB"
    assert httpx.get(url + "/healthz").status_code == 200


# -- request heads: bounded in bytes and in time -----------------------------------------------------------------


def test_an_oversize_request_head_is_refused_before_the_app(broker: Harness) -> None:
    """A head above the limit (default 16 KiB) is refused by the HTTP parser: the app never answers it (no OSB
    body, not counted), whether the client sees the 400 or a reset. Just under the limit, the app answers."""
    port = int(broker.url.rsplit(":", 1)[1])
    limit = broker.settings.max_request_head_bytes
    assert limit == 16 * 1024
    credentials = "Authorization: Basic " + base64.b64encode(f"{USERNAME}:{PASSWORD}".encode()).decode()
    version = "X-Broker-API-Version: 2.17"
    within = exchange(port, head("GET", "/v2/catalog", credentials, version, "X-Padding: " + "p" * (limit - 1024)))
    assert within.startswith(b"HTTP/1.1 200 "), within[:200]
    for padding in (limit + 1, 64 * 1024, 250_000):
        refused = exchange(port, head("GET", "/v2/catalog", credentials, version, "X-Padding: " + "p" * padding))
        assert refused == b"" or refused.startswith(b"HTTP/1.1 400 "), refused[:200]
        assert b"services" not in refused and b'"error"' not in refused
        assert refused == b"" or b"content-type: application/json" in refused.lower()  # an OSB error body
    refused_method = exchange(port, head("M" * (limit + 1), "/v2/catalog"))
    assert refused_method == b"" or refused_method.startswith(b"HTTP/1.1 400 "), refused_method[:200]
    metrics = httpx.get(broker.url + "/metrics", auth=AUTH).text
    assert 'method="other"' not in metrics  # the refused method never reached the app


def test_a_connection_without_a_complete_head_is_closed_at_the_deadline(
    api_client: client.ApiClient, broker: Harness
) -> None:
    """uvicorn gives a request head no deadline: a connection sending nothing, or half a head, was held for
    ever (one file descriptor and up to 16 KiB each). The broker closes it after ``request_head_timeout``, and
    again after each response of a kept-alive connection."""
    harness = start_broker(api_client, broker.namespace, request_head_timeout=1.0, namespace_index=False)
    port = int(harness.url.rsplit(":", 1)[1])
    try:
        idle = socket.create_connection(("127.0.0.1", port), timeout=15)
        partial = socket.create_connection(("127.0.0.1", port), timeout=15)
        partial.sendall(b"GET /healthz HTTP/1.1\r\nHost: broker\r\n")  # no blank line: the head never ends
        kept = socket.create_connection(("127.0.0.1", port), timeout=15)
        kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: broker\r\n\r\n")
        answered = b""
        while b'{"status":"ok"}' not in answered:  # headers and body may come in two reads
            answered += kept.recv(65536)
        assert answered.startswith(b"HTTP/1.1 200 ")
        kept.sendall(b"GET /healthz HTTP/1.1\r\n")  # the next request's head, half sent
        started = time.monotonic()
        for sock in (idle, partial, kept):
            with sock:
                assert sock.recv(65536) == b""  # closed by the broker (a timeout here raises)
        assert time.monotonic() - started < 14
        # A client that sends its head in time is served as before.
        assert httpx.get(harness.url + "/healthz").json() == {"status": "ok"}
    finally:
        harness.background.stop()


# -- /metrics: with the broker's credentials, or on a port of its own ---------------------------------------------


def test_metrics_need_the_brokers_credentials_by_default(broker: Harness) -> None:
    anonymous = httpx.get(broker.url + "/metrics")
    assert anonymous.status_code == 401 and anonymous.headers["WWW-Authenticate"].startswith("Basic")
    assert "opbroker_broker" not in anonymous.text
    assert httpx.get(broker.url + "/metrics", auth=(USERNAME, "wrong")).status_code == 401
    served = httpx.get(broker.url + "/metrics", auth=AUTH)
    assert served.status_code == 200 and "opbroker_broker_requests_total" in served.text
    # No API version header needed: Prometheus sends none.
    assert "X-Broker-API-Version" not in served.request.headers


def test_metrics_on_a_port_of_their_own(api_client: client.ApiClient, broker: Harness) -> None:
    (metrics_port,) = free_ports(1)
    harness = start_broker(api_client, broker.namespace, metrics_port=metrics_port, metrics_host="127.0.0.1")
    try:
        with harness.client() as osb:
            assert osb.get("/v2/catalog").status_code == 200
            assert osb.get("/metrics").status_code == 404  # not on the OSB port, even with credentials
        scraped = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics")
        assert scraped.status_code == 200
        assert 'opbroker_broker_requests_total{code="200",endpoint="/v2/catalog",method="GET"} 1.0' in scraped.text
    finally:
        harness.background.stop()
    with pytest.raises(httpx.TransportError):  # stopped with the broker
        httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=2)


def test_anonymous_metrics_when_asked_for(api_client: client.ApiClient, broker: Harness) -> None:
    harness = start_broker(api_client, broker.namespace, metrics_authentication=False, namespace_index=False)
    try:
        assert httpx.get(harness.url + "/metrics").status_code == 200
    finally:
        harness.background.stop()


# -- health while every request thread hangs ------------------------------------------------------------------------


class Blackhole:
    """A TCP server that accepts connections and never answers (a hung API server, or a network path that
    drops everything after the handshake). ``release`` closes it all: then every call fails at once."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.held: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            self.held.append(connection)

    def release(self) -> None:
        self.listener.close()
        for connection in self.held:
            connection.close()


def test_health_answers_while_every_request_thread_hangs() -> None:
    """Sync routes run on anyio's thread pool (40 threads). With the API server hung, 48 OSB requests hold every
    thread; liveness still answers at once, and readiness answers "not ready" within its deadline instead of
    waiting for a thread (the kubelet would see a timeout and restart a broker that is only waiting)."""
    hole = Blackhole()
    configuration = client.Configuration(host=f"https://127.0.0.1:{hole.port}")
    configuration.verify_ssl = False
    configuration.connection_pool_maxsize = 64
    settings = Settings(username=USERNAME, password=PASSWORD, namespace_index=False, readiness_deadline=1.0)
    (port,) = free_ports(1)
    background = BackgroundServer(
        server(settings, client.ApiClient(configuration), host="127.0.0.1", port=port, log_level="error")
    )
    background.start()
    url = f"http://127.0.0.1:{port}"
    pool = ThreadPoolExecutor(48)
    osb = httpx.Client(base_url=url, auth=AUTH, headers={"X-Broker-API-Version": "2.17"}, timeout=120)
    probe = httpx.Client(base_url=url, timeout=5)  # the kubelet's patience is 2 s; 5 s is generous
    try:
        # Polls of 48 instances: a GET each (catalog requests would share one read of the catalog).
        hung = [
            pool.submit(lambda i=i: osb.get(f"/v2/service_instances/hung-{i}/last_operation").status_code)
            for i in range(48)
        ]
        wait_for(lambda: len(hole.held) >= 40, timeout=30, what="every request thread to wait on the API server")
        alive = probe.get("/healthz")
        assert alive.status_code == 200 and alive.json() == {"status": "ok"}
        for _ in range(3):  # each probe: the one check still out, not another thread
            ready = probe.get("/readyz")
            assert ready.status_code == 503 and "within 1 s" in ready.json()["description"], ready.text
        assert not any(future.done() for future in hung)  # the pool was still exhausted throughout
        hole.release()
        assert {future.result(timeout=60) for future in hung} <= {500, 503}
    finally:
        hole.release()
        pool.shutdown(wait=False, cancel_futures=True)
        background.stop()
        osb.close()
        probe.close()
