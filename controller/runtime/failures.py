"""The one table that maps a reconcile's exception to what the runtime does about it.

Every kind's reconcile runs under this table, so a failure is retried the same way whoever raised it:

============================================  ==========  ============================================
exception                                     handling    what the runtime does
============================================  ==========  ============================================
:class:`Conflict`, HTTP 409                   REREAD      drop the cached copy, reconcile again at once
transport errors, HTTP status 0 (TLS)         TRANSIENT   back off, one log line ("unreachable")
HTTP 429, 500, 502, 503, 504                  TRANSIENT   back off, one log line ("unavailable")
:class:`TemporaryError`                       TRANSIENT   back off, one log line (the reconciler's words)
anything else                                 ERROR       back off, log with traceback
============================================  ==========  ============================================

Operation-level accounting (count an error on the object, fail the operation past ``--error-threshold``) is
the reconciler's decision, taken before it raises; this table only decides how the key is retried.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

import urllib3
from kubernetes.client.exceptions import ApiException

from opbroker.controller.runtime.outcomes import Conflict, TemporaryError


class Handling(StrEnum):
    REREAD = "conflict"
    TRANSIENT = "transient"
    ERROR = "error"


@dataclass(frozen=True)
class Failure:
    handling: Handling
    label: str
    """The ``reason`` label of the reconcile-errors metric."""
    message: str


RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})


def _status(exc: BaseException) -> int | None:
    return exc.status if isinstance(exc, ApiException) else None


def unreachable(exc: BaseException) -> bool:
    """The server did not answer: a transport error, or the client's status-0 ApiException (its TLS errors)."""
    return isinstance(exc, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError) or _status(exc) == 0


def server_failing(exc: BaseException) -> bool:
    """The server did not answer or answered with a server error (5xx): it, not the request, is at fault.

    Multi-cluster placement uses this to suspect a sister cluster (and probe it) before the table retries.
    """
    status = _status(exc)
    return unreachable(exc) or (status is not None and status >= 500)


Row = tuple[Callable[[BaseException], bool], Handling, str, Callable[[BaseException], str]]

TABLE: tuple[Row, ...] = (
    (lambda e: isinstance(e, Conflict) or _status(e) == 409, Handling.REREAD, "conflict", lambda e: "conflict"),
    (
        unreachable,
        Handling.TRANSIENT,
        "unreachable",
        lambda e: f"the API server did not answer ({type(e).__name__})",
    ),
    (
        lambda e: _status(e) in RETRIED_STATUSES,
        Handling.TRANSIENT,
        "unavailable",
        lambda e: f"the API server answered HTTP {_status(e)}",
    ),
    (lambda e: isinstance(e, TemporaryError), Handling.TRANSIENT, "temporary", lambda e: str(e) or type(e).__name__),
)


def classify(exc: BaseException) -> Failure:
    """The first row of :data:`TABLE` that matches ``exc``; ERROR when none does."""
    for matches, handling, label, describe in TABLE:
        if matches(exc):
            return Failure(handling, label, describe(exc))
    return Failure(Handling.ERROR, "error", str(exc) or type(exc).__name__)


def namespace_terminating(exc: BaseException) -> bool:
    """True for the API server's refusal to create an object in a namespace that is being deleted."""
    if _status(exc) != 403:
        return False
    body = exc.body if isinstance(exc, ApiException) else None
    text = body.decode(errors="replace") if isinstance(body, bytes) else str(body or "")
    return "being terminated" in text or "NamespaceTerminating" in text
