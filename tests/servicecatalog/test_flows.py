"""The Service Catalog flows end to end: kubectl-style API calls against a real kube-apiserver, the real
controller process, and real brokers over HTTP — the independent second broker (its own process, with
fault injection) and opbroker's own broker.

Every ServiceClass is cluster-scoped and named after its service, so each test gives the second broker's
services names of its own (``renamed``) and cleans up its Broker. The helpers and the ``registered`` fixture are
in ``tests/servicecatalog_support.py``.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import re
import secrets
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from opbroker import osbclient
from opbroker.api.conventions import DEFAULT_NAMESPACE
from tests.brokers.fixture import DB_ASYNC_PLAN, DB_SYNC_PLAN, SecondBroker
from tests.cluster_fixtures import onboard
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
    refused_by_webhook,
    register_broker,
    renamed,
    webhook_serving,
)

pytestmark = pytest.mark.usefixtures("controller")


def test_a_broker_lists_its_services_as_classes_and_marks_removed_ones(
    api_client: client.ApiClient, registered: tuple[str, str], second_broker: SecondBroker
) -> None:
    name, suffix = registered
    db = get(api_client, "serviceclasses", f"second-db-{suffix}")
    assert db is not None and db["brokerName"] == name and db["externalName"] == f"second-db-{suffix}"
    assert {plan["name"] for plan in db["plans"]} == {"sync-small", "async-large"}
    assert db["planUpdatable"] is True and db["bindable"] is True
    broker = get(api_client, "brokers", name)
    assert broker is not None and broker["status"]["serviceClassCount"] == 2

    catalog = renamed(suffix)
    catalog["services"] = [s for s in catalog["services"] if s["name"] != f"second-queue-{suffix}"]
    second_broker.set_catalog(catalog)
    custom(api_client).patch_cluster_custom_object(GROUP, VERSION, "brokers", name, {"spec": {"relistRequests": 1}})

    def queue_removed() -> bool:
        queue = get(api_client, "serviceclasses", f"second-queue-{suffix}") or {}
        return bool((queue.get("status") or {}).get("removedFromBrokerCatalog"))

    def relist_reconciled() -> bool:
        relisted = get(api_client, "brokers", name) or {}
        return (relisted.get("status") or {}).get("reconciledRelistRequests") == 1

    wait_for(queue_removed, 30, "the service gone from the catalog to be marked removed")
    # The classes are written before the Broker's own status: a reader may see the class marked first (CI did).
    wait_for(relist_reconciled, 30, "the Broker's status to count the relist request")
    assert get(api_client, "serviceclasses", f"second-db-{suffix}") is not None


def test_a_broker_without_its_auth_secret_says_so(api_client: client.ApiClient, second_broker: SecondBroker) -> None:
    name = f"nosecret-{secrets.token_hex(3)}"
    custom(api_client).create_cluster_custom_object(
        GROUP,
        VERSION,
        "brokers",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Broker",
            "metadata": {"name": name},
            "spec": {
                "url": second_broker.url,
                "authInfo": {"bearer": {"secretRef": {"namespace": DEFAULT_NAMESPACE, "name": "absent"}}},
            },
        },
    )
    try:
        wait_for(
            lambda: ready(get(api_client, "brokers", name)) == ("False", "ErrorGettingAuthCredentials"), 30, "the error"
        )
        broker = get(api_client, "brokers", name)
        assert broker is not None
        (condition,) = [c for c in broker["status"]["conditions"] if c["type"] == "Ready"]
        assert f"{DEFAULT_NAMESPACE}/absent does not exist" in condition["message"]
    finally:
        custom(api_client).delete_cluster_custom_object(GROUP, VERSION, "brokers", name)


def test_a_missing_parameters_secret_is_named_and_the_instance_goes_on_once_it_exists(
    api_client: client.ApiClient,
    namespace: str,
    registered: tuple[str, str],
    second_broker: SecondBroker,
) -> None:
    """A ``parametersFrom`` Secret that does not exist (yet) is fixed outside the Instance: the condition says it
    does not exist in the namespace (not that a key is missing), nothing is sent, and creating the Secret lets
    the Instance provision by itself — no spec change, and sooner than the 30 s re-check (the Secret's event
    queues it)."""
    _, suffix = registered
    create(
        api_client,
        namespace,
        "instances",
        "Instance",
        "lateparams",
        {
            "serviceClassName": f"second-db-{suffix}",
            "planName": "sync-small",
            "parametersFrom": [{"secretKeyRef": {"name": "late-params", "key": "params"}}],
        },
    )
    wait_for(
        lambda: (ready(get(api_client, "instances", "lateparams", namespace)) or ("", ""))[1] == "ErrorWithParameters",
        30,
        "the missing Secret reported",
    )
    message = (condition(get(api_client, "instances", "lateparams", namespace), "Ready") or {})["message"]
    assert f"Secret 'late-params' does not exist in namespace {namespace}" in message, message
    assert "has no key" not in message
    assert not second_broker.state()["instances"]  # nothing sent meanwhile

    client.CoreV1Api(api_client).create_namespaced_secret(
        namespace, {"metadata": {"name": "late-params"}, "stringData": {"params": json.dumps({"size": 2})}}
    )
    wait_for(
        lambda: ready(get(api_client, "instances", "lateparams", namespace)) == ("True", "Provisioned"),
        20,
        "provisioned once the Secret exists",
    )
    instance = get(api_client, "instances", "lateparams", namespace)
    assert instance is not None and instance["metadata"]["generation"] == 1  # no spec change needed
    held = second_broker.state()["instances"][instance["status"]["externalID"]]
    assert held["parameters"] == {"size": 2}, held


def test_provision_bind_across_namespaces_unbind_deprovision(
    api_client: client.ApiClient,
    namespace: str,
    registered: tuple[str, str],
    second_broker: SecondBroker,
    controller: Process,
) -> None:
    """The seed's whole flow on the synchronous plan, with parameters from a Secret, a binding in another
    namespace, and a deletion held while the binding exists."""
    _, suffix = registered
    core = client.CoreV1Api(api_client)
    core.create_namespaced_secret(
        namespace,
        {"metadata": {"name": "db-params"}, "stringData": {"params": json.dumps({"password": "s3cret-param"})}},
    )
    create(
        api_client,
        namespace,
        "instances",
        "Instance",
        "johnsdb",
        {
            "serviceClassName": f"second-db-{suffix}",  # the broker's name for the service
            "planName": "sync-small",
            "parameters": {"size": 3},
            "parametersFrom": [{"secretKeyRef": {"name": "db-params", "key": "params"}}],
            "shareWith": [f"{namespace}-apps"],  # the binding's namespace: consent to bind from there
        },
    )
    wait_for(
        lambda: ready(get(api_client, "instances", "johnsdb", namespace)) == ("True", "Provisioned"), 30, "provisioned"
    )
    instance = get(api_client, "instances", "johnsdb", namespace)
    assert instance is not None
    external_id = instance["status"]["externalID"]
    held = second_broker.state()["instances"][external_id]
    assert json.dumps(held).count("s3cret-param") == 1  # the Secret's parameter reached the broker...
    assert "s3cret-param" not in json.dumps(instance)  # ...and nothing of it is in the Instance

    other = f"{namespace}-apps"
    core.create_namespace({"metadata": {"name": other}})
    onboard(api_client, other)
    try:
        create(
            api_client,
            other,
            "bindings",
            "Binding",
            "johnsbinding",
            {"instanceRef": {"name": "johnsdb", "namespace": namespace}, "secretName": "johnsecret"},
        )
        wait_for(
            lambda: ready(get(api_client, "bindings", "johnsbinding", other)) == ("True", "InjectedBindResult"),
            30,
            "bound",
        )
        secret = core.read_namespaced_secret("johnsecret", other)
        credentials = {k: base64.b64decode(v).decode() for k, v in secret.data.items()}
        assert set(credentials) >= {"uri", "username", "password"}
        binding = get(api_client, "bindings", "johnsbinding", other)
        assert credentials["password"] not in json.dumps(binding)
        events = core.list_namespaced_event(other).items + core.list_namespaced_event(namespace).items
        assert all(credentials["password"] not in (e.message or "") for e in events)
        log = controller.log.read_text()
        assert log, "the controller's log is empty: the check below would prove nothing"
        assert credentials["password"] not in log and "s3cret-param" not in log

        delete(api_client, namespace, "instances", "johnsdb")
        wait_for(
            lambda: (
                ready(get(api_client, "instances", "johnsdb", namespace))
                == ("False", "DeletionBlockedByExistingBindings")
            ),
            30,
            "the deletion to be held",
        )
        blocked = get(api_client, "instances", "johnsdb", namespace)
        assert blocked is not None
        (condition,) = [c for c in blocked["status"]["conditions"] if c["type"] == "Ready"]
        assert f"{other}/johnsbinding" in condition["message"]
        assert external_id in second_broker.state()["instances"]

        delete(api_client, other, "bindings", "johnsbinding")
        wait_for(lambda: get(api_client, "bindings", "johnsbinding", other) is None, 30, "the binding to go")
        with pytest.raises(ApiException) as gone:
            core.read_namespaced_secret("johnsecret", other)
        assert gone.value.status == 404
        wait_for(lambda: get(api_client, "instances", "johnsdb", namespace) is None, 30, "the instance to go")
        assert second_broker.state()["instances"] == {}
        methods = [(r["method"], r["path"].count("/service_bindings/")) for r in second_broker.requests()]
        assert ("DELETE", 1) in methods and ("DELETE", 0) in methods
    finally:
        core.delete_namespace(other)


def test_async_provision_is_polled_honouring_retry_after(
    api_client: client.ApiClient, namespace: str, registered: tuple[str, str], second_broker: SecondBroker
) -> None:
    """The broker's Retry-After (3 s) replaces the controller's own backoff (1 s, then 2 s): no poll comes sooner
    after an answer carrying it (a lower bound only, which a loaded machine cannot break)."""
    _, suffix = registered
    second_broker.settings(async_polls=2, retry_after=3)
    create(
        api_client,
        namespace,
        "instances",
        "Instance",
        "bigdb",
        {"serviceClassName": f"second-db-{suffix}", "planName": "async-large"},
    )
    wait_for(
        lambda: ready(get(api_client, "instances", "bigdb", namespace)) == ("True", "Provisioned"), 60, "provisioned"
    )
    polls = [r for r in second_broker.requests() if r["path"].endswith("/last_operation")]
    assert len(polls) >= 3  # in progress twice, then succeeded
    gaps = [later["at"] - earlier["at"] for earlier, later in itertools.pairwise(polls)]
    assert min(gaps[:2]) >= 2.9, gaps  # both answers in progress carried Retry-After: 3
    puts = [r for r in second_broker.requests() if r["method"] == "PUT"]
    assert len(puts) == 1 and puts[0]["body"]["plan_id"] == DB_ASYNC_PLAN  # no second operation meanwhile
    delete(api_client, namespace, "instances", "bigdb")
    wait_for(lambda: get(api_client, "instances", "bigdb", namespace) is None, 60, "deprovisioned")


def test_a_provision_answered_500_is_mitigated_then_retried(
    api_client: client.ApiClient, namespace: str, registered: tuple[str, str], second_broker: SecondBroker
) -> None:
    _, suffix = registered
    second_broker.fail("PUT", r"^/v2/service_instances/[^/]+$", 500, body='{"description": "boom"}')
    create(
        api_client,
        namespace,
        "instances",
        "Instance",
        "flaky",
        {"serviceClassName": f"second-db-{suffix}", "planName": "sync-small"},
    )
    wait_for(
        lambda: ready(get(api_client, "instances", "flaky", namespace)) == ("True", "Provisioned"), 60, "provisioned"
    )
    calls = [
        r["method"]
        for r in second_broker.requests()
        if "/service_bindings/" not in r["path"] and r["path"] != "/v2/catalog"
    ]
    assert calls[:3] == ["PUT", "DELETE", "PUT"]  # the failed PUT, orphan mitigation, the retry
    delete(api_client, namespace, "instances", "flaky")
    wait_for(lambda: get(api_client, "instances", "flaky", namespace) is None, 60, "deprovisioned")


def test_a_refused_provision_fails_until_the_spec_changes(
    api_client: client.ApiClient, namespace: str, registered: tuple[str, str], second_broker: SecondBroker
) -> None:
    _, suffix = registered
    second_broker.fail("PUT", r"^/v2/service_instances/[^/]+$", 400, body='{"description": "size too large"}')
    create(
        api_client,
        namespace,
        "instances",
        "Instance",
        "refused",
        {"serviceClassName": f"second-db-{suffix}", "planName": "sync-small", "parameters": {"size": 99}},
    )

    def failed() -> bool:
        found = get(api_client, "instances", "refused", namespace) or {}
        return any(
            c["type"] == "Failed" and c["status"] == "True" for c in (found.get("status") or {}).get("conditions") or []
        )

    wait_for(failed, 30, "the instance to be Failed")
    assert [r["method"] for r in second_broker.requests() if r["method"] == "PUT"] == ["PUT"]  # no retries
    custom(api_client).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "instances", "refused", {"spec": {"parameters": {"size": 1}}}
    )
    wait_for(
        lambda: ready(get(api_client, "instances", "refused", namespace)) == ("True", "Provisioned"), 30, "provisioned"
    )
    delete(api_client, namespace, "instances", "refused")
    wait_for(lambda: get(api_client, "instances", "refused", namespace) is None, 30, "deprovisioned")


def test_a_deprovision_answered_410_is_done(
    api_client: client.ApiClient, namespace: str, registered: tuple[str, str], second_broker: SecondBroker
) -> None:
    _, suffix = registered
    create(
        api_client,
        namespace,
        "instances",
        "Instance",
        "vanished",
        {"serviceClassName": f"second-queue-{suffix}", "planName": "standard"},
    )
    wait_for(
        lambda: ready(get(api_client, "instances", "vanished", namespace)) == ("True", "Provisioned"), 30, "provisioned"
    )
    second_broker.fail("DELETE", r"^/v2/service_instances/[^/]+$", 410, body="{}")
    delete(api_client, namespace, "instances", "vanished")
    wait_for(lambda: get(api_client, "instances", "vanished", namespace) is None, 30, "the instance to go")


def test_opbrokers_own_broker_through_the_service_catalog(
    api_client: client.ApiClient, namespace: str, osb_url: tuple[str, str], demo_catalog: list[dict[str, Any]]
) -> None:
    """opbroker consumed like any broker: its catalog listed, an instance provisioned asynchronously by the
    demo operator, an asynchronous binding's credentials fetched into a Secret, then all of it undone."""
    url, password = osb_url
    core = client.CoreV1Api(api_client)
    name = f"opbroker-{secrets.token_hex(3)}"
    stack = contextlib.ExitStack()
    secret_ref = stack.enter_context(
        auth_secret(api_client, f"{name}-auth", {"username": "platform", "password": password})
    )
    custom(api_client).create_cluster_custom_object(
        GROUP,
        VERSION,
        "brokers",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Broker",
            "metadata": {"name": name},
            "spec": {"url": url, "authInfo": {"basic": {"secretRef": secret_ref}}},
        },
    )
    try:
        wait_for(lambda: ready(get(api_client, "brokers", name)) == ("True", "FetchedCatalog"), 30, "the catalog")
        demo = get(api_client, "serviceclasses", "demo-db")
        # Other tests add plans to the same service in the session's catalog: only "small" is certain.
        assert demo is not None and demo["brokerName"] == name and "small" in [p["name"] for p in demo["plans"]]
        create(
            api_client,
            namespace,
            "instances",
            "Instance",
            "db",
            {"serviceClassName": "demo-db", "planName": "small", "parameters": {"version": "16"}},
        )
        wait_for(
            lambda: ready(get(api_client, "instances", "db", namespace)) == ("True", "Provisioned"), 90, "provisioned"
        )
        create(api_client, namespace, "bindings", "Binding", "app", {"instanceRef": {"name": "db"}})
        wait_for(
            lambda: ready(get(api_client, "bindings", "app", namespace)) == ("True", "InjectedBindResult"), 90, "bound"
        )
        secret = core.read_namespaced_secret("app", namespace)  # secretName defaults to the binding's name
        assert secret.type == "servicecatalog.k8s.io/binding-credentials" and secret.data
        delete(api_client, namespace, "bindings", "app")
        wait_for(lambda: get(api_client, "bindings", "app", namespace) is None, 60, "unbound")
        delete(api_client, namespace, "instances", "db")
        wait_for(lambda: get(api_client, "instances", "db", namespace) is None, 90, "deprovisioned")
    finally:
        custom(api_client).delete_cluster_custom_object(GROUP, VERSION, "brokers", name)
        with contextlib.suppress(ApiException):
            custom(api_client).delete_cluster_custom_object(GROUP, VERSION, "serviceclasses", "demo-db")
        stack.close()


def deployment(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "example.invalid/app:1"}]},
            },
        },
    }


def projected(api_client: client.ApiClient, namespace: str, name: str, secret: str) -> bool:
    found = client.AppsV1Api(api_client).read_namespaced_deployment(name, namespace)
    spec = found.spec.template.spec
    volumes = [v.secret.secret_name for v in spec.volumes or [] if v.secret]
    env = [e.value_from.secret_key_ref.name for e in spec.containers[0].env or [] if e.value_from]
    return secret in volumes and env.count(secret) >= 3


def test_a_binding_projects_its_secret_into_selected_workloads(
    api_client: client.ApiClient, namespace: str, registered: tuple[str, str]
) -> None:
    """The seed's pod injection by label selector, as servicebinding.io workload projection: selected
    Deployments (also one created later) get the Secret as a volume and env vars; unbinding withdraws it."""
    _, suffix = registered
    apps = client.AppsV1Api(api_client)
    apps.create_namespaced_deployment(namespace, deployment("web", {"role": "frontend"}))
    apps.create_namespaced_deployment(namespace, deployment("batch", {"role": "worker"}))
    create(
        api_client,
        namespace,
        "instances",
        "Instance",
        "pdb",
        {"serviceClassName": f"second-db-{suffix}", "planName": "sync-small"},
    )
    create(
        api_client,
        namespace,
        "bindings",
        "Binding",
        "frontend",
        {"instanceRef": {"name": "pdb"}, "application": {"selector": {"matchLabels": {"role": "frontend"}}}},
    )
    wait_for(
        lambda: ready(get(api_client, "bindings", "frontend", namespace)) == ("True", "InjectedBindResult"), 30, "bound"
    )
    wait_for(lambda: projected(api_client, namespace, "web", "frontend"), 30, "the projection into web")
    assert not projected(api_client, namespace, "batch", "frontend")

    apps.create_namespaced_deployment(namespace, deployment("web2", {"role": "frontend"}))
    wait_for(lambda: projected(api_client, namespace, "web2", "frontend"), 30, "the projection into a later workload")

    delete(api_client, namespace, "bindings", "frontend")
    wait_for(lambda: get(api_client, "bindings", "frontend", namespace) is None, 30, "unbound")
    assert not projected(api_client, namespace, "web", "frontend")
    assert not projected(api_client, namespace, "web2", "frontend")
    delete(api_client, namespace, "instances", "pdb")
    wait_for(lambda: get(api_client, "instances", "pdb", namespace) is None, 30, "deprovisioned")


def test_the_admission_webhook_refuses_deleting_an_instance_with_bindings(
    api_client: client.ApiClient, namespace: str, registered: tuple[str, str]
) -> None:
    """With the webhook registered, the API server itself refuses the DELETE (the seed's behaviour), naming
    the bindings; nothing is marked for deletion. Once they are gone, the same DELETE goes through."""
    _, suffix = registered
    with webhook_serving(api_client, DEFAULT_NAMESPACE):
        create(
            api_client,
            namespace,
            "instances",
            "Instance",
            "guarded",
            {"serviceClassName": f"second-db-{suffix}", "planName": "sync-small"},
        )
        create(api_client, namespace, "bindings", "Binding", "user1", {"instanceRef": {"name": "guarded"}})
        wait_for(
            lambda: ready(get(api_client, "bindings", "user1", namespace)) == ("True", "InjectedBindResult"),
            30,
            "bound",
        )

        # Registration and the index take a moment: a dry run (through admission, changing nothing) says when.
        wait_for(lambda: refused_by_webhook(api_client, namespace, "guarded"), 20, "the webhook to refuse")
        message = refused_by_webhook(api_client, namespace, "guarded", dry_run=False)
        assert message is not None and f"{namespace}/user1" in message and "delete them first" in message
        still = get(api_client, "instances", "guarded", namespace)
        assert still is not None and "deletionTimestamp" not in still["metadata"]

        delete(api_client, namespace, "bindings", "user1")
        wait_for(lambda: get(api_client, "bindings", "user1", namespace) is None, 30, "unbound")
        # The webhook answers from its watch of Bindings: it lets the deletion through once that saw this one go.
        wait_for(lambda: not refused_by_webhook(api_client, namespace, "guarded"), 10, "the webhook to allow")
        delete(api_client, namespace, "instances", "guarded")
        wait_for(lambda: get(api_client, "instances", "guarded", namespace) is None, 30, "deprovisioned")


def test_a_broker_behind_tls_with_a_private_ca(api_client: client.ApiClient, second_broker_tls: SecondBroker) -> None:
    """Real brokers sit behind a private CA: with `caBundle` the catalog is fetched; without it the Broker
    says the certificate could not be verified."""
    assert second_broker_tls.ca_pem is not None
    suffix = secrets.token_hex(3)
    second_broker_tls.set_catalog(renamed(suffix))
    stack = contextlib.ExitStack()
    credentials = {"username": second_broker_tls.username, "password": second_broker_tls.password}
    auth = {"basic": {"secretRef": stack.enter_context(auth_secret(api_client, f"tls-auth-{suffix}", credentials))}}
    trusted, untrusted = f"tls-{suffix}", f"untrusted-{suffix}"
    ca = base64.b64encode(second_broker_tls.ca_pem.encode()).decode()
    register_broker(api_client, trusted, {"url": second_broker_tls.url, "authInfo": auth, "caBundle": ca})
    register_broker(api_client, untrusted, {"url": second_broker_tls.url, "authInfo": auth})
    try:
        wait_for(
            lambda: ready(get(api_client, "brokers", trusted)) == ("True", "FetchedCatalog"), 30, "the catalog over TLS"
        )
        wait_for(
            lambda: ready(get(api_client, "brokers", untrusted)) == ("False", "ErrorFetchingCatalog"), 30, "the refusal"
        )
        broker = get(api_client, "brokers", untrusted)
        assert broker is not None
        (condition,) = [c for c in broker["status"]["conditions"] if c["type"] == "Ready"]
        assert "CERTIFICATE_VERIFY_FAILED" in condition["message"] or "certificate" in condition["message"].lower()
        assert second_broker_tls.password not in json.dumps(broker)
    finally:
        for name in (trusted, untrusted):
            custom(api_client).delete_cluster_custom_object(GROUP, VERSION, "brokers", name)
        for service in ("second-db", "second-queue"):
            with contextlib.suppress(ApiException):
                custom(api_client).delete_cluster_custom_object(GROUP, VERSION, "serviceclasses", f"{service}-{suffix}")
        stack.close()


def test_a_broker_with_a_bearer_token(api_client: client.ApiClient, second_broker_token: SecondBroker) -> None:
    suffix = secrets.token_hex(3)
    second_broker_token.set_catalog(renamed(suffix))
    stack = contextlib.ExitStack()
    secret_ref = stack.enter_context(
        auth_secret(api_client, f"token-auth-{suffix}", {"token": second_broker_token.token})
    )
    name = f"token-{suffix}"
    register_broker(
        api_client, name, {"url": second_broker_token.url, "authInfo": {"bearer": {"secretRef": secret_ref}}}
    )
    try:
        wait_for(lambda: ready(get(api_client, "brokers", name)) == ("True", "FetchedCatalog"), 30, "the catalog")
        catalog_calls = [r for r in second_broker_token.requests() if r["path"] == "/v2/catalog"]
        assert catalog_calls and all(r["auth"] == "bearer" for r in catalog_calls)
    finally:
        custom(api_client).delete_cluster_custom_object(GROUP, VERSION, "brokers", name)
        for service in ("second-db", "second-queue"):
            with contextlib.suppress(ApiException):
                custom(api_client).delete_cluster_custom_object(GROUP, VERSION, "serviceclasses", f"{service}-{suffix}")
        stack.close()


# --- the flows the issue names one by one: faults, time-outs, updates, one operation at a time, relisting ----

INSTANCE_PATH = r"^/v2/service_instances/[^/]+$"


def instance_calls(broker: SecondBroker) -> list[str]:
    """The methods of the instance requests the broker received (no catalog, polls or bindings), in order."""
    return [r["method"] for r in broker.requests() if re.search(INSTANCE_PATH, r["path"])]


def settled(api_client: client.ApiClient, namespace: str, name: str, reason: str) -> bool:
    found = get(api_client, "instances", name, namespace) or {}
    status = found.get("status") or {}
    return (
        ready(found) == ("True", reason)
        and status.get("observedGeneration") == found["metadata"]["generation"]
        and not status.get("asyncOpInProgress")
    )


def test_a_malformed_provision_answer_is_mitigated_then_retried(
    api_client: client.ApiClient, namespace: str, registered: tuple[str, str], second_broker: SecondBroker
) -> None:
    """A 201 whose body is not JSON: the outcome is unknown, so orphan mitigation (a deprovision) comes first,
    then the provision is retried with the same instance id."""
    _, suffix = registered
    second_broker.fail("PUT", INSTANCE_PATH, 201, body='{"dashboard_url": ')
    create(
        api_client,
        namespace,
        "instances",
        "Instance",
        "garbled",
        {"serviceClassName": f"second-db-{suffix}", "planName": "sync-small"},
    )
    wait_for(lambda: settled(api_client, namespace, "garbled", "Provisioned"), 90, "provisioned")
    assert instance_calls(second_broker)[:3] == ["PUT", "DELETE", "PUT"]
    instance = get(api_client, "instances", "garbled", namespace)
    assert instance is not None
    external_id = instance["status"]["externalID"]
    assert {r["path"] for r in second_broker.requests() if r["method"] == "PUT"} == {
        f"/v2/service_instances/{external_id}"
    }
    assert list(second_broker.state()["instances"]) == [external_id]
    delete(api_client, namespace, "instances", "garbled")
    wait_for(lambda: get(api_client, "instances", "garbled", namespace) is None, 60, "deprovisioned")


def test_a_provision_that_times_out_is_mitigated_then_retried(
    api_client: client.ApiClient, namespace: str, registered: tuple[str, str], second_broker: SecondBroker
) -> None:
    """A broker slower than the request time-out: the provision's answer is lost, though the broker goes on
    and creates the instance. Orphan mitigation deprovisions, the retry provisions with the same id, and the
    broker ends up holding exactly one instance."""
    _, suffix = registered
    timeout = osbclient.Broker(url="http://broker.invalid").timeout
    second_broker.fail("PUT", INSTANCE_PATH, None, delay=timeout + 5)  # then the real answer, too late
    create(
        api_client,
        namespace,
        "instances",
        "Instance",
        "slow",
        {"serviceClassName": f"second-db-{suffix}", "planName": "sync-small"},
    )
    wait_for(lambda: settled(api_client, namespace, "slow", "Provisioned"), timeout + 120, "provisioned")
    assert instance_calls(second_broker)[:3] == ["PUT", "DELETE", "PUT"]
    instance = get(api_client, "instances", "slow", namespace)
    assert instance is not None
    external_id = instance["status"]["externalID"]
    wait_for(
        lambda: all("status" in r for r in second_broker.requests()),
        timeout + 30,
        "the late answer to the first PUT",
    )
    assert list(second_broker.state()["instances"]) == [external_id]
    delete(api_client, namespace, "instances", "slow")
    wait_for(lambda: get(api_client, "instances", "slow", namespace) is None, 60, "deprovisioned")
    assert second_broker.state()["instances"] == {}


def test_an_instance_is_updated_by_changing_its_parameters_then_its_plan(
    api_client: client.ApiClient, namespace: str, registered: tuple[str, str], second_broker: SecondBroker
) -> None:
    _, suffix = registered
    create(
        api_client,
        namespace,
        "instances",
        "Instance",
        "growing",
        {"serviceClassName": f"second-db-{suffix}", "planName": "sync-small", "parameters": {"size": 1}},
    )
    wait_for(lambda: settled(api_client, namespace, "growing", "Provisioned"), 60, "provisioned")
    instance = get(api_client, "instances", "growing", namespace)
    assert instance is not None
    external_id, first_checksum = instance["status"]["externalID"], instance["status"]["externalProperties"]
    second_broker.clear_requests()

    custom(api_client).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "instances", "growing", {"spec": {"parameters": {"size": 2}}}
    )
    wait_for(lambda: settled(api_client, namespace, "growing", "InstanceUpdatedSuccessfully"), 60, "the update")
    (patch,) = [r for r in second_broker.requests() if r["method"] == "PATCH"]
    assert patch["path"] == f"/v2/service_instances/{external_id}"
    assert patch["body"]["parameters"] == {"size": 2} and patch["body"].get("plan_id") is None  # same plan
    assert second_broker.state()["instances"][external_id]["parameters"] == {"size": 2}
    updated = get(api_client, "instances", "growing", namespace)
    assert updated is not None and updated["status"]["externalProperties"] != first_checksum
    assert instance_calls(second_broker) == ["PATCH"]  # an update, not a new provision

    second_broker.clear_requests()
    custom(api_client).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "instances", "growing", {"spec": {"planName": "async-large"}}
    )

    def on_the_new_plan() -> bool:
        found = get(api_client, "instances", "growing", namespace) or {}
        properties = (found.get("status") or {}).get("externalProperties") or {}
        return settled(api_client, namespace, "growing", "InstanceUpdatedSuccessfully") and (
            properties.get("planName") == "async-large"
        )

    wait_for(on_the_new_plan, 90, "the plan change")
    (patch,) = [r for r in second_broker.requests() if r["method"] == "PATCH"]
    assert patch["body"]["plan_id"] == DB_ASYNC_PLAN and patch["query"].get("accepts_incomplete") == "true"
    assert any(r["path"].endswith("/last_operation") for r in second_broker.requests())  # 202, then polled
    assert second_broker.state()["instances"][external_id]["plan_id"] == DB_ASYNC_PLAN
    delete(api_client, namespace, "instances", "growing")
    wait_for(lambda: get(api_client, "instances", "growing", namespace) is None, 90, "deprovisioned")


def test_nothing_else_is_sent_while_an_operation_is_in_flight(
    api_client: client.ApiClient, namespace: str, registered: tuple[str, str], second_broker: SecondBroker
) -> None:
    """A parameter change and a deletion arriving while an asynchronous provision is being polled wait for
    it: the broker sees no PATCH or DELETE before the provision's last poll."""
    _, suffix = registered
    second_broker.settings(async_polls=6, retry_after=1)
    create(
        api_client,
        namespace,
        "instances",
        "Instance",
        "busy",
        {"serviceClassName": f"second-db-{suffix}", "planName": "async-large"},
    )
    wait_for(
        lambda: ((get(api_client, "instances", "busy", namespace) or {}).get("status") or {}).get("asyncOpInProgress"),
        60,
        "the provision in flight",
    )
    custom(api_client).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "instances", "busy", {"spec": {"parameters": {"size": 5}}}
    )
    delete(api_client, namespace, "instances", "busy")
    (held,) = second_broker.state()["instances"].values()
    assert held["state"] == "in progress"  # both changes really arrived mid-operation
    wait_for(lambda: get(api_client, "instances", "busy", namespace) is None, 120, "deprovisioned")
    sent = [r for r in second_broker.requests() if r["path"] != "/v2/catalog"]
    provision_polls = [
        i
        for i, r in enumerate(sent)
        if r["path"].endswith("/last_operation") and r["query"].get("operation", "").startswith("provision")
    ]
    others = [i for i, r in enumerate(sent) if r["method"] in ("PATCH", "DELETE")]
    assert len(provision_polls) >= 7 and others  # six "in progress", then "succeeded"
    assert max(provision_polls) < min(others)
    assert [r["method"] for r in sent if r["method"] == "PUT"] == ["PUT"]
    assert second_broker.state()["instances"] == {}


def test_an_async_provision_past_the_plans_maximum_polling_duration_is_failed_and_mitigated(
    api_client: client.ApiClient, namespace: str, registered: tuple[str, str], second_broker: SecondBroker
) -> None:
    """The plan's OSB maximum_polling_duration bounds the polling: past it the provision is marked failed
    (Failed=True, AsyncOperationTimedOut), orphan mitigation deprovisions it, and nothing is retried until
    the spec changes."""
    name, suffix = registered
    catalog = renamed(suffix)
    (db,) = [s for s in catalog["services"] if s["name"] == f"second-db-{suffix}"]
    (plan,) = [p for p in db["plans"] if p["id"] == DB_ASYNC_PLAN]
    plan["maximum_polling_duration"] = 4
    second_broker.set_catalog(catalog)
    custom(api_client).patch_cluster_custom_object(GROUP, VERSION, "brokers", name, {"spec": {"relistRequests": 1}})

    def limit_listed() -> bool:
        found = get(api_client, "serviceclasses", f"second-db-{suffix}") or {}
        return any(p.get("maximumPollingDuration") == 4 for p in found.get("plans") or [])

    wait_for(limit_listed, 30, "the plan's maximum polling duration in its class")
    second_broker.settings(async_polls=100_000, retry_after=1)
    create(
        api_client,
        namespace,
        "instances",
        "Instance",
        "stuck",
        {"serviceClassName": f"second-db-{suffix}", "planName": "async-large"},
    )
    wait_for(
        lambda: ((get(api_client, "instances", "stuck", namespace) or {}).get("status") or {}).get("asyncOpInProgress"),
        60,
        "the provision in flight",
    )
    second_broker.settings(async_polls=1)  # operations from now on (the mitigation's deprovision) end soon

    def failed_and_mitigated() -> bool:
        found = get(api_client, "instances", "stuck", namespace)
        status = (found or {}).get("status") or {}
        failed = condition(found, "Failed") or {}
        return (
            failed.get("status") == "True"
            and failed.get("reason") == "AsyncOperationTimedOut"
            and not status.get("orphanMitigationInProgress")
            and status.get("deprovisionStatus") == "Succeeded"
        )

    wait_for(failed_and_mitigated, 90, "the provision failed and mitigated")
    assert second_broker.state()["instances"] == {}  # the deprovision reached the broker
    assert instance_calls(second_broker) == ["PUT", "DELETE"]
    stuck = get(api_client, "instances", "stuck", namespace)
    # Failed for good: the controller's last word says so (no provision is retried without a spec change — the
    # plan's decision, table-tested in test_plans.py::…final_mitigation…).
    assert (
        ready(stuck) == ("False", "OrphanMitigationSuccessful")
        and "stays failed" in condition(stuck, "Ready")["message"]
    )  # type: ignore[index]
    assert instance_calls(second_broker) == ["PUT", "DELETE"]

    custom(api_client).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "instances", "stuck", {"spec": {"parameters": {"size": 2}}}
    )
    wait_for(lambda: settled(api_client, namespace, "stuck", "Provisioned"), 60, "provisioned after the spec change")
    assert condition(get(api_client, "instances", "stuck", namespace), "Failed") is None
    delete(api_client, namespace, "instances", "stuck")
    wait_for(lambda: get(api_client, "instances", "stuck", namespace) is None, 60, "deprovisioned")


def test_a_relist_on_an_interval_marks_a_gone_service_removed_and_its_instances_keep_working(
    api_client: client.ApiClient, namespace: str, registered: tuple[str, str], second_broker: SecondBroker
) -> None:
    """relistDuration alone (no relistRequests, no spec change) picks up a changed catalog: a new service gets
    its class, a gone one is marked removed. Its existing instance stays Ready, its binding bound, and both
    are unbound and deprovisioned through the broker; a new Instance of it is refused until it returns."""
    name, suffix = registered
    core = client.CoreV1Api(api_client)
    create(
        api_client,
        namespace,
        "instances",
        "Instance",
        "kept",
        {"serviceClassName": f"second-db-{suffix}", "planName": "sync-small"},
    )
    create(api_client, namespace, "bindings", "Binding", "kept-app", {"instanceRef": {"name": "kept"}})
    wait_for(
        lambda: ready(get(api_client, "bindings", "kept-app", namespace)) == ("True", "InjectedBindResult"), 60, "bound"
    )
    custom(api_client).patch_cluster_custom_object(GROUP, VERSION, "brokers", name, {"spec": {"relistDuration": "2s"}})

    def broker_settled() -> dict[str, Any] | None:
        found = get(api_client, "brokers", name) or {}
        status = found.get("status") or {}
        return found if status.get("observedGeneration") == found["metadata"]["generation"] else None

    generation = wait_for(broker_settled, 30, "the relist interval taken")["metadata"]["generation"]

    catalog = renamed(suffix)
    (queue,) = [s for s in catalog["services"] if s["name"] == f"second-queue-{suffix}"]
    cache = json.loads(json.dumps(queue))
    cache.update(name=f"second-cache-{suffix}", id=f"cache-{suffix}")
    for plan in cache["plans"]:
        plan["id"] = f"cache-{suffix}-{plan['name']}"
    without_db = [s for s in catalog["services"] if s["name"] != f"second-db-{suffix}"] + [cache]
    second_broker.set_catalog({"services": without_db})
    try:
        wait_for(lambda: get(api_client, "serviceclasses", f"second-cache-{suffix}") is not None, 60, "the new service")

        def db_removed() -> bool:
            found = get(api_client, "serviceclasses", f"second-db-{suffix}") or {}
            return bool((found.get("status") or {}).get("removedFromBrokerCatalog"))

        wait_for(db_removed, 30, "the gone service marked removed")
        broker = get(api_client, "brokers", name)
        assert broker is not None and broker["metadata"]["generation"] == generation  # no spec change did it
        assert not broker["status"].get("reconciledRelistRequests")  # nor a relist request

        # The existing instance and binding keep working; a new instance is refused.
        create(
            api_client,
            namespace,
            "instances",
            "Instance",
            "late",
            {"serviceClassName": f"second-db-{suffix}", "planName": "sync-small"},
        )
        wait_for(
            lambda: (
                ready(get(api_client, "instances", "late", namespace)) == ("False", "ReferencesRemovedServiceClass")
            ),
            30,
            "the new instance refused",
        )
        assert ready(get(api_client, "instances", "kept", namespace)) == ("True", "Provisioned")
        assert ready(get(api_client, "bindings", "kept-app", namespace)) == ("True", "InjectedBindResult")
        assert core.read_namespaced_secret("kept-app", namespace).data
        assert instance_calls(second_broker) == ["PUT"]  # the kept instance's provision only

        second_broker.clear_requests()
        delete(api_client, namespace, "bindings", "kept-app")
        wait_for(lambda: get(api_client, "bindings", "kept-app", namespace) is None, 60, "unbound")
        delete(api_client, namespace, "instances", "kept")
        wait_for(lambda: get(api_client, "instances", "kept", namespace) is None, 60, "deprovisioned")
        deletes = [r["path"].count("/service_bindings/") for r in second_broker.requests() if r["method"] == "DELETE"]
        assert deletes == [1, 0]  # unbind, then deprovision, through the broker
        assert second_broker.state() == {"instances": {}, "bindings": {}}

        # The service returns: its class is unmarked and the waiting instance is provisioned.
        second_broker.set_catalog(catalog)
        wait_for(lambda: settled(api_client, namespace, "late", "Provisioned"), 60, "the returned service used")
        assert not db_removed()
        delete(api_client, namespace, "instances", "late")
        wait_for(lambda: get(api_client, "instances", "late", namespace) is None, 60, "deprovisioned")
    finally:
        with contextlib.suppress(ApiException):
            custom(api_client).delete_cluster_custom_object(GROUP, VERSION, "serviceclasses", f"second-cache-{suffix}")


def test_an_async_bind_the_broker_fails_is_mitigated_and_stays_failed(
    api_client: client.ApiClient, namespace: str, registered: tuple[str, str], second_broker: SecondBroker
) -> None:
    """A bind whose last_operation answers failed: Failed=True at once, orphan mitigation unbinds it at the
    broker, no Secret is left, and nothing is retried until the Binding's spec changes."""
    _, suffix = registered
    second_broker.settings(async_polls=1)
    create(
        api_client,
        namespace,
        "instances",
        "Instance",
        "fbdb",
        {"serviceClassName": f"second-db-{suffix}", "planName": "async-large"},
    )
    wait_for(lambda: settled(api_client, namespace, "fbdb", "Provisioned"), 60, "provisioned")
    second_broker.settings(failed_operations={DB_ASYNC_PLAN: ["bind"]})
    create(api_client, namespace, "bindings", "Binding", "doomed", {"instanceRef": {"name": "fbdb"}})

    def failed_and_mitigated() -> bool:
        found = get(api_client, "bindings", "doomed", namespace)
        status = (found or {}).get("status") or {}
        failed = condition(found, "Failed") or {}
        return (
            failed.get("status") == "True"
            and failed.get("reason") == "BindCallFailed"
            and not status.get("orphanMitigationInProgress")
            and status.get("unbindStatus") == "Succeeded"
        )

    wait_for(failed_and_mitigated, 60, "the bind failed and mitigated")

    def binds() -> list[str]:
        return [r["method"] for r in second_broker.requests() if re.search(r"/service_bindings/[^/]+$", r["path"])]

    assert binds() == ["PUT", "DELETE"]
    assert second_broker.state()["bindings"] == {}
    with pytest.raises(ApiException) as gone:
        client.CoreV1Api(api_client).read_namespaced_secret("doomed", namespace)
    assert gone.value.status == 404
    # Failed for good: the controller's last word says so (no bind is retried without a spec change — the plan's
    # decision, table-tested in test_plans.py::…final_mitigation…).
    doomed = get(api_client, "bindings", "doomed", namespace)
    assert (
        ready(doomed) == ("False", "OrphanMitigationSuccessful")
        and "stays failed" in condition(doomed, "Ready")["message"]
    )  # type: ignore[index]
    assert binds() == ["PUT", "DELETE"]

    second_broker.settings(failed_operations={})
    custom(api_client).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "bindings", "doomed", {"spec": {"parameters": {"role": "reader"}}}
    )
    wait_for(
        lambda: ready(get(api_client, "bindings", "doomed", namespace)) == ("True", "InjectedBindResult"), 60, "bound"
    )
    assert condition(get(api_client, "bindings", "doomed", namespace), "Failed") is None
    delete(api_client, namespace, "bindings", "doomed")
    wait_for(lambda: get(api_client, "bindings", "doomed", namespace) is None, 60, "unbound")
    delete(api_client, namespace, "instances", "fbdb")
    wait_for(lambda: get(api_client, "instances", "fbdb", namespace) is None, 60, "deprovisioned")


def test_an_async_provision_the_broker_fails_is_mitigated_and_stays_failed(
    api_client: client.ApiClient, namespace: str, registered: tuple[str, str], second_broker: SecondBroker
) -> None:
    """A provision whose last_operation answers failed: Failed=True (ProvisionCallFailed) at once, orphan
    mitigation deprovisions it at the broker, and it is not provisioned again until the spec changes."""
    _, suffix = registered
    second_broker.settings(async_polls=1, failed_operations={DB_ASYNC_PLAN: ["provision"]})
    create(
        api_client,
        namespace,
        "instances",
        "Instance",
        "broken",
        {"serviceClassName": f"second-db-{suffix}", "planName": "async-large"},
    )

    def failed_and_mitigated() -> bool:
        found = get(api_client, "instances", "broken", namespace)
        status = (found or {}).get("status") or {}
        failed = condition(found, "Failed") or {}
        return (
            failed.get("status") == "True"
            and failed.get("reason") == "ProvisionCallFailed"
            and not status.get("orphanMitigationInProgress")
            and status.get("deprovisionStatus") == "Succeeded"
        )

    wait_for(failed_and_mitigated, 60, "the provision failed and mitigated")
    assert instance_calls(second_broker) == ["PUT", "DELETE"]
    assert second_broker.state()["instances"] == {}
    # Failed for good: the controller's last word says so (no provision is retried without a spec change — the
    # plan's decision, table-tested in test_plans.py::…final_mitigation…).
    broken = get(api_client, "instances", "broken", namespace)
    assert (
        ready(broken) == ("False", "OrphanMitigationSuccessful")
        and "stays failed" in condition(broken, "Ready")["message"]
    )  # type: ignore[index]
    assert instance_calls(second_broker) == ["PUT", "DELETE"]

    second_broker.settings(failed_operations={})
    custom(api_client).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "instances", "broken", {"spec": {"parameters": {"size": 2}}}
    )
    wait_for(lambda: settled(api_client, namespace, "broken", "Provisioned"), 60, "provisioned after the spec change")
    delete(api_client, namespace, "instances", "broken")
    wait_for(lambda: get(api_client, "instances", "broken", namespace) is None, 60, "deprovisioned")


def test_an_instance_whose_plan_left_the_catalog_keeps_working_and_is_deprovisioned(
    api_client: client.ApiClient, namespace: str, registered: tuple[str, str], second_broker: SecondBroker
) -> None:
    """A relist drops the plan an instance is on (the service stays): the instance stays Ready and its
    binding bound, and both are unbound and deprovisioned with the plan id the broker knows them by; a new
    instance of that plan is refused."""
    name, suffix = registered
    create(
        api_client,
        namespace,
        "instances",
        "Instance",
        "old-plan",
        {"serviceClassName": f"second-db-{suffix}", "planName": "sync-small"},
    )
    create(api_client, namespace, "bindings", "Binding", "old-app", {"instanceRef": {"name": "old-plan"}})
    wait_for(
        lambda: ready(get(api_client, "bindings", "old-app", namespace)) == ("True", "InjectedBindResult"), 60, "bound"
    )
    catalog = renamed(suffix)
    (db,) = [s for s in catalog["services"] if s["name"] == f"second-db-{suffix}"]
    db["plans"] = [p for p in db["plans"] if p["name"] != "sync-small"]
    second_broker.set_catalog(catalog)
    custom(api_client).patch_cluster_custom_object(GROUP, VERSION, "brokers", name, {"spec": {"relistRequests": 1}})

    def plan_gone() -> bool:
        found = get(api_client, "serviceclasses", f"second-db-{suffix}") or {}
        return [p["name"] for p in found.get("plans") or []] == ["async-large"]

    wait_for(plan_gone, 30, "the plan gone from the class")
    create(
        api_client,
        namespace,
        "instances",
        "Instance",
        "new-plan",
        {"serviceClassName": f"second-db-{suffix}", "planName": "sync-small"},
    )
    wait_for(
        lambda: (
            ready(get(api_client, "instances", "new-plan", namespace)) == ("False", "ReferencesNonexistentServicePlan")
        ),
        30,
        "the new instance refused",
    )
    assert ready(get(api_client, "instances", "old-plan", namespace)) == ("True", "Provisioned")
    assert ready(get(api_client, "bindings", "old-app", namespace)) == ("True", "InjectedBindResult")

    second_broker.clear_requests()
    delete(api_client, namespace, "bindings", "old-app")
    wait_for(lambda: get(api_client, "bindings", "old-app", namespace) is None, 60, "unbound")
    delete(api_client, namespace, "instances", "old-plan")
    wait_for(lambda: get(api_client, "instances", "old-plan", namespace) is None, 60, "deprovisioned")
    deletes = [r for r in second_broker.requests() if r["method"] == "DELETE"]
    assert [r["path"].count("/service_bindings/") for r in deletes] == [1, 0]
    assert all(r["query"]["plan_id"] == DB_SYNC_PLAN for r in deletes)  # the id the broker knows them by
    assert second_broker.state() == {"instances": {}, "bindings": {}}
    delete(api_client, namespace, "instances", "new-plan")
    wait_for(lambda: get(api_client, "instances", "new-plan", namespace) is None, 30, "the refused instance gone")
