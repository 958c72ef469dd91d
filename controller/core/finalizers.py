"""Finalizer writes that cannot lose another controller's finalizer.

A merge patch of ``metadata.finalizers`` replaces the whole list. Written from a stale read, it drops a finalizer
another controller added meanwhile (or puts back one it removed). So every finalizer write here carries the
``resourceVersion`` the list was read at: the API server refuses it with 409 when the object moved on, and the
reconcile runs again on a fresh read (the runtime's conflict handling). Pure: patches are values.
"""

from __future__ import annotations

from collections.abc import Sequence

from opbroker.kubeclient.wire import JsonBody, JsonObject, strings_of


def adding(metadata: JsonObject, finalizer: str) -> JsonBody | None:
    """The guarded patch that adds ``finalizer`` to the list read in ``metadata``; None if it is there."""
    present = strings_of(metadata.get("finalizers"))
    if finalizer in present:
        return None
    return replacing(metadata, [*present, finalizer])


def removing(metadata: JsonObject, finalizer: str) -> JsonBody | None:
    """The guarded patch that removes ``finalizer`` from the list read in ``metadata``; None if it is absent."""
    present = strings_of(metadata.get("finalizers"))
    if finalizer not in present:
        return None
    return replacing(metadata, [f for f in present if f != finalizer])


def replacing(metadata: JsonObject, finalizers: Sequence[str]) -> JsonBody:
    """The guarded patch that makes the list read in ``metadata`` ``finalizers`` (an empty list removes it)."""
    version = metadata.get("resourceVersion")
    if not version:
        raise ValueError("a finalizer write needs the resourceVersion the list was read at")
    return {"metadata": {"finalizers": list(finalizers) or None, "resourceVersion": version}}
