"""The controller's watches, run: one :class:`~opbroker.kubeclient.informer.Informer` per watched resource, their
events handed to the handlers one at a time, in the order they arrived.

kopf used to run them. Profiled under the provisioning bench (py-spy, the GIL holder sampled), kopf's machinery
around each event — causes, registries, handler invocation, the copy of its reused bodies — was a quarter of the
controller's CPU, for handlers that only store the object and enqueue keys; and kopf's listing does not tell a
type's store that it is *complete*, so a reconcile that missed an object read it again from the API (a restart
made some 300 such GETs). How each resource is listed and watched (pages, bookmarks, the watchdog, relisting
with tombstones, metadata only) is the informer's (:mod:`opbroker.kubeclient.informer`); here:

* each page of a listing is told to ``on_page`` (the controller holds it in its store) before its objects are
  delivered, and ``on_listed`` is told the identities of everything listed (the store is complete for the kind);
  ``on_lost`` that a stream broke off (reads go to the API until the kind is listed again);
* a resource watched by several subsystems (SFServiceBindings: the controller and the claims) is one stream; each
  handler gets a copy of its own (handlers may keep or change what they are given). A ``metadata_only`` watch gets
  the object's ``apiVersion``, ``kind`` and ``metadata``; when every watch of a resource is metadata-only, the
  resource is listed and watched as ``PartialObjectMetadata`` (the API server sends no bodies);
* every informer is a task on the controller's loop (issue 45), and its events are handed to the handlers there,
  as they arrive, one at a time: handlers never run concurrently with each other (they all run on the one loop
  thread) and may call the loop-side ``Runtime.enqueue``. A stream whose handlers are slow waits for them (its
  next read is not made meanwhile), so nothing piles up in memory — the bounded queue and the dispatcher thread
  that did that before are gone. A handler that raises is logged; the stream goes on.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from kubernetes import client

from opbroker.controller.runtime.jsoncopy import copy_json
from opbroker.controller.runtime.watches import Watch
from opbroker.kubeclient import deadlines
from opbroker.kubeclient.informer import RETRIES, Collection, Identity, Informer, LeanSource
from opbroker.kubeclient.lean import LeanApi
from opbroker.kubeclient.wire import JsonBody, JsonObject
from opbroker.osbclient import Backoff

logger = logging.getLogger(__name__)

#: Objects per page of a listing (a restart over 15 000 objects lists them in a few dozen requests).
LIST_PAGE = 500
#: The server-side duration of each watch request by default (the API server ends it; the next resumes where it
#: ended); the controller passes its ``--watch-seconds``.
WATCH_SECONDS = 60

StreamKey = tuple[str, str, str | None]
"""One stream: (apiVersion, plural, label selector — None: every object)."""
Page = Callable[[StreamKey, Sequence[JsonBody]], None]
"""Told each page of a stream's listing before its objects are delivered: the stream, the objects."""
Listed = Callable[[StreamKey, frozenset[Identity]], None]
"""Told that a stream's listing is whole (every page told): the stream, the identities listed."""
Lost = Callable[[StreamKey], None]
"""Told that a stream broke off (events may have been missed until it is listed again)."""


@dataclass(frozen=True)
class Resource:
    """One watched resource (its objects matching one label selector) and the watches that take its events."""

    api_version: str
    plural: str
    watches: tuple[Watch, ...]
    label_selector: str | None = None

    @property
    def kind(self) -> str | None:
        """The kind, when a watch declares it (a metadata-only stream's objects do not say it)."""
        return next((w.kind for w in self.watches if w.kind), None)

    @property
    def name(self) -> str:
        """The informer's name in logs: its plural, and its selector when it has one."""
        return f"informer-{self.plural}" + (f"[{self.label_selector}]" if self.label_selector else "")

    @property
    def key(self) -> StreamKey:
        return self.api_version, self.plural, self.label_selector

    @property
    def metadata_only(self) -> bool:
        """Every handler takes the identity only: the API server need not send bodies."""
        return all(w.metadata_only for w in self.watches)

    def collection(self, page: int) -> Collection:
        return Collection(
            self.api_version,
            self.plural,
            self.kind,
            label_selector=self.label_selector,
            metadata_only=self.metadata_only,
            page=page,
        )


def resources_of(watches: Iterable[Watch]) -> list[Resource]:
    """The declared watches grouped by resource and label selector (declaration order kept); ids must be unique."""
    seen: set[str] = set()
    grouped: dict[StreamKey, list[Watch]] = {}
    for watch in watches:
        if watch.id in seen:
            raise ValueError(f"two watches are declared with the id {watch.id!r}")
        seen.add(watch.id)
        if "/" not in watch.api_version:
            raise ValueError(f"{watch.id}: core-group resources are not informed here (Secrets: SourceWatchers)")
        grouped.setdefault((watch.api_version, watch.plural, watch.label_selector), []).append(watch)
    resources = [
        Resource(api_version, plural, tuple(ws), selector) for (api_version, plural, selector), ws in grouped.items()
    ]
    for resource in resources:
        if resource.metadata_only and not resource.kind:
            raise ValueError(f"{resource.plural}: a metadata-only watch must name its kind")
    return resources


class Informers:
    """An informer per resource, each handing its events to the resource's handlers on the loop."""

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
        retry: Backoff = RETRIES,
    ) -> None:
        self.resources = resources_of(watches)
        self.source = LeanSource(LeanApi(streams_client(api_client, connections=len(self.resources))))
        self.informers = [
            Informer(
                self.source,
                resource.collection(list_page),
                functools.partial(self._deliver, resource),
                on_page=None if on_page is None else functools.partial(on_page, resource.key),
                on_listed=None if on_listed is None else functools.partial(on_listed, resource.key),
                on_lost=None if on_lost is None else _ignoring_why(on_lost, resource.key),
                watch_seconds=watch_seconds,
                retry=retry,
                name=resource.name,
            )
            for resource in self.resources
        ]

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Start every informer as a task on ``loop`` (by default the running one)."""
        for informer in self.informers:
            informer.start(loop)

    def stop(self) -> None:
        """Stop every stream (their reads ended now, not at their server-side end); callable from any thread."""
        for informer in self.informers:
            informer.stop()

    async def wait(self) -> None:
        """Until every informer's task has ended (after :meth:`stop`), their connections then closed."""
        for informer in self.informers:
            await informer.wait()
        await self.source.aclose()

    def wait_listed(self, timeout: float) -> bool:
        """Whether every resource was listed once within ``timeout`` seconds (from a thread, never the loop)."""
        return all(informer.listed.wait(timeout) for informer in self.informers)

    # -- handing events on ------------------------------------------------------------------------------

    def _deliver(self, resource: Resource, event_type: str, obj: JsonBody) -> None:
        """An event, to each of the resource's handlers (on the loop; the first takes the object itself, every
        other handler a copy of its own)."""
        for index, watch in enumerate(resource.watches):
            body = obj if index == 0 and not watch.metadata_only else _copy(obj, metadata_only=watch.metadata_only)
            try:
                watch.handler(event_type, body)
            except Exception:
                logger.exception("the %s handler failed on a %s event", watch.id, event_type)


def _ignoring_why(lost: Lost, key: StreamKey) -> Callable[[str], None]:
    """The informer says why a stream broke (it logs it); the controller needs only which."""

    def call(_why: str) -> None:
        lost(key)

    return call


def streams_client(api_client: client.ApiClient, *, connections: int) -> client.ApiClient:
    """The client of watches: beside ``api_client`` (same server, credentials and deadlines), keeping
    ``connections`` idle (one per stream). The watches' connections are a pool of their own (the asynchronous
    transport's): a watch holds its connection for minutes, and taken from the reconciles' pool the streams left it
    short — a connection was then dialled (TLS handshake) and dropped per request beyond it."""
    configuration = copy.copy(api_client.configuration)
    configuration.connection_pool_maxsize = max(1, connections)
    return deadlines.sibling_with(api_client, configuration)


def _copy(obj: JsonObject, *, metadata_only: bool) -> JsonBody:
    """A handler's own copy of an event's object."""
    if metadata_only:
        return {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "metadata": copy_json(obj.get("metadata") or {}),
        }
    copied: JsonBody = copy_json(dict(obj))
    return copied
