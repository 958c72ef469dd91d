"""The multi-pass reconcile shared by the kinds whose plans may say :class:`~.core.actions.Continue`.

A plan that has just written the finalizer, or applied the objects whose outcome the status template will read,
asks for another look within the same reconcile rather than recursing: each pass reads the object afresh (the
store holds our own write by then) with where it is reconciled (multi-cluster placement's facts), gathers what the
next step needs (nothing when placement decides: the plans branch on it first) and acts. At most
:data:`~.executor.MAX_PASSES` passes; then the executor's :data:`~.executor.AGAIN` requeues the key at once.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Generic, TypeVar

from opbroker.controller.runtime.executor import AGAIN, MAX_PASSES
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.kinds import ObservePlanAct
from opbroker.controller.runtime.outcomes import DONE, Outcome
from opbroker.controller.runtime.showing import ShowsFailuresOnObject

FactsT = TypeVar("FactsT")
ActionT = TypeVar("ActionT")


class PassingReconciler(ShowsFailuresOnObject, ObservePlanAct[FactsT, ActionT], Generic[FactsT, ActionT]):
    """Observe (``read`` then ``gather``), plan, act — again while the plan says Continue, up to MAX_PASSES."""

    def reconcile(self, key: Key) -> Outcome:
        outcome, previous = DONE, None
        for _ in range(MAX_PASSES):
            read = self.read(key)
            if read is None:
                return DONE
            facts = self.gather(read, previous)
            outcome, previous = self.act(facts, self.plan(facts)), facts
            if outcome != AGAIN or self.decided_by_placement(facts):
                return outcome
        return outcome

    def observe(self, key: Key) -> FactsT | None:
        read = self.read(key)
        return None if read is None else self.gather(read, None)

    @abstractmethod
    def read(self, key: Key) -> FactsT | None:
        """The facts every pass starts from (the object and what is cheap to know about it); None: it is gone."""

    @staticmethod
    @abstractmethod
    def decided_by_placement(facts: FactsT) -> bool:
        """The plan's actions were multi-cluster placement's (its first branch): their outcome goes to the queue as
        it is, another pass never follows (a scheduling's look again at once is the queue's, as it always was)."""

    @abstractmethod
    def gather(self, facts: FactsT, previous: FactsT | None) -> FactsT:
        """Complete ``facts`` with what the next step needs (renders, the status verdict), reusing ``previous``'s
        work of this reconcile where it still holds."""
