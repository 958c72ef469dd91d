"""The admin API against a real control plane: a broker served over HTTP records the requests, the session's
controller executes them with the code behind ``opbroker plan diff`` / ``update-instances``.

Covers: a preview of a change that alters one instance, leaves one alone and breaks one, page by page
(``limit`` and ``nextAfter``), with the generated password never a changed line and nothing written; the
paced rollout of the plan's current spec, with its progress, the instances re-rendered and their passwords
kept; a second rollout refused (409) while one is unfinished; a cancel that stops a slow rollout after its
first instance.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client

from opbroker.devcluster import ControlPlane
from tests.broker_support import Harness, start_broker
from tests.controller.test_lifecycle import DB, get, provision, wait_state
from tests.controller_support import Process, apply_yaml, controller_command, wait_for
from tests.rendering.test_plan_diff_cli import BREAKING, GROWING, ONE_GB, PLAN, write

pytestmark = pytest.mark.usefixtures("module_controller")

ADMIN = ("operator", "admin-s3cret-for-rollouts")


@pytest.fixture(scope="module")
def module_controller(
    control_plane: ControlPlane, demo_operator: Process, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Process]:
    """A controller for this module only, stopped at its end. The session's (``controller``) would keep running
    into the broker tests after this one, which play the controller's part themselves (tests/broker_support.py)
    and whose instances it would fail ("plan not in the catalog": their plans are not in its catalog)."""
    process = Process("controller-admin", controller_command(control_plane), tmp_path_factory.mktemp("logs"))
    process.start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def admin_broker(api_client: client.ApiClient, catalog_namespace: str) -> Iterator[Harness]:
    harness = start_broker(api_client, catalog_namespace, admin_username=ADMIN[0], admin_password=ADMIN[1])
    try:
        yield harness
    finally:
        harness.background.stop()


def finished(http: httpx.Client, path: str, timeout: float = 60.0) -> dict[str, Any]:
    """Poll ``path`` until it answers 200 (a finished request); until then it answers 202 with a Retry-After."""

    def answered() -> httpx.Response | None:
        answer = http.get(path)
        if answer.status_code == 200:
            return answer
        assert answer.status_code == 202, answer.text
        assert answer.headers["retry-after"]
        return None

    done: httpx.Response = wait_for(answered, timeout, f"{path} to finish", interval=0.2)
    body: dict[str, Any] = done.json()
    return body


def test_preview_then_paced_rollout_over_http(
    api_client: client.ApiClient, namespace: str, catalog_namespace: str, admin_broker: Harness, tmp_path: Path
) -> None:
    plan = f"admin-{namespace}"
    apply_yaml(api_client, write(tmp_path / "v1.yaml", plan, ONE_GB), catalog_namespace)
    for name, version in (("a14", "14"), ("b16", "16"), ("c15", "15")):
        provision(api_client, namespace, name, plan_id=plan, parameters={"version": version})
    for name in ("a14", "b16", "c15"):
        wait_state(api_client, namespace, "sfserviceinstances", name, "succeeded")
    core = client.CoreV1Api(api_client)
    password = base64.b64decode(core.read_namespaced_secret("a14-admin", namespace).data["password"]).decode()
    http = httpx.Client(base_url=admin_broker.url, auth=ADMIN, timeout=60)

    # Preview, two instances per page.
    proposed = yaml.safe_load(PLAN.format(name=plan, **BREAKING))
    started = http.post(
        f"/admin/plans/{plan}/preview", json={"proposed": proposed, "instanceNamespace": namespace, "limit": 2}
    )
    assert started.status_code == 202, started.text
    assert started.headers["location"] == f"/admin/plans/{plan}/preview"
    first = finished(http, f"/admin/plans/{plan}/preview")
    assert first["phase"] == "Succeeded", first
    assert [(i["name"], i["change"]) for i in first["instances"]] == [("a14", "changed"), ("b16", "unchanged")]
    diff = first["instances"][0]["diff"]
    assert f"--- {namespace}/a14 (current plan)\n" in diff and "-  storageGB: 1\n+  storageGB: 5\n" in diff
    assert password not in diff, "the password comes from the registry on both sides"
    assert first["nextAfter"] == f"{namespace}/b16"
    assert (first["changed"], first["unchanged"], first["failing"]) == (1, 1, 0)
    again = http.post(
        f"/admin/plans/{plan}/preview",
        json={"proposed": proposed, "instanceNamespace": namespace, "limit": 2, "after": first["nextAfter"]},
    )
    assert again.status_code == 202, again.text
    second = finished(http, f"/admin/plans/{plan}/preview")
    assert [(i["name"], i["change"]) for i in second["instances"]] == [("c15", "failing")]
    assert "an owner parameter is missing" in second["instances"][0]["error"]
    assert "nextAfter" not in second, "the last page"
    assert get(api_client, namespace, "databases", "a14", *DB[:2])["spec"]["storageGB"] == 1, "a preview writes nothing"  # type: ignore[index]

    # Roll the growing change out, one instance per page, paced.
    apply_yaml(api_client, write(tmp_path / "v3.yaml", plan, GROWING), catalog_namespace)
    rollout = http.post(
        f"/admin/plans/{plan}/rollout",
        json={"batchSize": 1, "rate": 20, "onlyOutdated": True, "instanceNamespace": namespace},
    )
    assert rollout.status_code == 202, rollout.text
    assert rollout.json()["request"]["batchSize"] == 1
    done = finished(http, f"/admin/plans/{plan}/rollout")
    assert done["phase"] == "Succeeded", done
    assert done["marked"] == 3 and done["pages"] >= 3, done
    assert done["recent"] == [f"{namespace}/a14", f"{namespace}/b16", f"{namespace}/c15"]

    def grown() -> bool:
        database = get(api_client, namespace, "databases", "a14", *DB[:2])
        return bool(database and database["spec"]["storageGB"] == 5)

    wait_for(grown, 30, "a14 to be re-rendered with the new plan")
    for name in ("a14", "b16", "c15"):
        assert wait_state(api_client, namespace, "sfserviceinstances", name, "succeeded")["status"]["appliedPlanHash"]
    assert base64.b64decode(core.read_namespaced_secret("a14-admin", namespace).data["password"]).decode() == password

    # A slow rollout (one mark per 100 s): a second one is refused meanwhile; a cancel stops it after the first.
    slow = http.post(f"/admin/plans/{plan}/rollout", json={"rate": 0.01, "instanceNamespace": namespace})
    assert slow.status_code == 202, slow.text

    def running() -> dict[str, Any] | None:
        body: dict[str, Any] = http.get(f"/admin/plans/{plan}/rollout").json()
        return body if body["phase"] == "Running" else None

    wait_for(running, 30, "the slow rollout to start")
    refused = http.post(f"/admin/plans/{plan}/rollout", json={})
    assert refused.status_code == 409 and "unfinished" in refused.json()["description"]
    cancelled = http.delete(f"/admin/plans/{plan}/rollout")
    assert cancelled.status_code in (200, 202), cancelled.text
    assert cancelled.json()["request"]["cancelled"] is True
    stopped = finished(http, f"/admin/plans/{plan}/rollout", timeout=20)
    assert stopped["phase"] == "Cancelled", stopped
    assert stopped["marked"] <= 1, "stopped within its first wait"
    after = http.post(f"/admin/plans/{plan}/rollout", json={"onlyOutdated": True, "instanceNamespace": namespace})
    assert after.status_code == 202, "a finished rollout is replaced by the next"
    finished(http, f"/admin/plans/{plan}/rollout")

    missing = http.post("/admin/plans/no-such-plan/rollout", json={})
    assert missing.status_code == 404 and missing.json()["error"] == "NotFound"
    http.close()
