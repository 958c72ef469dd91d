"""The source watches on a scripted API: one informer per kind serving the store, the subscribers and the owners."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Mapping
from types import SimpleNamespace
from typing import Any

from opbroker.api.meta import ResourceRef
from opbroker.api.shards import Shards
from opbroker.controller.runtime.served import ServedResource
from opbroker.controller.runtime.sources import Portion, SourceIndex, SourceWatchers
from opbroker.controller.runtime.store import UNKNOWN, ObjectStore
from opbroker.kubeclient.informer import Collection
from tests.informer_support import NO_WAIT, Scripted, event
from tests.loop_support import loop_in_thread

SECRETS = ("v1", "Secret")
PODS = ("v1", "Pod")


def fake_kube() -> Any:
    """What SourceWatchers reads of the door: its store, and where a served kind lives."""

    def resource(api_version: str, kind: str) -> ServedResource:
        return ServedResource(api_version.rpartition("/")[0], kind.lower() + "s", kind, True)

    return SimpleNamespace(store=ObjectStore(), served=SimpleNamespace(resource=resource), api_client=None)


def run(watchers: SourceWatchers, source: Scripted, kind: tuple[str, str]) -> None:
    """Follow ``kind`` in this thread until the script is over."""
    watchers.ensure([])  # nothing started
    informer = watchers._informer(kind, kind[1].lower() + "s")
    watchers._informers[kind] = informer
    source.informers.append(informer)
    asyncio.run(informer.run())


def obj(name: str, version: str, kind: str = "Secret", api_version: str = "v1") -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": version},
    }


def test_subscribers_hear_what_a_listing_found_and_every_event() -> None:
    kube = fake_kube()
    source = Scripted([("list", [obj("a", "5"), obj("b", "5")]), ("watch", [event("DELETED", obj("a", "6"))])])
    watchers = SourceWatchers(kube, SourceIndex(), on_change=lambda _key: None, retry=NO_WAIT, source=source)
    heard: list[tuple[str, str]] = []
    watchers._listeners[SECRETS] = [lambda event_type, o: heard.append((event_type, o["metadata"]["name"]))]
    run(watchers, source, SECRETS)
    assert heard == [("ADDED", "a"), ("ADDED", "b"), ("DELETED", "a")]
    assert kube.store.version_of(SECRETS, "ns", "b") == "5"
    assert kube.store.lookup(SECRETS, "ns", "a") is None  # deleted, and the kind is complete


def test_a_failing_subscriber_does_not_stop_the_watch() -> None:
    watchers = SourceWatchers(fake_kube(), SourceIndex(), lambda _key: None)
    heard: list[str] = []

    def broken(_event_type: str, _obj: dict[str, Any]) -> None:
        raise RuntimeError("boom")

    watchers._listeners[SECRETS] = [broken, lambda _t, o: heard.append(o["metadata"]["name"])]
    watchers._tell(SECRETS, "MODIFIED", {"metadata": {"name": "x"}})
    assert heard == ["x"]


def test_owners_are_told_after_a_relisting_because_the_gaps_events_are_lost() -> None:
    """A watch that fails is listed again; what changed between the failure and the new listing was never told,
    so every owner depending on an object of the kind is reported changed once (its poll is only a safety
    net). The first listing reports nobody: the owners' own reconciles have just read what it holds."""
    index = SourceIndex()
    index.track(("i", "ns", "one"), [ResourceRef(api_version="v1", kind="Pod", namespace="ns", name="a")])
    index.track(("i", "ns", "two"), [ResourceRef(api_version="v1", kind="Pod", namespace="ns", name="b")])
    index.track(("i", "ns", "other"), [ResourceRef(api_version="v1", kind="ConfigMap", namespace="ns", name="a")])
    pods = [obj("a", "1", "Pod"), obj("b", "1", "Pod")]
    source = Scripted([("list", pods), ("watch", ConnectionError("reset")), ("list", pods)])
    told: list[Any] = []
    kube = fake_kube()
    watchers = SourceWatchers(kube, index, lambda key: told.append((len(source.requests), key)), source=source)
    watchers._retry = NO_WAIT
    run(watchers, source, PODS)
    assert sorted(told) == [(3, ("i", "ns", "one")), (3, ("i", "ns", "two"))]  # during the second listing


def test_a_kind_is_live_from_its_listing_until_its_watch_fails() -> None:
    """``live`` names the kinds whose changes reach their owners at once (their polls may back off): listed and
    not failed since. A failed watch takes its kind out until it is listed again; a stopped one too."""
    watchers: SourceWatchers
    seen: list[tuple[str, bool]] = []

    class Recording(Scripted):
        async def page(self, collection: Collection, token: str | None) -> Any:
            seen.append(("list", PODS in watchers.live))
            return await super().page(collection, token)

        async def watch(self, collection: Collection, since: str | None, seconds: int) -> Any:
            seen.append(("watch", PODS in watchers.live))
            return await super().watch(collection, since, seconds)

    source = Recording([("list", [obj("a", "1", "Pod")]), ("watch", ConnectionError("reset")), ("list", [])])
    watchers = SourceWatchers(fake_kube(), SourceIndex(), lambda _key: None, retry=NO_WAIT, source=source)
    assert PODS not in watchers.live
    run(watchers, source, PODS)
    # listed: live when watching; the watch failed: not live while listing again; live again once listed
    assert seen == [("list", False), ("watch", True), ("list", False), ("watch", True)]
    assert PODS not in watchers.live  # stopped


def test_the_echo_of_an_owners_own_apply_tells_only_the_other_owners() -> None:
    """An owner's apply is noted with the version it wrote; the watch event of that version (its echo) tells
    the other owners of the object, not the writer — whose reconcile evaluated the object as written — and any
    later version (the operator's) tells the writer too. Forgetting an owner, or no longer tracking the object,
    drops the note."""
    ref = ResourceRef(api_version="demo.io/v1", kind="Database", namespace="ns", name="db")
    writer, reader = ("i", "ns", "writer"), ("i", "ns", "reader")
    index = SourceIndex()
    index.track(writer, [ref])
    index.track(reader, [ref])
    database = ("demo.io/v1", "Database")
    index.wrote(writer, obj("db", "7", "Database", "demo.io/v1"))
    key = ("demo.io/v1", "Database", "ns", "db")
    assert index.owners_of(key, "7") == {reader}
    assert index.owners_of(key, "8") == {writer, reader}
    assert index.owners_of(key) == {writer, reader}

    events = [
        event("ADDED", obj("db", "7", "Database", "demo.io/v1")),
        event("MODIFIED", obj("db", "8", "Database", "demo.io/v1")),
    ]
    told: list[Any] = []
    source = Scripted([("list", []), ("watch", events)])
    watchers = SourceWatchers(fake_kube(), index, told.append, retry=NO_WAIT, source=source)
    run(watchers, source, database)
    assert told[0] == reader and len(told) == 3  # version 7: the reader alone
    assert sorted(told[1:]) == sorted([writer, reader])  # version 8: both

    index.track(writer, [])  # no longer depends on it: the note goes with it
    index.track(writer, [ref])
    assert index.owners_of(key, "7") == {writer, reader}
    index.wrote(writer, obj("db", "9", "Database", "demo.io/v1"))
    index.forget(writer)
    index.track(writer, [ref])
    assert index.owners_of(key, "9") == {writer, reader}


class Held:
    """A source of one object per kind: its first watch tells it changed, every later one holds until cancelled."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []

    async def page(self, collection: Collection, token: str | None) -> Mapping[str, Any]:
        self.requests.append(("list", collection.plural))
        return {"items": [obj("a", "1", collection.kind or "")], "metadata": {"resourceVersion": "1"}}

    async def watch(self, collection: Collection, since: str | None, seconds: int) -> Any:
        first = ("watch", collection.plural) not in self.requests
        self.requests.append(("watch", collection.plural))
        return Lines([event("MODIFIED", obj("a", "2", collection.kind or ""))] if first else None)


class Lines:
    def __init__(self, lines: list[bytes] | None) -> None:
        self._lines = lines

    async def lines(self, limit: int) -> AsyncIterator[bytes]:
        if self._lines is None:
            await asyncio.Event().wait()  # held: until the task is cancelled
        for line in self._lines or []:
            yield line

    async def aclose(self) -> None: ...


def test_a_kind_ensured_from_a_worker_thread_is_followed_on_the_loop() -> None:
    """``ensure`` runs in reconciles' threads: a kind ensured before ``start`` starts with it, one ensured after
    starts at once, each a task on the loop; what it tells (the owners, to the loop-side enqueue) runs on the loop
    thread, and a worker thread waits for the listing without the loop ever waiting."""
    index = SourceIndex()
    index.track(("i", "ns", "one"), [ResourceRef(api_version="v1", kind="Pod", namespace="ns", name="a")])
    told: list[tuple[Any, str]] = []
    source = Held()
    watchers = SourceWatchers(
        fake_kube(),
        index,
        lambda key: told.append((key, threading.current_thread().name)),
        retry=NO_WAIT,
        source=source,
    )
    with loop_in_thread() as loop:
        worker = threading.Thread(target=watchers.ensure, args=([PODS],))
        worker.start()
        worker.join(10)
        assert PODS in watchers.watched and not source.requests  # ensured, not started: the loop is not named yet
        watchers.start(loop)
        assert watchers.wait_listed([PODS], 10)
        later = threading.Thread(target=watchers.ensure, args=([SECRETS],))
        later.start()
        later.join(10)
        assert watchers.wait_listed([SECRETS], 10)
        deadline = time.monotonic() + 10
        while len(source.requests) < 6 and time.monotonic() < deadline:
            time.sleep(0.01)
        watchers.stop()
        asyncio.run_coroutine_threadsafe(watchers.wait(), loop).result(10)
    assert told == [(("i", "ns", "one"), "test-loop")]  # the Pod's MODIFIED event, told on the loop's thread
    assert sorted(source.requests) == sorted([(w, p) for p in ("pods", "secrets") for w in ("list", "watch", "watch")])


def test_a_reader_of_whole_objects_does_not_wait_for_a_kind_held_by_metadata_only() -> None:
    """A settled instance's first check waits for the listings of the kinds it reads whole; a metadata-only kind's
    (Secrets') listing brings no body, so it is not waited for — the whole Secrets listing of a restart is long."""
    source = Held()
    watchers = SourceWatchers(
        fake_kube(), SourceIndex(), lambda key: None, retry=NO_WAIT, source=source, metadata_only=[SECRETS]
    )
    with loop_in_thread() as loop:
        watchers.start(loop)
        ensured = threading.Thread(target=watchers.ensure, args=([PODS],))
        ensured.start()
        ensured.join(10)
        assert watchers.wait_listed([PODS], 10)
        assert watchers.wait_listed([SECRETS, PODS], 0, bodies=True)  # Secrets: not watched, and not waited for
        assert not watchers.wait_listed([SECRETS, PODS], 0)  # waited for: not watched, so not listed
        watchers.stop()
        asyncio.run_coroutine_threadsafe(watchers.wait(), loop).result(10)


def test_a_shards_source_watch_follows_its_portion_and_never_takes_its_absence_for_a_fact() -> None:
    """Sharded (issue 46): each kind is listed and watched by the shard's selector, and what it does not hold is read
    from the API (labelled for another shard, it exists) — except the kinds followed whole (the coordinator's
    Secrets), complete as before. An object relabelled away leaves the watch, and its copy with it."""
    shard = Shards(3, 1)
    portion = Portion(shard.sources_selector or "", shard.covers, frozenset({SECRETS}))
    database = ("demo.opbroker.io/v1", "Database")
    mine = obj("db", "5", *reversed(database))
    mine["metadata"]["labels"] = {"opbroker.io/shard": "1"}
    away = {**mine, "metadata": {**mine["metadata"], "resourceVersion": "6", "labels": {"opbroker.io/shard": "2"}}}
    kube = fake_kube()
    source = Scripted([("list", [mine]), ("watch", [event("DELETED", away)])])
    watchers = SourceWatchers(kube, SourceIndex(), lambda _key: None, retry=NO_WAIT, source=source, portion=portion)
    run(watchers, source, database)
    assert {c.label_selector for c in source.collections} == {"opbroker.io/shard notin (0,2)"}
    assert kube.store.lookup(database, "ns", "db") is UNKNOWN  # relabelled away: not held, read from the API
    assert kube.store.lookup(database, "ns", "never-seen") is UNKNOWN

    source = Scripted([("list", [obj("s", "7")])])
    watchers = SourceWatchers(kube, SourceIndex(), lambda _key: None, retry=NO_WAIT, source=source, portion=portion)
    run(watchers, source, SECRETS)
    assert source.collections[0].label_selector is None  # followed whole
    assert kube.store.lookup(SECRETS, "ns", "missing") is None  # complete: absent means absent
