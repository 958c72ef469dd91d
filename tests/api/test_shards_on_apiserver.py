"""A sharded controller's objects (issue 46) as a real API server takes them: the StatefulSet and its headless
Service are accepted as :mod:`opbroker.api.controllerinstall` builds them, and the leader-election Role lets the
controller's account read and renew exactly its shards' Leases — not the unsharded one, so a replica left from a
Deployment cannot go on leading next to the shards."""

from __future__ import annotations

import uuid

from kubernetes import client

from opbroker.api import rbac
from opbroker.api.controllerinstall import ControllerSpec, Names, controller_objects
from opbroker.api.conventions import service_account_user
from opbroker.controller.runtime.kube import Kube
from tests.tenancy_support import allowed

APPLIED = (
    "controller-account",
    "controller-leader-election-role",
    "controller-leader-election-role-binding",
    "controller-headless-service",
    "controller-statefulset",
    "controller-disruption-budget",
)


def test_the_api_server_takes_the_sharded_objects_and_the_role_renews_only_the_shards_leases(
    api_client: client.ApiClient,
) -> None:
    namespace = f"cp-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": namespace, "labels": {"opbroker.io/test": "true"}}})
    try:
        objects = dict(controller_objects(ControllerSpec(namespace=namespace, image="opbroker:shards", shards=3)))
        kube = Kube(api_client)
        for role in APPLIED:
            kube.apply(objects[role], field_manager="opbroker-test")
        names = Names(namespace)
        stateful = client.AppsV1Api(api_client).read_namespaced_stateful_set(names.controller, namespace)
        assert stateful.spec.replicas == 6
        assert stateful.spec.pod_management_policy == "Parallel"
        assert stateful.spec.service_name == names.controller
        assert core.read_namespaced_service(names.controller, namespace).spec.cluster_ip == "None"

        user = service_account_user(namespace, names.controller)
        for lease in rbac.shard_leases(shards=3):
            assert allowed(api_client, user, "get", "coordination.k8s.io", "leases", namespace, lease), lease
            assert allowed(api_client, user, "update", "coordination.k8s.io", "leases", namespace, lease), lease
        for lease in (rbac.LEADER_LEASE, f"{rbac.LEADER_LEASE}-shard-3"):
            assert not allowed(api_client, user, "update", "coordination.k8s.io", "leases", namespace, lease), lease
        # The unsharded controller's Lease: read (a shard waits until it is free), never renewed.
        assert allowed(api_client, user, "get", "coordination.k8s.io", "leases", namespace, rbac.LEADER_LEASE)
        assert not allowed(
            api_client, user, "get", "coordination.k8s.io", "leases", namespace, f"{rbac.LEADER_LEASE}-shard-3"
        )
    finally:
        core.delete_namespace(namespace)
