"""The local control plane is a real Kubernetes API: CRDs, status subresource, watch, finalizers, GC."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from opbroker.api import SFServiceInstance
from opbroker.devcluster import ControlPlane
from opbroker.devcluster.binaries import find_binaries
from tests.waiting import wait_for

GROUP, VERSION, PLURAL = "osb.servicefabrik.io", "v1alpha1", "sfserviceinstances"
GADGETS = "gadgets.test.opbroker.io"


def instance_body(name: str) -> dict[str, object]:
    return SFServiceInstance.model_validate(
        {"metadata": {"name": name}, "spec": {"serviceId": "svc-1", "planId": "plan-1", "instanceId": name}}
    ).to_manifest()


def test_crds_are_accepted_and_served(api_client: client.ApiClient) -> None:
    crds = client.ApiextensionsV1Api(api_client).list_custom_resource_definition().items
    names = {crd.metadata.name for crd in crds}
    assert {
        "sfservices.osb.servicefabrik.io",
        "sfplans.osb.servicefabrik.io",
        "sfserviceinstances.osb.servicefabrik.io",
        "sfservicebindings.osb.servicefabrik.io",
        "sfclusters.resource.servicefabrik.io",
        "registeredservices.primaza.io",
        "serviceclaims.primaza.io",
        "servicecatalogs.primaza.io",
    } <= names


def test_seed_manifests_apply_unchanged(api_client: client.ApiClient, namespace: str, seed_manifests: list) -> None:
    import yaml

    custom = client.CustomObjectsApi(api_client)
    plurals = {
        "SFService": "sfservices",
        "SFPlan": "sfplans",
        "SFServiceInstance": PLURAL,
        "SFServiceBinding": "sfservicebindings",
        "SFCluster": "sfclusters",
    }
    created = []
    for path in seed_manifests:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc["kind"] not in plurals:
                continue
            doc.pop("status", None)
            doc["metadata"].pop("namespace", None)
            group, version = doc["apiVersion"].split("/")
            stored = custom.create_namespaced_custom_object(group, version, namespace, plurals[doc["kind"]], doc)
            # The server kept the spec as sent: nothing pruned by the structural schema.
            assert stored["spec"] == {k: v for k, v in doc["spec"].items()}
            created.append(doc["kind"])
    assert sorted(created) == ["SFCluster", "SFPlan", "SFService", "SFServiceBinding", "SFServiceInstance"]


def test_server_rejects_what_the_schema_forbids(api_client: client.ApiClient, namespace: str) -> None:
    body = instance_body("bad-state")
    body["status"] = {"state": "exploded"}
    custom = client.CustomObjectsApi(api_client)
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    with pytest.raises(ApiException) as info:
        custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, "bad-state", {"status": {"state": "exploded"}}
        )
    assert info.value.status == 422
    assert "status.state" in info.value.body


@pytest.fixture(scope="module")
def gadgets(api_client: client.ApiClient) -> Iterator[str]:
    """A CRD of this test's own, with a status subresource: nothing else in the session writes its objects
    (a controller started by other tests reconciles every SFServiceInstance it sees, writing its status)."""
    extensions = client.ApiextensionsV1Api(api_client)
    schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    version = {
        "name": "v1",
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": schema},
        "subresources": {"status": {}},
    }
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"gadgets.{GADGETS}"},
        "spec": {
            "group": GADGETS,
            "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [version],
        },
    }
    extensions.create_custom_resource_definition(crd)
    custom = client.CustomObjectsApi(api_client)

    def served() -> bool:
        try:
            custom.list_cluster_custom_object(GADGETS, "v1", "gadgets")
        except ApiException:
            return False
        return True

    wait_for(served, 30, "the Gadget CRD to be served")
    yield "gadgets"
    extensions.delete_custom_resource_definition(f"gadgets.{GADGETS}")


def test_status_subresource_create_patch_watch(api_client: client.ApiClient, namespace: str, gadgets: str) -> None:
    custom = client.CustomObjectsApi(api_client)
    body = {"apiVersion": f"{GADGETS}/v1", "kind": "Gadget", "metadata": {"name": "i-1"}, "spec": {"size": 1}}
    body["status"] = {"state": "succeeded"}  # ignored on create: status is a subresource
    created = custom.create_namespaced_custom_object(GADGETS, "v1", namespace, gadgets, body)
    assert "status" not in created

    # The client may replay an event after reconnecting; a replay carries the same resourceVersion, so
    # states are keyed by it: a real extra write would still show up as an extra entry.
    seen: dict[str, str] = {}
    stream = watch.Watch()

    def watch_states() -> None:
        for event in stream.stream(
            custom.list_namespaced_custom_object,
            GADGETS,
            "v1",
            namespace,
            gadgets,
            resource_version=created["metadata"]["resourceVersion"],
            timeout_seconds=20,
        ):
            state = (event["object"].get("status") or {}).get("state")
            if state:
                seen[event["object"]["metadata"]["resourceVersion"]] = state
            if state == "succeeded":
                stream.stop()

    watcher = threading.Thread(target=watch_states)
    watcher.start()
    for state in ("in_queue", "in progress", "succeeded"):
        custom.patch_namespaced_custom_object_status(
            GADGETS, "v1", namespace, gadgets, "i-1", {"status": {"state": state}}
        )
    watcher.join(timeout=25)
    assert list(seen.values()) == ["in_queue", "in progress", "succeeded"]

    # A spec patch through the main resource bumps generation; a status patch does not touch spec.
    patched = custom.patch_namespaced_custom_object(GADGETS, "v1", namespace, gadgets, "i-1", {"spec": {"size": 2}})
    assert patched["metadata"]["generation"] == 2
    assert patched["status"]["state"] == "succeeded"


def test_finalizer_holds_deletion(api_client: client.ApiClient, namespace: str) -> None:
    custom = client.CustomObjectsApi(api_client)
    body = instance_body("held")
    body["metadata"]["finalizers"] = ["opbroker.io/test"]
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "held")
    held = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "held")
    assert held["metadata"]["deletionTimestamp"]
    custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "held", {"metadata": {"finalizers": None}})

    def gone() -> bool:
        try:
            custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "held")
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for(gone, 10, "the object to go once its finalizer was removed")


def test_owner_reference_cascades_deletion(api_client: client.ApiClient, namespace: str) -> None:
    custom = client.CustomObjectsApi(api_client)
    core = client.CoreV1Api(api_client)
    owner = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, instance_body("owner"))
    core.create_namespaced_config_map(
        namespace,
        {
            "metadata": {
                "name": "owned",
                "ownerReferences": [
                    {
                        "apiVersion": f"{GROUP}/{VERSION}",
                        "kind": "SFServiceInstance",
                        "name": "owner",
                        "uid": owner["metadata"]["uid"],
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "data": {"k": "v"},
        },
    )
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "owner")

    def collected() -> bool:
        try:
            core.read_namespaced_config_map("owned", namespace)
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for(collected, 30, "the garbage collector to delete the owned ConfigMap")


def test_kubectl_works_with_the_written_kubeconfig(control_plane: ControlPlane, api_client: client.ApiClient) -> None:
    binaries = find_binaries()
    assert binaries is not None
    result = subprocess.run(
        [str(binaries.kubectl), "--kubeconfig", str(control_plane.kubeconfig), "get", "crd", "-o", "name"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "customresourcedefinition.apiextensions.k8s.io/sfplans.osb.servicefabrik.io" in result.stdout


def test_two_control_planes_side_by_side(control_plane: ControlPlane, tmp_path) -> None:
    second = ControlPlane("side-by-side", base_dir=tmp_path)
    status = second.up(progress=lambda _m: None)
    try:
        assert status.ready and status.server != control_plane.status().server
        assert control_plane.status().ready
        assert status.total_rss_mib > 0
    finally:
        second.down(progress=lambda _m: None)
    after = second.status()
    assert not after.running
    assert all(not c.running for c in after.components)
    assert control_plane.status().ready


def test_taken_port_is_a_clear_error(control_plane: ControlPlane, tmp_path) -> None:
    from opbroker.devcluster import ControlPlaneError

    taken = int(control_plane.status().server.rsplit(":", 1)[1])  # type: ignore[union-attr]
    with pytest.raises(ControlPlaneError, match=f"port {taken} on 127.0.0.1 is taken"):
        ControlPlane("clash", base_dir=tmp_path).up(apiserver_port=taken, progress=lambda _m: None)
