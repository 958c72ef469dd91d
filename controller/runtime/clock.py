"""The controller's one clock, passed in: the real one in production, a :class:`FakeClock` in tests.

Why: the work queue's delayed re-checks, the runtime's re-check coalescing and conflict backoff, and the stuck
detection all measure time. Reading ``time.monotonic`` directly made their tests sleep to let time pass (and
assert that "nothing happened within 2 s"); with the clock an argument, a test advances a fake one explicitly
and every delay is exact.

A clock tells two times: ``monotonic()`` for durations and schedules inside one process (never goes back, no
meaning across restarts) and ``now()`` for wall-clock instants written into objects (UTC, timezone-aware). It
also waits: ``wait(event, timeout)`` is how an asyncio timer sleeps "until ``event`` is set or ``timeout``
seconds have passed on this clock", so a fake clock's :meth:`FakeClock.advance` wakes it. Code on a thread of
its own (a rollout's pacing, a start-up wait) blocks with ``block(seconds)`` instead: on a fake clock, time
simply moves on.

Outside this package the controller reads no clock but this one (a ruff banned-api rule, pyproject.toml); a pure
core (``core/`` packages) reads none at all: its caller's clock's moment comes in its facts.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import time
from typing import Protocol


class Clock(Protocol):
    """What the controller asks of time."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (for durations and schedules in this process)."""
        ...

    def now(self) -> datetime.datetime:
        """The wall-clock instant, timezone-aware UTC (for timestamps written into objects)."""
        ...

    async def wait(self, event: asyncio.Event, timeout: float | None) -> None:
        """Return when ``event`` is set or ``timeout`` seconds (None: no limit) have passed on this clock."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Return once ``seconds`` have passed on this clock."""
        ...

    def block(self, seconds: float) -> None:
        """Block the calling thread until ``seconds`` have passed on this clock (thread-side code only)."""
        ...


class SystemClock:
    """The real clock: ``time.monotonic``, ``datetime.now(UTC)``, asyncio's timers."""

    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> datetime.datetime:
        return datetime.datetime.now(datetime.UTC)

    async def wait(self, event: asyncio.Event, timeout: float | None) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout=timeout)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def block(self, seconds: float) -> None:
        time.sleep(seconds)


#: The one real clock (stateless; every default points here).
SYSTEM = SystemClock()

#: Where a :class:`FakeClock` starts, by default: an arbitrary fixed instant, so tests are reproducible.
FAKE_EPOCH = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


class FakeClock:
    """A clock that moves only when told (:meth:`advance`); for tests.

    Both times move together. Waits on it (:meth:`wait`) end when the clock is advanced past their timeout, on
    the event loop that waits: call :meth:`advance` from that loop (a test's coroutine), then yield to it.
    """

    def __init__(self, *, start: float = 1000.0, wall: datetime.datetime = FAKE_EPOCH) -> None:
        if wall.tzinfo is None:
            raise ValueError("wall must be timezone-aware")
        self._start = start
        self._elapsed = 0.0
        self._wall = wall
        self._alarms: list[tuple[float, asyncio.Event]] = []

    def monotonic(self) -> float:
        return self._start + self._elapsed

    def now(self) -> datetime.datetime:
        return self._wall + datetime.timedelta(seconds=self._elapsed)

    def advance(self, seconds: float) -> None:
        """Move both times forward by ``seconds`` and wake the waits whose timeout has passed."""
        if seconds < 0:
            raise ValueError(f"a clock does not go back ({seconds} s)")
        self._elapsed += seconds
        now = self.monotonic()
        for due, alarm in self._alarms:
            if due <= now:
                alarm.set()

    @property
    def waiting(self) -> int:
        """Waits with a timeout not yet over (a test can tell that a timer is armed)."""
        return sum(1 for _, alarm in self._alarms if not alarm.is_set())

    @property
    def due(self) -> list[float]:
        """When each wait not yet over ends (sorted): a test can tell which timer is armed."""
        return sorted(due for due, alarm in self._alarms if not alarm.is_set())

    async def sleep(self, seconds: float) -> None:
        await self.wait(asyncio.Event(), seconds)

    def block(self, seconds: float) -> None:
        """No waiting: the time passes (:meth:`advance`). For thread-side code a test runs on its own thread, with
        no event loop waiting on this clock (advancing wakes a loop's waits only from that loop)."""
        self.advance(max(0.0, seconds))

    async def wait(self, event: asyncio.Event, timeout: float | None) -> None:
        if timeout is None:
            await event.wait()
            return
        alarm = asyncio.Event()
        entry = (self.monotonic() + max(0.0, timeout), alarm)
        if entry[0] <= self.monotonic():
            return
        self._alarms.append(entry)
        waits = [asyncio.ensure_future(event.wait()), asyncio.ensure_future(alarm.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pending in waits:
                pending.cancel()
            self._alarms.remove(entry)
