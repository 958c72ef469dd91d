"""The controller reports whether it accepted each SFService and SFPlan (the Ready condition that Pulumi's
``wait_for_ready`` and ``kubectl get`` read), on the real control plane."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from opbroker.controller.catalog.core.catalog_status import plan_verdict, service_verdict, status_patch
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.views import EntryView
from opbroker.controller.runtime.clock import FAKE_EPOCH as NOW
from tests.controller.test_robustness import install_plan
from tests.controller_idle import progress
from tests.controller_support import GROUP, VERSION, wait_for

pytestmark = pytest.mark.usefixtures("controller")


def ready_of(obj: dict[str, Any]) -> dict[str, Any] | None:
    status = obj.get("status") or {}
    if status.get("observedGeneration") != obj["metadata"]["generation"]:
        return None
    return next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), None)


def plan(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, "sfplans", name
    )
    return found


def test_plans_and_services_get_a_ready_condition(
    api_client: client.ApiClient, catalog_namespace: str, namespace: str, tmp_path: Path, controller_metrics_port: int
) -> None:
    good = install_plan(api_client, catalog_namespace, tmp_path, f"good-{namespace}", "kind: ConfigMap\napiVersion: v1")
    bad = install_plan(api_client, catalog_namespace, tmp_path, f"bad-{namespace}", "{{ instance.metadata.name ")

    accepted = wait_for(lambda: ready_of(plan(api_client, catalog_namespace, good)), 20, "the good plan's Ready")
    assert (accepted["status"], accepted["reason"]) == ("True", "Accepted")
    refused = wait_for(lambda: ready_of(plan(api_client, catalog_namespace, bad)), 20, "the bad plan's Ready")
    assert (refused["status"], refused["reason"]) == ("False", "PlanInvalid")
    assert "templates[0]" in refused["message"], refused["message"]

    # Fixed: a new generation, accepted; and the controller's own write causes no further writes.
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        GROUP,
        VERSION,
        catalog_namespace,
        "sfplans",
        bad,
        {"spec": {"templates": [{"action": "provision", "type": "jinja2", "content": "{}"}]}},
    )
    fixed = wait_for(
        lambda: (c := ready_of(plan(api_client, catalog_namespace, bad))) and c["status"] == "True" and c, 20, "fix"
    )
    assert fixed["observedGeneration"] == plan(api_client, catalog_namespace, bad)["metadata"]["generation"]
    version = plan(api_client, catalog_namespace, bad)["metadata"]["resourceVersion"]
    # "No further write" leaves no sign of its own (the pure row: test_entry_plan's "status says it already"). A
    # later change of another plan does: plans come through one watch, in order, so once the controller has
    # accepted the good plan's new generation and has nothing due, it has handled its own write to the bad plan
    # (and run whatever reconcile that queued).
    custom = client.CustomObjectsApi(api_client)
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, catalog_namespace, "sfplans", good, {"spec": {"description": "a later change"}}
    )
    wait_for(lambda: ready_of(plan(api_client, catalog_namespace, good)), 20, "the good plan's next generation")
    wait_for(lambda: progress(controller_metrics_port).idle, 20, "the controller to have nothing due")
    assert plan(api_client, catalog_namespace, bad)["metadata"]["resourceVersion"] == version

    service = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
        GROUP, VERSION, catalog_namespace, "sfservices", "demo-db"
    )
    condition = wait_for(
        lambda: ready_of(
            client.CustomObjectsApi(api_client).get_namespaced_custom_object(
                GROUP, VERSION, catalog_namespace, "sfservices", "demo-db"
            )
        ),
        20,
        "the service's Ready",
    )
    assert (condition["status"], condition["reason"]) == ("True", "Accepted"), service


def test_status_patch_is_none_when_the_status_already_says_it() -> None:
    body: dict[str, Any] = {"metadata": {"generation": 3}, "status": {}}
    verdict = plan_verdict(None)
    patch = status_patch(EntryView.of(body), verdict, NOW)
    assert patch is not None and patch["observedGeneration"] == 3
    assert status_patch(EntryView.of({"metadata": {"generation": 3}, "status": patch}), verdict, NOW) is None
    assert status_patch(EntryView.of({"metadata": {"generation": 4}, "status": patch}), verdict, NOW) is not None
    invalid = plan_verdict(None, ("templates[1]: unexpected end of template",))
    changed = status_patch(EntryView.of({"metadata": {"generation": 3}, "status": patch}), invalid, NOW)
    assert changed is not None and changed["conditions"][0]["reason"] == Reason.PLAN_INVALID.value
    assert service_verdict("spec.id: Field required").reason is Reason.SERVICE_INVALID
