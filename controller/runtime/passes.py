"""The multi-pass reconcile shared by the kinds whose plans may say :class:`~.core.actions.Continue`.

A plan that has just written the finalizer, or applied the objects whose outcome the status template will read,
asks for another look within the same reconcile rather than recursing: each pass reads the object afresh (the
store holds our own write by then), asks where the object is reconciled (multi-cluster placement, on the object
as read, before anything is rendered for it), gathers what the next step needs and acts. At most
:data:`~.executor.MAX_PASSES` passes; then the executor's :data:`~.executor.AGAIN` requeues the key at once.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Generic, TypeVar

from opbroker.controller.core import actions as a
from opbroker.controller.runtime.executor import AGAIN, MAX_PASSES
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.kinds import ObservePlanAct
from opbroker.controller.runtime.outcomes import DONE, Outcome
from opbroker.controller.runtime.showing import ShowsFailuresOnObject

FactsT = TypeVar("FactsT")


class PassingReconciler(ShowsFailuresOnObject, ObservePlanAct[FactsT, a.Action], Generic[FactsT]):
    """Observe (``read`` then ``gather``), plan, act — again while the plan says Continue, up to MAX_PASSES."""

    def reconcile(self, key: Key) -> Outcome:
        outcome, previous = DONE, None
        for _ in range(MAX_PASSES):
            read = self.read(key)
            if read is None:
                return DONE
            placed = self.placed(read)
            if placed is not None:
                return placed
            facts = self.gather(read, previous)
            outcome, previous = self.act(facts, self.plan(facts)), facts
            if outcome != AGAIN:
                return outcome
        return outcome

    def observe(self, key: Key) -> FactsT | None:
        read = self.read(key)
        return None if read is None else self.gather(read, None)

    @abstractmethod
    def read(self, key: Key) -> FactsT | None:
        """The facts every pass starts from (the object and what is cheap to know about it); None: it is gone."""

    @abstractmethod
    def placed(self, facts: FactsT) -> Outcome | None:
        """None when the object is reconciled here; else the outcome of placing it (multi-cluster)."""

    @abstractmethod
    def gather(self, facts: FactsT, previous: FactsT | None) -> FactsT:
        """Complete ``facts`` with what the next step needs (renders, the status verdict), reusing ``previous``'s
        work of this reconcile where it still holds."""
