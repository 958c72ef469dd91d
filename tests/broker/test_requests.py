"""The API requests the broker makes per OSB request (issue 31): counted at the Kubernetes client, over HTTP.

Each counts the calls the broker's client makes while one OSB request (or one burst) is answered; the figures
per request kind are in ``bench/results/`` (``python -m bench.brokercost``).
"""

# ruff: noqa: F811  (test functions take the imported fixtures as arguments)

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from kubernetes import client

from opbroker.api import conventions
from opbroker.broker.records import Kind
from opbroker.kubeclient import transport
from tests.broker.test_bindings import RESPONSE, bind_body, binding_url, ready_instance
from tests.broker_support import (  # noqa: F401  (pytest fixtures)
    Harness,
    StandInController,
    broker,
    new_id,
    osb,
    stand_in,
    wait_for,
)


class Calls:
    """The API calls made through ``api_client`` (the broker's, shared with the test's stand-in controller) while
    counting, as ``(method, path)``, counted at the project's transport; watches are left out (the namespace
    index's run all along)."""

    def __init__(self, api_client: client.ApiClient, monkeypatch: pytest.MonkeyPatch) -> None:
        self.made: list[tuple[str, str]] = []
        self.counting = False
        self.hold_lists = threading.Event()
        self.hold_lists.set()
        self.lock = threading.Lock()
        original = transport.Transport.request

        def counted(made_by: transport.Transport, method: str, path: str, *args: Any, **kwargs: Any) -> Any:
            # The broker's requests go through the project's transport built from ``api_client`` (its default
            # headers are that client's: the same mapping); watches are streamed, not requested.
            if self.counting and made_by.headers is api_client.default_headers:
                with self.lock:
                    self.made.append((method, path.split("/v1alpha1/", 1)[-1].split("/api/v1/", 1)[-1]))
                if method == "GET" and path.endswith("/sfservices"):
                    self.hold_lists.wait(30)
            return original(made_by, method, path, *args, **kwargs)

        monkeypatch.setattr(transport.Transport, "request", counted)

    @contextmanager
    def counted(self) -> Iterator[None]:
        self.made.clear()
        self.counting = True
        try:
            yield
        finally:
            self.counting = False


@pytest.fixture
def calls(broker: Harness, monkeypatch: pytest.MonkeyPatch) -> Calls:
    return Calls(broker.api_client, monkeypatch)


def test_a_binding_is_fetched_with_two_reads_the_binding_and_its_credentials(
    broker: Harness, osb: httpx.Client, stand_in: StandInController, calls: Calls
) -> None:
    """GET binding read the instance first, only to learn the namespace to look for the binding in: the namespace
    index knows where the binding is, so that read is left out (made only when the index does not know)."""
    instance_id = ready_instance(osb, stand_in, broker)
    binding_id = new_binding(osb, stand_in, broker, instance_id)
    index = broker.app.state.index
    name = conventions.resource_name(binding_id)
    wait_for(lambda: index.get(Kind.BINDING, name) == broker.namespace, what="the index to see the binding")
    osb.get(binding_url(instance_id, binding_id))  # the catalog read, out of the count

    with calls.counted():
        fetched = osb.get(binding_url(instance_id, binding_id))
    assert (fetched.status_code, fetched.json()) == (200, RESPONSE)
    # Of the objects (not the catalog, nor a relist of the namespace index, should one fall in this window):
    reads = [
        (method, path)
        for method, path in calls.made
        if path.startswith("namespaces/") and not path.endswith(("/sfservices", "/sfplans"))
    ]
    assert reads == [
        ("GET", f"namespaces/{broker.namespace}/sfservicebindings/{name}"),
        ("GET", f"namespaces/{broker.namespace}/secrets/{stored_secret(stand_in, broker, name)}"),
    ]
    other = osb.get(binding_url("another-instance", binding_id))
    assert other.status_code == 404, other.text  # the binding found by the index is still checked


def test_requests_finding_the_catalog_stale_share_one_read_of_it(
    broker: Harness, osb: httpx.Client, calls: Calls
) -> None:
    """Every request needing the catalog read it when the cached one was older than its TTL: 32 concurrent
    requests at that moment made 32 reads. Those arriving while a read is under way now wait for it."""
    repository = broker.app.state.broker.repository
    repository._catalog = None  # stale for everyone
    calls.hold_lists.clear()  # the first read waits until every request has come
    with ThreadPoolExecutor(16) as pool, calls.counted():
        answers = [pool.submit(lambda: osb.get("/v2/catalog").status_code) for _ in range(16)]
        wait_for(lambda: calls.made, what="a catalog read to begin")
        threading.Event().wait(1.0)  # the other requests reach the broker meanwhile (and, before, read too)
        calls.hold_lists.set()
        statuses = [answer.result(timeout=60) for answer in answers]
    assert statuses == [200] * 16
    lists = [path for method, path in calls.made if path.endswith("/sfservices")]
    assert len(lists) == len(broker.settings.trusted_namespaces), calls.made


def new_binding(osb: httpx.Client, stand_in: StandInController, harness: Harness, instance_id: str) -> str:
    binding_id = new_id()
    url = binding_url(instance_id, binding_id)
    assert osb.put(url, params={"accepts_incomplete": "true"}, json=bind_body()).status_code == 202
    name = conventions.resource_name(binding_id)
    stand_in.adopt("binding", harness.namespace, name)
    stand_in.bound(harness.namespace, name, RESPONSE)
    return binding_id


def stored_secret(stand_in: StandInController, harness: Harness, name: str) -> str:
    stored = stand_in.get("binding", harness.namespace, name)
    assert stored is not None
    secret: str = stored["status"]["response"]["secretRef"]
    return secret


def test_an_osb_request_takes_one_worker_thread_hop(
    broker: Harness, osb: httpx.Client, stand_in: StandInController, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A poll went to anyio's thread pool four times: the credentials check, each of the two ``def`` dependencies,
    then the route. Each hop costs the event loop a wake-up and a thread switch; only the route (which calls the
    API server) needs a thread, the credentials being already read."""
    import anyio.to_thread

    instance_id = ready_instance(osb, stand_in, broker)
    poll = f"/v2/service_instances/{instance_id}/last_operation"
    assert osb.get(poll).status_code == 200  # the credentials read, out of the count
    hops: list[str] = []
    original = anyio.to_thread.run_sync

    async def counted(func: Any, *args: Any, **kwargs: Any) -> Any:
        hops.append(getattr(func, "__name__", type(func).__name__))
        return await original(func, *args, **kwargs)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counted)
    answer = osb.get(poll)
    assert answer.status_code == 200 and answer.json()["state"] == "succeeded", answer.text
    assert len(hops) == 1, hops
