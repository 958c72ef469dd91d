"""Each scheduler on two real clusters: the master (also cluster "1") and a sister.

The master's controller runs with ``--multicluster --scheduler X``; instances are created on the master
the way the broker records them; each test checks where they were scheduled (``spec.clusterId``) and that
they were provisioned there (the demo operator's Database exists in that cluster, not the other) and
reported back (the master says ``succeeded``). Also: the label-selector parser agrees with the API
server's own selection.
"""

from __future__ import annotations

import itertools
import uuid

import pytest
from kubernetes.client.exceptions import ApiException

from opbroker.api import selectors
from opbroker.api.conventions import DEFAULT_NAMESPACE
from tests.controller_support import wait_for
from tests.multicluster_support import (
    BIG,
    CLUSTER_GROUP,
    PLACED,
    VERSION,
    MultiClusterEnv,
    provision,
    wait_state,
)

pytestmark = pytest.mark.apiserver  # its own fixtures start a local control plane (tests/conftest.py)

INSTANCES = "sfserviceinstances"


def assert_provisioned_on(env: MultiClusterEnv, namespace: str, name: str, cluster: str) -> None:
    wait_state(env.master, INSTANCES, namespace, name, "succeeded")
    here, there = (env.master, env.sister) if cluster == "1" else (env.sister, env.master)
    assert here.database(namespace, name) is not None, f"{name} must be provisioned in cluster {cluster}"
    assert there.database(namespace, name) is None, f"{name} must not be provisioned in the other cluster"


def test_default_scheduler_keeps_instances_on_the_master(multicluster: MultiClusterEnv, mc_namespace: str) -> None:
    multicluster.use_scheduler("default")
    provision(multicluster.master, mc_namespace, "d1")
    assert multicluster.cluster_of(mc_namespace, "d1") == "1"
    assert_provisioned_on(multicluster, mc_namespace, "d1", "1")
    assert multicluster.sister.get(INSTANCES, mc_namespace, "d1") is None, "nothing is copied for cluster 1"
    instance = multicluster.master.get(INSTANCES, mc_namespace, "d1")
    assert instance is not None
    scheduled = [c for c in instance["status"]["conditions"] if c["type"] == "Scheduled"]
    assert scheduled and scheduled[0]["message"] == "scheduled to cluster '1' by the default scheduler"


def test_round_robin_alternates_between_clusters(multicluster: MultiClusterEnv, mc_namespace: str) -> None:
    multicluster.use_scheduler("round-robin")
    names = [f"rr{i}" for i in range(4)]
    placed = []
    for name in names:
        provision(multicluster.master, mc_namespace, name)
        placed.append(multicluster.cluster_of(mc_namespace, name))
    assert set(placed) == {"1", "sister"}
    assert all(a != b for a, b in itertools.pairwise(placed)), placed
    for name, cluster in zip(names, placed, strict=True):
        assert_provisioned_on(multicluster, mc_namespace, name, cluster)


def test_least_utilized_fills_the_emptier_cluster(multicluster: MultiClusterEnv, mc_namespace: str) -> None:
    multicluster.use_scheduler("least-utilized")
    for name in ("pinned1", "pinned2"):  # placed by an admin: the scheduler leaves them where they are
        provision(multicluster.master, mc_namespace, name, cluster_id="sister")
    for name in ("pinned1", "pinned2"):
        assert_provisioned_on(multicluster, mc_namespace, name, "sister")
    placed = []
    for name in ("lu1", "lu2", "lu3"):
        provision(multicluster.master, mc_namespace, name)
        placed.append(multicluster.cluster_of(mc_namespace, name))
    assert placed[:2] == ["1", "1"], "the master had none, the sister two: the master fills up first"
    assert placed[2] == "1", "2-2 is a tie, broken by name ('1' < 'sister')"
    for name, cluster in zip(("lu1", "lu2", "lu3"), placed, strict=True):
        assert_provisioned_on(multicluster, mc_namespace, name, cluster)


def test_label_selector_follows_the_plan_template(multicluster: MultiClusterEnv, mc_namespace: str) -> None:
    multicluster.use_scheduler("label-selector")
    provision(multicluster.master, mc_namespace, "ls-s", plan_id=PLACED, cluster="sister")
    provision(multicluster.master, mc_namespace, "ls-m", plan_id=PLACED, cluster="1")
    provision(multicluster.master, mc_namespace, "ls-x", plan_id=PLACED, cluster="nowhere")
    assert multicluster.cluster_of(mc_namespace, "ls-s") == "sister"
    assert multicluster.cluster_of(mc_namespace, "ls-m") == "1"
    assert_provisioned_on(multicluster, mc_namespace, "ls-s", "sister")
    assert_provisioned_on(multicluster, mc_namespace, "ls-m", "1")
    failed = wait_state(multicluster.master, INSTANCES, mc_namespace, "ls-x", "failed")
    assert failed["status"]["error"] == (
        "no cluster can take the instance: "
        "1: label selector (name=nowhere — labels do not meet name=nowhere); "
        "sister: label selector (name=nowhere — labels do not meet name=nowhere)"
    )
    assert not failed["spec"].get("clusterId")
    assert [c["reason"] for c in failed["status"]["conditions"] if c["type"] == "Scheduled"] == ["SchedulingFailed"]


def test_capacity_aware_honours_requests_and_the_limit(multicluster: MultiClusterEnv, mc_namespace: str) -> None:
    multicluster.use_scheduler("capacity-aware")
    provision(multicluster.master, mc_namespace, "big1", plan_id=BIG)
    assert multicluster.cluster_of(mc_namespace, "big1") == "sister", "1 CPU on the master cannot take 1500m"
    assert_provisioned_on(multicluster, mc_namespace, "big1", "sister")
    provision(multicluster.master, mc_namespace, "big2", plan_id=BIG)
    failed = wait_state(multicluster.master, INSTANCES, mc_namespace, "big2", "failed")
    assert failed["status"]["error"] == (
        "no cluster can take the instance: "
        "1: capacity (cpu: 1500m requested + 0 in use > 1 (100% of allocatable 1)); "
        "sister: capacity (cpu: 1500m requested + 1500m in use > 2 (50% of allocatable 4))"
    )

    def sister_status() -> dict | None:
        found = multicluster.master.get("sfclusters", DEFAULT_NAMESPACE, "sister", group=CLUSTER_GROUP) or {}
        status = found.get("status") or {}
        return status if status.get("requests") == {"cpu": "1500m"} else None

    status = wait_for(sister_status, 15, "the sister's SFCluster status to count the placed requests")
    assert status["allocatable"] == {"cpu": 4} and status["reachable"] is True
    assert status["serviceInstanceCount"] == 1
    assert [c["status"] for c in status["conditions"] if c["type"] == "Ready"] == ["True"]


def test_selector_parser_agrees_with_the_api_server(multicluster: MultiClusterEnv) -> None:
    """Our selector semantics against kube-apiserver's own, on SFClusters outside the control plane."""
    master = multicluster.master
    namespace = f"sel-{uuid.uuid4().hex[:8]}"
    master.core.create_namespace({"metadata": {"name": namespace}})
    labelled = {
        "a": {"plan": "gold", "zone": "eu", "size": "3"},
        "b": {"plan": "silver", "zone": "us", "size": "10"},
        "c": {"zone": "eu", "app.kubernetes.io/name": "db"},
        "d": {},
        "e": {"plan": ""},
    }
    try:
        for name, labels in labelled.items():
            master.custom.create_namespaced_custom_object(
                CLUSTER_GROUP,
                VERSION,
                namespace,
                "sfclusters",
                {
                    "apiVersion": f"{CLUSTER_GROUP}/{VERSION}",
                    "kind": "SFCluster",
                    "metadata": {"name": name, "labels": labels},
                    "spec": {"secretRef": "unused"},
                },
            )
        for text in [
            "plan=gold",
            "plan==gold",
            "plan!=gold",
            "zone in (eu, us),plan",
            "plan notin (gold)",
            "!plan",
            "plan,!size",
            "size>4",
            "size<4",
            "app.kubernetes.io/name=db",
            "zone=eu,plan!=silver",
            "",
        ]:
            served = master.custom.list_namespaced_custom_object(
                CLUSTER_GROUP, VERSION, namespace, "sfclusters", label_selector=text
            )["items"]
            ours = {name for name, labels in labelled.items() if selectors.parse(text).matches(labels)}
            assert {item["metadata"]["name"] for item in served} == ours, text
        for bad in ["plan=gold,", "plan in (a b)", "plan=a b", "=gold"]:
            try:
                master.custom.list_namespaced_custom_object(
                    CLUSTER_GROUP, VERSION, namespace, "sfclusters", label_selector=bad
                )
            except ApiException as exc:
                assert exc.status == 400, bad
                with pytest.raises(selectors.SelectorError):
                    selectors.parse(bad)
            else:
                raise AssertionError(f"the API server accepted {bad!r}")
    finally:
        master.core.delete_namespace(namespace)
