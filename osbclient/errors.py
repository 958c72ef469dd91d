"""Everything the client raises, by what went wrong: the broker answered an error status (``OSBError`` and
one subclass per status OSB gives a meaning), answered a success the client cannot read
(``MalformedResponse``), could not be reached or did not answer (``TransportFailure``), or an asynchronous
operation ended badly (``OperationFailed``, ``OperationTimeout``).

The split matters to callers: orphan mitigation (``mitigation``) and retrying (``classification``) both decide
by these classes. Messages say what was being done and what the broker said, with the broker's secrets
redacted by the client before they get here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opbroker.osbclient.results import LastOperation


class BrokerError(Exception):
    """Base of everything raised about a broker call; ``what`` names the call (``provision of instance x``)."""

    def __init__(self, what: str, message: str) -> None:
        self.what = what
        super().__init__(message)


class OSBError(BrokerError):
    """The broker answered with an error status (or a success status with an unusable body)."""

    def __init__(self, status: int, error: str | None, description: str | None, *, what: str) -> None:
        self.status = status
        self.error = error
        """The OSB error code (``AsyncRequired``, ``ConcurrencyError``, ...), when the broker sent one."""
        self.description = description
        detail = ": ".join(p for p in (error, description) if p) or "no description"
        super().__init__(what, f"{what}: broker answered {status} ({detail})")


class BadRequest(OSBError):
    """400: the request is malformed or missing fields."""


class Unauthorized(OSBError):
    """401: wrong or missing credentials."""


class Forbidden(OSBError):
    """403: the credentials are valid but may not do this."""


class NotFound(OSBError):
    """404: not found (for the GETs: also "still being provisioned")."""


class RequestTimeout(OSBError):
    """408: the broker gave up waiting for the request; OSB says it was not received (no orphan)."""


class Conflict(OSBError):
    """409: the same id exists with different attributes."""


class Gone(OSBError):
    """410: the instance or binding does not exist (any more)."""


class PreconditionFailed(OSBError):
    """412: the broker does not support this ``X-Broker-API-Version``."""


class Unprocessable(OSBError):
    """422: ``AsyncRequired``, ``ConcurrencyError``, ``MaintenanceInfoConflict``, ``RequiresApp``..."""


class TooManyRequests(OSBError):
    """429: the broker is rate limiting this platform."""


class ServerError(OSBError):
    """5xx: the broker failed; what it did before failing is unknown."""


class MalformedResponse(OSBError):
    """A success status with a body that is not what OSB promises (not a JSON object, an unknown state)."""


BY_STATUS: dict[int, type[OSBError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    408: RequestTimeout,
    409: Conflict,
    410: Gone,
    412: PreconditionFailed,
    422: Unprocessable,
    429: TooManyRequests,
}


def error_class(status: int) -> type[OSBError]:
    """The exception class for an error status: the specific one, ``ServerError`` for 5xx, else the base."""
    if status in BY_STATUS:
        return BY_STATUS[status]
    return ServerError if 500 <= status <= 599 else OSBError


class TransportFailure(BrokerError):
    """No usable HTTP answer: the connection failed, timed out or broke. ``timed_out`` tells timeouts apart."""

    def __init__(self, what: str, reason: str, *, timed_out: bool) -> None:
        self.reason = reason
        self.timed_out = timed_out
        super().__init__(what, f"{what}: {self.summary} ({reason})")

    summary = "the broker did not answer"


class BrokerUnreachable(TransportFailure):
    """The request never reached the broker (connection refused, DNS, TLS handshake, connect timeout): the
    broker cannot have acted on it."""

    summary = "could not reach the broker"


class ResponseLost(TransportFailure):
    """The request was sent, then the answer never came (read timeout, connection dropped): the broker may
    have acted on it. This is OSB's "Timeout" row in the orphan mitigation table."""

    summary = "the request was sent but no answer came back"


class NotInVersion(BrokerError):
    """The call needs something the OSB version the broker speaks does not define (a GET of a binding, or
    asynchronous bindings, before 2.14): nothing was sent. Permanent for that broker."""

    def __init__(self, what: str, feature: str, since: str, version: str) -> None:
        self.feature = feature
        self.version = version
        super().__init__(what, f"{what}: {feature} needs OSB {since} or later; the broker speaks {version}")


class OperationFailed(BrokerError):
    """An asynchronous operation ended with ``state: failed``."""

    def __init__(self, what: str, description: str | None) -> None:
        self.description = description
        super().__init__(what, f"{what} failed: {description or 'the broker gave no description'}")


class OperationTimeout(BrokerError):
    """An asynchronous operation was still in progress when the maximum polling duration ran out; OSB says
    its state must then be considered failed."""

    def __init__(self, what: str, timeout: float, last: LastOperation | None) -> None:
        self.timeout = timeout
        self.last = last
        state = f" (last state: {last.state!r}, {last.description or 'no description'})" if last else ""
        super().__init__(what, f"{what} did not finish within {timeout:g}s{state}")
