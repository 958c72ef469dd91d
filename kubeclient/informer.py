"""One informer: the list-and-watch of one collection of Kubernetes objects, told to whoever keeps it.

Every watch opbroker makes is one of these: the controller's own kinds (``controller.runtime.informers`` runs
a group of them behind one dispatcher), the kinds plans' templates produce and the Secrets and Namespaces
(``controller.runtime.sources``), the admission webhook's Bindings, the copies in each sister cluster, and the
broker's namespace index. It lives here, below both the broker and the controller (which never import each
other), so that a fix to how a stream is followed is made once. Before, five loops did it five ways: two of them
never listed again after a broken stream, one held its API server's connection 10 s past a stop, one had no
bound on an event's size.

A collection (:class:`Collection`: a resource, optionally one namespace and a label selector, whole bodies or
metadata only) is followed as client-go's reflector follows it:

* listed in pages of :attr:`Collection.page` (``before_listing`` called first, for a keeper that reads part of the
  collection another way before it), as plain JSON, each item given its ``apiVersion`` and ``kind``
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
* a line of the stream is bounded (:data:`MAX_EVENT_BYTES`) before it is parsed; :meth:`Informer.stop` ends the
  open stream at once (:meth:`Stream.abort`), not at its server-side end.

What is told runs in the informer's own thread, one call at a time, in the order the API server sent it; a
callback that raises is logged and the stream goes on. The API is reached through a :class:`Source` (two
calls: a page, a watch), so the transport under it can change without the informer knowing.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kubernetes.client.exceptions import ApiException

from opbroker.kubeclient import deadlines, jsontext
from opbroker.kubeclient.lean import JSON, METADATA_LIST, METADATA_WATCH, LeanApi, api_root, object_path
from opbroker.kubeclient.transport import MAX_LINE_BYTES, StreamedAnswer
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
    """An open watch (the transport's :class:`~opbroker.kubeclient.transport.StreamedAnswer`): its lines as they
    arrive, each at most ``limit`` bytes (a longer one raises ``ValueError``); ended from another thread by
    :meth:`abort`."""

    def lines(self, limit: int) -> Iterator[bytes]: ...

    def abort(self) -> None: ...

    def close(self) -> None:
        """Done with a stream read to its end (its connection may serve another request)."""
        ...


class Source(Protocol):
    """The two requests an informer makes (a 410 or any other refusal raises ``ApiException``)."""

    def page(self, collection: Collection, token: str | None) -> Wire:
        """One page of the collection's listing, from ``token`` (None: the first), as decoded JSON."""
        ...

    def watch(self, collection: Collection, since: str | None, seconds: int) -> Stream:
        """A watch of the collection from ``since``, with bookmarks, ended by the server after ``seconds``."""
        ...


def pages(source: Source, collection: Collection) -> Iterator[Wire]:
    """Every page of a listing, one request per page as the caller reads on."""
    token: str | None = None
    while True:
        page = source.page(collection, token)
        yield page
        token = text_of(mapping_of(page.get("metadata")).get("continue"))
        if token is None:
            return


def events_of(stream: Stream, limit: int = MAX_EVENT_BYTES) -> Iterator[tuple[str, Wire]]:
    """A watch's events as they arrive, decoded: each line's type (``ADDED``, ``MODIFIED``, ``DELETED``,
    ``BOOKMARK``, ``ERROR`` — whose object is the API server's Status, a 410 when the version is gone) and object.
    A line over ``limit`` bytes raises ``ValueError`` before it is parsed."""
    for line in stream.lines(limit):
        event = jsontext.loads(line)
        yield text_of(event.get("type")) or "", mapping_of(event.get("object"))


def items_of(page: Wire) -> list[Wire]:
    """A page's objects (an item that is not an object is skipped)."""
    items = page.get("items")
    return [item for item in items if isinstance(item, Mapping)] if isinstance(items, list) else []


class Informer:
    """Follows one :class:`Collection` in a thread of its own until :meth:`stop` (see the module docstring)."""

    def __init__(
        self,
        source: Source,
        collection: Collection,
        on_event: Told,
        *,
        before_listing: Callable[[], None] | None = None,
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
        max_event_bytes: int = MAX_EVENT_BYTES,
    ) -> None:
        self.collection = collection
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
        self._kind = collection.kind
        self._stopped = threading.Event()
        self._stream: Stream | None = None
        self._lock = threading.Lock()
        self._live = False
        self._thread = threading.Thread(target=self.run, name=name or f"informer-{collection.plural}", daemon=True)
        self.listed = threading.Event()
        """Set once the collection was listed whole (after ``on_listed`` returned): its keeper is in sync."""

    @property
    def live(self) -> bool:
        """Listed, and its stream not broken since: a change reaches the keeper at once."""
        return self._live

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop following: the open stream is ended now; nothing is told after the call in progress."""
        self._stopped.set()
        with self._lock:
            stream = self._stream
        if stream is not None:
            stream.abort()

    def join(self, timeout: float | None = None) -> bool:
        """Whether the informer's thread ended within ``timeout`` seconds."""
        if self._thread.ident is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # -- the loop ----------------------------------------------------------------------------------------

    def run(self) -> None:
        """List, then watch, until stopped; list again whenever the watch cannot resume (the thread's work;
        tests call it directly)."""
        known: dict[Identity, str | None] = {}
        version: str | None = None
        while not self._stopped.is_set():
            try:
                if version is None:
                    version = self._list(known)
                version = self._watch(version, known)
            except ApiException as exc:
                if self._stopped.is_set():
                    break
                version = None
                if exc.status != 410:  # 410: too old to resume from; listed again at once, nothing was lost
                    self._lost(f"was refused (HTTP {exc.status})")
            except Exception as exc:  # a dead stream (its read deadline), a refused connection, an oversized event
                if self._stopped.is_set():
                    break
                version = None
                self._lost(
                    "delivered nothing within its deadline" if deadlines.timed_out(exc) else f"failed ({exc!r:.200})"
                )
        self._live = False

    def _lost(self, why: str) -> None:
        self._live = False
        logger.warning("the watch of %s %s; listing it again", self.collection, why)
        self._call(self._on_lost, why)
        self._failures += 1
        self._stopped.wait(self._retry.delay(self._failures, self._draw()))

    def _list(self, known: dict[Identity, str | None]) -> str | None:
        """List page by page, telling each page and then its objects before reading the next; then the deletion
        of each object known before and now absent. The listing's version (to watch from)."""
        listed: dict[Identity, str | None] = {}
        version: str | None = None
        before = self._before_listing
        if before is not None:  # a keeper reading part of the collection another way first
            self._call(lambda _nothing: before(), None)
        for page in pages(self._source, self.collection):
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

    def _watch(self, since: str | None, known: dict[Identity, str | None]) -> str | None:
        """One watch from ``since``; the version to resume from (None: list again)."""
        stream = self._source.watch(self.collection, since, self._watch_seconds)
        with self._lock:
            self._stream = stream
        if self._stopped.is_set():  # stopped while the request was made: stop() found no stream to end
            stream.abort()
        ends = self._clock() + deadlines.Timeouts(watch=self._watch_seconds).watch_read()
        finished = False  # read to its end: the connection can serve the next request
        try:
            for kind, obj in events_of(stream, self._max_event_bytes):
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
            finished = True
            return since
        finally:
            with self._lock:
                self._stream = None
            if finished:
                stream.close()
            else:  # left mid-stream: what is unread would be the next request's answer
                stream.abort()

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


# -- the source over the lean client -------------------------------------------------------------------------


class LeanSource:
    """A :class:`Source` over :class:`~opbroker.kubeclient.lean.LeanApi` and the project's transport (its deadlines
    apply: a watch's read deadline is its server-side duration plus a quarter)."""

    def __init__(self, api: LeanApi) -> None:
        self._api = api

    def page(self, collection: Collection, token: str | None) -> Wire:
        query = [
            ("limit", collection.page),
            ("continue", token),
            ("labelSelector", collection.label_selector),
            ("fieldSelector", collection.field_selector),
        ]
        accept = METADATA_LIST if collection.metadata_only else JSON
        answer = self._api.request("GET", collection.path, query=query, accept=accept)
        if not isinstance(answer, Mapping):
            raise TypeError(f"the list of {collection} answered a {type(answer).__name__}, not a JSON object")
        return answer

    def watch(self, collection: Collection, since: str | None, seconds: int) -> Stream:
        query = [
            ("watch", True),
            ("resourceVersion", since),
            ("allowWatchBookmarks", True),
            ("timeoutSeconds", seconds),
            ("labelSelector", collection.label_selector),
            ("fieldSelector", collection.field_selector),
        ]
        accept = METADATA_WATCH if collection.metadata_only else JSON
        answer: StreamedAnswer = self._api.request("GET", collection.path, query=query, accept=accept, stream=True)
        return answer


# -- reading the wire ------------------------------------------------------------------------------------------


def _identity(meta: Wire) -> Identity:
    return text_of(meta.get("namespace")) or "", text_of(meta.get("name")) or ""
