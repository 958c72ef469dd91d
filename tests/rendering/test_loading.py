"""Where template text comes from: inline, base64, or fetched over HTTP (a real server on 127.0.0.1).

Aspects covered: ``contentEncoded`` decoding and its errors; ``url`` templates fetched by the default
:class:`HttpFetcher` from a loopback ``http.server`` (its network allowed, plain http opted into) — served,
cached (one request for many renders), refreshed after the TTL, and refused clearly when unreachable, failing
with an HTTP error, too large (declared or streamed) or not UTF-8; a custom fetcher plugged in through the
protocol; the size limit on inline templates.
"""

from __future__ import annotations

import base64
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from opbroker.api import SFPlan, TemplateAction, TemplateSpec
from opbroker.rendering import (
    FetchError,
    FetchPolicy,
    HttpFetcher,
    Limits,
    Renderer,
    RenderInputs,
    TemplateSourceError,
)
from opbroker.rendering.loading import TemplateTexts

TEMPLATE = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ instance.metadata.name }}\n"
INPUTS = RenderInputs(instance={"metadata": {"name": "from-url"}, "spec": {}}, default_namespace="n")
#: The test server is on loopback, which the default policy refuses: its network is allowed by name.
LOOPBACK = FetchPolicy.from_flags(["127.0.0.1/32"])


def loopback_renderer() -> Renderer:
    return Renderer(fetcher=HttpFetcher(LOOPBACK))


class _Handler(BaseHTTPRequestHandler):
    routes: ClassVar[dict[str, tuple[int, bytes, dict[str, str]]]] = {}
    hits: ClassVar[dict[str, int]] = {}

    def do_GET(self) -> None:
        self.hits[self.path] = self.hits.get(self.path, 0) + 1
        status, body, headers = self.routes.get(self.path, (404, b"not here", {}))
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        if "Content-Length" not in headers:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    big = b"x" * (2 << 20)
    _Handler.routes = {
        "/template.yaml": (200, TEMPLATE.encode(), {}),
        "/big-declared.yaml": (200, big, {}),
        "/latin1.yaml": (200, "name: caf\xe9".encode("latin-1"), {}),
        "/broken.yaml": (500, b"boom", {}),
    }
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def url_plan(url: str) -> SFPlan:
    return SFPlan.model_validate(
        {
            "metadata": {"name": "remote"},
            "spec": {
                "name": "p",
                "id": "p",
                "description": "d",
                "serviceId": "s",
                "templates": [{"action": "provision", "type": "jinja2", "url": url, "allowHttp": True}],
            },
        }
    )


def test_a_url_template_is_fetched_over_http_and_cached(server: str) -> None:
    renderer = loopback_renderer()
    _Handler.hits.clear()
    for _ in range(5):
        rendered = renderer.render_objects(url_plan(f"{server}/template.yaml"), TemplateAction.PROVISION, INPUTS)
        assert rendered.objects[0].manifest["metadata"]["name"] == "from-url"
    assert _Handler.hits == {"/template.yaml": 1}


def test_the_cache_expires(server: str) -> None:
    now = [0.0]
    texts = TemplateTexts(HttpFetcher(LOOPBACK), Limits(url_cache_ttl=60), clock=lambda: now[0])
    spec = TemplateSpec.model_validate(
        {"action": "provision", "type": "jinja2", "url": f"{server}/template.yaml", "allowHttp": True}
    )
    _Handler.hits.clear()
    texts.text(spec)
    now[0] = 59
    texts.text(spec)
    assert _Handler.hits["/template.yaml"] == 1
    now[0] = 61
    assert texts.text(spec) == TEMPLATE
    assert _Handler.hits["/template.yaml"] == 2


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/broken.yaml", "HTTP 500"),
        ("/missing.yaml", "HTTP 404"),
        ("/big-declared.yaml", "over the limit of 1048576"),
        ("/latin1.yaml", "not UTF-8 text"),
    ],
)
def test_fetch_failures_are_clear(server: str, path: str, message: str) -> None:
    with pytest.raises(TemplateSourceError) as caught:
        loopback_renderer().render_objects(url_plan(f"{server}{path}"), TemplateAction.PROVISION, INPUTS)
    text = str(caught.value)
    assert f"cannot fetch {server}{path}: " in text and message in text
    assert text.startswith(f"plan 'remote', action 'provision', template provision ({server}{path})")


def test_an_unreachable_url_is_a_clear_error() -> None:
    url = f"http://127.0.0.1:{_closed_port()}/template.yaml"
    with pytest.raises(TemplateSourceError, match=f"cannot fetch {url}: unreachable"):
        loopback_renderer().render_objects(url_plan(url), TemplateAction.PROVISION, INPUTS)


def test_an_oversize_body_without_a_trusted_length_is_cut_off(server: str) -> None:
    class Streaming(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()  # no Content-Length: the body is read until the connection closes
            for _ in range(64):
                self.wfile.write(b"y" * 65536)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Streaming)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        with pytest.raises(FetchError, match="larger than the limit of 100000 bytes"):
            HttpFetcher(LOOPBACK).fetch(f"http://127.0.0.1:{httpd.server_address[1]}/", timeout=5, max_bytes=100_000)
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_custom_fetcher_plugs_in() -> None:
    class Fake:
        def __init__(self) -> None:
            self.calls: list[tuple[str, float, int]] = []

        def fetch(self, url: str, *, timeout: float, max_bytes: int) -> bytes:
            self.calls.append((url, timeout, max_bytes))
            if url.endswith("down"):
                raise FetchError("service unavailable")
            return TEMPLATE.encode()

    fake = Fake()
    renderer = Renderer(fetcher=fake, limits=Limits(fetch_timeout=3, max_template_bytes=5000))
    assert renderer.render_objects(url_plan("https://templates.example/pg"), TemplateAction.PROVISION, INPUTS).objects
    assert fake.calls == [("https://templates.example/pg", 3, 5000)]
    with pytest.raises(TemplateSourceError, match=r"cannot fetch https://templates\.example/down: service unavailable"):
        renderer.render_objects(url_plan("https://templates.example/down"), TemplateAction.PROVISION, INPUTS)


def _encoded_plan(encoded: str) -> SFPlan:
    return SFPlan.model_validate(
        {
            "metadata": {"name": "encoded"},
            "spec": {
                "name": "p",
                "id": "p",
                "description": "d",
                "serviceId": "s",
                "templates": [{"action": "provision", "type": "jinja2", "contentEncoded": encoded}],
            },
        }
    )


def test_content_encoded_is_base64_of_the_template() -> None:
    plan = _encoded_plan(base64.b64encode(TEMPLATE.encode()).decode())
    rendered = Renderer().render_objects(plan, TemplateAction.PROVISION, INPUTS)
    assert rendered.objects[0].manifest["metadata"]["name"] == "from-url"


@pytest.mark.parametrize(
    ("encoded", "message"),
    [("not base64!", "contentEncoded is not base64"), (base64.b64encode(b"\xff\xfe").decode(), "of UTF-8 text")],
)
def test_bad_content_encoded_is_a_clear_error(encoded: str, message: str) -> None:
    with pytest.raises(TemplateSourceError, match=message) as caught:
        Renderer().render_objects(_encoded_plan(encoded), TemplateAction.PROVISION, INPUTS)
    assert "template provision (contentEncoded)" in str(caught.value)


def test_inline_templates_are_size_limited() -> None:
    plan = SFPlan.model_validate(
        {
            "metadata": {"name": "big"},
            "spec": {
                "name": "p",
                "id": "p",
                "description": "d",
                "serviceId": "s",
                "templates": [{"action": "provision", "type": "jinja2", "content": TEMPLATE + "#" * 2000}],
            },
        }
    )
    with pytest.raises(TemplateSourceError, match=r"content is 2\d+ characters, over the limit of 1000"):
        Renderer(limits=Limits(max_template_bytes=1000)).render_objects(plan, TemplateAction.PROVISION, INPUTS)
