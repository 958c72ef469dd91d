"""The PostgreSQL example plan (``examples/postgresql-statefulset``) on a cluster with a node, driven only
through the OSB API: what a platform team installs for it, and the walk provision → bind → unbind →
deprovision with the credentials the broker answers. Shared by the node test and the bench."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

import httpx
import yaml
from kubernetes import client

from opbroker.api.conventions import DEFAULT_NAMESPACE
from opbroker.controller.runtime.kube import Kube
from opbroker.devcluster.controlplane import ControlPlane
from opbroker.devcluster.demo import HEADERS, DemoFailed, Say, _expect, _poll
from opbroker.devcluster.devstack import DEMO_NAMESPACE, EXAMPLES, Endpoint
from opbroker.devcluster.grants import grant_plan_account, onboard_namespace
from opbroker.devcluster.incluster import DEMO_OPERATOR_RULE
from opbroker.devcluster.postgres_image import postgres_image

CATALOG = EXAMPLES / "postgresql-statefulset" / "catalog.yaml"
SERVICE_NAME = "postgresql-debian"
#: What the plan renders, for its plan account (``opbroker-plans``): Kubernetes' own kinds, no operator's.
_WRITE = ["get", "list", "watch", "create", "update", "patch", "delete"]
PLAN_RULES = (
    {"api_groups": ["apps"], "resources": ["statefulsets"], "verbs": _WRITE},
    {"api_groups": [""], "resources": ["services"], "verbs": _WRITE},
    {"api_groups": ["batch"], "resources": ["jobs"], "verbs": _WRITE},
)
#: How long the walk waits for each OSB operation (a cold pod start on a loaded machine takes tens of seconds).
OPERATION_TIMEOUT = 240.0


def install(plane: ControlPlane, api: client.ApiClient, say: Say) -> None:
    """What the platform does once: build (or find cached) the image, import it into the node, grant the plan
    account the kinds the plan renders, apply the SFService and SFPlan to the catalog namespace."""
    archive, name = postgres_image(say)
    plane.import_image(archive, name)
    say(f"imported {name} into the node")
    grant_plan_account(api, DEFAULT_NAMESPACE, [DEMO_OPERATOR_RULE, *PLAN_RULES])
    onboard_namespace(api, DEMO_NAMESPACE)  # where the demo's instances live: the plan account is bound there
    kube = Kube(api)
    for document in yaml.safe_load_all(CATALOG.read_text()):
        kube.apply({**document, "metadata": {**document["metadata"], "namespace": DEFAULT_NAMESPACE}})


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str
    hostname: str
    port: int
    dbname: str


class Walk:
    """One instance and its bindings through the broker, as a platform calls it."""

    def __init__(self, endpoint: Endpoint, say: Say = lambda _: None, namespace: str = DEMO_NAMESPACE) -> None:
        self.http = httpx.Client(
            base_url=endpoint.url, auth=(endpoint.username, endpoint.password), headers=HEADERS, timeout=30
        )
        self.say = say
        self.namespace = namespace
        self.instance_id = str(uuid.uuid4())
        service = next(s for s in _expect(self.http.get("/v2/catalog"), 200)["services"] if s["name"] == SERVICE_NAME)
        self.ids = {"service_id": service["id"], "plan_id": service["plans"][0]["id"]}

    def close(self) -> None:
        self.http.close()

    def _finish(self, path: str, response: httpx.Response, what: str) -> None:
        body = _expect(response, 200, 201, 202)
        if response.status_code == 202:
            state = _poll(self.http, f"{path}/last_operation", body.get("operation"), self.say, OPERATION_TIMEOUT)
            if state["state"] != "succeeded":
                raise DemoFailed(f"{what} failed: {state.get('description')}")

    def provision(self) -> None:
        path = f"/v2/service_instances/{self.instance_id}"
        body: dict[str, Any] = {
            **self.ids,
            "organization_guid": "org",
            "space_guid": "space",
            "context": {"platform": "kubernetes", "namespace": self.namespace},
        }
        self._finish(path, self.http.put(path, params={"accepts_incomplete": "true"}, json=body), "provision")

    def bind(self, binding_id: str) -> Credentials:
        path = f"/v2/service_instances/{self.instance_id}/service_bindings/{binding_id}"
        self._finish(path, self.http.put(path, params={"accepts_incomplete": "true"}, json=self.ids), "bind")
        found = _expect(self.http.get(path), 200).get("credentials") or {}
        return Credentials(found["username"], found["password"], found["hostname"], int(found["port"]), found["dbname"])

    def unbind(self, binding_id: str) -> None:
        path = f"/v2/service_instances/{self.instance_id}/service_bindings/{binding_id}"
        self._finish(path, self.http.delete(path, params={**self.ids, "accepts_incomplete": "true"}), "unbind")

    def deprovision(self) -> None:
        path = f"/v2/service_instances/{self.instance_id}"
        self._finish(path, self.http.delete(path, params={**self.ids, "accepts_incomplete": "true"}), "deprovision")
        _expect(self.http.get(path), 404, 410)


def login(credentials: Credentials, *, timeout: float = 10.0) -> str:
    """Connect with the bound credentials from this machine (kube-proxy routes the Service's address) and
    run a query; returns the session's user as the server reports it."""
    import pg8000.native  # type: ignore[import-untyped]  # no stubs, no py.typed

    connection = pg8000.native.Connection(
        credentials.username,
        password=credentials.password,
        host=credentials.hostname,
        port=credentials.port,
        database=credentials.dbname,
        timeout=timeout,
    )
    try:
        rows = connection.run("SELECT current_user, 6 * 7")
        return f"{rows[0][0]} {rows[0][1]}"
    finally:
        connection.close()


def wait_for_login(credentials: Credentials, timeout: float = 30.0) -> str:
    """``login`` until it works (a new role's Service route is immediate, but a first connection can race a
    kube-proxy sync on a loaded machine)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return login(credentials)
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
