"""Whether the API server still answers the controller: the last answer's age, kept fresh by a probe.

Every HTTP answer to one of the controller's clients counts (:mod:`opbroker.kubeclient.deadlines` reports them);
when none came for a probe period, :func:`probe` (a task on the controller's loop) asks for ``/version``
(readable by every authenticated user), with a deadline, so the age stays meaningful in a quiet cluster. A
controller whose requests get no answer at all for long is cut off — the health probes report it (:mod:`.health`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

from kubernetes import client

from opbroker.controller.runtime.clock import SYSTEM, Clock
from opbroker.controller.runtime.policies import DEFAULTS
from opbroker.kubeclient.lean import LeanApi

logger = logging.getLogger(__name__)


class ApiContact:
    """The time of the API server's last answer. Thread-safe; the clock is injectable."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._last = clock()

    def answered(self) -> None:
        now = self._clock()
        with self._lock:
            self._last = now

    def silence(self) -> float:
        """Seconds since the last answer."""
        now = self._clock()
        with self._lock:
            return now - self._last

    def problem(self, bound: float) -> str | None:
        """A reason for the probes when no answer came for longer than ``bound`` seconds, else None."""
        silence = self.silence()
        if silence <= bound:
            return None
        return f"the API server has not answered the controller for {silence:.0f} s (bound {bound:.0f} s)"


async def probe(
    api: client.ApiClient, contact: ApiContact, *, every: float = DEFAULTS.api_probe.base, clock: Clock = SYSTEM
) -> None:
    """Until cancelled: every ``every`` seconds (the table's ``api_probe``) without an answer, GET ``/version``
    (deadline ``every``), the request in the loop's pool (a task on the controller's loop, not a thread)."""
    lean = LeanApi(api)  # one transport for the probe's life: its connection is kept between probes
    try:
        while True:
            await clock.sleep(every)
            if contact.silence() < every:
                continue
            try:
                await asyncio.to_thread(lean.request, "GET", "/version", timeout=(every, every))
            except Exception as exc:  # any failure is the silence the probes report; the error is only logged
                logger.debug("the API server did not answer the probe: %s", type(exc).__name__)
            else:
                contact.answered()
    finally:
        lean.close()
