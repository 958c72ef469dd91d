"""Service bindings over real HTTP against a real API server, with the controller's stand-in.

Aspects: the async bind lifecycle (202, last_operation, credentials fetched from the binding's Secret);
sync bind answering 201 with the credentials; repeated (200) and conflicting (409) binds; RequiresApp;
bind refused while the instance is busy; unbind (also during binding) and 410 afterwards; deprovision
refused while bindings exist; credentials never reaching the logs.
"""

# ruff: noqa: F811  (test functions take the imported fixtures as arguments)

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest

from opbroker.api import conventions
from tests.broker_support import (  # noqa: F401  (pytest fixtures)
    APP_PLAN,
    ASYNC_PLAN,
    OTHER_SERVICE,
    SERVICE,
    SYNC_PLAN,
    Harness,
    StandInController,
    broker,
    new_id,
    osb,
    provision_body,
    stand_in,
    wait_for,
)

PASSWORD = "pa55-w0rd-that-must-not-leak"
RESPONSE = {
    "credentials": {"username": "app", "password": PASSWORD, "uri": f"postgres://app:{PASSWORD}@db:5432/main"},
    "endpoints": [{"host": "db", "ports": ["5432"]}],
}


def instance_url(instance_id: str) -> str:
    return f"/v2/service_instances/{instance_id}"


def binding_url(instance_id: str, binding_id: str) -> str:
    return f"{instance_url(instance_id)}/service_bindings/{binding_id}"


def ready_instance(osb: httpx.Client, stand_in: StandInController, harness: Harness, plan: str = ASYNC_PLAN) -> str:
    instance_id = new_id()
    response = osb.put(instance_url(instance_id), params={"accepts_incomplete": "true"}, json=provision_body(plan))
    assert response.status_code in (201, 202), response.text
    stand_in.succeed("instance", harness.namespace, conventions.resource_name(instance_id))
    return instance_id


def bind_body(plan: str = ASYNC_PLAN, **extra: Any) -> dict[str, Any]:
    service = OTHER_SERVICE if plan == APP_PLAN else SERVICE
    return {"service_id": service, "plan_id": plan, "bind_resource": {"app_guid": "app-1"}, **extra}


def unbind_params(plan: str = ASYNC_PLAN, **extra: str) -> dict[str, str]:
    service = OTHER_SERVICE if plan == APP_PLAN else SERVICE
    return {"service_id": service, "plan_id": plan, **extra}


def test_async_bind_lifecycle(broker: Harness, osb: httpx.Client, stand_in: StandInController) -> None:
    instance_id = ready_instance(osb, stand_in, broker)
    binding_id = new_id()
    name = conventions.resource_name(binding_id)
    url = binding_url(instance_id, binding_id)

    required = osb.put(url, json=bind_body())
    assert (required.status_code, required.json()["error"]) == (422, "AsyncRequired")
    accepted = osb.put(url, params={"accepts_incomplete": "true"}, json=bind_body(parameters={"role": "read"}))
    assert accepted.status_code == 202, accepted.text
    assert set(accepted.json()) == {"operation"}  # no credentials with 202
    operation = accepted.json()["operation"]
    stored = stand_in.get("binding", broker.namespace, name)
    assert stored is not None
    assert stored["spec"]["instanceId"] == instance_id and stored["spec"]["bindResource"] == {"app_guid": "app-1"}
    assert stored["metadata"]["labels"][conventions.LABEL_BINDING] == name
    assert stored["metadata"]["ownerReferences"][0]["name"] == conventions.resource_name(instance_id)

    poll = osb.get(url + "/last_operation", params={"operation": operation})
    assert poll.json()["state"] == "in progress" and poll.headers["Retry-After"] == "1"
    assert osb.get(url).status_code == 404  # not retrievable while binding
    again = osb.put(url, params={"accepts_incomplete": "true"}, json=bind_body(parameters={"role": "read"}))
    assert (again.status_code, again.json()) == (202, {"operation": operation})

    stand_in.adopt("binding", broker.namespace, name)
    stand_in.bound(broker.namespace, name, RESPONSE)
    assert osb.get(url + "/last_operation", params={"operation": operation}).json()["state"] == "succeeded"
    fetched = osb.get(url)
    assert fetched.status_code == 200
    assert fetched.json() == {**RESPONSE, "parameters": {"role": "read"}}
    repeat = osb.put(url, params={"accepts_incomplete": "true"}, json=bind_body(parameters={"role": "read"}))
    assert (repeat.status_code, repeat.json()) == (200, RESPONSE)
    conflict = osb.put(url, params={"accepts_incomplete": "true"}, json=bind_body(parameters={"role": "write"}))
    assert conflict.status_code == 409

    # The instance cannot go while the binding exists; unbind first.
    blocked = osb.delete(instance_url(instance_id), params=unbind_params(accepts_incomplete="true"))
    assert (blocked.status_code, blocked.json()["error"]) == (422, "BindingsExist")
    assert (
        stand_in.get("instance", broker.namespace, conventions.resource_name(instance_id))["metadata"].get(
            "deletionTimestamp"
        )
        is None
    )

    unbinding = osb.delete(url, params=unbind_params(accepts_incomplete="true"))
    assert unbinding.status_code == 202
    unbind_op = unbinding.json()["operation"]
    assert osb.get(url + "/last_operation", params={"operation": unbind_op}).json()["state"] == "in progress"
    stand_in.release("binding", broker.namespace, name)
    wait_for(lambda: stand_in.get("binding", broker.namespace, name) is None, what="the binding to go")
    assert osb.get(url + "/last_operation", params={"operation": unbind_op}).json() == {"state": "succeeded"}
    assert osb.delete(url, params=unbind_params(accepts_incomplete="true")).status_code == 410
    assert osb.delete(instance_url(instance_id), params=unbind_params(accepts_incomplete="true")).status_code == 202


def test_sync_bind_returns_credentials(broker: Harness, osb: httpx.Client, stand_in: StandInController) -> None:
    instance_id = ready_instance(osb, stand_in, broker, SYNC_PLAN)
    binding_id = new_id()
    name = conventions.resource_name(binding_id)
    worker = stand_in.in_background("binding", name, lambda ns: stand_in.bound(ns, name, RESPONSE))
    created = osb.put(binding_url(instance_id, binding_id), json=bind_body(SYNC_PLAN))
    worker.join(5)
    assert (created.status_code, created.json()) == (201, RESPONSE)
    assert osb.put(binding_url(instance_id, binding_id), json=bind_body(SYNC_PLAN)).status_code == 200
    # Synchronous unbind: the finalizer goes, the answer is 200 {}.
    worker = stand_in.in_background(
        "binding",
        name,
        lambda ns: stand_in.release("binding", ns, name),
        until=lambda obj: bool(obj["metadata"].get("deletionTimestamp")),
    )
    stand_in.adopt("binding", broker.namespace, name)
    unbound = osb.delete(binding_url(instance_id, binding_id), params=unbind_params(SYNC_PLAN))
    worker.join(5)
    assert (unbound.status_code, unbound.json()) == (200, {})


def test_bind_refusals(broker: Harness, osb: httpx.Client, stand_in: StandInController) -> None:
    missing = osb.put(binding_url(new_id(), new_id()), params={"accepts_incomplete": "true"}, json=bind_body())
    assert (missing.status_code, missing.json()["error"]) == (400, "InstanceDoesNotExist")
    busy = new_id()
    osb.put(instance_url(busy), params={"accepts_incomplete": "true"}, json=provision_body())
    pending = osb.put(binding_url(busy, new_id()), params={"accepts_incomplete": "true"}, json=bind_body())
    assert (pending.status_code, pending.json()["error"]) == (422, "ConcurrencyError")
    instance_id = ready_instance(osb, stand_in, broker)
    wrong_role = osb.put(
        binding_url(instance_id, new_id()),
        params={"accepts_incomplete": "true"},
        json=bind_body(parameters={"role": "root"}),
    )
    assert wrong_role.status_code == 400 and "parameters.role" in wrong_role.json()["description"]
    empty = osb.delete(binding_url(instance_id, new_id()), params={"service_id": SERVICE, "plan_id": ""})
    assert empty.status_code == 400
    assert osb.delete(binding_url(instance_id, new_id()), params=unbind_params()).status_code == 410


def test_requires_app(broker: Harness, osb: httpx.Client, stand_in: StandInController) -> None:
    instance_id = ready_instance(osb, stand_in, broker, APP_PLAN)
    no_app = osb.put(binding_url(instance_id, new_id()), json={"service_id": OTHER_SERVICE, "plan_id": APP_PLAN})
    assert (no_app.status_code, no_app.json()["error"]) == (422, "RequiresApp")
    # Neither instances nor bindings of this service are retrievable.
    assert osb.get(instance_url(instance_id)).status_code == 400


def test_unbind_during_binding(broker: Harness, osb: httpx.Client, stand_in: StandInController) -> None:
    instance_id = ready_instance(osb, stand_in, broker)
    binding_id = new_id()
    name = conventions.resource_name(binding_id)
    url = binding_url(instance_id, binding_id)
    bind_op = osb.put(url, params={"accepts_incomplete": "true"}, json=bind_body()).json()["operation"]
    stand_in.adopt("binding", broker.namespace, name)
    accepted = osb.delete(url, params=unbind_params(accepts_incomplete="true"))
    assert accepted.status_code == 202
    assert osb.get(url + "/last_operation", params={"operation": bind_op}).json()["state"] == "failed"
    stand_in.release("binding", broker.namespace, name)
    wait_for(
        lambda: (
            osb.get(url + "/last_operation", params={"operation": accepted.json()["operation"]}).json()["state"]
            == "succeeded"
        )
    )


def test_credentials_never_reach_the_logs(
    broker: Harness,
    osb: httpx.Client,
    stand_in: StandInController,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    for name in ("opbroker", "uvicorn", "uvicorn.access", "uvicorn.error", "kubernetes", "urllib3", "httpx"):
        logging.getLogger(name).setLevel(logging.DEBUG)
    try:
        instance_id = ready_instance(osb, stand_in, broker, SYNC_PLAN)
        binding_id = new_id()
        name = conventions.resource_name(binding_id)
        worker = stand_in.in_background("binding", name, lambda ns: stand_in.bound(ns, name, RESPONSE))
        created = osb.put(binding_url(instance_id, binding_id), json=bind_body(SYNC_PLAN))
        worker.join(5)
        assert created.status_code == 201 and created.json()["credentials"]["password"] == PASSWORD
        assert osb.get(binding_url(instance_id, binding_id)).json() == RESPONSE  # fetched: still not logged
        assert osb.put(binding_url(instance_id, binding_id), json=bind_body(SYNC_PLAN)).status_code == 200
        # A failing request that carries a secret-looking parameter: the error names the field, not the value.
        bad = osb.put(
            binding_url(instance_id, new_id()),
            params={"accepts_incomplete": "true"},
            json=bind_body(ASYNC_PLAN, parameters={"role": PASSWORD}),
        )
        assert bad.status_code in (400, 422) and PASSWORD not in bad.text
    finally:
        for name in ("opbroker", "uvicorn", "uvicorn.access", "uvicorn.error", "kubernetes", "urllib3", "httpx"):
            logging.getLogger(name).setLevel(logging.NOTSET)
    captured = capfd.readouterr()
    assert caplog.records, "the log capture saw nothing: the test would prove nothing"
    assert any("bind" in record.getMessage() for record in caplog.records)
    for text in (caplog.text, captured.out, captured.err):
        assert PASSWORD not in text
        assert "pa55" not in text
