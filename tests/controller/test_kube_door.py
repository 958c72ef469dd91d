"""The door's calls that placement, the sister watch and probe, the rollouts' pages and the lease release now make
through ``kube.py`` instead of the client (against the real API server; FakeKube's answers: test_fake_kube_parity)."""

from __future__ import annotations

import asyncio
import itertools

from kubernetes import client

from opbroker.controller.kinds import INSTANCES
from opbroker.controller.runtime import leadership
from opbroker.controller.runtime.clock import FakeClock
from opbroker.controller.runtime.kube import Kube
from opbroker.controller.runtime.leadership import Outcome
from opbroker.kubeclient import transport
from opbroker.kubeclient.astreams import AsyncTransport
from opbroker.kubeclient.lean import LeanCustomObjects
from tests.transport_support import Dials


def instance(name: str, namespace: str) -> dict[str, object]:
    return {
        "apiVersion": INSTANCES.api_version,
        "kind": "SFServiceInstance",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"instanceId": name, "serviceId": "s", "planId": "p"},
    }


def test_pages_and_a_delete_by_uid(api_client: client.ApiClient, namespace: str) -> None:
    kube = Kube(api_client)
    for name in ("a", "b", "c"):
        kube.create_custom(INSTANCES, instance(name, namespace))
    first, token, version = kube.list_custom_page(INSTANCES, namespace, limit=2)
    assert token is not None and version
    rest, end, _ = kube.list_custom_page(INSTANCES, namespace, limit=2, token=token)
    assert [o["metadata"]["name"] for o in first + rest] == ["a", "b", "c"] and end is None

    uid = kube.get_custom(INSTANCES, namespace, "b", fresh=True)["metadata"]["uid"]  # type: ignore[index]
    assert kube.delete_custom(INSTANCES, namespace, "b", uid="another-object") is False
    assert kube.get_custom(INSTANCES, namespace, "b", fresh=True) is not None
    assert kube.delete_custom(INSTANCES, namespace, "b", uid=uid) is True


def test_namespaces_version_nodes_pods(api_client: client.ApiClient, namespace: str) -> None:
    kube = Kube(api_client)
    assert kube.create_namespace(namespace) is False  # exists already
    assert kube.server_version(timeout=5.0).startswith("v1.")
    assert isinstance(kube.list_nodes(timeout=5.0), list)
    assert all(p.meta.namespace for p in kube.list_pods(field_selector="status.phase!=Failed", timeout=5.0))


_names = itertools.count()


def test_the_lease_is_taken_held_and_released_against_the_api_server(
    api_client: client.ApiClient, namespace: str
) -> None:
    """The election's lock on a real API server: created by the first, held against the second, released by its
    holder only (the holder emptied), then taken by the second at once."""
    name = f"lease-{next(_names)}"
    clock = FakeClock()

    def lock(identity: str) -> leadership.LeaseLock:
        requests = AsyncTransport(transport.transport_of(api_client))
        return leadership.LeaseLock(requests, namespace, name, identity, lease_seconds=15, clock=clock)

    def holder() -> tuple[str | None, int | None]:
        lease = client.CoordinationV1Api(api_client).read_namespaced_lease(name, namespace)
        return lease.spec.holder_identity, lease.spec.lease_transitions

    async def scenario() -> None:
        first, second = lock("first"), lock("second")
        assert await first.attempt() is Outcome.LEADING
        assert await second.attempt() is Outcome.HELD and second.holder == "first"
        assert await first.attempt() is Outcome.LEADING  # renewed at the version read
        assert await second.release() is False
        assert await first.release() is True
        assert await asyncio.to_thread(holder) == (None, 0)
        assert await second.attempt() is Outcome.LEADING  # released: no need to wait out the lease
        assert await asyncio.to_thread(holder) == ("second", 1)
        await first.close()
        await second.close()

    asyncio.run(scenario())


def test_events_give_their_connection_back_to_the_pool(api_client: client.ApiClient, namespace: str) -> None:
    """An event's answer is read whole, and its connection reused: one kept from the pool made the next request
    dial and TLS-handshake a new one, once per event (the Service Catalog bench's profile)."""
    kube = Kube(api_client)
    dials = Dials()
    kube.custom = LeanCustomObjects(api_client, transport=transport.transport_of(api_client, backend=dials))
    try:
        subject = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "uid": "u"}}
        for n in range(10):
            kube.emit_event(
                {**subject, "metadata": {**subject["metadata"], "namespace": namespace}}, reason="Probe", message=str(n)
            )
            assert kube.read_namespace(namespace) is not None
        assert dials.count == 1  # 20 requests one after the other: one connection
        events = client.CoreV1Api(api_client).list_namespaced_event(namespace, field_selector="reason=Probe").items
        assert len(events) == 10
    finally:
        kube.custom.close()
