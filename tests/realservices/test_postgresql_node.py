"""PostgreSQL from Debian's packages, provisioned and bound only through opbroker's OSB API on a cluster with a
node, and the bound credentials used: the example plan ``examples/postgresql-statefulset`` runs the server with
Kubernetes' own controllers (StatefulSet, Service, Secret), bind creates a role with a psql Job, unbind drops it.

This machine connects with the credentials the broker answers, to the Service's cluster address (kube-proxy's
rules on the machine), with pg8000, and runs a query; after unbind the same credentials are refused; after
deprovision nothing the plan made is left. The controller and broker run as local processes (the quickest stack
with a node: no opbroker image to build); the database and its Jobs run as pods from the locally built image.
Needs root, Debian's containerd, runc and CNI plugins (tests/localcluster/test_node.py).
"""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import Iterator

import pg8000.exceptions
import pytest
from kubernetes import client, config

from opbroker.api.conventions import DEFAULT_NAMESPACE
from opbroker.devcluster import postgres_plan
from opbroker.devcluster.devstack import DEMO_NAMESPACE, DevStack, Endpoint
from tests.controller_support import wait_for

pytestmark = pytest.mark.apiserver  # its own fixture starts a cluster with a node (tests/conftest.py)


def _say(message: str) -> None:
    print(f"[postgresql node] {message}")


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[DevStack, Endpoint, client.ApiClient]]:
    dev = DevStack(f"pg-node-{os.getpid()}", node=True, broker_port=18931)
    try:
        endpoint = dev.up(_say)
        api = config.new_client_from_config(config_file=str(endpoint.kubeconfig))
        postgres_plan.install(dev.plane, api, _say)
        yield dev, endpoint, api
        api.close()
    finally:
        dev.down(_say)


def left_behind(api: client.ApiClient, instance_id: str, binding_id: str) -> dict[str, list[str]]:
    """Every object the plan or opbroker made for the instance and its binding that still exists."""
    core, apps, batch = client.CoreV1Api(api), client.AppsV1Api(api), client.BatchV1Api(api)
    ours = (f"pg-{instance_id}", f"pg-{binding_id}")

    def mine(items: list[object]) -> list[str]:
        return [i.metadata.name for i in items if i.metadata.name.startswith(ours)]  # type: ignore[attr-defined]

    registries = [
        s.metadata.name for s in core.list_secret_for_all_namespaces(label_selector="opbroker.io/registry-of").items
    ]
    return {
        "statefulsets": mine(apps.list_namespaced_stateful_set(DEMO_NAMESPACE).items),
        "services": mine(core.list_namespaced_service(DEMO_NAMESPACE).items),
        "secrets": mine(core.list_namespaced_secret(DEMO_NAMESPACE).items),
        "jobs": mine(batch.list_namespaced_job(DEMO_NAMESPACE).items),
        "pods": mine(core.list_namespaced_pod(DEMO_NAMESPACE).items),
        "persistentvolumeclaims": [
            p.metadata.name for p in core.list_namespaced_persistent_volume_claim(DEMO_NAMESPACE).items
        ],
        "registries": registries,
        "instances and bindings": [
            o["metadata"]["name"]
            for plural in ("sfserviceinstances", "sfservicebindings")
            for o in client.CustomObjectsApi(api).list_namespaced_custom_object(
                "osb.servicefabrik.io", "v1alpha1", DEMO_NAMESPACE, plural
            )["items"]
        ],
    }


def test_bound_credentials_log_in_are_refused_after_unbind_and_deprovision_leaves_nothing(
    stack: tuple[DevStack, Endpoint, client.ApiClient],
) -> None:
    _, endpoint, api = stack
    walk = postgres_plan.Walk(endpoint, _say)
    binding_id = str(uuid.uuid4())
    try:
        walk.provision()
        statefulset = client.AppsV1Api(api).read_namespaced_stateful_set(f"pg-{walk.instance_id}", DEMO_NAMESPACE)
        assert statefulset.status.ready_replicas == 1
        superuser = client.CoreV1Api(api).read_namespaced_secret(f"pg-{walk.instance_id}-superuser", DEMO_NAMESPACE)
        assert superuser.data["password"]

        credentials = walk.bind(binding_id)
        assert credentials.username.startswith("u") and len(credentials.password) == 32
        assert credentials.username != "postgres"
        # The role's password came from the binding's registry; the superuser's never leaves its Secret.
        instance = client.CustomObjectsApi(api).get_namespaced_custom_object(
            "osb.servicefabrik.io", "v1alpha1", DEMO_NAMESPACE, "sfserviceinstances", walk.instance_id
        )
        assert base64.b64decode(superuser.data["password"]).decode() not in str(instance)

        assert postgres_plan.wait_for_login(credentials) == f"{credentials.username} 42"

        walk.unbind(binding_id)
        with pytest.raises(pg8000.exceptions.DatabaseError) as refused:
            postgres_plan.login(credentials)
        assert refused.value.args[0]["C"] == "28P01", refused.value.args  # password authentication failed

        walk.deprovision()

        def nothing_left() -> bool:
            return not any(left_behind(api, walk.instance_id, binding_id).values())

        wait_for(nothing_left, 120, "every object of the instance and its binding to go", interval=1)
        assert {k: v for k, v in left_behind(api, walk.instance_id, binding_id).items() if v} == {}
        core = client.CoreV1Api(api)
        assert core.list_namespaced_secret(DEFAULT_NAMESPACE, label_selector="opbroker.io/registry-of").items == []
    finally:
        walk.close()
