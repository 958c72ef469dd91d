"""The work queue: one reconcile per key at a time, collapsed events, backoff, delayed re-checks."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable

from opbroker.controller.reconciler import DONE, Outcome
from opbroker.controller.reconciler.queue import Backoff, WorkQueue


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_a_key_is_never_reconciled_twice_at_once_and_no_change_is_lost() -> None:
    async def scenario() -> tuple[int, list[str]]:
        running: set[Hashable] = set()
        overlaps = 0
        log: list[str] = []

        async def reconcile(key: Hashable) -> Outcome:
            nonlocal overlaps
            if key in running:
                overlaps += 1
            running.add(key)
            log.append(str(key))
            await asyncio.sleep(0.05)
            running.discard(key)
            return DONE

        queue = WorkQueue(reconcile, workers=4)
        queue.start()
        queue.add("a")
        await asyncio.sleep(0.01)
        for _ in range(10):
            queue.add("a")  # while "a" runs: marked dirty once, run once more afterwards
        queue.add("b")
        await asyncio.sleep(0.3)
        await queue.stop()
        return overlaps, log

    overlaps, log = run(scenario())
    assert overlaps == 0
    assert log.count("a") == 2
    assert log.count("b") == 1


def test_failures_back_off_exponentially_and_success_resets() -> None:
    backoff = Backoff(base=0.1, cap=1.0)
    assert [backoff.next_delay("k") for _ in range(5)] == [0.1, 0.2, 0.4, 0.8, 1.0]
    backoff.forget("k")
    assert backoff.next_delay("k") == 0.1


def test_failed_reconcile_is_retried_and_requeue_after_is_honoured() -> None:
    async def scenario() -> list[float]:
        calls: list[float] = []
        loop = asyncio.get_running_loop()

        async def reconcile(key: Hashable) -> Outcome:
            calls.append(loop.time())
            if len(calls) == 1:
                raise RuntimeError("transient")
            if len(calls) == 2:
                return Outcome(requeue_after=0.1)
            return DONE

        queue = WorkQueue(reconcile, workers=1, backoff=Backoff(base=0.05))
        queue.start()
        queue.add("k")
        await asyncio.sleep(0.5)
        await queue.stop()
        return calls

    calls = run(scenario())
    assert len(calls) == 3
    assert calls[1] - calls[0] >= 0.04  # backoff after the failure
    assert calls[2] - calls[1] >= 0.09  # the requested re-check delay
