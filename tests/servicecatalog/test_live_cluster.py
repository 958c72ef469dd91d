"""Day two for Service Catalog Instances against a real kube-apiserver and the fake OSB broker over HTTP, with a
controller of its own whose resync is 3 s (``--resync-seconds 3``): a provisioned Instance of an
``instances_retrievable`` class is looked at at its broker after each resync — the broker's ``ready: false`` is
shown in Ready with its words and an Event, then a 404 is ``GoneAtBroker``, nothing deleted — while an Instance of a
class without ``instances_retrievable`` is never fetched.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from opbroker.devcluster.controlplane import ControlPlane
from tests.controller_support import Process, controller_command, wait_for
from tests.osb_fake_broker import FakeBroker, serve
from tests.servicecatalog_support import GROUP, VERSION, auth_secret, condition, create, custom, get, ready

RESYNC = 3.0


def services(suffix: str) -> list[dict[str, Any]]:
    def service(name: str, retrievable: bool) -> dict[str, Any]:
        return {
            "id": f"svc-{name}-{suffix}",
            "name": f"{name}-{suffix}",
            "description": "fake",
            "bindable": True,
            "instances_retrievable": retrievable,
            "plans": [{"id": f"plan-{name}-{suffix}", "name": "small", "description": "small"}],
        }

    return [service("fetchable", True), service("plain", False)]


def events(api_client: client.ApiClient, namespace: str, name: str) -> list[tuple[str, str, str]]:
    found = client.CoreV1Api(api_client).list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}")
    return [(e.type, e.reason, e.message) for e in found.items]


def test_a_provisioned_instance_is_looked_at_at_its_broker_after_each_resync(
    api_client: client.ApiClient,
    namespace: str,
    control_plane: ControlPlane,
    controller: Process,
    tmp_path: Path,
) -> None:
    suffix = secrets.token_hex(3)
    broker = FakeBroker(polls=1, services=services(suffix), serves_fetch=True)
    controller.stop()  # the session's controller resyncs every 600 s; this one every 3 s
    own = Process("controller-resync", controller_command(control_plane, "--resync-seconds", str(RESYNC)), tmp_path)
    own.start()
    name = f"fake-{suffix}"
    credentials = {"username": broker.username, "password": broker.password}
    try:
        with serve(broker) as url, auth_secret(api_client, f"fake-auth-{suffix}", credentials) as secret_ref:
            custom(api_client).create_cluster_custom_object(
                GROUP,
                VERSION,
                "brokers",
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "Broker",
                    "metadata": {"name": name},
                    "spec": {"url": url, "authInfo": {"basic": {"secretRef": secret_ref}}},
                },
            )
            try:
                wait_for(lambda: ready(get(api_client, "brokers", name)) == ("True", "FetchedCatalog"), 30, "catalog")
                fetchable = get(api_client, "serviceclasses", f"fetchable-{suffix}")
                assert fetchable is not None and fetchable["instancesRetrievable"] is True
                for kind in ("fetchable", "plain"):
                    create(
                        api_client,
                        namespace,
                        "instances",
                        "Instance",
                        kind,
                        {"serviceClassName": f"{kind}-{suffix}", "planName": "small"},
                    )
                for kind in ("fetchable", "plain"):
                    wait_for(
                        lambda kind=kind: (
                            ready(get(api_client, "instances", kind, namespace)) == ("True", "Provisioned")
                        ),
                        60,
                        f"{kind} provisioned",
                    )
                ids = {
                    kind: (get(api_client, "instances", kind, namespace) or {})["status"]["externalID"]
                    for kind in ("fetchable", "plain")
                }
                settled = time.monotonic()

                def fetches(kind: str) -> int:
                    return len([r for r in broker.calls("GET") if r.path == f"/v2/service_instances/{ids[kind]}"])

                # The broker says the instance lost a replica: Ready says it, in its words, with an Event.
                broker.instances[ids["fetchable"]].attributes = {
                    "ready": "false",
                    "reason": "ReplicaLost",
                    "message": "one replica of three is down",
                }
                wait_for(
                    lambda: ready(get(api_client, "instances", "fetchable", namespace)) == ("False", "ReplicaLost"),
                    4 * RESYNC,
                    "Ready=False with the broker's reason",
                )
                instance = get(api_client, "instances", "fetchable", namespace) or {}
                assert (condition(instance, "Ready") or {})["message"] == "one replica of three is down"
                status = instance["status"]
                assert status["provisionStatus"] == "Provisioned" and not status.get("asyncOpInProgress")
                assert status["externalProperties"]["planExternalID"] == f"plan-fetchable-{suffix}"  # history kept
                wait_for(
                    lambda: (
                        ("Warning", "ReplicaLost", "one replica of three is down")
                        in events(api_client, namespace, "fetchable")
                    ),
                    10,
                    "the Warning Event",
                )

                # The broker forgets the instance: GoneAtBroker, a Warning Event, the Instance kept.
                del broker.instances[ids["fetchable"]]
                wait_for(
                    lambda: ready(get(api_client, "instances", "fetchable", namespace)) == ("False", "GoneAtBroker"),
                    4 * RESYNC,
                    "GoneAtBroker",
                )
                wait_for(
                    lambda: any(
                        kind == "Warning" and reason == "GoneAtBroker"
                        for kind, reason, _ in events(api_client, namespace, "fetchable")
                    ),
                    10,
                    "the GoneAtBroker Event",
                )
                assert get(api_client, "instances", "fetchable", namespace) is not None
                assert not broker.calls("DELETE", ids["fetchable"])  # nothing deleted

                # One GET per resync at most (spread ±10 %), and none ever for the class without it.
                elapsed = time.monotonic() - settled
                assert 2 <= fetches("fetchable") <= elapsed / (0.9 * RESYNC) + 2
                assert fetches("plain") == 0
            finally:
                for kind in ("fetchable", "plain"):
                    with contextlib.suppress(ApiException):
                        custom(api_client).delete_namespaced_custom_object(GROUP, VERSION, namespace, "instances", kind)
                wait_for(
                    lambda: all(get(api_client, "instances", k, namespace) is None for k in ("fetchable", "plain")),
                    60,
                    "the Instances deprovisioned and gone",
                )
                custom(api_client).delete_cluster_custom_object(GROUP, VERSION, "brokers", name)
                for kind in ("fetchable", "plain"):
                    with contextlib.suppress(ApiException):
                        custom(api_client).delete_cluster_custom_object(
                            GROUP, VERSION, "serviceclasses", f"{kind}-{suffix}"
                        )
    finally:
        own.stop()
        controller.start()
