"""The project's own transport to the API server (``kubeclient.transport``, issue 45), against an HTTP server in this
process that records what it receives and answers as it is told (stalling, streaming, refusing).

Aspects: each lean request reaches the server as the official client sent it (method, path, query, body, content
type, accept, credentials, user agent, no compression asked for); a host with a path keeps it; an error answer is
the official client's exception with its body and headers, a redirect an error answer (not followed); every answer
is reported; one connection carries requests made one after the other, a burst dials what it needs and the
pool keeps its size; the deadlines — a request's read, a watch's (its server-side seconds plus a quarter, at
least one), the official ``_request_timeout`` forms — and the one retry of a failed idempotent read (none for a
create); a refused dial is ``Unreachable`` (a ``ConnectionError``) and a
passed read deadline ``DeadlinePassed`` (what ``deadlines.timed_out`` tells apart); a stream's lines bounded in size
and split across chunks; an abort from another thread ends a blocked read at once, as the official ``Watch.stop``
(its ``connection.sock``) does.
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpcore
import pytest
from kubernetes import client, watch
from kubernetes.client import exceptions

from opbroker.kubeclient import deadlines, transport
from opbroker.kubeclient.lean import LeanCustomObjects
from opbroker.kubeclient.timeouts import Timeouts
from tests.transport_support import Dials

Received = tuple[str, str, bytes, dict[str, str], int]
FIRST = b'{"type":"ADDED","object":{"metadata":{"name":"a"}}}'
SECOND = b'{"type":"MODIFIED","object":{"metadata":{"name":"b"}}}'
HEADERS = ("Content-Type", "Accept", "User-Agent", "Authorization", "Accept-Encoding", "Impersonate-User")


class _Server(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    received: list[Received]
    release: threading.Event

    def _answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {name: self.headers[name] for name in HEADERS if name in self.headers}
        self.received.append((self.command, self.path, body, headers, self.client_address[1]))
        if "/stall" in self.path:
            self.release.wait(10)
            return
        if "/stream" in self.path:
            self._stream()
            return
        if "/slow" in self.path:
            time.sleep(0.3)
        status, answer = 200, b'{"ok": true}'
        if "/missing" in self.path:
            status, answer = 404, b'{"kind": "Status", "code": 404}'
        elif "/moved" in self.path:
            status, answer = 302, b"{}"
        self.send_response(status)
        if status == 302:
            self.send_header("Location", "/elsewhere")
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Answer", "told")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def _stream(self) -> None:
        """Two watch events in two chunks (the second split across them), then a line of 64 bytes if asked
        (``long``), then a stall (``hold``)."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        chunks = [FIRST + b"\n" + SECOND[:20], SECOND[20:] + b"\n"]
        if "long" in self.path:
            chunks.append(b"x" * 64 + b"\n")
        for chunk in chunks:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
        if "hold" in self.path:
            self.release.wait(10)
        self.wfile.write(b"0\r\n\r\n")

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _answer

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, list[Received]]]:
    received: list[Received] = []
    release = threading.Event()
    handler = type("Server", (_Server,), {"received": received, "release": release})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", received
    finally:
        release.set()
        httpd.shutdown()
        httpd.server_close()


def configuration(host: str) -> client.Configuration:
    made = client.Configuration(host=host)
    made.api_key = {"authorization": "token-1"}
    made.api_key_prefix = {"authorization": "Bearer"}
    return made


def lean_for(host: str, timeouts: Timeouts = deadlines.DEFAULT_TIMEOUTS) -> LeanCustomObjects:
    return LeanCustomObjects(deadlines.bounded(configuration(host), timeouts=timeouts, user_agent="opbroker-test"))


CALLS = [
    ("GET", "/apis/g.io/v1/things?labelSelector=a%3Db&limit=5", None, None),
    ("PATCH", "/apis/g.io/v1/namespaces/n/things/a/status", {"status": {"state": "ok", "n": 1}}, "merge"),
    ("PATCH", "/apis/g.io/v1/namespaces/n/things/a", [{"op": "test", "path": "/a", "value": "é"}], "json"),
    ("PATCH", "/api/v1/namespaces/n/secrets/s?fieldManager=opbroker&force=true", {"data": {"k": "dg=="}}, "apply"),
    ("POST", "/api/v1/namespaces/n/events", {"reason": "Provisioned", "count": 1}, "create"),
    ("DELETE", "/api/v1/namespaces/n/secrets/s", {"preconditions": {"uid": "u-1"}}, "create"),
]
CONTENT_TYPES = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "apply": "application/apply-patch+yaml",
    "create": "application/json",
}


@pytest.mark.parametrize(("method", "path", "body", "kind"), CALLS)
def test_a_request_reaches_the_server_as_the_official_client_sent_it(
    server: tuple[str, list[Received]], method: str, path: str, body: Any, kind: str | None
) -> None:
    host, received = server
    lean = lean_for(host)
    plain, _, query = path.partition("?")
    pairs = [tuple(pair.split("=", 1)) for pair in query.split("&")] if query else []
    decoded = [(key, value.replace("%3D", "=")) for key, value in pairs]
    content = {} if kind is None else {"content_type": CONTENT_TYPES[kind]}
    assert lean.request(method, plain, query=decoded, body=body, **content) == {"ok": True}
    ((got_method, got_path, got_body, headers, _),) = received
    assert (got_method, got_path) == (method, path)
    assert (json.loads(got_body) if got_body else None) == body
    assert headers.get("Content-Type") == (CONTENT_TYPES[kind] if kind else None)
    assert headers["Accept"] == "application/json"
    assert headers["Authorization"] == "Bearer token-1"
    assert headers["User-Agent"] == "opbroker-test"
    assert "Accept-Encoding" not in headers  # the API server compresses nothing: as the official client asked


def test_a_host_with_a_path_keeps_it_and_default_headers_are_read_at_each_request(
    server: tuple[str, list[Received]],
) -> None:
    host, received = server
    api = deadlines.bounded(configuration(host + "/prefix/"))
    lean = LeanCustomObjects(api)
    lean.request("GET", "/api/v1/namespaces/n")
    api.set_default_header("Impersonate-User", "someone")  # type: ignore[no-untyped-call]
    lean.request("GET", "/api/v1/namespaces/n")
    assert [r[1] for r in received] == ["/prefix/api/v1/namespaces/n"] * 2
    assert "Impersonate-User" not in received[0][3] and received[1][3]["Impersonate-User"] == "someone"


def test_an_error_answer_is_the_official_exception_and_a_redirect_is_not_followed(
    server: tuple[str, list[Received]],
) -> None:
    host, received = server
    answered: list[int] = []
    api = deadlines.bounded(configuration(host), on_answer=lambda: answered.append(1))
    lean = LeanCustomObjects(api)
    with pytest.raises(exceptions.NotFoundException) as missing:
        lean.get_namespaced_custom_object("g.io", "v1", "n", "things", "missing")
    assert missing.value.status == 404 and json.loads(missing.value.body)["code"] == 404
    assert missing.value.headers["x-answer"] == "told" and missing.value.headers["X-Answer"] == "told"
    with pytest.raises(exceptions.ApiException) as moved:
        lean.get_namespaced_custom_object("g.io", "v1", "n", "things", "moved")
    assert moved.value.status == 302
    assert len(received) == 2, "the redirect was not followed"
    lean.get_namespaced_custom_object("g.io", "v1", "n", "things", "there")
    assert len(answered) == 3, "every answer, error or not, is reported"


def test_requests_one_after_the_other_share_one_connection(server: tuple[str, list[Received]]) -> None:
    host, received = server
    lean = lean_for(host)
    for n in range(20):
        lean.request("POST" if n % 2 else "GET", "/api/v1/namespaces/n/events", body={"n": n} if n % 2 else None)
    assert len({port for *_, port in received}) == 1


def test_a_burst_dials_what_it_needs_and_the_pool_keeps_its_size(server: tuple[str, list[Received]]) -> None:
    """Three requests at once on a pool keeping one: none waits for another's connection (three dials, as
    urllib3's non-blocking pool did); one connection is kept after, and the next request reuses it."""
    host, received = server
    api = deadlines.bounded(configuration(host))
    dials = Dials()
    made = transport.transport_of(api, connections=1, backend=dials)
    lean = LeanCustomObjects(api, transport=made)
    threads = [threading.Thread(target=lean.request, args=("GET", "/slow")) for _ in range(3)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert time.monotonic() - started < 0.8, "the three answers came together, not one after the other"
    assert dials.count == 3 and len(received) == 3
    lean.request("GET", "/fast")
    assert dials.count == 3, "the connection kept was reused"
    made.close()


def test_a_stalled_read_passes_its_deadline_and_an_idempotent_one_is_retried_once(
    server: tuple[str, list[Received]],
) -> None:
    host, received = server
    lean = lean_for(host, Timeouts(connect=1.0, request=0.3))
    started = time.monotonic()
    with pytest.raises(transport.DeadlinePassed) as passed:
        lean.request("GET", "/stall")
    assert 0.5 <= time.monotonic() - started < 3.0, "two reads of 0.3 s"
    assert deadlines.timed_out(passed.value) and isinstance(passed.value, ConnectionError | TimeoutError)
    assert [r[0] for r in received] == ["GET", "GET"]
    received.clear()
    with pytest.raises(transport.DeadlinePassed):
        lean.request("POST", "/stall", body={})
    assert [r[0] for r in received] == ["POST"], "a create is never sent twice"


def test_a_watch_read_waits_its_server_side_seconds_and_a_quarter(server: tuple[str, list[Received]]) -> None:
    host, _ = server
    lean = lean_for(host, Timeouts(connect=1.0, request=0.2))
    stream = lean.request("GET", "/stream-hold", query=[("watch", True), ("timeoutSeconds", 1)], stream=True)
    started = time.monotonic()
    with pytest.raises(transport.DeadlinePassed):
        list(stream.lines())
    assert 1.8 <= time.monotonic() - started < 4.0, "1 s + max(1 s, a quarter): not the request's 0.2 s"


@pytest.mark.parametrize(
    ("given", "want"),
    [
        (None, (10.0, 60.0)),
        ((2, 7), (2.0, 7.0)),
        (5, (5.0, 5.0)),
    ],
)
def test_the_official_request_timeout_forms(server: tuple[str, list[Received]], given: Any, want: Any) -> None:
    host, _ = server
    seen: list[tuple[float, float]] = []

    class Record:
        def handle_request(self, request: httpcore.Request) -> httpcore.Response:
            timeout = request.extensions["timeout"]
            seen.append((timeout["connect"], timeout["read"]))
            return httpcore.Response(200, content=b"{}")

    api = deadlines.bounded(configuration(host))
    lean = LeanCustomObjects(api, transport=transport.transport_of(api, network=Record()))
    lean.get_namespaced_custom_object("g.io", "v1", "n", "things", "a", _request_timeout=given)
    lean.list_cluster_custom_object("g.io", "v1", "things", watch=True, timeout_seconds=40, _preload_content=False)
    assert seen == [want, (10.0, 50.0)]


def test_a_refused_dial_is_unreachable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    api = deadlines.bounded(configuration(f"http://127.0.0.1:{port}"))
    api.configuration.retries = 0
    with pytest.raises(transport.Unreachable) as refused:
        LeanCustomObjects(api).request("GET", "/version")
    assert isinstance(refused.value, ConnectionError) and not deadlines.timed_out(refused.value)


def test_lines_are_split_across_chunks_and_bounded(server: tuple[str, list[Received]]) -> None:
    host, _ = server
    lean = lean_for(host)
    assert list(lean.request("GET", "/stream", stream=True).lines()) == [FIRST, SECOND]
    lines = lean.request("GET", "/stream-long", stream=True).lines(limit=60)
    assert next(lines) == FIRST and next(lines) == SECOND  # 52 and 54 bytes
    with pytest.raises(ValueError, match="over 60 bytes"):
        next(lines)  # 64 bytes, arrived whole in one chunk


def test_an_abort_from_another_thread_ends_a_blocked_read_at_once(server: tuple[str, list[Received]]) -> None:
    host, _ = server
    lean = lean_for(host)
    stream = lean.request("GET", "/stream-hold", query=[("watch", True)], stream=True)
    lines = stream.lines()
    assert next(lines) == FIRST and next(lines) == SECOND
    threading.Timer(0.2, stream.abort).start()
    started = time.monotonic()
    assert list(lines) == [], "the aborted stream ends, without an error"
    assert time.monotonic() - started < 2.0, "not at the watch's deadline (75 s) nor the server's release (10 s)"


def test_the_official_watch_stops_a_stream_of_the_transport(server: tuple[str, list[Received]]) -> None:
    """``Watch.stop`` shuts the answer's ``connection.sock`` down from another thread: the stream ends at once."""
    host, _ = server
    lean = lean_for(host)
    stream = watch.Watch()
    events = stream.stream(lean.list_cluster_custom_object, "g.io", "v1", "stream-hold", timeout_seconds=30)
    assert next(events)["type"] == "ADDED"  # the stream is open, its next read blocked
    threading.Timer(0.2, stream.stop).start()
    started = time.monotonic()
    for _ in events:
        pass
    assert time.monotonic() - started < 2.0
