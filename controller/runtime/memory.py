"""Per-key memory: what the controller keeps about an object between reconciles, cleared in one place.

Reconcilers remember things about a key in memory — the resourceVersion of their own last write, the
fingerprint of the last event, an apply whose outcome is pending, a scheduled re-check. Each such store is a
:class:`PerKey` (or any object with ``forget(key)``) registered with :class:`Memories`; when an object goes,
the runtime calls :meth:`Memories.forget` once and every store drops the key. Before, each deletion had to
clear five caches by hand, and a new cache was easy to forget.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Generic, Protocol, TypeVar, cast

from opbroker.controller.runtime.keys import Key

V = TypeVar("V")


class Forgetful(Protocol):
    def forget(self, key: Key) -> object: ...


F = TypeVar("F", bound="Forgetful")


class PerKey(Generic[V]):
    """A thread-safe map from key to one remembered value."""

    def __init__(self) -> None:
        self._values: dict[Key, V] = {}
        self._lock = threading.Lock()

    def get(self, key: Key) -> V | None:
        with self._lock:
            return self._values.get(key)

    def put(self, key: Key, value: V) -> V | None:
        """Remember ``value``; returns what was remembered before."""
        with self._lock:
            previous = self._values.get(key)
            self._values[key] = value
            return previous

    def forget(self, key: Key) -> V | None:
        with self._lock:
            return self._values.pop(key, None)

    def __len__(self) -> int:
        return len(self._values)

    def items(self) -> list[tuple[Key, V]]:
        """A snapshot of every key and its value (taken under the lock; the values are the ones remembered)."""
        with self._lock:
            return list(self._values.items())


class Memories:
    """Every per-key store of a controller; :meth:`forget` clears a key from all of them."""

    def __init__(self) -> None:
        self._stores: list[Forgetful] = []

    def keep(self, store: F) -> F:
        """Register ``store`` (so it is cleared with every forgotten key) and return it."""
        self._stores.append(store)
        return store

    def forget(self, key: Key) -> None:
        for store in self._stores:
            store.forget(key)


OwnerT = TypeVar("OwnerT", bound=Hashable)


class Dependents(Generic[OwnerT]):
    """Which keys depend on an owner (a plan's instances, an instance's bindings): enqueued when it changes.

    A member has one owner at a time; :meth:`link` moves it. :meth:`forget` drops a key both as a member and
    as an owner, so the runtime's single forget keeps the relation clean.
    """

    def __init__(self) -> None:
        self._members: dict[OwnerT, set[Key]] = {}
        self._owner_of: dict[Key, OwnerT] = {}
        self._lock = threading.Lock()

    def link(self, owner: OwnerT, member: Key) -> None:
        with self._lock:
            previous = self._owner_of.get(member)
            if previous is not None and previous != owner:
                self._members.get(previous, set()).discard(member)
            self._owner_of[member] = owner
            self._members.setdefault(owner, set()).add(member)

    def of(self, owner: OwnerT) -> list[Key]:
        """The members of ``owner``, in a stable order."""
        with self._lock:
            return sorted(self._members.get(owner, ()), key=str)

    def forget(self, key: Key) -> None:
        with self._lock:
            owner = self._owner_of.pop(key, None)
            if owner is not None:
                self._members.get(owner, set()).discard(key)
            for member in self._members.pop(cast(OwnerT, key), set()):
                self._owner_of.pop(member, None)


class Readers(Generic[OwnerT]):
    """Which keys read an owner (the Secrets an Instance's ``parametersFrom`` names): enqueued when it changes.

    Unlike :class:`Dependents` a key reads any number of owners at once; :meth:`link` replaces the set a key
    reads. :meth:`forget` drops a key as a reader.
    """

    def __init__(self) -> None:
        self._readers: dict[OwnerT, set[Key]] = {}
        self._read_by: dict[Key, frozenset[OwnerT]] = {}
        self._lock = threading.Lock()

    def link(self, member: Key, owners: frozenset[OwnerT]) -> None:
        with self._lock:
            for owner in self._read_by.pop(member, frozenset()) - owners:
                readers = self._readers.get(owner)
                if readers is not None:
                    readers.discard(member)
                    if not readers:
                        del self._readers[owner]
            if owners:
                self._read_by[member] = owners
            for owner in owners:
                self._readers.setdefault(owner, set()).add(member)

    def of(self, owner: OwnerT) -> list[Key]:
        """The keys reading ``owner``, in a stable order."""
        with self._lock:
            return sorted(self._readers.get(owner, ()), key=str)

    def forget(self, key: Key) -> None:
        self.link(key, frozenset())
