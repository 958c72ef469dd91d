"""Reacting to the operator: watch the kinds the plans' templates produce and read back.

An instance's status template reads live objects (its ``sources`` and the resources it applied). When any
of them changes, the instance must be re-evaluated at once, not at the next poll. The kinds involved are
only known from the plans, so watches start on demand, as reconciles report the objects they depend on:
no restart is needed when a plan introduces a new operator kind.

``SourceIndex`` is the pure part (which owner keys depend on which object); ``SourceWatchers`` runs one
watch per kind in a thread and reports the owners of every changed object to a callback.

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
their bodies after each metadata listing, so a restarted controller reads its registries from memory, as before,
without a GET each; their later changes come from its own writes. Only there: a label is anyone's to write, and
a tenant's Secrets labelled like opbroker's were once all held, bodies and all, from every namespace (issue 42).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from opbroker.api.meta import ResourceRef
from opbroker.controller.core.views import ListPage, WatchEvent
from opbroker.controller.kube import Kube, ref_of
from opbroker.controller.runtime.keys import Key
from opbroker.kubeclient import deadlines, jsontext
from opbroker.kubeclient.deadlines import Timeouts
from opbroker.kubeclient.lean import METADATA_LIST, METADATA_PAGE, METADATA_WATCH

logger = logging.getLogger(__name__)

ObjectKey = tuple[str, str, str, str]  # apiVersion, kind, namespace, name
Listener = Callable[[str, dict[str, Any]], None]  # event type, object


def object_key(ref: ResourceRef) -> ObjectKey:
    return (ref.api_version, ref.kind, ref.namespace or "", ref.name)


def _with_type(item: Mapping[str, Any], api_version: str, kind: str) -> dict[str, Any]:
    """List items carry no apiVersion/kind; the store's copies are served as if read one by one."""
    return {**item, "apiVersion": api_version, "kind": kind}


#: What a metadata-only list and watch ask for (as client-go's metadata informers do): the API server answers
#: ``PartialObjectMetadata``: one object's metadata, without its data (a metadata-only watch's events).

#: Objects per page when a watch lists its kind: the store takes them in page by page, so listing 40 000
#: Secrets never holds them all as parsed objects at once (their memory would stay with the process).
LIST_PAGE = 5_000


def _listing(
    resource: Any,
    api_version: str,
    kind: str,
    version: list[str | None],
    *,
    metadata_only: bool = False,
    label_selector: str | None = None,
    namespace: str | None = None,
) -> Iterator[dict[str, Any]]:
    """Every object of ``resource`` (with ``label_selector``: those it selects), listed in pages as plain JSON
    (the dynamic client's own objects cost more than the request); the listing's resourceVersion is appended
    to ``version`` at its end. ``metadata_only``: each object's metadata alone (see :data:`METADATA_LIST`)."""
    token: str | None = None
    headers: dict[str, Any] = {"header_params": {"Accept": METADATA_LIST}} if metadata_only else {}
    if label_selector:
        headers["label_selector"] = label_selector
    if namespace:
        headers["namespace"] = namespace
    while True:
        limit = METADATA_PAGE if metadata_only else LIST_PAGE
        page = ListPage.of(jsontext.loads(resource.get(limit=limit, _continue=token, serialize=False, **headers).data))
        for item in page.items:
            yield _metadata_of(item, api_version, kind) if metadata_only else _with_type(item, api_version, kind)
        token = page.continue_token
        if token is None:
            version.append(page.resource_version)
            return


def _metadata_of(item: Mapping[str, Any], api_version: str, kind: str) -> dict[str, Any]:
    """What a metadata-only watch passes on of an object: its type and metadata, nothing else (whatever else
    an API server might send; annotations stay — listeners may look at them — but the store keeps none)."""
    return {"apiVersion": api_version, "kind": kind, "metadata": item.get("metadata") or {}}


def _events(
    resource: Any, resource_version: str | None, watcher: watch.Watch, watch_seconds: int, *, metadata_only: bool
) -> Iterator[dict[str, Any]]:
    """``resource``'s watch events as raw JSON (``metadata_only``: as ``PartialObjectMetadata``). Not the dynamic
    client's ``watch``: it wraps every event's object in a ``ResourceInstance`` that nothing here reads (8.7 % of the
    controller's CPU under the provisioning bench, py-spy, session 12) and sends no Accept header of ours."""
    accept = {"header_params": {"Accept": METADATA_WATCH}} if metadata_only else {}
    yield from watcher.stream(
        resource.get,
        resource_version=resource_version,
        timeout_seconds=watch_seconds,
        allow_watch_bookmarks=True,
        serialize=False,
        **accept,
    )


#: The most kinds the source watches follow (a thread each); the operator kinds of a platform's plans are a few.
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
        keys = {object_key(ref) for ref in refs}
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

    def forget(self, owner: Key) -> None:
        self.track(owner, [])
        with self._lock:
            self._objects.pop(owner, None)
            self._written.pop(owner, None)

    def wrote(self, owner: Key, written: dict[str, Any]) -> None:
        """``owner``'s reconcile wrote ``written`` (its apply's answer, which the store now holds).

        The watch event of that version is the write's own echo: the reconcile that made it evaluates the
        object as written right after (from the store), so the event need not bring that owner back — it cost
        a whole reconcile per instance (its sources and status rendered, ~1 of ~4 reconciles per provision,
        issue 31). Every other owner of the object is told as before; any later version tells this one too.
        """
        version = (written.get("metadata") or {}).get("resourceVersion")
        if not version:
            return
        key = object_key(ref_of(written))
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


class SourceWatchers:
    """One watch thread per (apiVersion, kind), started the first time a reconcile needs it.

    Only for a kind the API server serves (``Kube.served``: a made-up kind starts nothing, and its refs are read
    as any unwatched object is), and at most ``max_kinds`` of them: the kinds come from what templates render,
    and a tenant's parameters reach templates, so the number of threads is bounded here, not by the plans'
    goodwill (issue 42). A kind refused for the bound is logged once and read without a watch.
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
        retry_seconds: float = 2.0,
        max_kinds: int = MAX_WATCHED_KINDS,
    ) -> None:
        self._kube = kube
        self._max_kinds = max_kinds
        self._over_budget: set[tuple[str, str]] = set()
        self._retry_seconds = retry_seconds
        self._watch_seconds = watch_seconds
        self._metadata_only = frozenset(metadata_only)
        self._own_bodies = dict(own_bodies or {})
        self._index = index
        self._on_change = on_change
        self._lock = threading.Lock()
        self._threads: dict[tuple[str, str], threading.Thread] = {}
        self._listed: dict[tuple[str, str], threading.Event] = {}
        self._unlisted: set[tuple[str, str]] = set()
        self._listeners: dict[tuple[str, str], list[Listener]] = {}
        self._live: frozenset[tuple[str, str]] = frozenset()
        self._stop = threading.Event()

    @property
    def watched(self) -> set[tuple[str, str]]:
        with self._lock:
            return set(self._threads)

    @property
    def live(self) -> frozenset[tuple[str, str]]:
        """The kinds whose watch is live: listed, and not failed since (a watch resumed after a refused request is
        live again with its first event). A change of their objects reaches the owners at once, so an owner's
        poll may back off; any other kind's owners are polled at the fixed interval."""
        return self._live

    def _mark(self, kind: tuple[str, str], *, live: bool) -> None:
        with self._lock:
            self._live = self._live | {kind} if live else self._live - {kind}

    def ensure(self, kinds: Iterable[tuple[str, str]]) -> None:
        for kind in kinds:
            with self._lock:
                if kind in self._threads or self._stop.is_set():
                    continue
            if not self._kube.served.served(*kind):
                continue
            with self._lock:
                if kind in self._threads or self._stop.is_set():
                    continue
                if len(self._threads) >= self._max_kinds:
                    if kind not in self._over_budget and len(self._over_budget) < self._max_kinds:
                        self._over_budget.add(kind)
                        logger.warning("not watching %s %s: %d kinds are watched already", *kind, self._max_kinds)
                    continue
                thread = threading.Thread(target=self._watch, args=kind, name=f"watch-{kind[1]}", daemon=True)
                self._threads[kind] = thread
                self._listed[kind] = threading.Event()
            thread.start()

    def subscribe(self, kind: tuple[str, str], listener: Listener) -> None:
        """Watch ``kind`` from now on, and pass every object it lists or changes to ``listener`` (in the watch's
        thread, with the event type: ADDED for what a listing found). One watch per kind serves everyone:
        the claims' Secret events come from the same watch that keeps the store's Secrets."""
        with self._lock:
            self._listeners.setdefault(kind, []).append(listener)
        self.ensure([kind])

    def _tell(self, kind: tuple[str, str], event_type: str, obj: dict[str, Any]) -> None:
        for listener in self._listeners.get(kind, ()):
            try:
                listener(event_type, obj)
            except Exception:
                logger.exception("a listener of %s %s failed", *kind)

    def _told(self, kind: tuple[str, str], objects: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for obj in objects:
            yield obj
            self._tell(kind, "ADDED", obj)

    def wait_listed(self, kinds: Iterable[tuple[str, str]], timeout: float) -> bool:
        """Wait (up to ``timeout`` seconds in all) until the watches of ``kinds`` have listed their kind once,
        so the store answers for every object of it (an informer's cache sync). After a restart, each
        reconcile would otherwise read its sources with GETs while the first listing is still on its way.
        False if one is not listed in time (the caller then reads what the store does not know)."""
        deadline = time.monotonic() + timeout
        for kind in kinds:
            with self._lock:
                listed = self._listed.get(kind)
                if kind in self._unlisted:
                    return False  # waited for in vain once: nobody waits for it again
            if listed is None:
                return False
            if not listed.wait(max(0.0, deadline - time.monotonic())):
                with self._lock:
                    self._unlisted.add(kind)
                return False
        return True

    def stop(self) -> None:
        self._stop.set()

    def _watch(self, api_version: str, kind: str) -> None:
        """Watch ``kind`` cluster-wide until stopped, resuming from the last resourceVersion after errors."""
        resource_version: str | None = None
        store = self._kube.store
        type_key = (api_version, kind)
        bodies = type_key not in self._metadata_only
        while not self._stop.is_set():
            try:
                resource = self._kube.dynamic.resources.get(api_version=api_version, kind=kind)
                if resource_version is None:
                    # Listed, then watched from that version on: the store holds the whole kind (an
                    # informer's list-and-watch), so reconciles need not GET these objects.
                    versions: list[str | None] = []
                    listing = _listing(resource, api_version, kind, versions, metadata_only=not bodies)
                    store.replace(type_key, self._told(type_key, listing), bodies=bodies)
                    resource_version = versions[0]
                    own = self._own_bodies.get(type_key)
                    if not bodies and own:
                        own_namespace, own_selector = own
                        for obj in _listing(
                            resource, api_version, kind, [], label_selector=own_selector, namespace=own_namespace
                        ):
                            store.fill(type_key, obj)
                    listed = self._listed[type_key]
                    if listed.is_set():  # listed again after a failure: what changed in the gap was never told
                        for owner in self._index.owners_of_kind(type_key):
                            self._on_change(owner)
                    listed.set()
                    self._mark(type_key, live=True)
                watcher = watch.Watch()
                metadata_of = functools.partial(_metadata_of, api_version=api_version, kind=kind)
                deadline = time.monotonic() + Timeouts(watch=self._watch_seconds).watch_read()
                events = _events(resource, resource_version, watcher, self._watch_seconds, metadata_only=not bodies)
                for sent in events:
                    if self._stop.is_set() or time.monotonic() > deadline:
                        watcher.stop()
                        break
                    event = WatchEvent.of(sent, None if bodies else metadata_of)
                    if type_key not in self._live:
                        self._mark(type_key, live=True)
                    resource_version = event.resource_version or resource_version
                    if event.type == "BOOKMARK":
                        continue
                    if event.type == "ERROR":
                        self._mark(type_key, live=False)
                        if event.code == 410:  # resourceVersion too old: relist
                            resource_version = None
                        break
                    raw = event.object
                    if event.type == "DELETED":
                        store.remove(type_key, raw)
                    elif event.type in ("ADDED", "MODIFIED"):
                        if bodies:
                            store.put(type_key, raw)
                        else:
                            store.note(type_key, raw)
                    self._tell(type_key, event.type, raw)
                    key = (api_version, kind, event.namespace, event.name)
                    for owner in self._index.owners_of(key, event.resource_version):
                        self._on_change(owner)
            except ApiException as exc:
                self._mark(type_key, live=False)
                if exc.status == 410:
                    resource_version = None
                    continue
                logger.warning("watch of %s %s failed (HTTP %s); retrying", api_version, kind, exc.status)
                self._stop.wait(self._retry_seconds)
            except Exception as exc:  # a dead stream (its read deadline: the watchdog), a refused connection, ...
                why = (
                    "delivered nothing within its deadline"
                    if deadlines.timed_out(exc)
                    else f"failed ({type(exc).__name__})"
                )
                self._mark(type_key, live=False)
                logger.warning("watch of %s %s %s; listing it again", api_version, kind, why)
                resource_version = None
                store.forget_type(type_key)  # events may be lost: read from the API until listed again
                self._stop.wait(self._retry_seconds)
        self._mark(type_key, live=False)
        store.forget_type(type_key)
