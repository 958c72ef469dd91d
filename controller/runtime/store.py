"""The objects the controller's watches have delivered, kept in memory so reconciles need not GET them.

A reconcile used to read its instance, and each object its status template looks at, with a GET: about
six reads per instance, a third of everything the controller asked of the API server while provisioning.
Every one of those objects is watched anyway (the informers watch our kinds; ``SourceWatchers`` the operators'),
so the watches keep a copy here, as client-go's informers do, and reads are served from it.

Why it is safe to read from it:

* An object is only served for a *fed* type: one a watch keeps up to date. Anything else (a sister
  cluster's objects, a kind not watched yet) is read from the API as before.
* The copy is never older than the event that enqueued the reconcile: a watch stores the object before
  it enqueues its owner, and our own writes store the server's answer. A copy that is nevertheless behind
  makes the next guarded write fail with 409, and the reconcile is simply repeated.
* Versions only move forward: a late watch event for an older version does not replace a newer copy.
* An object missing from a *complete* type (listed, then watched) does not exist; missing from a type
  fed by events only (the informers'), it is read from the API.

Copies go out deep-copied: reconcilers change the dicts they are given. ``managedFields`` are dropped on
the way in — nothing reads them and they are the bulk of an object. Each object is held as its compact JSON
text (UTF-8 bytes, with its resourceVersion beside it), not as dicts: a copy is made on every read anyway, and
decoding it (:mod:`~opbroker.kubeclient.jsontext`: orjson) is faster than copying dicts was, while the text
takes a fraction of their memory (a controller over 15 000 settled objects holds some 60 000 of them, most of
them Secrets).

Some types are held by *metadata only* (Secrets: see ``SourceWatchers``): their watch delivers no bodies, and
the store knows of each object only that it exists and its resourceVersion — enough to answer
``version_of`` (a bound binding's restart check) and "absent means absent", but ``lookup`` answers
``UNKNOWN`` until a body is read from the API (``fill``) or written by the controller (``put``). A body is
held while its version is the newest the watch reported; when the object moves on, only the new version is
kept and the next read goes to the API again. So the bodies held are those the controller read or wrote,
never those of the cluster's other Secrets.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from opbroker.controller.runtime.objects import resource_version
from opbroker.kubeclient import jsontext
from opbroker.kubeclient.wire import JsonObject, mapping_of

TypeKey = tuple[str, str]  # apiVersion, kind name (or plural, for our own kinds read by plural)
StoreKey = tuple[str, str, str, str]  # apiVersion, kind name or plural, namespace, name

#: ``lookup`` answers: the store does not know (read from the API), or the object is known not to exist.
UNKNOWN = object()

#: resourceVersion, and the object as compact JSON bytes (without managedFields) or None: held by metadata only.
Held = tuple[str | None, bytes | None]
#: Whether a type's watch follows an object with these labels (``ObjectStore.cover``).
Covers = Callable[[Mapping[str, object]], bool]


@dataclass(frozen=True)
class Census:
    """What the store holds of one type: objects known, bodies held, and the bodies' size in bytes (of their
    JSON text; the process's memory for them is a small multiple). The controller's metrics report it."""

    objects: int = 0
    bodies: int = 0
    body_bytes: int = 0


class ObjectStore:
    """Latest known versions of watched objects. Thread-safe: watches, the informers and workers share it.

    ``namespace_bytes``: the most body bytes held for one namespace (None: no bound) — a tenant is admin of its
    namespace and may fill it with objects of every watched kind up to the API server's size of each, and what
    the store holds is the controller's memory. A body past the budget is not held: the object is known by its
    version only (reads go to the API server, as for a metadata-only type) and its namespace is *over budget*
    (:meth:`over_budget`) while its objects want more than the budget; the controller then starts no new
    operation there (``controller.budgets``). Namespaces in ``exempt`` (the control plane's, where the catalog and
    the registries live) and cluster-scoped objects are not bounded: only the platform writes there.
    """

    def __init__(self, *, namespace_bytes: int | None = None, exempt: Collection[str] = ()) -> None:
        self._lock = threading.Lock()
        self._objects: dict[StoreKey, Held] = {}
        self._fed: set[TypeKey] = set()
        self._complete: set[TypeKey] = set()
        self._listed: set[TypeKey] = set()
        """Types listed whole by their watch, complete or not (a shard's: ``followed`` reads may trust absence)."""
        # The census, kept as objects come and go: a scrape reads it without walking (and locking) the store —
        # walking 60 000 objects under the lock at each scrape held up every reconcile's read meanwhile.
        self._counts: dict[TypeKey, list[int]] = {}
        self._namespace_bytes = namespace_bytes
        self._exempt = frozenset(exempt) | {""}
        self._held_bytes: dict[str, int] = {}
        """Body bytes held per bounded namespace (no entry: none)."""
        self._refused: dict[StoreKey, int] = {}
        """Bodies not held for their namespace's budget: their size (the key is held by version only)."""
        self._refused_bytes: dict[str, int] = {}
        self._covers: dict[TypeKey, Covers] = {}
        """Types whose watch follows part of them (a shard's, by label selector): which objects it follows."""

    def _hold(self, key: StoreKey, held: Held) -> None:
        """Hold ``held`` at ``key`` (under the lock), keeping the census and the namespace's budget."""
        self._release(key)
        held = self._within_budget(key, held)
        self._objects[key] = held
        counts = self._counts.setdefault(key[:2], [0, 0, 0])
        counts[0] += 1
        if held[1] is not None:
            counts[1] += 1
            counts[2] += len(held[1])
            if key[2] not in self._exempt:
                self._held_bytes[key[2]] = self._held_bytes.get(key[2], 0) + len(held[1])

    def _within_budget(self, key: StoreKey, held: Held) -> Held:
        """``held``, or its version alone when its body would take its namespace past the budget (recorded)."""
        namespace, body = key[2], held[1]
        if body is None or self._namespace_bytes is None or namespace in self._exempt:
            return held
        if self._held_bytes.get(namespace, 0) + len(body) <= self._namespace_bytes:
            return held
        self._refused[key] = len(body)
        self._refused_bytes[namespace] = self._refused_bytes.get(namespace, 0) + len(body)
        return held[0], None

    def _release(self, key: StoreKey) -> None:
        """Hold nothing at ``key`` (under the lock), keeping the census and the namespace's budget."""
        refused = self._refused.pop(key, None)
        if refused is not None:
            _less(self._refused_bytes, key[2], refused)
        held = self._objects.pop(key, None)
        if held is None:
            return
        counts = self._counts[key[:2]]
        counts[0] -= 1
        if held[1] is not None:
            counts[1] -= 1
            counts[2] -= len(held[1])
            if key[2] not in self._exempt:
                _less(self._held_bytes, key[2], len(held[1]))
        if not counts[0]:
            del self._counts[key[:2]]

    # -- feeding -------------------------------------------------------------------------------------

    def cover(self, type_key: TypeKey, covers: Covers) -> None:
        """``type_key``'s watch follows only the objects whose labels ``covers`` accepts (a shard's source watch,
        issue 46): no other copy is held, even one a write answered — nothing would keep it current (an object
        relabelled for another shard leaves the watch with a DELETED event, and a later answer must not bring its
        copy back)."""
        with self._lock:
            self._covers[type_key] = covers

    def feed(self, type_key: TypeKey) -> None:
        """Declare that a watch keeps ``type_key`` up to date from now on (events, no initial list)."""
        with self._lock:
            self._fed.add(type_key)

    def replace(self, type_key: TypeKey, objects: Iterable[JsonObject], *, bodies: bool = True) -> None:
        """A full listing of ``type_key``: from now on it is complete (absent means absent). ``bodies``
        False: a listing of metadata only; a body held of the very version listed is kept."""
        if bodies:
            fresh = {_key(type_key, obj): _slim(obj) for obj in objects}
        else:
            fresh = {_key(type_key, obj): (resource_version(obj), None) for obj in objects}
        with self._lock:
            for key in [key for key in self._objects if key[:2] == type_key]:
                held = self._objects[key]
                self._release(key)
                listed = fresh.get(key)
                if listed is not None and listed[1] is None and held[1] is not None and held[0] == listed[0]:
                    fresh[key] = held
            for key, held in fresh.items():
                self._hold(key, held)
            self._fed.add(type_key)
            self._complete.add(type_key)

    def hold_page(self, type_key: TypeKey, objects: Iterable[JsonObject], *, bodies: bool = True) -> None:
        """One page of a listing of ``type_key`` that arrives page by page: each object held (a newer copy held
        stays), and the type fed from now on — complete only once :meth:`complete` is told the whole listing,
        so until then an object not held yet is read from the API rather than taken for absent. Each object goes
        through :meth:`put`: a relisting's object already held at its version is not serialised again.
        ``bodies`` False: a page of metadata only, each object taken as
        :meth:`note` takes it (a body held of its version stays)."""
        self.feed(type_key)
        for obj in objects:
            if bodies:
                self.put(type_key, obj)
            else:
                self.note(type_key, obj)

    def complete(self, type_key: TypeKey, listed: Collection[tuple[str, str]], *, whole: bool = True) -> None:
        """The listing whose pages :meth:`hold_page` held is whole: ``listed`` names (namespace, name) every
        object in it. What is held of the type beyond it is gone; from now on absent means absent — unless the
        listing was not of the ``whole`` type (a shard's, by label selector): then an object not held is still
        read from the API."""
        with self._lock:
            for key in [key for key in self._objects if key[:2] == type_key and key[2:] not in listed]:
                self._release(key)
            self._fed.add(type_key)
            self._listed.add(type_key)
            if whole:
                self._complete.add(type_key)

    def forget_type(self, type_key: TypeKey) -> None:
        """The watch of ``type_key`` broke off: serve nothing of it until it is listed or fed again."""
        with self._lock:
            self._fed.discard(type_key)
            self._complete.discard(type_key)
            self._listed.discard(type_key)
            for key in [key for key in self._objects if key[:2] == type_key]:
                self._release(key)

    def put(self, type_key: TypeKey, obj: JsonObject) -> None:
        """Keep ``obj`` unless the copy held is newer (or the type is not fed: nothing keeps it fresh)."""
        key = _key(type_key, obj)
        version = resource_version(obj)
        with self._lock:
            if type_key not in self._fed:
                return
            held = self._objects.get(key)
            covers = self._covers.get(type_key)
            if covers is not None and not covers(mapping_of(mapping_of(obj.get("metadata")).get("labels"))):
                if held is not None and not _newer(held[0], version):
                    self._release(key)  # no longer followed: read from the API from now on
                return
            if held is not None and (
                _newer(held[0], version) or (version is not None and held[0] == version and held[1] is not None)
            ):
                return  # newer, or this very version (its watch event after our write's answer, or a listed page)
        slim = _slim(obj)  # serialised outside the lock; the check is made again under it
        with self._lock:
            if type_key not in self._fed:
                return
            held = self._objects.get(key)
            if held is not None and _newer(held[0], slim[0]):
                return
            self._hold(key, slim)

    def note(self, type_key: TypeKey, obj: JsonObject) -> None:
        """A metadata-only event: ``obj`` exists at its version. A body held of that version stays; an older
        one goes (the next read fetches the object); a newer copy is kept as it is."""
        key = _key(type_key, obj)
        version = resource_version(obj)
        with self._lock:
            if type_key not in self._fed:
                return
            held = self._objects.get(key)
            if held is not None and (held[0] == version or _newer(held[0], version)):
                return
            self._hold(key, (version, None))

    def fill(self, type_key: TypeKey, obj: JsonObject) -> None:
        """A body read from the API for an object held by metadata only: kept unless the version held is
        newer. Never adds an object the store does not hold (it may have been deleted since the read)."""
        key = _key(type_key, obj)
        slim = _slim(obj)
        with self._lock:
            held = self._objects.get(key)
            if type_key not in self._fed or held is None or held[1] is not None or _newer(held[0], slim[0]):
                return
            self._hold(key, slim)

    def remove(self, type_key: TypeKey, obj: JsonObject) -> None:
        """``obj`` was deleted; a copy newer than the deletion (a new object of the same name) stays."""
        key = _key(type_key, obj)
        with self._lock:
            held = self._objects.get(key)
            if held is not None and not _newer(held[0], resource_version(obj)):
                self._release(key)

    def stale(self, type_key: TypeKey, namespace: str | None, name: str) -> None:
        """A guarded write found the copy held behind (409): serve it no longer — the next read goes to the API.
        The object exists, so a complete type must not answer "absent" meanwhile (``discard`` would: a reconcile
        retried after a conflict then found its object gone and stopped, for good); its version stays known."""
        key = (*type_key, namespace or "", name)
        with self._lock:
            if type_key not in self._fed:
                return
            held = self._objects.get(key)
            self._hold(key, (held[0] if held is not None else None, None))

    def discard(self, type_key: TypeKey, namespace: str | None, name: str) -> None:
        """The API answered 404 for this object: whatever copy is held is of an object that is gone."""
        with self._lock:
            self._release((*type_key, namespace or "", name))

    # -- reading -------------------------------------------------------------------------------------

    def lookup(self, type_key: TypeKey, namespace: str | None, name: str, *, followed: bool = False) -> Any:
        """A deep copy of the object, None if it is known not to exist, or ``UNKNOWN``. ``followed``: the caller
        knows the object, if it exists, is one the type's watch follows (``cover``) — then a listed type's absence
        is the object's, complete or not."""
        held = self._held(type_key, namespace, name, followed=followed)
        if not isinstance(held, tuple):
            return held
        return UNKNOWN if held[1] is None else jsontext.loads(held[1])

    def version_of(self, type_key: TypeKey, namespace: str | None, name: str) -> Any:
        """The object's resourceVersion (no copy made), None if it is known not to exist, or ``UNKNOWN``."""
        held = self._held(type_key, namespace, name)
        return (held[0] or "") if isinstance(held, tuple) else held

    def _held(self, type_key: TypeKey, namespace: str | None, name: str, *, followed: bool = False) -> Any:
        """The held ``(resourceVersion, JSON text)``, None if the object is known not to exist, or ``UNKNOWN``."""
        key = (*type_key, namespace or "", name)
        with self._lock:
            if type_key not in self._fed:
                return UNKNOWN
            held = self._objects.get(key)
            if held is None:
                known = type_key in self._complete or (followed and type_key in self._listed)
                return None if known else UNKNOWN
            return held

    def __len__(self) -> int:
        with self._lock:
            return len(self._objects)

    def over_budget(self, namespace: str) -> bool:
        """Whether ``namespace``'s objects want more body bytes than its budget: some are not held for it, and
        those held and not held together are past it (once objects go, the rest may fit again)."""
        with self._lock:
            refused = self._refused_bytes.get(namespace, 0)
            wanted = self._held_bytes.get(namespace, 0) + refused
            return bool(refused) and self._namespace_bytes is not None and wanted > self._namespace_bytes

    def namespace_bytes(self, namespace: str) -> tuple[int, int]:
        """Body bytes of ``namespace`` held, and not held for its budget."""
        with self._lock:
            return self._held_bytes.get(namespace, 0), self._refused_bytes.get(namespace, 0)

    def census(self) -> dict[TypeKey, Census]:
        """Per type: objects known, bodies held and their bytes (kept as they change: no pass over the store)."""
        with self._lock:
            return {type_key: Census(*found) for type_key, found in self._counts.items()}

    def counted(self) -> dict[TypeKey, Census]:
        """The census counted afresh, one pass over the store (what :meth:`census` keeps; for tests)."""
        counts: dict[TypeKey, list[int]] = {}
        with self._lock:
            for key, (_, text) in self._objects.items():
                found = counts.setdefault(key[:2], [0, 0, 0])
                found[0] += 1
                if text is not None:
                    found[1] += 1
                    found[2] += len(text)
        return {type_key: Census(*found) for type_key, found in counts.items()}


def _less(counts: dict[str, int], namespace: str, amount: int) -> None:
    """Take ``amount`` from ``namespace``'s count, dropping it at zero (no entry per namespace ever seen)."""
    left = counts.get(namespace, 0) - amount
    if left > 0:
        counts[namespace] = left
    else:
        counts.pop(namespace, None)


def _key(type_key: TypeKey, obj: JsonObject) -> StoreKey:
    """The object's key; its namespace interned (thousands of keys share a few namespaces, and each parsed
    object brings its own copy of the name)."""
    meta = mapping_of(obj.get("metadata"))
    namespace, name = meta.get("namespace"), meta.get("name")
    namespace = sys.intern(namespace) if isinstance(namespace, str) else ""
    return (*type_key, namespace, name if isinstance(name, str) else "")


def _slim(obj: JsonObject) -> Held:
    """What is held of ``obj``: its resourceVersion and its JSON text without managedFields (callers go on
    using, and changing, what they passed: the text is a copy)."""
    meta = mapping_of(obj.get("metadata"))
    if "managedFields" in meta:
        obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    return resource_version(obj), jsontext.dumps(obj)


def _newer(mine: str | None, theirs: str | None) -> bool:
    """True if the version held (``mine``) is strictly newer than ``theirs``.

    resourceVersions are opaque to clients in general, but every kube-apiserver backed by etcd hands out
    etcd revisions: integers that grow with every write. When either is not an integer the incoming
    object wins, as it would in an informer.
    """
    if not (mine is not None and theirs is not None and mine.isdigit() and theirs.isdigit()):
        return False
    return int(mine) > int(theirs)
