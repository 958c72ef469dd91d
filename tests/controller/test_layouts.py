"""Between one controller and shards (issue 46), on the real control plane: the leader of one layout acts only once
no leader of the other layout holds its Lease, so the old and the new never act on an object at once.

Going from shards back to one controller, the shards' pods stop (or their Role no longer lets them renew) while the
one controller starts: it cannot know how many shards ran, so it reads every Lease a shard may have had and waits
until each is free. The other way (a shard waiting for the unsharded Lease) is the same wait, tested in
``test_leadership`` and by the node test's change to shards.
"""

from __future__ import annotations

import datetime
import time
from pathlib import Path

from kubernetes import client

from opbroker.api.shards import lease_name
from opbroker.devcluster import ControlPlane
from opbroker.devcluster.controlplane import free_ports
from tests.controller.test_lifecycle import get, provision, wait_state
from tests.controller.test_timeouts import command, quiet  # noqa: F401 - quiet: a fixture
from tests.controller_support import Process, wait_for

LEASE = "opbroker-controller"


def renewed(api: client.ApiClient, namespace: str, name: str, holder: str | None) -> None:
    """Write the Lease as its holder's renewal would (``holder`` None: released, as a stopping leader does)."""
    now = datetime.datetime.now(datetime.UTC)
    spec = {"holderIdentity": holder, "leaseDurationSeconds": 6, "renewTime": now, "acquireTime": now}
    coordination = client.CoordinationV1Api(api)
    try:
        coordination.patch_namespaced_lease(name, namespace, {"spec": spec})
    except client.ApiException as exc:
        if exc.status != 404:
            raise
        coordination.create_namespaced_lease(namespace, {"metadata": {"name": name}, "spec": spec})


def test_one_controller_after_shards_acts_only_once_every_shards_lease_is_free(
    api_client: client.ApiClient,
    namespace: str,
    catalog_namespace: str,
    control_plane: ControlPlane,
    quiet: None,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    """A shard's leader that has not stopped yet (the test renews its Lease, as it would) holds the one controller
    back — it leads its own Lease, and acts on nothing — until that Lease is released; then it acts."""
    shard_lease = lease_name(LEASE, 2)  # not the first: every shard's Lease is looked at, not only shard 0's
    renewed(api_client, catalog_namespace, shard_lease, "old-shard-2")
    (port,) = free_ports(1)
    one = Process("one", command(control_plane.kubeconfig, port, "--leader-election", "--lease-seconds", "6"), tmp_path)
    try:
        one.start()
        waiting = f"lease {catalog_namespace}/{shard_lease} is held by old-shard-2; waiting until it is free"
        wait_for(lambda: one.log.exists() and waiting in one.log.read_text(), 60, "the one controller to wait")
        assert "became the leader" in one.log.read_text()  # it leads its own Lease: only the shard's holds it back
        provision(api_client, namespace, "held-back")
        for _ in range(3):  # the shard renews while it lives: nothing of the instance is touched meanwhile
            renewed(api_client, catalog_namespace, shard_lease, "old-shard-2")
            time.sleep(1)
        instance = get(api_client, namespace, "sfserviceinstances", "held-back")
        assert instance is not None and not instance.get("status") and not instance["metadata"].get("finalizers")

        renewed(api_client, catalog_namespace, shard_lease, None)  # the shard stopped: its Lease released
        wait_state(api_client, namespace, "sfserviceinstances", "held-back", "succeeded", timeout=60)
    finally:
        one.stop()
        client.CoordinationV1Api(api_client).delete_namespaced_lease(shard_lease, catalog_namespace)
