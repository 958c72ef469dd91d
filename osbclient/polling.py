"""When to ask ``last_operation`` again, and for how long.

Two users, one rule. The Pulumi provider blocks in ``wait`` until the operation ends. A reconciler must not
block: it stores when the operation started and how many polls it made, asks ``next_poll`` for the delay and
requeues. Both back off exponentially from ``Backoff.base`` up to ``Backoff.maximum``; a broker's
``Retry-After`` replaces the backoff for that poll (OSB: "how long the Platform SHOULD wait before polling
again"); and past ``Backoff.max_duration`` the operation counts as failed (OSB "Polling Interval and
Duration": the plan's ``maximum_polling_duration`` or the platform's own limit).

Jitter (``Backoff.jitter``) spreads the waits of many pollers that started together (a controller restarting
over a thousand operations) so they do not hit one broker in step. It takes a *draw* — a number in [0, 1) from
the caller's random source — so the functions here stay pure: the controller draws from its policy table's
source (``controller.runtime.policies``); a caller that passes no draw (the Pulumi provider) gets the exact,
unjittered waits.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from opbroker.osbclient.errors import OperationFailed, OperationTimeout
from opbroker.osbclient.results import FAILED, SUCCEEDED, LastOperation

#: Backoff doublings stop counting here: the delay is long capped by then, and 2**n stays a float.
_MAX_DOUBLINGS = 62


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff, the one value type for it (OSB polls, the controller's retries and conflicts).

    Poll pacing: ``base`` seconds before the first poll and after the first answer, doubling after each
    further poll up to ``maximum``; give up once ``max_duration`` seconds have passed since the start
    (``float("inf")``: never, for retries that go on as long as it takes). ``base == maximum`` is a fixed
    interval. ``jitter``: the fraction of each wait a draw may take off (0: none; see :meth:`delay`)."""

    base: float = 2.0
    maximum: float = 30.0
    max_duration: float = 1800.0
    jitter: float = 0.0

    def __post_init__(self) -> None:
        if not 0 < self.base <= self.maximum:
            raise ValueError(f"need 0 < base <= maximum, got base={self.base}, maximum={self.maximum}")
        if self.max_duration <= 0:
            raise ValueError(f"max_duration must be positive, got {self.max_duration}")
        if not 0 <= self.jitter < 1:
            raise ValueError(f"jitter must be in [0, 1), got {self.jitter}")

    def delay(self, attempt: int, draw: float = 0.0) -> float:
        """The wait before the next try after the ``attempt``-th in a row (1 for the first): ``base`` doubled
        ``attempt - 1`` times, capped at ``maximum``; bounded for any ``attempt``.

        Jittered by ``draw`` (in [0, 1), from the caller's random source): ``jitter * draw`` of the wait is taken
        off, so a wait lies in ``[(1 - jitter) * d, d]`` — jitter never lengthens a wait past the cap, and
        ``draw=0`` (the default) is the unjittered wait."""
        if not 0 <= draw < 1:
            raise ValueError(f"a draw is in [0, 1), got {draw}")
        exact = min(self.base * 2.0 ** min(max(attempt - 1, 0), _MAX_DOUBLINGS), self.maximum)
        return float(exact * (1.0 - self.jitter * draw))


@dataclass(frozen=True)
class NextPoll:
    """``next_poll``'s answer: poll again after ``delay`` seconds, or stop because ``expired``."""

    delay: float
    expired: bool = False


EXPIRED = NextPoll(delay=0.0, expired=True)


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delay-seconds or an HTTP date; None when absent or bad."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def delay_after(elapsed: float, polls: int, retry_after: float | None, backoff: Backoff, draw: float = 0.0) -> NextPoll:
    """The core of ``next_poll`` on plain seconds (``wait`` feeds it a monotonic clock). ``draw`` jitters the
    backoff (:meth:`Backoff.delay`), never a broker's ``Retry-After``."""
    if polls < 0:
        raise ValueError(f"polls cannot be negative, got {polls}")
    remaining = backoff.max_duration - elapsed
    if remaining <= 0:
        return EXPIRED
    delay = max(0.0, retry_after) if retry_after is not None else backoff.delay(max(polls, 1), draw)
    # Never sleep past the deadline: the poll at the deadline is the last chance to see the outcome.
    return NextPoll(delay=min(delay, remaining))


def next_poll(
    *, started: datetime, now: datetime, polls: int, retry_after: float | None, backoff: Backoff, draw: float = 0.0
) -> NextPoll:
    """For reconcilers (pure, no sleeping): how long to requeue before polling ``last_operation`` again.

    ``started``: when the broker accepted the operation (its 202), wall clock, kept in the resource's status
    so it survives restarts. ``polls``: how many polls were made so far (0 right after the 202).
    ``retry_after``: the last poll's ``Retry-After`` in seconds (``LastOperation.retry_after``), if any.
    ``draw``: the caller's random draw in [0, 1) jittering the backoff (0: none).
    Returns ``EXPIRED`` once ``backoff.max_duration`` has passed: the operation is then failed."""
    if started.tzinfo is None or now.tzinfo is None:
        raise ValueError("started and now must be timezone-aware")
    return delay_after((now - started).total_seconds(), polls, retry_after, backoff, draw)


def wait(
    poll: Callable[[], LastOperation],
    *,
    what: str,
    backoff: Backoff,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    draw: Callable[[], float] = lambda: 0.0,
) -> LastOperation:
    """For the Pulumi provider (blocking): poll until the operation succeeds or is gone. Raises
    ``OperationFailed`` on ``failed`` and ``OperationTimeout`` past ``backoff.max_duration``. Time is
    injectable so tests fake it instead of sleeping; ``draw`` (a random source, default: none) jitters the
    backoff."""
    start = clock()
    polls = 0
    while True:
        last = poll()
        polls += 1
        if last.gone or last.state == SUCCEEDED:
            return last
        if last.state == FAILED:
            raise OperationFailed(what, last.description)
        step = delay_after(clock() - start, polls, last.retry_after, backoff, draw())
        if step.expired:
            raise OperationTimeout(what, backoff.max_duration, last)
        sleep(step.delay)
