"""The broker's HTTP edge: headers and authentication on every OSB route, the published OpenAPI document,
health, readiness, metrics, credentials from a Secret (and their rotation), and ``opbroker broker serve``.
"""

# ruff: noqa: F811  (test functions take the imported fixtures as arguments)

from __future__ import annotations

import base64
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from kubernetes import client

from opbroker.devcluster import ControlPlane
from opbroker.devcluster.controlplane import free_ports
from tests.broker_support import (  # noqa: F401  (pytest fixtures)
    ASYNC_PLAN,
    PASSWORD,
    SERVICE,
    USERNAME,
    Harness,
    broker,
    new_id,
    osb,
    provision_body,
    wait_for,
)

OSB_ROUTES = [
    ("GET", "/v2/catalog"),
    ("PUT", "/v2/service_instances/i-1"),
    ("PATCH", "/v2/service_instances/i-1"),
    ("DELETE", "/v2/service_instances/i-1?service_id=s&plan_id=p"),
    ("GET", "/v2/service_instances/i-1"),
    ("GET", "/v2/service_instances/i-1/last_operation"),
    ("PUT", "/v2/service_instances/i-1/service_bindings/b-1"),
    ("DELETE", "/v2/service_instances/i-1/service_bindings/b-1?service_id=s&plan_id=p"),
    ("GET", "/v2/service_instances/i-1/service_bindings/b-1"),
    ("GET", "/v2/service_instances/i-1/service_bindings/b-1/last_operation"),
]


@pytest.mark.parametrize(("method", "path"), OSB_ROUTES)
def test_every_route_checks_credentials_then_version(broker: Harness, method: str, path: str) -> None:
    body = provision_body() if method in ("PUT", "PATCH") else None
    with broker.client(auth=None) as anonymous:
        denied = anonymous.request(method, path, json=body)
    assert denied.status_code == 401 and denied.headers["WWW-Authenticate"].startswith("Basic")
    assert denied.json()["error"] == "Unauthorized"
    with broker.client(auth=(USERNAME, "wrong")) as wrong:
        assert wrong.request(method, path, json=body).status_code == 401
    with broker.client(version=None) as unversioned:
        missing = unversioned.request(method, path, json=body)
    assert missing.status_code == 412 and "X-Broker-API-Version" in missing.json()["description"]
    for version in ("2.11", "2.18", "3.0", "x"):
        with broker.client(version=version) as old:
            assert old.request(method, path, json=body).status_code == 412


def test_request_identity_is_echoed_everywhere(broker: Harness, osb: httpx.Client) -> None:
    for path in ("/v2/catalog", "/v2/service_instances/nope/last_operation", "/healthz"):
        response = osb.get(path, headers={"X-Broker-API-Request-Identity": "trace-7"})
        assert response.headers["X-Broker-API-Request-Identity"] == "trace-7"
    with broker.client(auth=None) as anonymous:
        denied = anonymous.get("/v2/catalog", headers={"X-Broker-API-Request-Identity": "trace-8"})
    assert denied.headers["X-Broker-API-Request-Identity"] == "trace-8"


def test_the_access_log_is_one_bounded_line_per_request(broker: Harness, caplog: pytest.LogCaptureFixture) -> None:
    """uvicorn's access log printed the raw request line (up to the 16 KiB head, control characters decoded);
    the broker's own line shows the route, the path cut to 200 characters and escaped, the status."""
    assert broker.background.server.config.access_log is False
    hostile = "/v2/service_instances/" + "a" * 8000 + "%0aFORGED 200 OK"
    with caplog.at_level(logging.INFO, logger="opbroker.broker.access"), broker.client(auth=None) as anonymous:
        assert anonymous.get(hostile).status_code == 401
    (line,) = [r.getMessage() for r in caplog.records if r.name == "opbroker.broker.access"]
    assert line.startswith("GET /v2/service_instances/{instance_id} /v2/service_instances/aaa")
    assert " 401 " in line and "\n" not in line and "FORGED" not in line
    assert len(line) < 300


def test_unknown_fields_are_ignored(osb: httpx.Client) -> None:
    body = {**provision_body(), "x-vendor-extension": {"a": 1}, "maintenance_info": None}
    response = osb.put(f"/v2/service_instances/{new_id()}", params={"accepts_incomplete": "true"}, json=body)
    assert response.status_code == 202, response.text


def test_body_without_content_type_is_still_processed(osb: httpx.Client) -> None:
    import json

    response = osb.put(
        f"/v2/service_instances/{new_id()}",
        params={"accepts_incomplete": "true"},
        content=json.dumps(provision_body()).encode(),
        headers={"Content-Type": ""},
    )
    assert response.status_code == 202, response.text


def test_catalog(osb: httpx.Client) -> None:
    services = {s["id"]: s for s in osb.get("/v2/catalog").json()["services"]}
    plans = {p["id"]: p for p in services[SERVICE]["plans"]}
    assert plans[ASYNC_PLAN]["maximum_polling_duration"] == 600
    assert services[SERVICE]["plan_updateable"] is True


def test_openapi_documents_routes_errors_and_headers(broker: Harness) -> None:
    document = httpx.get(broker.url + "/openapi.json").json()
    put = document["paths"]["/v2/service_instances/{instance_id}"]["put"]
    assert {"200", "201", "202", "400", "401", "409", "412", "422"} <= set(put["responses"])
    assert "Retry-After" in put["responses"]["202"]["headers"]
    assert "X-Broker-API-Request-Identity" in put["responses"]["400"]["headers"]
    names = {p["name"]: p for p in put["parameters"]}
    assert names["X-Broker-API-Version"]["required"] is True
    assert names["X-Broker-API-Version"]["schema"]["enum"][-1] == "2.17"
    assert "X-Broker-API-Originating-Identity" in names
    assert document["components"]["securitySchemes"]["HTTPBasic"]["scheme"] == "basic"
    deprovision = document["paths"]["/v2/service_instances/{instance_id}"]["delete"]
    assert "410" in deprovision["responses"]
    assert {p["name"] for p in deprovision["parameters"] if p.get("required")} >= {"service_id", "plan_id"}
    last = document["paths"]["/v2/service_instances/{instance_id}/last_operation"]["get"]
    assert "Retry-After" in last["responses"]["200"]["headers"]


def test_health_readiness_and_metrics(broker: Harness, osb: httpx.Client) -> None:
    assert httpx.get(broker.url + "/healthz").json() == {"status": "ok"}
    assert httpx.get(broker.url + "/readyz").status_code == 200
    osb.get("/v2/catalog")
    osb.get("/v2/service_instances/nope-1")
    metrics = httpx.get(broker.url + "/metrics", auth=(USERNAME, PASSWORD))
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
    text = metrics.text
    assert 'opbroker_broker_requests_total{code="200",endpoint="/v2/catalog",method="GET"}' in text
    assert (
        'opbroker_broker_requests_total{code="404",endpoint="/v2/service_instances/{instance_id}",method="GET"}' in text
    )
    assert "opbroker_broker_request_duration_seconds_bucket" in text
    assert "nope-1" not in text  # route templates, not ids: bounded cardinality


def test_rotated_secret_is_honoured(api_client: client.ApiClient, broker: Harness) -> None:
    core = client.CoreV1Api(api_client)
    secret = "rotating-credentials"
    core.create_namespaced_secret(
        broker.namespace, {"metadata": {"name": secret}, "stringData": {"username": "u1", "password": "p1"}}
    )
    from tests.broker_support import start_broker

    harness = start_broker(api_client, broker.namespace, credentials_secret=secret, credentials_ttl=0.2)
    try:
        with harness.client(auth=("u1", "p1")) as http:
            assert http.get("/v2/catalog").status_code == 200
        core.patch_namespaced_secret(secret, broker.namespace, {"stringData": {"password": "p2"}})
        time.sleep(0.3)
        with harness.client(auth=("u1", "p1")) as http:
            assert http.get("/v2/catalog").status_code == 401
        with harness.client(auth=("u1", "p2")) as http:
            assert http.get("/v2/catalog").status_code == 200
    finally:
        harness.background.stop()


OPBROKER = shutil.which("opbroker", path=str(Path(sys.executable).parent)) or "opbroker"


def test_cli_serves_the_broker(control_plane: ControlPlane, broker: Harness) -> None:
    (port,) = free_ports(1)
    env = {**os.environ, "OPBROKER_BROKER_USERNAME": "cli-user", "OPBROKER_BROKER_PASSWORD": "cli-pass"}
    process = subprocess.Popen(
        [
            OPBROKER,
            "broker",
            "serve",
            "--port",
            str(port),
            "--kubeconfig",
            str(control_plane.kubeconfig),
            "--namespace",
            broker.namespace,
            "--log-level",
            "warning",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"

        def up() -> bool:
            try:
                return httpx.get(base + "/readyz").status_code == 200
            except httpx.TransportError:
                return False

        wait_for(up, timeout=30, what="the CLI-started broker to be ready")
        auth = "Basic " + base64.b64encode(b"cli-user:cli-pass").decode()
        catalog = httpx.get(base + "/v2/catalog", headers={"Authorization": auth, "X-Broker-API-Version": "2.17"})
        assert catalog.status_code == 200 and catalog.json()["services"]
    finally:
        process.terminate()
        output, _ = process.communicate(timeout=20)
    assert f"http://127.0.0.1:{port}" in output


def test_cli_refuses_to_start_without_credentials(control_plane: ControlPlane) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPBROKER_BROKER_")}
    result = subprocess.run(
        [OPBROKER, "broker", "serve", "--kubeconfig", str(control_plane.kubeconfig), "--port", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert "no broker credentials" in result.stderr


@pytest.mark.process
def test_cli_prints_the_openapi_document() -> None:
    import json

    result = subprocess.run([OPBROKER, "broker", "openapi"], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert "/v2/service_instances/{instance_id}/last_operation" in json.loads(result.stdout)["paths"]
