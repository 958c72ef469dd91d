"""The source watches' pure parts: listing in pages of plain JSON, and one watch serving its subscribers."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from opbroker.controller.sources import SourceIndex, SourceWatchers, _listing
from opbroker.controller.store import ObjectStore

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
