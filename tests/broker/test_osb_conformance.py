"""One whole OSB lifecycle driven the way platform clients generated from the OSB OpenAPI document drive it,
against the real broker, controller and demo operator on the real control plane.

catalog → provision (async) → poll → fetch instance → update → poll → bind → poll → fetch binding →
unbind → poll → deprovision → poll until gone; every step asserts status code and body. The request
shapes are a generated client's: every optional struct present and empty (``maintenance_info: {}``,
``previous_values: {"maintenance_info": {}}``, ``bind_resource: {}``, ...), unset strings as ``""``, and the
platform polls with an ``operation`` value of its own as often as with the broker's. Instance and binding
ids are GUIDs, some starting with a digit as most Cloud Foundry GUIDs do; API versions 2.14 and 2.17.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client
from openapi_core import OpenAPI
from openapi_core.testing import MockRequest, MockResponse

from tests.controller_support import DEMO, REPO

pytestmark = pytest.mark.usefixtures("controller")

DOCS = list(yaml.safe_load_all((DEMO / "catalog.yaml").read_text()))
SERVICE_ID = DOCS[0]["spec"]["id"]
PLAN_ID = DOCS[1]["spec"]["id"]
ASYNC = {"accepts_incomplete": "true"}


def guid(first: str) -> str:
    """A GUID whose first character is ``first`` (a digit, as in most Cloud Foundry instance GUIDs)."""
    return first + str(uuid.uuid4())[1:]


@dataclass(frozen=True)
class Platform:
    """How one kind of platform's generated client talks: its API version and its request context."""

    version: str
    context: dict[str, Any]
    echoes_operation: bool


PLATFORMS = {
    "kubernetes-2.17": Platform("2.17", {"platform": "kubernetes", "namespace": "<namespace>"}, echoes_operation=True),
    # An older platform: no maintenance_info in its version, yet its client sends the struct empty; and it
    # polls with the name of the operation instead of the broker's token.
    "cloudfoundry-2.14": Platform(
        "2.14",
        {"platform": "cloudfoundry", "organization_guid": "org", "space_guid": "space", "namespace": "<namespace>"},
        echoes_operation=False,
    ),
}


class OfficialDocument:
    """The OSB project's own OpenAPI document for v2.17 (``tests/data/osb``, Apache-2.0): every answer the
    broker gives in the lifecycle must be one it describes — status code, headers and body schema — because
    that document is what platform clients are generated from."""

    def __init__(self) -> None:
        self.api = OpenAPI.from_file_path(str(REPO / "tests" / "data" / "osb" / "openapi-v2.17.yaml"))
        self.violations: list[str] = []

    def check(self, response: httpx.Response) -> None:
        response.read()
        sent = response.request
        request = MockRequest(
            "http://example.com",  # the document's server: paths are matched below it
            sent.method.lower(),
            sent.url.path,
            args=dict(sent.url.params),
            headers=dict(sent.headers),
            data=sent.content or None,
            content_type="application/json",
        )
        answer = MockResponse(
            response.content,
            status_code=response.status_code,
            headers=dict(response.headers),
            content_type=response.headers.get("content-type", "application/json").split(";")[0],
        )
        try:
            self.api.validate_response(request, answer)
        except Exception as exc:  # every kind of mismatch is a finding, reported with its cause
            cause = exc.__cause__ or exc
            details = getattr(cause, "schema_errors", None) or [cause]
            self.violations.append(
                f"{sent.method} {sent.url.path} -> {response.status_code}: "
                + "; ".join(str(getattr(d, "message", d))[:300] for d in details)
            )


@pytest.fixture
def platform_client(osb_url: tuple[str, str], request: pytest.FixtureRequest) -> Iterator[httpx.Client]:
    url, password = osb_url
    version = request.param
    headers = {"X-Broker-API-Version": version, "X-Broker-API-Request-Identity": str(uuid.uuid4())}
    document = OfficialDocument()
    hooks = {"response": [document.check]}
    with httpx.Client(
        base_url=url, auth=("platform", password), headers=headers, timeout=60, event_hooks=hooks
    ) as http:
        yield http
    assert not document.violations, "answers the OSB v2.17 OpenAPI document does not describe:\n" + "\n".join(
        document.violations
    )


def poll(http: httpx.Client, path: str, operation: str, name: str, timeout: float = 60) -> dict[str, Any]:
    """Poll ``last_operation`` until it leaves ``in progress``, honouring ``Retry-After`` (capped for tests).

    For an unbind or deprovision, 410 Gone is the platform's success: polled without the broker's token, an
    object that is gone can only answer that."""
    deadline = time.monotonic() + timeout
    removal = name in ("unbind", "deprovision")
    while True:
        answer = http.get(f"{path}/last_operation", params={"operation": operation, "plan_id": PLAN_ID})
        if removal and answer.status_code == 410:
            assert answer.json() == {}
            return {"state": "succeeded"}
        assert answer.status_code == 200, (name, answer.status_code, answer.text)
        body: dict[str, Any] = answer.json()
        assert body["state"] in ("in progress", "succeeded", "failed"), body
        if body["state"] != "in progress":
            return body
        assert "Retry-After" in answer.headers
        assert time.monotonic() < deadline, f"{name} still in progress after {timeout}s"
        time.sleep(min(float(answer.headers["Retry-After"]), 0.5))


@pytest.mark.parametrize(
    ("platform_client", "platform", "instance_first", "binding_first"),
    [
        ("2.17", PLATFORMS["kubernetes-2.17"], "4", "e"),
        ("2.14", PLATFORMS["cloudfoundry-2.14"], "0", "7"),
    ],
    indirect=["platform_client"],
    ids=["kubernetes-2.17", "cloudfoundry-2.14"],
)
def test_generated_client_lifecycle(
    platform_client: httpx.Client,
    platform: Platform,
    instance_first: str,
    binding_first: str,
    namespace: str,
    api_client: client.ApiClient,
) -> None:
    http = platform_client
    context = {k: (namespace if v == "<namespace>" else v) for k, v in platform.context.items()}
    instance_id, binding_id = guid(instance_first), guid(binding_first)
    instance = f"/v2/service_instances/{instance_id}"
    binding = f"{instance}/service_bindings/{binding_id}"

    def operation_value(answer: httpx.Response, name: str) -> str:
        token: str = answer.json()["operation"]
        assert token, answer.text
        return token if platform.echoes_operation else name

    # catalog
    catalog = http.get("/v2/catalog")
    assert catalog.status_code == 200
    services = {s["id"]: s for s in catalog.json()["services"]}
    plans = {p["id"]: p for p in services[SERVICE_ID]["plans"]}
    assert PLAN_ID in plans and services[SERVICE_ID]["instances_retrievable"] is True

    # provision (async), every optional struct present and empty
    provision_body = {
        "service_id": SERVICE_ID,
        "plan_id": PLAN_ID,
        "organization_guid": "org-guid",
        "space_guid": "space-guid",
        "context": context,
        "parameters": {},
        "maintenance_info": {},
    }
    provisioned = http.put(instance, params=ASYNC, json=provision_body)
    assert provisioned.status_code == 202, provisioned.text
    assert set(provisioned.json()) <= {"operation", "dashboard_url"}
    assert provisioned.headers.get("X-Broker-API-Request-Identity") == http.headers["X-Broker-API-Request-Identity"]
    assert poll(http, instance, operation_value(provisioned, "provision"), "provision")["state"] == "succeeded"

    # fetch instance
    fetched = http.get(instance, params={"service_id": "", "plan_id": ""})
    assert fetched.status_code == 200, fetched.text
    assert fetched.json()["service_id"] == SERVICE_ID and fetched.json()["plan_id"] == PLAN_ID

    # update: new parameters, the rest as a generated client fills it
    update_body = {
        "service_id": SERVICE_ID,
        "plan_id": PLAN_ID,
        "context": context,
        "parameters": {"version": "15"},
        "maintenance_info": {},
        "previous_values": {"service_id": SERVICE_ID, "plan_id": PLAN_ID, "maintenance_info": {}},
    }
    updated = http.patch(instance, params=ASYNC, json=update_body)
    assert updated.status_code == 202, updated.text
    assert poll(http, instance, operation_value(updated, "update"), "update")["state"] == "succeeded"
    database = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
        "demo.opbroker.io", "v1alpha1", namespace, "databases", instance_id
    )
    assert database["spec"]["version"] == "15"
    assert database["status"]["phase"] == "Running"
    # A Service name must start with a letter: the demo operator's Service of a digit-led GUID is db-<id>.
    assert database["status"]["service"] == (f"db-{instance_id}" if instance_first.isdigit() else instance_id)

    # bind
    bind_body = {
        "service_id": SERVICE_ID,
        "plan_id": PLAN_ID,
        "context": context,
        "app_guid": "",
        "bind_resource": {},
        "parameters": {},
    }
    bound = http.put(binding, params=ASYNC, json=bind_body)
    assert bound.status_code == 202, bound.text
    assert "credentials" not in bound.json()
    assert poll(http, binding, operation_value(bound, "bind"), "bind")["state"] == "succeeded"

    # fetch binding
    fetched_binding = http.get(binding)
    assert fetched_binding.status_code == 200, fetched_binding.text
    credentials = fetched_binding.json()["credentials"]
    assert credentials["username"] and credentials["password"] and credentials["hostname"]

    # unbind
    unbound = http.delete(binding, params={**ASYNC, "service_id": SERVICE_ID, "plan_id": PLAN_ID})
    assert unbound.status_code == 202, unbound.text
    assert poll(http, binding, operation_value(unbound, "unbind"), "unbind")["state"] == "succeeded"
    assert http.get(binding).status_code == 404

    # deprovision, then poll until gone
    deprovisioned = http.delete(instance, params={**ASYNC, "service_id": SERVICE_ID, "plan_id": PLAN_ID})
    assert deprovisioned.status_code == 202, deprovisioned.text
    assert poll(http, instance, operation_value(deprovisioned, "deprovision"), "deprovision")["state"] == "succeeded"
    again = http.delete(instance, params={**ASYNC, "service_id": SERVICE_ID, "plan_id": PLAN_ID})
    assert (again.status_code, again.json()) == (410, {})
    assert http.get(instance).status_code == 404


def test_the_official_document_catches_an_answer_it_does_not_describe() -> None:
    """The checker above is not a formality: answers outside the document are findings."""
    document = OfficialDocument()
    path = f"http://127.0.0.1/v2/service_instances/{guid('1')}/last_operation"

    def answer(status: int, body: dict[str, Any]) -> httpx.Response:
        request = httpx.Request("GET", path, headers={"X-Broker-API-Version": "2.17"})
        return httpx.Response(status, json=body, request=request)

    document.check(answer(200, {"state": "succeeded", "description": "done"}))
    assert document.violations == []
    document.check(answer(200, {"state": "finished"}))  # not one of the three states
    document.check(answer(200, {"description": "no state"}))
    document.check(answer(201, {"state": "succeeded"}))  # not a status last_operation answers with
    assert len(document.violations) == 3, document.violations
