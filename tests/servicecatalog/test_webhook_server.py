"""The admission webhook's HTTPS server and answers, without a cluster (issue 25, item 6): a real TLS server on a
local port, attacked as a client that stalls, drips, or sends too much.

* connections that never start or never finish their TLS handshake hold up no review, and are dropped at the
  handshake deadline;
* a body over the limit is refused on its Content-Length before it is read (and a chunked one as it grows), a
  head over the limit likewise; bodies read at once are bounded in total; connections are capped;
* a request dripping in is cut off at the read deadline;
* the answer comes from the Bindings index, and not before it is synced;
* the shared certificate is renewed from the same CA when due, or when a host is missing.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import socket
import ssl
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from opbroker.controller.servicecatalog import webhook, webhookcerts
from opbroker.controller.servicecatalog.bindingrefs import BindingRef, BindingRefs
from opbroker.controller.servicecatalog.reviewserver import Answer, Limits, ReviewServer
from tests.loop_support import loop_in_thread

NOW = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
#: The start of a TLS ClientHello record (content type 22, TLS 1.0 record version, 512 bytes announced).
HELLO_START = bytes([22, 3, 1, 2, 0, 1, 0, 1, 252, 3, 3])

Make = Callable[..., ReviewServer]


@pytest.fixture(scope="module")
def bundle() -> webhookcerts.Bundle:
    return webhookcerts.issue(["127.0.0.1"], now=datetime.datetime.now(datetime.UTC))


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """The loop the servers serve on (the controller's, in the product)."""
    with loop_in_thread() as running:
        yield running


def serve(
    bundle: webhookcerts.Bundle, limits: Limits, loop: asyncio.AbstractEventLoop, answer: Answer | None = None
) -> ReviewServer:
    with tempfile.TemporaryDirectory() as folder:
        cert, key = Path(folder, "tls.crt"), Path(folder, "tls.key")
        cert.write_bytes(bundle.cert)
        key.write_bytes(bundle.key)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
    server = ReviewServer(0, context, "/review", answer or (lambda body: (200, body)), limits=limits, host="127.0.0.1")
    server.start(loop)
    return server


@pytest.fixture
def make(bundle: webhookcerts.Bundle, loop: asyncio.AbstractEventLoop) -> Iterator[Make]:
    started: list[ReviewServer] = []

    def start(limits: Limits, answer: Answer | None = None) -> ReviewServer:
        server = serve(bundle, limits, loop, answer)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def tls(bundle: webhookcerts.Bundle, port: int, timeout: float = 5.0) -> ssl.SSLSocket:
    context = ssl.create_default_context(cadata=bundle.ca_cert.decode())
    raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    return context.wrap_socket(raw, server_hostname="127.0.0.1")


def post(body: bytes, path: str = "/review", extra: bytes = b"") -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\n"
    return head.encode() + extra + f"Content-Length: {len(body)}\r\n\r\n".encode() + body


def answer_of(sock: ssl.SSLSocket) -> tuple[int, bytes]:
    """One HTTP response (status, body) read off ``sock``."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed after {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    while len(body) < length:
        body += sock.recv(65536)
    return int(head.split(b" ")[1]), body


def closed(sock: socket.socket, within: float) -> bool:
    """Whether the peer closes ``sock`` within ``within`` seconds (reading whatever it sends first)."""
    sock.settimeout(within)
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return False
    except OSError:
        return True
    return True


def test_stalled_connections_hold_up_no_review_and_are_dropped_at_the_handshake_deadline(
    make: Make, bundle: webhookcerts.Bundle
) -> None:
    """The first webhook handshook in its accept loop: one idle connection made every review wait for ever.
    Here an idle connection, and one that stops mid-ClientHello, change nothing for the next client."""
    server = make(Limits(handshake_seconds=1.0))
    idle = socket.create_connection(("127.0.0.1", server.port))
    halfway = socket.create_connection(("127.0.0.1", server.port))
    halfway.sendall(HELLO_START)
    started = time.monotonic()
    with tls(bundle, server.port, timeout=0.9) as sock:  # well within the stalled handshakes' deadline
        sock.sendall(post(b'{"a": 1}'))
        assert answer_of(sock) == (200, b'{"a": 1}')
    assert time.monotonic() - started < 0.9
    assert closed(idle, within=3.0) and closed(halfway, within=3.0)  # dropped at the deadline, not kept
    idle.close()
    halfway.close()


def test_an_oversize_body_is_refused_on_its_length_before_it_is_read(make: Make, bundle: webhookcerts.Bundle) -> None:
    seen: list[int] = []

    def answer(body: bytes) -> tuple[int, bytes]:
        seen.append(len(body))
        return 200, b"{}"

    server = make(Limits(max_body_bytes=1024), answer)
    with tls(bundle, server.port) as sock:
        # Only the head is sent: the refusal must not wait for 100 MiB that never come.
        sock.sendall(b"POST /review HTTP/1.1\r\nHost: webhook\r\nContent-Length: 104857600\r\n\r\n")
        status, body = answer_of(sock)
        assert status == 413 and b"1024 bytes" in body
        assert closed(sock, within=2.0)
    with tls(bundle, server.port) as sock:  # chunked: no length to check, refused as it grows past the limit
        sock.sendall(b"POST /review HTTP/1.1\r\nHost: webhook\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(3):
            sock.sendall(b"200\r\n" + b"x" * 512 + b"\r\n")
        assert answer_of(sock)[0] == 413
    with tls(bundle, server.port) as sock:  # at the limit: served
        sock.sendall(post(b"x" * 1024))
        assert answer_of(sock) == (200, b"{}")
    assert seen == [1024]


def test_an_oversize_head_is_refused(make: Make, bundle: webhookcerts.Bundle) -> None:
    server = make(Limits(max_head_bytes=2048))
    with tls(bundle, server.port) as sock:  # the whole head in one read
        sock.sendall(post(b"{}", extra=b"X-Padding: " + b"p" * 4096 + b"\r\n"))
        assert answer_of(sock)[0] == 431
    with tls(bundle, server.port) as sock:  # a head that never ends
        sock.sendall(b"POST /review HTTP/1.1\r\nHost: webhook\r\n")
        for _ in range(4):
            sock.sendall(b"X-More: " + b"m" * 1024 + b"\r\n")
        assert answer_of(sock)[0] == 431


def test_a_dripping_request_is_cut_off_at_the_read_deadline(make: Make, bundle: webhookcerts.Bundle) -> None:
    """A client sending a byte now and then, each well within any per-read timeout, still has one deadline."""
    server = make(Limits(read_seconds=1.0))
    with tls(bundle, server.port) as sock:
        started = time.monotonic()
        request = post(b'{"slow": true}')
        sock.sendall(request[:10])
        status = None
        for byte in request[10:]:
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                break
            sock.settimeout(0.2)
            try:
                status, _ = answer_of(sock)
                break
            except TimeoutError:
                continue
        assert status == 408
        assert time.monotonic() - started < 3.0


def test_bodies_read_at_once_and_connections_are_bounded(make: Make, bundle: webhookcerts.Bundle) -> None:
    server = make(Limits(max_body_bytes=1000, max_inflight_bytes=1500, max_connections=3))
    first = tls(bundle, server.port)
    first.sendall(b"POST /review HTTP/1.1\r\nHost: webhook\r\nContent-Length: 1000\r\n\r\npartial")
    second = tls(bundle, server.port)
    time.sleep(0.2)  # the first body is being read (its 1000 bytes reserved)
    second.sendall(b"POST /review HTTP/1.1\r\nHost: webhook\r\nContent-Length: 1000\r\n\r\n")
    assert answer_of(second)[0] == 503  # 2000 bytes would be in flight: refused before reading
    third = tls(bundle, server.port)
    fourth = socket.create_connection(("127.0.0.1", server.port))  # over the cap: closed at once
    assert closed(fourth, within=2.0)
    first.sendall(b"x" * (1000 - len(b"partial")))
    assert answer_of(first)[0] == 200
    for sock in (first, second, third, fourth):
        sock.close()


def test_keep_alive_and_unknown_paths(make: Make, bundle: webhookcerts.Bundle) -> None:
    server = make(Limits())
    with tls(bundle, server.port) as sock:
        for index in range(3):  # the API server reuses its connections
            sock.sendall(post(json.dumps({"n": index}).encode()))
            assert answer_of(sock) == (200, json.dumps({"n": index}).encode())
        sock.sendall(post(b"{}", path="/elsewhere"))
        assert answer_of(sock)[0] == 404
        sock.sendall(b"GET /review HTTP/1.1\r\nHost: webhook\r\n\r\n")
        assert answer_of(sock)[0] == 405


def review(namespace: str, name: str, share_with: list[str] | None = None) -> bytes:
    instance = {"metadata": {"namespace": namespace, "name": name}, "spec": {"shareWith": share_with or []}}
    request = {"uid": "u-1", "operation": "DELETE", "name": name, "namespace": namespace, "oldObject": instance}
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).encode()


def test_answers_come_from_the_index_once_it_is_synced() -> None:
    refs = BindingRefs()
    assert webhook.answer(refs, review("team-a", "db"))[0] == 503  # not listed yet: failurePolicy applies
    binding = {"metadata": {"namespace": "team-a", "name": "app"}, "spec": {"instanceRef": {"name": "db"}}}
    elsewhere = {
        "metadata": {"namespace": "team-b", "name": "b"},
        "spec": {"instanceRef": {"name": "db", "namespace": "team-a"}},
    }
    refs.replace([BindingRef.of(binding), BindingRef.of(elsewhere)])
    status, body = webhook.answer(refs, review("team-a", "db"))
    response = json.loads(body)["response"]
    assert status == 200 and response["uid"] == "u-1" and response["allowed"] is False
    assert "team-a/app" in response["status"]["message"] and "team-b/b" not in response["status"]["message"]
    status, body = webhook.answer(refs, review("team-a", "db", share_with=["team-b"]))
    assert "team-a/app, team-b/b" in json.loads(body)["response"]["status"]["message"]
    refs.remove("team-a", "app")
    assert json.loads(webhook.answer(refs, review("team-a", "db"))[1])["response"]["allowed"] is True
    refs.put(BindingRef.of({**binding, "spec": {"instanceRef": {"name": "other"}}}))  # moved to another instance
    assert [ref.name for ref in refs.referring_to("team-a", "db")] == ["b"]
    assert [ref.name for ref in refs.referring_to("team-a", "other")] == ["app"]
    assert webhook.answer(refs, b"not json")[0] == 400
    assert webhook.answer(refs, b'{"request": 3}')[0] == 400


def test_the_shared_certificate_is_renewed_from_the_same_ca_when_due() -> None:
    hosts = ["svc.ns.svc", "127.0.0.1"]
    bundle = webhookcerts.issue(hosts, now=NOW)
    assert webhookcerts.renewal(bundle, hosts, now=NOW) is None
    assert webhookcerts.renewal(bundle, ["other.ns.svc"], now=NOW) == "leaf"
    late = NOW + datetime.timedelta(days=webhookcerts.LEAF_DAYS - webhookcerts.RENEW_DAYS + 1)
    assert webhookcerts.renewal(bundle, hosts, now=late) == "leaf"
    renewed = webhookcerts.issue(hosts, now=late, ca=bundle)
    assert renewed.ca_cert == bundle.ca_cert and renewed.cert != bundle.cert  # the registered caBundle holds
    assert webhookcerts.renewal(renewed, hosts, now=late) is None
    ca_late = NOW + datetime.timedelta(days=webhookcerts.CA_DAYS - webhookcerts.RENEW_DAYS + 1)
    assert webhookcerts.renewal(renewed, hosts, now=ca_late) == "ca"


class _SecretsSeen:
    """A ``LeanApi`` stand-in that keeps the webhook's Secret as the API server would (its writes, as sent)."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.stored: dict[str, Any] | None = None
        self.requests: list[tuple[str, str]] = []

    def request(self, method: str, path: str, *, body: Any = None, timeout: object = None) -> Any:
        assert timeout == webhookcerts.API_TIMEOUT
        self.requests.append((method, path))
        if method == "GET":
            if self.stored is None:
                raise ApiException(status=404)
            return self.stored
        self.sent.append(body)
        meta = body["metadata"]
        stored_meta = {"name": meta["name"], "namespace": meta["namespace"], "resourceVersion": "7"}
        self.stored = {"metadata": stored_meta, "data": body["data"]}
        return self.stored


def test_the_shared_certificate_is_stored_in_a_tls_secret_and_replaced_at_the_version_read() -> None:
    store = webhookcerts.SharedCertificate(client.ApiClient(), "opbroker-system", "webhook-tls")
    seen = _SecretsSeen()
    store._api = seen  # type: ignore[assignment]  # the transport, stood in for
    first = store.ensure(["svc.ns.svc"])
    labels = {"app.kubernetes.io/part-of": "opbroker", "app.kubernetes.io/component": "webhook"}
    assert seen.sent[0]["metadata"] == {"name": "webhook-tls", "namespace": "opbroker-system", "labels": labels}
    assert seen.sent[0]["type"] == "kubernetes.io/tls"
    assert store.ensure(["svc.ns.svc"]) == first and len(seen.sent) == 1  # stored and not due: nothing written
    renewed = store.ensure(["other.ns.svc"])  # a host missing: the leaf is renewed over the version read
    assert len(seen.sent) == 2 and renewed.ca_cert == first.ca_cert and renewed.cert != first.cert
    assert seen.sent[1]["metadata"] == {
        "name": "webhook-tls",
        "namespace": "opbroker-system",
        "labels": labels,
        "resourceVersion": "7",
    }
    secret = "/api/v1/namespaces/opbroker-system/secrets/webhook-tls"
    assert seen.requests[:2] == [("GET", secret), ("POST", "/api/v1/namespaces/opbroker-system/secrets")]
    assert seen.requests[-1] == ("PUT", secret)
