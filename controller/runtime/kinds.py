"""What a kind supplies to the runtime: observe → plan → act.

The shape Crossplane made standard, in three steps with one job each:

* ``observe(key)`` reads the facts — the object, what it refers to, what exists — into an immutable value, or
  None when the object is gone;
* ``plan(facts)`` is pure: it returns the actions the facts call for, and nothing else. All of a kind's
  decisions live here, so they are table-tested without a cluster;
* ``act(facts, actions)`` performs them through the controller's Kubernetes wrapper and says when to look
  again.

A reconcile is ``act(facts, plan(facts))``, and the runtime wraps it: one queue, one error table
(:mod:`.failures`), one backoff, one per-key memory cleared when the object goes.
"""

from __future__ import annotations

import datetime
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar, Generic, Protocol, TypeVar, runtime_checkable

from opbroker.controller.core.shown_failures import Shown
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.outcomes import DONE, Outcome

FactsT = TypeVar("FactsT")
ActionT = TypeVar("ActionT")


class Reconciler(Protocol):
    """What the runtime dispatches a key to (by ``key.kind``)."""

    kind: ClassVar[str]

    def reconcile(self, key: Key) -> Outcome: ...

    def reread(self, key: Key) -> None:
        """A write met a conflict: drop any cached copy of ``key`` so the next observe reads the API."""


@runtime_checkable
class ShowsFailures(Protocol):
    """A reconciler whose objects show the failures that stop them (``controller.runtime.showing``): the runtime calls
    :meth:`show_failure` when a reconcile of ``key`` fails (``before``: what it showed last, None at first; ``now``:
    its clock's, the moment a written condition moves at) and keeps what it returns; :meth:`clear_failure` with
    that once a reconcile of the key succeeds again."""

    def show_failure(self, key: Key, shown: Shown, before: object | None, now: datetime.datetime) -> object | None: ...

    def clear_failure(self, key: Key, shown: object) -> None: ...


class ObservePlanAct(ABC, Generic[FactsT, ActionT]):
    """Base of every kind's reconciler: ``reconcile`` is observe, then the pure plan, then act."""

    kind: ClassVar[str]

    def reconcile(self, key: Key) -> Outcome:
        facts = self.observe(key)
        if facts is None:
            return self.gone(key)
        return self.act(facts, self.plan(facts))

    @abstractmethod
    def observe(self, key: Key) -> FactsT | None: ...

    @staticmethod
    @abstractmethod
    def plan(facts: FactsT) -> Sequence[ActionT]: ...

    @abstractmethod
    def act(self, facts: FactsT, actions: Sequence[ActionT]) -> Outcome: ...

    def gone(self, key: Key) -> Outcome:
        """The object no longer exists (the runtime has already forgotten the key)."""
        return DONE

    def reread(self, key: Key) -> None:
        return None
