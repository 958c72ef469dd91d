"""A key whose guarded writes keep losing is retried with a growing delay, not at 20 Hz for ever.

A conflict (HTTP 409) means the object changed between the read and the write: the reconcile runs again on a
fresh read, soon. But another writer rewriting the object in a loop would make that "soon" a busy loop; the
delay doubles with each conflict in a row, up to a cap, and starts again once a reconcile ends otherwise.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import pytest

from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.outcomes import DONE, Conflict, Outcome, TemporaryError
from opbroker.controller.runtime.policies import Policies
from opbroker.controller.runtime.runner import Runtime

#: The table's conflict policy, unjittered so the delays are exact (jitter: :func:`test_conflicts_are_jittered`).
EXACT = Policies().unjittered()
CONFLICT_RETRY_SECONDS = EXACT.conflicts.base
CONFLICT_RETRY_CAP_SECONDS = EXACT.conflicts.maximum

KEY = Key("scripted", "ns", "a")
OTHER = Key("scripted", "ns", "b")


class Scripted:
    """Answers each reconcile with the next of ``script``: an outcome, or an exception to raise."""

    kind: ClassVar[str] = "scripted"

    def __init__(self, script: list[Outcome | Exception]) -> None:
        self._script: Iterator[Outcome | Exception] = iter(script)
        self.rereads: list[Key] = []

    def reconcile(self, key: Key) -> Outcome:
        step = next(self._script)
        if isinstance(step, Exception):
            raise step
        return step

    def reread(self, key: Key) -> None:
        self.rereads.append(key)


def runtime_for(script: list[Outcome | Exception], policies: Policies = EXACT) -> tuple[Runtime, Scripted]:
    runtime = Runtime(workers=1, policies=policies)
    reconciler = Scripted(script)
    runtime.register(reconciler)
    return runtime, reconciler


def test_conflicts_in_a_row_double_the_delay_up_to_the_cap() -> None:
    runtime, reconciler = runtime_for([Conflict("409") for _ in range(12)])
    delays = [runtime.reconcile_now(KEY).requeue_after for _ in range(12)]
    assert delays[:4] == [CONFLICT_RETRY_SECONDS, 0.1, 0.2, 0.4]
    assert delays == sorted(delays) and delays[-1] == CONFLICT_RETRY_CAP_SECONDS
    assert reconciler.rereads == [KEY] * 12  # every retry reads the object afresh


def test_a_reconcile_that_ends_otherwise_starts_the_count_again() -> None:
    runtime, _ = runtime_for([Conflict("409"), Conflict("409"), Conflict("409"), DONE, Conflict("409")])
    assert [runtime.reconcile_now(KEY).requeue_after for _ in range(3)] == [0.05, 0.1, 0.2]
    assert runtime.reconcile_now(KEY) == DONE
    assert runtime.reconcile_now(KEY).requeue_after == CONFLICT_RETRY_SECONDS


def test_a_failure_also_ends_the_streak_and_keys_count_apart() -> None:
    runtime, _ = runtime_for([Conflict("409"), Conflict("409"), TemporaryError("down"), Conflict("409")])
    assert runtime.reconcile_now(KEY).requeue_after == 0.05
    assert runtime.reconcile_now(OTHER).requeue_after == 0.05  # another key's streak is its own
    with pytest.raises(TemporaryError):
        runtime.reconcile_now(KEY)
    assert runtime.reconcile_now(KEY).requeue_after == 0.05


def test_a_forgotten_key_starts_with_the_shortest_delay() -> None:
    runtime, _ = runtime_for([Conflict("409"), Conflict("409")])
    runtime.reconcile_now(KEY)
    runtime.forget(KEY)  # the object was deleted (and may come back under the same name)
    assert runtime.reconcile_now(KEY).requeue_after == CONFLICT_RETRY_SECONDS


def test_the_delay_is_bounded_for_any_streak() -> None:
    assert EXACT.delay(EXACT.conflicts, 1) == CONFLICT_RETRY_SECONDS
    assert EXACT.delay(EXACT.conflicts, 10**9) == CONFLICT_RETRY_CAP_SECONDS


def test_conflicts_are_jittered_within_the_policy_and_repeat_for_a_seed() -> None:
    """The default table jitters: two writers that conflicted together do not retry in step. Each delay lies
    within its exact value and the jitter's share below it; the same seed draws the same delays."""

    def delays(seed: int) -> list[float | None]:
        runtime, _ = runtime_for([Conflict("409") for _ in range(12)], Policies(seed=seed))
        return [runtime.reconcile_now(KEY).requeue_after for _ in range(12)]

    policy = Policies().conflicts
    first = delays(7)
    for streak, delay in enumerate(first, start=1):
        exact = policy.delay(streak)
        assert delay is not None and (1 - policy.jitter) * exact <= delay <= exact
    assert first == delays(7)
    assert first != delays(8)
