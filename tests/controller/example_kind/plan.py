"""File 2 of 4 — the facts and the pure plan: every decision of the example kind, table-tested without a cluster.

The plan returns actions of the one vocabulary (``controller/core/actions.py``); the executor performs them. A
``Greeting`` holds opbroker's finalizer while it lives (the shape every kind with something to let go of follows),
says its greeting in status, and lets go once it is being deleted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from opbroker.api.conventions import FINALIZER
from opbroker.controller.core import actions as a
from opbroker.controller.runtime.keys import Key
from tests.controller.example_kind.view import GreetingView


@dataclass(frozen=True)
class GreetingFacts:
    key: Key
    greeting: GreetingView


def greeting_for(name: str | None) -> str:
    return f"Hello, {name}!" if name else "Hello, nobody!"


def plan(facts: GreetingFacts) -> list[Any]:
    view = facts.greeting
    held = FINALIZER in view.meta.finalizers
    if view.meta.deleting:
        return [a.EnsureFinalizer(present=False)] if held else []
    if not held:
        return [a.EnsureFinalizer(), a.Continue()]
    wanted = greeting_for(view.name)
    if view.greeting == wanted and view.observed_generation == view.meta.generation:
        return []
    status = {"greeting": wanted, "observedGeneration": view.meta.generation}
    return [a.WriteStatus(patch=status, event=a.Event("Greeted", wanted))]
