"""Day two (issue 43), through the real controller on the real control plane: a provisioned instance stays as
declared, and what its operator says of it now is shown.

The session's controller serves the demo catalog; the demo operator plays the operator (its Database's
``status.phase``, which the plan's status template reads). Where a test plays the operator itself (a failure, a
recovery), it writes the Database's status the way the operator would. Every reaction comes from a watch: the
session controller's resync is the default 10 minutes, far beyond these tests' timeouts.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from opbroker.api.conventions import ANNOTATION_OWNER_UID, ANNOTATION_PAUSED, PAUSED
from tests.controller.test_lifecycle import (
    DB,
    GROUP,
    PLAN_ID,
    SERVICE_ID,
    VERSION,
    bind,
    custom,
    get,
    gone,
    provision,
    wait_state,
)
from tests.controller.test_template_types_end_to_end import finished, provision_body
from tests.controller_idle import progress, wait_handled
from tests.controller_support import DEMO, wait_for

pytestmark = pytest.mark.usefixtures("controller")

INSTANCES = "sfserviceinstances"
#: The demo plan copied with ``drift: report`` and ``deletionPolicy: orphan`` on its provision template.
KEEPING_PLAN_ID = "5d1f0e0a-43b0-4c1a-8f7e-2a9d3c6b1e07"


def database(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    return get(api, namespace, DB[2], name, *DB[:2])


def patch_database(api: client.ApiClient, namespace: str, name: str, patch: dict[str, Any], manager: str) -> None:
    custom(api).patch_namespaced_custom_object(*DB[:2], namespace, DB[2], name, patch, field_manager=manager)


def report_phase(api: client.ApiClient, namespace: str, name: str, phase: str, message: str) -> None:
    """Write the Database's status as its operator would."""
    body = {"status": {"phase": phase, "message": message}}
    custom(api).patch_namespaced_custom_object_status(*DB[:2], namespace, DB[2], name, body)


def condition(instance: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    conditions = ((instance or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == type_), None)


def instance(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    return get(api, namespace, INSTANCES, name)


def events(api: client.ApiClient, namespace: str, name: str, reason: str) -> list[client.CoreV1Event]:
    found = client.CoreV1Api(api).list_namespaced_event(namespace).items
    return [e for e in found if e.reason == reason and e.involved_object.name == name]


def said(api: client.ApiClient, namespace: str, name: str, reason: str) -> int:
    """How many times an Event of ``reason`` was recorded on ``name``: a repeated one is one Event with a count."""
    return sum(e.count or 1 for e in events(api, namespace, name, reason))


def provisioned(api: client.ApiClient, namespace: str, name: str, **kwargs: Any) -> dict[str, Any]:
    provision(api, namespace, name, **kwargs)
    found = wait_state(api, namespace, INSTANCES, name, "succeeded")
    wait_for(lambda: (database(api, namespace, name) or {}).get("status", {}).get("phase") == "Running", 30, "Running")
    return found


def test_a_deleted_operator_resource_is_created_again_with_an_event_and_ready_back(
    api_client: client.ApiClient, namespace: str
) -> None:
    before = provisioned(api_client, namespace, "drift-deleted")
    old_uid = database(api_client, namespace, "drift-deleted")["metadata"]["uid"]  # type: ignore[index]
    custom(api_client).delete_namespaced_custom_object(*DB[:2], namespace, DB[2], "drift-deleted")

    def back() -> bool:
        found = database(api_client, namespace, "drift-deleted")
        return found is not None and found["metadata"]["uid"] != old_uid

    wait_for(back, 30, "the Database to be created again")
    again = database(api_client, namespace, "drift-deleted")
    assert again is not None and again["metadata"]["annotations"][ANNOTATION_OWNER_UID] == before["metadata"]["uid"]
    assert again["spec"]["version"] == "16"
    corrected = events(api_client, namespace, "drift-deleted", "DriftCorrected")
    assert corrected and "was deleted: created again" in corrected[0].message
    # The operator brings it up again; Ready follows it, and the OSB history is untouched.
    wait_for(
        lambda: (
            (condition(instance(api_client, namespace, "drift-deleted"), "Ready") or {}).get("status") == "True"
            and (database(api_client, namespace, "drift-deleted") or {}).get("status", {}).get("phase") == "Running"
        ),
        30,
        "Ready again",
    )
    after = instance(api_client, namespace, "drift-deleted")
    assert after is not None and after["status"]["state"] == "succeeded"
    assert after["status"].get("lastOperation") == before["status"].get("lastOperation")


def test_a_field_the_template_sets_is_set_back_and_one_it_never_set_is_left(
    api_client: client.ApiClient, namespace: str
) -> None:
    provisioned(api_client, namespace, "drift-field")
    patch = {"metadata": {"labels": {"team": "blue"}}, "spec": {"version": "14"}}
    patch_database(api_client, namespace, "drift-field", patch, "kubectl-edit")
    wait_for(
        lambda: (database(api_client, namespace, "drift-field") or {}).get("spec", {}).get("version") == "16",
        30,
        "spec.version set back",
    )
    found = database(api_client, namespace, "drift-field")
    assert found is not None and found["metadata"]["labels"]["team"] == "blue"  # never opbroker's: left
    (corrected,) = events(api_client, namespace, "drift-field", "DriftCorrected")
    assert "fields spec.version: set back" in corrected.message
    said = corrected.message.replace(namespace, "<namespace>")  # a random namespace name may hold "14" or "16"
    assert "14" not in said and "16" not in said  # fields named, values never


def test_an_operator_failure_shows_in_ready_with_its_words_and_recovers(
    api_client: client.ApiClient, namespace: str, controller_metrics_port: int
) -> None:
    provisioned(api_client, namespace, "live-status")
    report_phase(api_client, namespace, "live-status", "Failed", "disk full on node-3")

    def ready_is(status: str, reason: str) -> bool:
        found = condition(instance(api_client, namespace, "live-status"), "Ready") or {}
        return found.get("status") == status and found.get("reason") == reason

    wait_for(lambda: ready_is("False", "OperatorFailed"), 30, "Ready=False OperatorFailed")
    seen = instance(api_client, namespace, "live-status")
    assert condition(seen, "Ready")["message"] == "disk full on node-3"  # type: ignore[index]
    assert seen is not None and seen["status"]["state"] == "succeeded"  # the last operation did succeed
    (warning,) = events(api_client, namespace, "live-status", "OperatorFailed")
    assert warning.type == "Warning" and warning.message == "disk full on node-3"
    assert health_count(controller_metrics_port, "unready") >= 1

    report_phase(api_client, namespace, "live-status", "Running", "ready")
    wait_for(lambda: ready_is("True", "OperatorReady"), 30, "Ready=True again")
    # The Event is posted after the status write that flips the condition: it may lag the condition by a moment.
    wait_for(lambda: events(api_client, namespace, "live-status", "OperatorReady"), 10, "the OperatorReady Event")


def health_count(port: int, health: str) -> float:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    prefix = f'opbroker_instance_health{{health="{health}"}} '
    return next((float(line[len(prefix) :]) for line in text.splitlines() if line.startswith(prefix)), 0.0)


def test_a_flapping_operator_writes_a_bounded_number_of_live_status_changes(
    api_client: client.ApiClient, namespace: str
) -> None:
    """Twenty flaps in about four seconds: at most one live-status change per 10 s (the session controller's
    default), so one or two writes, not twenty; the last verdict is shown once the flapping stops."""
    provisioned(api_client, namespace, "flappy")
    started = time.monotonic()
    for i in range(20):
        report_phase(api_client, namespace, "flappy", "Failed" if i % 2 == 0 else "Running", f"flap {i}")
        time.sleep(0.2)
    flapped = time.monotonic() - started
    report_phase(api_client, namespace, "flappy", "Failed", "down for good")
    wait_for(
        lambda: (condition(instance(api_client, namespace, "flappy"), "Ready") or {}).get("message") == "down for good",
        30,
        "the last verdict shown",
    )
    written = said(api_client, namespace, "flappy", "OperatorFailed") + said(
        api_client, namespace, "flappy", "OperatorReady"
    )
    elapsed = time.monotonic() - started
    assert written <= 1 + int(elapsed // 10) + 1, (written, flapped, elapsed)


def test_paused_nothing_changes_until_resumed(
    api_client: client.ApiClient, namespace: str, controller_metrics_port: int
) -> None:
    provisioned(api_client, namespace, "paused")
    annotate = {"metadata": {"annotations": {ANNOTATION_PAUSED: PAUSED}}}
    custom(api_client).patch_namespaced_custom_object(GROUP, VERSION, namespace, INSTANCES, "paused", annotate)
    wait_for(
        lambda: (condition(instance(api_client, namespace, "paused"), "Paused") or {}).get("status") == "True",
        30,
        "Paused=True",
    )
    before = progress(controller_metrics_port)
    custom(api_client).delete_namespaced_custom_object(*DB[:2], namespace, DB[2], "paused")
    wait_for(lambda: database(api_client, namespace, "paused") is None, 30, "the Database gone")
    # The deletion enqueues the instance: once an instance was reconciled since and nothing is due, it was looked at.
    wait_handled(controller_metrics_port, before, "instance", 30, "the paused instance reconciled after the deletion")
    assert database(api_client, namespace, "paused") is None
    assert not events(api_client, namespace, "paused", "DriftCorrected")

    resume = {"metadata": {"annotations": {ANNOTATION_PAUSED: None}}}
    custom(api_client).patch_namespaced_custom_object(GROUP, VERSION, namespace, INSTANCES, "paused", resume)
    wait_for(lambda: database(api_client, namespace, "paused") is not None, 30, "the Database back once resumed")
    resumed = condition(instance(api_client, namespace, "paused"), "Paused")
    assert resumed is not None and (resumed["status"], resumed["reason"]) == ("False", "Resumed")


@pytest.fixture(scope="module")
def keeping_plan(api_client: client.ApiClient, catalog_namespace: str) -> Iterator[str]:
    """The demo plan with ``drift: report`` and ``deletionPolicy: orphan`` on its provision template."""
    docs = list(yaml.safe_load_all((DEMO / "catalog.yaml").read_text()))
    plan = copy.deepcopy(next(d for d in docs if d["kind"] == "SFPlan"))
    plan["metadata"] = {"name": "demo-db-keeping", "labels": {"serviceId": SERVICE_ID}}
    plan["spec"].update(id=KEEPING_PLAN_ID, name="keeping")
    for template in plan["spec"]["templates"]:
        if template["action"] == "provision":
            template.update(drift="report", deletionPolicy="orphan")
        if template["action"] == "status":  # an orphan stays: the deprovision has nothing to wait for
            deprovision = '  state: {{ "in progress" if database else "succeeded" }}'
            assert deprovision in template["content"]
            template["content"] = template["content"].replace(deprovision, "  state: succeeded")
    custom(api_client).create_namespaced_custom_object(GROUP, VERSION, catalog_namespace, "sfplans", plan)
    yield KEEPING_PLAN_ID
    try:
        custom(api_client).delete_namespaced_custom_object(
            GROUP, VERSION, catalog_namespace, "sfplans", "demo-db-keeping"
        )
    except ApiException as exc:
        if exc.status != 404:
            raise


def test_drift_report_says_so_and_orphan_survives_deprovision_without_the_stamp(
    api_client: client.ApiClient, namespace: str, keeping_plan: str
) -> None:
    def ready_plan() -> bool:
        try:
            provision(api_client, namespace, "kept", plan_id=keeping_plan)
        except ApiException:
            return False
        return True

    wait_for(ready_plan, 30, "the keeping plan to be served")
    wait_state(api_client, namespace, INSTANCES, "kept", "succeeded")
    patch_database(api_client, namespace, "kept", {"spec": {"version": "14"}}, "kubectl-edit")
    wait_for(
        lambda: (condition(instance(api_client, namespace, "kept"), "Synced") or {}).get("reason") == "DriftDetected",
        30,
        "Synced=False DriftDetected",
    )
    synced = condition(instance(api_client, namespace, "kept"), "Synced")
    assert synced is not None and synced["status"] == "False" and "spec.version" in synced["message"]
    assert (database(api_client, namespace, "kept") or {})["spec"]["version"] == "14"  # reported, not set back
    assert events(api_client, namespace, "kept", "DriftDetected")

    custom(api_client).delete_namespaced_custom_object(GROUP, VERSION, namespace, INSTANCES, "kept")
    wait_for(lambda: gone(api_client, namespace, INSTANCES, "kept"), 30, "deprovisioned")
    left = database(api_client, namespace, "kept")
    assert left is not None, "an orphan survives its instance"
    meta = left["metadata"]
    assert ANNOTATION_OWNER_UID not in (meta.get("annotations") or {}) and not meta.get("ownerReferences")
    assert not any(k.startswith("opbroker.io/") for k in meta.get("labels") or {})
    custom(api_client).delete_namespaced_custom_object(*DB[:2], namespace, DB[2], "kept")


class Rival:
    """Another writer of a Database's ``spec.version``: sets it to 14 whenever it reads otherwise, every 0.3 s, in a
    thread of its own from creation until :meth:`stop`; counts its writes."""

    def __init__(self, read: Callable[[], dict[str, Any] | None], write: Callable[[str], None]) -> None:
        self.writes = 0
        self._read, self._write = read, write
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            found = self._read()
            if found is not None and found["spec"].get("version") != "14":
                self._write("14")
                self.writes += 1
            self._stop.wait(0.3)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def test_two_writers_fighting_over_a_field_end_in_synced_false_naming_the_other(
    api_client: client.ApiClient, namespace: str, controller_metrics_port: int
) -> None:
    """A rival controller sets spec.version to 14 whenever it is not: opbroker sets it back a few times (with
    backoff), then stops and names the rival. Its corrections are counted: bounded, not a hot loop."""
    provisioned(api_client, namespace, "fought")

    def rival(version: str) -> None:
        patch_database(api_client, namespace, "fought", {"spec": {"version": version}}, "rival-operator")

    writer = Rival(lambda: database(api_client, namespace, "fought"), rival)
    try:
        wait_for(
            lambda: (
                (condition(instance(api_client, namespace, "fought"), "Synced") or {}).get("reason") == "DriftFight"
            ),
            60,
            "Synced=False DriftFight",
        )
        synced = condition(instance(api_client, namespace, "fought"), "Synced")
        assert synced is not None and synced["status"] == "False"
        assert "'rival-operator'" in synced["message"] and "spec.version" in synced["message"]
        corrections = said(api_client, namespace, "fought", "DriftCorrected")
        # The fight's window is minutes: nothing is due on a timer. Make the controller look again instead (the
        # rival touches the Database) and, once it has, see that it did not set the field back.
        before = progress(controller_metrics_port)
        touch = {"metadata": {"annotations": {"rival.example/touched": "yes"}}}
        patch_database(api_client, namespace, "fought", touch, "rival-operator")
        wait_handled(controller_metrics_port, before, "instance", 30, "the fought instance looked at again")
        assert said(api_client, namespace, "fought", "DriftCorrected") == corrections
        assert (database(api_client, namespace, "fought") or {})["spec"]["version"] == "14"
    finally:
        writer.stop()
    assert corrections <= 3 and writer.writes <= corrections + 1, (corrections, writer.writes)


def test_a_platform_fetching_the_instance_over_osb_sees_what_its_operator_says_now(
    osb: httpx.Client, api_client: client.ApiClient, namespace: str
) -> None:
    """OSB v2.17's GET instance: the live Ready is shown in ``metadata.attributes``; the answer stays 200 (the
    provision did succeed) and the last operation keeps saying so."""
    path = "/v2/service_instances/osb-live"
    accepted = osb.put(
        path, params={"accepts_incomplete": "true"}, json=provision_body(SERVICE_ID, PLAN_ID, namespace, {})
    )
    assert finished(osb, path, accepted) == "succeeded"
    wait_for(
        lambda: (database(api_client, namespace, "osb-live") or {}).get("status", {}).get("phase") == "Running",
        30,
        "Running",
    )
    report_phase(api_client, namespace, "osb-live", "Failed", "replica lost")

    def shown() -> dict[str, Any] | None:
        answer = osb.get(path)
        assert answer.status_code == 200, answer.text
        attributes: dict[str, Any] = (answer.json().get("metadata") or {}).get("attributes") or {}
        return attributes if attributes.get("ready") == "false" else None

    attributes = wait_for(shown, 30, "the live status over OSB")
    assert attributes == {"ready": "false", "reason": "OperatorFailed", "message": "replica lost"}
    last = osb.get(f"{path}/last_operation", params={"operation": accepted.json().get("operation", "")})
    assert last.status_code == 200 and last.json()["state"] == "succeeded"


def test_a_bindings_part_of_its_instances_object_is_set_back(api_client: client.ApiClient, namespace: str) -> None:
    """The demo plan's bind adds the binding's user to its instance's Database (under the binding's own field
    manager). Someone removes that user: the binding sets it back (an Event on the binding), its credentials follow."""
    provisioned(api_client, namespace, "bound-db")
    bind(api_client, namespace, "bound-b", "bound-db")
    wait_state(api_client, namespace, "sfservicebindings", "bound-b", "succeeded")
    users = (database(api_client, namespace, "bound-db") or {})["spec"]["users"]
    (user,) = [name for name in users if name != "main"]
    patch_database(api_client, namespace, "bound-db", {"spec": {"users": {user: None}}}, "kubectl-edit")
    wait_for(
        lambda: user in ((database(api_client, namespace, "bound-db") or {}).get("spec", {}).get("users") or {}),
        30,
        "the binding's user set back",
    )
    (corrected,) = events(api_client, namespace, "bound-b", "DriftCorrected")
    assert f"spec.users.{user}" in corrected.message
    found = database(api_client, namespace, "bound-db")
    assert (
        found is not None and found["spec"]["users"][user] == ["login"] and found["spec"]["users"]["main"] == ["owner"]
    )
