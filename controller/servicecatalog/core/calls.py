"""The actions of the Service Catalog kinds' own, beside the executor's generic ones, and their pacing.

* :class:`Call`: one request to a broker. Its effect (``servicecatalog.effects``) sends it through
  ``osbclient`` and hands the answer — a result or the :class:`osbclient.BrokerError` it raised — with the
  object as last written to ``then``, a *pure* function of the kind's plan that returns the actions that
  follow; the effect performs them and decides nothing.
* :class:`KeepPacing`: what is remembered of a key's operation between reconciles (:class:`Pacing`: polls
  made, when the next poll is due on the monotonic clock, transient failures in a row). Lost on a restart,
  which then polls at once and starts the backoff over.

The pacing decisions are pure functions of a :class:`Pacing`, the clock's reading and a random draw (facts: the
edge draws once per reconcile from the policy table's source; its ``broker_polls`` and ``broker_retries`` are the
backoffs), returning actions: :func:`accepted`, :func:`early`, :func:`scheduled`, :func:`retried`, :func:`succeeded`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from opbroker import osbclient
from opbroker.controller.core import actions as a
from opbroker.controller.runtime.policies import DEFAULTS
from opbroker.kubeclient.wire import JsonObject

#: A wait shorter than this is no wait: the poll is made now (a requeue's timer is not that exact).
DUE_SLACK = 0.05

Answer = Any
"""What a broker call came back with: its result, or the ``osbclient.BrokerError`` it raised."""
Then = Callable[[Answer, JsonObject], Sequence[Any]]
"""The pure continuation of a call: (answer, the object as last written) -> the actions that follow."""


@dataclass(frozen=True)
class Call:
    """Send ``method`` (an :class:`osbclient.Client` method) to ``broker`` with these arguments; perform what
    ``then`` makes of the answer. The arguments may hold parameters (never logged: ``repr=False``)."""

    broker: osbclient.Broker = field(repr=False)
    method: str
    args: tuple[Any, ...] = field(default=(), repr=False)
    kwargs: Mapping[str, object] = field(default_factory=dict, repr=False)
    then: Then | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class Pacing:
    """What is remembered of one key's operation."""

    polls: int = 0
    due: float | None = None
    """When the next poll is due (monotonic seconds); None: now."""
    retries: int = 0


@dataclass(frozen=True)
class KeepPacing:
    """Remember ``pacing`` for the reconciled key."""

    pacing: Pacing


def accepted(pacing: Pacing, polls: osbclient.Backoff, monotonic: float, draw: float = 0.0) -> list[Any]:
    """The broker accepted an operation (202): the first poll after the pacing's base (jittered by ``draw``)."""
    return scheduled(replace(pacing, polls=0), polls.delay(1, draw), monotonic)


def early(pacing: Pacing, monotonic: float) -> list[Any] | None:
    """A requeue for the rest of the wait when the poll is not due yet (woken by a watch event, an older
    re-check), else None: poll now. ``Retry-After`` and the backoff hold however often the key is queued."""
    wait = 0.0 if pacing.due is None else pacing.due - monotonic
    return [a.Requeue(wait)] if wait > DUE_SLACK else None


def scheduled(pacing: Pacing, delay: float, monotonic: float) -> list[Any]:
    """Poll again after ``delay``."""
    return [KeepPacing(replace(pacing, due=monotonic + delay)), a.Requeue(delay)]


def retried(pacing: Pacing, backoff: osbclient.Backoff = DEFAULTS.broker_retries, draw: float = 0.0) -> list[Any]:
    """One more transient failure in a row: try again after the backoff's delay for that count (jittered by
    ``draw``)."""
    count = pacing.retries + 1
    return [KeepPacing(replace(pacing, retries=count)), a.Requeue(backoff.delay(count, draw))]


def succeeded(pacing: Pacing) -> list[Any]:
    """The operation succeeded: the transient failures are forgotten."""
    return [KeepPacing(replace(pacing, retries=0))] if pacing.retries else []
