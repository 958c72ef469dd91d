"""What the Service Catalog flow and tenancy tests share: reading and writing the four kinds as kubectl would
(any ``ApiClient``: the admin's or a tenant's), and the second broker registered as a ``Broker`` whose auth Secret
lives in the control plane's namespace (the controller reads it nowhere else), under a name of the test's own.

Registered as a pytest plugin in ``tests/conftest.py`` (the ``registered`` fixture).
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from opbroker.api.conventions import DEFAULT_NAMESPACE
from tests.brokers.fixture import SecondBroker, default_catalog
from tests.controller_support import wait_for
from tests.loop_support import loop_in_thread

GROUP, VERSION = "servicecatalog.k8s.io", "v1alpha1"


def custom(api_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


def get(api_client: client.ApiClient, plural: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
    try:
        if namespace is None:
            found: dict[str, Any] = custom(api_client).get_cluster_custom_object(GROUP, VERSION, plural, name)
        else:
            found = custom(api_client).get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return found


def ready(obj: dict[str, Any] | None) -> tuple[str, str] | None:
    for condition in ((obj or {}).get("status") or {}).get("conditions") or []:
        if condition["type"] == "Ready":
            return condition["status"], condition["reason"]
    return None


def renamed(suffix: str) -> dict[str, Any]:
    catalog = default_catalog()
    for service in catalog["services"]:
        service["name"] = f"{service['name']}-{suffix}"
    return catalog


@contextlib.contextmanager
def auth_secret(api_client: client.ApiClient, name: str, data: dict[str, Any]) -> Iterator[dict[str, str]]:
    """A Broker's auth Secret in the control-plane namespace, deleted afterwards; yields its ``secretRef``."""
    core = client.CoreV1Api(api_client)
    core.create_namespaced_secret(DEFAULT_NAMESPACE, {"metadata": {"name": name}, "stringData": data})
    try:
        yield {"namespace": DEFAULT_NAMESPACE, "name": name}
    finally:
        with contextlib.suppress(ApiException):
            core.delete_namespaced_secret(name, DEFAULT_NAMESPACE)


@pytest.fixture
def registered(api_client: client.ApiClient, second_broker: SecondBroker) -> Iterator[tuple[str, str]]:
    """The second broker registered as a Broker (basic auth from a Secret); yields (broker name, suffix)."""
    suffix = secrets.token_hex(3)
    second_broker.set_catalog(renamed(suffix))
    credentials = {"username": second_broker.username, "password": second_broker.password}
    name = f"second-{suffix}"
    with auth_secret(api_client, f"second-auth-{suffix}", credentials) as secret_ref:
        custom(api_client).create_cluster_custom_object(
            GROUP,
            VERSION,
            "brokers",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "Broker",
                "metadata": {"name": name},
                "spec": {"url": second_broker.url, "authInfo": {"basic": {"secretRef": secret_ref}}},
            },
        )
        wait_for(
            lambda: ready(get(api_client, "brokers", name)) == ("True", "FetchedCatalog"), 30, "the broker's catalog"
        )
        yield name, suffix
        custom(api_client).delete_cluster_custom_object(GROUP, VERSION, "brokers", name)
    for service in ("second-db", "second-queue"):
        with contextlib.suppress(ApiException):
            custom(api_client).delete_cluster_custom_object(GROUP, VERSION, "serviceclasses", f"{service}-{suffix}")


def create(
    api_client: client.ApiClient, namespace: str, plural: str, kind: str, name: str, spec: dict[str, Any]
) -> None:
    custom(api_client).create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        plural,
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": {"name": name}, "spec": spec},
    )


def delete(api_client: client.ApiClient, namespace: str, plural: str, name: str) -> None:
    custom(api_client).delete_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)


def register_broker(api_client: client.ApiClient, name: str, spec: dict[str, Any]) -> None:
    custom(api_client).create_cluster_custom_object(
        GROUP,
        VERSION,
        "brokers",
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Broker", "metadata": {"name": name}, "spec": spec},
    )


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for found in ((obj or {}).get("status") or {}).get("conditions") or []:
        if found["type"] == kind:
            return dict(found)
    return None


@contextlib.contextmanager
def webhook_serving(
    api_client: client.ApiClient, namespace: str, *, limits: Any = None, name: str | None = None
) -> Iterator[Any]:
    """The controller's admission webhook, served on a free local port and registered by URL under ``name``
    (default: the controller's), its shared certificate in ``namespace``; listed (its Bindings index synced) by
    the time it is yielded. The registration goes afterwards."""
    from opbroker.api import webhooks
    from opbroker.controller.servicecatalog import webhook

    configuration = name or webhooks.CONFIGURATION
    server = webhook.Webhook(api_client, port=0, hosts=["127.0.0.1"], namespace=namespace, limits=limits)
    with loop_in_thread() as loop:
        server.start(loop)
        try:
            webhook.register_url(api_client, f"https://127.0.0.1:{server.port}", configuration)(server.ca)
            assert server.refs.wait_synced(30), "the webhook's Bindings were not listed"
            yield server
        finally:
            with contextlib.suppress(ApiException):
                client.AdmissionregistrationV1Api(api_client).delete_validating_webhook_configuration(configuration)
            server.stop()


def refused_by_webhook(api_client: client.ApiClient, namespace: str, name: str, *, dry_run: bool = True) -> str | None:
    """The 409 message of deleting Instance ``namespace/name`` (a dry run by default: it goes through admission
    and changes nothing), or None when the deletion was accepted."""
    try:
        custom(api_client).delete_namespaced_custom_object(
            GROUP, VERSION, namespace, "instances", name, dry_run="All" if dry_run else None
        )
    except ApiException as exc:
        return str(exc.body) if exc.status == 409 else None
    return None
