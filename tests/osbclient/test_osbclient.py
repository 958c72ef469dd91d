"""The OSB client library (opbroker.osbclient), without Pulumi.

Over real HTTP against the small broker of tests/osb_fake_broker.py: headers, errors by status, the
originating identity, secrets kept out of logs. Through httpx.MockTransport for what that broker never does:
bearer tokens, malformed bodies, 5xx/429, lost answers. Over real HTTPS with a throwaway CA (trustme): a
private CA is needed and sufficient. The pure parts (poll scheduling, the orphan mitigation table, retry
classification) are table-tested.
"""

from __future__ import annotations

import base64
import json
import logging
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
import trustme

from opbroker import osbclient as osb
from opbroker.osbclient import Request
from tests.osb_fake_broker import SERVICE_ID, FakeBroker, serve

PASSWORD = "pa55-w0rd-n0t-to-leak"
TOKEN = "t0ken-n0t-to-leak"


@pytest.fixture
def broker() -> FakeBroker:
    return FakeBroker(password=PASSWORD)


@pytest.fixture
def url(broker: FakeBroker) -> Iterator[str]:
    with serve(broker) as base_url:
        yield base_url


def basic(url: str, broker: FakeBroker, **extra: Any) -> osb.Broker:
    return osb.Broker(url, auth=osb.BasicAuth(broker.username, broker.password), **extra)


Handler = Callable[[httpx.Request], httpx.Response]


def mocked(handler: Handler, **extra: Any) -> osb.Client:
    """A client whose requests go to ``handler`` instead of the network."""
    config = osb.Broker("http://broker.test", auth=osb.BasicAuth("user", PASSWORD), **extra)
    return osb.Client(config, transport=httpx.MockTransport(handler))


def answering(status: int, body: Any = None, *, text: str | None = None, headers: Any = None) -> Handler:
    def handler(_: httpx.Request) -> httpx.Response:
        if text is not None:
            return httpx.Response(status, text=text, headers=headers)
        return httpx.Response(status, json=body if body is not None else {}, headers=headers)

    return handler


def raising(error: Exception) -> Handler:
    def handler(_: httpx.Request) -> httpx.Response:
        raise error

    return handler


# -- requests and answers, over HTTP ------------------------------------------------------------------------


def test_every_request_carries_auth_version_and_a_fresh_request_identity(url: str, broker: FakeBroker) -> None:
    with osb.Client(basic(url, broker)) as client:
        catalog = client.catalog()
        client.catalog()
    assert catalog["services"][0]["id"] == SERVICE_ID
    first, second = broker.requests
    assert first.headers["x-broker-api-version"] == "2.17"
    assert first.headers["authorization"].startswith("Basic ")
    assert first.headers["x-broker-api-request-identity"] != second.headers["x-broker-api-request-identity"]
    assert "x-broker-api-originating-identity" not in first.headers


@pytest.mark.parametrize(
    ("password", "speaks", "error", "status"),
    [("wrong", None, osb.Unauthorized, 401), (PASSWORD, ("2.99",), osb.PreconditionFailed, 412)],
)
def test_errors_map_by_status(
    url: str,
    broker: FakeBroker,
    password: str,
    speaks: tuple[str, ...] | None,
    error: type[osb.OSBError],
    status: int,
) -> None:
    broker.speaks = speaks
    config = osb.Broker(url, auth=osb.BasicAuth("broker-user", password))
    with osb.Client(config) as client, pytest.raises(error) as raised:
        client.catalog()
    assert raised.value.status == status
    assert raised.value.description
    assert raised.value.what == "catalog"


def test_the_originating_identity_is_the_kubernetes_profile_and_a_call_can_name_its_own(
    url: str, broker: FakeBroker
) -> None:
    default = osb.kubernetes_identity("system:serviceaccount:opbroker:controller", "uid-0")
    duke = osb.kubernetes_identity("duke", "uid-1", ["admin", "dev"], {"mydata": ["data1", "data3"]})
    with osb.Client(basic(url, broker, originating_identity=default)) as client:
        client.provision("i-1", service_id=SERVICE_ID, plan_id="p", organization_guid="o", space_guid="s")
        client.provision(
            "i-2", service_id=SERVICE_ID, plan_id="p", organization_guid="o", space_guid="s", identity=duke
        )
        client.catalog()
    first, second, catalog = broker.requests
    platform, value = second.headers["x-broker-api-originating-identity"].split(" ")
    assert platform == "kubernetes"
    assert json.loads(base64.b64decode(value)) == {
        "username": "duke",
        "uid": "uid-1",
        "groups": ["admin", "dev"],
        "extra": {"mydata": ["data1", "data3"]},
    }
    assert json.loads(base64.b64decode(first.headers["x-broker-api-originating-identity"].split(" ")[1]))[
        "username"
    ] == ("system:serviceaccount:opbroker:controller")
    assert "x-broker-api-originating-identity" not in catalog.headers  # no user asks for the catalog


def test_the_platform_is_a_field() -> None:
    identity = osb.OriginatingIdentity("cloudfoundry", {"user_id": "683ea748"})
    platform, value = identity.header().split(" ")
    assert (platform, json.loads(base64.b64decode(value))) == ("cloudfoundry", {"user_id": "683ea748"})
    with pytest.raises(ValueError, match="non-empty word"):
        osb.OriginatingIdentity("cloud foundry", {})


def test_a_bearer_token_replaces_basic_auth() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"services": []})

    config = osb.Broker("http://broker.test", auth=osb.BearerToken(TOKEN))
    with osb.Client(config, transport=httpx.MockTransport(handler)) as client:
        assert client.catalog() == {"services": []}
    assert seen[0].headers["authorization"] == f"Bearer {TOKEN}"


def test_no_auth_sends_no_authorization_header() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"services": []})

    with osb.Client(osb.Broker("http://broker.test"), transport=httpx.MockTransport(handler)) as client:
        client.catalog()
    assert "authorization" not in seen[0].headers


# -- answers the fake broker never gives --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("handler", "error", "status"),
    [
        (answering(201, text="<html>created</html>"), osb.MalformedResponse, 201),
        (answering(200, text="[1, 2]"), osb.MalformedResponse, 200),
        (answering(500, text="upstream exploded"), osb.ServerError, 500),
        (answering(503, {"description": "maintenance"}), osb.ServerError, 503),
        (answering(429, {"error": "TooMany"}), osb.TooManyRequests, 429),
        (answering(408, {}), osb.RequestTimeout, 408),
        (answering(418, {}), osb.OSBError, 418),
        (answering(204, text=""), osb.OSBError, 204),
    ],
)
def test_unusable_answers_raise_by_status(handler: Handler, error: type[osb.OSBError], status: int) -> None:
    with mocked(handler) as client, pytest.raises(error) as raised:
        client.provision("i-1", service_id="s", plan_id="p", organization_guid="o", space_guid="s")
    assert type(raised.value) is error
    assert raised.value.status == status
    assert str(raised.value).startswith(f"provision of instance i-1: broker answered {status}")


def test_a_concurrency_error_keeps_its_error_code() -> None:
    handler = answering(422, {"error": "ConcurrencyError", "description": "another operation is in progress"})
    with mocked(handler) as client, pytest.raises(osb.Unprocessable) as raised:
        client.update("i-1", service_id="s", plan_id="p")
    assert (raised.value.error, raised.value.description) == ("ConcurrencyError", "another operation is in progress")


def test_last_operation_reads_state_description_and_retry_after() -> None:
    handler = answering(200, {"state": "in progress", "description": "50%"}, headers={"Retry-After": "12"})
    with mocked(handler) as client:
        last = client.last_operation("i-1", operation="op", service_id="s", plan_id="p")
    assert last == osb.LastOperation(osb.IN_PROGRESS, "50%", retry_after=12.0)
    assert not last.done


def test_last_operation_gone_is_a_finished_delete_and_an_unknown_state_is_malformed() -> None:
    with mocked(answering(410, text="")) as client:
        assert client.binding_last_operation("i", "b", operation=None, service_id=None, plan_id=None).gone
    with (
        mocked(answering(200, {"state": "sleeping"})) as client,
        pytest.raises(osb.MalformedResponse, match="sleeping"),
    ):
        client.last_operation("i", operation=None, service_id=None, plan_id=None)


def test_a_binding_answer_keeps_its_fields_and_hides_credentials_from_repr() -> None:
    body = {
        "credentials": {"password": "s3cr3t-cred"},
        "endpoints": [{"host": "db", "ports": ["5432"]}],
        "metadata": {"expires_at": "2031-01-01T00:00:00Z"},
        "volume_mounts": "not a list",
    }
    with mocked(answering(201, body)) as client:
        result = client.bind("i", "b", service_id="s", plan_id="p")
    assert result.credentials == {"password": "s3cr3t-cred"}
    assert result.endpoints == [{"host": "db", "ports": ["5432"]}]
    assert result.metadata == {"expires_at": "2031-01-01T00:00:00Z"}
    assert result.volume_mounts is None  # the wrong type is dropped, not passed on
    assert "s3cr3t-cred" not in repr(result)


# -- transport failures ---------------------------------------------------------------------------------------


def test_a_closed_port_is_unreachable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with osb.Client(osb.Broker(f"http://127.0.0.1:{port}")) as client, pytest.raises(osb.BrokerUnreachable) as raised:
        client.catalog()
    assert not raised.value.timed_out
    assert str(raised.value).startswith("catalog: could not reach the broker")


@pytest.mark.parametrize(
    ("error", "kind", "timed_out"),
    [
        (httpx.ConnectTimeout("connect timed out"), osb.BrokerUnreachable, True),
        (httpx.ConnectError("refused"), osb.BrokerUnreachable, False),
        (httpx.ReadTimeout("read timed out"), osb.ResponseLost, True),
        (httpx.RemoteProtocolError("server disconnected"), osb.ResponseLost, False),
        (httpx.ReadError("connection reset"), osb.ResponseLost, False),
    ],
)
def test_transport_failures_say_whether_the_request_was_sent(
    error: Exception, kind: type[osb.TransportFailure], timed_out: bool
) -> None:
    with mocked(raising(error)) as client, pytest.raises(osb.TransportFailure) as raised:
        client.bind("i", "b", service_id="s", plan_id="p")
    assert type(raised.value) is kind
    assert raised.value.timed_out is timed_out
    assert raised.value.__cause__ is error


# -- secrets ----------------------------------------------------------------------------------------------------


def test_secrets_are_not_in_reprs() -> None:
    with_basic = osb.Broker("https://broker.test", auth=osb.BasicAuth("user", PASSWORD))
    with_token = osb.Broker("https://broker.test", auth=osb.BearerToken(TOKEN))
    assert "user" in repr(with_basic)
    for text in (repr(with_basic), str(with_basic), repr(with_token), str(with_token)):
        assert PASSWORD not in text
        assert TOKEN not in text
        assert base64.b64encode(f"user:{PASSWORD}".encode()).decode() not in text


@pytest.mark.parametrize("auth", [osb.BasicAuth("user", PASSWORD), osb.BearerToken(TOKEN)], ids=["basic", "bearer"])
def test_a_broker_echoing_the_credentials_does_not_put_them_in_error_messages(
    auth: osb.BasicAuth | osb.BearerToken,
) -> None:
    def echo(request: httpx.Request) -> httpx.Response:
        header = request.headers["authorization"]
        return httpx.Response(401, json={"error": f"bad {header}", "description": f"you sent {header}"})

    secrets = auth.secrets()
    assert secrets  # the test checks something
    config = osb.Broker("http://broker.test", auth=auth)
    with osb.Client(config, transport=httpx.MockTransport(echo)) as client, pytest.raises(osb.Unauthorized) as raised:
        client.catalog()
    message = f"{raised.value} {raised.value.error} {raised.value.description} {raised.value!r}"
    assert "***" in message
    for secret in secrets:
        assert secret not in message


def test_a_transport_failure_naming_the_password_is_redacted() -> None:
    with (
        mocked(raising(httpx.ConnectError(f"cannot use {PASSWORD}"))) as client,
        pytest.raises(osb.BrokerUnreachable) as raised,
    ):
        client.catalog()
    assert PASSWORD not in str(raised.value)
    assert PASSWORD not in raised.value.reason


def test_no_log_line_carries_a_secret(url: str, broker: FakeBroker, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with osb.Client(basic(url, broker)) as client:
        client.catalog()
        with pytest.raises(osb.NotFound):
            client.get_binding("nope", "nope")  # an error path too
    logged = "\n".join(f"{r.getMessage()} {r.args!r}" for r in caplog.records)
    assert "OSB GET /v2/catalog (2.17): 200" in logged  # there are log lines to check
    assert PASSWORD not in logged
    assert base64.b64encode(f"{broker.username}:{PASSWORD}".encode()).decode() not in logged


def test_credentials_in_the_url_are_refused_without_repeating_them() -> None:
    with pytest.raises(ValueError) as raised:
        osb.Broker(f"https://user:{PASSWORD}@broker.test")
    assert PASSWORD not in str(raised.value)
    with pytest.raises(ValueError, match="absolute http"):
        osb.Broker("broker.test/v2")


# -- TLS with a private CA -----------------------------------------------------------------------------------


class _Catalog(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b'{"services": []}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def https_url(ca: trustme.CA) -> Iterator[str]:
    """A broker-shaped HTTPS server on 127.0.0.1 whose certificate only ``ca`` signed."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(context)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Catalog)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_https_with_a_private_ca_fails_without_it(https_url: str) -> None:
    with osb.Client(osb.Broker(https_url)) as client, pytest.raises(osb.BrokerUnreachable) as raised:
        client.catalog()
    assert "CERTIFICATE_VERIFY_FAILED" in raised.value.reason


@pytest.mark.parametrize("as_text", [False, True], ids=["pem-bytes", "pem-str"])
def test_https_with_a_private_ca_succeeds_with_it(https_url: str, ca: trustme.CA, as_text: bool) -> None:
    pem = ca.cert_pem.bytes()
    tls = osb.TLS(ca_pem=pem.decode() if as_text else pem)
    with osb.Client(osb.Broker(https_url, tls=tls)) as client:
        assert client.catalog() == {"services": []}


def test_a_ca_replaces_the_system_roots(https_url: str) -> None:
    """Another CA's bundle does not make the server trusted: only the given CA counts."""
    other = trustme.CA()
    with (
        osb.Client(osb.Broker(https_url, tls=osb.TLS(ca_pem=other.cert_pem.bytes()))) as client,
        pytest.raises(osb.BrokerUnreachable),
    ):
        client.catalog()


def test_insecure_skip_tls_verify_accepts_any_certificate(https_url: str) -> None:
    with osb.Client(osb.Broker(https_url, tls=osb.TLS(insecure_skip_tls_verify=True))) as client:
        assert client.catalog() == {"services": []}


def test_tls_settings_are_checked(ca: trustme.CA) -> None:
    with pytest.raises(ValueError, match="not both"):
        osb.TLS(ca_pem=ca.cert_pem.bytes(), insecure_skip_tls_verify=True)
    with pytest.raises(ValueError, match="no PEM certificate"):
        osb.TLS(ca_pem=b"\x30\x82 DER is not accepted")
    assert "BEGIN CERTIFICATE" not in repr(osb.TLS(ca_pem=ca.cert_pem.bytes()))


# -- polling -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("7", 7.0),
        (None, None),
        ("", None),
        ("soon", None),
        ("-3", None),
        ("Wed, 01 Jan 2031 00:00:30 GMT", 30.0),
        ("Tue, 31 Dec 2030 23:59:00 GMT", 0.0),
    ],
)
def test_retry_after_is_seconds_or_an_http_date(header: str | None, expected: float | None) -> None:
    now = datetime(2031, 1, 1, tzinfo=UTC)
    assert osb.parse_retry_after(header, now=now) == expected


START = datetime(2031, 1, 1, tzinfo=UTC)
BACKOFF = osb.Backoff(base=2, maximum=30, max_duration=600)


@pytest.mark.parametrize(
    ("elapsed", "polls", "retry_after", "expected"),
    [
        (0, 0, None, osb.NextPoll(2)),  # right after the 202
        (2, 1, None, osb.NextPoll(2)),
        (4, 2, None, osb.NextPoll(4)),
        (8, 3, None, osb.NextPoll(8)),
        (16, 4, None, osb.NextPoll(16)),
        (32, 5, None, osb.NextPoll(30)),  # capped at maximum
        (100, 10_000, None, osb.NextPoll(30)),  # no overflow however many polls
        (10, 3, 45.0, osb.NextPoll(45)),  # Retry-After wins over the backoff, even above maximum
        (10, 3, 0.0, osb.NextPoll(0)),
        (590, 6, None, osb.NextPoll(10)),  # never past the deadline
        (590, 6, 120.0, osb.NextPoll(10)),
        (600, 7, None, osb.EXPIRED),
        (4000, 1, 5.0, osb.EXPIRED),
    ],
)
def test_next_poll(elapsed: float, polls: int, retry_after: float | None, expected: osb.NextPoll) -> None:
    now = START + timedelta(seconds=elapsed)
    assert osb.next_poll(started=START, now=now, polls=polls, retry_after=retry_after, backoff=BACKOFF) == expected


def test_next_poll_refuses_naive_times_and_bad_settings() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        osb.next_poll(started=datetime(2031, 1, 1), now=START, polls=0, retry_after=None, backoff=BACKOFF)
    with pytest.raises(ValueError, match="base <= maximum"):
        osb.Backoff(base=10, maximum=5)
    with pytest.raises(ValueError, match="negative"):
        osb.next_poll(started=START, now=START, polls=-1, retry_after=None, backoff=BACKOFF)


class FakeClock:
    """Time that moves only when the code under test sleeps; remembers every pause."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_wait_backs_off_and_raises_on_failed() -> None:
    clock = FakeClock()
    answers = iter([osb.LastOperation(osb.IN_PROGRESS)] * 3 + [osb.LastOperation(osb.FAILED, "disk full")])
    backoff = osb.Backoff(base=1, maximum=3, max_duration=100)
    with pytest.raises(osb.OperationFailed, match="provision failed: disk full"):
        osb.wait(lambda: next(answers), what="provision", backoff=backoff, clock=clock, sleep=clock.sleep)
    assert clock.sleeps == [1, 2, 3]


def test_wait_honours_retry_after_and_gives_up_at_the_deadline() -> None:
    clock = FakeClock()
    backoff = osb.Backoff(base=1, maximum=3, max_duration=20)
    with pytest.raises(osb.OperationTimeout, match="did not finish within 20s") as raised:
        osb.wait(
            lambda: osb.LastOperation(osb.IN_PROGRESS, "busy", retry_after=7),
            what="bind",
            backoff=backoff,
            clock=clock,
            sleep=clock.sleep,
        )
    assert clock.sleeps == [7, 7, 6]
    assert raised.value.last == osb.LastOperation(osb.IN_PROGRESS, "busy", retry_after=7)


def test_wait_returns_when_gone() -> None:
    clock = FakeClock()
    answers = iter([osb.LastOperation(osb.IN_PROGRESS), osb.LastOperation(osb.SUCCEEDED, gone=True)])
    last = osb.wait(lambda: next(answers), what="unbind", backoff=BACKOFF, clock=clock, sleep=clock.sleep)
    assert last.gone
    assert clock.sleeps == [2]


# -- orphan mitigation: the OSB table ---------------------------------------------------------------------------

P, U, D, B, X = Request.PROVISION, Request.UPDATE, Request.DEPROVISION, Request.BIND, Request.UNBIND
ALL = (P, U, D, B, X)


def rows(requests: tuple[Request, ...], answer: dict[str, Any], expected: bool) -> list[Any]:
    return [pytest.param(r, answer, expected, id=f"{r}-{answer}") for r in requests]


@pytest.mark.parametrize(
    ("request_", "answer", "expected"),
    [
        *rows(ALL, {"status": 200}, False),
        *rows(ALL, {"status": 200, "malformed": True}, False),
        *rows(ALL, {"status": 201}, False),
        *rows((P, B), {"status": 201, "malformed": True}, True),
        *rows((U, D, X), {"status": 201, "malformed": True}, False),
        *rows(ALL, {"status": 202}, False),
        *rows((P, D, B, X), {"status": 204}, True),
        *rows((P, D, B, X), {"status": 299}, True),
        *rows((U,), {"status": 204}, False),
        *rows(ALL, {"status": 408}, False),
        *rows(ALL, {"status": 400}, False),
        *rows(ALL, {"status": 409}, False),
        *rows(ALL, {"status": 422}, False),
        *rows(ALL, {"status": 429}, False),
        *rows((P, D, B, X), {"status": 500}, True),
        *rows((P, D, B, X), {"status": 503}, True),
        *rows((U,), {"status": 500}, False),
        *rows((P, B), {"status": None}, True),  # timeout
        *rows((U, D, X), {"status": None}, False),
        *rows((P, D, B, X), {"status": 200, "failed_state": True}, True),
        *rows((U,), {"status": 200, "failed_state": True}, False),
        *rows(ALL, {"status": 302}, False),
    ],
)
def test_orphan_mitigation_follows_the_spec_table(request_: Request, answer: dict[str, Any], expected: bool) -> None:
    assert osb.needs_orphan_mitigation(request_, **answer) is expected


@pytest.mark.parametrize(
    ("request_", "error", "expected"),
    [
        (P, osb.OperationFailed("provision", "quota"), True),
        (B, osb.OperationTimeout("bind", 10, None), True),
        (U, osb.OperationFailed("update", "no"), False),
        (P, osb.ResponseLost("provision", "read timed out", timed_out=True), True),
        (D, osb.ResponseLost("deprovision", "read timed out", timed_out=True), False),
        (P, osb.BrokerUnreachable("provision", "refused", timed_out=False), False),
        (P, osb.MalformedResponse(201, None, "not JSON", what="provision"), True),
        (P, osb.MalformedResponse(200, None, "not JSON", what="provision"), False),
        (B, osb.ServerError(502, None, None, what="bind"), True),
        (B, osb.RequestTimeout(408, None, None, what="bind"), False),
        (B, osb.Conflict(409, None, None, what="bind"), False),
    ],
)
def test_orphan_mitigation_from_what_the_client_raised(
    request_: Request, error: osb.BrokerError, expected: bool
) -> None:
    assert osb.needs_orphan_mitigation_after(request_, error) is expected


# -- retry classification ----------------------------------------------------------------------------------------


def status_error(status: int, error: str | None = None) -> osb.OSBError:
    from opbroker.osbclient.errors import error_class

    return error_class(status)(status, error, None, what="x")


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (osb.BrokerUnreachable("x", "refused", timed_out=False), osb.Failure.RETRYABLE),
        (osb.BrokerUnreachable("x", "connect timeout", timed_out=True), osb.Failure.RETRYABLE),
        (osb.ResponseLost("x", "read timeout", timed_out=True), osb.Failure.RETRYABLE),
        (osb.MalformedResponse(200, None, "not JSON", what="x"), osb.Failure.RETRYABLE),
        (status_error(408), osb.Failure.RETRYABLE),
        (status_error(429), osb.Failure.RETRYABLE),
        (status_error(500), osb.Failure.RETRYABLE),
        (status_error(503), osb.Failure.RETRYABLE),
        (status_error(422, "ConcurrencyError"), osb.Failure.RETRYABLE),  # the spec says: resend later
        (status_error(422, "AsyncRequired"), osb.Failure.PERMANENT),
        (status_error(422, "MaintenanceInfoConflict"), osb.Failure.PERMANENT),
        (status_error(400), osb.Failure.PERMANENT),
        (status_error(401), osb.Failure.PERMANENT),
        (status_error(403), osb.Failure.PERMANENT),
        (status_error(404), osb.Failure.PERMANENT),
        (status_error(409), osb.Failure.PERMANENT),
        (status_error(410), osb.Failure.PERMANENT),
        (status_error(412), osb.Failure.PERMANENT),
        (osb.OperationFailed("x", "quota"), osb.Failure.PERMANENT),
        (osb.OperationTimeout("x", 10, None), osb.Failure.PERMANENT),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else str(v),
)
def test_classify(error: osb.BrokerError, expected: osb.Failure) -> None:
    assert osb.classify(error) is expected
    assert osb.is_retryable(error) is (expected is osb.Failure.RETRYABLE)


def test_status_errors_get_their_class() -> None:
    assert [type(status_error(s)).__name__ for s in (400, 404, 410, 418, 500, 599, 600)] == [
        "BadRequest",
        "NotFound",
        "Gone",
        "OSBError",
        "ServerError",
        "ServerError",
        "OSBError",
    ]
