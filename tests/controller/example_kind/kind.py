"""File 3 of 4 — observe and act, and the one registration: the example kind on the controller's runtime.

``observe`` reads the object into facts (None: it is gone); ``plan`` is the pure one of :mod:`.plan`; ``act`` hands
the actions to the kind-neutral executor, with its finalizer's row (:data:`HELD`: its owner, this reconciler).
:func:`register` is all a kind adds to a runtime: its reconciler, and the watch whose handler turns an event into the
key it concerns (the informers run it with every other watch).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from opbroker.api.conventions import FINALIZER
from opbroker.controller.core import finalizers
from opbroker.controller.runtime.executor import Executor, Target
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.kinds import ObservePlanAct
from opbroker.controller.runtime.kube import Kube
from opbroker.controller.runtime.outcomes import Outcome
from opbroker.controller.runtime.runner import Runtime
from opbroker.controller.runtime.watches import Watch
from tests.controller.example_kind import plan as greeting_plan
from tests.controller.example_kind.view import GREETINGS, GreetingView

HELD = finalizers.Held(FINALIZER, GREETINGS.group, GREETINGS.plural, "greeting", "it says goodbye first")
"""Its finalizer's row: this reconciler is its one owner (a kind of the controller's adds its row to
``finalizers.OWNERS``; one defined outside, as this one, to a copy for its executor)."""


class GreetingReconciler(ObservePlanAct[greeting_plan.GreetingFacts, Any]):
    kind: ClassVar[str] = "greeting"

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.executor = Executor(Target(kube, GREETINGS, self.kind, owners=finalizers.OWNERS.adding(HELD)))

    def observe(self, key: Key) -> greeting_plan.GreetingFacts | None:
        body = self.kube.get_custom(GREETINGS, key.namespace, key.name)
        return None if body is None else greeting_plan.GreetingFacts(key, GreetingView.of(body))

    plan = staticmethod(greeting_plan.plan)

    def act(self, facts: greeting_plan.GreetingFacts, actions: Sequence[Any]) -> Outcome:
        return self.executor.run(facts.key, facts.greeting.wire, actions)


def register(runtime: Runtime, kube: Kube, enqueue: Callable[[Key], None]) -> list[Watch]:
    """Register the kind's reconciler; its watches, for the informers."""
    runtime.register(GreetingReconciler(kube))

    def on_greeting(_event_type: str, body: dict[str, Any]) -> None:
        meta = body.get("metadata") or {}
        enqueue(Key(GreetingReconciler.kind, meta.get("namespace") or "", meta.get("name") or ""))

    return [Watch.of(GREETINGS, on_greeting, id="greetings")]
