"""OpenAPI documentation of the OSB routes: every status code a route can answer, its body and headers.

Kept apart from the routes so each route declaration stays one line of ``responses=...``; the fuzz test
(schemathesis) checks that the broker never answers a status, body or header left out here.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from opbroker.broker import bodies

REQUEST_IDENTITY = {
    "X-Broker-API-Request-Identity": {
        "description": "The request's X-Broker-API-Request-Identity, echoed.",
        "schema": {"type": "string"},
    }
}
RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before polling last_operation again (operation still in progress).",
        "schema": {"type": "string"},
    }
}

ERROR_TEXT = {
    400: "Malformed request, missing or empty mandatory field, unknown service/plan, parameters not matching "
    "the plan's schema (the description names each field), a malformed originating identity header, or "
    "(update, bind) an instance this broker does not have (InstanceDoesNotExist).",
    401: "Missing or wrong basic-auth credentials.",
    404: "No such object (or, for GET, still being provisioned/bound).",
    409: "An object with this id exists with different attributes.",
    410: "No such object (DELETE, last_operation without a pending deprovision/unbind): nothing to do.",
    412: "X-Broker-API-Version missing or not one of 2.12 to 2.17.",
    413: "The request body exceeds the broker's limit (--max-body-bytes, default 1 MiB); refused before parsing.",
    422: "AsyncRequired, ConcurrencyError, MaintenanceInfoConflict, RequiresApp, PlanChangeNotSupported, "
    "InstanceNotUsable or BindingsExist (see `error`).",
    500: "The operation failed (OperationFailed, with the controller's error) or the broker failed.",
    503: "The Kubernetes API or the broker's credentials are not available.",
    504: "A synchronous plan's operation did not finish within the broker's wait (OperationTimeout).",
}


def _entry(description: str, model: type[BaseModel] | None, *, retry_after: bool = False) -> dict[str, Any]:
    entry: dict[str, Any] = {"description": description, "headers": {**REQUEST_IDENTITY}}
    if retry_after:
        entry["headers"].update(RETRY_AFTER)
    if model is not None:
        entry["model"] = model
    return entry


def responses(
    *errors: int,
    ok: dict[int, tuple[str, type[BaseModel]]] | None = None,
    accepted: type[BaseModel] | None = None,
    ok_retry_after: bool = False,
) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` of a route: its successes, 202 if it can go asynchronous, and its errors."""
    docs: dict[int | str, dict[str, Any]] = {}
    for code, (text, model) in (ok or {}).items():
        docs[code] = _entry(text, model, retry_after=ok_retry_after)
    if accepted is not None:
        docs[202] = _entry("Accepted: poll last_operation with the returned operation.", accepted, retry_after=True)
    for code in (400, 401, 412, 413, *errors, 503):
        docs[code] = _entry(ERROR_TEXT[code], bodies.ErrorBody)
    return docs
