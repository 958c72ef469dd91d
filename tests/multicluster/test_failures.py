"""A sister cluster going away, and removing an SFCluster that still has instances.

One more control plane ("gone") joins as a sister for this test alone. Covers, in order: removal of its
SFCluster is refused while an instance is placed there (the object stays, its ``Removable`` condition and
an event name the instance, and nothing new is scheduled there); stopping its control plane marks the
cluster unreachable and its instance and binding ``ClusterReachable=False`` with a description — their
state and the master's copy of the credentials are kept; a deprovision meanwhile waits; when the cluster
answers again (empty: a wiped cluster), the deprovision completes and the SFCluster is released.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

from opbroker.api.conventions import DEFAULT_NAMESPACE
from tests.cluster_fixtures import onboard
from tests.controller_idle import progress, wait_handled
from tests.controller_support import wait_for
from tests.multicluster_support import (
    CLUSTER_GROUP,
    GROUP,
    PLACED,
    SERVICE_ID,
    VERSION,
    MultiClusterEnv,
    provision,
    register,
    start_cluster,
    start_provisioner,
    wait_state,
)


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    found = [c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == kind]
    return found[0] if found else {}


def test_a_sister_going_away_keeps_its_instances_and_blocks_its_removal(multicluster: MultiClusterEnv) -> None:
    multicluster.use_scheduler("label-selector")
    master = multicluster.master
    gone = start_cluster(f"mcgone-{os.getpid()}")
    namespace = f"mcf-{uuid.uuid4().hex[:8]}"
    master.core.create_namespace({"metadata": {"name": namespace}})
    onboard(master.api, namespace)
    try:
        start_provisioner(gone, multicluster.log_dir)
        register(master, "gone", gone, labels={"name": "gone"}, capacity={"cpu": 2}, limit=None)

        def sfcluster() -> dict[str, Any] | None:
            return master.get("sfclusters", DEFAULT_NAMESPACE, "gone", group=CLUSTER_GROUP)

        wait_for(lambda: ((sfcluster() or {}).get("status") or {}).get("reachable") is True, 20, "gone reachable")
        provision(master, namespace, "lost", plan_id=PLACED, cluster="gone")
        wait_state(master, "sfserviceinstances", namespace, "lost", "succeeded")
        assert gone.database(namespace, "lost") is not None
        master.custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            "sfservicebindings",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "SFServiceBinding",
                "metadata": {"name": "lost-b"},
                "spec": {"id": "lost-b", "instanceId": "lost", "serviceId": SERVICE_ID, "planId": PLACED},
            },
        )
        wait_state(master, "sfservicebindings", namespace, "lost-b", "succeeded")

        # Removal is refused while the instance is placed there.
        master.custom.delete_namespaced_custom_object(CLUSTER_GROUP, VERSION, DEFAULT_NAMESPACE, "sfclusters", "gone")
        blocked = wait_for(
            lambda: condition(sfcluster(), "Removable").get("reason") == "InstancesRemain" and sfcluster(),
            15,
            "the removal to be refused",
        )
        assert blocked["metadata"]["deletionTimestamp"]
        assert condition(blocked, "Removable")["message"] == (
            f"cannot remove cluster 'gone': 1 instance(s) are placed on it ({namespace}/lost); deprovision them first"
        )
        events = master.core.list_namespaced_event(DEFAULT_NAMESPACE, field_selector="involvedObject.name=gone").items
        assert any(e.reason == "InstancesRemain" for e in events)
        provision(master, namespace, "late", plan_id=PLACED, cluster="gone")
        late = wait_state(master, "sfserviceinstances", namespace, "late", "failed")
        assert "gone: being removed (its SFCluster is being deleted)" in late["status"]["error"]

        # The sister goes away: its instance and binding are marked, not lost.
        port = gone.plane.state().ports.apiserver  # type: ignore[union-attr]
        gone.stop_processes()
        gone.plane.down(progress=lambda _message: None)
        wait_for(lambda: ((sfcluster() or {}).get("status") or {}).get("reachable") is False, 15, "gone unreachable")
        assert condition(sfcluster(), "Ready")["reason"] == "Unreachable"

        def marked(plural: str, name: str) -> dict[str, Any] | None:
            found = master.get(plural, namespace, name)
            return found if condition(found, "ClusterReachable").get("status") == "False" else None

        instance = wait_for(lambda: marked("sfserviceinstances", "lost"), 15, "the instance marked unreachable")
        assert instance["status"]["state"] == "succeeded", "the last known state is kept"
        assert instance["status"]["description"].startswith("cluster 'gone' is unreachable: ")
        assert instance["status"]["description"].endswith("; the last known state (succeeded) is kept")
        assert condition(instance, "ClusterReachable")["reason"] == "ClusterUnreachable"
        binding = wait_for(lambda: marked("sfservicebindings", "lost-b"), 15, "the binding marked unreachable")
        assert binding["status"]["state"] == "succeeded"
        assert master.core.read_namespaced_secret("lost-b-credentials", namespace).data, (
            "the master's copy of the credentials stays readable for the broker"
        )

        # Unbind and deprovision wait for the cluster...
        before = progress(multicluster.metrics_port)
        for plural, name in (("sfservicebindings", "lost-b"), ("sfserviceinstances", "lost")):
            master.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
        # The master writes nothing more while the cluster is out of reach (the pure row is test_placement_plan's
        # "deprovision while the cluster is out of reach"); the deletions queue both objects: once each kind was
        # reconciled since and nothing is due, the master has looked at them and kept waiting.
        for kind in ("binding", "instance"):
            wait_handled(multicluster.metrics_port, before, kind, 30, f"the master to look at the deleted {kind}")
        assert master.get("sfserviceinstances", namespace, "lost") is not None, "released only once the copy is gone"
        assert sfcluster() is not None

        # ...and complete once it answers again (wiped: the copies are gone with it).
        gone.plane.up(apiserver_port=port, progress=lambda _message: None)
        wait_for(lambda: master.get("sfserviceinstances", namespace, "lost") is None, 30, "the deprovision to finish")
        wait_for(lambda: master.get("sfservicebindings", namespace, "lost-b") is None, 30, "the unbind to finish")
        wait_for(lambda: sfcluster() is None, 30, "the SFCluster to be released once no instance remains")
    finally:
        master.core.delete_namespace(namespace)
        gone.stop_processes()
        gone.plane.down(progress=lambda _message: None)
        for item in master.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "sfserviceinstances")[
            "items"
        ]:
            master.custom.patch_namespaced_custom_object(  # an admin's last resort for a cluster lost for good
                GROUP,
                VERSION,
                namespace,
                "sfserviceinstances",
                item["metadata"]["name"],
                {"metadata": {"finalizers": None}},
            )
        if master.get("sfclusters", DEFAULT_NAMESPACE, "gone", group=CLUSTER_GROUP) is not None:
            master.custom.patch_namespaced_custom_object(
                CLUSTER_GROUP, VERSION, DEFAULT_NAMESPACE, "sfclusters", "gone", {"metadata": {"finalizers": None}}
            )
            master.custom.delete_namespaced_custom_object(
                CLUSTER_GROUP, VERSION, DEFAULT_NAMESPACE, "sfclusters", "gone"
            )
