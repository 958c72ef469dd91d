"""The source watches' pure parts: listing in pages of plain JSON, and one watch serving its subscribers."""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace
from typing import Any

from opbroker.api.meta import ResourceRef
from opbroker.controller import sources
from opbroker.controller.runtime.store import ObjectStore
from opbroker.controller.sources import SourceIndex, SourceWatchers, _listing

SECRETS = ("v1", "Secret")


class PagedResource:
    """Answers ``get(limit=, _continue=, serialize=False)`` as the dynamic client does, in pages."""

    def __init__(self, names: list[str], page: int) -> None:
        self.names, self.page, self.calls = names, page, 0

    def get(self, *, limit: int, _continue: str | None, serialize: bool) -> Any:
        assert serialize is False
        self.calls += 1
        start = int(_continue or 0)
        end = start + min(limit, self.page)
        items = [{"metadata": {"name": n, "namespace": "ns", "resourceVersion": "5"}} for n in self.names[start:end]]
        meta: dict[str, Any] = {"resourceVersion": "42"}
        if end < len(self.names):
            meta["continue"] = str(end)
        return SimpleNamespace(data=json.dumps({"items": items, "metadata": meta}).encode())


def test_a_kind_is_listed_page_by_page_as_plain_json() -> None:
    resource = PagedResource([f"s{i}" for i in range(7)], page=3)
    version: list[str | None] = []
    listed = list(_listing(resource, "v1", "Secret", version))
    assert [o["metadata"]["name"] for o in listed] == [f"s{i}" for i in range(7)]
    assert all(o["apiVersion"] == "v1" and o["kind"] == "Secret" for o in listed)  # list items carry no type
    assert resource.calls == 3 and version == ["42"]


def test_subscribers_hear_what_a_listing_found_and_every_event() -> None:
    kube = SimpleNamespace(store=ObjectStore())
    watchers = SourceWatchers(kube, SourceIndex(), on_change=lambda _key: None)  # type: ignore[arg-type]
    heard: list[tuple[str, str]] = []
    with watchers._lock:
        watchers._listeners[SECRETS] = [lambda event_type, obj: heard.append((event_type, obj["metadata"]["name"]))]
    resource = PagedResource(["a", "b"], page=1)
    kube.store.replace(SECRETS, watchers._told(SECRETS, _listing(resource, "v1", "Secret", [])))
    watchers._tell(SECRETS, "DELETED", {"metadata": {"name": "a"}})
    assert heard == [("ADDED", "a"), ("ADDED", "b"), ("DELETED", "a")]
    assert kube.store.version_of(SECRETS, "ns", "b") == "5"


def test_a_failing_subscriber_does_not_stop_the_watch() -> None:
    watchers = SourceWatchers(SimpleNamespace(store=ObjectStore()), SourceIndex(), lambda _key: None)  # type: ignore[arg-type]
    heard: list[str] = []

    def broken(_event_type: str, _obj: dict[str, Any]) -> None:
        raise RuntimeError("boom")

    watchers._listeners[SECRETS] = [broken, lambda _t, obj: heard.append(obj["metadata"]["name"])]
    watchers._tell(SECRETS, "MODIFIED", {"metadata": {"name": "x"}})
    assert heard == ["x"]


class FailingWatchResource(PagedResource):
    """Lists like :class:`PagedResource`; every watch request fails as a dropped connection does. The
    ``on_watch`` hook runs first (the test stops the watchers from it)."""

    def __init__(self, names: list[str], on_watch: Any) -> None:
        super().__init__(names, page=10)
        self.on_watch, self.watches = on_watch, 0

    def get(self, **kwargs: Any) -> Any:  # type: ignore[override]
        if not kwargs.get("watch"):
            return super().get(limit=kwargs["limit"], _continue=kwargs["_continue"], serialize=kwargs["serialize"])
        self.watches += 1
        self.on_watch(self.watches)
        raise ConnectionError("connection reset")


def test_owners_are_told_after_a_relisting_because_the_gaps_events_are_lost() -> None:
    """A watch that fails is listed again; what changed between the failure and the new listing was never told,
    so every owner depending on an object of the kind is reported changed once (its poll is only a safety
    net). The first listing reports nobody: the owners' own reconciles have just read what it holds."""
    index = SourceIndex()
    pod = ("v1", "Pod", "ns", "a")
    index.track(("i", "ns", "one"), [ResourceRef(api_version="v1", kind="Pod", namespace="ns", name="a")])
    index.track(("i", "ns", "two"), [ResourceRef(api_version="v1", kind="Pod", namespace="ns", name="b")])
    index.track(("i", "ns", "other"), [ResourceRef(api_version="v1", kind="ConfigMap", namespace="ns", name="a")])
    told: list[tuple[int, Any]] = []
    watchers: SourceWatchers

    def on_watch(count: int) -> None:
        if count == 2:
            watchers.stop()

    resource = FailingWatchResource(["a", "b"], on_watch)
    dynamic = SimpleNamespace(resources=SimpleNamespace(get=lambda api_version, kind: resource))
    kube = SimpleNamespace(store=ObjectStore(), dynamic=dynamic)
    watchers = SourceWatchers(kube, index, lambda key: told.append((resource.watches, key)), retry_seconds=0)  # type: ignore[arg-type]
    watchers._listed[("v1", "Pod")] = threading.Event()
    watchers._watch("v1", "Pod")
    assert resource.watches == 2 and resource.calls == 2  # listed, failed, listed again, stopped
    assert sorted(told) == [(1, ("i", "ns", "one")), (1, ("i", "ns", "two"))]
    assert index.owners_of(pod) == {("i", "ns", "one")}


def test_a_kind_is_live_from_its_listing_until_its_watch_fails() -> None:
    """``live`` names the kinds whose changes reach their owners at once (their polls may back off): listed and
    not failed since. A failed watch takes its kind out until it is listed again; a stopped one too."""
    pod = ("v1", "Pod")
    watchers: SourceWatchers
    seen: list[tuple[str, bool]] = []

    class Recording(FailingWatchResource):
        def get(self, **kwargs: Any) -> Any:  # type: ignore[override]
            seen.append(("watch" if kwargs.get("watch") else "list", pod in watchers.live))
            return super().get(**kwargs)

    def on_watch(count: int) -> None:
        if count == 2:
            watchers.stop()

    resource = Recording(["a"], on_watch)
    dynamic = SimpleNamespace(resources=SimpleNamespace(get=lambda api_version, kind: resource))
    kube = SimpleNamespace(store=ObjectStore(), dynamic=dynamic)
    watchers = SourceWatchers(kube, SourceIndex(), lambda _key: None, retry_seconds=0)  # type: ignore[arg-type]
    watchers._listed[pod] = threading.Event()
    assert pod not in watchers.live
    watchers._watch(*pod)
    # listed: live when watching; the watch failed: not live while listing again; live again once listed
    assert seen == [("list", False), ("watch", True), ("list", False), ("watch", True)]
    assert pod not in watchers.live  # stopped


def _database(name: str, version: str) -> dict[str, Any]:
    return {
        "apiVersion": "demo.io/v1",
        "kind": "Database",
        "metadata": {"namespace": "ns", "name": name, "resourceVersion": version},
    }


def test_the_echo_of_an_owners_own_apply_tells_only_the_other_owners(monkeypatch: Any) -> None:
    """An owner's apply is noted with the version it wrote; the watch event of that version (its echo) tells
    the other owners of the object, not the writer — whose reconcile evaluated the object as written — and any
    later version (the operator's) tells the writer too. Forgetting an owner, or no longer tracking the object,
    drops the note."""
    ref = ResourceRef(api_version="demo.io/v1", kind="Database", namespace="ns", name="db")
    writer, reader = ("i", "ns", "writer"), ("i", "ns", "reader")
    index = SourceIndex()
    index.track(writer, [ref])
    index.track(reader, [ref])
    index.wrote(writer, _database("db", "7"))
    key = ("demo.io/v1", "Database", "ns", "db")
    assert index.owners_of(key, "7") == {reader}
    assert index.owners_of(key, "8") == {writer, reader}
    assert index.owners_of(key) == {writer, reader}

    events = [
        {"type": "ADDED", "raw_object": _database("db", "7")},
        {"type": "MODIFIED", "raw_object": _database("db", "8")},
    ]
    told: list[Any] = []
    watchers: SourceWatchers

    def stream(*_: Any, **__: Any) -> Any:
        yield from events
        watchers.stop()

    monkeypatch.setattr(sources, "_events", stream)
    listing = PagedResource([], page=10)
    dynamic = SimpleNamespace(resources=SimpleNamespace(get=lambda api_version, kind: listing))
    kube = SimpleNamespace(store=ObjectStore(), dynamic=dynamic)
    watchers = SourceWatchers(kube, index, told.append, retry_seconds=0)  # type: ignore[arg-type]
    watchers._listed[("demo.io/v1", "Database")] = threading.Event()
    watchers._watch("demo.io/v1", "Database")
    assert told[0] == reader and len(told) == 3  # version 7: the reader alone
    assert sorted(told[1:]) == sorted([writer, reader])  # version 8: both

    index.track(writer, [])  # no longer depends on it: the note goes with it
    index.track(writer, [ref])
    assert index.owners_of(key, "7") == {writer, reader}
    index.wrote(writer, _database("db", "9"))
    index.forget(writer)
    index.track(writer, [ref])
    assert index.owners_of(key, "9") == {writer, reader}
