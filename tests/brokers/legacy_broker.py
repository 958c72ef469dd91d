"""An old-fashioned OSB broker for the client-side conformance tests: it speaks one API version only (2.13 or
2.14) and answers like a broker generated from the OSB OpenAPI document of its day.

What makes it hard to talk to, each on purpose:

* ``412`` to any ``X-Broker-API-Version`` but its own;
* ``400`` to a request body carrying a field its version does not define (``maintenance_info`` before 2.15:
  a generated server validates bodies against its schema), and to ``accepts_incomplete`` on a binding in 2.13;
* unset structs and strings sent as ``{}`` and ``""`` (``"maintenance_info": {}``, ``"dashboard_url": ""``),
  optional fields left out (plan descriptions), fields of its own (``x-vendor``), numbers as strings
  (``"maximum_polling_duration": "3600"``, a credential ``"port": "5432"``);
* a plan no ServiceClass can hold (a name with a space) and a service without plans, beside good ones;
* ``Retry-After: 3600`` on every in-progress ``last_operation``, which its versions do not define: a client that
  honoured it would wait an hour.

Standard library only and independent of opbroker's code, served on 127.0.0.1 in a thread (``serve``); every
request is recorded for assertions.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.osb_fake_broker import Recorded

SERVICE_ID = "0f1c6a55-1e33-4c1f-9a4b-0000000000a1"
SYNC_PLAN = "0f1c6a55-1e33-4c1f-9a4b-0000000000b1"  # "small": every operation finishes in the answer
ASYNC_PLAN = "0f1c6a55-1e33-4c1f-9a4b-0000000000b2"  # "large": provision/deprovision answer 202
BAD_PLAN = "0f1c6a55-1e33-4c1f-9a4b-0000000000b3"  # "Bad Plan": its name cannot be a ServiceClass plan's
EMPTY_SERVICE_ID = "0f1c6a55-1e33-4c1f-9a4b-0000000000a2"  # no plans at all
PASSWORD = "legacy-s3cret-pw"


def catalog(suffix: str, *, bad_entries: bool = True) -> dict[str, Any]:
    """The catalog, its service names ending in ``suffix`` (ServiceClasses are cluster-scoped); without
    ``bad_entries`` only what a tolerant reader lists whole (no plan to skip, no service without plans)."""
    plans = [
        {
            "id": SYNC_PLAN,
            "name": "small",
            "description": "synchronous",
            "free": True,
            "metadata": {},
            "maintenance_info": {},
            "schemas": {"service_instance": {"create": {"parameters": {}}, "update": {}}, "service_binding": {}},
            "x-vendor": {"tier": 1},
        },
        {
            "id": ASYNC_PLAN,
            "name": "large",
            "maintenance_info": {"version": ""},
            "maximum_polling_duration": "3600",
            "bindable": "true",
        },
        {"id": BAD_PLAN, "name": "Bad Plan", "description": "a name an Instance could not name"},
    ]
    if not bad_entries:
        plans.pop()
    services: list[dict[str, Any]] = [
        {
            "id": SERVICE_ID,
            "name": f"legacy-db-{suffix}",
            "description": "a database from a broker of 2017",
            "bindable": True,
            "plan_updateable": False,
            "instances_retrievable": True,
            "tags": [],
            "requires": [],
            "metadata": {},
            "dashboard_client": {},
            "x-vendor": "extra",
            "plans": plans,
        }
    ]
    if bad_entries:
        services.append(
            {"id": EMPTY_SERVICE_ID, "name": f"legacy-empty-{suffix}", "description": "", "bindable": False}
        )
    return {"services": services}


@dataclass
class LegacyBroker:
    version: str = "2.14"
    suffix: str = "x"
    bad_entries: bool = True
    credential_key: str = "port"
    """The key of the credential sent as a number in a string; one with a space cannot be a Secret's key."""
    username: str = "legacy"
    password: str = PASSWORD
    instances: dict[str, dict[str, Any]] = field(default_factory=dict)
    bindings: dict[str, dict[str, Any]] = field(default_factory=dict)
    operations: dict[str, int] = field(default_factory=dict)
    """Polls left before an instance's operation finishes (id → count)."""
    requests: list[Recorded] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def calls(self, method: str, path_part: str = "") -> list[Recorded]:
        with self.lock:
            return [r for r in self.requests if r.method == method and path_part in r.path]

    def answer(self, method: str, path: str, query: dict[str, str], headers: dict[str, str], body: Any) -> Any:
        """``(status, body, headers)`` for one request."""
        with self.lock:
            self.requests.append(Recorded(method, path, query, headers, body))
            expected = "Basic " + base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
            if headers.get("authorization") != expected:
                return 401, {"description": "unauthorized"}, {}
            if headers.get("x-broker-api-version") != self.version:
                return 412, {"description": f"only X-Broker-API-Version {self.version} is supported"}, {}
            return self._route(method, path.split("/")[1:], query, body)

    def _route(self, method: str, parts: list[str], query: dict[str, str], body: Any) -> Any:
        if parts == ["v2", "catalog"] and method == "GET":
            return 200, catalog(self.suffix, bad_entries=self.bad_entries), {}
        if len(parts) >= 3 and parts[:2] == ["v2", "service_instances"]:
            instance_id = parts[2]
            if len(parts) == 3:
                return self._instance(method, instance_id, query, body)
            if parts[3:] == ["last_operation"] and method == "GET":
                return self._last_operation(instance_id)
            if len(parts) == 5 and parts[3] == "service_bindings":
                return self._binding(method, instance_id, parts[4], query, body)
        return 404, {"description": "no such endpoint"}, {}

    def _undefined(self, body: Any) -> str | None:
        """A field of the body the broker's version does not define (its schema refuses those)."""
        if isinstance(body, dict) and self.version < "2.15":
            if "maintenance_info" in body:
                return "maintenance_info"
            if "maintenance_info" in (body.get("previous_values") or {}):
                return "previous_values.maintenance_info"
        return None

    def _instance(self, method: str, instance_id: str, query: dict[str, str], body: Any) -> Any:
        if method == "PUT":
            if self._undefined(body):
                return 400, {"description": f"unknown field {self._undefined(body)}"}, {}
            if not all(body.get(k) for k in ("service_id", "plan_id", "organization_guid", "space_guid")):
                return 400, {"description": "service_id, plan_id, organization_guid and space_guid are required"}, {}
            held = self.instances.get(instance_id)
            if held is not None:
                return (200, {"dashboard_url": ""}, {}) if held["plan_id"] == body["plan_id"] else (409, {}, {})
            self.instances[instance_id] = {"service_id": body["service_id"], "plan_id": body["plan_id"]}
            if body["plan_id"] == ASYNC_PLAN:
                if query.get("accepts_incomplete") != "true":
                    del self.instances[instance_id]
                    return 422, {"error": "AsyncRequired", "description": "asynchronous only"}, {}
                self.operations[instance_id] = 2
                return 202, {"operation": "provision", "dashboard_url": ""}, {}
            return 201, {"dashboard_url": "", "operation": "", "x-vendor": 7}, {}
        if method == "GET" and self.version >= "2.14":
            held = self.instances.get(instance_id)
            if held is None:
                return 404, {}, {}
            return 200, {**held, "dashboard_url": "", "parameters": {}}, {}
        if method == "DELETE":
            if not query.get("service_id") or not query.get("plan_id"):
                return 400, {"description": "service_id and plan_id are required"}, {}
            held = self.instances.get(instance_id)
            if held is None:
                return 410, {}, {}
            if held["plan_id"] == ASYNC_PLAN:
                held["deleting"] = True
                self.operations[instance_id] = 2
                return 202, {"operation": "deprovision"}, {}
            del self.instances[instance_id]
            return 200, {}, {}
        return 405, {"description": "method not allowed"}, {}

    def _last_operation(self, instance_id: str) -> Any:
        held = self.instances.get(instance_id)
        if held is None:
            return 410, {}, {}
        left = self.operations.get(instance_id, 0)
        if left > 0:
            self.operations[instance_id] = left - 1
            return 200, {"state": "in progress", "description": ""}, {"Retry-After": "3600"}
        if held.get("deleting"):
            del self.instances[instance_id]
            return 410, {}, {}
        return 200, {"state": "succeeded", "description": ""}, {}

    def _binding(self, method: str, instance_id: str, binding_id: str, query: dict[str, str], body: Any) -> Any:
        if self.version < "2.14" and "accepts_incomplete" in query:
            return 400, {"description": "accepts_incomplete is not a binding parameter"}, {}
        if method == "PUT":
            if not body.get("service_id") or not body.get("plan_id"):
                return 400, {"description": "service_id and plan_id are required"}, {}
            if instance_id not in self.instances:
                return 404, {"description": "no such instance"}, {}
            credentials = {"username": f"u-{binding_id[:6]}", "password": PASSWORD + "-bound"}
            credentials[self.credential_key] = "5432"
            self.bindings[binding_id] = {"instance_id": instance_id, "credentials": credentials}
            answer = {
                "credentials": credentials,
                "route_service_url": "",
                "volume_mounts": [],
                "syslog_drain_url": 0,
                "endpoints": "not-an-array",
            }
            return 201, answer, {}
        if method == "DELETE":
            if not query.get("service_id") or not query.get("plan_id"):
                return 400, {"description": "service_id and plan_id are required"}, {}
            if self.bindings.pop(binding_id, None) is None:
                return 410, {}, {}
            return 200, {}, {}
        if method == "GET" and self.version >= "2.14":
            held = self.bindings.get(binding_id)
            return (200, {"credentials": held["credentials"]}, {}) if held else (404, {}, {})
        return 405, {"description": "method not allowed"}, {}


class _Handler(BaseHTTPRequestHandler):
    broker: LegacyBroker

    def log_message(self, *_: Any) -> None:
        return

    def _handle(self) -> None:
        parts = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        headers = {k.lower(): v for k, v in self.headers.items()}
        status, answer, extra = self.broker.answer(self.command, parts.path, query, headers, body)
        payload = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for key, value in extra.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_PUT = do_PATCH = do_DELETE = _handle


@contextmanager
def serve(broker: LegacyBroker) -> Iterator[str]:
    """Serve ``broker`` on 127.0.0.1 (a free port) in a thread; yields its base URL, stops on exit."""
    handler = type("Handler", (_Handler,), {"broker": broker})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="legacy-broker", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
