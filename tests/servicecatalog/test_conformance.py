"""The Service Catalog controller against a broker of an older API version and of generated code
(tests/brokers/legacy_broker.py, over real HTTP), with the real kube-apiserver and the controller process:

* a broker that speaks only 2.13 or only 2.14 (412 otherwise) is used at its version — Broker →
  ServiceClass → Instance → Binding → unbind → deprovision, asserted at every step;
* a catalog with empty structs (``"maintenance_info": {}``), missing and extra fields and numbers as strings
  becomes classes;
* a service or plan that cannot be represented is skipped and named (condition, event), the rest listed, and
  the controller's log holds no traceback.

The client-level and Pulumi-provider-level checks against the same broker are in
tests/osbclient/test_conformance.py.
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.brokers.legacy_broker import ASYNC_PLAN, SERVICE_ID, LegacyBroker, serve
from tests.controller_support import Process, wait_for
from tests.servicecatalog_support import (
    GROUP,
    VERSION,
    auth_secret,
    condition,
    create,
    custom,
    delete,
    get,
    ready,
    register_broker,
)

pytestmark = pytest.mark.usefixtures("controller")


@pytest.fixture
def legacy_broker(api_client: client.ApiClient, request: pytest.FixtureRequest) -> Iterator[tuple[LegacyBroker, str]]:
    """A legacy broker (``LegacyBroker`` options from the test's indirect parameter) registered as a Broker;
    yields it and the Broker's name. The Broker and its classes go afterwards."""
    options: dict[str, Any] = dict(getattr(request, "param", None) or {})
    suffix = secrets.token_hex(3)
    broker = LegacyBroker(suffix=suffix, **options)
    name = f"legacy-{suffix}"
    with (
        serve(broker) as url,
        auth_secret(api_client, f"{name}-auth", {"username": broker.username, "password": broker.password}) as ref,
    ):
        register_broker(api_client, name, {"url": url, "authInfo": {"basic": {"secretRef": ref}}})
        try:
            yield broker, name
        finally:
            custom(api_client).delete_cluster_custom_object(GROUP, VERSION, "brokers", name)
            for service in ("legacy-db", "legacy-empty"):
                with contextlib.suppress(ApiException):
                    custom(api_client).delete_cluster_custom_object(
                        GROUP, VERSION, "serviceclasses", f"{service}-{suffix}"
                    )


def broker_events(api_client: client.ApiClient, name: str) -> list[Any]:
    listed = client.CoreV1Api(api_client).list_namespaced_event("default").items
    return [e for e in listed if e.involved_object.kind == "Broker" and e.involved_object.name == name]


def fetched(api_client: client.ApiClient, name: str) -> dict[str, Any]:
    return wait_for(
        lambda: (b := get(api_client, "brokers", name)) and ready(b) == ("True", "FetchedCatalog") and b,
        30,
        "the catalog to be fetched",
    )


@pytest.mark.parametrize("legacy_broker", [{"version": "2.13"}, {"version": "2.14"}], indirect=True, ids=str)
def test_a_broker_of_an_older_version_is_spoken_to_in_it_from_catalog_to_deprovision(
    api_client: client.ApiClient, namespace: str, controller: Process, legacy_broker: tuple[LegacyBroker, str]
) -> None:
    broker, name = legacy_broker
    version, suffix = broker.version, broker.suffix
    core = client.CoreV1Api(api_client)

    # Broker: 412 to 2.17 … then the version it speaks, recorded.
    body = fetched(api_client, name)
    assert body["status"]["brokerAPIVersion"] == version
    assert f"OSB {version}" in condition(body, "Ready")["message"]
    tried = [r.headers["x-broker-api-version"] for r in broker.calls("GET", "/v2/catalog")]
    assert tried[-1] == version and tried[0] == "2.17"

    # ServiceClass: the good plans, read the tolerant way; the odd entries skipped and named.
    klass = get(api_client, "serviceclasses", f"legacy-db-{suffix}")
    assert klass is not None
    assert [p["name"] for p in klass["plans"]] == ["small", "large"]
    assert all("maintenanceInfo" not in p and "maximumPollingDuration" not in p for p in klass["plans"])
    assert klass["plans"][1]["bindable"] is True  # "true"
    assert get(api_client, "serviceclasses", f"legacy-empty-{suffix}") is None
    complete = condition(body, "CatalogComplete")
    assert complete is not None and complete["status"] == "False" and complete["reason"] == "CatalogEntriesSkipped"
    assert "plan 'Bad Plan': name" in complete["message"]
    assert f"service 'legacy-empty-{suffix}': plans" in complete["message"]

    # Instance on the asynchronous plan: polled at the controller's own pace (the broker's Retry-After: 3600 is
    # not of its version), in its version, without maintenance_info.
    create(
        api_client,
        namespace,
        "instances",
        "Instance",
        "olddb",
        {"serviceClassName": klass["metadata"]["name"], "planName": "large"},
    )
    wait_for(
        lambda: ready(get(api_client, "instances", "olddb", namespace)) == ("True", "Provisioned"), 30, "provisioned"
    )
    instance = get(api_client, "instances", "olddb", namespace)
    assert instance is not None
    external_id = instance["status"]["externalID"]
    assert broker.instances[external_id] == {"service_id": SERVICE_ID, "plan_id": ASYNC_PLAN}
    assert "dashboardURL" not in instance["status"]  # "" is absent

    # Binding: synchronous (2.13 has nothing else), credentials in the Secret, the odd field a warning event.
    create(api_client, namespace, "bindings", "Binding", "oldbinding", {"instanceRef": {"name": "olddb"}})
    wait_for(
        lambda: ready(get(api_client, "bindings", "oldbinding", namespace)) == ("True", "InjectedBindResult"),
        30,
        "bound",
    )
    secret = core.read_namespaced_secret("oldbinding", namespace)
    credentials = {k: base64.b64decode(v).decode() for k, v in secret.data.items()}
    assert credentials["port"] == "5432" and credentials["password"].endswith("-bound")
    events = core.list_namespaced_event(namespace).items
    ignored = [e for e in events if e.reason == "BrokerAnswerFieldsIgnored" and e.involved_object.name == "oldbinding"]
    assert ignored and "syslog_drain_url" in ignored[0].message
    assert all(credentials["password"] not in (e.message or "") for e in events)
    bind_call = broker.calls("PUT", "/service_bindings/")[-1]
    assert ("accepts_incomplete" in bind_call.query) is (version >= "2.14")

    # Unbind, then deprovision (asynchronous: 410 on its last poll).
    delete(api_client, namespace, "bindings", "oldbinding")
    wait_for(lambda: get(api_client, "bindings", "oldbinding", namespace) is None, 30, "the binding to go")
    assert broker.bindings == {}
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_secret("oldbinding", namespace)
    assert gone.value.status == 404
    delete(api_client, namespace, "instances", "olddb")
    wait_for(lambda: get(api_client, "instances", "olddb", namespace) is None, 30, "the instance to go")
    assert broker.instances == {}

    # Every request after the catalog's negotiation spoke the broker's version, and nothing of a later one.
    after = broker.requests[len(tried) :]
    assert after and {r.headers["x-broker-api-version"] for r in after} == {version}
    assert all("maintenance_info" not in json.dumps(r.body or {}) for r in broker.requests)
    assert all("x-broker-api-request-identity" not in r.headers for r in after)  # 2.15
    assert broker.password not in controller.log.read_text()


@pytest.mark.parametrize("legacy_broker", [{"version": "2.17", "bad_entries": False}], indirect=True, ids=str)
def test_empty_structs_missing_and_extra_fields_and_numbers_as_strings_become_a_class(
    api_client: client.ApiClient, legacy_broker: tuple[LegacyBroker, str]
) -> None:
    broker, name = legacy_broker
    body = fetched(api_client, name)
    assert body["status"]["brokerAPIVersion"] == "2.17"
    klass = get(api_client, "serviceclasses", f"legacy-db-{broker.suffix}")
    assert klass is not None
    small, large = klass["plans"]
    assert "maintenanceInfo" not in small and "maintenanceInfo" not in large  # {} and {"version": ""}: absent
    assert large["maximumPollingDuration"] == 3600  # "3600"
    assert "externalMetadata" not in small and "instanceCreateParameterSchema" not in small  # {}: absent
    assert large["description"] == ""  # missing
    complete = condition(body, "CatalogComplete")
    assert complete is not None and (complete["status"], complete["reason"]) == ("True", "AllEntriesListed")


@pytest.mark.parametrize("legacy_broker", [{"version": "2.17"}], indirect=True, ids=str)
def test_one_bad_plan_or_service_is_named_and_skipped_and_the_rest_listed(
    api_client: client.ApiClient, controller: Process, legacy_broker: tuple[LegacyBroker, str]
) -> None:
    start = len(controller.log.read_text())
    broker, name = legacy_broker
    body = fetched(api_client, name)
    klass = get(api_client, "serviceclasses", f"legacy-db-{broker.suffix}")
    assert klass is not None and [p["name"] for p in klass["plans"]] == ["small", "large"]
    assert body["status"]["serviceClassCount"] == 1
    complete = condition(body, "CatalogComplete")
    assert complete is not None and (complete["status"], complete["reason"]) == ("False", "CatalogEntriesSkipped")
    message = complete["message"]
    assert f"service 'legacy-db-{broker.suffix}' plan 'Bad Plan': name" in message  # service, plan and field
    assert f"service 'legacy-empty-{broker.suffix}': plans" in message
    events = wait_for(
        lambda: [e for e in broker_events(api_client, name) if e.reason == "CatalogEntriesSkipped"], 10, "the event"
    )
    assert events[0].type == "Warning" and "plan 'Bad Plan': name" in events[0].message
    log = controller.log.read_text()[start:]
    assert "Traceback" not in log and name not in "".join(line for line in log.splitlines() if " ERROR " in line)


@pytest.mark.parametrize("legacy_broker", [{"version": "2.17", "credential_key": "db port"}], indirect=True, ids=str)
def test_credentials_a_secret_cannot_hold_fail_the_binding_for_good_and_are_unbound(
    api_client: client.ApiClient, namespace: str, controller: Process, legacy_broker: tuple[LegacyBroker, str]
) -> None:
    start = len(controller.log.read_text())
    broker, name = legacy_broker
    fetched(api_client, name)
    create(
        api_client,
        namespace,
        "instances",
        "Instance",
        "keydb",
        {"serviceClassName": f"legacy-db-{broker.suffix}", "planName": "small"},
    )
    wait_for(lambda: ready(get(api_client, "instances", "keydb", namespace)) == ("True", "Provisioned"), 30, "ready")
    create(api_client, namespace, "bindings", "Binding", "keybinding", {"instanceRef": {"name": "keydb"}})

    def refused() -> dict[str, Any] | None:
        found = get(api_client, "bindings", "keybinding", namespace)
        failed = condition(found, "Failed")
        settled = found and not (found.get("status") or {}).get("orphanMitigationInProgress")
        return found if failed and failed["reason"] == "BindResultRefused" and settled else None

    binding = wait_for(refused, 30, "the binding to fail for good")
    assert ready(binding) == ("False", "OrphanMitigationSuccessful")
    assert "'db port'" in condition(binding, "Failed")["message"]
    assert broker.bindings == {}  # orphan mitigation unbound what the broker made
    binds = len(broker.calls("PUT", "/service_bindings/"))
    assert binds == 1
    with pytest.raises(ApiException):
        client.CoreV1Api(api_client).read_namespaced_secret("keybinding", namespace)
    log = controller.log.read_text()[start:]
    assert "Traceback" not in log and broker.password not in log
    delete(api_client, namespace, "bindings", "keybinding")
    wait_for(lambda: get(api_client, "bindings", "keybinding", namespace) is None, 30, "the binding to go")
    assert len(broker.calls("PUT", "/service_bindings/")) == binds  # never bound again
    delete(api_client, namespace, "instances", "keydb")
    wait_for(lambda: get(api_client, "instances", "keydb", namespace) is None, 30, "the instance to go")
