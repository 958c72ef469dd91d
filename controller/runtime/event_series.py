"""Repeated Events aggregated into one with a count, as client-go's ``EventCorrelator`` does (issue 47).

A failure retried with backoff says the same thing each time (a plan that keeps failing to apply wrote 7
``ApplyFailed`` Events in 13 s): each repeat was a new Event, so ``kubectl describe`` listed the same line seven
times and the namespace's Event budget went to it. Now an Event the same as one this controller recorded — the
same involved object (its uid too: a new object of the same name is another), type, reason, message and source —
updates that Event instead: its ``count`` (core/v1, what ``kubectl describe`` shows as ``x7 over 13s``) and its
``lastTimestamp``, one PATCH in place of the POST. An Event nothing repeats costs the one POST it always cost.

The memory is bounded: the most recently recorded Events only, at most :data:`MAX_ENTRIES` of them and
:data:`MAX_BYTES` of keys (the least recently recorded go first; one forgotten is recorded anew, count 1). An Event
the API server no longer has (an Event lives an hour) is recorded anew too (the door sees 404 on the PATCH).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from opbroker.kubeclient.wire import JsonObject, mapping_of

MAX_ENTRIES = 4096
"""Events remembered at most (client-go's ``maxLruCacheEntries``)."""
MAX_BYTES = 4 * 1024 * 1024
"""... and bytes of their keys at most (a message is up to 1 KiB: 4096 of them fit)."""
ENTRY_OVERHEAD = 200
"""Bytes counted per entry besides its strings (the tuple, the record, the dict's slot)."""

Key = tuple[str, ...]


@dataclass(frozen=True)
class Recorded:
    """One Event as recorded: where it is, and how many times it was said."""

    namespace: str
    name: str
    count: int


def key_of(event: JsonObject) -> Key:
    """What makes two Events the same (client-go's ``getEventKey``, less the timestamps)."""
    involved = mapping_of(event.get("involvedObject"))
    source = mapping_of(event.get("source"))
    return (
        str(mapping_of(event.get("metadata")).get("namespace") or ""),
        str(involved.get("apiVersion") or ""),
        str(involved.get("kind") or ""),
        str(involved.get("namespace") or ""),
        str(involved.get("name") or ""),
        str(involved.get("uid") or ""),
        str(event.get("type") or ""),
        str(event.get("reason") or ""),
        str(event.get("message") or ""),
        str(source.get("component") or ""),
    )


def _size(key: Key, recorded: Recorded) -> int:
    return sum(len(part) for part in key) + len(recorded.name) + len(recorded.namespace) + ENTRY_OVERHEAD


class EventSeries:
    """The Events recorded lately, least recently recorded first (thread-safe: every worker records through it)."""

    def __init__(self, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._held: OrderedDict[Key, Recorded] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._held)

    @property
    def bytes(self) -> int:
        return self._bytes

    def get(self, key: Key) -> Recorded | None:
        with self._lock:
            return self._held.get(key)

    def put(self, key: Key, recorded: Recorded) -> None:
        """Remember ``recorded`` under ``key`` as the most recent, forgetting the least recent past the bounds."""
        with self._lock:
            previous = self._held.pop(key, None)
            if previous is not None:
                self._bytes -= _size(key, previous)
            self._held[key] = recorded
            self._bytes += _size(key, recorded)
            while self._held and (len(self._held) > self.max_entries or self._bytes > self.max_bytes):
                dropped_key, dropped = self._held.popitem(last=False)
                self._bytes -= _size(dropped_key, dropped)

    def forget(self, key: Key) -> None:
        with self._lock:
            previous = self._held.pop(key, None)
            if previous is not None:
                self._bytes -= _size(key, previous)
