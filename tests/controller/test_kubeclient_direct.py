"""Requests made on the API server's connection pool directly (``BoundedApiClient``, issue 31).

Aspects covered, against a recording HTTP server in this process: each request the bounded client sends past the
official client's ``RESTClientObject`` — reads with a query, merge, JSON and apply patches, a create, a delete
with options — reaches the server as the official client sends it (method, path, query, body bytes, content
type, accept, credentials, user agent), and the official path is not used; a host with a path keeps its path; an
error answer reaches the lean client's exception with its body, a redirect is an error answer (not followed);
every answer is reported; what the direct path does not make (a proxy's requests, a strategic merge patch, a text
body) goes the official way and arrives the same; the deadlines given are urllib3's as the client reads them.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3
from kubernetes import client
from kubernetes.client import exceptions

from opbroker.kubeclient import deadlines
from opbroker.kubeclient.lean import LeanCustomObjects

Received = tuple[str, str, bytes, dict[str, str]]
HEADERS = ("Content-Type", "Accept", "User-Agent", "authorization", "Content-Length")


class _Recorder(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    received: list[Received]

    def _answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {name: self.headers[name] for name in HEADERS if name in self.headers}
        self.received.append((self.command, self.path, body, headers))
        status, answer = 200, b'{"ok": true}'
        if "/missing" in self.path:
            status, answer = 404, b'{"kind": "Status", "code": 404}'
        elif "/moved" in self.path:
            status, answer = 302, b"{}"
        self.send_response(status)
        if status == 302:
            self.send_header("Location", "/elsewhere")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _answer

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, list[Received]]]:
    received: list[Received] = []
    handler = type("Recorder", (_Recorder,), {"received": received})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", received
    finally:
        httpd.shutdown()
        httpd.server_close()


def configuration(host: str) -> client.Configuration:
    made = client.Configuration(host=host)
    made.api_key = {"authorization": "token-1"}
    made.api_key_prefix = {"authorization": "Bearer"}
    return made


def official_path_refused(api: deadlines.BoundedApiClient) -> None:
    def refused(*_: Any, **__: Any) -> Any:
        raise AssertionError("the official client's path was used")

    api.rest_client.request = refused  # type: ignore[method-assign]


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


def headers_for(api: client.ApiClient, kind: str | None) -> dict[str, str]:
    headers = dict(api.default_headers) | {"Accept": "application/json"}
    if kind is not None:
        headers["Content-Type"] = CONTENT_TYPES[kind]
    api.update_params_for_auth(headers, [], ["BearerToken"], "", "GET", None)
    return headers


@pytest.mark.parametrize(("method", "path", "body", "kind"), CALLS)
def test_a_request_sent_directly_is_the_one_the_official_client_sends(
    server: tuple[str, list[Received]], method: str, path: str, body: Any, kind: str | None
) -> None:
    host, received = server
    official = client.ApiClient(configuration(host))
    official.rest_client.pool_manager.connection_pool_kw["retries"] = deadlines.RETRIES
    official.call_api(method, host + path, header_params=headers_for(official, kind), body=body).read()
    direct = deadlines.BoundedApiClient(configuration(host))
    official_path_refused(direct)
    direct.call_api(method, host + path, header_params=headers_for(direct, kind), body=body).read()
    sent_officially, sent_directly = received
    assert sent_directly == sent_officially
    assert sent_directly[:2] == (method, path)
    if body is not None:
        assert json.loads(sent_directly[2]) == body


def test_a_host_with_a_path_keeps_it(server: tuple[str, list[Received]]) -> None:
    host, received = server
    api = deadlines.BoundedApiClient(configuration(host + "/k8s/clusters/c-1"))
    official_path_refused(api)
    LeanCustomObjects(api).get_namespaced_custom_object("g.io", "v1", "n", "things", "a")
    assert received[0][1] == "/k8s/clusters/c-1/apis/g.io/v1/namespaces/n/things/a"


def test_an_error_answer_is_the_lean_clients_exception_and_a_redirect_is_not_followed(
    server: tuple[str, list[Received]],
) -> None:
    host, received = server
    told: list[None] = []
    api = deadlines.BoundedApiClient(configuration(host), on_answer=lambda: told.append(None))
    official_path_refused(api)
    lean = LeanCustomObjects(api)
    with pytest.raises(exceptions.NotFoundException) as missing:
        lean.get_namespaced_custom_object("g.io", "v1", "n", "things", "missing")
    assert json.loads(missing.value.body) == {"kind": "Status", "code": 404}
    with pytest.raises(exceptions.ApiException) as moved:
        lean.get_namespaced_custom_object("g.io", "v1", "n", "things", "moved")
    assert moved.value.status == 302
    assert [path for _, path, _, _ in received] == [
        "/apis/g.io/v1/namespaces/n/things/missing",
        "/apis/g.io/v1/namespaces/n/things/moved",
    ]
    assert len(told) == 2  # every answer proves the path works, whatever its status


def test_what_the_direct_path_does_not_make_goes_the_official_way(server: tuple[str, list[Received]]) -> None:
    host, received = server
    api = deadlines.BoundedApiClient(configuration(host))
    official: list[str] = []
    request = api.rest_client.request

    def recorded(method: str, url: str, **rest: Any) -> Any:
        official.append(method)
        return request(method, url, **rest)

    api.rest_client.request = recorded  # type: ignore[method-assign]
    merge = {"Content-Type": "application/json-patch+json", "Accept": "application/json"}
    api.call_api("PATCH", host + "/api/v1/namespaces/n/pods/p", header_params=dict(merge), body={"a": 1}).read()
    text = {"Content-Type": "application/json", "Accept": "application/json"}
    api.call_api("POST", host + "/api/v1/namespaces/n/events", header_params=dict(text), body='{"raw": 1}').read()
    assert official == ["PATCH", "POST"]
    assert received[0][3]["Content-Type"] == "application/strategic-merge-patch+json"
    assert json.loads(received[1][2]) == '{"raw": 1}'  # the official client writes a text as a JSON string

    proxied = configuration(host)
    proxied.proxy = host  # a plain-HTTP proxy: every request goes to it with the whole URL
    through_proxy = deadlines.BoundedApiClient(proxied)
    assert isinstance(through_proxy.rest_client.pool_manager, urllib3.ProxyManager)
    through_proxy.call_api("GET", host + "/api/v1/namespaces", header_params={"Accept": "application/json"}).read()
    assert received[2][1] == host + "/api/v1/namespaces"


@pytest.mark.parametrize(
    ("given", "want"),
    [
        ((10.0, 60.0), urllib3.Timeout(connect=10.0, read=60.0)),
        (5, urllib3.Timeout(total=5)),
        (None, None),
        (0, None),
        ((1.0, 2.0, 3.0), None),
    ],
)
def test_the_deadlines_are_urllib3s_as_the_official_client_reads_them(given: Any, want: Any) -> None:
    made = deadlines.BoundedApiClient(configuration("http://127.0.0.1:1"))._timeout(given)
    assert repr(made) == repr(want)


def test_a_url_of_another_host_or_port_goes_the_official_way() -> None:
    api = deadlines.BoundedApiClient(configuration("http://127.0.0.1:1"))
    assert api._direct_pool("http://127.0.0.1:1/api/v1/namespaces", None, None) is not None
    assert api._direct_pool("http://127.0.0.1:10/api/v1/namespaces", None, None) is None  # the host is a prefix
    assert api._direct_pool("http://elsewhere:1/api/v1/namespaces", None, None) is None
