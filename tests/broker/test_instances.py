"""Service instances over real HTTP against a real API server, with the controller's stand-in.

Aspects: the async lifecycle polled through last_operation (and ``succeeded`` after the object is gone);
the sync lifecycle (201/200 after the broker waited; failure; timeout); DELETE during provisioning;
repeated and conflicting PUTs; updates (parameters, plan changes, maintenance info); every refusal
(400/409/410/422) leaving the cluster unchanged; fetch while provisioning/updating; the request's
namespace and lookups that do not carry it; the originating and request identities on the object.
"""

# ruff: noqa: F811  (test functions take the imported fixtures as arguments)

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest
from kubernetes import client

from opbroker.api import conventions
from tests.broker_support import (  # noqa: F401  (pytest fixtures)
    ASYNC_PLAN,
    FIXED_PLAN,
    GROUP,
    INSTANCES,
    SERVICE,
    STRICT_PLAN,
    SYNC_PLAN,
    VERSION,
    Harness,
    StandInController,
    broker,
    create_namespace,
    new_id,
    osb,
    provision_body,
    stand_in,
    wait_for,
)


def url(instance_id: str) -> str:
    return f"/v2/service_instances/{instance_id}"


def snapshot(harness: Harness) -> dict[str, str]:
    """name → resourceVersion of every instance and binding in the cluster (for "nothing changed").

    Namespaces being deleted are left out: earlier test modules delete theirs on the way out, and the
    namespace controller empties them while later tests run (a slow machine makes that overlap)."""
    custom = client.CustomObjectsApi(harness.api_client)
    leaving = {
        ns.metadata.name
        for ns in client.CoreV1Api(harness.api_client).list_namespace().items
        if ns.metadata.deletion_timestamp is not None
    }
    found = {}
    for plural in (INSTANCES, "sfservicebindings"):
        for item in custom.list_cluster_custom_object(GROUP, VERSION, plural)["items"]:
            if item["metadata"]["namespace"] not in leaving:
                found[f"{plural}/{item['metadata']['name']}"] = item["metadata"]["resourceVersion"]
    return found


def provision(osb: httpx.Client, instance_id: str, plan: str = ASYNC_PLAN, **extra: Any) -> httpx.Response:
    return osb.put(url(instance_id), params={"accepts_incomplete": "true"}, json=provision_body(plan, **extra))


def deprovision(osb: httpx.Client, instance_id: str, plan: str = ASYNC_PLAN, **params: str) -> httpx.Response:
    query = {"service_id": SERVICE, "plan_id": plan, "accepts_incomplete": "true", **params}
    return osb.delete(url(instance_id), params=query)


def poll(osb: httpx.Client, instance_id: str, operation: str | None = None) -> httpx.Response:
    return osb.get(url(instance_id) + "/last_operation", params={"operation": operation} if operation else None)


def test_async_lifecycle_polled_through_last_operation(
    broker: Harness, osb: httpx.Client, stand_in: StandInController
) -> None:
    instance_id = new_id()
    name = conventions.resource_name(instance_id)
    accepted = provision(osb, instance_id, parameters={"size": 2})
    assert accepted.status_code == 202, accepted.text
    assert accepted.headers["Retry-After"] == "1"
    operation = accepted.json()["operation"]

    stored = stand_in.get("instance", broker.namespace, name)
    assert stored is not None
    assert stored["spec"]["parameters"] == {"size": 2} and stored["spec"]["instanceId"] == instance_id
    assert stored["status"]["state"] == "in_queue"
    assert stored["status"]["lastOperation"]["type"] == "provision"
    assert stored["status"]["lastOperation"]["id"] == operation
    labels = stored["metadata"]["labels"]
    assert labels[conventions.LABEL_INSTANCE] == name and labels[conventions.LABEL_MANAGED_BY] == conventions.MANAGED_BY

    assert poll(osb, instance_id, operation).json() == {"state": "in progress"}
    stand_in.adopt("instance", broker.namespace, name)
    in_progress = poll(osb, instance_id, operation)
    assert in_progress.json()["state"] == "in progress" and in_progress.headers["Retry-After"] == "1"
    stand_in.succeed("instance", broker.namespace, name, dashboardUrl="https://dash/1")
    done = poll(osb, instance_id, operation)
    assert done.status_code == 200 and done.json()["state"] == "succeeded"
    assert "Retry-After" not in done.headers

    fetched = osb.get(url(instance_id))
    assert fetched.status_code == 200
    assert fetched.json() == {
        "service_id": SERVICE,
        "plan_id": ASYNC_PLAN,
        "dashboard_url": "https://dash/1",
        "parameters": {"size": 2},
    }

    gone = deprovision(osb, instance_id)
    assert gone.status_code == 202, gone.text
    delete_op = gone.json()["operation"]
    held = stand_in.get("instance", broker.namespace, name)
    assert held is not None and held["metadata"]["deletionTimestamp"] and held["status"]["state"] == "delete"
    assert poll(osb, instance_id, delete_op).json()["state"] == "in progress"
    assert deprovision(osb, instance_id).json() == {"operation": delete_op}  # repeat while pending: same operation
    stand_in.release("instance", broker.namespace, name)
    wait_for(lambda: stand_in.get("instance", broker.namespace, name) is None, what="the instance to go")

    # The object is gone; the token alone still says how the deprovision ended, on every call.
    for _ in range(2):
        after = poll(osb, instance_id, delete_op)
        assert after.status_code == 200 and after.json() == {"state": "succeeded"}
    assert poll(osb, instance_id).status_code == 410
    assert deprovision(osb, instance_id).status_code == 410
    assert osb.get(url(instance_id)).status_code == 404


def test_sync_plan_waits_for_the_controller(broker: Harness, osb: httpx.Client, stand_in: StandInController) -> None:
    instance_id = new_id()
    name = conventions.resource_name(instance_id)

    def controller(namespace: str) -> None:
        stand_in.adopt("instance", namespace, name)
        stand_in.succeed("instance", namespace, name, dashboardUrl="https://dash/sync")

    worker = stand_in.in_background("instance", name, controller)
    created = osb.put(url(instance_id), json=provision_body(SYNC_PLAN))
    worker.join(5)
    assert created.status_code == 201, created.text
    assert created.json() == {"dashboard_url": "https://dash/sync"}
    repeated = osb.put(url(instance_id), json=provision_body(SYNC_PLAN))
    assert repeated.status_code == 200 and repeated.json() == {"dashboard_url": "https://dash/sync"}

    # Synchronous update: the broker writes spec + state "update", the controller catches up.
    def update_controller(namespace: str) -> None:
        stand_in.succeed("instance", namespace, name)

    worker = stand_in.in_background(
        "instance", name, update_controller, until=lambda obj: obj["status"]["state"] == "update"
    )
    updated = osb.patch(url(instance_id), json={"service_id": SERVICE, "parameters": {"size": 9}})
    worker.join(5)
    assert updated.status_code == 200, updated.text
    stored = stand_in.get("instance", broker.namespace, name)
    assert stored is not None and stored["spec"]["parameters"] == {"size": 9}
    assert stored["spec"]["previousValues"]["plan_id"] == SYNC_PLAN

    # Synchronous deprovision: 200 once the finalizer is released.
    worker = stand_in.in_background(
        "instance",
        name,
        lambda namespace: stand_in.release("instance", namespace, name),
        until=lambda obj: bool(obj["metadata"].get("deletionTimestamp")),
    )
    deleted = osb.delete(url(instance_id), params={"service_id": SERVICE, "plan_id": SYNC_PLAN})
    worker.join(5)
    assert deleted.status_code == 200 and deleted.json() == {}


def test_sync_failure_and_timeout(broker: Harness, osb: httpx.Client, stand_in: StandInController) -> None:
    failing = new_id()
    name = conventions.resource_name(failing)
    worker = stand_in.in_background(
        "instance", name, lambda ns: stand_in.fail("instance", ns, name, "the operator rejected the spec")
    )
    failed = osb.put(url(failing), json=provision_body(SYNC_PLAN))
    worker.join(5)
    assert failed.status_code == 500
    assert failed.json() == {"error": "OperationFailed", "description": "the operator rejected the spec"}
    # Orphan mitigation: DELETE works on the failed, half-created instance (the controller's teardown
    # releases the finalizer the broker created it with).
    releaser = stand_in.in_background(
        "instance",
        name,
        lambda ns: stand_in.release("instance", ns, name),
        until=lambda obj: bool(obj["metadata"].get("deletionTimestamp")),
    )
    assert osb.delete(url(failing), params={"service_id": SERVICE, "plan_id": SYNC_PLAN}).status_code == 200
    releaser.join(5)

    slow = new_id()
    short = broker.settings.sync_timeout
    assert short <= 10
    started = httpx.Client(base_url=broker.url, auth=osb.auth, headers=osb.headers, timeout=60)
    with started:
        timed_out = started.put(url(slow), params={"accepts_incomplete": "true"}, json=provision_body(SYNC_PLAN))
    # The client accepts incomplete answers: the wait ends in 202 and polling takes over.
    assert timed_out.status_code == 202 and timed_out.json()["operation"]
    assert poll(osb, slow, timed_out.json()["operation"]).json()["state"] == "in progress"


def test_delete_during_provisioning_is_accepted(
    broker: Harness, osb: httpx.Client, stand_in: StandInController
) -> None:
    instance_id = new_id()
    name = conventions.resource_name(instance_id)
    provision_op = provision(osb, instance_id).json()["operation"]
    stand_in.adopt("instance", broker.namespace, name)

    accepted = deprovision(osb, instance_id)
    assert accepted.status_code == 202
    stored = stand_in.get("instance", broker.namespace, name)
    assert stored is not None and stored["status"]["state"] == "delete"
    assert stored["status"]["lastOperation"]["type"] == "deprovision"
    # The provision was halted: polling it says so, polling the deprovision follows the teardown.
    assert poll(osb, instance_id, provision_op).json()["state"] == "failed"
    assert poll(osb, instance_id, accepted.json()["operation"]).json()["state"] == "in progress"
    stand_in.release("instance", broker.namespace, name)
    wait_for(lambda: poll(osb, instance_id, accepted.json()["operation"]).json()["state"] == "succeeded")


def test_repeated_and_conflicting_puts(broker: Harness, osb: httpx.Client, stand_in: StandInController) -> None:
    instance_id = new_id()
    name = conventions.resource_name(instance_id)
    first = provision(osb, instance_id, parameters={"size": 1})
    again = provision(osb, instance_id, parameters={"size": 1})
    assert (again.status_code, again.json()) == (202, first.json())  # pending: same operation

    before = snapshot(broker)
    conflict = provision(osb, instance_id, parameters={"size": 2})
    assert conflict.status_code == 409
    assert conflict.json()["error"] == "Conflict" and "parameters" in conflict.json()["description"]
    assert provision(osb, instance_id, FIXED_PLAN).status_code == 409
    assert snapshot(broker) == before

    stand_in.succeed("instance", broker.namespace, name, dashboardUrl="https://d")
    done = provision(osb, instance_id, parameters={"size": 1})
    assert (done.status_code, done.json()) == (200, {"dashboard_url": "https://d"})


def test_refusals_change_nothing(broker: Harness, osb: httpx.Client, stand_in: StandInController) -> None:
    instance_id = new_id()
    name = conventions.resource_name(instance_id)
    provision(osb, instance_id)
    stand_in.succeed("instance", broker.namespace, name)
    before = snapshot(broker)
    body = provision_body()
    refusals = [
        # DELETE with an empty or missing service_id/plan_id: rejected, nothing deleted.
        (osb.delete(url(instance_id), params={"service_id": "", "plan_id": ASYNC_PLAN}), 400),
        (osb.delete(url(instance_id), params={"plan_id": ASYNC_PLAN}), 400),
        (osb.delete(url(instance_id), params={"service_id": SERVICE, "plan_id": ""}), 400),
        (osb.delete(url(instance_id), params={"service_id": SERVICE, "plan_id": ASYNC_PLAN}), 422),
        # Provision without mandatory fields.
        *[
            (osb.put(url(new_id()), params={"accepts_incomplete": "true"}, json={**body, field: value}), 400)
            for field in ("service_id", "plan_id", "organization_guid", "space_guid")
            for value in ("", None)
        ],
        (osb.put(url(new_id()), params={"accepts_incomplete": "true"}, json={**body, "plan_id": "nope"}), 400),
        (osb.put(url(new_id()), json=body), 422),
        (osb.put(url(new_id()), params={"accepts_incomplete": "true"}, content=b"{not json"), 400),
        (osb.put(url(new_id()), params={"accepts_incomplete": "maybe"}, json=body), 400),
        (osb.patch(url(new_id()), json={"service_id": SERVICE}), 400),
        (osb.patch(url(instance_id), json={"service_id": ""}), 400),
        (osb.patch(url(instance_id), json={"service_id": SERVICE, "parameters": {"size": 3}}), 422),
    ]
    for response, status in refusals:
        assert response.status_code == status, (response.request.method, response.request.url, response.text)
        assert "description" in response.json()
    assert snapshot(broker) == before


def test_parameter_schema_violation_names_the_field(osb: httpx.Client) -> None:
    wrong = provision(osb, new_id(), parameters={"size": "large"})
    assert wrong.status_code == 400
    assert "parameters.size: must be of type integer" in wrong.json()["description"]
    missing = provision(osb, new_id(), STRICT_PLAN, parameters={"size": 1})
    assert missing.status_code == 400
    assert "parameters.name: is required" in missing.json()["description"]


def test_async_required_and_maintenance_info(osb: httpx.Client) -> None:
    required = osb.put(url(new_id()), json=provision_body())
    assert (required.status_code, required.json()["error"]) == (422, "AsyncRequired")
    required = osb.put(url(new_id()), params={"accepts_incomplete": "false"}, json=provision_body())
    assert required.json()["error"] == "AsyncRequired"
    conflict = provision(osb, new_id(), FIXED_PLAN, maintenance_info={"version": "1.0.0"})
    assert (conflict.status_code, conflict.json()["error"]) == (422, "MaintenanceInfoConflict")
    assert provision(osb, new_id(), FIXED_PLAN, maintenance_info={"version": "1.2.0"}).status_code == 202


def test_updates(broker: Harness, osb: httpx.Client, stand_in: StandInController) -> None:
    instance_id = new_id()
    name = conventions.resource_name(instance_id)
    provision(osb, instance_id, parameters={"size": 1, "name": "a"})
    pending = osb.patch(url(instance_id), params={"accepts_incomplete": "true"}, json={"service_id": SERVICE})
    assert (pending.status_code, pending.json()["error"]) == (422, "ConcurrencyError")
    assert osb.get(url(instance_id)).status_code == 404  # still provisioning
    stand_in.succeed("instance", broker.namespace, name)

    change = {"service_id": SERVICE, "plan_id": FIXED_PLAN, "parameters": {"size": 4}, "unknown_field": 1}
    accepted = osb.patch(url(instance_id), params={"accepts_incomplete": "true"}, json=change)
    assert accepted.status_code == 202, accepted.text
    operation = accepted.json()["operation"]
    stored = stand_in.get("instance", broker.namespace, name)
    assert stored is not None
    assert stored["spec"]["planId"] == FIXED_PLAN and stored["spec"]["parameters"] == {"size": 4, "name": "a"}
    assert stored["status"]["state"] == "update" and stored["status"]["lastOperation"]["id"] == operation
    assert (
        osb.patch(url(instance_id), params={"accepts_incomplete": "true"}, json=change).json()["operation"] == operation
    )
    fetched = osb.get(url(instance_id))
    assert (fetched.status_code, fetched.json()["error"]) == (422, "ConcurrencyError")

    # A controller that has not yet observed the new generation cannot have finished the update.
    stand_in.status("instance", broker.namespace, name, state="succeeded", observedGeneration=1)
    assert poll(osb, instance_id, operation).json()["state"] == "in progress"
    stand_in.succeed("instance", broker.namespace, name)
    assert poll(osb, instance_id, operation).json()["state"] == "succeeded"
    assert osb.get(url(instance_id)).json()["plan_id"] == FIXED_PLAN

    # The fixed plan cannot be changed again; its maintenance info must match; no-op updates are 200.
    refused = osb.patch(
        url(instance_id), params={"accepts_incomplete": "true"}, json={"service_id": SERVICE, "plan_id": ASYNC_PLAN}
    )
    assert (refused.status_code, refused.json()["error"]) == (422, "PlanChangeNotSupported")
    stale = osb.patch(
        url(instance_id),
        params={"accepts_incomplete": "true"},
        json={"service_id": SERVICE, "maintenance_info": {"version": "0.1.0"}},
    )
    assert (stale.status_code, stale.json()["error"]) == (422, "MaintenanceInfoConflict")
    same = osb.patch(url(instance_id), json={"service_id": SERVICE, "parameters": {"size": 4}})
    assert (same.status_code, same.json()) == (200, {})


def written_after_the_updates_read(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, name: str, write: Any, rounds: int = 1
) -> list[str]:
    """Make ``write`` land between an update's read of the instance and its guarded write, in each of its first
    ``rounds`` rounds; the resourceVersion each of those reads saw is returned (one per round read)."""
    repository = harness.app.state.broker.repository
    find = repository.find
    seen: list[str] = []

    def found_then_written(kind: Any, found_name: str, **kwargs: Any) -> Any:
        record = find(kind, found_name, **kwargs)
        if found_name == name and record is not None:
            seen.append(record.resource_version)
            if len(seen) <= rounds:
                write()
        return record

    monkeypatch.setattr(repository, "find", found_then_written)
    return seen


def test_an_update_decides_again_when_the_instance_changed_after_its_read(
    broker: Harness, osb: httpx.Client, stand_in: StandInController, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The update's spec write is guarded by the version it decided on. A status write landing in between (the
    controller reporting the operator's live status) makes it decide again on a new read, not answer 422; an update
    landing in between is seen by that decision (422: an update in progress), and a writer that never stops runs
    the rounds out (422) — none of them writing the refused spec."""
    instance_id = new_id()
    name = conventions.resource_name(instance_id)
    provision(osb, instance_id, parameters={"size": 1})
    stand_in.succeed("instance", broker.namespace, name)

    def live_status() -> None:
        stand_in.status("instance", broker.namespace, name, dashboardUrl=f"https://dash/{new_id()}")

    seen = written_after_the_updates_read(broker, monkeypatch, name, live_status)
    change = {"service_id": SERVICE, "parameters": {"size": 2}}
    accepted = osb.patch(url(instance_id), params={"accepts_incomplete": "true"}, json=change)
    assert accepted.status_code == 202, accepted.text
    assert len(seen) == 2 and seen[0] != seen[1]  # decided twice, the second time on the status-written version
    stored = stand_in.get("instance", broker.namespace, name)
    assert stored is not None and stored["spec"]["parameters"] == {"size": 2}
    assert stored["status"]["state"] == "update" and stored["status"]["dashboardUrl"].startswith("https://dash/")
    stand_in.succeed("instance", broker.namespace, name)
    monkeypatch.undo()

    def another_update() -> None:
        assert (
            osb.patch(
                url(instance_id), params={"accepts_incomplete": "true"}, json=change | {"parameters": {"size": 3}}
            ).status_code
            == 202
        )

    written_after_the_updates_read(broker, monkeypatch, name, another_update)
    lost = osb.patch(url(instance_id), params={"accepts_incomplete": "true"}, json=change | {"parameters": {"size": 4}})
    assert (lost.status_code, lost.json()["error"]) == (422, "ConcurrencyError"), lost.text
    assert "update in progress" in lost.json()["description"]
    stored = stand_in.get("instance", broker.namespace, name)
    assert stored is not None and stored["spec"]["parameters"] == {"size": 3}
    stand_in.succeed("instance", broker.namespace, name)
    monkeypatch.undo()

    seen = written_after_the_updates_read(broker, monkeypatch, name, live_status, rounds=100)
    restless = osb.patch(
        url(instance_id), params={"accepts_incomplete": "true"}, json=change | {"parameters": {"size": 5}}
    )
    assert (restless.status_code, restless.json()["error"]) == (422, "ConcurrencyError"), restless.text
    assert "keeps changing" in restless.json()["description"] and len(seen) > 1
    stored = stand_in.get("instance", broker.namespace, name)
    assert stored is not None and stored["spec"]["parameters"] == {"size": 3}


def test_an_update_the_api_server_refuses_is_answered_at_once_not_taken_for_a_race(
    broker: Harness, osb: httpx.Client, stand_in: StandInController, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API server answers 422 both for the guard's failed test and for a patch it refuses (here the CRD's
    schema: a plan id that is not a string): a refusal is not a race — one write attempted, the client answered
    at once (not five rounds ending in "keeps changing"), the instance as it was."""
    instance_id = new_id()
    name = conventions.resource_name(instance_id)
    provision(osb, instance_id, parameters={"size": 1})
    stand_in.succeed("instance", broker.namespace, name)
    repository = broker.app.state.broker.repository
    patch = repository.guarded_patch
    attempts: list[str] = []

    def schema_breaking(record: Any, operations: list[dict[str, Any]]) -> Any:
        attempts.append(record.resource_version)
        return patch(record, [*operations, {"op": "replace", "path": "/spec/planId", "value": 12}])

    monkeypatch.setattr(repository, "guarded_patch", schema_breaking)
    before = stand_in.get("instance", broker.namespace, name)
    refused = osb.patch(
        url(instance_id), params={"accepts_incomplete": "true"}, json={"service_id": SERVICE, "parameters": {"size": 2}}
    )
    assert refused.status_code == 500 and refused.json()["error"] == "InternalError", refused.text
    assert "keeps changing" not in refused.text and len(attempts) == 1
    after = stand_in.get("instance", broker.namespace, name)
    assert before is not None and after is not None
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert after["spec"]["parameters"] == {"size": 1}


def test_context_namespace_and_lookups_without_it(
    broker: Harness, osb: httpx.Client, stand_in: StandInController, api_client: client.ApiClient
) -> None:
    team = create_namespace(api_client, "team")
    try:
        instance_id = "Not A DNS Name " + new_id()  # hashed to a valid name
        name = conventions.resource_name(instance_id)
        assert name != instance_id
        context = {"platform": "kubernetes", "namespace": team}
        accepted = provision(osb, instance_id, context=context)
        assert accepted.status_code == 202, accepted.text
        assert stand_in.get("instance", team, name) is not None
        assert stand_in.get("instance", broker.namespace, name) is None
        stand_in.succeed("instance", team, name)
        # Fetch, poll, update and DELETE do not carry the namespace: the broker finds the object anyway.
        assert osb.get(url(instance_id)).status_code == 200
        assert poll(osb, instance_id).json()["state"] == "succeeded"
        assert provision(osb, instance_id, context=context).status_code == 200
        elsewhere = provision(osb, instance_id, context={"platform": "kubernetes", "namespace": broker.namespace})
        assert elsewhere.status_code == 409
        bad = provision(osb, new_id(), context={"namespace": "Not_Valid"})
        assert bad.status_code == 400 and "context.namespace" in bad.json()["description"]
        missing_ns = provision(osb, new_id(), context={"namespace": "no-such-namespace-x1"})
        assert missing_ns.status_code == 400 and "namespace does not exist" in missing_ns.json()["description"]
        assert deprovision(osb, instance_id).status_code == 202
        stand_in.release("instance", team, name)
        wait_for(lambda: stand_in.get("instance", team, name) is None, what="the instance to go")
    finally:
        client.CoreV1Api(api_client).delete_namespace(team)


def _identity(value: dict[str, Any]) -> str:
    return "kubernetes " + base64.b64encode(json.dumps(value).encode()).decode()


def test_identities_are_recorded_and_echoed(broker: Harness, osb: httpx.Client, stand_in: StandInController) -> None:
    instance_id = new_id()
    name = conventions.resource_name(instance_id)
    who = {"username": "ann", "groups": ["dev"]}
    response = osb.put(
        url(instance_id),
        params={"accepts_incomplete": "true"},
        json=provision_body(),
        headers={"X-Broker-API-Originating-Identity": _identity(who), "X-Broker-API-Request-Identity": "req-42"},
    )
    assert response.status_code == 202
    assert response.headers["X-Broker-API-Request-Identity"] == "req-42"
    stored = stand_in.get("instance", broker.namespace, name)
    assert stored is not None
    annotations = stored["metadata"]["annotations"]
    assert json.loads(annotations[conventions.ANNOTATION_ORIGINATING_IDENTITY]) == {
        "platform": "kubernetes",
        "value": who,
    }
    assert annotations[conventions.ANNOTATION_REQUEST_IDENTITY] == "req-42"

    stand_in.succeed("instance", broker.namespace, name)
    bob = {"username": "bob"}
    osb.patch(
        url(instance_id),
        params={"accepts_incomplete": "true"},
        json={"service_id": SERVICE, "parameters": {"size": 7}},
        headers={"X-Broker-API-Originating-Identity": _identity(bob), "X-Broker-API-Request-Identity": "req-43"},
    )
    stored = stand_in.get("instance", broker.namespace, name)
    assert stored is not None
    assert json.loads(stored["metadata"]["annotations"][conventions.ANNOTATION_ORIGINATING_IDENTITY])["value"] == bob

    malformed = osb.put(
        url(new_id()),
        params={"accepts_incomplete": "true"},
        json=provision_body(),
        headers={"X-Broker-API-Originating-Identity": "kubernetes not-base64!", "X-Broker-API-Request-Identity": "r"},
    )
    assert malformed.status_code == 400 and "Originating-Identity" in malformed.json()["description"]
    assert malformed.headers["X-Broker-API-Request-Identity"] == "r"  # echoed on errors too


@pytest.mark.parametrize("version", ["2.12", "2.14", "2.17"])
def test_supported_versions_are_served(broker: Harness, version: str) -> None:
    with broker.client(version=version) as http:
        assert http.get("/v2/catalog").status_code == 200


def test_a_repeat_the_index_has_not_seen_yet_is_still_recognised(
    broker: Harness, osb: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A provision of a name the broker's index has never seen skips the lookup and creates at once; when
    the index merely lags (the object exists), the API server's AlreadyExists sends the broker back to
    look, and the answers are those of a repeat: nothing duplicated, nothing overwritten."""
    from opbroker.broker.locating import NamespaceIndex

    instance_id = new_id()
    assert provision(osb, instance_id).status_code == 202
    before = snapshot(broker)
    monkeypatch.setattr(NamespaceIndex, "get", lambda self, kind, name: None)  # the index lags behind
    again = provision(osb, instance_id)
    assert again.status_code == 202, again.text
    different = provision(osb, instance_id, plan=SYNC_PLAN)
    assert different.status_code == 409, different.text
    assert snapshot(broker) == before
