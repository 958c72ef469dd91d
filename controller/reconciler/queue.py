"""The runtime's rate-limited work queue with client-go semantics, for level-triggered reconciliation.

Why our own queue on top of kopf: kopf delivers watch events; what to do about an object is decided by
reading its current state, not the event. Events only *enqueue* keys. The queue guarantees that

* a key is never processed by two workers at once (a key added while being processed is marked dirty and
  processed again right after, so no change is lost);
* many events for one key collapse into one reconcile;
* a failing key is retried with exponential backoff (per key, reset on success), and a key that is
  waiting on something outside (an operator's status) is re-checked after the delay its reconcile asked for.

Time comes from the clock passed in (:mod:`.clock`): tests advance a fake one instead of sleeping.

It also tells whether its workers are stuck (:meth:`WorkQueue.stuck`, for the liveness probe): a reconcile
running past a bound, or keys waiting for a worker while no reconcile has started or finished for as long.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import threading
from collections.abc import Awaitable, Callable, Hashable

from opbroker.controller.reconciler.clock import SYSTEM, Clock
from opbroker.controller.reconciler.outcomes import Outcome, TemporaryError
from opbroker.osbclient import Backoff

logger = logging.getLogger(__name__)

#: A failed reconcile is retried after 0.5 s, doubling with each failure in a row up to a minute (client-go's
#: item backoff has the same shape); it never gives up: the object's state, not a count, decides.
RETRY = Backoff(base=0.5, maximum=60.0, max_duration=float("inf"))


Reconcile = Callable[[Hashable], Awaitable[Outcome]]


class WorkQueue:
    """Keys in, reconciles out, with ``workers`` reconciles running concurrently."""

    def __init__(
        self, reconcile: Reconcile, *, workers: int = 4, backoff: Backoff = RETRY, clock: Clock = SYSTEM
    ) -> None:
        self._reconcile = reconcile
        self._workers = workers
        self._backoff = backoff
        self._clock = clock
        self._failures: dict[Hashable, int] = {}
        """Failures in a row per key (reset on success or :meth:`forget`)."""
        self._ready: asyncio.Queue[Hashable] = asyncio.Queue()
        self._queued: set[Hashable] = set()
        self._processing: set[Hashable] = set()
        self._dirty: set[Hashable] = set()
        self._delayed: list[tuple[float, int, Hashable]] = []
        self._sequence = itertools.count()
        self._wakeup = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        # When each running reconcile started, and when one last started or finished (monotonic): read by the
        # health server's threads, hence the lock.
        self._progress_lock = threading.Lock()
        self._running_since: dict[Hashable, float] = {}
        self._moved_at = clock.monotonic()

    # -- producers -----------------------------------------------------------------------------------

    def add(self, key: Hashable) -> None:
        """Reconcile ``key`` as soon as a worker is free (at most once however often it is added)."""
        if key in self._processing:
            self._dirty.add(key)
            return
        if key in self._queued:
            return
        self._queued.add(key)
        self._ready.put_nowait(key)

    def add_after(self, key: Hashable, delay: float) -> None:
        """Reconcile ``key`` after ``delay`` seconds (earlier if it is added meanwhile)."""
        if delay <= 0:
            self.add(key)
            return
        heapq.heappush(self._delayed, (self._clock.monotonic() + delay, next(self._sequence), key))
        self._wakeup.set()

    def forget(self, key: Hashable) -> None:
        """The object is gone: drop its backoff history (pending entries run and find nothing)."""
        self._failures.pop(key, None)

    @property
    def depth(self) -> int:
        return len(self._queued) + len(self._delayed)

    @property
    def ready(self) -> int:
        """Keys waiting for a free worker (not those waiting for their time)."""
        return self._ready.qsize()

    @property
    def in_flight(self) -> int:
        """Keys being reconciled now."""
        return len(self._processing)

    def stuck(self, bound: float, now: float | None = None) -> str | None:
        """Why the workers look stuck (None: they do not). Thread-safe."""
        now = self._clock.monotonic() if now is None else now
        with self._progress_lock:
            running = list(self._running_since.values())
            moved_at = self._moved_at
        return stuck(now=now, running_since=running, waiting=self.ready, moved_at=moved_at, bound=bound)

    # -- running -------------------------------------------------------------------------------------

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._worker(i), name=f"reconcile-worker-{i}") for i in range(self._workers)]
        self._tasks.append(asyncio.create_task(self._timer(), name="reconcile-timer"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def _timer(self) -> None:
        while True:
            now = self._clock.monotonic()
            while self._delayed and self._delayed[0][0] <= now:
                _, _, key = heapq.heappop(self._delayed)
                self.add(key)
            timeout = self._delayed[0][0] - now if self._delayed else None
            self._wakeup.clear()
            await self._clock.wait(self._wakeup, timeout)

    async def _worker(self, index: int) -> None:
        while True:
            key = await self._ready.get()
            self._queued.discard(key)
            self._processing.add(key)
            with self._progress_lock:
                self._running_since[key] = self._moved_at = self._clock.monotonic()
            try:
                outcome = await self._reconcile(key)
            except asyncio.CancelledError:
                raise
            except TemporaryError as exc:
                delay = self._retry_delay(key)
                logger.warning("reconcile of %s: %s; retrying in %.1fs", key, exc, delay)
                self.add_after(key, delay)
            except Exception:
                delay = self._retry_delay(key)
                logger.exception("reconcile of %s failed; retrying in %.1fs", key, delay)
                self.add_after(key, delay)
            else:
                self._failures.pop(key, None)
                if outcome.requeue_after is not None:
                    self.add_after(key, outcome.requeue_after)
            finally:
                with self._progress_lock:
                    self._running_since.pop(key, None)
                    self._moved_at = self._clock.monotonic()
                self._processing.discard(key)
                if key in self._dirty:
                    self._dirty.discard(key)
                    self.add(key)

    def _retry_delay(self, key: Hashable) -> float:
        """Count one more failure of ``key`` in a row; the wait before its retry."""
        failures = self._failures[key] = self._failures.get(key, 0) + 1
        return self._backoff.delay(failures)


def stuck(*, now: float, running_since: list[float], waiting: int, moved_at: float, bound: float) -> str | None:
    """Why workers look stuck, from their bookkeeping (pure): a reconcile started more than ``bound`` seconds
    ago and still running, or keys waiting for a worker while no reconcile started or finished (``moved_at``)
    for ``bound`` seconds."""
    oldest = min(running_since, default=None)
    if oldest is not None and now - oldest > bound:
        return f"a reconcile has been running for {now - oldest:.0f} s (bound {bound:.0f} s)"
    if waiting and now - moved_at > bound:
        return f"{waiting} keys wait for a worker and no reconcile has moved for {now - moved_at:.0f} s"
    return None
