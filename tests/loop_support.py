"""Loops in tests: an event loop in a thread of its own (what the controller's loop is to its loop-side servers,
the admission webhook's review server, for tests that start and stop them from blocking code), and the one wait
for a condition on a loop (:func:`settled`)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def loop_in_thread() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="test-loop", daemon=True)
    thread.start()
    try:
        yield loop
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


async def settled(what: str, done: Callable[[], bool]) -> None:
    """Yield to the loop (and the pool's threads) until ``done()``; fails after 10 s of real time."""
    deadline = asyncio.get_running_loop().time() + 10
    await asyncio.sleep(0)
    while not done():
        assert asyncio.get_running_loop().time() < deadline, f"never: {what}"
        await asyncio.sleep(0.001)
