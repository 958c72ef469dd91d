"""The one clock: the real one tells UTC and monotonic time; the fake one moves only when told, and wakes the
waits on it that are due (so timers in tests run on advance, not on sleeping)."""

from __future__ import annotations

import asyncio
import datetime

import pytest

from opbroker.controller.runtime.clock import FAKE_EPOCH, SYSTEM, FakeClock


def test_the_real_clock_tells_utc_and_never_goes_back() -> None:
    first = SYSTEM.monotonic()
    assert SYSTEM.now().tzinfo == datetime.UTC
    assert SYSTEM.monotonic() >= first


def test_both_fake_times_move_together_and_only_forward() -> None:
    clock = FakeClock()
    clock.advance(90)
    assert clock.monotonic() == 1090.0
    assert clock.now() == FAKE_EPOCH + datetime.timedelta(seconds=90)
    with pytest.raises(ValueError, match="does not go back"):
        clock.advance(-1)
    with pytest.raises(ValueError, match="timezone-aware"):
        FakeClock(wall=datetime.datetime(2026, 1, 1))


def test_blocking_on_the_fake_clock_lets_the_time_pass_at_once() -> None:
    """Thread-side code (a rollout's pacing, a start-up wait) blocks with ``block``: on the fake clock the time it
    waits for has passed when it returns, so a test of it neither sleeps nor spins."""
    clock = FakeClock()
    clock.block(2.5)
    assert clock.monotonic() == 1002.5
    assert clock.now() == FAKE_EPOCH + datetime.timedelta(seconds=2.5)
    clock.block(-1)  # a deadline already past: no wait, and the clock does not go back
    assert clock.monotonic() == 1002.5
    first = SYSTEM.monotonic()
    SYSTEM.block(0.01)
    assert SYSTEM.monotonic() - first >= 0.01


def test_a_wait_on_the_fake_clock_ends_at_its_timeout_or_its_event() -> None:
    async def scenario() -> list[str]:
        clock = FakeClock()
        ended: list[str] = []
        event = asyncio.Event()

        async def waiter(name: str, on: asyncio.Event, timeout: float | None) -> None:
            await clock.wait(on, timeout)
            ended.append(name)

        tasks = [
            asyncio.create_task(waiter("10 s", asyncio.Event(), 10)),
            asyncio.create_task(waiter("event", event, 100)),
            asyncio.create_task(waiter("no timeout", asyncio.Event(), None)),
        ]
        tasks.append(asyncio.create_task(clock.sleep(5)))
        for _ in range(5):
            await asyncio.sleep(0)
        assert clock.waiting == 3 and ended == []
        clock.advance(9.5)
        for _ in range(5):
            await asyncio.sleep(0)
        assert ended == [] and tasks[3].done()  # the 5 s sleep is over, the 10 s wait is not
        event.set()
        clock.advance(0.5)
        for _ in range(5):
            await asyncio.sleep(0)
        tasks[2].cancel()  # no timeout: only its event (never set) would end it
        await asyncio.gather(*tasks, return_exceptions=True)
        assert clock.waiting == 0
        return sorted(ended)

    assert asyncio.run(scenario()) == ["10 s", "event"]
