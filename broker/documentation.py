"""OpenAPI documentation of the OSB and admin routes: every status code a route can answer, its body and headers.

Kept apart from the routes so each route declaration stays one line of ``responses=...``; the fuzz test
(schemathesis) checks that the broker never answers a status, body or header left out here.
"""

from __future__ import annotations

import json

from pydantic import BaseModel

from opbroker.broker import bodies
from opbroker.kubeclient.wire import JsonBody, mapping_of, path_of

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


def _entry(description: str, model: type[BaseModel] | None, *, retry_after: bool = False) -> JsonBody:
    headers: JsonBody = {**REQUEST_IDENTITY, **(RETRY_AFTER if retry_after else {})}
    entry: JsonBody = {"description": description, "headers": headers}
    if model is not None:
        entry["model"] = model
    return entry


def responses(
    *errors: int,
    ok: dict[int, tuple[str, type[BaseModel]]] | None = None,
    accepted: type[BaseModel] | None = None,
    ok_retry_after: bool = False,
) -> dict[int | str, JsonBody]:
    """The ``responses`` of a route: its successes, 202 if it can go asynchronous, and its errors."""
    docs: dict[int | str, JsonBody] = {}
    for code, (text, model) in (ok or {}).items():
        docs[code] = _entry(text, model, retry_after=ok_retry_after)
    if accepted is not None:
        docs[202] = _entry("Accepted: poll last_operation with the returned operation.", accepted, retry_after=True)
    for code in (400, 401, 412, 413, *errors, 503):
        docs[code] = _entry(ERROR_TEXT[code], bodies.ErrorBody)
    return docs


ADMIN_ERROR_TEXT = {
    400: "Malformed request: a parameter or body field out of its schema (the description names each field).",
    401: "Missing or wrong admin credentials (the OSB platform's are refused here).",
    404: "No such SFPlan in the control-plane namespace, or no preview / rollout of it.",
    409: "A rollout of the plan is unfinished, or the request changed meanwhile: cancel, wait or try again.",
    413: "The request body, or the proposed plan, exceeds the broker's limit.",
    500: "The recorded request or the controller's answer could not be read, or the Kubernetes API failed.",
    503: "The admin credentials are not available.",
}


def admin_responses(*errors: int, polled: bool = False) -> dict[int | str, JsonBody]:
    """The error answers of an admin route, beside the ones every admin route can give (400, 401, 500, 503);
    ``polled``: the route reads a request back, 202 while the controller has not finished it."""
    docs: dict[int | str, JsonBody] = {}
    if polled:
        docs[202] = _entry("Not finished: the progress so far; read again after Retry-After.", None, retry_after=True)
    for code in sorted({400, 401, *errors, 500, 503}):
        docs[code] = _entry(ADMIN_ERROR_TEXT[code], bodies.ErrorBody)
    return docs


#: The schema FastAPI documents its own validation answer with.
FASTAPI_VALIDATION = "#/components/schemas/HTTPValidationError"


def without_fastapi_validation(document: JsonBody) -> JsonBody:
    """``document`` without the 422 "Validation Error" FastAPI adds to every route with parameters: the broker
    answers an invalid request 400 (OSB's BadRequest, documented on every route), never FastAPI's 422 — a 422 left
    documented would tell a client to expect a body it never gets. A route's own 422 (OSB's) stays."""
    for operations in mapping_of(document.get("paths")).values():
        for operation in mapping_of(operations).values():
            answers = mapping_of(operation).get("responses")
            schema = path_of(answers, "422", "content", "application/json", "schema")
            if isinstance(answers, dict) and mapping_of(schema).get("$ref") == FASTAPI_VALIDATION:
                del answers["422"]
    if FASTAPI_VALIDATION not in json.dumps(document.get("paths", {})):
        schemas = path_of(document, "components", "schemas")
        if isinstance(schemas, dict):
            for name in ("HTTPValidationError", "ValidationError"):
                schemas.pop(name, None)
    return document
