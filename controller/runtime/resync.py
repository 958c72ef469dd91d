"""The day-two resync (issue 43): the safety net under the watches, a few store lookups per settled object.

A settled instance is checked when something it read changes (the source watches). The resync is for what a watch
could not tell: a key the queue lost, an object of a kind nobody watches (the store does not hold it), a check
whose memory went. controller-runtime's resync replays every cached object through a full reconcile each period,
which is why platforms set it to hours; here each instance found as declared left what it read and the versions it
read (``DayTwo.refs``, ``DayTwo.versions``), and the sweep only compares those versions with the store's — spread
over the period, in small batches — and queues the instances whose versions moved, or that the store cannot answer
for. Nothing is rendered, read from the API server or written for an instance whose objects stand still: 20 000
settled instances cost 20 000 lookups per period, not 20 000 reconciles.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from opbroker.api.meta import ResourceRef
from opbroker.controller.runtime.clock import Clock
from opbroker.controller.runtime.keys import Key

logger = logging.getLogger(__name__)

#: Objects looked at between two pauses of the sweep: small enough that the event loop stays responsive, large
#: enough that the pauses are few.
BATCH = 200


@dataclass(frozen=True)
class Followed:
    """A settled object as its last check left it: what it read, and the versions it read."""

    key: Key
    refs: tuple[ResourceRef, ...]
    versions: tuple[str | None, ...]


#: What the store says of an object it does not hold (its kind unwatched, or not listed yet).
Unknown = object()


def moved(followed: Followed, version_of: Callable[[ResourceRef], object]) -> bool:
    """Whether anything ``followed`` read has another version now (or the store cannot say: then only a check,
    which reads past the store, can)."""
    if len(followed.refs) != len(followed.versions):
        return True
    for ref, version in zip(followed.refs, followed.versions, strict=True):
        now = version_of(ref)
        if now is Unknown or now != version:
            return True
    return False


async def sweep_once(
    followed: Sequence[Followed],
    version_of: Callable[[ResourceRef], object],
    enqueue: Callable[[Key], None],
    *,
    period: float,
    clock: Clock,
) -> int:
    """Look at each of ``followed`` once, spread over ``period`` seconds of ``clock``; queue those that moved.
    Returns how many were queued."""
    if not followed:
        await clock.sleep(period)
        return 0
    batches = (len(followed) + BATCH - 1) // BATCH
    pause = period / batches
    queued = 0
    for start in range(0, len(followed), BATCH):
        for item in followed[start : start + BATCH]:
            if moved(item, version_of):
                enqueue(item.key)
                queued += 1
        await clock.sleep(pause)
    return queued


async def resync_forever(
    followed: Callable[[], Sequence[Followed]],
    version_of: Callable[[ResourceRef], object],
    enqueue: Callable[[Key], None],
    *,
    period: float,
    clock: Clock,
) -> None:
    """Sweep every ``period`` seconds, for ever (0: never). Each sweep takes the followed objects of that moment."""
    if period <= 0:
        return
    while True:
        queued = await sweep_once(followed(), version_of, enqueue, period=period, clock=clock)
        if queued:
            logger.info("resync: %d settled object(s) moved without an event, checked again", queued)
