"""Leader election that stops acting before its lease can expire, however its renewals fail.

The election library renews in a loop bounded by a renew deadline, but it checks the deadline only between
attempts: one renewal whose connection hangs holds the loop (and the leader keeps acting) for as long as the
request lasts — for ever without a timeout — while the standby takes the expired lease over. client-go's
answer is a deadline on the renewal itself (``renewDeadline`` < ``leaseDuration``). Here:

* the lease's client has deadlines (:mod:`opbroker.kubeclient.deadlines`), so every attempt ends;
* :class:`GuardedElection` remembers when its last successful renewal *started* (the lease the API server
  stored can be no older), and :func:`guard` checks, from a thread of its own, that it is younger than the
  renew deadline — if not, ``on_overdue`` runs (the controller exits), while a standby still sees the lease
  valid: it takes over no earlier than a full lease after that renewal.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes.leaderelection import leaderelection

logger = logging.getLogger(__name__)

#: How often the guard looks at the last renewal.
GUARD_SECONDS = 0.25


class GuardedElection(leaderelection.LeaderElection):
    """The library's election, remembering when its last successful acquisition or renewal started."""

    def __init__(self, config: Any, *, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(config)  # type: ignore[no-untyped-call]
        self._clock = clock
        self.renewed_at: float | None = None

    def try_acquire_or_renew(self) -> bool:
        """One attempt; a transport failure (a deadline passed, a refused connection) is a failed attempt, as
        the library counts an API error — it would otherwise end the election loop, and the process with it."""
        started = self._clock()
        try:
            succeeded = bool(super().try_acquire_or_renew())  # type: ignore[no-untyped-call]
        except Exception as exc:
            logger.warning("lease attempt failed: %s", type(exc).__name__)
            return False
        if succeeded:
            self.renewed_at = started
        return succeeded


def overdue(renewed_at: float | None, now: float, renew_deadline: float) -> float | None:
    """Seconds since the last renewal when past ``renew_deadline`` (pure), else None."""
    if renewed_at is None:
        return None
    age = now - renewed_at
    return age if age > renew_deadline else None


def guard(
    election: GuardedElection,
    renew_deadline: float,
    on_overdue: Callable[[float], None],
    *,
    every: float = GUARD_SECONDS,
    clock: Callable[[], float] = time.monotonic,
    stop: threading.Event | None = None,
) -> threading.Thread:
    """Start a daemon thread calling ``on_overdue(age)`` once the last renewal is older than ``renew_deadline``."""
    stopped = stop or threading.Event()

    def watch() -> None:
        while not stopped.wait(every):
            age = overdue(election.renewed_at, clock(), renew_deadline)
            if age is not None:
                on_overdue(age)
                return

    thread = threading.Thread(target=watch, name="lease-guard", daemon=True)
    thread.start()
    return thread
