"""Every way a broker request can fail, and the one place that maps a failure to an OSB status and body.

The core raises :class:`BrokerError` with a :class:`Reason`; :func:`to_response` turns it into the HTTP
status code and the OSB error body (``error``, ``description``, ``instance_usable``,
``update_repeatable``). The four error codes the specification reserves (``AsyncRequired``,
``ConcurrencyError``, ``MaintenanceInfoConflict``, ``RequiresApp``) are spelt exactly as it spells them;
the others are single camel-case words of our own, as the specification asks of the ``error`` field.

Pure: no I/O, no web framework.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Reason(StrEnum):
    """Why a request failed. The value is the OSB ``error`` code sent to the client."""

    BAD_REQUEST = "BadRequest"
    UNAUTHORIZED = "Unauthorized"
    NOT_FOUND = "NotFound"
    INSTANCE_DOES_NOT_EXIST = "InstanceDoesNotExist"
    CONFLICT = "Conflict"
    GONE = "Gone"
    API_VERSION = "UnsupportedApiVersion"
    ASYNC_REQUIRED = "AsyncRequired"
    CONCURRENCY_ERROR = "ConcurrencyError"
    MAINTENANCE_INFO_CONFLICT = "MaintenanceInfoConflict"
    REQUIRES_APP = "RequiresApp"
    PLAN_CHANGE_NOT_SUPPORTED = "PlanChangeNotSupported"
    INSTANCE_NOT_USABLE = "InstanceNotUsable"
    BINDINGS_EXIST = "BindingsExist"
    OPERATION_FAILED = "OperationFailed"
    OPERATION_TIMEOUT = "OperationTimeout"
    INTERNAL_ERROR = "InternalError"
    UNAVAILABLE = "Unavailable"


#: THE mapping from a failure to its HTTP status code. Nothing else in the broker picks error statuses.
STATUS: dict[Reason, int] = {
    Reason.BAD_REQUEST: 400,
    Reason.UNAUTHORIZED: 401,
    Reason.NOT_FOUND: 404,
    # Update and bind list no 404: a request naming an instance the broker does not have carries invalid
    # data (400), and repeating it cannot succeed — unlike 422, which says "not now".
    Reason.INSTANCE_DOES_NOT_EXIST: 400,
    Reason.CONFLICT: 409,
    Reason.GONE: 410,
    Reason.API_VERSION: 412,
    Reason.ASYNC_REQUIRED: 422,
    Reason.CONCURRENCY_ERROR: 422,
    Reason.MAINTENANCE_INFO_CONFLICT: 422,
    Reason.REQUIRES_APP: 422,
    Reason.PLAN_CHANGE_NOT_SUPPORTED: 422,
    Reason.INSTANCE_NOT_USABLE: 422,
    Reason.BINDINGS_EXIST: 422,
    Reason.OPERATION_FAILED: 500,
    Reason.INTERNAL_ERROR: 500,
    Reason.UNAVAILABLE: 503,
    Reason.OPERATION_TIMEOUT: 504,
}

#: Reasons whose body is ``{}``: the OSB clients treat them as "nothing (left) to do".
EMPTY_BODY = frozenset({Reason.GONE})


@dataclass(eq=False)
class BrokerError(Exception):
    """A request the broker refuses or could not complete. 4xx reasons guarantee nothing was changed."""

    reason: Reason
    description: str
    instance_usable: bool | None = None
    update_repeatable: bool | None = None

    def __str__(self) -> str:
        return f"{self.reason.value}: {self.description}"


def bad_request(description: str) -> BrokerError:
    return BrokerError(Reason.BAD_REQUEST, description)


def require_query(name: str, value: str | None) -> str:
    """The query parameter's value; 400 if it is missing or empty (DELETE must name service_id and plan_id)."""
    if not value:
        raise bad_request(f"the {name} query parameter is required and must not be empty")
    return value


def to_response(error: BrokerError) -> tuple[int, dict[str, Any]]:
    """The HTTP status and OSB error body for ``error``."""
    status = STATUS[error.reason]
    if error.reason in EMPTY_BODY:
        return status, {}
    body: dict[str, Any] = {"error": error.reason.value, "description": error.description or error.reason.value}
    if error.instance_usable is not None:
        body["instance_usable"] = error.instance_usable
    if error.update_repeatable is not None:
        body["update_repeatable"] = error.update_repeatable
    return status, body


def http_body(status: int, description: str) -> dict[str, Any]:
    """The OSB error body for an HTTP error raised outside the core (routing, body parsing): same shape."""
    names = {400: "BadRequest", 401: "Unauthorized", 404: "NotFound", 405: "MethodNotAllowed", 413: "TooLarge"}
    return {"error": names.get(status, "HttpError" if status < 500 else "InternalError"), "description": description}
