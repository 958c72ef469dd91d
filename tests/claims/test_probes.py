"""The built-in health probes against real servers on 127.0.0.1 (no API server needed).

Aspects: TCP connect passes, refused fails, an unresolvable host fails (Unreachable, not Undetermined);
HTTP expected status passes, another status fails, basic auth with the endpoint's credentials; ``$(key)``
expansion, and an unknown key making the check Undetermined; messages never carry credentials; the
prober runs probes off the caller's thread, one at a time per key, and reports back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable

from opbroker.api.primaza import HealthCheck
from opbroker.controller.claims import probes
from opbroker.controller.claims.core.states import CheckOutcome, Result
from opbroker.controller.core.reasons import Reason
from tests.claims_support import TcpTarget, http_target, tcp_target


def run_check(fields: dict[str, object], values: dict[str, str]) -> CheckOutcome:
    probe = probes.probe_for(HealthCheck.model_validate(fields), values, timeout=2.0)
    return probe if isinstance(probe, CheckOutcome) else probes.run(probe)


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


def test_the_prober_runs_off_thread_once_per_key_and_reports() -> None:
    done: list[Hashable] = []
    reported = threading.Event()

    def on_done(key: Hashable) -> None:
        done.append(key)
        reported.set()

    prober = probes.Prober(on_done, workers=2)
    try:
        with http_target(delay=0.5) as target:
            probe = probes.HttpProbe(url=target.url, expected_status=200, timeout=2.0)
            started = time.monotonic()
            assert prober.submit("k", "f1", probe)
            assert time.monotonic() - started < 0.2  # the caller is not blocked
            assert prober.running("k") and not prober.submit("k", "f1", probe)
            assert reported.wait(5)
            finished = prober.take("k")
            assert finished is not None and finished.fingerprint == "f1"
            assert finished.outcome.result == Result.PASSED
            assert done == ["k"] and not prober.running("k") and prober.take("k") is None
            assert target.requests == 1
    finally:
        prober.shutdown()
