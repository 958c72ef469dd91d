"""Registries against a real API server: an earlier object's Secret is never written into or adopted."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from opbroker.api.conventions import LABEL_MANAGED_BY, MANAGED_BY
from opbroker.controller.kube import Kube
from opbroker.controller.objects import owner_reference
from opbroker.controller.reconciler import TemporaryError
from opbroker.controller.registries import RegistryCache, encode


def owner(api_client: client.ApiClient, namespace: str, name: str = "inst") -> dict[str, Any]:
    """An owner that exists (a ConfigMap stands in for an instance): an owner reference to nothing would have
    the garbage collector delete the registry Secret on its own, racing the test."""
    live = client.CoreV1Api(api_client).create_namespaced_config_map(namespace, {"metadata": {"name": name}})
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "uid": live.metadata.uid},
    }


def secret(name: str, *, managed: bool, owned_by: dict[str, Any] | None) -> dict[str, object]:
    metadata: dict[str, object] = {"name": name}
    if managed:
        metadata["labels"] = {LABEL_MANAGED_BY: MANAGED_BY}
    if owned_by is not None:
        metadata["ownerReferences"] = [owner_reference(owned_by)]
    return {"metadata": metadata, "data": encode({"password": "the earlier one's"})}


def test_saved_registry_is_served_without_reading_it_again(api_client: client.ApiClient, namespace: str) -> None:
    kube, cache = Kube(api_client), RegistryCache()
    new = owner(api_client, namespace)
    assert cache.load(kube, namespace, "inst-registry", new["metadata"]["uid"]) is None
    cache.save(kube, name="inst-registry", owner=new, values={"password": "p"}, labels={})
    client.CoreV1Api(api_client).delete_namespaced_secret("inst-registry", namespace)
    # The write's answer proved the Secret ours: the copy is served (the deletion above is not seen).
    assert cache.load(kube, namespace, "inst-registry", new["metadata"]["uid"]) == {"password": "p"}


def test_an_earlier_objects_registry_is_removed_not_adopted(api_client: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(api_client)
    other = owner(api_client, namespace, "another-owner")
    core.create_namespaced_secret(namespace, secret("inst-registry", managed=True, owned_by=other))
    kube, cache = Kube(api_client), RegistryCache()
    uid = owner(api_client, namespace)["metadata"]["uid"]
    # Read-only callers (teardown) just see no registry; the Secret stays.
    assert cache.load(kube, namespace, "inst-registry", uid, claim=False) is None
    assert core.list_namespaced_secret(namespace, field_selector="metadata.name=inst-registry").items
    with pytest.raises(TemporaryError, match="earlier object"):
        cache.load(kube, namespace, "inst-registry", uid)
    assert not core.list_namespaced_secret(namespace, field_selector="metadata.name=inst-registry").items
    assert cache.load(kube, namespace, "inst-registry", uid) is None


def test_a_secret_that_is_not_a_registry_of_ours_is_left_alone(api_client: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(api_client)
    core.create_namespaced_secret(namespace, secret("inst-registry", managed=False, owned_by=None))
    kube, cache = Kube(api_client), RegistryCache()
    with pytest.raises(TemporaryError, match="not a registry managed by opbroker"):
        cache.load(kube, namespace, "inst-registry", owner(api_client, namespace)["metadata"]["uid"])
    assert core.read_namespaced_secret("inst-registry", namespace).data is not None
