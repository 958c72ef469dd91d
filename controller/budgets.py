"""The counts the per-namespace budgets decide on (``core.budgets``): operations in progress, from the watches.

Which instances and bindings have an operation in progress is a fact the controller writes (their ``status``,
which only opbroker's accounts may write: ``api.admission``), so the watch events of SFServiceInstances and
SFServiceBindings keep the count, and a reconcile that moves an object to ``in progress`` notes it at once (its
own watch event comes a moment later; meanwhile another reconcile in the namespace would count one too few). The
cached bytes are the store's (:meth:`~opbroker.controller.runtime.store.ObjectStore.over_budget`).

Memory is bounded by the objects watched: one set entry per object in progress, none for a quiet namespace.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from opbroker.api.osb import OperationState
from opbroker.controller.core import actions as a
from opbroker.controller.core.budgets import NamespaceBudgets, NamespaceUsage, refusal
from opbroker.controller.runtime.concurrency import Lock
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.store import ObjectStore

#: Budgets that refuse nothing: the default of a controller built without settings (unit tests).
UNBOUNDED = NamespaceBudgets(operations=0, cached_bytes=0)


class Budgeting:
    """Operations in progress per namespace, and the budget decision for one object. Thread-safe: the watch
    dispatcher observes, workers ask."""

    def __init__(
        self, budgets: NamespaceBudgets = UNBOUNDED, *, store: ObjectStore | None = None, exempt: Collection[str] = ()
    ) -> None:
        self.budgets = budgets
        self._store = store
        self._exempt = frozenset(exempt)
        self._lock = Lock()
        self._in_progress: dict[str, set[tuple[str, str]]] = {}

    def observe(self, key: Key, state: str | None) -> None:
        """``key``'s object is now in ``state`` (None: it is gone)."""
        member = (key.kind, key.name)
        with self._lock:
            running = self._in_progress.get(key.namespace)
            if state == OperationState.IN_PROGRESS.value:
                self._in_progress.setdefault(key.namespace, set()).add(member)
            elif running is not None:
                running.discard(member)
                if not running:
                    del self._in_progress[key.namespace]

    def note(self, key: Key, actions: Sequence[object]) -> None:
        """Count at once an ``in progress`` a reconcile is about to write for ``key`` (its watch event comes later;
        a write that fails is corrected by the object's next event)."""
        for action in actions:
            if isinstance(action, a.WriteStatus) and action.patch.get("state") == OperationState.IN_PROGRESS.value:
                self.observe(key, OperationState.IN_PROGRESS.value)

    def in_progress(self, namespace: str) -> int:
        with self._lock:
            return len(self._in_progress.get(namespace, ()))

    def refusal(self, key: Key) -> str | None:
        """Why ``key``'s object may not start a new operation now (None: it may, or its namespace is exempt)."""
        if key.namespace in self._exempt:
            return None
        with self._lock:
            running = self._in_progress.get(key.namespace, set())
            others = len(running) - ((key.kind, key.name) in running)
        over_cache = self._store is not None and self._store.over_budget(key.namespace)
        return refusal(NamespaceUsage(key.namespace, others, over_cache), self.budgets)
