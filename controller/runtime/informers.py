"""The controller's watches, run: one list-and-watch per watched resource, its events handed to the handlers one
at a time, in the order they arrived.

kopf used to run them. Profiled under the provisioning bench (py-spy, the GIL holder sampled), kopf's machinery
around each event — causes, registries, handler invocation, the copy of its reused bodies — was a quarter of the
controller's CPU, for handlers that only store the object and enqueue keys; and kopf's listing does not tell a
type's store that it is *complete*, so a reconcile that missed an object read it again from the API (a restart
made some 300 such GETs). Here each resource is watched as client-go's informers do:

* listed in pages of :data:`LIST_PAGE`, as plain JSON (no client models), each item given its ``apiVersion``
  and ``kind`` (list items carry none); each page is told to ``on_page`` (the controller holds it in its store)
  and its objects delivered as ``ADDED`` before the next page is read, so only a page and the queue's events are
  ever parsed at once (a restart over 15 000 objects used to parse every listing whole first: a transient peak
  of memory the process then kept); at the end ``on_listed`` is told the identities of everything listed (the
  controller makes its store complete for its own kinds);
* watched from the listing's resourceVersion, with bookmarks, the server ending each watch after
  ``watch_seconds`` and the client's read deadline (:mod:`opbroker.kubeclient.deadlines`) failing one that
  delivers nothing for a quarter longer; the next watch resumes from the last version seen;
* listed again after a 410 (the version is too old) or a broken stream (``on_lost`` is told first: events may
  have been missed), and every object known before but absent from the new listing is delivered as
  ``DELETED`` (a tombstone: its type and identity) — so a deletion missed in the gap is not missed for good.

A resource watched by several subsystems (SFServiceBindings: the controller and the claims) is one stream; each
handler gets a copy of its own (handlers may keep or change what they are given). A ``metadata_only`` watch gets
the object's ``apiVersion``, ``kind`` and ``metadata``; when every watch of a resource is metadata-only, the
resource is listed and watched as ``PartialObjectMetadata`` (the API server sends no bodies).

Events of every stream go through one bounded queue (:data:`QUEUE_EVENTS`: a stream whose handlers fall behind
waits instead of growing memory) to one dispatcher thread, so handlers never run concurrently with each other,
as under kopf's loop. A handler that raises is logged; the stream goes on. A line of a watch stream is bounded
(:data:`MAX_EVENT_BYTES`) before it is parsed.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import queue
import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from opbroker.controller.core.views import ListPage, WatchEvent
from opbroker.controller.runtime.jsoncopy import copy_json
from opbroker.controller.watches import Watch
from opbroker.kubeclient import deadlines, jsontext
from opbroker.kubeclient.answers import json_object
from opbroker.kubeclient.lean import METADATA_LIST, METADATA_WATCH, LeanCustomObjects

logger = logging.getLogger(__name__)

#: Objects per page of a listing (a restart over 15 000 objects lists them in a few dozen requests).
LIST_PAGE = 500
#: The server-side duration of each watch request by default (the API server ends it; the next resumes where it
#: ended); the controller passes its ``--watch-seconds``.
WATCH_SECONDS = 60
#: Events waiting for the dispatcher, at most; a stream beyond it waits. A listing is paced by it: parsed objects
#: wait here, so the bound is what a restart holds of them at once (about 1 000 objects of a few KiB each), not 10 000.
QUEUE_EVENTS = 1_000
#: The longest line of a watch stream (one event) read before it is refused and the resource listed again.
#: The API server stores objects of at most 1.5 MiB (etcd's request limit); their JSON is about that size.
MAX_EVENT_BYTES = 8 * 1024 * 1024
#: Seconds to wait after a failed list or watch before the next attempt.
RETRY_SECONDS = 2.0


Identity = tuple[str, str]
"""An object's namespace ("" for a cluster-scoped one) and name."""
Page = Callable[[tuple[str, str], Sequence[dict[str, Any]]], None]
"""Told each page of a resource's listing before its objects are delivered: (apiVersion, plural), the objects."""
Listed = Callable[[tuple[str, str], frozenset[Identity]], None]
"""Told that a resource's listing is whole (every page told): (apiVersion, plural), the identities listed."""
Lost = Callable[[tuple[str, str]], None]
"""Told that a resource's stream broke off (events may have been missed until it is listed again)."""


@dataclass(frozen=True)
class Resource:
    """One watched resource and the watches that take its events."""

    api_version: str
    plural: str
    watches: tuple[Watch, ...]

    @property
    def kind(self) -> str | None:
        """The kind, when a watch declares it (a metadata-only stream's objects do not say it)."""
        return next((w.kind for w in self.watches if w.kind), None)

    @property
    def key(self) -> tuple[str, str]:
        return self.api_version, self.plural

    @property
    def metadata_only(self) -> bool:
        """Every handler takes the identity only: the API server need not send bodies."""
        return all(w.metadata_only for w in self.watches)


def resources_of(watches: Iterable[Watch]) -> list[Resource]:
    """The declared watches grouped by resource (declaration order kept); ids must be unique."""
    seen: set[str] = set()
    grouped: dict[tuple[str, str], list[Watch]] = {}
    for watch in watches:
        if watch.id in seen:
            raise ValueError(f"two watches are declared with the id {watch.id!r}")
        seen.add(watch.id)
        if "/" not in watch.api_version:
            raise ValueError(f"{watch.id}: core-group resources are not informed here (Secrets: SourceWatchers)")
        grouped.setdefault((watch.api_version, watch.plural), []).append(watch)
    resources = [Resource(api_version, plural, tuple(ws)) for (api_version, plural), ws in grouped.items()]
    for resource in resources:
        if resource.metadata_only and not resource.kind:
            raise ValueError(f"{resource.plural}: a metadata-only watch must name its kind")
    return resources


def lines_of(response: Any, limit: int = MAX_EVENT_BYTES) -> Iterator[bytes]:
    """The lines of a streamed answer, each at most ``limit`` bytes (a longer one raises ``ValueError``)."""
    buffer = bytearray()
    for chunk in response.stream(amt=None, decode_content=False):
        buffer.extend(chunk)
        start = 0
        while (end := buffer.find(b"\n", start)) != -1:
            if end > start:
                yield bytes(buffer[start:end])
            start = end + 1
        del buffer[:start]
        if len(buffer) > limit:
            raise ValueError(f"a watch event over {limit} bytes")
    if buffer.strip():
        yield bytes(buffer)


def abort(response: Any) -> None:
    """End a streamed answer now, from another thread than its reader's: shut its socket down, so that the reader's
    blocked read returns at once, then close it. Closing alone waits: the reader holds the buffered file's lock
    until its read returns — at the watch's server-side end, 60 s later (measured: a controller given SIGTERM took
    that long to stop). The connection is not given back to the pool: it is dead."""
    sock = getattr(getattr(response, "connection", None), "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(Exception):  # whatever the reader's side left: the stream is over either way
        response.close()


def tombstone(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What is kept of a known object to deliver its deletion if a relisting finds it gone: type and identity."""
    meta = obj.get("metadata") or {}
    kept = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in meta}
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": kept}


class Informers:
    """The list-and-watch of every resource, and the dispatcher that hands their events to the handlers."""

    def __init__(
        self,
        api_client: client.ApiClient,
        watches: Iterable[Watch],
        *,
        on_page: Page | None = None,
        on_listed: Listed | None = None,
        on_lost: Lost | None = None,
        watch_seconds: int = WATCH_SECONDS,
        list_page: int = LIST_PAGE,
    ) -> None:
        self.resources = resources_of(watches)
        self._custom = LeanCustomObjects(_own_client(api_client, connections=len(self.resources)))
        self._on_page = on_page
        self._on_listed = on_listed
        self._on_lost = on_lost
        self._watch_seconds = watch_seconds
        self._list_page = list_page
        self._events: queue.Queue[tuple[Resource, str, dict[str, Any]] | None] = queue.Queue(QUEUE_EVENTS)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._streams: dict[tuple[str, str], Any] = {}
        self._streams_lock = threading.Lock()
        self._listed = {r.key: threading.Event() for r in self.resources}

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> None:
        dispatcher = threading.Thread(target=self._dispatch, name="informers-dispatch", daemon=True)
        self._threads.append(dispatcher)
        for resource in self.resources:
            name = f"informer-{resource.plural}"
            self._threads.append(threading.Thread(target=self._run, args=(resource,), name=name, daemon=True))
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Stop every stream (their connections closed now, not at their server-side end) and the dispatcher."""
        self._stop.set()
        with self._streams_lock:
            streams = list(self._streams.values())
        for response in streams:
            abort(response)
        with contextlib.suppress(queue.Full):  # a full queue: the dispatcher sees the stop at its next event
            self._events.put_nowait(None)

    def wait_listed(self, timeout: float) -> bool:
        """Whether every resource was listed once within ``timeout`` seconds (its listing queued for delivery)."""
        return all(event.wait(timeout) for event in self._listed.values())

    # -- the dispatcher --------------------------------------------------------------------------------

    def _dispatch(self) -> None:
        while True:
            item = self._events.get()
            if item is None or self._stop.is_set():
                return
            resource, event_type, obj = item
            for index, watch in enumerate(resource.watches):
                body = obj if index == 0 and not watch.metadata_only else _copy(obj, metadata_only=watch.metadata_only)
                try:
                    watch.handler(event_type, body)
                except Exception:
                    logger.exception("the %s handler failed on a %s event", watch.id, event_type)

    def _deliver(self, resource: Resource, event_type: str, obj: dict[str, Any]) -> None:
        while not self._stop.is_set():
            try:
                self._events.put((resource, event_type, obj), timeout=1.0)
                return
            except queue.Full:
                continue

    # -- one resource ----------------------------------------------------------------------------------

    def _run(self, resource: Resource) -> None:
        """List, then watch, until stopped; list again whenever the watch cannot resume."""
        known: dict[Identity, dict[str, Any]] = {}
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self._list(resource, known)
                version = self._watch(resource, version, known)
            except ApiException as exc:
                if exc.status == 410:
                    version = None
                    continue
                self._lost(resource, f"HTTP {exc.status}")
                version = None
            except Exception as exc:  # a dead stream (its read deadline), a refused connection, an oversized event
                if self._stop.is_set():
                    return
                why = "delivered nothing within its deadline" if deadlines.timed_out(exc) else f"failed ({exc!r:.200})"
                self._lost(resource, why)
                version = None

    def _lost(self, resource: Resource, why: str) -> None:
        logger.warning("watch of %s %s %s; listing it again", resource.api_version, resource.plural, why)
        if self._on_lost is not None:
            self._on_lost(resource.key)
        self._stop.wait(RETRY_SECONDS)

    def _list(self, resource: Resource, known: dict[Identity, dict[str, Any]]) -> str | None:
        """List ``resource`` page by page, delivering each page's objects before reading the next, then the
        deletion of each object known before and now absent."""
        group, _, version = resource.api_version.rpartition("/")
        kind: str | None = None
        listed: dict[Identity, dict[str, Any]] = {}
        token: str | None = None
        listed_version: str | None = None
        while True:
            answer = json_object(
                self._custom.list_cluster_custom_object(
                    group,
                    version,
                    resource.plural,
                    limit=self._list_page,
                    _continue=token,
                    **_accept(resource, METADATA_LIST),
                )
            )
            page = ListPage.of(answer)
            kind = kind or resource.kind or str(answer.get("kind") or "").removesuffix("List") or None
            objects = [_typed(resource, item, kind) for item in page.items]
            if self._on_page is not None:
                self._on_page(resource.key, objects)
            for obj in objects:
                listed[_identity(obj)] = tombstone(obj)
            for obj in objects:
                self._deliver(resource, "ADDED", obj)
            listed_version = page.resource_version
            token = page.continue_token
            if token is None:
                break
        gone = [known[key] for key in known if key not in listed]
        known.clear()
        known.update(listed)
        if self._on_listed is not None:
            self._on_listed(resource.key, frozenset(listed))
        for obj in gone:
            self._deliver(resource, "DELETED", obj)
        self._listed[resource.key].set()
        return listed_version

    def _watch(self, resource: Resource, since: str | None, known: dict[Identity, dict[str, Any]]) -> str | None:
        """Watch ``resource`` from ``since`` until the server ends the watch; the last version seen (None: list
        again)."""
        group, _, version = resource.api_version.rpartition("/")
        response: Any = self._custom.list_cluster_custom_object(
            group,
            version,
            resource.plural,
            watch=True,
            resource_version=since,
            allow_watch_bookmarks=True,
            timeout_seconds=self._watch_seconds,
            _preload_content=False,
            **_accept(resource, METADATA_WATCH),
        )
        with self._streams_lock:
            self._streams[resource.key] = response
        try:
            for line in lines_of(response):
                if self._stop.is_set():
                    return since
                sent = jsontext.loads(line)
                event = WatchEvent.of({"type": sent.get("type"), "raw_object": sent.get("object")})
                if event.type == "ERROR":
                    return since if event.code != 410 else None
                since = event.resource_version or since
                if event.type == "BOOKMARK":
                    continue
                obj = _typed(resource, event.object, resource.kind) if resource.metadata_only else event.object
                key = (event.namespace, event.name)
                if event.type == "DELETED":
                    known.pop(key, None)
                elif event.type in ("ADDED", "MODIFIED"):
                    known[key] = tombstone(obj)
                else:
                    continue
                self._deliver(resource, event.type, obj)
            return since
        finally:
            with self._streams_lock:
                self._streams.pop(resource.key, None)
            response.release_conn()


def _typed(resource: Resource, item: Mapping[str, Any], kind: str | None) -> dict[str, Any]:
    """An object as its handlers expect it: with its type (list items and metadata-only objects lack it)."""
    if resource.metadata_only:
        return {"apiVersion": resource.api_version, "kind": kind, "metadata": item.get("metadata") or {}}
    return {**item, "apiVersion": resource.api_version, "kind": kind}


def _own_client(api_client: client.ApiClient, *, connections: int) -> client.ApiClient:
    """A client beside ``api_client`` (same server, credentials and deadlines) with a pool of its own, one
    connection per stream: a watch holds its connection for minutes, and taken from the reconciles' pool the
    streams left it short — urllib3 then dialled (TLS handshake) and dropped a connection per request beyond it,
    one for nearly every status write while provisioning."""
    configuration = copy.copy(api_client.configuration)
    configuration.connection_pool_maxsize = max(1, connections)
    return deadlines.sibling_with(api_client, configuration)


def _accept(resource: Resource, metadata_type: str) -> dict[str, Any]:
    return {"_headers": {"Accept": metadata_type}} if resource.metadata_only else {}


def _identity(obj: Mapping[str, Any]) -> Identity:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _copy(obj: Mapping[str, Any], *, metadata_only: bool) -> dict[str, Any]:
    """A handler's own copy of an event's object."""
    if metadata_only:
        return {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "metadata": copy_json(obj.get("metadata") or {}),
        }
    copied: dict[str, Any] = copy_json(dict(obj))
    return copied
