"""Reacting to the operator: watch the kinds the plans' templates produce and read back.

An instance's status template reads live objects (its ``sources`` and the resources it applied). When any
of them changes, the instance must be re-evaluated at once, not at the next poll. The kinds involved are
only known from the plans, so watches start on demand, as reconciles report the objects they depend on:
no restart is needed when a plan introduces a new operator kind.

``SourceIndex`` is the pure part (which owner keys depend on which object); ``SourceWatchers`` runs one
informer per kind (:mod:`opbroker.kubeclient.informer`) and reports the owners of every changed object to a
callback.

Each watch request asks the API server to end it after ``watch_seconds`` and for bookmarks; the client's read
deadline (:mod:`opbroker.kubeclient.deadlines`) fails one that delivers nothing for a quarter longer — a dead
connection — and a stream that outlives that deadline (events trickling past its end) is ended client-side.
After a failure the kind's store entries are dropped (reads go to the API) until it is listed again; the events
of the gap are lost, so once listed again every owner depending on an object of the kind is reported changed (a
relisting informer's resync). The owners' polls are a safety net only, and back off with an operation's age.

Kinds named ``metadata_only`` (the controller names Secrets) are listed and watched as
``PartialObjectMetadata``: the API server sends each object's metadata, never its body, so neither the
transfer, nor the parsing, nor the store grows with the size or the number of the cluster's other Secrets.
The store learns their versions (a bound binding's restart check needs nothing more), and the bodies a
reconcile reads are fetched on demand and kept while they are current (see ``controller.store``). The
controller's own Secrets (its registries: ``own_bodies`` names their namespace and label) are also listed with
their bodies, before each metadata listing, so a restarted controller reads its registries from memory, without a
GET each, while the (much longer) listing of every Secret's metadata is still on its way; their later changes
come from its own writes. (After the metadata listing, as until issue 45, every reconcile in the window read its
registry with a GET: ~480 per restart at 1 000 instances + 2 000 bindings, against ~40.) Only there: a label is
anyone's to write, and a tenant's Secrets labelled like opbroker's were once all held, bodies and all, from every
namespace (issue 42).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from opbroker.api.meta import ResourceRef
from opbroker.controller.runtime.clock import SYSTEM, Clock
from opbroker.controller.runtime.informers import streams_client
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.kube import Kube, ref_of
from opbroker.controller.runtime.objects import ref_key, resource_version
from opbroker.controller.runtime.store import Covers
from opbroker.kubeclient.informer import (
    RETRIES,
    Body,
    Collection,
    Identity,
    Informer,
    LeanSource,
    Source,
    items_of,
    pages,
)
from opbroker.kubeclient.lean import METADATA_PAGE, LeanApi
from opbroker.kubeclient.wire import JsonObject, mapping_of, text_of
from opbroker.osbclient import Backoff

logger = logging.getLogger(__name__)

ObjectKey = tuple[str, str, str, str]  # apiVersion, kind, namespace, name
Listener = Callable[[str, Body], None]  # event type, object


#: Objects per page when a kind is listed with its bodies: the store takes them in page by page, so a listing
#: never holds them all as parsed objects at once (their memory would stay with the process). A metadata-only
#: kind is listed in pages of :data:`~opbroker.kubeclient.lean.METADATA_PAGE`.
LIST_PAGE = 5_000

#: The most kinds the source watches follow (a task and a connection each); the operator kinds of a platform's plans
#: are a few.
MAX_WATCHED_KINDS = 128


class SourceIndex:
    """Which owners (instance/binding keys) depend on which objects. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owners: dict[ObjectKey, set[Key]] = {}
        self._objects: dict[Key, set[ObjectKey]] = {}
        self._written: dict[Key, dict[ObjectKey, str]] = {}

    def track(self, owner: Key, refs: Iterable[ResourceRef]) -> set[tuple[str, str]]:
        """Record that ``owner`` depends on ``refs`` (replacing what it depended on before).

        Returns the (apiVersion, kind) pairs involved, so the caller can make sure they are watched.
        """
        keys = {ref_key(ref) for ref in refs}
        with self._lock:
            for old in self._objects.get(owner, set()) - keys:
                owners = self._owners.get(old)
                if owners is not None:
                    owners.discard(owner)
                    if not owners:
                        del self._owners[old]
            for key in keys:
                self._owners.setdefault(key, set()).add(owner)
            self._objects[owner] = keys
            written = self._written.get(owner)
            if written:
                for gone in set(written) - keys:
                    del written[gone]
        return {(key[0], key[1]) for key in keys}

    def follows(self, owner: Key, refs: Iterable[ResourceRef]) -> bool:
        """Whether ``owner`` depends on exactly ``refs`` (what :meth:`track` recorded last): a read, no change."""
        keys = {ref_key(ref) for ref in refs}
        with self._lock:
            return self._objects.get(owner, set()) == keys

    def forget(self, owner: Key) -> None:
        self.track(owner, [])
        with self._lock:
            self._objects.pop(owner, None)
            self._written.pop(owner, None)

    def wrote(self, owner: Key, written: JsonObject) -> None:
        """``owner``'s reconcile wrote ``written`` (its apply's answer, which the store now holds).

        The watch event of that version is the write's own echo: the reconcile that made it evaluates the
        object as written right after (from the store), so the event need not bring that owner back — it cost
        a whole reconcile per instance (its sources and status rendered, ~1 of ~4 reconciles per provision,
        issue 31). Every other owner of the object is told as before; any later version tells this one too.
        """
        version = resource_version(written)
        if not version:
            return
        key = ref_key(ref_of(written))
        with self._lock:
            self._written.setdefault(owner, {})[key] = version

    def owners_of(self, key: ObjectKey, resource_version: str | None = None) -> set[Key]:
        """The owners depending on ``key``; with ``resource_version``, less the one whose own write made that
        version (:meth:`wrote`)."""
        with self._lock:
            owners = set(self._owners.get(key, set()))
            if resource_version:
                owners = {owner for owner in owners if self._written.get(owner, {}).get(key) != resource_version}
            return owners

    def owners_of_kind(self, kind: tuple[str, str]) -> set[Key]:
        """Every owner depending on an object of ``kind`` (apiVersion, kind)."""
        with self._lock:
            return {owner for key, owners in self._owners.items() if key[:2] == kind for owner in owners}


@dataclass(frozen=True)
class Portion:
    """The part of each kind a shard's source watches follow (issue 46): the objects ``selector`` selects —
    ``covers`` says the same of an object's labels — except for the kinds in ``whole``, followed whole (the
    coordinator's Secrets and Namespaces: the claims, the Service Catalog and onboarding read any of them).

    A kind followed in part is never complete: an object its watch does not hold may exist labelled for another
    shard (a tenant's relabelling of its own objects, an instance moved between shards whose objects are relabelled
    on their way), so a read of it goes to the API — trusting the absence would apply over an object that is not
    the instance's, or take one still being deleted for gone."""

    selector: str
    covers: Covers
    whole: frozenset[tuple[str, str]] = frozenset()


class SourceWatchers:
    """One informer per (apiVersion, kind), started the first time a reconcile needs it.

    Only for a kind the API server serves (``Kube.served``: a made-up kind starts nothing, and its refs are read
    as any unwatched object is), and at most ``max_kinds`` of them: the kinds come from what templates render,
    and a tenant's parameters reach templates, so the number of threads is bounded here, not by the plans'
    goodwill (issue 42). A kind refused for the bound is logged once and read without a watch.

    The informers are tasks on the controller's loop (:meth:`start` names it; a kind ensured before is started
    then): :meth:`ensure` and :meth:`wait_listed` are called from reconciles' worker threads, and what the informers
    tell (the store's pages and events, the listeners, ``on_change``) runs on the loop — so ``on_change`` is the
    loop-side ``Runtime.enqueue``, with no hop through the loop's self-pipe per event.
    """

    def __init__(
        self,
        kube: Kube,
        index: SourceIndex,
        on_change: Callable[[Key], None],
        *,
        watch_seconds: int = 60,
        metadata_only: Iterable[tuple[str, str]] = (),
        own_bodies: Mapping[tuple[str, str], tuple[str, str]] | None = None,
        portion: Portion | None = None,
        retry: Backoff = RETRIES,
        max_kinds: int = MAX_WATCHED_KINDS,
        source: Source | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        self._kube = kube
        self._source = source
        self._clock = clock
        """What :meth:`wait_listed`'s deadline reads."""
        self._max_kinds = max_kinds
        self._over_budget: set[tuple[str, str]] = set()
        self._retry = retry
        self._watch_seconds = watch_seconds
        self._metadata_only = frozenset(metadata_only)
        self._own_bodies = dict(own_bodies or {})
        self._portion = portion
        self._index = index
        self._on_change = on_change
        self._lock = threading.Lock()
        self._informers: dict[tuple[str, str], Informer] = {}
        self._unlisted: set[tuple[str, str]] = set()
        self._listeners: dict[tuple[str, str], list[Listener]] = {}
        self._stopped = False
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run the informers on ``loop`` from now on (those of kinds ensured before, now)."""
        with self._lock:
            self._loop = loop
            pending = [] if self._stopped else list(self._informers.values())
        for informer in pending:
            informer.start(loop)

    @property
    def watched(self) -> set[tuple[str, str]]:
        with self._lock:
            return set(self._informers)

    @property
    def live(self) -> frozenset[tuple[str, str]]:
        """The kinds whose watch is live: listed, and not failed since. A change of their objects reaches the
        owners at once, so an owner's poll may back off; any other kind's owners are polled at the fixed
        interval."""
        with self._lock:
            informers = list(self._informers.items())
        return frozenset(kind for kind, informer in informers if informer.live)

    def ensure(self, kinds: Iterable[tuple[str, str]]) -> None:
        for kind in kinds:
            with self._lock:
                if kind in self._informers or self._stopped:
                    continue
            served = self._kube.served.resource(*kind)
            if served is None:
                continue
            with self._lock:
                if kind in self._informers or self._stopped:
                    continue
                if len(self._informers) >= self._max_kinds:
                    if kind not in self._over_budget and len(self._over_budget) < self._max_kinds:
                        self._over_budget.add(kind)
                        logger.warning("not watching %s %s: %d kinds are watched already", *kind, self._max_kinds)
                    continue
                informer = self._informer(kind, served.name)
                self._informers[kind] = informer
                loop = self._loop
            if loop is not None:  # else started by start()
                informer.start(loop)

    def _informer(self, kind: tuple[str, str], plural: str) -> Informer:
        api_version, kind_name = kind
        bodies = kind not in self._metadata_only
        portion = self._portion if self._portion is not None and kind not in self._portion.whole else None
        collection = Collection(
            api_version,
            plural,
            kind_name,
            label_selector=portion.selector if portion is not None else None,
            metadata_only=not bodies,
            page=LIST_PAGE if bodies else METADATA_PAGE,
        )
        if portion is not None:
            self._kube.store.cover(kind, portion.covers)
        if self._source is None:
            self._source = LeanSource(LeanApi(streams_client(self._kube.api_client, connections=16)))
        return Informer(
            self._source,
            collection,
            functools.partial(self._changed, kind, bodies),
            before_listing=functools.partial(self._own_listing, kind, collection),
            on_page=functools.partial(self._page, kind, bodies),
            on_listed=functools.partial(self._listed, kind),
            on_lost=functools.partial(self._lost, kind),
            list_events=False,  # a page is told to the listeners by _page, and owners only after a relisting
            tombstones=False,  # the store completes the kind from the identities listed
            watch_seconds=self._watch_seconds,
            retry=self._retry,
            name=f"watch-{kind_name}",
        )

    def subscribe(self, kind: tuple[str, str], listener: Listener) -> None:
        """Watch ``kind`` from now on, and pass every object it lists or changes to ``listener`` (in the watch's
        loop, with the event type: ADDED for what a listing found). One watch per kind serves everyone:
        the claims' Secret events come from the same watch that keeps the store's Secrets."""
        with self._lock:
            self._listeners.setdefault(kind, []).append(listener)
        self.ensure([kind])

    def _tell(self, kind: tuple[str, str], event_type: str, obj: Body) -> None:
        for listener in self._listeners.get(kind, ()):
            try:
                listener(event_type, obj)
            except Exception:
                logger.exception("a listener of %s %s failed", *kind)

    def wait_listed(self, kinds: Iterable[tuple[str, str]], timeout: float, *, bodies: bool = False) -> bool:
        """Wait (up to ``timeout`` seconds in all) until the watches of ``kinds`` have listed their kind once,
        so the store answers for every object of it (an informer's cache sync). After a restart, each
        reconcile would otherwise read its sources with GETs while the first listing is still on its way.
        False if one is not listed in time, or not watched (the caller then reads what the store does not know).
        ``bodies``: the caller reads whole objects — a kind held by metadata only is not waited for (its listing
        brings no body)."""
        deadline = self._clock.monotonic() + timeout
        for kind in kinds:
            if bodies and kind in self._metadata_only:
                continue
            with self._lock:
                informer = self._informers.get(kind)
                if kind in self._unlisted:
                    return False  # waited for in vain once: nobody waits for it again
            if informer is None:
                return False
            if not informer.listed.wait(max(0.0, deadline - self._clock.monotonic())):
                with self._lock:
                    self._unlisted.add(kind)
                return False
        return True

    def stop(self) -> None:
        """Stop every watch now (their streams ended, not left to their server-side end; on the loop)."""
        with self._lock:
            self._stopped = True
            informers = list(self._informers.items())
        for kind, informer in informers:
            informer.stop()
            self._kube.store.forget_type(kind)

    async def wait(self) -> None:
        """Until every informer's task has ended (after :meth:`stop`; on the loop), their connections then
        closed."""
        with self._lock:
            informers = list(self._informers.values())
        for informer in informers:
            await informer.wait()
        closing = getattr(self._source, "aclose", None)
        if closing is not None:
            await closing()

    # -- what the informers tell --------------------------------------------------------------------------

    def _page(self, kind: tuple[str, str], bodies: bool, objects: Sequence[Body]) -> None:
        """A page of a listing: held in the store (complete once the whole listing is), told to the listeners."""
        self._kube.store.hold_page(kind, objects, bodies=bodies)
        for obj in objects:
            self._tell(kind, "ADDED", obj)

    async def _own_listing(self, kind: tuple[str, str], collection: Collection) -> None:
        """Before a metadata listing: the controller's own objects of the kind listed with their bodies, page by
        page into the store (fed, not complete: what they do not cover is read from the API until the metadata
        listing is whole). The metadata pages then keep each body of the version they list; a newer version
        listed drops it (read again on demand), an object gone by then is dropped when the kind completes."""
        own = self._own_bodies.get(kind)
        if not (collection.metadata_only and own and self._source is not None):
            return
        namespace, selector = own
        bodied = Collection(collection.api_version, collection.plural, collection.kind, namespace, selector)
        async with contextlib.aclosing(pages(self._source, bodied)) as listing:
            async for page in listing:
                if self._stopped:
                    return
                self._kube.store.hold_page(kind, [bodied.typed(item) for item in items_of(page)])

    def _listed(self, kind: tuple[str, str], listed: frozenset[Identity]) -> None:
        """A whole listing: the store's kind is complete; after a relisting, every owner of an object of the kind
        is told (the gap's events are lost)."""
        whole = self._portion is None or kind in self._portion.whole
        self._kube.store.complete(kind, listed, whole=whole)
        with self._lock:
            informer = self._informers.get(kind)
        if informer is not None and informer.listed.is_set():
            for owner in self._index.owners_of_kind(kind):
                self._on_change(owner)

    def _changed(self, kind: tuple[str, str], bodies: bool, event_type: str, obj: Body) -> None:
        """A watch event: the store kept current, the listeners and the owners of the object told (less the
        owner whose own write the event echoes)."""
        store = self._kube.store
        if event_type == "DELETED":
            store.remove(kind, obj)
        elif bodies:
            store.put(kind, obj)
        else:
            store.note(kind, obj)
        self._tell(kind, event_type, obj)
        meta = mapping_of(obj.get("metadata"))
        key = (kind[0], kind[1], text_of(meta.get("namespace")) or "", text_of(meta.get("name")) or "")
        for owner in self._index.owners_of(key, text_of(meta.get("resourceVersion"))):
            self._on_change(owner)

    def _lost(self, kind: tuple[str, str], _why: str) -> None:
        """The stream broke off: events may be lost, so the store serves nothing of the kind until it is
        listed again (reads go to the API)."""
        self._kube.store.forget_type(kind)
