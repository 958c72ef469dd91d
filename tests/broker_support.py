"""Support for the broker tests: a broker served over real HTTP, its test catalog, and the controller's stand-in.

``StandInController`` plays the controller's part for broker-only tests: it moves an instance's or
binding's status the way opbroker's controller does (``in progress`` → ``succeeded`` / ``failed``),
holds and releases the teardown finalizer, and stores bind credentials in a Secret named by
``status.response.secretRef``. End-to-end tests with the real controller replace it.
"""

from __future__ import annotations

import base64
import json
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from opbroker.api import conventions
from opbroker.broker.server import BackgroundServer, server
from opbroker.broker.settings import Settings
from opbroker.devcluster.controlplane import free_ports
from tests.cluster_fixtures import onboard
from tests.waiting import wait_for

GROUP, VERSION = "osb.servicefabrik.io", "v1alpha1"
INSTANCES, BINDINGS = "sfserviceinstances", "sfservicebindings"
USERNAME, PASSWORD = "platform", "s3cret-broker-password"
#: The label every test namespace carries (tests/cluster_fixtures.py, :func:`create_namespace`): the test brokers
#: accept a request's ``context.namespace`` in the namespaces that carry it (issue 24 B; the default is none).
TEST_NAMESPACES = "opbroker.io/test=true"
SERVICE, OTHER_SERVICE = "svc-0001", "svc-0002"
ASYNC_PLAN, SYNC_PLAN, FIXED_PLAN, STRICT_PLAN, UNBINDABLE_PLAN, APP_PLAN = (
    "plan-async",
    "plan-sync",
    "plan-fixed",
    "plan-strict",
    "plan-unbindable",
    "plan-app",
)
TEMPLATES = [{"action": "provision", "type": "jinja2", "content": "{}"}]
SIZE_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {"size": {"type": "integer", "minimum": 1}, "name": {"type": "string"}},
    "additionalProperties": False,
}


def catalog_objects() -> list[tuple[str, dict[str, Any]]]:
    """Two services; plans covering async/sync, updatable or not, maintenance info, schemas, bindability."""
    service = {
        "name": "testdb",
        "id": SERVICE,
        "description": "A test database",
        "bindable": True,
        "instancesRetrievable": True,
        "bindingsRetrievable": True,
        "planUpdatable": True,
        "tags": ["test"],
    }
    other = {
        "name": "appbound",
        "id": OTHER_SERVICE,
        "description": "Binds to applications only; nothing retrievable",
        "bindable": True,
        "context": {"requiresApp": True},
    }

    def plan(plan_id: str, service_id: str = SERVICE, **spec: Any) -> dict[str, Any]:
        return {
            "name": plan_id,
            "id": plan_id,
            "description": f"the {plan_id} plan",
            "serviceId": service_id,
            "templates": TEMPLATES,
            **spec,
        }

    plans = [
        plan(
            ASYNC_PLAN,
            manager={"async": True, "asyncBinding": True},
            maximumPollingDuration=600,
            schemas={
                "service_instance": {"create": {"parameters": SIZE_SCHEMA}, "update": {"parameters": SIZE_SCHEMA}},
                "service_binding": {
                    "create": {
                        "parameters": {
                            "$schema": "http://json-schema.org/draft-04/schema#",
                            "type": "object",
                            "properties": {"role": {"enum": ["read", "write"]}},
                        }
                    }
                },
            },
        ),
        plan(SYNC_PLAN, manager={"async": False, "asyncBinding": False}),
        plan(FIXED_PLAN, planUpdatable=False, maintenance_info={"version": "1.2.0"}, manager={"async": True}),
        plan(
            STRICT_PLAN,
            manager={"async": True},
            schemas={
                "service_instance": {
                    "create": {"parameters": {**SIZE_SCHEMA, "required": ["size", "name"]}},
                }
            },
        ),
        plan(UNBINDABLE_PLAN, bindable=False, manager={"async": True}),
        plan(APP_PLAN, OTHER_SERVICE, manager={"async": False, "asyncBinding": False}),
    ]
    objects = [("sfservices", {"metadata": {"name": "testdb"}, "spec": service})]
    objects.append(("sfservices", {"metadata": {"name": "appbound"}, "spec": other}))
    objects += [("sfplans", {"metadata": {"name": p["id"]}, "spec": p}) for p in plans]
    return objects


def install_catalog(api_client: client.ApiClient, namespace: str) -> None:
    custom = client.CustomObjectsApi(api_client)
    for plural, body in catalog_objects():
        kind = "SFService" if plural == "sfservices" else "SFPlan"
        custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, plural, {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, **body}
        )


def create_namespace(api_client: client.ApiClient, prefix: str = "b") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    client.CoreV1Api(api_client).create_namespace({"metadata": {"name": name, "labels": {"opbroker.io/test": "true"}}})
    onboard(api_client, name)  # as tests/cluster_fixtures.py's namespaces: the plan account is bound there
    return name


@dataclass
class Harness:
    """A running broker: its URL, its control-plane namespace and a stand-in controller for its objects."""

    url: str
    namespace: str
    api_client: client.ApiClient
    settings: Settings
    background: BackgroundServer

    def client(
        self, *, version: str | None = "2.17", auth: tuple[str, str] | None = (USERNAME, PASSWORD)
    ) -> httpx.Client:
        headers = {"X-Broker-API-Version": version} if version else {}
        return httpx.Client(base_url=self.url, auth=auth, headers=headers, timeout=60)

    @property
    def app(self) -> Any:
        return self.background.server.config.app


def start_broker(api_client: client.ApiClient, namespace: str, **overrides: Any) -> Harness:
    core = client.CoreV1Api(api_client)
    try:
        core.create_namespaced_secret(
            namespace,
            {"metadata": {"name": "broker-credentials"}, "stringData": {"username": USERNAME, "password": PASSWORD}},
        )
    except ApiException as exc:
        if exc.status != 409:
            raise
    values: dict[str, Any] = {
        "namespace": namespace,
        "credentials_secret": "broker-credentials",
        "sync_timeout": 3.0,
        "retry_after": 1,
        "allowed_namespace_selector": TEST_NAMESPACES,
        **overrides,
    }
    settings = Settings(**values)
    (port,) = free_ports(1)
    background = BackgroundServer(server(settings, api_client, host="127.0.0.1", port=port, log_level="warning"))
    background.start()
    return Harness(f"http://127.0.0.1:{port}", namespace, api_client, settings, background)


@pytest.fixture(scope="module")
def broker(api_client: client.ApiClient) -> Iterator[Harness]:
    """One broker per test module, with the test catalog in its own control-plane namespace."""
    namespace = create_namespace(api_client)
    install_catalog(api_client, namespace)
    harness = start_broker(api_client, namespace)
    try:
        yield harness
    finally:
        harness.background.stop()
        StandInController(api_client).release_all(namespace)
        client.CoreV1Api(api_client).delete_namespace(namespace)


@pytest.fixture
def osb(broker: Harness) -> Iterator[httpx.Client]:
    with broker.client() as http:
        yield http


@pytest.fixture
def stand_in(api_client: client.ApiClient) -> StandInController:
    return StandInController(api_client)


def new_id() -> str:
    return str(uuid.uuid4())


def provision_body(plan_id: str = ASYNC_PLAN, **extra: Any) -> dict[str, Any]:
    return {
        "service_id": OTHER_SERVICE if plan_id == APP_PLAN else SERVICE,
        "plan_id": plan_id,
        "organization_guid": "org-1",
        "space_guid": "space-1",
        **extra,
    }


class StandInController:
    """The controller's stand-in for broker-only tests (see the module docstring)."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)

    @staticmethod
    def _plural(kind: str) -> str:
        return INSTANCES if kind == "instance" else BINDINGS

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, self._plural(kind), name
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return found

    def find(self, kind: str, name: str) -> dict[str, Any] | None:
        items = self.custom.list_cluster_custom_object(
            GROUP, VERSION, self._plural(kind), field_selector=f"metadata.name={name}"
        )["items"]
        return items[0] if items else None

    def adopt(self, kind: str, namespace: str, name: str) -> None:
        """What the controller does first: hold the object with its finalizer and start working."""
        obj = self.get(kind, namespace, name)
        assert obj is not None
        finalizers = [*(obj["metadata"].get("finalizers") or []), conventions.FINALIZER]
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, self._plural(kind), name, {"metadata": {"finalizers": finalizers}}
        )
        self.status(kind, namespace, name, state="in progress")

    def status(self, kind: str, namespace: str, name: str, **status: Any) -> None:
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, self._plural(kind), name, {"status": status}
        )

    def succeed(self, kind: str, namespace: str, name: str, **status: Any) -> None:
        obj = self.get(kind, namespace, name)
        assert obj is not None
        self.status(
            kind,
            namespace,
            name,
            state="succeeded",
            observedGeneration=obj["metadata"]["generation"],
            description="done",
            **status,
        )

    def fail(self, kind: str, namespace: str, name: str, error: str, **status: Any) -> None:
        obj = self.get(kind, namespace, name)
        assert obj is not None
        self.status(
            kind,
            namespace,
            name,
            state="failed",
            observedGeneration=obj["metadata"]["generation"],
            error=error,
            **status,
        )

    def bound(self, namespace: str, name: str, response: dict[str, Any]) -> None:
        """Bind succeeded: the response goes into a Secret owned by the binding, status names the Secret."""
        binding = self.get("binding", namespace, name)
        assert binding is not None
        secret_name = conventions.credentials_secret_name(name)
        self.core.create_namespaced_secret(
            namespace,
            {
                "metadata": {
                    "name": secret_name,
                    "ownerReferences": [
                        {
                            "apiVersion": f"{GROUP}/{VERSION}",
                            "kind": "SFServiceBinding",
                            "name": name,
                            "uid": binding["metadata"]["uid"],
                        }
                    ],
                },
                "type": conventions.CREDENTIALS_SECRET_TYPE,
                "data": {conventions.CREDENTIALS_KEY: base64.b64encode(json.dumps(response).encode()).decode()},
            },
        )
        self.succeed("binding", namespace, name, response={"secretRef": secret_name})

    def release(self, kind: str, namespace: str, name: str) -> None:
        """Teardown finished: drop the finalizer so the API server removes the object."""
        try:
            self.custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, self._plural(kind), name, {"metadata": {"finalizers": None}}
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    def release_all(self, namespace: str) -> None:
        for kind in ("binding", "instance"):
            for item in self.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, self._plural(kind))[
                "items"
            ]:
                if item["metadata"].get("finalizers"):
                    self.release(kind, namespace, item["metadata"]["name"])

    def in_background(
        self,
        kind: str,
        name: str,
        act: Callable[[str], None],
        until: Callable[[dict[str, Any]], bool] = lambda obj: bool((obj.get("status") or {}).get("lastOperation")),
    ) -> threading.Thread:
        """On a thread: once the object ``name`` exists (any namespace) and ``until`` holds (by default: the
        broker has queued its operation), call ``act(namespace)`` — as the controller reacts to a watch event."""

        def ready() -> dict[str, Any] | None:
            obj = self.find(kind, name)
            return obj if obj is not None and until(obj) else None

        def run() -> None:
            obj = wait_for(ready, what=f"{kind} {name} to be ready for the controller")
            act(obj["metadata"]["namespace"])

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread
