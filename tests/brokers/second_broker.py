"""A second, independent Open Service Broker (API v2.17) for tests, run as its own process.

Why it exists: the controllers consume *any* OSB broker, so their tests must also meet a broker that is not
opbroker's and behaves differently — synchronous-only plans, 5xx answers, time-outs, malformed JSON, 410 on
delete, a catalog that changes between relists. To stay genuinely independent of our code it imports only the
standard library (``tests/broker/test_second_broker.py`` checks that), and it runs in a separate process so a
controller under test talks to it over real HTTP(S) exactly as it would to a vendor's broker.

    python tests/brokers/second_broker.py --port 0 --port-file F [--tls-cert C --tls-key K]
        [--username U --password P | --token T] [--catalog catalog.json]

A plan's mode comes from the catalog: ``plan.metadata.second_broker = {"async": bool, "async_bindings": bool}``.
Synchronous plans answer 201/200 even when ``accepts_incomplete=true``; asynchronous plans answer 202 and refuse
requests without it (422 ``AsyncRequired``). ``/admin/*`` (header ``X-Admin: 1``, no OSB auth) injects faults,
replaces the catalog, changes settings and shows what the broker received and holds; see ``Admin`` below.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import copy
import hmac
import json
import os
import re
import secrets
import ssl
import sys
import threading
import time
import traceback
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

DEFAULT_CATALOG = Path(__file__).with_name("second_catalog.json")
MIN_VERSION = (2, 13)
IN_PROGRESS, SUCCEEDED, FAILED = "in progress", "succeeded", "failed"
#: Headers kept in the request log (the Authorization header never is: only its scheme).
HEADERS_OF_INTEREST = ("X-Broker-API-Version", "X-Broker-API-Originating-Identity", "X-Broker-API-Request-Identity")
INSTANCE = re.compile(r"^/v2/service_instances/([^/]+)(/last_operation)?$")
BINDING = re.compile(r"^/v2/service_instances/([^/]+)/service_bindings/([^/]+)(/last_operation)?$")
Json = dict[str, Any]
DEFAULT_SETTINGS: Json = {"async_polls": 2, "retry_after": None, "failed_operations": {}, "deprovision_gone": False}
#: A fault rule's fields when left out: any method, no status (only a delay), applied once.
FAULT_DEFAULTS: Json = {"method": None, "status": None, "body": None, "headers": {}, "delay_seconds": 0, "times": 1}


class Reply(Exception):
    """An answer decided part-way through a handler (errors mostly); raising it keeps the handlers flat."""

    def __init__(self, status: int, body: Any = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(status)
        self.status, self.body, self.headers = status, {} if body is None else body, headers or {}


def error(status: int, description: str, code: str | None = None) -> Reply:
    """An OSB error body: ``description`` always, ``error`` only for the codes the spec names."""
    return Reply(status, {"description": description} | ({"error": code} if code else {}))


class Broker:
    """Everything the broker holds, behind one lock: catalog, settings, instances, bindings, faults, request log."""

    def __init__(self, catalog: Json) -> None:
        self.lock = threading.Lock()
        self.catalog = catalog
        #: async_polls: in-progress answers before the final one; retry_after: seconds sent as Retry-After while in
        #: progress (None: no header); failed_operations: {plan_id: [provision|update|deprovision|bind|unbind]} that
        #: end in "failed"; deprovision_gone: the final poll of an asynchronous deprovision answers 410 Gone.
        self.settings: Json = dict(DEFAULT_SETTINGS)
        self.instances: dict[str, Json] = {}
        self.bindings: dict[str, Json] = {}  # keyed "instance_id/binding_id"
        self.faults: list[Json] = []
        self.requests: list[Json] = []
        self.counter = 0

    def plan(self, service_id: Any, plan_id: Any) -> tuple[Json, Json]:
        """The catalog's service and plan for these ids, or 400 (an unknown id is a malformed request)."""
        for service in self.catalog.get("services", []):
            if service.get("id") == service_id:
                for plan in service.get("plans", []):
                    if plan.get("id") == plan_id:
                        return service, plan
                raise error(400, f"plan {plan_id!r} is not in service {service_id!r}")
        raise error(400, f"service {service_id!r} is not in the catalog")

    def held_plan(self, record: Json) -> tuple[Json, Json]:
        """The service and plan of something we hold; empty when the catalog has since dropped them (a
        changed catalog must not stop a platform from deprovisioning what it already has)."""
        try:
            return self.plan(record["service_id"], record["plan_id"])
        except Reply:
            return {}, {}

    def operation(self, kind: str, plan_id: str) -> Json:
        """A new asynchronous operation; its outcome is fixed now, so changing settings mid-flight is predictable."""
        self.counter += 1
        failing = kind in self.settings["failed_operations"].get(plan_id, [])
        return {
            "id": f"{kind}-{self.counter}",
            "kind": kind,
            "polls_left": int(self.settings["async_polls"]),
            "final": FAILED if failing else SUCCEEDED,
        }

    def take_fault(self, method: str, path: str) -> Json | None:
        """The first fault rule matching this request, its count spent (rules with ``times`` None never run out)."""
        with self.lock:
            for rule in self.faults:
                if rule["method"] in (None, "*", method) and re.search(rule["path_regex"], path):
                    if rule["times"] is not None:
                        rule["times"] -= 1
                        if rule["times"] <= 0:
                            self.faults.remove(rule)
                    return dict(rule)
        return None


def mode(plan: Json) -> Json:
    """The plan's behaviour switches, from the catalog (absent: synchronous)."""
    metadata = plan.get("metadata") or {}
    return metadata.get("second_broker") or {} if isinstance(metadata, dict) else {}


def flag(service: Json, plan: Json, name: str) -> bool:
    """A catalog switch a plan may override (``bindable``, ``plan_updateable``)."""
    return bool(plan.get(name, service.get(name, False)))


def required(query: dict[str, str]) -> None:
    """Deprovision and unbind must name the service and plan (400), though we act on what we hold."""
    if not query.get("service_id") or not query.get("plan_id"):
        raise error(400, "service_id and plan_id query parameters are required")


def poll(record: Json, broker: Broker) -> Reply:
    """Answer one last_operation poll of ``record``'s current operation, moving it on by one poll."""
    op = record["operation"]
    if op["polls_left"] > 0:
        op["polls_left"] -= 1
        retry = broker.settings["retry_after"]
        headers = {"Retry-After": str(retry)} if retry is not None else {}
        return Reply(200, {"state": IN_PROGRESS, "description": f"{op['kind']} in progress"}, headers)
    return Reply(200, {"state": op["final"], "description": f"{op['kind']} {op['final']}"})


class OSB:
    """The OSB routes. Each method runs under the broker's lock and returns or raises a ``Reply``."""

    def __init__(self, broker: Broker) -> None:
        self.b = broker

    def catalog(self) -> Reply:
        return Reply(200, self.b.catalog)

    def put_instance(self, iid: str, body: Json, incomplete: bool) -> Reply:
        _, plan = self.b.plan(body.get("service_id"), body.get("plan_id"))
        wanted = (body["service_id"], body["plan_id"], body.get("parameters") or {})
        version = (body.get("maintenance_info") or {}).get("version")
        if version is not None and version != (plan.get("maintenance_info") or {}).get("version"):
            raise error(422, "maintenance_info.version does not match the catalog", "MaintenanceInfoConflict")
        existing = self.b.instances.get(iid)
        if existing is not None:
            if (existing["service_id"], existing["plan_id"], existing["parameters"]) != wanted:
                raise error(409, f"instance {iid} exists with other attributes")
            op = existing.get("operation")
            if op and op["kind"] == "provision" and existing["state"] == IN_PROGRESS:
                return Reply(202, {"operation": op["id"], "dashboard_url": existing["dashboard_url"]})
            if existing["state"] != SUCCEEDED:
                raise error(409, f"instance {iid} is {existing['state']}; deprovision it first")
            return Reply(200, {"dashboard_url": existing["dashboard_url"]})
        asynchronous = bool(mode(plan).get("async"))
        if asynchronous and not incomplete:
            raise error(422, "This Service Plan requires client support for asynchronous operations.", "AsyncRequired")
        record: Json = {
            "service_id": wanted[0],
            "plan_id": wanted[1],
            "parameters": wanted[2],
            "context": body.get("context"),
            "dashboard_url": f"https://second-broker.example/dashboard/{iid}",
            "state": IN_PROGRESS if asynchronous else SUCCEEDED,
            "operation": self.b.operation("provision", wanted[1]) if asynchronous else None,
        }
        self.b.instances[iid] = record
        if asynchronous:
            return Reply(202, {"operation": record["operation"]["id"], "dashboard_url": record["dashboard_url"]})
        return Reply(201, {"dashboard_url": record["dashboard_url"]})

    def patch_instance(self, iid: str, body: Json, incomplete: bool) -> Reply:
        record = self.instances_get(iid, 404)
        if body.get("service_id") != record["service_id"]:
            raise error(400, "service_id is missing or not the instance's service")
        service, plan = self.b.plan(record["service_id"], body.get("plan_id", record["plan_id"]))
        new_plan_id: str = plan["id"]
        _, old_plan = self.b.held_plan(record)
        if new_plan_id != record["plan_id"] and not flag(service, old_plan, "plan_updateable"):
            raise error(422, f"plan {record['plan_id']} cannot be changed (plan_updateable is false)")
        if record["state"] == IN_PROGRESS:
            raise error(422, "Another operation for this Service Instance is in progress.", "ConcurrencyError")
        asynchronous = bool(mode(plan).get("async"))
        if asynchronous and not incomplete:
            raise error(422, "This Service Plan requires client support for asynchronous operations.", "AsyncRequired")
        record["plan_id"] = new_plan_id
        if "parameters" in body:
            record["parameters"] = body["parameters"] or {}
        if not asynchronous:
            return Reply(200, {})
        record["state"], record["operation"] = IN_PROGRESS, self.b.operation("update", new_plan_id)
        return Reply(202, {"operation": record["operation"]["id"]})

    def delete_instance(self, iid: str, query: dict[str, str], incomplete: bool) -> Reply:
        required(query)
        record = self.instances_get(iid, 410)
        _, plan = self.b.held_plan(record)
        op = record.get("operation")
        if op and op["kind"] == "deprovision" and record["state"] == IN_PROGRESS:
            return Reply(202, {"operation": op["id"]})
        if not mode(plan).get("async"):
            self.forget(iid)
            return Reply(200, {})
        if not incomplete:
            raise error(422, "This Service Plan requires client support for asynchronous operations.", "AsyncRequired")
        record["state"], record["operation"] = IN_PROGRESS, self.b.operation("deprovision", record["plan_id"])
        return Reply(202, {"operation": record["operation"]["id"]})

    def get_instance(self, iid: str) -> Reply:
        record = self.instances_get(iid, 404)
        service, _ = self.b.held_plan(record)
        if not service.get("instances_retrievable"):
            raise error(404, "instances of this service are not retrievable")
        op = record.get("operation") or {}
        if record["state"] == IN_PROGRESS and op.get("kind") == "update":
            raise error(422, "The Service Instance is being updated.", "ConcurrencyError")
        if record["state"] != SUCCEEDED:
            raise error(404, f"instance {iid} is not provisioned")
        keys = ("service_id", "plan_id", "dashboard_url", "parameters")
        return Reply(200, {k: record[k] for k in keys})

    def instance_last_operation(self, iid: str, query: dict[str, str]) -> Reply:
        record = self.instances_get(iid, 410)
        op = record.get("operation")
        if op is None or ("operation" in query and query["operation"] != op["id"]):
            raise error(400, f"no operation {query.get('operation')!r} for instance {iid}")
        reply = poll(record, self.b)
        if reply.body["state"] == IN_PROGRESS:
            return reply
        if op["kind"] == "deprovision" and op["final"] == SUCCEEDED:
            self.forget(iid)
            if self.b.settings["deprovision_gone"]:
                return Reply(410, {})
            return reply
        # A failed update leaves the instance usable (OSB: 4xx/failed updates change nothing we model).
        record["state"] = SUCCEEDED if op["final"] == SUCCEEDED or op["kind"] == "update" else FAILED
        return reply

    def put_binding(self, iid: str, bid: str, body: Json, incomplete: bool) -> Reply:
        instance = self.instances_get(iid, 404)
        if (body.get("service_id"), body.get("plan_id")) != (instance["service_id"], instance["plan_id"]):
            raise error(400, "service_id/plan_id are missing or not the instance's")
        service, plan = self.b.plan(body["service_id"], body["plan_id"])
        if not flag(service, plan, "bindable"):
            raise error(400, f"plan {plan['id']} is not bindable")
        if instance["state"] != SUCCEEDED:
            raise error(422, f"instance {iid} is not ready", "ConcurrencyError")
        key, wanted = f"{iid}/{bid}", (body.get("parameters") or {}, body.get("bind_resource") or {})
        existing = self.b.bindings.get(key)
        if existing is not None:
            if (existing["parameters"], existing["bind_resource"]) != wanted:
                raise error(409, f"binding {bid} exists with other parameters")
            if existing["state"] == IN_PROGRESS:
                return Reply(202, {"operation": existing["operation"]["id"]})
            if existing["state"] != SUCCEEDED:
                raise error(409, f"binding {bid} is {existing['state']}; unbind it first")
            return Reply(200, {"credentials": existing["credentials"]})
        asynchronous = bool(mode(plan).get("async_bindings"))
        if asynchronous and not incomplete:
            raise error(422, "This Service Instance requires client support for asynchronous binding.", "AsyncRequired")
        user = f"u{secrets.token_hex(4)}"
        password = secrets.token_urlsafe(18)
        record: Json = {
            "instance_id": iid,
            "binding_id": bid,
            "parameters": wanted[0],
            "bind_resource": wanted[1],
            "credentials": {
                "uri": f"seconddb://{user}:{password}@second-db.example:5432/{iid}",
                "username": user,
                "password": password,
            },
            "state": IN_PROGRESS if asynchronous else SUCCEEDED,
            "operation": self.b.operation("bind", instance["plan_id"]) if asynchronous else None,
        }
        self.b.bindings[key] = record
        if asynchronous:
            return Reply(202, {"operation": record["operation"]["id"]})  # no credentials in a 202 (spec)
        return Reply(201, {"credentials": record["credentials"]})

    def delete_binding(self, iid: str, bid: str, query: dict[str, str], incomplete: bool) -> Reply:
        required(query)
        record = self.bindings_get(iid, bid, 410)
        _, plan = self.b.held_plan(self.b.instances[iid])
        op = record.get("operation")
        if op and op["kind"] == "unbind" and record["state"] == IN_PROGRESS:
            return Reply(202, {"operation": op["id"]})
        if not mode(plan).get("async_bindings"):
            del self.b.bindings[f"{iid}/{bid}"]
            return Reply(200, {})
        if not incomplete:
            raise error(422, "This Service Instance requires client support for asynchronous binding.", "AsyncRequired")
        record["state"], record["operation"] = IN_PROGRESS, self.b.operation("unbind", plan.get("id", ""))
        return Reply(202, {"operation": record["operation"]["id"]})

    def get_binding(self, iid: str, bid: str) -> Reply:
        record = self.bindings_get(iid, bid, 404)
        if record["state"] != SUCCEEDED or (record.get("operation") or {}).get("kind") == "unbind":
            raise error(404, f"binding {bid} is not ready")
        return Reply(200, {"credentials": record["credentials"], "parameters": record["parameters"]})

    def binding_last_operation(self, iid: str, bid: str, query: dict[str, str]) -> Reply:
        record = self.bindings_get(iid, bid, 410)
        op = record.get("operation")
        if op is None or ("operation" in query and query["operation"] != op["id"]):
            raise error(400, f"no operation {query.get('operation')!r} for binding {bid}")
        reply = poll(record, self.b)
        if reply.body["state"] == IN_PROGRESS:
            return reply
        if op["kind"] == "unbind" and op["final"] == SUCCEEDED:
            del self.b.bindings[f"{iid}/{bid}"]
        else:
            record["state"] = SUCCEEDED if op["final"] == SUCCEEDED or op["kind"] == "unbind" else FAILED
        return reply

    def instances_get(self, iid: str, missing: int) -> Json:
        if iid not in self.b.instances:
            raise Reply(missing, {} if missing == 410 else {"description": f"instance {iid} does not exist"})
        return self.b.instances[iid]

    def bindings_get(self, iid: str, bid: str, missing: int) -> Json:
        key = f"{iid}/{bid}"
        if key not in self.b.bindings:
            raise Reply(missing, {} if missing == 410 else {"description": f"binding {bid} does not exist"})
        return self.b.bindings[key]

    def forget(self, iid: str) -> None:
        """Drop an instance and its bindings (the spec leaves deprovision-with-bindings to the broker)."""
        del self.b.instances[iid]
        for key in [k for k in self.b.bindings if k.startswith(f"{iid}/")]:
            del self.b.bindings[key]


class Admin:
    """``/admin/*``: test control. Not OSB, so no OSB auth; ``X-Admin: 1`` keeps OSB clients out by accident."""

    def __init__(self, broker: Broker) -> None:
        self.b = broker

    def handle(self, method: str, path: str, body: Any) -> Reply:
        with self.b.lock:  # answer with a copy: it is serialised after the lock is released
            reply = self.route(method, path, body)
            return Reply(reply.status, copy.deepcopy(reply.body), reply.headers)

    def route(self, method: str, path: str, body: Any) -> Reply:
        b = self.b
        if (method, path) == ("POST", "/admin/faults"):
            for rule in body if isinstance(body, list) else [body]:
                if not isinstance(rule, dict) or "path_regex" not in rule:
                    raise error(400, "a fault rule is an object with at least path_regex")
                try:
                    re.compile(rule["path_regex"])
                except re.error as exc:
                    raise error(400, f"path_regex {rule['path_regex']!r}: {exc}") from None
                b.faults.append(FAULT_DEFAULTS | rule)
            return Reply(200, b.faults)
        if (method, path) == ("GET", "/admin/faults"):
            return Reply(200, b.faults)
        if (method, path) == ("DELETE", "/admin/faults"):
            b.faults.clear()
            return Reply(200, {})
        if (method, path) == ("PUT", "/admin/catalog"):
            if not isinstance(body, dict) or not isinstance(body.get("services"), list):
                raise error(400, "a catalog is an object with a services list")
            b.catalog = body
            return Reply(200, b.catalog)
        if (method, path) == ("PUT", "/admin/settings"):
            unknown = set(body or {}) - set(b.settings) if isinstance(body, dict) else {"<not an object>"}
            if unknown:
                raise error(400, f"unknown settings {sorted(unknown)}; known: {sorted(b.settings)}")
            b.settings.update(body)
            return Reply(200, b.settings)
        if (method, path) == ("GET", "/admin/settings"):
            return Reply(200, b.settings)
        if (method, path) == ("GET", "/admin/requests"):
            return Reply(200, b.requests)
        if (method, path) == ("DELETE", "/admin/requests"):
            b.requests.clear()
            return Reply(200, {})
        if (method, path) == ("GET", "/admin/state"):
            return Reply(200, {"instances": b.instances, "bindings": b.bindings})
        raise error(404, f"no admin route {method} {path}")


class Handler(BaseHTTPRequestHandler):
    """One HTTP request: faults first, then auth (401), API version (412), then the OSB or admin route."""

    protocol_version = "HTTP/1.1"  # keep-alive, as real brokers do; every answer carries Content-Length
    server: Server

    def do_GET(self) -> None:
        self.dispatch()

    do_PUT = do_PATCH = do_DELETE = do_POST = do_GET

    def dispatch(self) -> None:
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = ValueError
        broker = self.server.broker
        if url.path.startswith("/admin/"):
            if self.headers.get("X-Admin") != "1":
                return self.send(error(403, "admin routes need the header X-Admin: 1"))
            if body is ValueError:
                return self.send(error(400, "malformed JSON"))
            return self.send(self.catch(lambda: Admin(broker).handle(self.command, url.path, body)))
        entry = self.record(url.path, query, raw, body)
        fault = broker.take_fault(self.command, url.path)
        if fault:
            with broker.lock:
                entry["fault"] = True
            time.sleep(float(fault["delay_seconds"] or 0))
            if fault["status"] is not None:  # a rule without a status only delays the real answer
                raw_body = fault["body"] if fault["body"] is not None else '{"description": "injected fault"}'
                return self.send(Reply(int(fault["status"]), raw_body, fault["headers"]), entry)
        self.send(self.catch(lambda: self.osb(url.path, query, body)), entry)

    def osb(self, path: str, query: dict[str, str], body: Any) -> Reply:
        self.check_auth()
        self.check_version()
        incomplete = query.get("accepts_incomplete", "").lower() == "true"
        if self.command in ("PUT", "PATCH") and not isinstance(body, dict):
            raise error(400, "the body must be a JSON object")
        with self.server.broker.lock:  # answer with a copy: it is serialised after the lock is released
            reply = self.route(OSB(self.server.broker), path, query, body, incomplete)
            return Reply(reply.status, copy.deepcopy(reply.body), reply.headers)

    def route(self, osb: OSB, path: str, query: dict[str, str], body: Any, incomplete: bool) -> Reply:
        method = self.command
        if path == "/v2/catalog" and method == "GET":
            return osb.catalog()
        if m := INSTANCE.match(path):
            iid, last = m.group(1), m.group(2)
            if last and method == "GET":
                return osb.instance_last_operation(iid, query)
            if not last and method == "PUT":
                return osb.put_instance(iid, body, incomplete)
            if not last and method == "PATCH":
                return osb.patch_instance(iid, body, incomplete)
            if not last and method == "DELETE":
                return osb.delete_instance(iid, query, incomplete)
            if not last and method == "GET":
                return osb.get_instance(iid)
        if m := BINDING.match(path):
            iid, bid, last = m.groups()
            if last and method == "GET":
                return osb.binding_last_operation(iid, bid, query)
            if not last and method == "PUT":
                return osb.put_binding(iid, bid, body, incomplete)
            if not last and method == "DELETE":
                return osb.delete_binding(iid, bid, query, incomplete)
            if not last and method == "GET":
                return osb.get_binding(iid, bid)
        raise error(404, f"no route {method} {path}")

    def check_auth(self) -> None:
        """401 unless the agreed scheme carries the agreed secret (basic, or an opaque bearer token)."""
        cfg, header = self.server.auth, self.headers.get("Authorization", "")
        scheme, _, value = header.partition(" ")
        if cfg["kind"] == "none":
            return
        if cfg["kind"] == "bearer" and scheme.lower() == "bearer" and hmac.compare_digest(value, cfg["token"]):
            return
        if cfg["kind"] == "basic" and scheme.lower() == "basic":
            try:
                given = base64.b64decode(value, validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                given = ""
            if hmac.compare_digest(given, f"{cfg['username']}:{cfg['password']}"):
                return
        challenge = "Bearer" if cfg["kind"] == "bearer" else 'Basic realm="second-broker"'
        raise Reply(401, {"description": "unauthorized"}, {"WWW-Authenticate": challenge})

    def check_version(self) -> None:
        """412 when X-Broker-API-Version is missing, unreadable or older than 2.13 (opbroker's own takes 2.12)."""
        given = self.headers.get("X-Broker-API-Version", "")
        try:
            major, minor = (int(part) for part in given.split("."))
        except ValueError:
            raise error(412, f"X-Broker-API-Version {given!r} is not MAJOR.MINOR; this broker needs 2.13+") from None
        if major != 2 or (major, minor) < MIN_VERSION:
            raise error(412, f"X-Broker-API-Version {given} is not supported; this broker needs 2.13 to 2.x")

    def record(self, path: str, query: dict[str, str], raw: bytes, body: Any) -> Json:
        """Log the request for ``GET /admin/requests``: the auth scheme but never the secret."""
        scheme = self.headers.get("Authorization", "").partition(" ")[0].lower() or None
        headers = {h: self.headers[h] for h in HEADERS_OF_INTEREST if h in self.headers}
        entry: Json = {"method": self.command, "path": path, "query": query, "auth": scheme, "headers": headers}
        entry["at"] = time.time()  # when it arrived (wall clock), so tests can check the pacing of polls
        entry["body"] = raw.decode(errors="replace") if body is ValueError else body
        platform, _, value = headers.get("X-Broker-API-Originating-Identity", "").partition(" ")
        try:  # "Platform base64(JSON)"; None when absent or not in that form
            entry["originating_identity"] = {"platform": platform, "value": json.loads(base64.b64decode(value))}
        except (ValueError, binascii.Error):
            entry["originating_identity"] = None
        with self.server.broker.lock:
            self.server.broker.requests.append(entry)
        return entry

    @staticmethod
    def catch(route: Callable[[], Reply]) -> Reply:
        try:
            reply: Reply = route()
        except Reply as reply_:
            return reply_
        except Exception as exc:  # a bug here: answer 500 (and say why on stderr) rather than drop the connection
            traceback.print_exc()
            return error(500, f"second broker bug: {exc!r}")
        return reply

    def send(self, reply: Reply, entry: Json | None = None) -> None:
        """Write the answer; a str body goes out verbatim (so faults can send malformed JSON)."""
        data = reply.body.encode() if isinstance(reply.body, str) else json.dumps(reply.body).encode()
        if entry is not None:
            with self.server.broker.lock:
                entry["status"] = reply.status
        self.send_response(reply.status)
        headers = {"Content-Type": "application/json", "Content-Length": str(len(data))} | reply.headers
        if "X-Broker-API-Request-Identity" in self.headers:  # spec: SHOULD echo it
            headers["X-Broker-API-Request-Identity"] = self.headers["X-Broker-API-Request-Identity"]
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        sys.stderr.write(f"second-broker: {self.address_string()} {format % args}\n")


class Server(ThreadingHTTPServer):
    """The HTTP(S) server; TLS handshakes run in the request thread, so a stuck client blocks nobody else."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], broker: Broker, auth: Json, tls: ssl.SSLContext | None) -> None:
        super().__init__(address, Handler)
        self.broker, self.auth, self.tls = broker, auth, tls

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.tls is not None:
            request = self.tls.wrap_socket(request, server_side=True)  # handshake here, in the worker thread
        super().finish_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, ssl.SSLError | ConnectionError):  # e.g. a client that does not trust our CA
            sys.stderr.write(f"second-broker: {client_address}: {exc!r}\n")
            return
        super().handle_error(request, client_address)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file", type=Path, help="written with the bound port once listening")
    parser.add_argument("--tls-cert")
    parser.add_argument("--tls-key")
    parser.add_argument("--username")
    parser.add_argument("--password")
    parser.add_argument("--token")
    parser.add_argument("--catalog", type=Path, default=DEFAULT_CATALOG)
    args = parser.parse_args(argv)
    if args.token and (args.username or args.password):
        parser.error("give either --username/--password or --token")
    if bool(args.username) != bool(args.password):
        parser.error("--username and --password go together")
    if bool(args.tls_cert) != bool(args.tls_key):
        parser.error("--tls-cert and --tls-key go together")
    auth: Json = {"kind": "none"}
    if args.token:
        auth = {"kind": "bearer", "token": args.token}
    elif args.username:
        auth = {"kind": "basic", "username": args.username, "password": args.password}
    tls = None
    if args.tls_cert:
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(args.tls_cert, args.tls_key)
    catalog = json.loads(args.catalog.read_text())
    if not isinstance(catalog, dict) or not isinstance(catalog.get("services"), list):
        parser.error(f"{args.catalog}: a catalog is an object with a services list")
    broker = Broker(catalog)
    server = Server((args.host, args.port), broker, auth, tls)
    port = server.server_address[1]
    if args.port_file:  # written atomically: a reader never sees a half-written port
        tmp = args.port_file.with_name(args.port_file.name + ".tmp")
        tmp.write_text(str(port))
        os.replace(tmp, args.port_file)
    sys.stderr.write(f"second-broker: listening on {'https' if tls else 'http'}://{args.host}:{port}\n")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
