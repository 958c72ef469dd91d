"""The built-in health probes against real servers on 127.0.0.1 (no API server needed).

Aspects: TCP connect passes, refused fails, an unresolvable host fails (Unreachable, not Undetermined);
HTTP expected status passes, another status fails, basic auth with the endpoint's credentials; ``$(key)``
expansion, and an unknown key making the check Undetermined; messages never carry credentials; the
prober runs probes as tasks on the loop, one at a time per key, and reports back; a body is never read.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import threading
from collections.abc import Hashable, Iterator
from typing import Any

from opbroker.api.primaza import HealthCheck
from opbroker.controller.claims import probes
from opbroker.controller.claims.core.states import CheckOutcome, Result
from opbroker.controller.core.reasons import Reason
from tests.claims_support import TcpTarget, http_target, tcp_target


def run_check(fields: dict[str, object], values: dict[str, str]) -> CheckOutcome:
    probe = probes.probe_for(HealthCheck.model_validate(fields), values, timeout=2.0)
    return probe if isinstance(probe, CheckOutcome) else asyncio.run(probes.run(probe))


def test_tcp_connect() -> None:
    with tcp_target() as target:
        outcome = run_check({"tcp": {"host": "$(host)", "port": target.port}}, {"host": "127.0.0.1"})
        assert outcome.result == Result.PASSED, outcome
    closed = TcpTarget()  # a port nobody listens on
    outcome = run_check({"tcp": {"host": "127.0.0.1", "port": closed.port}}, {})
    assert (outcome.result, outcome.reason) == (Result.FAILED, Reason.PROBE_FAILED)
    assert f"127.0.0.1:{closed.port}" in outcome.message


def test_an_unresolvable_host_is_a_failure_not_undetermined() -> None:
    outcome = run_check({"tcp": {"host": "no-such-host.invalid", "port": 5432}}, {})
    assert outcome.result == Result.FAILED and "does not resolve" in outcome.message
    outcome = run_check({"http": {"url": "http://no-such-host.invalid:8080/health"}}, {})
    assert outcome.result == Result.FAILED and "does not resolve" in outcome.message


def test_an_unknown_reference_makes_the_check_undetermined() -> None:
    outcome = run_check({"tcp": {"host": "$(hostname)", "port": 1}}, {"host": "x"})
    assert (outcome.result, outcome.reason) == (Result.UNDETERMINED, Reason.CHECK_INVALID)
    assert "$(hostname)" in outcome.message


def test_http_status() -> None:
    with http_target() as target:
        check: dict[str, dict[str, object]] = {"http": {"url": "http://$(host):" + str(target.port) + "/health"}}
        assert run_check(check, {"host": "127.0.0.1"}).result == Result.PASSED
        target.status = 503
        outcome = run_check(check, {"host": "127.0.0.1"})
        assert outcome.result == Result.FAILED
        assert outcome.message == f"HTTP 503 from 127.0.0.1:{target.port}, expected 200"
        expecting_503 = {"http": {"url": check["http"]["url"], "expectedStatus": 503}}
        assert run_check(expecting_503, {"host": "127.0.0.1"}).result == Result.PASSED


def test_http_uses_the_endpoint_credentials() -> None:
    with http_target(username="app", password="s3cret-pw") as target:
        check = {"http": {"url": f"{target.url}/health?token=$(password)"}}
        assert run_check(check, {"username": "app", "password": "wrong"}).result == Result.FAILED
        outcome = run_check(check, {"username": "app", "password": "s3cret-pw"})
        assert outcome.result == Result.PASSED and target.authorized == 1
        assert "s3cret-pw" not in outcome.message and "token" not in outcome.message


def test_the_prober_runs_probes_on_the_loop_once_per_key_and_reports() -> None:
    """Submitted from a reconcile's thread, the probe runs as a task on the loop (the caller is not blocked), one at
    a time per key; its outcome is kept until taken and ``on_done`` is told on the loop."""

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        reported = asyncio.Event()
        done: list[tuple[Hashable, bool]] = []

        def on_done(key: Hashable) -> None:
            done.append((key, threading.current_thread() is threading.main_thread()))
            reported.set()

        prober = probes.Prober(on_done, lambda: loop, workers=2)
        with http_target(delay=0.5) as target:
            probe = probes.HttpProbe(url=target.url, expected_status=200, timeout=2.0)
            submitted = await asyncio.to_thread(prober.submit, "k", "f1", probe)  # as a reconcile would
            assert submitted and prober.running("k") and not prober.submit("k", "f1", probe)
            await asyncio.wait_for(reported.wait(), 5)
            finished = prober.take("k")
            assert finished is not None and finished.fingerprint == "f1"
            assert finished.outcome.result == Result.PASSED
            assert done == [("k", True)] and not prober.running("k") and prober.take("k") is None
            assert target.requests == 1
        prober.shutdown()

    asyncio.run(scenario())


def test_a_probe_never_reads_the_response_body() -> None:
    """A registered service answering with an endless body: the probe has its status, and reads no further."""
    with endless_target() as url:
        outcome = run_check({"http": {"url": url}}, {})
    assert outcome.result == Result.PASSED and outcome.message.startswith("HTTP 200")


def test_the_prober_runs_nothing_before_its_loop_runs() -> None:
    prober = probes.Prober(lambda key: None, lambda: None)
    assert not prober.submit("k", "f", probes.TcpProbe("127.0.0.1", 1, 1.0)) and not prober.running("k")


@contextlib.contextmanager
def endless_target() -> Iterator[str]:
    """An HTTP server whose answer's body never ends (chunks for as long as the client reads)."""

    class Endless(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            chunk = b"x" * 65536
            try:
                while True:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            except OSError:
                return  # the client closed: the probe read no more

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Endless)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
