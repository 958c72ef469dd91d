"""The runtime's re-check coalescing and conflict backoff, on a fake clock (no cluster, no sleeping).

A status poll asked for by every event would pile up timers: a reconcile's ``requeue_after`` is dropped when
an earlier re-check of the key is already due within it. Whether one is "already due" is a question of time,
answered by the runtime's clock — here a :class:`FakeClock` the test moves.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import ClassVar

from opbroker.controller.runtime.clock import FakeClock
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.outcomes import DONE, Conflict, Outcome, requeue
from opbroker.controller.runtime.policies import Policies
from opbroker.controller.runtime.runner import Runtime
from opbroker.osbclient import Backoff

KEY = Key("scripted", "ns", "a")
INF = float("inf")
TICK = 1 / 1024


class Scripted:
    """Answers each reconcile with the next of ``script`` (an outcome, or an exception to raise), noting when
    (on the clock) each ran."""

    kind: ClassVar[str] = "scripted"

    def __init__(self, clock: FakeClock, script: list[Outcome | Exception]) -> None:
        self._clock = clock
        self._script: Iterator[Outcome | Exception] = iter(script)
        self.ran_at: list[float] = []

    def reconcile(self, key: Key) -> Outcome:
        self.ran_at.append(self._clock.monotonic() - 1000.0)
        step = next(self._script)
        if isinstance(step, Exception):
            raise step
        return step

    def reread(self, key: Key) -> None:
        pass


def runtime_for(script: list[Outcome | Exception]) -> tuple[Runtime, Scripted, FakeClock]:
    clock = FakeClock()
    runtime = Runtime(workers=1, clock=clock)
    reconciler = Scripted(clock, script)
    runtime.register(reconciler)
    return runtime, reconciler, clock


def test_a_recheck_already_due_within_the_asked_delay_is_not_scheduled_twice() -> None:
    runtime, _, clock = runtime_for([requeue(10), requeue(10), requeue(10), requeue(2)])
    assert runtime.reconcile_now(KEY) == requeue(10)  # t=0: re-check at 10
    clock.advance(3)
    assert runtime.reconcile_now(KEY) == DONE  # t=3, an event: the re-check at 10 covers "in 10 s"
    clock.advance(7)
    assert runtime.reconcile_now(KEY) == requeue(10)  # t=10: the re-check itself runs, and asks for the next
    clock.advance(2)
    assert runtime.reconcile_now(KEY) == requeue(2)  # t=12: sooner than the one at 20, so it is kept


def test_a_recheck_that_came_late_does_not_swallow_the_next() -> None:
    runtime, _, clock = runtime_for([requeue(10), requeue(10)])
    runtime.reconcile_now(KEY)
    clock.advance(25)  # the re-check at 10 was lost (a restart of the queue); an event comes at 25
    assert runtime.reconcile_now(KEY) == requeue(10)


def test_the_queue_runs_conflicts_and_rechecks_on_the_runtime_clock() -> None:
    """End to end through the worker: three conflicts retried after 1/8, 1/4, 1/2 s (the conflict backoff),
    then a re-check 32 s later — each not a tick (1/1024 s) before its moment of the fake clock, and at it.
    (Binary fractions keep the fake clock's sums exact.)"""

    async def scenario() -> list[float]:
        clock = FakeClock()
        runtime = Runtime(
            workers=1,
            clock=clock,
            policies=Policies(conflicts=Backoff(base=0.125, maximum=1.0, max_duration=INF)).unjittered(),
        )
        reconciler = Scripted(clock, [Conflict("409"), Conflict("409"), Conflict("409"), requeue(32), DONE])
        runtime.register(reconciler)
        runtime.start()
        try:

            async def after(seconds: float, runs: int) -> None:
                clock.advance(seconds)
                # The reconcile runs in a worker thread: wait (on a real deadline) until it has run and its
                # outcome is back in the queue, i.e. nothing is running or ready: the rest waits on the clock.
                deadline = asyncio.get_running_loop().time() + 10
                for _ in range(5):  # the timer's turn, before looking
                    await asyncio.sleep(0)
                while len(reconciler.ran_at) < runs or not runtime_quiet(runtime):
                    assert asyncio.get_running_loop().time() < deadline, f"run {runs} did not come"
                    await asyncio.sleep(0.001)
                assert len(reconciler.ran_at) == runs, f"run {runs + 1} came early"

            runtime.enqueue(KEY)
            await after(0, 1)
            for runs, wait in enumerate((0.125, 0.25, 0.5, 32), start=2):
                await after(wait - TICK, runs - 1)
                await after(TICK, runs)
            return reconciler.ran_at
        finally:
            await runtime.stop()

    assert asyncio.run(scenario()) == [0.0, 0.125, 0.375, 0.875, 32.875]


def runtime_quiet(runtime: Runtime) -> bool:
    """No reconcile running and none ready: whatever is left waits for the clock."""
    queue = runtime.queue
    assert queue is not None
    return queue.in_flight == 0 and queue.ready == 0
