"""What a reconcile tells the runtime, and the two exceptions every reconciler may raise."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Outcome:
    """What a reconcile asks of the queue: nothing, or a re-check after ``requeue_after`` seconds."""

    requeue_after: float | None = None


DONE = Outcome()
"""The object is as it should be; only a watch event brings it back."""


def requeue(seconds: float) -> Outcome:
    return Outcome(requeue_after=seconds)


class TemporaryError(Exception):
    """An expected, explained failure: retried with backoff and logged as one line, without a traceback."""


class Conflict(Exception):
    """The object changed between our read and our guarded write (HTTP 409): the reconcile is repeated at once
    on the newer version, read from the API."""
