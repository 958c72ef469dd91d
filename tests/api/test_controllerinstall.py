"""The controller's in-cluster objects as plain data (issue 29): one source for the ControlPlane component and
the master's installer into sister clusters."""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import pytest

from opbroker.api import rbac
from opbroker.api.cluster import SFClusterController
from opbroker.api.controllerinstall import (
    ControllerSpec,
    broker_shard_flags,
    controller_objects,
    controller_shard_flags,
    digest,
)
from opbroker.controller.multicluster import installer


def test_the_objects_follow_the_settings_and_the_digest_sees_an_image_change() -> None:
    one = controller_objects(ControllerSpec(namespace="ops", image="img:1"))
    two = controller_objects(ControllerSpec(namespace="ops", image="img:2"))
    roles = [role for role, _ in one]
    assert roles.index("controller-cluster-role") < roles.index("controller-cluster-role-binding")
    assert roles[-2:] == ["controller-deployment", "controller-disruption-budget"]
    assert digest(one) != digest(two)
    assert digest(one) == digest(controller_objects(ControllerSpec(namespace="ops", image="img:1")))
    without = dict(controller_objects(ControllerSpec(namespace="ops", image="img:1", webhook=False)))
    assert "webhook-configuration" not in without
    assert (
        "--webhook-port" not in without["controller-deployment"]["spec"]["template"]["spec"]["containers"][0]["command"]
    )


def test_removal_covers_every_object_any_installation_makes() -> None:
    removable = {(m["kind"], m["metadata"]["name"]) for _, m in installer.removable("ops")}
    for webhook in (True, False):
        wanted = installer.desired("ops", SFClusterController(image="x", webhook=webhook, replicas=3))
        assert {(m["kind"], m["metadata"]["name"]) for _, m in wanted} <= removable


class _SlowKube:
    """Each apply advances a fake clock by 25 s."""

    def __init__(self) -> None:
        self.now = 0.0
        self.applied: list[str] = []

    def apply(self, manifest: dict[str, object], *, field_manager: str) -> dict[str, object]:
        self.now += 25
        self.applied.append(str(manifest["kind"]))
        return manifest


def test_an_installation_gives_up_after_its_time_and_says_how_far_it_got() -> None:
    kube = _SlowKube()
    objects = installer.desired("ops", SFClusterController(image="x"))
    with pytest.raises(installer.InstallError, match=r"gave up after 60s with 3 of \d+ objects applied"):
        installer.install(kube, "ops", objects, clock=lambda: kube.now)  # type: ignore[arg-type]
    assert len(kube.applied) == 3


# -- shards (issue 46) -------------------------------------------------------------------------------------------


def _command(manifest: dict[str, Any]) -> list[str]:
    (container,) = manifest["spec"]["template"]["spec"]["containers"]
    command: list[str] = container["command"]
    return command


def _lease_names(objects: dict[str, dict[str, Any]]) -> list[str]:
    rules = objects["controller-leader-election-role"]["rules"]
    (renewing,) = [rule for rule in rules if "resourceNames" in rule and "update" in rule["verbs"]]
    assert renewing["verbs"] == ["get", "update"]
    names: list[str] = renewing["resourceNames"]
    return names


def test_one_shard_is_the_deployment_campaigning_for_the_one_lease() -> None:
    objects = dict(controller_objects(ControllerSpec(namespace="ops", image="img:1", shards=1)))
    assert objects == dict(controller_objects(ControllerSpec(namespace="ops", image="img:1")))
    assert "controller-statefulset" not in objects and "controller-headless-service" not in objects
    assert objects["controller-deployment"]["spec"]["replicas"] == 2
    assert "--shards" not in _command(objects["controller-deployment"])
    assert _lease_names(objects) == [rbac.LEADER_LEASE]
    # Every Lease a shard may have had, read only: the one controller acts once they are free (back from shards).
    assert _read_leases(objects) == [f"{rbac.LEADER_LEASE}-shard-{i}" for i in range(rbac.MAX_SHARDS)]


def test_shards_read_the_unsharded_lease() -> None:
    objects = dict(controller_objects(ControllerSpec(namespace="ops", image="img:1", shards=3)))
    assert _read_leases(objects) == [rbac.LEADER_LEASE]


def _read_leases(objects: dict[str, dict[str, Any]]) -> list[str]:
    rules = objects["controller-leader-election-role"]["rules"]
    (reading,) = [rule for rule in rules if "resourceNames" in rule and rule["verbs"] == ["get"]]
    names: list[str] = reading["resourceNames"]
    return names


@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_shards_are_a_statefulset_whose_ordinals_modulo_the_count_give_each_shard_its_replicas(replicas: int) -> None:
    spec = ControllerSpec(namespace="ops", image="img:1", shards=3, replicas=replicas)
    roles = [role for role, _ in controller_objects(spec)]
    objects = dict(controller_objects(spec))
    assert "controller-deployment" not in objects
    assert roles[-3:] == ["controller-headless-service", "controller-statefulset", "controller-disruption-budget"]
    workload = objects["controller-statefulset"]
    assert (workload["apiVersion"], workload["kind"]) == ("apps/v1", "StatefulSet")
    assert workload["metadata"]["name"] == "opbroker-controller"
    assert workload["spec"]["replicas"] == 3 * replicas
    assert workload["spec"]["podManagementPolicy"] == "Parallel"
    # What --shard-from-hostname computes from the ordinals 0..shards*replicas-1: every shard gets its replicas.
    assert Counter(ordinal % 3 for ordinal in range(workload["spec"]["replicas"])) == dict.fromkeys(range(3), replicas)
    # Governed by a headless Service selecting exactly its pods.
    service = objects["controller-headless-service"]
    assert service["kind"] == "Service" and service["metadata"]["name"] == workload["spec"]["serviceName"]
    assert service["spec"]["clusterIP"] == "None"
    selector = workload["spec"]["selector"]["matchLabels"]
    assert service["spec"]["selector"] == selector
    assert selector.items() <= workload["spec"]["template"]["metadata"]["labels"].items()
    # The same pods as unsharded, told the count and to take their shard from their hostname.
    command = _command(workload)
    assert command[command.index("--shards") :][:3] == ["--shards", "3", "--shard-from-hostname"]
    unsharded = dict(controller_objects(ControllerSpec(namespace="ops", image="img:1", replicas=replicas)))
    template = copy.deepcopy(workload["spec"]["template"])
    template["spec"]["containers"][0]["command"] = [
        w for w in command if w not in ("--shards", "3", "--shard-from-hostname")
    ]
    assert template == unsharded["controller-deployment"]["spec"]["template"]
    # One Lease per shard, and only those: a replica of the unsharded layout cannot renew its Lease any more.
    assert _lease_names(objects) == [f"{rbac.LEADER_LEASE}-shard-{i}" for i in range(3)]
    assert objects["controller-disruption-budget"]["spec"]["selector"]["matchLabels"] == selector


def test_a_sharded_statefulset_is_awaited_as_the_deployment_is() -> None:
    skipped = dict(controller_objects(ControllerSpec(namespace="ops", image="i", shards=2, await_deployments=False)))
    assert skipped["controller-statefulset"]["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}
    awaited = dict(controller_objects(ControllerSpec(namespace="ops", image="i", shards=2)))
    assert "annotations" not in awaited["controller-statefulset"]["metadata"]


@pytest.mark.parametrize("shards", [0, -1, rbac.MAX_SHARDS + 1])
def test_a_shard_count_out_of_bounds_is_refused(shards: int) -> None:
    with pytest.raises(ValueError, match=f"shards must be between 1 and {rbac.MAX_SHARDS}, not {shards}"):
        ControllerSpec(namespace="ops", image="img:1", shards=shards)
    with pytest.raises(ValueError, match="shards must be between"):
        rbac.controller_namespace_rules(shards=shards)


def test_the_shard_flags_and_leases() -> None:
    assert controller_shard_flags(1) == [] and broker_shard_flags(1) == []
    assert controller_shard_flags(4) == ["--shards", "4", "--shard-from-hostname"]
    assert broker_shard_flags(4) == ["--shards", "4"]
    assert rbac.shard_leases("lease", 1) == ("lease",)
    assert rbac.shard_leases("lease", 2) == ("lease-shard-0", "lease-shard-1")
    assert len(rbac.shard_leases(shards=rbac.MAX_SHARDS)) == rbac.MAX_SHARDS
