"""The fake of the controller's Kubernetes wrapper (tests/fake_kube.py) against the real thing.

(Named to run before the controller tests: their session controller would reconcile the instances this file
writes to the real API server; a CI run of the whole suite failed that way.)

Each test runs the same calls twice: through ``Kube`` on the session's kube-apiserver, and through
``FakeKube``; both must answer the same (versions move or stay, 409 on stale writes, generation, finalizers
holding a deletion, server-side apply's merge). The reconcilers' table tests trust the fake because of these.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from opbroker.api.conventions import FINALIZER
from opbroker.api.meta import ResourceRef
from opbroker.controller.kinds import INSTANCES
from opbroker.controller.runtime.kube import Kube
from tests.fake_kube import FakeKube


@pytest.fixture(params=["fake", pytest.param("real", marks=pytest.mark.apiserver)])
def kube(request: pytest.FixtureRequest) -> tuple[Any, str]:
    """(the wrapper, a namespace to work in): the fake, or ``Kube`` on the session's API server."""
    if request.param == "fake":
        return FakeKube(), "t-fake"
    api_client = request.getfixturevalue("api_client")
    return Kube(api_client), request.getfixturevalue("namespace")


def instance(namespace: str, name: str, *, finalizers: list[str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if finalizers:
        meta["finalizers"] = finalizers
    return {
        "apiVersion": INSTANCES.api_version,
        "kind": "SFServiceInstance",
        "metadata": meta,
        "spec": {"instanceId": name, "serviceId": "s", "planId": "p", "parameters": {}},
    }


def rv(obj: dict[str, Any] | None) -> str:
    assert obj is not None
    version: str = obj["metadata"]["resourceVersion"]
    return version


def test_versions_generation_and_stale_writes(kube: tuple[Any, str]) -> None:
    k, ns = kube
    created = k.create(instance(ns, "i1"))
    assert created is not None and created["metadata"]["generation"] == 1 and created["metadata"]["uid"]
    assert k.create(instance(ns, "i1")) is None  # exists already

    first = rv(created)
    patched = k.patch_custom_status(INSTANCES, ns, "i1", {"state": "in_queue"}, resource_version=first)
    assert patched is not None and patched["status"] == {"state": "in_queue"}
    assert rv(patched) != first and patched["metadata"]["generation"] == 1  # status is not generation

    with pytest.raises(ApiException) as stale:
        k.patch_custom_status(INSTANCES, ns, "i1", {"state": "failed"}, resource_version=first)
    assert stale.value.status == 409
    assert k.get_custom(INSTANCES, ns, "i1")["status"]["state"] == "in_queue"  # nothing written

    unguarded = k.patch_custom_status(INSTANCES, ns, "i1", {"state": "in progress"})
    assert unguarded["status"]["state"] == "in progress"

    labelled = k.patch_custom(INSTANCES, ns, "i1", {"metadata": {"labels": {"a": "b"}}})
    assert labelled["metadata"]["generation"] == 1 and rv(labelled) != rv(unguarded)
    assert k.list_custom(INSTANCES, ns, "a=b")[0]["metadata"]["name"] == "i1"
    assert k.list_custom(INSTANCES, ns, "a=c") == []

    same = k.patch_custom(INSTANCES, ns, "i1", {"metadata": {"labels": {"a": "b"}}})
    assert rv(same) == rv(labelled)  # a write that changes nothing keeps the version

    respec = k.patch_custom(INSTANCES, ns, "i1", {"spec": {"parameters": {"size": "2"}}})
    assert respec["metadata"]["generation"] == 2

    ignored = k.patch_custom(INSTANCES, ns, "i1", {"status": {"state": "failed"}})
    assert ignored["status"]["state"] == "in progress"  # the main endpoint does not write status

    with pytest.raises(ApiException) as guarded:
        k.patch_custom(INSTANCES, ns, "i1", {"metadata": {"labels": {"a": "c"}, "resourceVersion": first}})
    assert guarded.value.status == 409

    assert k.patch_custom(INSTANCES, ns, "nope", {"metadata": {"labels": {"a": "b"}}}) is None
    assert k.patch_custom_status(INSTANCES, ns, "nope", {"state": "x"}) is None
    assert k.get_custom(INSTANCES, ns, "nope") is None


def test_finalizers_hold_a_deletion(kube: tuple[Any, str]) -> None:
    k, ns = kube
    created = k.create(instance(ns, "i2", finalizers=[FINALIZER]))
    assert k.delete_custom(INSTANCES, ns, "i2") is True
    deleting = k.get_custom(INSTANCES, ns, "i2")
    assert deleting is not None and deleting["metadata"]["deletionTimestamp"]
    assert deleting["metadata"]["generation"] == 2  # marking for deletion counts as a change
    assert rv(deleting) != rv(created)

    assert k.delete_custom(INSTANCES, ns, "i2") is True  # still there: deleting again changes nothing
    assert rv(k.get_custom(INSTANCES, ns, "i2")) == rv(deleting)

    with pytest.raises(ApiException) as refused:
        k.patch_custom(INSTANCES, ns, "i2", {"metadata": {"finalizers": [FINALIZER, "other/x"]}})
    assert refused.value.status == 422  # no new finalizers on an object being deleted

    reported = k.patch_custom_status(INSTANCES, ns, "i2", {"state": "in progress"}, resource_version=rv(deleting))
    assert reported["status"]["state"] == "in progress"

    released = k.patch_custom(INSTANCES, ns, "i2", {"metadata": {"finalizers": None, "resourceVersion": rv(reported)}})
    assert released is not None
    assert k.get_custom(INSTANCES, ns, "i2") is None
    assert k.delete_custom(INSTANCES, ns, "i2") is False

    k.create(instance(ns, "i3"))
    assert k.delete_custom(INSTANCES, ns, "i3") is True
    assert k.get_custom(INSTANCES, ns, "i3") is None  # no finalizer: gone at once


def configmap(namespace: str, data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": namespace}, "data": data}


def test_server_side_apply_merges_and_releases_fields(kube: tuple[Any, str]) -> None:
    k, ns = kube
    ref = ResourceRef(api_version="v1", kind="ConfigMap", name="cm", namespace=ns)
    assert k.plural_of("v1", "ConfigMap") == ("configmaps", True)
    first = k.apply(configmap(ns, {"a": "1", "b": "2"}))
    again = k.apply(configmap(ns, {"a": "1", "b": "2"}))
    assert again["metadata"]["uid"] == first["metadata"]["uid"] and rv(again) == rv(first)
    assert "generation" not in again["metadata"]

    k.merge_patch(ref, {"data": {"phase": "Ready"}})  # someone else's field (an update, not an apply)
    k.apply(configmap(ns, {"a": "1", "c": "3"}), field_manager="other")
    k.apply(configmap(ns, {"a": "1"}))  # ours: b no longer applied
    assert k.get(ref)["data"] == {"a": "1", "c": "3", "phase": "Ready"}
    k.apply(configmap(ns, {}), field_manager="other")
    assert k.get(ref)["data"] == {"a": "1", "phase": "Ready"}

    assert k.create(configmap(ns, {"x": "y"})) is None
    assert [o["metadata"]["name"] for o in k.list_objects("v1", "ConfigMap", ns) if o["metadata"]["name"] == "cm"]
    assert k.delete(ref) is True
    assert k.get(ref) is None
    assert k.delete(ref) is False
    assert k.merge_patch(ref, {"data": {"a": "2"}}) is None


def test_secrets(kube: tuple[Any, str]) -> None:
    k, ns = kube
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": ns}, "data": {"k": "dg=="}}
    written = k.apply_secret(secret)
    assert k.read_secret(ns, "s")["data"] == {"k": "dg=="}
    assert k.delete_secret(ns, "s", uid="not-its-uid") is False
    assert k.read_secret(ns, "s") is not None
    assert k.delete_secret(ns, "s", uid=written["metadata"]["uid"]) is True
    assert k.read_secret(ns, "s") is None
    assert k.delete_secret(ns, "s") is False


def test_a_cluster_scoped_kind(kube: tuple[Any, str]) -> None:
    """The Service Catalog's ServiceClass: created, read, patched and deleted without a namespace (the one
    given is ignored), its status guarded like a namespaced kind's."""
    from opbroker.controller.servicecatalog.resources import CLASSES, KINDS

    k, ns = kube
    kind = KINDS[CLASSES]
    name = f"parity-{ns}"
    body = {
        "apiVersion": kind.api_version,
        "kind": "ServiceClass",
        "metadata": {"name": name, "labels": {"parity": ns}},
        "brokerName": "no-such-broker",
        "externalID": name,
        "plans": [{"name": "small", "externalID": f"{name}-small"}],
    }
    created = k.create_custom(kind, body)
    assert "namespace" not in created["metadata"] and created["metadata"]["generation"] == 1
    with pytest.raises(ApiException) as exists:
        k.create_custom(kind, body)
    assert exists.value.status == 409
    assert k.get_custom(kind, "any-namespace", name, fresh=True)["externalID"] == name
    assert [c["metadata"]["name"] for c in k.list_custom(kind, "any-namespace", f"parity={ns}")] == [name]

    first = rv(created)
    marked = k.patch_custom_status(kind, "", name, {"removedFromBrokerCatalog": True}, resource_version=first)
    assert marked["status"]["removedFromBrokerCatalog"] is True and rv(marked) != first
    with pytest.raises(ApiException) as stale:
        k.patch_custom_status(kind, "", name, {"removedFromBrokerCatalog": False}, resource_version=first)
    assert stale.value.status == 409
    described = k.patch_custom(kind, "", name, {"description": "d"})
    assert described["metadata"]["generation"] == 2 and described["status"]["removedFromBrokerCatalog"] is True

    assert k.delete_custom(kind, "", name) is True
    assert k.get_custom(kind, "", name, fresh=True) is None
    assert k.delete_custom(kind, "", name) is False
    assert k.patch_custom(kind, "", name, {"description": "e"}) is None
