"""The controller's requests reuse their connections (issue 31): an answer left unread keeps its connection out
of the pool until the garbage collector closes it, and the next request dials a new one (TCP and TLS, on both
sides). Events were recorded that way — about one new connection per provisioned instance."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from opbroker.controller.kube import Kube


def connections_made(api: client.ApiClient) -> int:
    pools: Any = api.rest_client.pool_manager.pools
    return sum(pools[key].num_connections for key in pools.keys())  # noqa: SIM118 (the container does not iterate)


def test_events_are_recorded_on_one_connection(api_client: client.ApiClient, namespace: str) -> None:
    kube = Kube(client.ApiClient(api_client.configuration))
    owner = client.CoreV1Api(kube.api_client).create_namespaced_config_map(
        namespace, {"metadata": {"name": "owner"}}, _preload_content=False
    )
    owner.read()
    before = connections_made(kube.api_client)
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner", "namespace": namespace, "uid": "u"}}
    for number in range(20):
        kube.emit_event(body, reason="Tested", message=f"event {number}")
    assert connections_made(kube.api_client) == before
    assert len(client.CoreV1Api(api_client).list_namespaced_event(namespace).items) == 20
