"""The second broker (``tests/brokers``) behaves as documented, so controller tests can rely on it.

Each test drives the running process with plain httpx, as a platform would, and reads the broker's own view
through its admin API.
"""

from __future__ import annotations

import ast
import base64
import json
import sys
import time

import httpx
import pytest

from tests.brokers.fixture import (
    DB_ASYNC_PLAN,
    DB_SERVICE,
    DB_SYNC_PLAN,
    QUEUE_LARGE_PLAN,
    QUEUE_PLAN,
    QUEUE_SERVICE,
    SCRIPT,
    SecondBroker,
    default_catalog,
)

pytestmark = pytest.mark.process  # runs another program (see tests/conftest.py)

SYNC = {"service_id": DB_SERVICE, "plan_id": DB_SYNC_PLAN}
ASYNC = {"service_id": DB_SERVICE, "plan_id": DB_ASYNC_PLAN}
QUEUE = {"service_id": QUEUE_SERVICE, "plan_id": QUEUE_PLAN}


def test_the_broker_imports_only_the_standard_library() -> None:
    """Independence from our code is the point: no opbroker, FastAPI or other third-party import."""
    tree = ast.parse(SCRIPT.read_text())
    imported = {
        alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    }
    imported |= {
        node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    assert imported - {"__future__"} <= sys.stdlib_module_names, imported - sys.stdlib_module_names


def test_catalog_has_a_sync_only_and_an_async_only_plan(second_broker: SecondBroker) -> None:
    with second_broker.client() as osb:
        response = osb.get("/v2/catalog")
    assert response.status_code == 200
    services = {s["name"]: s for s in response.json()["services"]}
    assert set(services) == {"second-db", "second-queue"}
    db = services["second-db"]
    assert db["bindable"] and db["plan_updateable"] and db["id"] == DB_SERVICE
    assert {p["name"]: p["id"] for p in db["plans"]} == {"sync-small": DB_SYNC_PLAN, "async-large": DB_ASYNC_PLAN}
    assert services["second-queue"]["bindable"] is False


def test_basic_auth_is_required(second_broker: SecondBroker) -> None:
    version = {"X-Broker-API-Version": "2.17"}
    wrong = base64.b64encode(b"second-user:not-the-password").decode()
    assert httpx.get(f"{second_broker.url}/v2/catalog", headers=version).status_code == 401
    response = httpx.get(f"{second_broker.url}/v2/catalog", headers=version | {"Authorization": f"Basic {wrong}"})
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Basic")
    bearer = version | {"Authorization": "Bearer second-user"}
    assert httpx.get(f"{second_broker.url}/v2/catalog", headers=bearer).status_code == 401


def test_bearer_auth_is_required(second_broker_token: SecondBroker) -> None:
    url, version = f"{second_broker_token.url}/v2/catalog", {"X-Broker-API-Version": "2.17"}
    assert httpx.get(url, headers=version).status_code == 401
    assert httpx.get(url, headers=version | {"Authorization": "Bearer wrong"}).status_code == 401
    basic = base64.b64encode(f"x:{second_broker_token.token}".encode()).decode()
    assert httpx.get(url, headers=version | {"Authorization": f"Basic {basic}"}).status_code == 401
    assert httpx.get(url, headers=second_broker_token.osb_headers()).status_code == 200


@pytest.mark.parametrize(
    ("version", "status"), [(None, 412), ("2.12", 412), ("two", 412), ("2.13", 200), ("2.17", 200)]
)
def test_api_version_below_2_13_is_refused(second_broker: SecondBroker, version: str | None, status: int) -> None:
    headers = second_broker.osb_headers()
    if version is None:
        del headers["X-Broker-API-Version"]
    else:
        headers["X-Broker-API-Version"] = version
    assert httpx.get(f"{second_broker.url}/v2/catalog", headers=headers).status_code == status


def test_sync_plan_answers_201_even_when_async_is_accepted(second_broker: SecondBroker) -> None:
    body = SYNC | {"parameters": {"size": 1}}
    with second_broker.client() as osb:
        first = osb.put("/v2/service_instances/i1", params={"accepts_incomplete": "true"}, json=body)
        again = osb.put("/v2/service_instances/i1", params={"accepts_incomplete": "true"}, json=body)
        other = osb.put("/v2/service_instances/i1", json=SYNC | {"parameters": {"size": 2}})
        fetched = osb.get("/v2/service_instances/i1")
    assert (first.status_code, again.status_code, other.status_code) == (201, 200, 409)
    assert "operation" not in first.json()
    assert fetched.status_code == 200 and fetched.json()["parameters"] == {"size": 1}
    assert second_broker.state()["instances"]["i1"]["state"] == "succeeded"


def test_unknown_service_or_plan_is_400(second_broker: SecondBroker) -> None:
    with second_broker.client() as osb:
        assert (
            osb.put("/v2/service_instances/i1", json={"service_id": "nope", "plan_id": DB_SYNC_PLAN}).status_code == 400
        )
        assert (
            osb.put("/v2/service_instances/i1", json={"service_id": DB_SERVICE, "plan_id": "nope"}).status_code == 400
        )
        assert osb.put("/v2/service_instances/i1", json=QUEUE | {"service_id": DB_SERVICE}).status_code == 400
    assert second_broker.state()["instances"] == {}


def test_async_plan_needs_accepts_incomplete(second_broker: SecondBroker) -> None:
    with second_broker.client() as osb:
        response = osb.put("/v2/service_instances/i1", json=ASYNC)
    assert response.status_code == 422
    assert response.json()["error"] == "AsyncRequired"
    assert second_broker.state()["instances"] == {}


def test_async_provision_polls_in_progress_with_retry_after_then_succeeds(second_broker: SecondBroker) -> None:
    second_broker.settings(async_polls=3, retry_after=7)
    with second_broker.client() as osb:
        accepted = osb.put("/v2/service_instances/i1", params={"accepts_incomplete": "true"}, json=ASYNC)
        assert accepted.status_code == 202
        operation = accepted.json()["operation"]
        resent = osb.put("/v2/service_instances/i1", params={"accepts_incomplete": "true"}, json=ASYNC)
        assert (resent.status_code, resent.json()["operation"]) == (202, operation)
        assert osb.get("/v2/service_instances/i1").status_code == 404  # not provisioned yet
        query = {"operation": operation, "service_id": DB_SERVICE, "plan_id": DB_ASYNC_PLAN}
        polls = [osb.get("/v2/service_instances/i1/last_operation", params=query) for _ in range(4)]
        assert [p.json()["state"] for p in polls] == ["in progress"] * 3 + ["succeeded"]
        assert [p.headers.get("Retry-After") for p in polls] == ["7", "7", "7", None]
        assert osb.get("/v2/service_instances/i1/last_operation", params={"operation": "other"}).status_code == 400
        assert osb.get("/v2/service_instances/i1").status_code == 200
        assert osb.put("/v2/service_instances/i1", params={"accepts_incomplete": "true"}, json=ASYNC).status_code == 200


def test_async_deprovision_then_last_operation_is_gone(second_broker: SecondBroker) -> None:
    second_broker.settings(async_polls=1)
    incomplete = {"accepts_incomplete": "true"}
    with second_broker.client() as osb:
        osb.put("/v2/service_instances/i1", params=incomplete, json=ASYNC)
        osb.get("/v2/service_instances/i1/last_operation")
        osb.get("/v2/service_instances/i1/last_operation")
        assert osb.delete("/v2/service_instances/i1", params=ASYNC).status_code == 422  # async only
        deleting = osb.delete("/v2/service_instances/i1", params=ASYNC | incomplete)
        assert deleting.status_code == 202
        query = {"operation": deleting.json()["operation"]}
        states = [osb.get("/v2/service_instances/i1/last_operation", params=query).json()["state"] for _ in range(2)]
        assert states == ["in progress", "succeeded"]
        assert osb.get("/v2/service_instances/i1/last_operation", params=query).status_code == 410
    assert second_broker.state()["instances"] == {}


def test_deprovision_gone_setting_answers_the_final_poll_with_410(second_broker: SecondBroker) -> None:
    second_broker.settings(async_polls=0, deprovision_gone=True)
    incomplete = {"accepts_incomplete": "true"}
    with second_broker.client() as osb:
        osb.put("/v2/service_instances/i1", params=incomplete, json=ASYNC)
        osb.get("/v2/service_instances/i1/last_operation")
        osb.delete("/v2/service_instances/i1", params=ASYNC | incomplete)
        assert osb.get("/v2/service_instances/i1/last_operation").status_code == 410


def test_failed_operations_setting_ends_a_plan_s_provision_in_failed(second_broker: SecondBroker) -> None:
    second_broker.settings(async_polls=0, failed_operations={DB_ASYNC_PLAN: ["provision"]})
    with second_broker.client() as osb:
        osb.put("/v2/service_instances/i1", params={"accepts_incomplete": "true"}, json=ASYNC)
        assert osb.get("/v2/service_instances/i1/last_operation").json()["state"] == "failed"
        assert osb.get("/v2/service_instances/i1").status_code == 404
        # Orphan mitigation still works: the deprovision is not in the failing list.
        assert osb.delete("/v2/service_instances/i1", params=ASYNC | {"accepts_incomplete": "true"}).status_code == 202
        assert osb.get("/v2/service_instances/i1/last_operation").json()["state"] == "succeeded"


def test_delete_of_unknown_instance_or_binding_is_410_gone(second_broker: SecondBroker) -> None:
    with second_broker.client() as osb:
        assert osb.delete("/v2/service_instances/nope", params=SYNC).status_code == 410
        osb.put("/v2/service_instances/i1", json=SYNC)
        assert osb.delete("/v2/service_instances/i1/service_bindings/nope", params=SYNC).status_code == 410
        assert osb.delete("/v2/service_instances/i1", params={}).status_code == 400  # service_id, plan_id required
        assert osb.delete("/v2/service_instances/i1", params=SYNC).status_code == 200
        assert osb.delete("/v2/service_instances/i1", params=SYNC).status_code == 410


def test_bindings_have_distinct_credentials_and_repeat_identically(second_broker: SecondBroker) -> None:
    with second_broker.client() as osb:
        osb.put("/v2/service_instances/i1", json=SYNC)
        first = osb.put("/v2/service_instances/i1/service_bindings/b1", json=SYNC)
        second = osb.put("/v2/service_instances/i1/service_bindings/b2", json=SYNC)
        again = osb.put("/v2/service_instances/i1/service_bindings/b1", json=SYNC)
        conflict = osb.put("/v2/service_instances/i1/service_bindings/b1", json=SYNC | {"parameters": {"x": 1}})
        fetched = osb.get("/v2/service_instances/i1/service_bindings/b1")
        assert osb.delete("/v2/service_instances/i1/service_bindings/b1", params=SYNC).status_code == 200
        assert osb.get("/v2/service_instances/i1/service_bindings/b1").status_code == 404
    assert (first.status_code, second.status_code, again.status_code, conflict.status_code) == (201, 201, 200, 409)
    one, two = first.json()["credentials"], second.json()["credentials"]
    assert set(one) == {"uri", "username", "password"}
    assert one["password"] != two["password"] and one["username"] != two["username"]
    assert one["password"] in one["uri"]
    assert again.json()["credentials"] == one == fetched.json()["credentials"]
    assert set(second_broker.state()["bindings"]) == {"i1/b2"}


def test_async_binding_is_polled_then_fetched(second_broker: SecondBroker) -> None:
    second_broker.settings(async_polls=1)
    incomplete = {"accepts_incomplete": "true"}
    with second_broker.client() as osb:
        osb.put("/v2/service_instances/i1", params=incomplete, json=ASYNC)
        osb.get("/v2/service_instances/i1/last_operation")
        osb.get("/v2/service_instances/i1/last_operation")
        assert osb.put("/v2/service_instances/i1/service_bindings/b1", json=ASYNC).status_code == 422
        accepted = osb.put("/v2/service_instances/i1/service_bindings/b1", params=incomplete, json=ASYNC)
        assert accepted.status_code == 202 and "credentials" not in accepted.json()
        assert osb.get("/v2/service_instances/i1/service_bindings/b1").status_code == 404
        last = "/v2/service_instances/i1/service_bindings/b1/last_operation"
        query = {"operation": accepted.json()["operation"]}
        assert [osb.get(last, params=query).json()["state"] for _ in range(2)] == ["in progress", "succeeded"]
        fetched = osb.get("/v2/service_instances/i1/service_bindings/b1")
    assert fetched.status_code == 200 and fetched.json()["credentials"]["password"]


def test_service_without_bindings_refuses_bind_and_plan_change(second_broker: SecondBroker) -> None:
    with second_broker.client() as osb:
        assert osb.put("/v2/service_instances/q1", params={"accepts_incomplete": "true"}, json=QUEUE).status_code == 201
        assert osb.put("/v2/service_instances/q1/service_bindings/b1", json=QUEUE).status_code == 400
        change = osb.patch("/v2/service_instances/q1", json=QUEUE | {"plan_id": QUEUE_LARGE_PLAN})
        assert change.status_code == 422
        assert osb.patch("/v2/service_instances/q1", json=QUEUE | {"parameters": {"x": 1}}).status_code == 200
    assert second_broker.state()["instances"]["q1"]["plan_id"] == QUEUE_PLAN


def test_plan_change_from_sync_to_async_plan_is_asynchronous(second_broker: SecondBroker) -> None:
    with second_broker.client() as osb:
        osb.put("/v2/service_instances/i1", json=SYNC)
        assert osb.patch("/v2/service_instances/i1", json=ASYNC).status_code == 422  # async needs accepts_incomplete
        update = osb.patch("/v2/service_instances/i1", params={"accepts_incomplete": "true"}, json=ASYNC)
        assert update.status_code == 202
        fetched = osb.get("/v2/service_instances/i1")
    assert fetched.status_code == 422 and fetched.json()["error"] == "ConcurrencyError"
    assert second_broker.state()["instances"]["i1"]["plan_id"] == DB_ASYNC_PLAN


def test_malformed_json_fault_is_sent_verbatim_once(second_broker: SecondBroker) -> None:
    second_broker.fail("GET", r"^/v2/catalog$", 200, body='{"services": [')
    with second_broker.client() as osb:
        broken = osb.get("/v2/catalog")
        fine = osb.get("/v2/catalog")
    assert broken.status_code == 200 and broken.text == '{"services": ['
    with pytest.raises(json.JSONDecodeError):
        broken.json()
    assert fine.json()["services"]
    assert [r.get("fault", False) for r in second_broker.requests()] == [True, False]


def test_5xx_fault_applies_to_its_method_and_count_only(second_broker: SecondBroker) -> None:
    second_broker.fail("PUT", r"^/v2/service_instances/[^/]+$", 503, headers={"Retry-After": "2"}, times=2)
    with second_broker.client() as osb:
        assert osb.get("/v2/catalog").status_code == 200  # another method: untouched
        statuses = [osb.put("/v2/service_instances/i1", json=SYNC) for _ in range(3)]
    assert [r.status_code for r in statuses] == [503, 503, 201]
    assert statuses[0].headers["Retry-After"] == "2"
    assert set(second_broker.state()["instances"]) == {"i1"}


def test_delay_fault_makes_a_client_time_out_and_clear_faults_removes_it(second_broker: SecondBroker) -> None:
    second_broker.fail(None, r"^/v2/catalog$", None, delay=1.0, times=None)  # status None: delay only
    with second_broker.client(timeout=0.3) as osb:
        with pytest.raises(httpx.ReadTimeout):
            osb.get("/v2/catalog")
        second_broker.clear_faults()
        started = time.monotonic()
        assert osb.get("/v2/catalog").status_code == 200
    assert time.monotonic() - started < 0.3


def test_catalog_change_shows_on_the_next_relist_and_governs_provisioning(second_broker: SecondBroker) -> None:
    catalog = default_catalog()
    db = catalog["services"][0]
    db["plans"] = [p for p in db["plans"] if p["id"] != DB_SYNC_PLAN] + [
        {"id": "plan-new", "name": "new-plan", "description": "added between relists"}
    ]
    with second_broker.client() as osb:
        osb.put("/v2/service_instances/kept", json=SYNC)
        before = {p["name"] for p in osb.get("/v2/catalog").json()["services"][0]["plans"]}
        second_broker.set_catalog(catalog)
        after = {p["name"] for p in osb.get("/v2/catalog").json()["services"][0]["plans"]}
        assert osb.put("/v2/service_instances/i2", json=SYNC).status_code == 400  # the plan is gone
        assert (
            osb.put("/v2/service_instances/i3", json={"service_id": DB_SERVICE, "plan_id": "plan-new"}).status_code
            == 201
        )
        # What the platform already holds can still be deprovisioned.
        assert osb.delete("/v2/service_instances/kept", params=SYNC).status_code == 200
    assert before == {"sync-small", "async-large"}
    assert after == {"async-large", "new-plan"}


def test_tls_is_trusted_with_the_ca_and_refused_without(second_broker_tls: SecondBroker) -> None:
    assert second_broker_tls.url.startswith("https://")
    assert second_broker_tls.ca_pem and "BEGIN CERTIFICATE" in second_broker_tls.ca_pem
    with second_broker_tls.client() as osb:
        assert osb.get("/v2/catalog").status_code == 200
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(f"{second_broker_tls.url}/v2/catalog", headers=second_broker_tls.osb_headers())
    with pytest.raises(httpx.TransportError):  # plain HTTP to the TLS port
        httpx.get(second_broker_tls.url.replace("https://", "http://") + "/v2/catalog", timeout=2)
    with second_broker_tls.client() as osb:  # a failed handshake does not take the server down
        assert osb.get("/v2/catalog").status_code == 200


def test_requests_are_recorded_with_identities_but_without_secrets(second_broker: SecondBroker) -> None:
    identity = "kubernetes " + base64.b64encode(json.dumps({"username": "alice"}).encode()).decode()
    headers = {"X-Broker-API-Originating-Identity": identity, "X-Broker-API-Request-Identity": "req-42"}
    with second_broker.client() as osb:
        response = osb.put(
            "/v2/service_instances/i1", params={"accepts_incomplete": "true"}, json=SYNC, headers=headers
        )
        osb.get("/v2/catalog", headers={"Authorization": "Basic bm9wZTpub3Bl"})
    assert response.headers["X-Broker-API-Request-Identity"] == "req-42"
    put, rejected = second_broker.requests()
    assert (put["method"], put["path"], put["query"], put["status"]) == (
        "PUT",
        "/v2/service_instances/i1",
        {"accepts_incomplete": "true"},
        201,
    )
    assert put["auth"] == "basic" and put["body"] == SYNC
    assert put["headers"]["X-Broker-API-Request-Identity"] == "req-42"
    assert put["originating_identity"] == {"platform": "kubernetes", "value": {"username": "alice"}}
    assert rejected["status"] == 401
    log = json.dumps(second_broker.requests())
    assert second_broker.password and second_broker.password not in log
    assert "Authorization" not in log and "bm9wZTpub3Bl" not in log


def test_admin_api_needs_its_header_and_refuses_unknown_settings(second_broker: SecondBroker) -> None:
    assert httpx.get(f"{second_broker.url}/admin/state").status_code == 403
    response = httpx.put(f"{second_broker.url}/admin/settings", headers={"X-Admin": "1"}, json={"polls": 3})
    assert response.status_code == 400
    assert second_broker.settings()["async_polls"] == 2
    bad_rule = httpx.post(f"{second_broker.url}/admin/faults", headers={"X-Admin": "1"}, json=[{"path_regex": "("}])
    assert bad_rule.status_code == 400
    assert second_broker.requests() == []  # admin calls are not OSB requests


def test_a_broker_that_cannot_start_fails_loudly_with_its_stderr() -> None:
    with pytest.raises(RuntimeError, match=r"(?s)did not start \(exited with 2\).*a services list"):
        SecondBroker(catalog={"no": "services"}).start()
