"""An apply that amends (``Kube.apply(uid=...)``) against the real API server: it never creates."""

from __future__ import annotations

import pytest
from kubernetes import client

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
