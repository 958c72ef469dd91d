"""An event loop in a thread of its own: what the controller's loop is to its loop-side servers (the admission
webhook's review server), for tests that start and stop them from blocking code."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator


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
