"""One informer: the list-and-watch of one collection of Kubernetes objects, told to whoever keeps it.

Every watch opbroker makes is one of these: the controller's own kinds (``controller.runtime.informers``), the
kinds plans' templates produce and the Secrets and Namespaces (``controller.runtime.sources``), the admission
webhook's Bindings, the copies in each sister cluster, and the broker's namespace index. It lives here, below both
the broker and the controller (which never import each other), so that a fix to how a stream is followed is made
once. Before, five loops did it five ways: two of them never listed again after a broken stream, one held its API
server's connection 10 s past a stop, one had no bound on an event's size.

A collection (:class:`Collection`: a resource, optionally one namespace and a label selector, whole bodies or
metadata only) is followed as client-go's reflector follows it:

* listed in pages of :attr:`Collection.page` (``before_listing`` awaited first, for a keeper that reads part of
  the collection another way before it), as plain JSON, each item given its ``apiVersion`` and ``kind``
  (list items carry none); each page is told to ``on_page`` before its objects are delivered as ``ADDED`` (when
  ``list_events``), so only a page is ever parsed at once; at the end ``on_listed`` is told the identities of
  everything listed, and :attr:`Informer.listed` is set after it returns;
* watched from the listing's resourceVersion, with bookmarks, the server ending each watch after
  ``watch_seconds``; the transport's read deadline fails a watch that delivers nothing for a quarter longer (a
  dead connection: the watchdog), and a stream still open past that (events trickling after its end) is ended
  here; the next watch resumes from the last version seen;
* listed again after a 410 (the version is too old to resume from), and after a failure — ``on_lost`` told
  first (events may have been missed), then a pause from ``retry`` (doubling with each failure in a row, jittered,
  from 1 s to 30 s by default, as client-go's reflector backs off); with ``tombstones``, every object
  known before and absent from the new listing is delivered as ``DELETED`` (its type and identity), so a
  deletion missed in the gap is not missed for good;
* a line of the stream is bounded (:data:`MAX_EVENT_BYTES`) before it is parsed.

An informer is an asyncio task on its owner's loop (issue 45: one concurrency rule — watches and timers are tasks,
blocking work goes to the runtime's one pool), not a thread: :meth:`Informer.start` makes the task (from the loop,
or from any thread given the loop), :meth:`Informer.stop` cancels it (from any thread), which ends the open
stream's read at once. What is told runs on the loop, one call at a time, in the order the API server sent it
(so the keepers of every informer of a process never run concurrently with each other); a callback that raises is
logged and the stream goes on. Callbacks must not block: they hold the loop. :attr:`Informer.listed` is a
``threading.Event``, set on the loop, that a worker thread may wait on (the loop never does).

Each watch event is parsed on the loop, where it arrives (a few KiB; a hop to a thread per event would cost more
than the parse). A listing's page can be megabytes (5 000 objects in ``controller.runtime.sources``): parsed on
the loop it would stall every other task for tens of milliseconds, so a page larger than
:data:`PARSE_ON_LOOP_BYTES` is parsed in the loop's default executor (the runtime's pool) — one hop per page.

The API is reached through a :class:`Source` (two calls: a page, a watch), so the transport under it can change
without the informer knowing; :class:`LeanSource` is the project's (:mod:`opbroker.kubeclient.astreams`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kubernetes.client.exceptions import ApiException

from opbroker.kubeclient import deadlines, jsontext
from opbroker.kubeclient.astreams import AsyncTransport, on_loop
from opbroker.kubeclient.lean import JSON, METADATA_LIST, METADATA_WATCH, LeanApi, api_root, object_path, query_of
from opbroker.kubeclient.transport import MAX_LINE_BYTES, StreamedAnswer, Unreachable
from opbroker.kubeclient.wire import JsonBody, JsonObject, int_of, mapping_of, text_of
from opbroker.osbclient import Backoff

logger = logging.getLogger(__name__)

#: Objects per page of a listing, by default (a metadata-only listing may take smaller pages: see
#: :data:`~opbroker.kubeclient.lean.METADATA_PAGE`).
LIST_PAGE = 500
#: The server-side duration of each watch request by default (the API server ends it; the next resumes).
WATCH_SECONDS = 60
#: The longest line of a watch stream (one event) read before it is refused and the collection listed again.
#: The API server stores objects of at most 1.5 MiB (etcd's request limit); their JSON is about that size.
MAX_EVENT_BYTES = MAX_LINE_BYTES
#: The pause after a failed list or watch, by default: doubling with each failure in a row up to 30 s, up to half
#: of it taken off by a random draw (many informers broken by one API server restart do not come back in step).
RETRIES = Backoff(base=1.0, maximum=30.0, max_duration=float("inf"), jitter=0.5)
#: A listing's page larger than this is parsed in the loop's default executor, not on the loop (see the module
#: docstring): about a millisecond of parsing.
PARSE_ON_LOOP_BYTES = 256 * 1024

Identity = tuple[str, str]
"""An object's namespace ("" for a cluster-scoped one) and name."""
Body = JsonBody
"""An object as the API server sent it (decoded JSON; a list item given its type), handed on whole: the informer
reads its metadata alone, and the keeper reads it through a typed view of its own kind."""
Wire = JsonObject
"""A decoded JSON object of the wire read only here (a list page, an object's metadata)."""
Told = Callable[[str, Body], None]
"""Takes one event: its type (``ADDED``, ``MODIFIED``, ``DELETED``) and the object."""


@dataclass(frozen=True)
class Collection:
    """What one informer follows."""

    api_version: str
    """``group/version``, or ``v1`` for the core group."""
    plural: str
    kind: str | None = None
    """The objects' kind: list items and metadata-only objects do not say it; they are given it (None: read from
    the listing's own kind, ``<Kind>List``; a metadata-only collection must name it)."""
    namespace: str | None = None
    """One namespace (None: every namespace, or a cluster-scoped resource)."""
    label_selector: str | None = None
    field_selector: str | None = None
    """Fields the API server selects on (``metadata.name=x``: one object, watched without a listing)."""
    metadata_only: bool = False
    """Listed and watched as ``PartialObjectMetadata``: each object's ``apiVersion``, ``kind`` and ``metadata``
    only (the API server sends no bodies)."""
    page: int = LIST_PAGE

    def __post_init__(self) -> None:
        if self.metadata_only and not self.kind:
            raise ValueError(f"{self.plural}: a metadata-only collection must name its kind")
        if self.page < 1:
            raise ValueError(f"{self.plural}: a page holds at least one object, not {self.page}")

    @property
    def path(self) -> str:
        return object_path(api_root(self.api_version), self.plural, self.namespace)

    def list_query(self, token: str | None) -> list[tuple[str, str]]:
        """The query of one page of the listing, from ``token`` (None: the first)."""
        pairs, _, _ = query_of(
            [
                ("limit", self.page),
                ("continue", token),
                ("labelSelector", self.label_selector),
                ("fieldSelector", self.field_selector),
            ]
        )
        return pairs

    def watch_query(self, since: str | None, seconds: int) -> list[tuple[str, str]]:
        """The query of a watch from ``since``, with bookmarks, ended by the server after ``seconds``."""
        pairs, _, _ = query_of(
            [
                ("watch", True),
                ("resourceVersion", since),
                ("allowWatchBookmarks", True),
                ("timeoutSeconds", seconds),
                ("labelSelector", self.label_selector),
                ("fieldSelector", self.field_selector),
            ]
        )
        return pairs

    def accept(self, watch: bool) -> str:
        """The media type asked for: plain JSON, or (metadata only) the partial objects of a listing or a watch."""
        if not self.metadata_only:
            return JSON
        return METADATA_WATCH if watch else METADATA_LIST

    def typed(self, item: Wire, kind: str | None = None) -> Body:
        """An object as it is told: with its type, and (metadata-only) nothing but its metadata."""
        kind = self.kind or kind
        if self.metadata_only:
            return {"apiVersion": self.api_version, "kind": kind, "metadata": item.get("metadata") or {}}
        return {**item, "apiVersion": self.api_version, "kind": kind}

    def __str__(self) -> str:
        where = f" in {self.namespace}" if self.namespace else ""
        selectors = ", ".join(s for s in (self.label_selector, self.field_selector) if s)
        selected = f" ({selectors})" if selectors else ""
        return f"{self.plural}.{self.api_version}{where}{selected}"


class Stream(Protocol):
    """An open watch (:class:`~opbroker.kubeclient.watchstream.WatchStream`, through a proxy the transport's
    :class:`~opbroker.kubeclient.astreams.AsyncStream`): its lines as they
    arrive, each at most ``limit`` bytes (a longer one raises ``ValueError``); :meth:`aclose` when done."""

    def lines(self, limit: int) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None:
        """Done with the stream: read to its end, its connection may serve another request; else it is closed."""
        ...


class Source(Protocol):
    """The two requests an informer makes (a 410 or any other refusal raises ``ApiException``)."""

    async def page(self, collection: Collection, token: str | None) -> Wire:
        """One page of the collection's listing, from ``token`` (None: the first), as decoded JSON."""
        ...

    async def watch(self, collection: Collection, since: str | None, seconds: int) -> Stream:
        """A watch of the collection from ``since``, with bookmarks, ended by the server after ``seconds``."""
        ...


async def pages(source: Source, collection: Collection) -> AsyncGenerator[Wire, None]:
    """Every page of a listing, one request per page as the caller reads on."""
    token: str | None = None
    while True:
        page = await source.page(collection, token)
        yield page
        token = continued(page)
        if token is None:
            return


def continued(page: Wire) -> str | None:
    """The token of the page after ``page`` (None: it was the last)."""
    return text_of(mapping_of(page.get("metadata")).get("continue"))


def event_of(line: bytes) -> tuple[str, Wire]:
    """One line of a watch, decoded: its type and its object (an odd object reads as empty)."""
    event = jsontext.loads(line)
    return text_of(event.get("type")) or "", mapping_of(event.get("object"))


async def events_of(stream: Stream, limit: int = MAX_EVENT_BYTES) -> AsyncGenerator[tuple[str, Wire], None]:
    """A watch's events as they arrive, decoded: each line's type (``ADDED``, ``MODIFIED``, ``DELETED``,
    ``BOOKMARK``, ``ERROR`` — whose object is the API server's Status, a 410 when the version is gone) and object.
    A line over ``limit`` bytes raises ``ValueError`` before it is parsed."""
    lines = stream.lines(limit)
    try:
        async for line in lines:
            yield event_of(line)
    finally:
        closing = getattr(lines, "aclose", None)
        if closing is not None:
            await closing()


def items_of(page: Wire) -> list[Wire]:
    """A page's objects (an item that is not an object is skipped)."""
    items = page.get("items")
    return [item for item in items if isinstance(item, Mapping)] if isinstance(items, list) else []


class Informer:
    """Follows one :class:`Collection` as a task on a loop until :meth:`stop` (see the module docstring)."""

    def __init__(
        self,
        source: Source,
        collection: Collection,
        on_event: Told,
        *,
        before_listing: Callable[[], Awaitable[None]] | None = None,
        on_page: Callable[[Sequence[Body]], None] | None = None,
        on_listed: Callable[[frozenset[Identity]], None] | None = None,
        on_lost: Callable[[str], None] | None = None,
        list_events: bool = True,
        tombstones: bool = True,
        watch_seconds: int = WATCH_SECONDS,
        retry: Backoff = RETRIES,
        draw: Callable[[], float] = random.random,
        name: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        max_event_bytes: int = MAX_EVENT_BYTES,
    ) -> None:
        """``clock`` measures a stream's length, ``sleep`` makes the pauses after failures (tests fake both)."""
        self.collection = collection
        self.name = name or f"informer-{collection.plural}"
        self._max_event_bytes = max_event_bytes
        self._source = source
        self._on_event = on_event
        self._before_listing = before_listing
        self._on_page = on_page
        self._on_listed = on_listed
        self._on_lost = on_lost
        self._list_events = list_events
        self._tombstones = tombstones
        self._watch_seconds = watch_seconds
        self._retry = retry
        self._draw = draw
        self._failures = 0
        """Failures in a row (a whole listing ends the streak)."""
        self._clock = clock
        self._sleep = sleep
        self._kind = collection.kind
        self._stopped = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._ended = threading.Event()
        self._live = False
        self.listed = threading.Event()
        """Set once the collection was listed whole (after ``on_listed`` returned): its keeper is in sync. Set on
        the loop; a worker thread may wait on it (the loop must not)."""

    @property
    def live(self) -> bool:
        """Listed, and its stream not broken since: a change reaches the keeper at once."""
        return self._live

    @property
    def started_on(self) -> asyncio.AbstractEventLoop | None:
        """The loop the informer runs on (None before :meth:`start`)."""
        return self._loop

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Follow the collection as a task on ``loop`` (by default the running one; from another thread, the
        task is made on the loop soon)."""
        self._loop = loop = loop if loop is not None else asyncio.get_running_loop()
        if on_loop(loop):
            self._begin()
        else:
            loop.call_soon_threadsafe(self._begin)

    def stop(self) -> None:
        """Stop following, from any thread: the task is cancelled (on the loop: at once; from another thread: as
        soon as the loop runs), which ends the open stream's read; nothing is told after the call in progress."""
        self._stopped.set()
        loop = self._loop
        if loop is None:
            return
        if on_loop(loop):
            self._cancel()
        else:
            with contextlib.suppress(RuntimeError):  # the loop is closed: its tasks are gone with it
                loop.call_soon_threadsafe(self._cancel)

    async def wait(self) -> None:
        """Until the task has ended (after :meth:`stop`; awaited on its loop)."""
        task = self._task
        if task is not None:
            await asyncio.wait({task})  # its end, whatever it was (cancelled, above all), not raised here

    def join(self, timeout: float | None = None) -> bool:
        """Whether the task ended within ``timeout`` seconds (from a thread other than the loop's)."""
        if self._loop is None:
            return True
        return self._ended.wait(timeout)

    def _begin(self) -> None:
        if self._stopped.is_set() or self._loop is None:
            self._ended.set()
            return
        self._task = self._loop.create_task(self.run(), name=self.name)

    def _cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    # -- the loop ----------------------------------------------------------------------------------------

    async def run(self) -> None:
        """List, then watch, until stopped; list again whenever the watch cannot resume (the task's work; tests
        await it directly)."""
        known: dict[Identity, str | None] = {}
        version: str | None = None
        try:
            while not self._stopped.is_set():
                try:
                    if version is None:
                        version = await self._list(known)
                    version = await self._watch(version, known)
                except ApiException as exc:
                    if self._stopped.is_set():
                        break
                    version = None
                    if exc.status != 410:  # 410: too old to resume from; listed again at once, nothing was lost
                        await self._lost(f"was refused (HTTP {exc.status})")
                except Exception as exc:  # a dead stream (its read deadline), a refused connection, an oversized event
                    if self._stopped.is_set():
                        break
                    version = None
                    await self._lost(
                        "delivered nothing within its deadline"
                        if deadlines.timed_out(exc)
                        else f"failed ({exc!r:.200})"
                    )
        finally:
            self._live = False
            self._ended.set()

    async def _lost(self, why: str) -> None:
        self._live = False
        logger.warning("the watch of %s %s; listing it again", self.collection, why)
        self._call(self._on_lost, why)
        self._failures += 1
        if not self._stopped.is_set():
            await self._sleep(self._retry.delay(self._failures, self._draw()))

    async def _list(self, known: dict[Identity, str | None]) -> str | None:
        """List page by page, telling each page and then its objects before reading the next; then the deletion
        of each object known before and now absent. The listing's version (to watch from)."""
        listed: dict[Identity, str | None] = {}
        version: str | None = None
        before = self._before_listing
        if before is not None:  # a keeper reading part of the collection another way first
            try:
                await before()
            except ApiException as exc:  # the cluster's answer (a refusal, or a server not serving it yet): no bug
                logger.warning("the keeper's own listing of %s was refused (HTTP %s)", self.collection, exc.status)
            except Unreachable as exc:
                logger.warning("the keeper's own listing of %s failed: %s", self.collection, exc)
            except Exception:
                logger.exception("the keeper of %s failed", self.collection)
        async with contextlib.aclosing(pages(self._source, self.collection)) as listing:
            async for page in listing:
                if self._stopped.is_set():
                    return None
                self._kind = self._kind or (text_of(page.get("kind")) or "").removesuffix("List") or None
                objects = [self.collection.typed(item, self._kind) for item in items_of(page)]
                self._call(self._on_page, objects)
                for obj in objects:
                    meta = mapping_of(obj.get("metadata"))
                    listed[_identity(meta)] = text_of(meta.get("resourceVersion")) if self._tombstones else None
                    if self._list_events:
                        self._tell("ADDED", obj)
                version = text_of(mapping_of(page.get("metadata")).get("resourceVersion"))
        gone = [(identity, known[identity]) for identity in known if identity not in listed]
        known.clear()
        if self._tombstones:
            known.update(listed)
        self._call(self._on_listed, frozenset(listed))
        for identity, resource_version in gone:
            self._tell("DELETED", self._tombstone(identity, resource_version))
        self._live = True
        self._failures = 0
        self.listed.set()
        return version

    async def _watch(self, since: str | None, known: dict[Identity, str | None]) -> str | None:
        """One watch from ``since``; the version to resume from (None: list again)."""
        stream = await self._source.watch(self.collection, since, self._watch_seconds)
        ends = self._clock() + deadlines.Timeouts(watch=self._watch_seconds).watch_read()
        try:
            async with contextlib.aclosing(events_of(stream, self._max_event_bytes)) as events:
                async for kind, obj in events:
                    if self._stopped.is_set():
                        return since
                    if kind == "ERROR":
                        return since if int_of(obj.get("code")) != 410 else None
                    meta = mapping_of(obj.get("metadata"))
                    since = text_of(meta.get("resourceVersion")) or since
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        told = self.collection.typed(obj) if self.collection.metadata_only else dict(obj)
                        if self._tombstones:
                            identity = _identity(meta)
                            if kind == "DELETED":
                                known.pop(identity, None)
                            else:
                                known[identity] = text_of(meta.get("resourceVersion"))
                        self._live = True
                        self._tell(kind, told)
                    if self._clock() > ends:  # the server should have ended it: end it here, resume from since
                        return since
            return since
        finally:
            await stream.aclose()  # read to its end: kept for the next request; else closed

    # -- telling -----------------------------------------------------------------------------------------

    def _tell(self, event_type: str, obj: Body) -> None:
        try:
            self._on_event(event_type, obj)
        except Exception:
            logger.exception("the keeper of %s failed on a %s event", self.collection, event_type)

    def _call(self, callback: Callable[[Any], None] | None, argument: Any) -> None:
        if callback is None:
            return
        try:
            callback(argument)
        except Exception:
            logger.exception("the keeper of %s failed", self.collection)

    def _tombstone(self, identity: Identity, resource_version: str | None) -> Body:
        """What is told of an object gone while the stream was broken: its type and identity."""
        namespace, name = identity
        meta: Body = {"name": name}
        if namespace:
            meta["namespace"] = namespace
        if resource_version:
            meta["resourceVersion"] = resource_version
        return {"apiVersion": self.collection.api_version, "kind": self._kind, "metadata": meta}


def stop_all(informers: Iterable[Informer], source: LeanSource) -> None:
    """Stop ``informers`` (from any thread), and close ``source``'s connections on their loop once they ended."""
    informers = list(informers)
    loop = next((informer.started_on for informer in informers if informer.started_on is not None), None)
    for informer in informers:
        informer.stop()
    if loop is None:
        return

    async def closed() -> None:
        for informer in informers:
            await informer.wait()
        await source.aclose()

    with contextlib.suppress(RuntimeError):  # the loop is closed: its connections are gone with it
        asyncio.run_coroutine_threadsafe(closed(), loop)


# -- the source over the lean client -------------------------------------------------------------------------


class Requests(Protocol):
    """What :class:`LeanSource` asks of the asynchronous transport (:class:`AsyncTransport`)."""

    async def request(
        self, method: str, path: str, *, query: Iterable[tuple[str, str]], headers: Mapping[str, str], watch: bool
    ) -> bytes: ...

    async def stream(
        self,
        method: str,
        path: str,
        *,
        query: Iterable[tuple[str, str]],
        headers: Mapping[str, str],
        watch: bool,
        server_seconds: float | None,
    ) -> Stream: ...


class LeanSource:
    """A :class:`Source` over the asynchronous twin (:class:`~opbroker.kubeclient.astreams.AsyncTransport`) of a
    :class:`~opbroker.kubeclient.lean.LeanApi`'s transport (its deadlines apply: a watch's read deadline is its
    server-side duration plus a quarter). Its connections are its own (a watch holds one for minutes: taken from
    the reconciles' pool it would leave them short); :meth:`aclose` when done."""

    def __init__(self, api: LeanApi, *, requests: Requests | None = None) -> None:
        self.requests: Requests = requests if requests is not None else AsyncTransport(api.transport)

    async def page(self, collection: Collection, token: str | None) -> Wire:
        query, accept = collection.list_query(token), collection.accept(watch=False)
        content = await self.requests.request(
            "GET", collection.path, query=query, headers={"Accept": accept}, watch=False
        )
        if len(content) > PARSE_ON_LOOP_BYTES:  # megabytes: parsed off the loop (see the module docstring)
            answer = await asyncio.get_running_loop().run_in_executor(None, jsontext.loads, content)
        else:
            answer = jsontext.loads(content)
        return _listing(collection, answer)

    async def watch(self, collection: Collection, since: str | None, seconds: int) -> Stream:
        return await self.requests.stream(
            "GET",
            collection.path,
            query=collection.watch_query(since, seconds),
            headers={"Accept": collection.accept(watch=True)},
            watch=True,
            server_seconds=float(seconds),
        )

    async def aclose(self) -> None:
        closing = getattr(self.requests, "aclose", None)
        if closing is not None:
            await closing()


class BlockingSource:
    """The same two requests, blocking, through a :class:`~opbroker.kubeclient.lean.LeanApi` and its transport: for
    a one-off read in a worker thread (a metadata-only sweep, a broker request waiting on one object), not for an
    informer."""

    def __init__(self, api: LeanApi) -> None:
        self._api = api

    def pages(self, collection: Collection) -> Iterator[Wire]:
        """Every page of a listing, one request per page as the caller reads on."""
        token: str | None = None
        while True:
            query, accept = collection.list_query(token), collection.accept(watch=False)
            page = _listing(collection, self._api.request("GET", collection.path, query=query, accept=accept))
            yield page
            token = continued(page)
            if token is None:
                return

    def watch(self, collection: Collection, since: str | None, seconds: int) -> StreamedAnswer:
        """A watch of the collection (see :meth:`Source.watch`), to read with :func:`blocking_events`."""
        query, accept = collection.watch_query(since, seconds), collection.accept(watch=True)
        answer: StreamedAnswer = self._api.request("GET", collection.path, query=query, accept=accept, stream=True)
        return answer


def blocking_events(stream: StreamedAnswer, limit: int = MAX_EVENT_BYTES) -> Iterator[tuple[str, Wire]]:
    """A blocking watch's events as they arrive (as :func:`events_of`)."""
    for line in stream.lines(limit):
        yield event_of(line)


# -- reading the wire ------------------------------------------------------------------------------------------


def _listing(collection: Collection, answer: Any) -> Wire:
    if not isinstance(answer, Mapping):
        raise TypeError(f"the list of {collection} answered a {type(answer).__name__}, not a JSON object")
    return answer


def _identity(meta: Wire) -> Identity:
    return text_of(meta.get("namespace")) or "", text_of(meta.get("name")) or ""
