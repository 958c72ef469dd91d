"""The scripted walk through the OSB API that ``opbroker dev --demo`` runs: provision → last_operation →
bind → credentials → unbind → deprovision, exactly as a platform would call the broker."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx

from opbroker.devcluster.devstack import DEMO_NAMESPACE, DEMO_PLAN, DEMO_SERVICE, Endpoint

Say = Callable[[str], None]
HEADERS = {"X-Broker-API-Version": "2.17", "X-Broker-API-Request-Identity": "opbroker-dev-demo"}


class DemoFailed(RuntimeError):
    """A step did not answer as the OSB API promises."""


def _expect(response: httpx.Response, *codes: int) -> dict[str, Any]:
    if response.status_code not in codes:
        request = response.request
        raise DemoFailed(f"{request.method} {request.url.path} answered {response.status_code}: {response.text[:300]}")
    body: dict[str, Any] = response.json() if response.content else {}
    return body


def _poll(http: httpx.Client, path: str, operation: str | None, say: Say, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    params = {"operation": operation} if operation else {}
    while time.monotonic() < deadline:
        response = http.get(path, params=params)
        if response.status_code == 410:
            return {"state": "succeeded", "description": "gone"}
        body = _expect(response, 200)
        say(f"  last_operation: {body.get('state')} {body.get('description') or ''}".rstrip())
        if body.get("state") in ("succeeded", "failed"):
            return body
        time.sleep(min(1.0, float(response.headers.get("Retry-After", 1))))
    raise DemoFailed(f"{path} did not finish within {timeout:.0f}s")


def run_demo(
    endpoint: Endpoint,
    say: Say,
    *,
    service_name: str = DEMO_SERVICE,
    plan_name: str = DEMO_PLAN,
    namespace: str = DEMO_NAMESPACE,
) -> None:
    """Provision, bind, show the credentials, unbind, deprovision. Raises DemoFailed on any surprise.

    ``service_name``, ``plan_name``: the catalog's service and plan to walk through: the demo catalog's by
    default, named rather than "the first", since the broker may serve other services and plans too.
    ``namespace``: the request context's namespace (the broker must allow it; a Pulumi-deployed broker allows
    its own namespace).
    """
    # GUIDs, as platforms send them (most Cloud Foundry instance GUIDs start with a digit; this one always does).
    instance_id = "0" + str(uuid.uuid4())[1:]
    binding_id = str(uuid.uuid4())
    with httpx.Client(
        base_url=endpoint.url, auth=(endpoint.username, endpoint.password), headers=HEADERS, timeout=30
    ) as http:
        catalog = _expect(http.get("/v2/catalog"), 200)
        services = [s for s in catalog["services"] if s["name"] == service_name]
        if not services:
            raise DemoFailed(f"the catalog has no service named {service_name!r}")
        service = services[0]
        plans = [p for p in service["plans"] if p["name"] == plan_name]
        if not plans:
            raise DemoFailed(f"the catalog's service {service_name!r} has no plan named {plan_name!r}")
        plan = plans[0]
        say(f"[bold]1. catalog[/bold]: service {service['name']!r}, plan {plan['name']!r}")
        ids = {"service_id": service["id"], "plan_id": plan["id"]}

        say(f"[bold]2. provision[/bold] instance {instance_id}")
        body = {
            **ids,
            "organization_guid": "demo-org",
            "space_guid": "demo-space",
            "context": {"platform": "kubernetes", "namespace": namespace},
            "parameters": {"version": "16"},
        }
        accepted = _expect(
            http.put(f"/v2/service_instances/{instance_id}", params={"accepts_incomplete": "true"}, json=body), 202
        )
        state = _poll(http, f"/v2/service_instances/{instance_id}/last_operation", accepted.get("operation"), say)
        if state["state"] != "succeeded":
            raise DemoFailed(f"provisioning failed: {state.get('description')}")
        fetched = _expect(http.get(f"/v2/service_instances/{instance_id}"), 200)
        say(f"  instance ready; dashboard: {fetched.get('dashboard_url')}")

        say(f"[bold]3. bind[/bold] {binding_id}")
        path = f"/v2/service_instances/{instance_id}/service_bindings/{binding_id}"
        response = http.put(path, params={"accepts_incomplete": "true"}, json=ids)
        bound = _expect(response, 200, 201, 202)
        if response.status_code == 202:
            state = _poll(http, f"{path}/last_operation", bound.get("operation"), say)
            if state["state"] != "succeeded":
                raise DemoFailed(f"binding failed: {state.get('description')}")
            bound = _expect(http.get(path), 200)
        credentials = bound.get("credentials") or {}
        if not credentials.get("password"):
            raise DemoFailed("the binding returned no credentials")
        say("[bold]4. credentials[/bold] (from the binding's Secret, through the broker):")
        for key in sorted(credentials):
            say(f"  {key}: {credentials[key]}")

        say(f"[bold]5. unbind[/bold] {binding_id}")
        response = http.delete(path, params={**ids, "accepts_incomplete": "true"})
        unbound = _expect(response, 200, 202)
        if response.status_code == 202:
            _poll(http, f"{path}/last_operation", unbound.get("operation"), say)

        say(f"[bold]6. deprovision[/bold] {instance_id}")
        response = http.delete(f"/v2/service_instances/{instance_id}", params={**ids, "accepts_incomplete": "true"})
        deleted = _expect(response, 200, 202)
        if response.status_code == 202:
            state = _poll(http, f"/v2/service_instances/{instance_id}/last_operation", deleted.get("operation"), say)
            if state["state"] != "succeeded":
                raise DemoFailed(f"deprovisioning failed: {state.get('description')}")
        _expect(http.get(f"/v2/service_instances/{instance_id}"), 404, 410)
        say("  instance gone")
