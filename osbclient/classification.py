"""Retry or give up: how a reconciler treats a failed broker call.

Retryable failures are those a later attempt can outlive: the broker was unreachable or did not answer, it
asked to slow down (408, 429), it failed (5xx), or it answered something unreadable. Every other 4xx is the
broker rejecting this request as it is: repeating it changes nothing until the spec changes, so the reconciler
should report it and wait for a new generation rather than requeue. One exception comes from the OSB spec
itself: ``422 ConcurrencyError`` ("another operation is in progress") says "resend the request at a later
time". A finished operation that failed, or ran past its polling limit, is the broker's verdict: permanent.
"""

from __future__ import annotations

from enum import StrEnum

from opbroker.osbclient.errors import BrokerError, MalformedResponse, OSBError, TransportFailure

#: 4xx statuses that mean "not now" rather than "not this".
_RETRYABLE_4XX = frozenset({408, 429})


class Failure(StrEnum):
    RETRYABLE = "retryable"
    PERMANENT = "permanent"


def classify(error: BrokerError) -> Failure:
    """Whether a reconciler should requeue (``RETRYABLE``) or stop until the resource changes (``PERMANENT``)."""
    if isinstance(error, TransportFailure | MalformedResponse):
        return Failure.RETRYABLE
    if isinstance(error, OSBError):
        if error.status in _RETRYABLE_4XX or 500 <= error.status <= 599:
            return Failure.RETRYABLE
        if error.status == 422 and error.error == "ConcurrencyError":
            return Failure.RETRYABLE
    return Failure.PERMANENT


def is_retryable(error: BrokerError) -> bool:
    return classify(error) is Failure.RETRYABLE
