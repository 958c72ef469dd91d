"""The objects the controller's watches have delivered, kept in memory so reconciles need not GET them.

A reconcile used to read its instance, and each object its status template looks at, with a GET: about
six reads per instance, a third of everything the controller asked of the API server while provisioning.
Every one of those objects is watched anyway (kopf watches our kinds; ``SourceWatchers`` the operators'),
so the watches keep a copy here, as client-go's informers do, and reads are served from it.

Why it is safe to read from it:

* An object is only served for a *fed* type: one a watch keeps up to date. Anything else (a sister
  cluster's objects, a kind not watched yet) is read from the API as before.
* The copy is never older than the event that enqueued the reconcile: a watch stores the object before
  it enqueues its owner, and our own writes store the server's answer. A copy that is nevertheless behind
  makes the next guarded write fail with 409, and the reconcile is simply repeated.
* Versions only move forward: a late watch event for an older version does not replace a newer copy.
* An object missing from a *complete* type (listed, then watched) does not exist; missing from a type
  fed by events only (kopf's), it is read from the API.

Copies go out deep-copied: reconcilers change the dicts they are given. ``managedFields`` are dropped on
the way in — nothing reads them and they are the bulk of an object. Each object is held as its compact JSON
text (with its resourceVersion beside it), not as dicts: a copy is made on every read anyway, and
``json.loads`` makes it about as fast as copying dicts did, while the text takes a fraction of their memory
(a controller over 15 000 settled objects holds some 60 000 of them, most of them Secrets).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from typing import Any

from opbroker.controller.objects import resource_version

TypeKey = tuple[str, str]  # apiVersion, kind name (or plural, for our own kinds read by plural)
StoreKey = tuple[str, str, str, str]  # apiVersion, kind name or plural, namespace, name

#: ``lookup`` answers: the store does not know (read from the API), or the object is known not to exist.
UNKNOWN = object()

Held = tuple[str | None, str]  # resourceVersion, the object as compact JSON (without managedFields)


class ObjectStore:
    """Latest known versions of watched objects. Thread-safe: watches, kopf and workers share it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._objects: dict[StoreKey, Held] = {}
        self._fed: set[TypeKey] = set()
        self._complete: set[TypeKey] = set()

    # -- feeding -------------------------------------------------------------------------------------

    def feed(self, type_key: TypeKey) -> None:
        """Declare that a watch keeps ``type_key`` up to date from now on (events, no initial list)."""
        with self._lock:
            self._fed.add(type_key)

    def replace(self, type_key: TypeKey, objects: Iterable[dict[str, Any]]) -> None:
        """A full listing of ``type_key``: from now on it is complete (absent means absent)."""
        fresh = {_key(type_key, obj): _slim(obj) for obj in objects}
        with self._lock:
            for key in [key for key in self._objects if key[:2] == type_key]:
                del self._objects[key]
            self._objects.update(fresh)
            self._fed.add(type_key)
            self._complete.add(type_key)

    def forget_type(self, type_key: TypeKey) -> None:
        """The watch of ``type_key`` broke off: serve nothing of it until it is listed or fed again."""
        with self._lock:
            self._fed.discard(type_key)
            self._complete.discard(type_key)
            for key in [key for key in self._objects if key[:2] == type_key]:
                del self._objects[key]

    def put(self, type_key: TypeKey, obj: dict[str, Any]) -> None:
        """Keep ``obj`` unless the copy held is newer (or the type is not fed: nothing keeps it fresh)."""
        key = _key(type_key, obj)
        slim = _slim(obj)
        with self._lock:
            if type_key not in self._fed:
                return
            held = self._objects.get(key)
            if held is not None and _newer(held[0], slim[0]):
                return
            self._objects[key] = slim

    def remove(self, type_key: TypeKey, obj: dict[str, Any]) -> None:
        """``obj`` was deleted; a copy newer than the deletion (a new object of the same name) stays."""
        key = _key(type_key, obj)
        with self._lock:
            held = self._objects.get(key)
            if held is not None and not _newer(held[0], resource_version(obj)):
                del self._objects[key]

    def discard(self, type_key: TypeKey, namespace: str | None, name: str) -> None:
        """The API answered 404 for this object: whatever copy is held is of an object that is gone."""
        with self._lock:
            self._objects.pop((*type_key, namespace or "", name), None)

    # -- reading -------------------------------------------------------------------------------------

    def lookup(self, type_key: TypeKey, namespace: str | None, name: str) -> Any:
        """A deep copy of the object, None if it is known not to exist, or ``UNKNOWN``."""
        held = self._held(type_key, namespace, name)
        return json.loads(held[1]) if isinstance(held, tuple) else held

    def version_of(self, type_key: TypeKey, namespace: str | None, name: str) -> Any:
        """The object's resourceVersion (no copy made), None if it is known not to exist, or ``UNKNOWN``."""
        held = self._held(type_key, namespace, name)
        return (held[0] or "") if isinstance(held, tuple) else held

    def _held(self, type_key: TypeKey, namespace: str | None, name: str) -> Any:
        """The held ``(resourceVersion, JSON text)``, None if the object is known not to exist, or ``UNKNOWN``."""
        key = (*type_key, namespace or "", name)
        with self._lock:
            if type_key not in self._fed:
                return UNKNOWN
            held = self._objects.get(key)
            if held is None:
                return None if type_key in self._complete else UNKNOWN
            return held

    def __len__(self) -> int:
        with self._lock:
            return len(self._objects)


def _key(type_key: TypeKey, obj: dict[str, Any]) -> StoreKey:
    meta = obj.get("metadata") or {}
    return (*type_key, meta.get("namespace") or "", meta.get("name", ""))


def _slim(obj: dict[str, Any]) -> Held:
    """What is held of ``obj``: its resourceVersion and its JSON text without managedFields (callers go on
    using, and changing, what they passed: the text is a copy)."""
    meta = obj.get("metadata") or {}
    if "managedFields" in meta:
        obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    return resource_version(obj), json.dumps(obj, separators=(",", ":"), ensure_ascii=False, default=str)


def _newer(mine: str | None, theirs: str | None) -> bool:
    """True if the version held (``mine``) is strictly newer than ``theirs``.

    resourceVersions are opaque to clients in general, but every kube-apiserver backed by etcd hands out
    etcd revisions: integers that grow with every write. When either is not an integer the incoming
    object wins, as it would in an informer.
    """
    if not (mine is not None and theirs is not None and mine.isdigit() and theirs.isdigit()):
        return False
    return int(mine) > int(theirs)
