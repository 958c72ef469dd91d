"""The work queue: one reconcile per key at a time, collapsed events, backoff, delayed re-checks.

Time is a :class:`FakeClock` advanced by the test: nothing sleeps, and every delay is checked exactly (a retry
due after 0.5 s has not run at 0.499 s and has run at 0.5 s).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable

import pytest

from opbroker.controller.runtime.clock import FakeClock
from opbroker.controller.runtime.outcomes import DONE, Outcome
from opbroker.controller.runtime.policies import DEFAULTS
from opbroker.controller.runtime.queue import WorkQueue
from opbroker.osbclient import Backoff

#: How many times a test lets the event loop run before it calls the queue settled: every step of the queue
#: (timer → ready queue → worker → reconcile) is one or two turns of the loop; nothing here waits on I/O.
SETTLE_TURNS = 50


async def settle() -> None:
    """Let the queue's tasks run until they are all waiting (on the fake clock, a gate or an empty queue)."""
    for _ in range(SETTLE_TURNS):
        await asyncio.sleep(0)


def run(coro: Awaitable[None]) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


Scenario = Callable[[WorkQueue, FakeClock, list[tuple[Hashable, float]]], Awaitable[None]]


def with_queue(
    answers: Callable[[Hashable, int], Outcome], *, backoff: Backoff = DEFAULTS.retries, workers: int = 1
) -> Callable[[Scenario], None]:
    """Run a scenario against a started queue whose reconcile answers ``answers(key, call number)`` (an
    exception is raised) and logs ``(key, fake time)`` per call."""

    def runner(scenario: Scenario) -> None:
        async def main() -> None:
            clock = FakeClock()
            calls: list[tuple[Hashable, float]] = []

            async def reconcile(key: Hashable) -> Outcome:
                calls.append((key, clock.monotonic() - 1000.0))
                return answers(key, len(calls))

            queue = WorkQueue(reconcile, workers=workers, backoff=backoff, clock=clock)
            queue.start()
            try:
                await scenario(queue, clock, calls)
            finally:
                await queue.stop()

        run(main())

    return runner


def test_a_key_is_never_reconciled_twice_at_once_and_no_change_is_lost() -> None:
    async def scenario() -> None:
        gate = asyncio.Event()
        running: set[Hashable] = set()
        overlaps = 0
        log: list[Hashable] = []

        async def reconcile(key: Hashable) -> Outcome:
            nonlocal overlaps
            overlaps += key in running
            running.add(key)
            log.append(key)
            await gate.wait()  # held until the test lets it finish
            running.discard(key)
            return DONE

        queue = WorkQueue(reconcile, workers=4, clock=FakeClock())
        queue.start()
        queue.add("a")
        await settle()
        assert log == ["a"] and queue.in_flight == 1
        for _ in range(10):
            queue.add("a")  # while "a" runs: marked dirty once, run once more afterwards
        queue.add("b")
        await settle()
        assert sorted(log) == ["a", "b"]  # "b" runs beside "a"; "a" is not started a second time
        gate.set()
        await settle()
        await queue.stop()
        assert overlaps == 0
        assert log.count("a") == 2 and log.count("b") == 1
        assert queue.depth == 0 and queue.in_flight == 0

    run(scenario())


def test_the_retry_backoff_doubles_up_to_its_cap() -> None:
    backoff = Backoff(base=0.1, maximum=1.0, max_duration=float("inf"))
    assert [backoff.delay(n) for n in range(1, 6)] == [0.1, 0.2, 0.4, 0.8, 1.0]
    assert backoff.delay(10**9) == 1.0
    assert [DEFAULTS.retries.delay(n) for n in (1, 2, 3, 8)] == [0.5, 1.0, 2.0, 60.0]  # 0.5 s doubling to 60 s


def test_a_failing_key_is_retried_on_the_backoff_and_success_resets_it() -> None:
    # Fails three times, succeeds, is added again and fails once more: delays 0.5, 1, 2 — then 0.5 again.
    outcomes = {1: RuntimeError("one"), 2: RuntimeError("two"), 3: RuntimeError("three"), 5: RuntimeError("again")}

    def answers(key: Hashable, call: int) -> Outcome:
        if call in outcomes:
            raise outcomes[call]
        return DONE

    @with_queue(answers)
    async def scenario(queue: WorkQueue, clock: FakeClock, calls: list[tuple[Hashable, float]]) -> None:
        queue.add("k")
        await settle()
        for wait, total in ((0.5, 2), (1.0, 3), (2.0, 4)):
            clock.advance(wait - 0.001)
            await settle()
            assert len(calls) == total - 1, f"retried before its {wait} s"
            clock.advance(0.001)
            await settle()
            assert len(calls) == total, f"not retried after {wait} s"
        queue.add("k")  # succeeded last time: the next failure starts the backoff again
        await settle()
        clock.advance(0.5)
        await settle()
        assert [at for _, at in calls] == pytest.approx([0.0, 0.5, 1.5, 3.5, 3.5, 4.0])


def test_requeue_after_is_honoured_to_the_moment() -> None:
    def answers(key: Hashable, call: int) -> Outcome:
        return Outcome(requeue_after=30.0) if call == 1 else DONE

    @with_queue(answers)
    async def scenario(queue: WorkQueue, clock: FakeClock, calls: list[tuple[Hashable, float]]) -> None:
        queue.add("k")
        await settle()
        assert queue.depth == 1  # the re-check waits in the delayed heap
        clock.advance(29.9)
        await settle()
        assert len(calls) == 1
        clock.advance(0.1)
        await settle()
        assert calls == [("k", 0.0), ("k", 30.0)]
        assert queue.depth == 0


def test_a_key_added_meanwhile_runs_at_once_and_its_pending_recheck_still_comes() -> None:
    def answers(key: Hashable, call: int) -> Outcome:
        return Outcome(requeue_after=10.0) if call == 1 else DONE

    @with_queue(answers)
    async def scenario(queue: WorkQueue, clock: FakeClock, calls: list[tuple[Hashable, float]]) -> None:
        queue.add("k")
        await settle()
        clock.advance(3.0)
        queue.add("k")  # an event: reconciled now, not at the re-check
        await settle()
        clock.advance(7.0)
        await settle()
        assert [at for _, at in calls] == [0.0, 3.0, 10.0]


def test_a_key_keeps_one_recheck_however_often_it_is_reconciled_meanwhile() -> None:
    # Every reconcile asks to look again after 10 s (a settled instance's resync); events at 3 and 4 s reconcile it
    # meanwhile. It waits for one time, the earliest asked: looked at 10 s after its first reconcile, then every 10
    # s — not once more per event (each re-check asked for the next one, so the events' re-checks went on for good).
    def answers(key: Hashable, call: int) -> Outcome:
        return Outcome(requeue_after=10.0)

    @with_queue(answers)
    async def scenario(queue: WorkQueue, clock: FakeClock, calls: list[tuple[Hashable, float]]) -> None:
        queue.add("k")
        await settle()
        for at in (3.0, 1.0):
            clock.advance(at)
            queue.add("k")
            await settle()
        assert queue.delayed == 1 and queue.depth == 1
        for _ in range(16):
            clock.advance(1.0)
            await settle()
        assert [at for _, at in calls] == [0.0, 3.0, 4.0, 10.0, 20.0]
        assert queue.delayed == 1


def test_a_recheck_asked_earlier_moves_the_waiting_one() -> None:
    def answers(key: Hashable, call: int) -> Outcome:
        return Outcome(requeue_after=30.0) if call == 1 else Outcome(requeue_after=2.0) if call == 2 else DONE

    @with_queue(answers)
    async def scenario(queue: WorkQueue, clock: FakeClock, calls: list[tuple[Hashable, float]]) -> None:
        queue.add("k")
        await settle()
        clock.advance(1.0)
        queue.add("k")  # asks for 2 s: sooner than the 30 s waiting
        await settle()
        for _ in range(40):
            clock.advance(1.0)
            await settle()
        assert [at for _, at in calls] == [0.0, 1.0, 3.0]  # the stale 30 s entry runs nothing
        assert queue.depth == 0


def test_forget_drops_the_failure_count() -> None:
    def answers(key: Hashable, call: int) -> Outcome:
        raise RuntimeError("down")

    @with_queue(answers)
    async def scenario(queue: WorkQueue, clock: FakeClock, calls: list[tuple[Hashable, float]]) -> None:
        queue.add("k")
        await settle()
        clock.advance(0.5)
        await settle()  # the second failure: the next retry is 1 s away
        queue.forget("k")  # the object went (and came back): its next failure starts at 0.5 s
        queue.add("k")
        await settle()
        clock.advance(0.5)
        await settle()
        assert [at for _, at in calls] == [0.0, 0.5, 0.5, 1.0]  # remembered, the third retry would wait 2 s


def test_stuck_workers_are_seen_on_the_queue_clock() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        gate = asyncio.Event()

        async def reconcile(key: Hashable) -> Outcome:
            await gate.wait()
            return DONE

        queue = WorkQueue(reconcile, workers=1, clock=clock)
        queue.start()
        queue.add("slow")
        queue.add("waiting")
        await settle()
        clock.advance(60.0)
        assert queue.stuck(bound=60) is None  # at the bound, not past it
        clock.advance(1.0)
        assert queue.stuck(bound=60) == "a reconcile has been running for 61 s (bound 60 s)"
        gate.set()
        await settle()
        assert queue.stuck(bound=60) is None  # both ran: moving again
        await queue.stop()

    run(scenario())


def test_a_stop_lets_the_running_reconciles_end_and_takes_no_more_keys() -> None:
    """A graceful stop (SIGTERM): the reconcile running goes to its end (a reconcile cut half-way leaves its object
    half-done), nothing waiting starts, and the stop returns once the running one has ended."""

    async def scenario() -> None:
        clock = FakeClock()
        gate = asyncio.Event()
        started: list[Hashable] = []
        ended: list[Hashable] = []

        async def reconcile(key: Hashable) -> Outcome:
            started.append(key)
            await gate.wait()
            ended.append(key)
            return DONE

        queue = WorkQueue(reconcile, workers=2, per_tenant=2, clock=clock)
        queue.start()
        queue.add("a")
        await settle()
        assert started == ["a"]  # the second worker waits for a key
        stopping = asyncio.ensure_future(queue.stop(drain=5.0))
        await settle()
        queue.add("b")  # an event while stopping: nobody takes it
        clock.advance(4.9)
        await settle()
        assert not stopping.done() and ended == []
        gate.set()
        await settle()
        assert stopping.done() and stopping.result() == []
        assert started == ["a"] and ended == ["a"]

    run(scenario())


def test_a_stop_cuts_the_reconciles_still_running_at_the_end_of_the_drain_and_names_them() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        never = asyncio.Event()
        ended: list[Hashable] = []

        async def reconcile(key: Hashable) -> Outcome:
            await never.wait()
            ended.append(key)
            return DONE

        queue = WorkQueue(reconcile, workers=2, per_tenant=2, clock=clock)
        queue.start()
        queue.add("slow")
        await settle()
        stopping = asyncio.ensure_future(queue.stop(drain=5.0))
        await settle()
        clock.advance(5.0)
        await settle()
        assert stopping.done() and stopping.result() == ["slow"]
        assert ended == []

    run(scenario())


def test_an_idle_queue_stops_at_once() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        queue = WorkQueue(lambda key: asyncio.sleep(0, DONE), workers=3, clock=clock)
        queue.start()
        stopping = asyncio.ensure_future(queue.stop(drain=30.0))
        await settle()
        assert stopping.done() and stopping.result() == [] and clock.waiting == 0

    run(scenario())
