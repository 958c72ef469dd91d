"""OSB over HTTP against the real broker *and* the real controller and demo operator, on the real control
plane: what a platform sees. (tests/test_broker_*.py cover every error case with a stand-in controller.)

Also: the Pulumi OSB resources (provider/osb_providers.py) against our own broker.
"""

from __future__ import annotations

import copy
import time
import uuid
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client

from opbroker.api.conventions import resource_name
from opbroker.provider.osb_providers import ServiceBindingProvider, ServiceInstanceProvider
from tests.controller_support import DEMO, apply_yaml, wait_for

pytestmark = pytest.mark.usefixtures("controller")
DEMO_DOCS = list(yaml.safe_load_all((DEMO / "catalog.yaml").read_text()))
SERVICE_ID = DEMO_DOCS[1]["spec"]["serviceId"]
PLAN_ID = DEMO_DOCS[1]["spec"]["id"]
LARGE_PLAN_ID = "7d0f6c55-2c0e-4e7b-9d55-3e1b4c3a9f10"


@pytest.fixture(scope="session")
def large_plan(api_client: client.ApiClient, catalog_namespace: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A second plan of the demo service, so plan changes can be tested."""
    plan = copy.deepcopy(DEMO_DOCS[1])
    plan["metadata"]["name"] = "demo-db-large"
    plan["spec"].update({"id": LARGE_PLAN_ID, "name": "large", "description": "5 GB demo database"})
    plan["spec"]["context"]["storageGB"] = 5
    path = tmp_path_factory.mktemp("plans") / "large.yaml"
    path.write_text(yaml.safe_dump(plan))
    apply_yaml(api_client, path, catalog_namespace)
    return LARGE_PLAN_ID


def body(namespace: str, **extra: Any) -> dict[str, Any]:
    return {
        "service_id": SERVICE_ID,
        "plan_id": PLAN_ID,
        "organization_guid": "org",
        "space_guid": "space",
        "context": {"platform": "kubernetes", "namespace": namespace},
        **extra,
    }


def poll(osb: httpx.Client, path: str, operation: str, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answer = osb.get(f"{path}/last_operation", params={"operation": operation})
        assert answer.status_code in (200, 410), answer.text
        state = answer.json() if answer.status_code == 200 else {"state": "gone"}
        if state["state"] != "in progress":
            return state
        time.sleep(0.2)
    raise AssertionError(f"{path}: still in progress after {timeout}s")


def database(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    items = client.CustomObjectsApi(api).list_namespaced_custom_object(
        "demo.opbroker.io", "v1alpha1", namespace, "databases"
    )["items"]
    return next((d for d in items if d["metadata"]["name"] == name), None)


def test_full_async_lifecycle_polled_through_last_operation(
    osb: httpx.Client, api_client: client.ApiClient, namespace: str
) -> None:
    instance = f"e2e-{uuid.uuid4().hex[:8]}"
    path = f"/v2/service_instances/{instance}"
    accepted = osb.put(path, params={"accepts_incomplete": "true"}, json=body(namespace, parameters={"version": "15"}))
    assert accepted.status_code == 202, accepted.text
    assert poll(osb, path, accepted.json()["operation"])["state"] == "succeeded"
    fetched = osb.get(path)
    assert fetched.status_code == 200 and fetched.json()["parameters"] == {"version": "15"}
    assert fetched.json()["dashboard_url"].endswith(f"/databases/{instance}")
    assert database(api_client, namespace, instance)["spec"]["version"] == "15"  # type: ignore[index]

    binding_path = f"{path}/service_bindings/app-1"
    bound = osb.put(
        binding_path, params={"accepts_incomplete": "true"}, json={"service_id": SERVICE_ID, "plan_id": PLAN_ID}
    )
    assert bound.status_code == 202, bound.text
    assert poll(osb, binding_path, bound.json()["operation"])["state"] == "succeeded"
    credentials = osb.get(binding_path).json()["credentials"]
    assert credentials["port"] == 5432 and credentials["password"]

    ids = {"service_id": SERVICE_ID, "plan_id": PLAN_ID, "accepts_incomplete": "true"}
    unbound = osb.delete(binding_path, params=ids)
    assert unbound.status_code == 202
    assert poll(osb, binding_path, unbound.json()["operation"])["state"] in ("succeeded", "gone")
    assert osb.delete(binding_path, params=ids).status_code == 410

    removed = osb.delete(path, params=ids)
    assert removed.status_code == 202
    operation = removed.json()["operation"]
    assert poll(osb, path, operation)["state"] == "succeeded"
    wait_for(lambda: database(api_client, namespace, instance) is None, 30, "the Database to go")
    # Finished and gone: last_operation still answers succeeded for that deprovision.
    assert osb.get(f"{path}/last_operation", params={"operation": operation}).json()["state"] == "succeeded"
    assert osb.get(path).status_code == 404


def test_delete_during_provisioning_is_accepted_and_cleans_up(
    osb: httpx.Client, api_client: client.ApiClient, namespace: str
) -> None:
    instance = f"e2e-{uuid.uuid4().hex[:8]}"
    path = f"/v2/service_instances/{instance}"
    provision = osb.put(path, params={"accepts_incomplete": "true"}, json=body(namespace))
    removed = osb.delete(path, params={"service_id": SERVICE_ID, "plan_id": PLAN_ID, "accepts_incomplete": "true"})
    assert (provision.status_code, removed.status_code) == (202, 202)
    assert poll(osb, path, removed.json()["operation"])["state"] == "succeeded"
    wait_for(lambda: database(api_client, namespace, instance) is None, 30, "nothing to be left behind")


def test_repeated_and_conflicting_puts(osb: httpx.Client, namespace: str) -> None:
    instance = f"e2e-{uuid.uuid4().hex[:8]}"
    path = f"/v2/service_instances/{instance}"
    first = osb.put(path, params={"accepts_incomplete": "true"}, json=body(namespace))
    again = osb.put(path, params={"accepts_incomplete": "true"}, json=body(namespace))
    assert first.status_code == 202
    assert again.status_code in (200, 202)
    if again.status_code == 202:
        assert again.json()["operation"] == first.json()["operation"]
    conflicting = osb.put(
        path, params={"accepts_incomplete": "true"}, json=body(namespace, parameters={"version": "14"})
    )
    assert conflicting.status_code == 409
    assert poll(osb, path, first.json()["operation"])["state"] == "succeeded"
    assert osb.put(path, params={"accepts_incomplete": "true"}, json=body(namespace)).status_code == 200


def test_a_delete_with_an_empty_service_id_deletes_nothing(
    osb: httpx.Client, api_client: client.ApiClient, namespace: str
) -> None:
    instance = f"e2e-{uuid.uuid4().hex[:8]}"
    path = f"/v2/service_instances/{instance}"
    accepted = osb.put(path, params={"accepts_incomplete": "true"}, json=body(namespace))
    assert poll(osb, path, accepted.json()["operation"])["state"] == "succeeded"
    refused = osb.delete(path, params={"service_id": "", "plan_id": PLAN_ID, "accepts_incomplete": "true"})
    assert refused.status_code == 400
    # The broker writes only while it answers (no work of its own afterwards): a deprovision it started would
    # show on the instance before the 400 came back — no need to wait and see.
    (record,) = [
        i
        for i in client.CustomObjectsApi(api_client).list_namespaced_custom_object(
            "osb.servicefabrik.io", "v1alpha1", namespace, "sfserviceinstances"
        )["items"]
        if i["metadata"]["name"] == resource_name(instance)
    ]
    assert "deletionTimestamp" not in record["metadata"], "the refused DELETE started a deprovision"
    assert osb.get(path).status_code == 200
    assert database(api_client, namespace, instance) is not None


def pulumi_props(osb_url: tuple[str, str], namespace: str, **extra: Any) -> dict[str, Any]:
    url, password = osb_url
    return {
        "broker_url": url,
        "broker_username": "platform",
        "broker_password": password,
        "instance_id": f"pulumi-{uuid.uuid4().hex[:8]}",
        "service_id": SERVICE_ID,
        "plan_id": PLAN_ID,
        "organization_guid": "org",
        "space_guid": "space",
        "parameters": {},
        "context": {"platform": "kubernetes", "namespace": namespace},
        "timeout": 60.0,
        "poll_interval": 0.5,
        **extra,
    }


def test_pulumi_osb_resources_against_our_broker(
    osb_url: tuple[str, str], large_plan: str, api_client: client.ApiClient, namespace: str
) -> None:
    instances, bindings = ServiceInstanceProvider(), ServiceBindingProvider()
    props = pulumi_props(osb_url, namespace, parameters={"version": "15"})
    created = instances.create(props)
    assert created.outs["state"] == "succeeded"
    name = props["instance_id"]
    assert database(api_client, namespace, name)["spec"]["version"] == "15"  # type: ignore[index]

    # Update of plan and parameters in place.
    updated = instances.update(
        created.id, created.outs, {**props, "plan_id": large_plan, "parameters": {"version": "16"}}
    )
    assert updated.outs["plan_id"] == large_plan
    wait_for(
        lambda: (database(api_client, namespace, name) or {}).get("spec", {}).get("storageGB") == 5,
        30,
        "the plan change",
    )
    assert database(api_client, namespace, name)["spec"]["version"] == "16"  # type: ignore[index]

    binding_props = {
        k: props[k]
        for k in ("broker_url", "broker_username", "broker_password", "service_id", "timeout", "poll_interval")
    }
    binding_props.update({"instance_id": name, "plan_id": large_plan, "binding_id": f"b-{uuid.uuid4().hex[:8]}"})
    binding = bindings.create(binding_props)
    assert binding.outs["credentials"]["password"]
    bindings.delete(binding.id, binding.outs)

    instances.delete(created.id, updated.outs)
    wait_for(lambda: database(api_client, namespace, name) is None, 30, "deprovision through Pulumi")


def test_pulumi_surfaces_a_failed_provision_as_an_error(osb_url: tuple[str, str], namespace: str) -> None:
    props = pulumi_props(osb_url, namespace, parameters={"failWith": "disk quota exceeded"})
    with pytest.raises(RuntimeError, match="disk quota exceeded"):
        ServiceInstanceProvider().create(props)


def test_pulumi_refresh_reads_what_the_broker_holds(osb_url: tuple[str, str], namespace: str) -> None:
    """``read`` (``pulumi refresh``): drift is reported, and an instance or binding deleted out of band is gone."""
    instances, bindings = ServiceInstanceProvider(), ServiceBindingProvider()
    props = pulumi_props(osb_url, namespace, parameters={"version": "15"})
    created = instances.create(props)
    name = props["instance_id"]
    # Changed out of band (another client updated the parameters): refresh shows what the broker holds.
    url, password = osb_url
    with httpx.Client(base_url=url, auth=("platform", password), headers={"X-Broker-API-Version": "2.17"}) as http:
        changed = http.patch(
            f"/v2/service_instances/{name}",
            params={"accepts_incomplete": "true"},
            json={"service_id": SERVICE_ID, "parameters": {"version": "16"}},
        )
        assert changed.status_code == 202, changed.text
        operation = changed.json()["operation"]
        wait_for(
            lambda: (
                http.get(f"/v2/service_instances/{name}/last_operation", params={"operation": operation}).json()[
                    "state"
                ]
                == "succeeded"
            ),
            30,
            "the out-of-band update",
        )
        read = instances.read(created.id, created.outs)
        assert read.id == name and read.outs["parameters"] == {"version": "16"}

        binding_props = {
            k: props[k]
            for k in ("broker_url", "broker_username", "broker_password", "service_id", "plan_id", "timeout")
        }
        binding_props.update({"instance_id": name, "binding_id": f"b-{uuid.uuid4().hex[:8]}", "poll_interval": 0.5})
        binding = bindings.create(binding_props)
        again = bindings.read(binding.id, binding.outs)
        assert again.id == binding.id and again.outs["credentials"] == binding.outs["credentials"]
        # Deleted out of band: refresh says gone (an empty id), for the binding and then the instance.
        unbound = http.delete(
            f"/v2/service_instances/{name}/service_bindings/{binding.id}",
            params={"service_id": SERVICE_ID, "plan_id": PLAN_ID, "accepts_incomplete": "true"},
        )
        assert unbound.status_code == 202
        wait_for(lambda: bindings.read(binding.id, binding.outs).id == "", 30, "the binding to read as gone")
        unbind_poll = f"/v2/service_instances/{name}/service_bindings/{binding.id}/last_operation"
        wait_for(
            lambda: (
                http.get(unbind_poll, params={"operation": unbound.json()["operation"]}).json()["state"] == "succeeded"
            ),
            30,
            "the unbind to finish",
        )
        deleted = http.delete(
            f"/v2/service_instances/{name}",
            params={"service_id": SERVICE_ID, "plan_id": PLAN_ID, "accepts_incomplete": "true"},
        )
        assert deleted.status_code == 202
        wait_for(lambda: instances.read(created.id, created.outs).id == "", 30, "the instance to read as gone")


REGISTRY_DASHBOARD_PLAN = """
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFPlan
metadata: {{name: registry-dashboard}}
spec:
  name: registry-dashboard
  id: {plan_id}
  serviceId: {service_id}
  description: a plan whose provision template writes the registry's dashboard-url
  bindable: false
  manager: {{async: true}}
  templates:
  - action: provision
    type: jinja2
    content: |
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: {{{{ instance.metadata.name }}}}-console
      data:
        url: {{{{ setRegistry("dashboard-url", "https://console.example/" ~ registry("instance-id")) }}}}
  - action: status
    type: jinja2
    content: |
      provision:
        state: succeeded
"""


def test_a_registry_dashboard_url_is_the_instances_dashboard_url(
    osb: httpx.Client, api_client: client.ApiClient, namespace: str, catalog_namespace: str, tmp_path: Any
) -> None:
    """Issue 18: a ``dashboard-url`` a plan writes to the instance's registry (the Couchbase broker's read-write
    key) becomes status.dashboardUrl, and so the broker's dashboard_url (GET instance, repeated PUT)."""
    plan_id = "3c1d7e52-9a0b-4f6e-8d21-6b5f0e2a7c94"
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(REGISTRY_DASHBOARD_PLAN.format(plan_id=plan_id, service_id=SERVICE_ID))
    apply_yaml(api_client, plan_file, catalog_namespace)
    instance = f"dash-{uuid.uuid4().hex[:8]}"
    path = f"/v2/service_instances/{instance}"
    request = body(namespace, plan_id=plan_id)

    def accepted() -> httpx.Response | None:
        answer = osb.put(path, params={"accepts_incomplete": "true"}, json=request)
        return answer if answer.status_code == 202 else None  # 400 until the broker's catalog has the plan

    operation = wait_for(accepted, 30, "the broker to offer the plan").json()["operation"]
    assert poll(osb, path, operation)["state"] == "succeeded"
    want = f"https://console.example/{instance}"
    fetched = osb.get(path)
    assert fetched.status_code == 200 and fetched.json()["dashboard_url"] == want
    repeated = osb.put(path, params={"accepts_incomplete": "true"}, json=request)
    assert repeated.status_code == 200 and repeated.json()["dashboard_url"] == want
    ids = {"service_id": SERVICE_ID, "plan_id": plan_id, "accepts_incomplete": "true"}
    removed = osb.delete(path, params=ids)
    assert removed.status_code == 202
    assert poll(osb, path, removed.json()["operation"])["state"] == "succeeded"
