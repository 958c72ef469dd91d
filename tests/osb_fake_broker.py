"""A tiny OSB v2.17 broker for tests, served over real HTTP on 127.0.0.1 (``serve``).

It behaves like a broker with asynchronous provisioning: PUT answers 202 and ``last_operation`` reports
``in progress`` for ``polls`` calls, then the outcome. Provision parameters steer the outcome:
``{"fail": "reason"}`` ends in ``failed``, ``{"stall": true}`` never finishes. Plan ``plan-async-bind``
also binds asynchronously (credentials fetched with GET afterwards). With ``serves_fetch``, a provisioned instance
answers GET, its ``attributes`` as ``metadata.attributes`` (what a test makes the broker say of it). It checks what
brokers must check (basic auth → 401, ``X-Broker-API-Version`` → 412, missing ids → 400, ``accepts_incomplete`` → 422,
conflicting repeats → 409, unknown ids → 410) and records every request for assertions.

Our real broker is being written in ``opbroker.broker``; tests against it will sit beside these.
"""

from __future__ import annotations

import base64
import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

SERVICE_ID = "svc-postgres"
PLAN_ASYNC = "plan-async"
PLAN_ASYNC_BIND = "plan-async-bind"
IN_PROGRESS, SUCCEEDED, FAILED = "in progress", "succeeded", "failed"


@dataclass
class Operation:
    """An asynchronous operation: in progress for ``polls_left`` more polls, then ``outcome``."""

    id: str
    kind: str
    polls_left: int
    outcome: str  # succeeded | failed | never
    description: str | None = None

    def poll(self) -> tuple[str, str | None]:
        if self.outcome == "never" or self.polls_left > 0:
            self.polls_left -= 1
            return IN_PROGRESS, f"{self.kind} in progress"
        return self.outcome, self.description


@dataclass
class Instance:
    body: dict[str, Any]
    operation: Operation
    state: str = IN_PROGRESS
    deleted: bool = False
    attributes: dict[str, Any] | None = None
    """What a GET of the instance says in ``metadata.attributes`` (``ready``, ``reason``, ``message``); None: none."""


@dataclass
class Binding:
    instance_id: str
    body: dict[str, Any]
    operation: Operation | None
    credentials: dict[str, Any]
    state: str = IN_PROGRESS


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


@dataclass
class FakeBroker:
    username: str = "broker-user"
    password: str = "broker-password"
    polls: int = 2
    """last_operation answers ``in progress`` this many times before the outcome."""
    retry_after: int | None = None
    """Sent as ``Retry-After`` with every in-progress last_operation."""
    gone_after_delete: bool = False
    """After a finished deprovision, answer last_operation with 410 (else keep answering succeeded)."""
    speaks: tuple[str, ...] | None = None
    """The X-Broker-API-Versions accepted (412 for any other); None: every 2.x."""
    services: list[dict[str, Any]] | None = None
    """The catalog's services (None: the one ``postgres`` service with its two plans)."""
    serves_fetch: bool = False
    """Answer GET of a provisioned instance (``instances_retrievable``); off, as brokers before OSB 2.14 and
    those that do not retrieve: the route is not served (405), which the Pulumi provider's tests rely on."""
    instances: dict[str, Instance] = field(default_factory=dict)
    bindings: dict[str, Binding] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    _ids: Iterator[int] = field(default_factory=itertools.count)

    def op(self, kind: str, outcome: str = SUCCEEDED, description: str | None = None) -> Operation:
        return Operation(f"{kind}-{next(self._ids)}", kind, self.polls, outcome, description)

    def calls(self, method: str, path_suffix: str = "") -> list[Recorded]:
        return [r for r in self.requests if r.method == method and r.path.endswith(path_suffix)]

    @property
    def app(self) -> FastAPI:
        return build_app(self)


def _error(status: int, error: str, description: str) -> JSONResponse:
    return JSONResponse({"error": error, "description": description}, status_code=status)


def build_app(broker: FakeBroker) -> FastAPI:
    app = FastAPI()

    @app.middleware("http")
    async def osb_checks(request: Request, call_next: Any) -> Any:
        raw = await request.body()
        broker.requests.append(
            Recorded(
                request.method,
                request.url.path,
                dict(request.query_params),
                {k.lower(): v for k, v in request.headers.items()},
                raw.decode() if raw else None,
            )
        )
        expected = "Basic " + base64.b64encode(f"{broker.username}:{broker.password}".encode()).decode()
        if request.headers.get("authorization") != expected:
            return _error(401, "Unauthorized", "bad credentials")
        version = request.headers.get("x-broker-api-version", "")
        if not version.startswith("2.") or (broker.speaks is not None and version not in broker.speaks):
            return _error(412, "PreconditionFailed", f"unsupported X-Broker-API-Version {version!r}")
        response = await call_next(request)
        identity = request.headers.get("x-broker-api-request-identity")
        if identity:
            response.headers["X-Broker-API-Request-Identity"] = identity
        return response

    @app.get("/v2/catalog")
    async def catalog() -> dict[str, Any]:
        plans = [
            {"id": PLAN_ASYNC, "name": "async", "description": "async provisioning"},
            {"id": PLAN_ASYNC_BIND, "name": "async-bind", "description": "async provisioning and binding"},
        ]
        service = {"id": SERVICE_ID, "name": "postgres", "description": "fake", "bindable": True, "plans": plans}
        return {"services": broker.services if broker.services is not None else [service]}

    @app.put("/v2/service_instances/{instance_id}")
    async def provision(instance_id: str, request: Request) -> JSONResponse:
        body = await request.json()
        for key in ("service_id", "plan_id", "organization_guid", "space_guid"):
            if not body.get(key):
                return _error(400, "BadRequest", f"{key} is required")
        if request.query_params.get("accepts_incomplete") != "true":
            return _error(422, "AsyncRequired", "this broker provisions asynchronously")
        existing = broker.instances.get(instance_id)
        if existing is not None and not existing.deleted:
            if existing.body != body:
                return _error(409, "Conflict", "instance exists with different attributes")
            if existing.state == IN_PROGRESS:
                return JSONResponse({"operation": existing.operation.id}, status_code=202)
            return JSONResponse({}, status_code=200)
        params = body.get("parameters") or {}
        outcome = "never" if params.get("stall") else FAILED if params.get("fail") else SUCCEEDED
        operation = broker.op("provision", outcome, params.get("fail"))
        broker.instances[instance_id] = Instance(body=body, operation=operation)
        dashboard = f"https://dashboard.example/{instance_id}"
        return JSONResponse({"operation": operation.id, "dashboard_url": dashboard}, status_code=202)

    @app.patch("/v2/service_instances/{instance_id}")
    async def update(instance_id: str, request: Request) -> JSONResponse:
        body = await request.json()
        instance = broker.instances.get(instance_id)
        if instance is None or instance.deleted:
            return _error(404, "NotFound", "no such instance")
        if not body.get("service_id"):
            return _error(400, "BadRequest", "service_id is required")
        if instance.state == IN_PROGRESS:
            return _error(422, "ConcurrencyError", "an operation is in progress")
        for key in ("plan_id", "parameters", "context"):
            if key in body:
                instance.body[key] = body[key]
        instance.operation = broker.op("update")
        instance.state = IN_PROGRESS
        return JSONResponse({"operation": instance.operation.id}, status_code=202)

    @app.delete("/v2/service_instances/{instance_id}")
    async def deprovision(instance_id: str, request: Request) -> JSONResponse:
        query = request.query_params
        if not query.get("service_id") or not query.get("plan_id"):
            return _error(400, "BadRequest", "service_id and plan_id are required")
        instance = broker.instances.get(instance_id)
        if instance is None or instance.deleted:
            return JSONResponse({}, status_code=410)
        instance.operation = broker.op("deprovision")
        instance.state = IN_PROGRESS
        return JSONResponse({"operation": instance.operation.id}, status_code=202)

    async def fetch_instance(instance_id: str) -> JSONResponse:
        instance = broker.instances.get(instance_id)
        if instance is None or instance.deleted or instance.state != SUCCEEDED:
            return _error(404, "NotFound", "no such instance (or still being provisioned)")
        body = {
            "service_id": instance.body["service_id"],
            "plan_id": instance.body["plan_id"],
            "dashboard_url": f"https://dashboard.example/{instance_id}",
            **({"metadata": {"attributes": instance.attributes}} if instance.attributes is not None else {}),
        }
        return JSONResponse(body)

    if broker.serves_fetch:
        app.get("/v2/service_instances/{instance_id}")(fetch_instance)

    @app.get("/v2/service_instances/{instance_id}/last_operation")
    async def last_operation(instance_id: str) -> JSONResponse:
        instance = broker.instances.get(instance_id)
        if instance is None or (instance.deleted and broker.gone_after_delete):
            return JSONResponse({}, status_code=410)
        if instance.deleted:
            return JSONResponse({"state": SUCCEEDED})
        state, description = instance.operation.poll()
        instance.state = state
        if state == SUCCEEDED and instance.operation.kind == "deprovision":
            instance.deleted = True
        headers = {"Retry-After": str(broker.retry_after)} if broker.retry_after and state == IN_PROGRESS else {}
        payload = {"state": state, **({"description": description} if description else {})}
        return JSONResponse(payload, headers=headers)

    @app.put("/v2/service_instances/{instance_id}/service_bindings/{binding_id}")
    async def bind(instance_id: str, binding_id: str, request: Request) -> JSONResponse:
        body = await request.json()
        if not body.get("service_id") or not body.get("plan_id"):
            return _error(400, "BadRequest", "service_id and plan_id are required")
        instance = broker.instances.get(instance_id)
        if instance is None or instance.deleted or instance.state != SUCCEEDED:
            return _error(422, "ConcurrencyError", "instance is not ready")
        credentials = {"username": f"u-{binding_id[:8]}", "password": "s3cr3t", "host": "db.fake", "port": 5432}
        existing = broker.bindings.get(binding_id)
        if existing is not None:
            if existing.body != body:
                return _error(409, "Conflict", "binding exists with different attributes")
            return JSONResponse({"credentials": existing.credentials}, status_code=200)
        params = body.get("parameters") or {}
        if body["plan_id"] == PLAN_ASYNC_BIND:
            outcome = FAILED if params.get("fail") else SUCCEEDED
            operation = broker.op("bind", outcome, params.get("fail"))
            broker.bindings[binding_id] = Binding(instance_id, body, operation, credentials)
            return JSONResponse({"operation": operation.id}, status_code=202)
        broker.bindings[binding_id] = Binding(instance_id, body, None, credentials, state=SUCCEEDED)
        return JSONResponse({"credentials": credentials}, status_code=201)

    @app.get("/v2/service_instances/{instance_id}/service_bindings/{binding_id}/last_operation")
    async def binding_last_operation(instance_id: str, binding_id: str) -> JSONResponse:
        binding = broker.bindings.get(binding_id)
        if binding is None or binding.operation is None:
            return JSONResponse({}, status_code=410)
        state, description = binding.operation.poll()
        binding.state = state
        if state == SUCCEEDED and binding.operation.kind == "unbind":
            del broker.bindings[binding_id]
        return JSONResponse({"state": state, **({"description": description} if description else {})})

    @app.get("/v2/service_instances/{instance_id}/service_bindings/{binding_id}")
    async def fetch_binding(instance_id: str, binding_id: str) -> JSONResponse:
        binding = broker.bindings.get(binding_id)
        if binding is None or binding.state != SUCCEEDED:
            return _error(404, "NotFound", "no such binding (or still in progress)")
        return JSONResponse({"credentials": binding.credentials})

    @app.delete("/v2/service_instances/{instance_id}/service_bindings/{binding_id}")
    async def unbind(instance_id: str, binding_id: str, request: Request) -> JSONResponse:
        query = request.query_params
        if not query.get("service_id") or not query.get("plan_id"):
            return _error(400, "BadRequest", "service_id and plan_id are required")
        binding = broker.bindings.get(binding_id)
        if binding is None:
            return JSONResponse({}, status_code=410)
        if query.get("plan_id") == PLAN_ASYNC_BIND:
            binding.operation = broker.op("unbind")
            return JSONResponse({"operation": binding.operation.id}, status_code=202)
        del broker.bindings[binding_id]
        return JSONResponse({}, status_code=200)

    return app


@contextmanager
def serve(broker: FakeBroker) -> Iterator[str]:
    """Serve ``broker`` on 127.0.0.1 (a free port) in a thread; yields its base URL, stops on exit."""
    server = uvicorn.Server(uvicorn.Config(broker.app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, name="osb-fake-broker", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the fake OSB broker did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
