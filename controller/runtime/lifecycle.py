"""The controller's process lifecycle: one event loop runs the controller until it is asked to stop, then stops it
gracefully — no watch goes on, no key is taken, and the reconciles running at that moment get up to a drain time to
finish — and says when it is done, so that the leader hands its Lease over only then.

Why our own (kopf ran this loop before issue 45, with no watch of its own left to run): kopf logged SIGTERM at once,
then waited about 46 s for its own tasks before the cleanup (measured on an idle controller), so the tests' 10 s and
a pod's default 30 s grace ran out first: the process was killed, and a leader never released its Lease. This loop
does nothing but start, wait and stop.

Stopping may be asked from any thread (:meth:`Shutdown.request`); the process asks it from the signal handlers of
its one loop (:mod:`opbroker.controller.running`), at whatever step it is: waiting for the API, campaigning for
the lease, or running the controller.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from typing import Protocol

from opbroker.controller.runtime import health

logger = logging.getLogger(__name__)

#: Beyond the drain time, how long the rest of a stop (closing watches, pools) may take before the loop gives up.
STOP_MARGIN_SECONDS = 1.0


class Operated(Protocol):
    """What the loop runs: started on the loop, stopped on it with a drain time (the controller's ``Controller``)."""

    async def start(self) -> None: ...

    async def stop(self, drain: float) -> None: ...


class Shutdown:
    """A request to stop, from any thread, to the loop that runs the controller (at whatever step it waits)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        """Each :meth:`wait` in progress (the process waits at every step: the API, the campaign, the run)."""
        self._requested = threading.Event()
        self.reason = ""
        """Why the stop was asked (a signal's name), for the log and the health probes."""

    @property
    def requested(self) -> bool:
        return self._requested.is_set()

    def request(self, reason: str) -> bool:
        """Ask the loop to stop (at most once; later calls change nothing). Returns whether this call asked."""
        with self._lock:
            if self._requested.is_set():
                return False
            self.reason = reason
            self._requested.set()
            waiters = list(self._waiters)
        for loop, event in waiters:
            with contextlib.suppress(RuntimeError):  # the loop has closed meanwhile: nothing left to stop
                loop.call_soon_threadsafe(event.set)
        return True

    async def wait(self) -> None:
        """Return once a stop is asked (at once if it was asked already). Call on the loop that runs the controller."""
        event = asyncio.Event()
        waiter = (asyncio.get_running_loop(), event)
        with self._lock:
            self._waiters.append(waiter)
            if self._requested.is_set():
                event.set()
        try:
            await event.wait()
        finally:
            with self._lock:
                self._waiters.remove(waiter)


async def operate(controller: Operated, shutdown: Shutdown, *, state: health.Health, drain: float) -> None:
    """Run ``controller`` until ``shutdown`` is asked, then stop it, giving running reconciles ``drain`` seconds;
    while it runs, the loop beats ``state``'s heartbeat. Returns once it has stopped, however it ends: the process
    hands its Lease over only after that."""
    state.running()
    heartbeat = asyncio.create_task(_beat(state), name="health heartbeat")
    try:
        await controller.start()
        await shutdown.wait()
        logger.info("stopping (%s): nothing more is taken; reconciles running get %.1f s", shutdown.reason, drain)
        state.stopped(f"stopping: {shutdown.reason}")
        try:
            await asyncio.wait_for(controller.stop(drain), drain + STOP_MARGIN_SECONDS)
        except TimeoutError:
            logger.warning("stopping took longer than %.1f s; exiting all the same", drain + STOP_MARGIN_SECONDS)
    finally:
        heartbeat.cancel()
        state.stopped(f"stopped: {shutdown.reason}" if shutdown.requested else "the controller's loop has ended")


async def _beat(state: health.Health) -> None:
    while True:
        state.beat()
        await asyncio.sleep(health.HEARTBEAT_SECONDS)
