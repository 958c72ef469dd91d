"""The generic executor: one kind's finalizer (the table's), its own effects, and an action no effect performs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from opbroker.api.conventions import FINALIZER
from opbroker.controller.core import actions as a
from opbroker.controller.kinds import INSTANCES
from opbroker.controller.runtime.executor import AGAIN, Executor, OwnWrites, Run, Target
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.outcomes import DONE
from tests.controller.test_instance_plan import NS, body
from tests.fake_kube import FakeKube

KEY = Key("instance", NS, "db")


@dataclass(frozen=True)
class Ping:
    """An action of a kind's own."""

    text: str


def created(kube: FakeKube) -> dict[str, Any]:
    made = kube.create({**body(state="in_queue", finalizer=False), "status": None})
    assert made is not None
    kube.calls.clear()
    return made


def test_the_table_names_the_finalizer_and_an_effect_performs_the_kinds_own_action() -> None:
    kube = FakeKube()
    seen: list[tuple[str, str | None]] = []

    def ping(run: Run, action: Ping) -> None:
        seen.append((action.text, run.body["metadata"].get("resourceVersion")))
        run.perform(a.Continue())

    target = Target(kube, INSTANCES, "instance", own_writes=OwnWrites())  # type: ignore[arg-type]
    live = created(kube)
    outcome = Executor(target, {Ping: ping}).run(KEY, live, [a.EnsureFinalizer(), Ping("after")])
    stored = kube.custom_object(INSTANCES, NS, "db")
    assert stored is not None and stored["metadata"]["finalizers"] == [FINALIZER]
    # the effect saw the object as the finalizer write returned it, and its Continue counted
    assert seen == [("after", stored["metadata"]["resourceVersion"])] and outcome == AGAIN


def test_a_settled_status_forgets_what_the_object_followed() -> None:
    kube = FakeKube()
    forgotten: list[Key] = []
    target = Target(kube, INSTANCES, "instance", forget=forgotten.append)  # type: ignore[arg-type]
    assert Executor(target).run(KEY, created(kube), [a.WriteStatus({"state": "succeeded"}, settled=True)]) == DONE
    assert forgotten == [KEY]


def test_an_action_no_effect_performs_is_an_error_not_silence() -> None:
    kube = FakeKube()
    target = Target(kube, INSTANCES, "instance")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="no effect performs Ping"):
        Executor(target).run(KEY, created(kube), [Ping("lost")])
