"""The readiness check, run apart from the request thread pool and within a deadline.

The check (one read of the catalog, the credentials) makes blocking Kubernetes calls. Run as a sync route it
would wait for a thread of the request pool, and behind a saturated pool or a hung API server the kubelet's
probe would time out instead of hearing "not ready". Here it runs on a thread of its own, one check at a
time: a probe arriving while a check is still out waits for that check, never starts a second one, so a hung
API server holds one thread, not one per probe. A check that does not finish within the deadline is
answered "not ready" (the check goes on, and the next probe waits for it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger("opbroker.broker")

#: Seconds a readiness answer waits for its check: below the probe's timeout (2 s, ControlPlane component),
#: so the kubelet hears "not ready" with a reason instead of a timeout.
DEFAULT_DEADLINE = 1.5


class Readiness:
    """``verdict()`` runs ``check`` (raising means not ready) on its own thread, at most one at a time."""

    def __init__(self, check: Callable[[], None], deadline: float = DEFAULT_DEADLINE) -> None:
        self.check = check
        self.deadline = deadline
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="opbroker-readiness")
        self._running: asyncio.Future[None] | None = None

    async def verdict(self) -> tuple[bool, str]:
        """(ready, why): the check's outcome, or not ready when it takes longer than the deadline."""
        if self._running is None or self._running.done():
            self._running = asyncio.get_running_loop().run_in_executor(self._executor, self.check)
        try:
            await asyncio.wait_for(asyncio.shield(self._running), self.deadline)
        except TimeoutError:
            return False, f"the check did not finish within {self.deadline:g} s"
        except Exception as exc:  # any failure of the check means "not ready", never a 500
            reason = getattr(exc, "status", None) or type(exc).__name__
            return False, str(reason)
        return True, "ready"

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
