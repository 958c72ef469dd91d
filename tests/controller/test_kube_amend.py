"""An apply that amends (``Kube.apply(uid=...)``) against the real API server: it never creates."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from opbroker.controller.runtime.kube import Kube, Refused


def config_map(namespace: str, **data: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "db", "namespace": namespace}, "data": data}


def test_an_amending_apply_writes_only_the_object_of_that_uid(api_client: client.ApiClient, namespace: str) -> None:
    kube = Kube(api_client)
    core = client.CoreV1Api(api_client)
    assert kube.apply(config_map(namespace, user="b"), uid="0b6f3c2e-0000-4000-8000-000000000001") is None
    assert not core.list_namespaced_config_map(namespace, field_selector="metadata.name=db").items  # not created

    live = kube.apply(config_map(namespace, a="1"))
    amended = kube.apply(config_map(namespace, user="b"), field_manager="binding-b", uid=live["metadata"]["uid"])
    assert amended is not None and amended["data"] == {"a": "1", "user": "b"}

    core.delete_namespaced_config_map("db", namespace)
    replaced = kube.apply(config_map(namespace, a="2"))  # another object of that name: not the one read
    with pytest.raises(Refused):
        kube.apply(config_map(namespace, user="b"), field_manager="binding-b", uid=live["metadata"]["uid"])
    stored = core.read_namespaced_config_map("db", namespace)
    assert stored.metadata.uid == replaced["metadata"]["uid"] and stored.data == {"a": "2"}


def test_a_guarded_secret_write_or_deletion_never_goes_over_a_secret_changed_since(
    api_client: client.ApiClient, namespace: str
) -> None:
    """Issue 45: the credentials Secret is written over what the plan read. Created when it saw none — one made since
    is a 409, never written over; applied over the version it read (``metadata.resourceVersion`` in a server-side
    apply is a precondition) — a Secret written since is a 409; deleted at that version the same way."""
    kube = Kube(api_client)
    core = client.CoreV1Api(api_client)
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": namespace}}
    made = kube.apply_secret({**secret, "data": {"k": "MQ=="}}, create=True)
    with pytest.raises(ApiException) as exc:
        kube.apply_secret({**secret, "data": {"k": "Mg=="}}, create=True)
    assert exc.value.status == 409
    read = made["metadata"]["resourceVersion"]
    core.patch_namespaced_secret("s", namespace, {"metadata": {"labels": {"moved": "on"}}})
    with pytest.raises(ApiException) as exc:
        kube.apply_secret({**secret, "data": {"k": "Mg=="}}, resource_version=read)
    assert exc.value.status == 409
    with pytest.raises(ApiException) as exc:
        kube.delete_secret(namespace, "s", uid=made["metadata"]["uid"], resource_version=read, conflicts=True)
    assert exc.value.status == 409
    assert core.read_namespaced_secret("s", namespace).data == {"k": "MQ=="}  # neither written over nor deleted
    now = core.read_namespaced_secret("s", namespace).metadata.resource_version
    written = kube.apply_secret({**secret, "data": {"k": "Mw=="}}, resource_version=now)
    assert written["data"] == {"k": "Mw=="}
    after = written["metadata"]["resourceVersion"]
    assert kube.delete_secret(namespace, "s", uid=made["metadata"]["uid"], resource_version=after, conflicts=True)
    assert not core.list_namespaced_secret(namespace, field_selector="metadata.name=s").items
