"""The broker's namespace index on a real API server: it lists in pages and watches, both metadata only, and
follows creations and deletions (issue 31: a full watch made the broker decode every status patch of every
instance in the cluster, and its listing was one answer however many instances there were)."""

# ruff: noqa: F811  (test functions take the imported fixtures as arguments)

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from kubernetes import client

from opbroker.broker import locating
from opbroker.broker.locating import NamespaceIndex
from opbroker.broker.records import Kind
from opbroker.kubeclient.lean import METADATA_LIST, METADATA_WATCH
from tests.broker_support import (  # noqa: F401  (pytest fixtures)
    ASYNC_PLAN,
    Harness,
    StandInController,
    broker,
    new_id,
    osb,
    provision_body,
    wait_for,
)
from tests.loop_support import loop_in_thread

GROUP, VERSION, INSTANCES = "osb.servicefabrik.io", "v1alpha1", "sfserviceinstances"


def provision(osb: httpx.Client, instance_id: str) -> None:
    answer = osb.put(
        f"/v2/service_instances/{instance_id}", params={"accepts_incomplete": "true"}, json=provision_body(ASYNC_PLAN)
    )
    assert answer.status_code == 202, answer.text


def test_the_index_lists_in_pages_and_watches_metadata_only(
    broker: Harness, osb: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    listed = [new_id() for _ in range(3)]
    for instance_id in listed:
        provision(osb, instance_id)
    monkeypatch.setattr(locating, "METADATA_PAGE", 2)  # three instances at least: two pages at least
    index = NamespaceIndex(broker.api_client, (Kind.INSTANCE,), watch_seconds=5)
    asked: list[dict[str, Any]] = []
    requests = index._source.requests
    request, stream = requests.request, requests.stream

    def record(options: dict[str, Any]) -> None:
        asked.append({**dict(options["query"]), "accept": options["headers"]["Accept"]})

    async def recorded(method: str, path: str, **options: Any) -> Any:
        record(options)
        return await request(method, path, **options)

    async def streamed(method: str, path: str, **options: Any) -> Any:
        record(options)
        return await stream(method, path, **options)

    requests.request, requests.stream = recorded, streamed  # type: ignore[method-assign]
    with loop_in_thread() as loop:
        index.start(loop)
        try:
            watched_on(broker, osb, index, listed)
        finally:
            index.stop()
            asyncio.run_coroutine_threadsafe(index.wait(), loop).result(10)
    lists = [options for options in asked if options.get("watch") != "true"]
    watches = [options for options in asked if options.get("watch") == "true"]
    assert len(lists) >= 2 and all(options["limit"] == "2" for options in lists)
    assert lists[1]["continue"]  # the second page continues the first
    assert all(options["accept"] == METADATA_LIST for options in lists)
    assert watches and all(options["accept"] == METADATA_WATCH for options in watches)
    assert all(options["labelSelector"] == locating.RECORDED for options in asked)


def watched_on(broker: Harness, osb: httpx.Client, index: NamespaceIndex, listed: list[str]) -> None:
    """The index, started on its loop, lists ``listed`` and follows a creation and a deletion."""
    assert index.synced[Kind.INSTANCE].wait(15)
    assert all(index.get(Kind.INSTANCE, name) == broker.namespace for name in listed)
    watched = new_id()
    provision(osb, watched)
    wait_for(lambda: index.get(Kind.INSTANCE, watched) == broker.namespace, what="the watch's ADDED")
    client.CustomObjectsApi(broker.api_client).delete_namespaced_custom_object(
        GROUP, VERSION, broker.namespace, INSTANCES, watched
    )
    StandInController(broker.api_client).release("instance", broker.namespace, watched)  # the finalizer
    wait_for(lambda: index.get(Kind.INSTANCE, watched) is None, what="the watch's DELETED")
