"""Property-based fuzzing of the broker through its published OpenAPI document (schemathesis).

Every documented operation gets generated requests — valid and invalid bodies, parameters and headers —
sent over real HTTP to a broker on a real API server. Checked: no 5xx, every status code, content type,
header and body is one the document declares, and missing required headers are refused. Half of the
generated bodies are steered to real catalog ids so the fuzz reaches the decisions, not only the "unknown
service" 400. Only asynchronous plans are steered to: a synchronous plan with no controller running
answers 504 after its wait, by design (documented), which is not what this test is about.

The admin API (its own credentials) is fuzzed on a broker that serves it, twice: with the admin credentials
(half of the plan names steered to a real SFPlan, so requests are recorded, read back and cancelled) and with the
OSB platform's, which it must refuse with the documented 401.

Bounded: a fixed number of examples per operation (about 30 s in all on a 2-core machine).
"""

# ruff: noqa: F811  (test functions take the imported fixtures as arguments)

from __future__ import annotations

import base64
import hashlib
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from kubernetes import client
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    missing_required_header,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from opbroker.broker.connections import DEFAULT_MAX_HEAD_BYTES
from tests.broker_support import (
    ASYNC_PLAN,
    FIXED_PLAN,
    PASSWORD,
    SERVICE,
    STRICT_PLAN,
    USERNAME,
    Harness,
    broker,  # noqa: F401  (pytest fixtures)
    create_namespace,
    install_catalog,
    start_broker,
)


def basic(username: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()


AUTHORIZATION = basic(USERNAME, PASSWORD)
ADMIN = ("fuzz-admin", "fuzz-admin-s3cret")
ADMIN_EXAMPLES = 25
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    missing_required_header,
]
STEER_TO = (ASYNC_PLAN, FIXED_PLAN, STRICT_PLAN)
EXAMPLES = 50


def steer(case: Any) -> None:
    """Deterministically point half of the JSON bodies at real service/plan ids."""
    if not isinstance(case.body, dict):
        return
    digest = hashlib.sha256(repr(sorted(case.body.items(), key=str)).encode()).digest()
    if digest[0] % 2:
        case.body["service_id"] = SERVICE
        case.body["plan_id"] = STEER_TO[digest[1] % len(STEER_TO)]


def head_bytes(case: Any, headers: dict[str, str]) -> int:
    """About the size of the request line and headers the case would send."""
    sent = case.as_transport_kwargs(base_url="http://broker", headers=headers)
    try:
        target = httpx.Request(sent["method"], sent["url"], params=sent.get("params")).url.raw_path
    except httpx.InvalidURL:  # a URL component past httpx's own 65 536 characters: far past any head limit
        return 1 << 20
    return len(target) + sum(len(str(k)) + len(str(v)) + 4 for k, v in (sent.get("headers") or {}).items()) + 64


def call(case: Any) -> None:
    steer(case)
    headers = {"Authorization": AUTHORIZATION}
    if case.operation.path.startswith("/v2") and "X-Broker-API-Version" not in (case.headers or {}):
        headers["X-Broker-API-Version"] = "2.17"
    if head_bytes(case, headers) > DEFAULT_MAX_HEAD_BYTES:
        # Refused by the HTTP parser before the app (400, or a reset): tests/broker/test_edge.py covers that
        # edge, this test the app behind it. Negative cases make 10 001-character operation tokens of multibyte text.
        SKIPPED.append(case.operation.label)
        return
    case.call_and_validate(headers=headers, checks=CHECKS)
    CALLS.append(case.operation.label)


CALLS: list[str] = []
SKIPPED: list[str] = []


def fuzz(operation: Any, mode: GenerationMode, call: Callable[[Any], None], examples: int) -> None:
    """``examples`` generated cases of ``operation`` (derandomized: the same cases every run), each to ``call``."""
    run = settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
        database=None,
    )(given(case=operation.as_strategy(generation_mode=mode))(call))
    try:
        run()
    except Unsatisfiable:
        assert mode is GenerationMode.NEGATIVE  # nothing to make invalid (e.g. /healthz)


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_fuzz_finds_no_server_errors(broker: Harness, mode: GenerationMode) -> None:
    # schemathesis' own pytest loader does not work with pytest 9 yet; drive hypothesis directly.
    schema = schemathesis.openapi.from_url(broker.url + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == 13
    CALLS.clear()
    SKIPPED.clear()
    for operation in operations:
        fuzz(operation, mode, call, EXAMPLES)
    assert len(CALLS) >= len(operations) * 5, CALLS
    assert len(SKIPPED) < len(CALLS) / 10, SKIPPED  # the head limit must not hide the app from the fuzz
    print(f"fuzz {mode.value}: {len(CALLS)} requests over {len(operations)} operations, {len(SKIPPED)} heads too large")


@pytest.fixture(scope="module")
def admin_broker(api_client: client.ApiClient) -> Iterator[Harness]:
    """A broker serving the admin API too, with the test catalog in its own control-plane namespace (no
    controller: what the admin API records stays pending, which it answers 202)."""
    namespace = create_namespace(api_client)
    install_catalog(api_client, namespace)
    harness = start_broker(api_client, namespace, admin_username=ADMIN[0], admin_password=ADMIN[1])
    try:
        yield harness
    finally:
        harness.background.stop()
        client.CoreV1Api(api_client).delete_namespace(namespace)


@pytest.mark.parametrize("who", ["admin", "platform"])
def test_fuzz_of_the_admin_api_answers_only_what_it_documents(admin_broker: Harness, who: str) -> None:
    schema = schemathesis.openapi.from_url(admin_broker.url + "/openapi.json")
    operations = [op for op in (result.ok() for result in schema.get_all_operations()) if op.path.startswith("/admin")]
    assert len(operations) == 5
    authorization = basic(*ADMIN) if who == "admin" else AUTHORIZATION
    codes: Counter[tuple[str, int]] = Counter()

    def call_admin(case: Any) -> None:
        digest = hashlib.sha256(repr(sorted((case.path_parameters or {}).items())).encode()).digest()
        if digest[0] % 2:
            case.path_parameters = {**(case.path_parameters or {}), "plan": ASYNC_PLAN}
        headers = {"Authorization": authorization}
        if head_bytes(case, headers) > DEFAULT_MAX_HEAD_BYTES:
            return  # refused before the app (see call above)
        response = case.call(headers=headers, timeout=30)
        codes[case.meta.generation.mode.value if case.meta else "?", response.status_code] += 1
        case.validate_response(response, checks=CHECKS, headers=headers)

    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            fuzz(operation, mode, call_admin, ADMIN_EXAMPLES)
    if who == "platform":
        assert {code for _, code in codes} == {401}, codes  # the platform's credentials never reach an admin route
    else:
        # Negative generation breaks the credentials too (401 then); valid requests are never refused them.
        assert codes["positive", 401] == 0, codes
        assert codes["positive", 202] > 0 and codes["positive", 404] > 0, codes  # recorded and read; unknown plans
        assert codes["negative", 400] > 0, codes  # malformed bodies and parameters get OSB's 400, documented
    print(f"admin fuzz as {who}: {codes}")
