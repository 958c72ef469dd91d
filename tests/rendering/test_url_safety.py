"""Template URLs fetched safely: where a fetch may go, how long it may take, what it may deliver.

Aspects covered, against real HTTP(S) servers on loopback addresses (the template server on 127.0.0.2, allowed
explicitly by the test's policy; a trap server on 127.0.0.1 that must never be reached):

* destinations: a redirect to 127.0.0.1 or 169.254.169.254 is refused, and so is a first URL on a loopback
  address nobody allowed; a redirect that changes the scheme is refused; the address that was checked is the one
  connected to (a resolver answering differently the second time — DNS rebinding — is never asked twice), and a
  name with any forbidden address is refused; TLS still verifies the URL's host name when connecting by address;
* plain http only when the template opts in (``allowHttp``); ``digest`` is verified (a mismatch renders nothing;
  a stale cached body is fetched again once);
* one deadline per fetch: a host dripping one byte at a time fails at the deadline, before it finishes;
* ``*_PROXY`` variables are ignored, a configured proxy is used;
* concurrent renders of one URL make one request; the cache is bounded in bytes;
* as a user meets it: ``opbroker validate`` refuses a plain-http plan, ``opbroker controller run`` a bad network.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pydantic
import pytest
import trustme
import yaml

from opbroker.api import SFPlan, TemplateAction, TemplateSpec
from opbroker.rendering import FetchError, FetchPolicy, HttpFetcher, Limits, Renderer, RenderInputs, TemplateSourceError
from opbroker.rendering.loading import TemplateTexts

TEMPLATE = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ instance.metadata.name }}\n"
INPUTS = RenderInputs(instance={"metadata": {"name": "from-url"}, "spec": {}}, default_namespace="n")
ORIGIN = "127.0.0.2"
ALLOW_ORIGIN = FetchPolicy.from_flags([f"{ORIGIN}/32"])


class _Server:
    """A threaded HTTP server on ``host`` answering from ``routes``; counts requests per path."""

    def __init__(self, host: str, routes: dict[str, Any], context: ssl.SSLContext | None = None) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with owner.lock:
                    owner.hits[self.path] = owner.hits.get(self.path, 0) + 1
                    owner.hosts.append(self.headers.get("Host", ""))
                answer = owner.routes.get(self.path, (404, b"not here", {}))
                if callable(answer):
                    answer(self)
                    return
                status, body, headers = answer
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.routes = routes
        self.hits: dict[str, int] = {}
        self.hosts: list[str] = []
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        if context is not None:
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.url = f"{'https' if context else 'http'}://{host}:{self.port}"
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def total(self) -> int:
        return sum(self.hits.values())

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def trap() -> Iterator[_Server]:
    """What an attacker would point the controller at: it serves a template, so reaching it would succeed."""
    server = _Server("127.0.0.1", {"/admin": (200, TEMPLATE.encode(), {})})
    yield server
    server.close()


@pytest.fixture
def origin() -> Iterator[_Server]:
    server = _Server(ORIGIN, {"/template.yaml": (200, TEMPLATE.encode(), {})})
    yield server
    server.close()


def url_plan(url: str, **options: Any) -> SFPlan:
    template = {"action": "provision", "type": "jinja2", "url": url, **options}
    if url.startswith("http://"):
        template.setdefault("allowHttp", True)
    spec = {"name": "p", "id": "p", "description": "d", "serviceId": "s", "templates": [template]}
    return SFPlan.model_validate({"metadata": {"name": "remote"}, "spec": spec})


def renderer(policy: FetchPolicy = ALLOW_ORIGIN, **limits: Any) -> Renderer:
    return Renderer(fetcher=HttpFetcher(policy), limits=Limits(**{"fetch_timeout": 5.0, **limits}))


def render(renderer: Renderer, url: str, **options: Any) -> str:
    rendered = renderer.render_objects(url_plan(url, **options), TemplateAction.PROVISION, INPUTS)
    name: str = rendered.objects[0].manifest["metadata"]["name"]
    return name


# -- destinations -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "kind"),
    [("http://127.0.0.1:{trap}/admin", "loopback"), ("http://169.254.169.254/latest/meta-data/", "link-local")],
    ids=["loopback", "metadata-service"],
)
def test_a_redirect_into_loopback_or_link_local_is_refused(
    origin: _Server, trap: _Server, target: str, kind: str
) -> None:
    location = target.format(trap=trap.port)
    origin.routes["/hop"] = (302, b"", {"Location": location})
    with pytest.raises(TemplateSourceError) as caught:
        render(renderer(), f"{origin.url}/hop")
    address = location.split("//")[1].split(":")[0].split("/")[0]
    assert f"redirected to {location}: refused: {address} is a {kind} address" in str(caught.value)
    assert origin.hits == {"/hop": 1}
    assert trap.total == 0, "the redirect target was reached"


def test_a_loopback_origin_needs_its_network_allowed(trap: _Server) -> None:
    with pytest.raises(TemplateSourceError, match=r"refused: 127\.0\.0\.1 is a loopback address"):
        render(renderer(FetchPolicy()), f"{trap.url}/admin")
    assert trap.total == 0
    assert render(renderer(FetchPolicy.from_flags(["127.0.0.0/8"])), f"{trap.url}/admin") == "from-url"


def test_a_redirect_within_the_allowed_origin_is_followed(origin: _Server) -> None:
    origin.routes["/moved"] = (301, b"", {"Location": "/template.yaml"})
    assert render(renderer(), f"{origin.url}/moved") == "from-url"
    assert origin.hits == {"/moved": 1, "/template.yaml": 1}


def test_a_redirect_that_changes_the_scheme_is_refused(origin: _Server) -> None:
    origin.routes["/upgrade"] = (307, b"", {"Location": f"https://{ORIGIN}:{origin.port}/template.yaml"})
    with pytest.raises(TemplateSourceError, match=r"to https://127\.0\.0\.2:\d+/template\.yaml leaves http: refused"):
        render(renderer(), f"{origin.url}/upgrade")


def test_too_many_redirects_are_refused(origin: _Server) -> None:
    origin.routes["/loop"] = (302, b"", {"Location": "/loop"})
    with pytest.raises(TemplateSourceError, match="more than 5 redirects"):
        render(renderer(), f"{origin.url}/loop")
    assert origin.hits == {"/loop": 6}


def test_the_checked_address_is_the_one_connected_to(origin: _Server, trap: _Server) -> None:
    """DNS rebinding: the name resolves to the allowed origin once, to the trap afterwards."""
    trap.routes["/template.yaml"] = (200, b"kind: Stolen\n", {})
    answers = [[ORIGIN], ["127.0.0.1"], ["127.0.0.1"]]
    asked: list[str] = []

    def rebinding(host: str, port: int, seconds: float) -> list[str]:
        asked.append(host)
        return answers[len(asked) - 1]

    fetcher = HttpFetcher(ALLOW_ORIGIN, resolver=rebinding)
    url = f"http://templates.test:{origin.port}/template.yaml"
    assert fetcher.fetch(url, timeout=5, max_bytes=10_000) == TEMPLATE.encode()
    assert asked == ["templates.test"], "the name was looked up again after the check"
    assert origin.hosts == [f"templates.test:{origin.port}"]
    assert trap.total == 0


def test_a_name_with_any_forbidden_address_is_refused(origin: _Server) -> None:
    fetcher = HttpFetcher(ALLOW_ORIGIN, resolver=lambda host, port, seconds: [ORIGIN, "10.0.0.7"])
    with pytest.raises(FetchError, match=r"refused: templates\.test resolves to 10\.0\.0\.7, a private address"):
        fetcher.fetch(f"http://templates.test:{origin.port}/template.yaml", timeout=5, max_bytes=10_000)
    assert origin.total == 0


def test_https_to_a_checked_address_still_verifies_the_host_name() -> None:
    ca = trustme.CA()
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("templates.test").configure_cert(served)
    server = _Server(ORIGIN, {"/template.yaml": (200, TEMPLATE.encode(), {})}, context=served)
    trusting = ssl.create_default_context()
    ca.configure_trust(trusting)
    fetcher = HttpFetcher(ALLOW_ORIGIN, ssl_context=trusting, resolver=lambda host, port, seconds: [ORIGIN])
    try:
        body = fetcher.fetch(f"https://templates.test:{server.port}/template.yaml", timeout=5, max_bytes=10_000)
        assert body == TEMPLATE.encode()
        with pytest.raises(FetchError, match="CERTIFICATE_VERIFY_FAILED"):
            fetcher.fetch(f"https://other.test:{server.port}/template.yaml", timeout=5, max_bytes=10_000)
    finally:
        server.close()


# -- what a template must say -------------------------------------------------------------------------------------


def test_plain_http_needs_allow_http() -> None:
    template = {"action": "provision", "type": "jinja2", "url": "http://templates.example/pg.yaml"}
    with pytest.raises(pydantic.ValidationError, match="plain http: use https, or set allowHttp: true"):
        TemplateSpec.model_validate(template)
    assert TemplateSpec.model_validate({**template, "allowHttp": True}).allow_http
    assert TemplateSpec.model_validate({**template, "url": "https://templates.example/pg.yaml"}).url


@pytest.mark.parametrize("extra", [{"allowHttp": True}, {"digest": "sha256:" + "0" * 64}], ids=["allowHttp", "digest"])
def test_url_options_need_a_url(extra: dict[str, Any]) -> None:
    with pytest.raises(pydantic.ValidationError, match="apply to a url template only"):
        TemplateSpec.model_validate({"action": "provision", "type": "jinja2", "content": "a: b", **extra})


@pytest.mark.parametrize("digest", ["sha256:abc", "md5:" + "0" * 32, "sha256:" + "A" * 64])
def test_a_malformed_digest_is_refused(digest: str) -> None:
    with pytest.raises(pydantic.ValidationError, match="digest"):
        TemplateSpec.model_validate(
            {"action": "provision", "type": "jinja2", "url": "https://t.example/a", "digest": digest}
        )


def test_a_digest_mismatch_renders_nothing(origin: _Server) -> None:
    wrong = "sha256:" + hashlib.sha256(b"another template").hexdigest()
    with pytest.raises(TemplateSourceError) as caught:
        render(renderer(), f"{origin.url}/template.yaml", digest=wrong)
    actual = "sha256:" + hashlib.sha256(TEMPLATE.encode()).hexdigest()
    assert f"its content has digest {actual}, the template requires {wrong}; nothing was rendered" in str(caught.value)
    assert render(renderer(), f"{origin.url}/template.yaml", digest=actual) == "from-url"


def test_a_cached_body_with_another_digest_is_fetched_again(origin: _Server) -> None:
    shared = renderer()
    render(shared, f"{origin.url}/template.yaml")
    updated = TEMPLATE.replace("name: ", "name: v2-")
    origin.routes["/template.yaml"] = (200, updated.encode(), {})
    pinned = "sha256:" + hashlib.sha256(updated.encode()).hexdigest()
    assert render(shared, f"{origin.url}/template.yaml", digest=pinned) == "v2-from-url"
    assert origin.hits == {"/template.yaml": 2}


# -- time -----------------------------------------------------------------------------------------------------------


def test_a_drip_feeding_host_fails_at_the_deadline(origin: _Server) -> None:
    """One byte every 0.1 s of a 40-byte body (4 s in all) against a 0.5 s deadline: each read alone is quick."""
    finished = threading.Event()

    def drip(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", "40")
        handler.end_headers()
        try:
            for _ in range(40):
                handler.wfile.write(b"#")
                handler.wfile.flush()
                time.sleep(0.1)
        except OSError:
            return  # the fetcher hung up
        finished.set()

    origin.routes["/drip"] = drip
    with pytest.raises(TemplateSourceError, match=r"cannot fetch .*/drip: no complete answer within 0\.5s"):
        render(renderer(fetch_timeout=0.5), f"{origin.url}/drip")
    assert not finished.is_set(), "the fetch waited for the whole drip"


# -- proxies ------------------------------------------------------------------------------------------------------


def test_proxy_variables_are_ignored(origin: _Server, trap: _Server, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.setenv(name, trap.url)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert render(renderer(), f"{origin.url}/template.yaml") == "from-url"
    assert origin.hits == {"/template.yaml": 1}
    assert trap.total == 0


def test_a_configured_proxy_is_used(origin: _Server, trap: _Server) -> None:
    url = f"{origin.url}/template.yaml"
    trap.routes[url] = (200, TEMPLATE.replace("name: ", "name: proxied-").encode(), {})  # absolute-form request
    assert render(renderer(FetchPolicy.from_flags([f"{ORIGIN}/32"], proxy=trap.url)), url) == "proxied-from-url"
    assert trap.hits == {url: 1}
    assert origin.total == 0


def test_a_bad_policy_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"'10\.0\.0/33' is not an IP network"):
        FetchPolicy.from_flags(["10.0.0/33"])
    with pytest.raises(ValueError, match=r"'socks5://p:1080' is not an http:// or https:// proxy URL"):
        FetchPolicy.from_flags(proxy="socks5://p:1080")


# -- many renders -------------------------------------------------------------------------------------------------


def test_concurrent_renders_of_one_url_fetch_it_once(origin: _Server) -> None:
    release = threading.Event()

    def slow(handler: BaseHTTPRequestHandler) -> None:
        release.wait(5)
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(TEMPLATE)))
        handler.end_headers()
        handler.wfile.write(TEMPLATE.encode())

    origin.routes["/slow.yaml"] = slow
    shared = renderer()
    start = threading.Barrier(9)
    names: list[str] = []

    def one() -> None:
        start.wait()
        names.append(render(shared, f"{origin.url}/slow.yaml"))

    threads = [threading.Thread(target=one) for _ in range(8)]
    for thread in threads:
        thread.start()
    start.wait()
    time.sleep(0.5)  # every render has asked for the URL while the server holds the first request
    release.set()
    for thread in threads:
        thread.join(10)
    assert names == ["from-url"] * 8
    assert origin.hits == {"/slow.yaml": 1}


def test_a_failure_is_shared_by_the_renders_waiting_for_it_and_not_cached() -> None:
    calls: list[str] = []
    entered, release = threading.Event(), threading.Event()

    class Failing:
        def fetch(self, url: str, *, timeout: float, max_bytes: int) -> bytes:
            calls.append(url)
            entered.set()
            release.wait(5)
            raise FetchError("HTTP 503 Service Unavailable")

    texts = TemplateTexts(Failing(), Limits())
    spec = TemplateSpec.model_validate({"action": "provision", "type": "jinja2", "url": "https://t.example/a"})
    errors: list[str] = []

    def one() -> None:
        try:
            texts.text(spec)
        except TemplateSourceError as exc:
            errors.append(str(exc))

    leader = threading.Thread(target=one)
    leader.start()
    entered.wait(5)
    followers = [threading.Thread(target=one) for _ in range(3)]
    for thread in followers:
        thread.start()
    time.sleep(0.2)
    release.set()
    for thread in [leader, *followers]:
        thread.join(10)
    assert errors == ["cannot fetch https://t.example/a: HTTP 503 Service Unavailable"] * 4
    assert calls == ["https://t.example/a"]
    with pytest.raises(TemplateSourceError, match="HTTP 503"):
        texts.text(spec)
    assert len(calls) == 2, "a failure was cached"


def test_the_cache_is_bounded_in_bytes() -> None:
    fetched: list[str] = []

    class Sized:
        def fetch(self, url: str, *, timeout: float, max_bytes: int) -> bytes:
            fetched.append(url)
            return b"#" * 400

    texts = TemplateTexts(Sized(), Limits(url_cache_bytes=1000))

    def text(name: str) -> None:
        texts.text(TemplateSpec.model_validate({"action": "provision", "type": "jinja2", "url": f"https://t/{name}"}))

    for name in ("a", "b", "a", "c", "a", "b"):  # c pushes out the least recently used: b, not a
        text(name)
    assert fetched == ["https://t/a", "https://t/b", "https://t/c", "https://t/b"]


# -- as a user meets it ---------------------------------------------------------------------------------------------

OPBROKER = shutil.which("opbroker", path=str(Path(sys.executable).parent)) or "opbroker"


@pytest.mark.process
def test_validate_refuses_a_plain_http_template_and_the_controller_a_bad_network(tmp_path: Path) -> None:
    plan = url_plan("https://templates.example/p.yaml").to_manifest()
    plan["spec"]["templates"][0]["url"] = "http://templates.example/p.yaml"
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan))
    validated = subprocess.run(
        [OPBROKER, "validate", str(tmp_path / "plan.yaml")], capture_output=True, text=True, timeout=60, check=False
    )
    assert validated.returncode == 1
    assert "url http://templates.example/p.yaml is plain http: use https, or set allowHttp: true" in validated.stderr
    started = subprocess.run(
        [OPBROKER, "controller", "run", "--template-allow-network", "10.0.0/33"],
        env={**os.environ, "COLUMNS": "300"},  # one line per message in the error box
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert started.returncode == 2
    assert "'10.0.0/33' is not an IP network" in started.stderr
