"""The one informer, on a scripted API (a fake :class:`Source`) and a fake clock: what it tells, in which order,
after which failures. Against a real API server: tests/controller/test_informers.py, test_secrets.py and the
broker's test_locating.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from opbroker.kubeclient.informer import Collection, Informer, LeanSource, events_of
from opbroker.kubeclient.lean import METADATA_LIST, METADATA_WATCH
from opbroker.kubeclient.transport import Unreachable
from opbroker.osbclient import Backoff
from tests.informer_support import NO_WAIT, Scripted, ScriptedStream, event

PODS = Collection("v1", "pods", "Pod", page=2)


def pod(name: str, version: str, namespace: str = "ns") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": version}, "spec": {"x": 1}}


def run(script: list[tuple[str, Any]], collection: Collection = PODS, **options: Any) -> tuple[list[Any], Scripted]:
    """Run an informer over ``script`` to its end; what it told, in order."""
    told: list[Any] = []
    source = Scripted(script)
    informer = Informer(
        source,
        collection,
        lambda kind, obj: told.append((kind, obj["metadata"]["name"], obj.get("kind"))),
        on_page=lambda objects: told.append(("page", [o["metadata"]["name"] for o in objects])),
        on_listed=lambda listed: told.append(("listed", sorted(listed))),
        on_lost=lambda why: told.append(("lost", why)),
        retry=NO_WAIT,
        **options,
    )
    source.informers.append(informer)
    asyncio.run(informer.run())
    return told, source


def test_a_listing_is_told_page_by_page_then_watched_from_its_version() -> None:
    told, source = run(
        [
            ("list", [pod("a", "1"), pod("b", "2"), pod("c", "3")]),
            ("watch", [event("MODIFIED", {**pod("a", "101"), "kind": "Pod"}), event("BOOKMARK", pod("", "102"))]),
            ("watch", [event("DELETED", {**pod("b", "103"), "kind": "Pod"})]),
        ]
    )
    assert told[:7] == [
        ("page", ["a", "b"]),
        ("ADDED", "a", "Pod"),  # list items carry no kind: given the collection's
        ("ADDED", "b", "Pod"),
        ("page", ["c"]),
        ("ADDED", "c", "Pod"),
        ("listed", [("ns", "a"), ("ns", "b"), ("ns", "c")]),
        ("MODIFIED", "a", "Pod"),
    ]
    assert told[7] == ("DELETED", "b", "Pod")
    # the second watch resumes from the bookmark's version, the third from the deletion's
    assert [r for r in source.requests if r[0] == "watch"] == [("watch", "100"), ("watch", "102"), ("watch", "103")]
    assert all(stream.closed and stream.finished for stream in source.streams[:2])  # read to their end


def test_deletions_missed_while_the_stream_was_broken_are_told_after_the_relisting() -> None:
    told, _ = run(
        [
            ("list", [pod("a", "1"), pod("b", "2")]),
            ("watch", ConnectionError("reset")),
            ("list", [pod("b", "2"), pod("new", "5")]),
        ]
    )
    lost = told.index(("lost", "failed (ConnectionError('reset'))"))
    after = told[lost + 1 :]
    assert ("DELETED", "a", "Pod") in after and after.index(("DELETED", "a", "Pod")) > after.index(
        ("listed", [("ns", "b"), ("ns", "new")])
    )
    assert ("DELETED", "b", "Pod") not in after


def test_a_version_too_old_is_listed_again_without_telling_a_loss() -> None:
    told, source = run(
        [
            ("list", [pod("a", "1")]),
            ("watch", [event("ERROR", {"kind": "Status", "code": 410})]),
            ("list", [pod("a", "1")]),
            ("watch", ApiException(status=410)),
            ("list", []),
        ]
    )
    assert not [t for t in told if t[0] == "lost"]
    assert told[-1] == ("DELETED", "a", "Pod")  # gone by the third listing
    assert [r[0] for r in source.requests] == ["list", "watch", "list", "watch", "list", "watch"]


def test_a_refusal_is_a_loss_and_the_informer_lists_again() -> None:
    told, _ = run([("list", []), ("watch", ApiException(status=403)), ("list", [pod("a", "1")])])
    assert ("lost", "was refused (HTTP 403)") in told
    assert told[-2:] == [("ADDED", "a", "Pod"), ("listed", [("ns", "a")])]


def test_metadata_only_objects_carry_their_type_and_metadata_alone() -> None:
    secrets = Collection("v1", "secrets", "Secret", metadata_only=True)
    objects: list[dict[str, Any]] = []
    source = Scripted(
        [("list", [{"metadata": {"name": "s", "namespace": "ns"}, "data": {"k": "dg=="}}]), ("watch", [])]
    )
    informer = Informer(source, secrets, lambda _kind, obj: objects.append(obj), retry=NO_WAIT)
    source.informers.append(informer)
    asyncio.run(informer.run())
    assert objects == [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "ns"}}]
    with pytest.raises(ValueError, match="must name its kind"):
        Collection("v1", "secrets", metadata_only=True)


def test_an_unnamed_kind_is_read_from_the_listing() -> None:
    told, _ = run([("list", [pod("a", "1")])], Collection("v1", "pods"))
    assert ("ADDED", "a", "Pod") in told


def test_without_list_events_or_tombstones_only_pages_and_identities_are_told() -> None:
    told, _ = run(
        [("list", [pod("a", "1")]), ("watch", ConnectionError("reset")), ("list", [])],
        list_events=False,
        tombstones=False,
    )
    assert [t[0] for t in told] == ["page", "listed", "lost", "page", "listed"]


def test_a_failing_keeper_does_not_stop_the_stream() -> None:
    seen: list[str] = []

    def keeper(kind: str, obj: dict[str, Any]) -> None:
        seen.append(obj["metadata"]["name"])
        raise RuntimeError("boom")

    source = Scripted([("list", [pod("a", "1"), pod("b", "2")]), ("watch", [event("ADDED", pod("c", "3"))])])
    informer = Informer(source, PODS, keeper, retry=NO_WAIT)
    source.informers.append(informer)
    asyncio.run(informer.run())
    assert seen == ["a", "b", "c"]


def test_a_stream_open_past_its_deadline_is_ended_and_resumed() -> None:
    """The server ends a watch after its timeoutSeconds; one that goes on delivering past that plus a quarter is
    ended here and the next watch resumes from the last version seen."""
    now = [0.0]
    lines = [event("MODIFIED", {**pod("a", str(v)), "kind": "Pod"}) for v in range(2, 6)]

    class Ticking(Scripted):
        async def watch(self, collection: Collection, since: str | None, seconds: int) -> ScriptedStream:
            stream = await super().watch(collection, since, seconds)
            stream._lines = [*stream._lines]
            return stream

    told: list[str] = []
    source = Ticking([("list", []), ("watch", lines)])

    def tell(_kind: str, obj: dict[str, Any]) -> None:
        told.append(obj["metadata"]["resourceVersion"])
        now[0] += 40.0  # each event arrives 40 s after the last: the 60 s watch is over after the second

    informer = Informer(source, PODS, tell, retry=NO_WAIT, watch_seconds=60, clock=lambda: now[0])
    source.informers.append(informer)
    asyncio.run(informer.run())
    assert told == ["2", "3"]
    assert source.streams[0].closed and not source.streams[0].finished  # left mid-stream, and closed
    assert [r for r in source.requests if r[0] == "watch"] == [("watch", "100"), ("watch", "3")]


class Blocking:
    """A watch that delivers nothing until it is cancelled."""

    def __init__(self) -> None:
        self.opened = asyncio.Event()
        self.cancelled = self.closed = False

    async def lines(self, limit: int) -> AsyncIterator[bytes]:
        self.opened.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        yield b""

    async def aclose(self) -> None:
        self.closed = True


class BlockingSource:
    def __init__(self) -> None:
        self.stream = Blocking()

    async def page(self, collection: Collection, token: str | None) -> Mapping[str, Any]:
        return {"items": [], "metadata": {"resourceVersion": "1"}}

    async def watch(self, collection: Collection, since: str | None, seconds: int) -> Blocking:
        return self.stream


def test_stop_ends_the_open_stream_at_once() -> None:
    async def scenario() -> None:
        source = BlockingSource()
        informer = Informer(source, PODS, lambda *_: None)
        informer.start()
        await asyncio.wait_for(source.stream.opened.wait(), 10)
        assert informer.live and informer.listed.is_set()
        informer.stop()
        await asyncio.wait_for(informer.wait(), 1)
        assert source.stream.cancelled and source.stream.closed and not informer.live

    asyncio.run(scenario())


def test_stop_from_another_thread_cancels_the_task_on_its_loop() -> None:
    """A worker thread starts an informer on the loop and stops it (SourceWatchers.ensure, a sister's refresh)."""
    from tests.loop_support import loop_in_thread

    source = BlockingSource()
    with loop_in_thread() as loop:
        informer = Informer(source, PODS, lambda *_: None)
        informer.start(loop)
        assert informer.listed.wait(10)  # a worker thread waits on the listing; the loop never does
        assert asyncio.run_coroutine_threadsafe(source.stream.opened.wait(), loop).result(10)
        informer.stop()
        assert informer.join(10) and source.stream.cancelled and source.stream.closed


def test_a_stopped_informer_never_starts() -> None:
    async def scenario() -> None:
        source = Scripted([])
        informer = Informer(source, PODS, lambda *_: None)
        informer.stop()
        informer.start()
        await asyncio.sleep(0)
        assert informer.join(0) and source.requests == []

    asyncio.run(scenario())


class RecordingRequests:
    """What LeanSource asks of the asynchronous transport."""

    def __init__(self, content: bytes = b'{"items": []}') -> None:
        self.asked: list[tuple[str, list[tuple[str, str]], str, bool, float | None]] = []
        self.content = content

    async def request(
        self, method: str, path: str, *, query: Iterable[tuple[str, str]], headers: Mapping[str, str], watch: bool
    ) -> bytes:
        self.asked.append((path, list(query), headers["Accept"], watch, None))
        return self.content

    async def stream(
        self,
        method: str,
        path: str,
        *,
        query: Iterable[tuple[str, str]],
        headers: Mapping[str, str],
        watch: bool,
        server_seconds: float | None,
    ) -> Blocking:
        self.asked.append((path, list(query), headers["Accept"], watch, server_seconds))
        return Blocking()


def lean_source(requests: RecordingRequests) -> LeanSource:
    return LeanSource(None, requests=requests)  # type: ignore[arg-type]  # the transport is the recording one


def test_the_lean_source_asks_for_metadata_only_with_the_collections_selector() -> None:
    requests = RecordingRequests()
    source = lean_source(requests)
    secrets = Collection("v1", "secrets", "Secret", namespace="ns", label_selector="a=b", metadata_only=True, page=7)

    async def scenario() -> None:
        await source.page(secrets, "tok")
        await source.watch(secrets, "42", 30)
        await source.page(Collection("demo.io/v1", "things"), None)

    asyncio.run(scenario())
    (path, query, accept, watch, _), (wpath, wquery, waccept, wwatch, seconds), (cpath, cquery, caccept, _, _) = (
        requests.asked
    )
    assert path == wpath == "/api/v1/namespaces/ns/secrets" and cpath == "/apis/demo.io/v1/things"
    assert query == [("limit", "7"), ("continue", "tok"), ("labelSelector", "a=b")] and not watch
    assert accept == METADATA_LIST and waccept == METADATA_WATCH and caccept == "application/json"
    assert dict(wquery) == {
        "watch": "true",
        "resourceVersion": "42",
        "allowWatchBookmarks": "true",
        "timeoutSeconds": "30",
        "labelSelector": "a=b",
    }
    assert wwatch and seconds == 30.0 and cquery == [("limit", "500")]


def test_a_field_selector_rides_on_the_listing_and_the_watch() -> None:
    requests = RecordingRequests()
    source = lean_source(requests)
    one = Collection("demo.io/v1", "things", namespace="ns", field_selector="metadata.name=a")

    async def scenario() -> None:
        await source.page(one, None)
        await source.watch(one, "7", 5)

    asyncio.run(scenario())
    (_, query, _, _, _), (_, wquery, _, _, _) = requests.asked
    assert ("fieldSelector", "metadata.name=a") in query and dict(wquery)["fieldSelector"] == "metadata.name=a"
    assert str(one) == "things.demo.io/v1 in ns (metadata.name=a)"


def test_a_large_page_is_parsed_off_the_loop_and_a_small_one_on_it() -> None:
    """A listing's page of megabytes would stall the loop while parsed: it is parsed in the default executor."""
    import threading

    from opbroker.kubeclient import informer as informer_module

    parsed_in: list[str] = []
    loads = informer_module.jsontext.loads

    def recording(text: bytes) -> Any:
        parsed_in.append(threading.current_thread().name)
        return loads(text)

    small = b'{"items": [], "metadata": {}}'
    big = b'{"items": [], "metadata": {"x": "' + b"a" * informer_module.PARSE_ON_LOOP_BYTES + b'"}}'

    async def scenario() -> None:
        for content in (small, big):
            await lean_source(RecordingRequests(content)).page(PODS, None)

    informer_module.jsontext.loads = recording  # type: ignore[assignment]
    try:
        asyncio.run(scenario())
    finally:
        informer_module.jsontext.loads = loads  # type: ignore[assignment]
    assert parsed_in[0] == threading.main_thread().name and parsed_in[1] != threading.main_thread().name


class LimitedStream:
    """A stream that records the line bound it was read with."""

    def __init__(self, lines: list[bytes]) -> None:
        self._lines, self.limit = lines, 0

    async def lines(self, limit: int) -> AsyncIterator[bytes]:
        self.limit = limit
        for line in self._lines:
            yield line

    async def aclose(self) -> None: ...


def test_a_watchs_events_are_decoded_with_their_type_and_an_odd_object_reads_as_empty() -> None:
    gone = {"kind": "Status", "code": 410, "reason": "Expired"}
    stream = LimitedStream(
        [
            event("ADDED", pod("a", "1")),
            event("BOOKMARK", {"metadata": {"resourceVersion": "9"}}),
            event("ERROR", gone),
            b'{"type": "MODIFIED", "object": [1]}',
        ]
    )

    async def read() -> list[Any]:
        return [event async for event in events_of(stream, limit=4096)]

    told = asyncio.run(read())
    assert [kind for kind, _ in told] == ["ADDED", "BOOKMARK", "ERROR", "MODIFIED"]
    assert told[0][1] == pod("a", "1") and told[2][1] == gone and told[3][1] == {}
    assert stream.limit == 4096


def test_failures_in_a_row_back_off_with_jitter_and_a_listing_ends_the_streak() -> None:
    waits: list[float] = []
    source = Scripted(
        [
            ("list", []),
            ("watch", ConnectionError("reset")),
            ("list", ApiException(status=500)),
            ("list", []),
            ("watch", ConnectionError("reset")),
        ]
    )
    retry = Backoff(base=1.0, maximum=30.0, max_duration=float("inf"), jitter=0.5)

    async def sleep(seconds: float) -> None:  # the waits recorded instead of waited
        waits.append(seconds)

    informer = Informer(source, PODS, lambda *_: None, retry=retry, draw=lambda: 0.5, sleep=sleep)
    source.informers.append(informer)
    asyncio.run(informer.run())
    # 1 s, a quarter off (half the jitter, drawn 0.5); doubled for the second failure in a row; back to 1 s after
    # the listing that succeeded; the script's end stops it without a wait
    assert waits == [0.75, 1.5, 0.75]


def test_odd_wire_is_skipped_not_fatal() -> None:
    """A list item that is not an object, an empty continue token, an event of no type or with no object: skipped
    (what the API server never sends must not stop the stream)."""
    told, source = run(
        [
            ("list", [pod("a", "1"), "x"]),  # type: ignore[list-item]
            ("watch", [b'{"type": null, "object": "x"}', event("ADDED", {**pod("b", "2"), "kind": "Pod"})]),
        ]
    )
    assert [t for t in told if t[0] in ("ADDED", "listed")] == [
        ("ADDED", "a", "Pod"),
        ("listed", [("ns", "a")]),
        ("ADDED", "b", "Pod"),
    ]
    assert ("list", None) in source.requests and len([r for r in source.requests if r[0] == "list"]) == 1


@pytest.mark.parametrize(
    ("failure", "logged"),
    [
        (ApiException(status=404, reason="Not Found"), "was refused (HTTP 404)"),
        (Unreachable("ConnectError: refused"), "failed: ConnectError: refused"),
    ],
)
def test_a_keepers_own_listing_the_cluster_refuses_is_a_warning_and_the_listing_goes_on(
    failure: Exception, logged: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def refused() -> None:
        raise failure

    told, _ = run([("list", [pod("a", "1")])], before_listing=refused)
    assert ("ADDED", "a", "Pod") in told  # the listing itself went on
    records = [r for r in caplog.records if "own listing" in r.getMessage()]
    assert [r.levelname for r in records] == ["WARNING"] and logged in records[0].getMessage()
    assert records[0].exc_info is None  # the cluster's answer, not a bug: no traceback in the log


def test_a_keeper_that_fails_otherwise_is_logged_with_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    async def broken() -> None:
        raise KeyError("a bug")

    told, _ = run([("list", [pod("a", "1")])], before_listing=broken)
    assert ("ADDED", "a", "Pod") in told
    (record,) = [r for r in caplog.records if "keeper of" in r.getMessage()]
    assert record.levelname == "ERROR" and record.exc_info is not None
