"""What real OSB clients send, over HTTP against the real broker (controller's stand-in).

Clients generated from the OSB OpenAPI document send unset structs as ``{}`` and unset strings as ``""``;
older platforms send newer fields they do not understand; some platforms poll ``last_operation`` with a
value of their own instead of the broker's token; nothing stops a client from sending a 10 MB body. Each
test here failed on the broker before it learnt to take these (issue 14); the refusals that stay are
asserted to stay.
"""

# ruff: noqa: F811  (test functions take the imported fixtures as arguments)

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx

from opbroker.api.conventions import resource_name
from tests.broker.test_bindings import bind_body, binding_url, instance_url, ready_instance
from tests.broker.test_instances import snapshot
from tests.broker_support import (  # noqa: F401  (pytest fixtures)
    ASYNC_PLAN,
    FIXED_PLAN,
    SERVICE,
    Harness,
    StandInController,
    broker,
    new_id,
    osb,
    provision_body,
    stand_in,
)

ASYNC = {"accepts_incomplete": "true"}
#: How a generated client serialises a provision request whose optional parts were left unset.
GENERATED_PROVISION_EXTRAS: dict[str, Any] = {"maintenance_info": {}, "context": {}, "parameters": {}}


def test_unset_structs_sent_empty_read_as_absent(
    broker: Harness, osb: httpx.Client, stand_in: StandInController
) -> None:
    instance_id = new_id()
    first = osb.put(instance_url(instance_id), params=ASYNC, json=provision_body(**GENERATED_PROVISION_EXTRAS))
    assert first.status_code == 202, first.text
    # The same request again (generated clients retry): identical, so the same operation.
    again = osb.put(instance_url(instance_id), params=ASYNC, json=provision_body(**GENERATED_PROVISION_EXTRAS))
    assert (again.status_code, again.json()["operation"]) == (202, first.json()["operation"])
    # A struct with empty strings (a Go client without omitempty) is unset too.
    blank = osb.put(
        instance_url(new_id()), params=ASYNC, json=provision_body(maintenance_info={"version": "", "description": ""})
    )
    assert blank.status_code == 202, blank.text
    stand_in.succeed("instance", broker.namespace, resource_name(instance_id))

    update = {
        "service_id": SERVICE,
        "plan_id": "",
        "context": {},
        "parameters": {"size": 2},
        "maintenance_info": {},
        "previous_values": {"maintenance_info": {}, "plan_id": ASYNC_PLAN},
    }
    updated = osb.patch(instance_url(instance_id), params=ASYNC, json=update)
    assert updated.status_code == 202, updated.text
    recorded = stand_in.get("instance", broker.namespace, resource_name(instance_id))
    assert recorded is not None
    assert recorded["spec"]["planId"] == ASYNC_PLAN and recorded["spec"]["parameters"] == {"size": 2}
    assert not recorded["spec"].get("maintenance_info")
    stand_in.succeed("instance", broker.namespace, resource_name(instance_id))

    bound = osb.put(
        binding_url(instance_id, new_id()),
        params=ASYNC,
        json={**bind_body(), "app_guid": "", "bind_resource": {}, "context": {}, "parameters": {}},
    )
    assert bound.status_code == 202, bound.text
    # An empty previous_values is fine too.
    assert osb.patch(instance_url(instance_id), params=ASYNC, json={"service_id": SERVICE, "previous_values": {}})


def test_real_maintenance_info_is_still_checked(broker: Harness, osb: httpx.Client) -> None:
    before = snapshot(broker)
    conflict = osb.put(
        instance_url(new_id()), params=ASYNC, json=provision_body(FIXED_PLAN, maintenance_info={"version": "1.0.0"})
    )
    assert (conflict.status_code, conflict.json()["error"]) == (422, "MaintenanceInfoConflict")
    wrong_type = osb.put(
        instance_url(new_id()), params=ASYNC, json=provision_body(FIXED_PLAN, maintenance_info={"version": 3})
    )
    assert wrong_type.status_code == 400 and "maintenance_info.version" in wrong_type.json()["description"]
    assert snapshot(broker) == before
    current = osb.put(
        instance_url(new_id()), params=ASYNC, json=provision_body(FIXED_PLAN, maintenance_info={"version": "1.2.0"})
    )
    assert current.status_code == 202


def test_an_older_api_version_ignores_fields_it_does_not_define(broker: Harness, stand_in: StandInController) -> None:
    """maintenance_info is a 2.15 field: a 2.14 request carrying it has it ignored, like any unknown field."""
    newer_field = {"maintenance_info": {"version": "9.9.9"}}  # the plan has none: 422 in 2.15+
    with broker.client(version="2.14") as old_platform:
        instance_id = new_id()
        accepted = old_platform.put(instance_url(instance_id), params=ASYNC, json=provision_body(**newer_field))
        assert accepted.status_code == 202, accepted.text
        recorded = stand_in.get("instance", broker.namespace, resource_name(instance_id))
        assert recorded is not None and not recorded["spec"].get("maintenance_info")
        stand_in.succeed("instance", broker.namespace, resource_name(instance_id))
        update = {"service_id": SERVICE, **newer_field, "previous_values": newer_field}
        assert old_platform.patch(instance_url(instance_id), params=ASYNC, json=update).status_code == 200
    with broker.client(version="2.17") as new_platform:
        refused = new_platform.put(instance_url(new_id()), params=ASYNC, json=provision_body(**newer_field))
        assert (refused.status_code, refused.json()["error"]) == (422, "MaintenanceInfoConflict")


def test_last_operation_with_a_value_the_broker_never_issued(
    broker: Harness, osb: httpx.Client, stand_in: StandInController
) -> None:
    instance_id = new_id()
    accepted = osb.put(instance_url(instance_id), params=ASYNC, json=provision_body())
    assert accepted.status_code == 202
    last = instance_url(instance_id) + "/last_operation"
    for value in ("provision", "task_10", "", "op1.!!!"):
        polled = osb.get(last, params={"operation": value})
        assert (polled.status_code, polled.json()["state"]) == (200, "in progress"), value
    # A token of this broker for another instance says nothing about this one: this one's state.
    other = osb.put(instance_url(new_id()), params=ASYNC, json=provision_body()).json()["operation"]
    stand_in.succeed("instance", broker.namespace, resource_name(instance_id))
    for value in ("provision", other):
        polled = osb.get(last, params={"operation": value})
        assert (polled.status_code, polled.json()["state"]) == (200, "succeeded"), value

    binding_id = new_id()
    assert osb.put(binding_url(instance_id, binding_id), params=ASYNC, json=bind_body()).status_code == 202
    binding_last = binding_url(instance_id, binding_id) + "/last_operation"
    for value in ("bind", other):
        polled = osb.get(binding_last, params={"operation": value})
        assert (polled.status_code, polled.json()["state"]) == (200, "in progress"), value
    # Never issued, and nothing there: as without a value.
    assert osb.get(instance_url(new_id()) + "/last_operation", params={"operation": "provision"}).status_code == 410


def chunks(total: int, size: int = 64 * 1024) -> Iterator[bytes]:
    """A JSON body of ``total`` bytes sent without Content-Length (chunked)."""
    head = b'{"service_id":"' + SERVICE.encode() + b'","pad":"'
    yield head
    remaining = total - len(head) - 2
    while remaining > 0:
        step = min(size, remaining)
        yield b"x" * step
        remaining -= step
    yield b'"}'


def test_bodies_above_the_limit_are_refused_before_parsing(broker: Harness, osb: httpx.Client) -> None:
    limit = broker.settings.max_body_bytes
    before = snapshot(broker)
    huge = json.dumps({**provision_body(), "parameters": {"blob": "x" * (10 * 1024 * 1024)}})
    refused = osb.put(instance_url(new_id()), params=ASYNC, content=huge, headers={"Content-Type": "application/json"})
    assert refused.status_code == 413
    assert refused.json()["error"] == "TooLarge" and str(limit) in refused.json()["description"]
    streamed = osb.put(instance_url(new_id()), params=ASYNC, content=chunks(limit + 1))
    assert streamed.status_code == 413, streamed.text
    for method, path in (
        ("PATCH", instance_url(new_id())),
        ("PUT", binding_url(new_id(), new_id())),
        ("GET", "/v2/catalog"),
        ("DELETE", instance_url(new_id())),
    ):
        assert osb.request(method, path, content=huge).status_code == 413, (method, path)
    assert snapshot(broker) == before
    # Credentials are checked before the body is looked at.
    with broker.client(auth=("platform", "wrong")) as stranger:
        assert stranger.put(instance_url(new_id()), params=ASYNC, content=huge).status_code == 401
    # Just under the limit, the body is parsed as always (here: refused by the parameter schema).
    padded = {**provision_body(), "parameters": {"size": "one", "name": "x" * (limit - 400)}}
    under = osb.put(instance_url(new_id()), params=ASYNC, json=padded)
    assert under.status_code == 400 and "parameters.size" in under.json()["description"], under.text[:300]
    streamed_small = osb.put(
        instance_url(new_id()), params=ASYNC, content=iter([json.dumps(provision_body()).encode()])
    )
    assert streamed_small.status_code == 202, streamed_small.text


def test_update_and_bind_of_an_unknown_instance_are_400(
    broker: Harness, osb: httpx.Client, stand_in: StandInController
) -> None:
    """OSB 2.17 lists no 404 for PATCH of an instance or PUT of a binding: it is invalid data (400)."""
    before = snapshot(broker)
    patched = osb.patch(instance_url(new_id()), params=ASYNC, json={"service_id": SERVICE})
    bound = osb.put(binding_url(new_id(), new_id()), params=ASYNC, json=bind_body())
    for response in (patched, bound):
        assert (response.status_code, response.json()["error"]) == (400, "InstanceDoesNotExist"), response.text
    assert snapshot(broker) == before
    # A known instance still binds.
    instance_id = ready_instance(osb, stand_in, broker)
    assert osb.put(binding_url(instance_id, new_id()), params=ASYNC, json=bind_body()).status_code == 202


def test_a_long_query_string_is_answered_not_reset(broker: Harness) -> None:
    """The fuzzer once sent a 120 KB ``operation`` value to last_operation and, under load, saw the connection
    reset: the request head was refused and the connection closed with the client's bytes unread. Heads are
    bounded (16 KiB, :mod:`opbroker.broker.connections`), so the query a platform may send — an operation
    token of OSB's maximum, 10 000 characters — must fit, and one character more gets the broker's own 400,
    not the parser's refusal. (http.client, not httpx: the test controls every byte.)"""
    import base64
    import http.client
    import urllib.parse

    from tests.broker_support import PASSWORD, USERNAME

    address = urllib.parse.urlsplit(broker.url)
    credentials = base64.b64encode(f"{USERNAME}:{PASSWORD}".encode()).decode()
    headers = {"Authorization": f"Basic {credentials}", "X-Broker-API-Version": "2.17"}
    for length, status in ((10_000, 410), (10_001, 400)):
        query = urllib.parse.urlencode({"operation": "t" * length})
        assert len(query) < broker.settings.max_request_head_bytes - 1024
        for _ in range(10):
            connection = http.client.HTTPConnection(address.hostname, address.port, timeout=30)
            try:
                connection.request("GET", f"{instance_url(new_id())}/last_operation?{query}", headers=headers)
                answer = connection.getresponse()
                body = answer.read()
                # The broker's own answer (JSON: Gone's empty object, an OSB error), not the parser's bare
                # refusal or a reset.
                assert answer.status == status, body[:200]
                answered = json.loads(body)
                if status == 400:
                    assert answered["error"] == "BadRequest" and "query.operation" in answered["description"]
            finally:
                connection.close()
