"""The informers (issue 31: the controller's watches without kopf): list, then watch, against the real API
server; each handler's own copy; the identity only for a metadata-only watch; deletions missed while a stream was
broken delivered when it is listed again; a bounded line; a prompt stop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from opbroker.controller.runtime.informers import Informers, resources_of
from opbroker.controller.runtime.watches import Watch
from tests.controller.example_kind.view import GREETINGS
from tests.controller.test_example_kind import install_crd
from tests.controller_support import wait_for
from tests.loop_support import loop_in_thread

# A kind of the tests' own (the example kind's Greeting): no controller of the session reconciles it. With
# SFServiceInstances, the session's controller (once an earlier test started it) wrote finalizers and status
# between the test's own writes — extra MODIFIED events (CI, once).
GROUP, VERSION, PLURAL = GREETINGS.group, GREETINGS.version, GREETINGS.plural
API_VERSION = GREETINGS.api_version


class Recorder:
    """A handler that keeps (type, name) of the events of one namespace, and the bodies it was given."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.events: list[tuple[str, str]] = []
        self.bodies: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def __call__(self, event_type: str, body: dict[str, Any]) -> None:
        if body["metadata"].get("namespace") != self.namespace:
            return
        with self.lock:
            self.events.append((event_type, body["metadata"]["name"]))
            self.bodies.append(body)

    def saw(self, event_type: str, name: str) -> bool:
        with self.lock:
            return (event_type, name) in self.events


def instance(name: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "Greeting",
        "metadata": {"name": name, "labels": {"t": "informers"}},
        "spec": {"name": name},
    }


@pytest.fixture
def custom(api_client: client.ApiClient) -> client.CustomObjectsApi:
    install_crd(api_client)
    return client.CustomObjectsApi(api_client)


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """The controller's loop, in a thread of its own: the informers' tasks run there, the test waits here."""
    with loop_in_thread() as running:
        yield running


@pytest.fixture
def started(
    api_client: client.ApiClient, namespace: str, loop: asyncio.AbstractEventLoop
) -> Iterator[tuple[Informers, Recorder, Recorder, list[Any]]]:
    whole, identity = Recorder(namespace), Recorder(namespace)
    listings: list[Any] = []
    watches = [
        Watch(API_VERSION, PLURAL, whole, "whole"),
        Watch(API_VERSION, PLURAL, identity, "identity", metadata_only=True, kind="Greeting"),
    ]
    informers = Informers(
        api_client,
        watches,
        on_page=lambda key, objects: listings.append(("page", key, list(objects))),
        on_listed=lambda key, listed: listings.append(("listed", key, listed)),
    )
    yield informers, whole, identity, listings
    informers.stop()
    asyncio.run_coroutine_threadsafe(informers.wait(), loop).result(10)


def test_listed_then_watched_each_handler_with_its_own_copy(
    custom: client.CustomObjectsApi,
    namespace: str,
    started: tuple[Informers, Recorder, Recorder, list[Any]],
    loop: asyncio.AbstractEventLoop,
) -> None:
    informers, whole, identity, listings = started
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, instance("before"))
    informers.start(loop)
    assert informers.wait_listed(30)
    wait_for(lambda: whole.saw("ADDED", "before") and identity.saw("ADDED", "before"), 30, "the listing")
    *pages, (told, key, identities) = listings
    assert told == "listed" and key == (API_VERSION, PLURAL, None) and (namespace, "before") in identities
    assert pages and all(what == "page" and at == key for what, at, _ in pages)
    objects = [obj for _, _, page in pages for obj in page]
    assert {(o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in objects} == identities
    listed = next(o for o in objects if o["metadata"]["name"] == "before")
    assert listed["kind"] == "Greeting" and listed["apiVersion"] == API_VERSION  # list items lack them

    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, instance("after"))
    custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "after", {"spec": {"name": "renamed"}})
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "after")
    wait_for(lambda: whole.saw("DELETED", "after") and identity.saw("DELETED", "after"), 30, "the watch events")
    assert [e for e in whole.events if e[1] == "after"] == [
        ("ADDED", "after"),
        ("MODIFIED", "after"),
        ("DELETED", "after"),
    ]

    body = next(b for b in whole.bodies if b["metadata"]["name"] == "before")
    assert body["spec"]["name"] == "before"
    shown = next(b for b in identity.bodies if b["metadata"]["name"] == "before")
    assert set(shown) == {"apiVersion", "kind", "metadata"} and shown["kind"] == "Greeting"
    shown["metadata"]["name"] = "changed by the second handler"
    assert body["metadata"]["name"] == "before"  # each handler's copy is its own


def test_a_relisting_delivers_the_deletions_the_broken_stream_missed(
    custom: client.CustomObjectsApi,
    namespace: str,
    started: tuple[Informers, Recorder, Recorder, list[Any]],
    loop: asyncio.AbstractEventLoop,
) -> None:
    """What a relisting does after a broken stream: an object known before and now absent is delivered as
    deleted (kopf's relisting never did: the deletion was lost for good)."""
    informers, whole, _, _ = started
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, instance("kept"))
    ghost = {
        "apiVersion": API_VERSION,
        "kind": "Greeting",
        "metadata": {"name": "gone", "namespace": namespace},
    }
    known: dict[tuple[str, str], str | None] = {(namespace, "gone"): None}
    asyncio.run_coroutine_threadsafe(informers.informers[0]._list(known), loop).result(30)
    assert whole.saw("DELETED", "gone") and whole.saw("ADDED", "kept")  # told on the loop as the listing is read
    assert (namespace, "gone") not in known and known[(namespace, "kept")]  # kept: its version, to tell its end
    gone = next(b for b in whole.bodies if b["metadata"]["name"] == "gone")
    assert gone == ghost  # a tombstone: type and identity


def test_a_listing_is_told_and_delivered_page_by_page(
    api_client: client.ApiClient, custom: client.CustomObjectsApi, namespace: str, loop: asyncio.AbstractEventLoop
) -> None:
    """Each page is told, and its objects delivered, before the next page is read: a listing is never
    parsed whole (a restart's transient peak of memory); the end of the listing is told once, with every identity."""
    for name in ("p1", "p2", "p3"):
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, instance(name))
    told: list[tuple[str, Any]] = []
    informers = Informers(
        api_client,
        [Watch(API_VERSION, PLURAL, lambda *_: None, "quiet")],
        on_page=lambda _key, objects: told.append(("page", [o["metadata"]["name"] for o in objects])),
        on_listed=lambda _key, listed: told.append(("listed", listed)),
        list_page=1,
    )
    (informer,) = informers.informers
    queued: list[tuple[str, str]] = []
    informer._on_event = lambda event_type, obj: (  # delivered on the loop, as it reads
        told.append(("delivered", obj["metadata"]["name"])),
        queued.append((event_type, obj["metadata"]["name"])),
    )
    asyncio.run_coroutine_threadsafe(informer._list({}), loop).result(30)
    asyncio.run_coroutine_threadsafe(informers.wait(), loop).result(10)
    mine = {"p1", "p2", "p3"}  # the API server may hold other tests' instances too: their pages are left out
    seen = [e for e in told if (e[0] == "page" and mine & set(e[1])) or (e[0] == "delivered" and e[1] in mine)]
    assert seen == [
        ("page", ["p1"]),
        ("delivered", "p1"),
        ("page", ["p2"]),
        ("delivered", "p2"),
        ("page", ["p3"]),
        ("delivered", "p3"),
    ]
    assert told[-1][0] == "listed" and {(namespace, n) for n in ("p1", "p2", "p3")} <= told[-1][1]
    assert all(event_type == "ADDED" for event_type, _ in queued)


def test_stop_ends_every_stream_at_once(api_client: client.ApiClient, loop: asyncio.AbstractEventLoop) -> None:
    install_crd(api_client)
    informers = Informers(api_client, [Watch(API_VERSION, PLURAL, lambda *_: None, "quiet")], watch_seconds=300)
    informers.start(loop)
    assert informers.wait_listed(30)
    (informer,) = informers.informers
    wait_for(lambda: informer.live, 10, "the watch to start")
    informers.stop()  # from this thread, not the loop's
    assert informer.join(10)  # not at the watch's server-side end, 300 s away
    asyncio.run_coroutine_threadsafe(informers.wait(), loop).result(10)


def test_a_metadata_only_watch_must_name_its_kind_and_ids_are_unique() -> None:
    handler = lambda *_: None  # noqa: E731
    with pytest.raises(ValueError, match="must name its kind"):
        resources_of([Watch("apps/v1", "deployments", handler, "a", metadata_only=True)])
    with pytest.raises(ValueError, match="two watches"):
        resources_of([Watch("apps/v1", "deployments", handler, "a"), Watch("apps/v1", "jobs", handler, "a")])
    with pytest.raises(ValueError, match="core-group"):
        resources_of([Watch("v1", "secrets", handler, "s")])
    (one,) = resources_of(
        [Watch("apps/v1", "deployments", handler, "a"), Watch("apps/v1", "deployments", handler, "b")]
    )
    assert [w.id for w in one.watches] == ["a", "b"] and not one.metadata_only
