"""The demo operator on the real control plane: the names it gives, and failures it makes visible."""

from __future__ import annotations

import importlib.util
from types import ModuleType

import pytest
from kubernetes import client

from opbroker.devcluster.processes import Process
from tests.controller_support import DEMO, wait_for

GROUP, VERSION, PLURAL = "demo.opbroker.io", "v1alpha1", "databases"


def operator_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("demo_operator", DEMO / "operator.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("database", "service"),
    [
        ("orders", "orders"),
        ("4f0c2b7e-9d1a-4c3b-8e5f-2a6b7c8d9e0f", "db-4f0c2b7e-9d1a-4c3b-8e5f-2a6b7c8d9e0f"),
        ("a" * 63, "a" * 63),
        ("9" * 61, None),  # db- + 61 is too long: the hashed form
        ("my.db", None),  # a dot is fine in a Database name, not in a Service name
    ],
)
def test_service_names_are_valid_dns_1035_labels(database: str, service: str | None) -> None:
    name = operator_module().service_name(database)
    if service is not None:
        assert name == service
    assert len(name) <= 63 and name[0].isalpha() and all(c.isalnum() or c == "-" for c in name)


def database(namespace: str, name: str) -> dict[str, object]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Database",
        "metadata": {"name": name},
        "spec": {"engine": "postgresql", "readyAfterSeconds": 0},
    }


def test_a_database_named_like_a_cloud_foundry_guid_becomes_running(
    api_client: client.ApiClient, namespace: str, demo_operator: Process
) -> None:
    custom = client.CustomObjectsApi(api_client)
    name = "0b6e1f6a-5f7c-4d2e-9a3b-1c2d3e4f5a6b"
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, database(namespace, name))

    def running() -> dict[str, object] | None:
        found = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        return found["status"] if (found.get("status") or {}).get("phase") == "Running" else None

    status = wait_for(running, 20, "the Database to be Running")
    service = client.CoreV1Api(api_client).read_namespaced_service(f"db-{name}", namespace)
    assert status["service"] == service.metadata.name and status["host"] == service.spec.cluster_ip


def test_an_object_the_api_server_refuses_fails_the_database_visibly(
    api_client: client.ApiClient, namespace: str, demo_operator: Process
) -> None:
    """A Database name longer than a label value may be (63) makes its Service's selector invalid (422):
    the Database goes Failed with the API server's message, and the operator's log says so."""
    custom = client.CustomObjectsApi(api_client)
    name = "x" * 70
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, database(namespace, name))

    def failed() -> dict[str, object] | None:
        found = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        return found["status"] if (found.get("status") or {}).get("phase") == "Failed" else None

    status = wait_for(failed, 20, "the Database to be Failed")
    assert "spec.selector" in str(status["message"]) and "Invalid value" in str(status["message"])
    wait_for(lambda: f"Database {namespace}/{name} failed:" in demo_operator.tail(200), 10, "the operator's log")
