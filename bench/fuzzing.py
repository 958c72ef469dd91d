"""Scenario 5a: a time-bounded schemathesis fuzz of the broker through its published /openapi.json.

The approach of tests/broker/test_fuzz.py, made time-bounded and made to *report* instead of stopping at
the first failure: every operation of the document gets hypothesis-generated requests (positive and
negative generation modes, in rounds with fresh seeds until the time is up), half of the JSON bodies
steered to the demo catalog's real ids so the fuzz reaches the decisions. Every response is checked (no
5xx; status code, content type, headers and body as documented; missing required headers refused); a
failed check is recorded with the request that caused it (method, path, body, status) and the fuzz goes on.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, seed, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    missing_required_header,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from bench.common import Bench, bench_stack

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    missing_required_header,
]
REPO = Path(__file__).resolve().parent.parent
EXAMPLES_PER_RUN = 12
MAX_FAILURES_KEPT = 25


class BrokerFuzz:
    def __init__(self, bench: Bench) -> None:
        self.url = bench.endpoint.url
        credentials = f"{bench.endpoint.username}:{bench.endpoint.password}".encode()
        self.authorization = "Basic " + base64.b64encode(credentials).decode()
        self.service_id, self.plan_id = bench.plan_ids()
        self.codes: Counter[str] = Counter()
        self.by_operation: Counter[str] = Counter()
        self.failures: list[dict[str, Any]] = []
        self.failure_kinds: Counter[str] = Counter()
        self.deadline = 0.0

    def steer(self, case: Any) -> None:
        """Deterministically point half of the JSON bodies at the demo catalog's ids."""
        if not isinstance(case.body, dict):
            return
        digest = hashlib.sha256(repr(sorted(case.body.items(), key=str)).encode()).digest()
        if digest[0] % 2:
            case.body["service_id"] = self.service_id
            case.body["plan_id"] = self.plan_id

    def call(self, case: Any) -> None:
        if time.monotonic() > self.deadline:
            return
        self.steer(case)
        headers = {"Authorization": self.authorization}
        if case.operation.path.startswith("/v2") and "X-Broker-API-Version" not in (case.headers or {}):
            headers["X-Broker-API-Version"] = "2.17"
        try:
            response = case.call(headers=headers, timeout=30)
        except Exception as exc:
            self._failed(case, None, f"transport: {type(exc).__name__}: {exc}")
            return
        self.codes[str(response.status_code)] += 1
        self.by_operation[case.operation.label] += 1
        try:
            case.validate_response(response, checks=CHECKS, headers=headers)
        except (Exception, BaseExceptionGroup) as exc:  # several failed checks: schemathesis' FailureGroup, a Base one
            self._failed(case, response.status_code, f"{type(exc).__name__}: {str(exc)[:600]}")

    def _failed(self, case: Any, status: int | None, message: str) -> None:
        kind = message.split("\n", 1)[0][:160]
        self.failure_kinds[f"{case.operation.label}: {kind}"] += 1
        if len(self.failures) < MAX_FAILURES_KEPT:
            self.failures.append(
                {
                    "operation": case.operation.label,
                    "status": status,
                    "path_parameters": case.path_parameters,
                    "query": case.query,
                    "body": case.body
                    if isinstance(case.body, dict | list | str | int | float | None)
                    else repr(case.body),
                    "error": message,
                }
            )

    def run(self, seconds: float) -> dict[str, Any]:
        schema = schemathesis.openapi.from_url(self.url + "/openapi.json")
        operations = [result.ok() for result in schema.get_all_operations()]
        started = time.monotonic()
        self.deadline = started + seconds
        runs = 0
        unsatisfiable = 0
        round_ = 0
        while time.monotonic() < self.deadline:
            for operation in operations:
                for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                    if time.monotonic() >= self.deadline:
                        break
                    test = settings(
                        max_examples=EXAMPLES_PER_RUN,
                        deadline=None,
                        suppress_health_check=list(HealthCheck),
                        database=None,
                    )(given(case=operation.as_strategy(generation_mode=mode))(self.call))
                    try:
                        seed(round_ * 7919 + runs)(test)()
                    except (Exception, BaseExceptionGroup) as exc:
                        if type(exc).__name__ == "Unsatisfiable":
                            unsatisfiable += 1
                        else:
                            self.failure_kinds[f"harness: {type(exc).__name__}: {str(exc)[:160]}"] += 1
                    runs += 1
            round_ += 1
        requests = sum(self.codes.values())
        return {
            "seconds": round(time.monotonic() - started, 1),
            "operations": len(operations),
            "rounds": round_,
            "hypothesis_runs": runs,
            "requests": requests,
            "requests_per_operation": dict(sorted(self.by_operation.items())),
            "status_codes": dict(sorted(self.codes.items())),
            "server_errors": sum(n for code, n in self.codes.items() if code.startswith("5")),
            "failed_checks": sum(self.failure_kinds.values()),
            "failure_kinds": dict(self.failure_kinds.most_common()),
            "failures": self.failures,
            "unsatisfiable_negative_runs": unsatisfiable,
        }


def run(*, broker_seconds: float, renderer_seconds: float) -> dict[str, Any]:
    """Scenario 5: the broker fuzz on a fresh stack, the renderer fuzz beside it in its own process."""
    with tempfile.TemporaryDirectory(prefix="opbroker-fuzz-") as folder:
        out = Path(folder) / "renderer.json"
        errors = (Path(folder) / "renderer.err").open("w")
        renderer = subprocess.Popen(
            [sys.executable, "-m", "bench.fuzz_renderer", "--seconds", str(renderer_seconds), "--out", str(out)],
            stdout=subprocess.DEVNULL,
            stderr=errors,
            cwd=REPO,
        )
        errors.close()
        with bench_stack(f"rel-fuzz-{os.getpid()}") as bench:
            broker = BrokerFuzz(bench).run(broker_seconds)
            broker_log = bench.process("broker").log.read_text(errors="replace")
            broker["broker_alive_after"] = bench.process("broker").running
            broker["broker_unhandled_errors_logged"] = broker_log.count("unhandled error")
        try:
            renderer.wait(timeout=max(0.0, renderer_seconds - broker_seconds) + 90)
        except subprocess.TimeoutExpired:
            renderer.kill()
            renderer.wait()
            last = out.with_suffix(".last")
            rendered: dict[str, Any] = {"hang": True, "input": last.read_text() if last.exists() else None}
        else:
            if renderer.returncode != 0 or not out.exists():
                stderr = (Path(folder) / "renderer.err").read_text(errors="replace")
                rendered = {"harness_error": stderr[-2000:], "returncode": renderer.returncode}
            else:
                rendered = json.loads(out.read_text())
                rendered["hang"] = False
    return {"broker": broker, "renderer": rendered}
