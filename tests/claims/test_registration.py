"""Broker-provisioned services registered automatically, with the demo operator and catalog.

Aspects: an opted-in SFServiceBinding becomes a RegisteredService backed by its credentials Secret
(``valueFromSecret`` into a flattened endpoint Secret), which a ServiceClaim then matches like any other;
the claim's binding Secret carries the broker's credentials; unbinding deletes the RegisteredService and
the claim falls back to Pending. Bindings that do not opt in are not registered.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from kubernetes import client

from opbroker.api.conventions import CREDENTIALS_KEY
from opbroker.controller.claims.core import names
from tests.claims_support import create, get, secret_data, service_claim, status
from tests.controller_support import wait_for

pytestmark = pytest.mark.usefixtures("controller")

OSB_GROUP, OSB_VERSION = "osb.servicefabrik.io", "v1alpha1"
SERVICE_ID = "6f4e7a0c-2f0a-4d5e-9b1a-0d6c1e0f5a11"
PLAN_ID = "0b9bd3f2-8d55-4a0b-9c1e-55c9a4e3d7a2"


def osb(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def osb_state(api: client.ApiClient, namespace: str, plural: str, name: str) -> str | None:
    found = osb(api).get_namespaced_custom_object(OSB_GROUP, OSB_VERSION, namespace, plural, name)
    return (found.get("status") or {}).get("state")


def provision(api: client.ApiClient, namespace: str) -> None:
    instance = {
        "apiVersion": f"{OSB_GROUP}/{OSB_VERSION}",
        "kind": "SFServiceInstance",
        "metadata": {"name": "db1"},
        "spec": {"instanceId": "db1", "serviceId": SERVICE_ID, "planId": PLAN_ID, "parameters": {}},
    }
    osb(api).create_namespaced_custom_object(OSB_GROUP, OSB_VERSION, namespace, "sfserviceinstances", instance)
    wait_for(lambda: osb_state(api, namespace, "sfserviceinstances", "db1") == "succeeded", 30, "the instance")


def bind(api: client.ApiClient, namespace: str, binding: str, annotations: dict[str, str]) -> None:
    body: dict[str, Any] = {
        "apiVersion": f"{OSB_GROUP}/{OSB_VERSION}",
        "kind": "SFServiceBinding",
        "metadata": {"name": binding, "annotations": annotations},
        "spec": {"id": binding, "instanceId": "db1", "serviceId": SERVICE_ID, "planId": PLAN_ID},
    }
    osb(api).create_namespaced_custom_object(OSB_GROUP, OSB_VERSION, namespace, "sfservicebindings", body)
    wait_for(lambda: osb_state(api, namespace, "sfservicebindings", binding) == "succeeded", 30, "the binding")


def test_an_opted_in_broker_binding_is_registered_and_claimable(api_client: client.ApiClient, namespace: str) -> None:
    provision(api_client, namespace)
    bind(
        api_client,
        namespace,
        "b1",
        {names.ANNOTATION_REGISTER: "true", names.ANNOTATION_TYPE: "postgresql", names.ANNOTATION_SLA: "L1"},
    )
    service = wait_for(lambda: get(api_client, namespace, "RegisteredService", "b1"), 15, "the RegisteredService")
    spec = service["spec"]
    assert spec["serviceClassIdentity"] == [
        {"name": "type", "value": "postgresql"},
        {"name": "provider", "value": "opbroker"},
        {"name": "plan", "value": "small"},
    ]
    assert spec["sla"] == "L1"
    assert {e["name"] for e in spec["serviceEndpointDefinition"]} == {"hostname", "password", "port", "uri", "username"}
    assert all(e["valueFromSecret"]["name"] == "b1-endpoint" for e in spec["serviceEndpointDefinition"])
    assert "password" not in json.dumps(service.get("status") or {})
    wait_for(lambda: status(api_client, namespace, "RegisteredService", "b1").get("state") == "Available", 15, "avail")

    binding = osb(api_client).get_namespaced_custom_object(OSB_GROUP, OSB_VERSION, namespace, "sfservicebindings", "b1")
    raw = client.CoreV1Api(api_client).read_namespaced_secret(binding["status"]["response"]["secretRef"], namespace)
    credentials = json.loads(base64.b64decode(raw.data[CREDENTIALS_KEY]))["credentials"]

    create(api_client, namespace, service_claim("app-db", keys=["hostname", "port", "username", "password"]))
    wait_for(lambda: status(api_client, namespace, "ServiceClaim", "app-db").get("state") == "Resolved", 15, "claim")
    assert status(api_client, namespace, "ServiceClaim", "app-db")["registeredService"] == "b1"
    assert secret_data(api_client, namespace, "app-db-binding") == {
        "type": "postgresql",
        "provider": "opbroker",
        "hostname": credentials["hostname"],
        "port": str(credentials["port"]),
        "username": credentials["username"],
        "password": credentials["password"],
    }

    # Unbind: the registered service goes, and the claim falls back to Pending.
    osb(api_client).delete_namespaced_custom_object(OSB_GROUP, OSB_VERSION, namespace, "sfservicebindings", "b1")
    wait_for(lambda: get(api_client, namespace, "RegisteredService", "b1") is None, 30, "the registration to go")
    wait_for(lambda: status(api_client, namespace, "ServiceClaim", "app-db").get("state") == "Pending", 15, "pending")


def test_a_binding_that_does_not_opt_in_is_not_registered(api_client: client.ApiClient, namespace: str) -> None:
    provision(api_client, namespace)
    bind(api_client, namespace, "plain", {})
    bind(api_client, namespace, "opted", {names.ANNOTATION_REGISTER: "true"})
    # Once the later, opted-in binding is registered, the earlier one has had every chance to be.
    registered = wait_for(lambda: get(api_client, namespace, "RegisteredService", "opted"), 15, "the registration")
    assert registered["spec"]["serviceClassIdentity"][0] == {"name": "type", "value": "demo-db"}
    assert get(api_client, namespace, "RegisteredService", "plain") is None
