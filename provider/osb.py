"""A small client for any Open Service Broker (API v2.17): one method per endpoint, plus polling.

Pure apart from the HTTP calls, which all go through one ``httpx.Client`` (injectable: tests pass a
transport or point it at a local broker). Every request carries basic auth, ``X-Broker-API-Version`` and a
fresh ``X-Broker-API-Request-Identity``. Errors map by status to exception classes; ``wait`` polls
``last_operation`` with backoff, honours ``Retry-After`` and gives up after a timeout. Time is injectable,
so tests fake it instead of sleeping.
"""

from __future__ import annotations

import base64
import email.utils
import json
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx

API_VERSION = "2.17"

#: last_operation states (OSB spelling).
IN_PROGRESS = "in progress"
SUCCEEDED = "succeeded"
FAILED = "failed"


@dataclass(frozen=True)
class Broker:
    """Where a broker is and how to authenticate against it."""

    url: str
    username: str
    password: str = field(repr=False)
    api_version: str = API_VERSION
    timeout: float = 30.0
    """Seconds for one HTTP request (polling has its own timeout)."""
    originating_identity: Mapping[str, Any] | None = None
    """Sent as ``X-Broker-API-Originating-Identity: pulumi <base64 json>`` when given."""


# -- errors --------------------------------------------------------------------------------------------------


class OSBError(Exception):
    """The broker answered with an error status (or an unusable body)."""

    def __init__(self, status: int, error: str | None, description: str | None, *, operation: str) -> None:
        self.status = status
        self.error = error
        self.description = description
        self.operation = operation
        detail = ": ".join(p for p in (error, description) if p) or "no description"
        super().__init__(f"{operation}: broker answered {status} ({detail})")


class BadRequest(OSBError):
    """400: the request is malformed or missing fields."""


class Unauthorized(OSBError):
    """401: wrong credentials."""


class NotFound(OSBError):
    """404: not found (a binding or instance still being provisioned, for retrievable GETs)."""


class Conflict(OSBError):
    """409: the same id exists with different attributes."""


class Gone(OSBError):
    """410: the instance or binding does not exist (any more)."""


class PreconditionFailed(OSBError):
    """412: the broker does not support this ``X-Broker-API-Version``."""


class Unprocessable(OSBError):
    """422: ``AsyncRequired``, ``ConcurrencyError``, ``MaintenanceInfoConflict``, ``RequiresApp``..."""


class MalformedResponse(OSBError):
    """A success status with a body that is not what OSB promises."""


_BY_STATUS: dict[int, type[OSBError]] = {
    400: BadRequest,
    401: Unauthorized,
    404: NotFound,
    409: Conflict,
    410: Gone,
    412: PreconditionFailed,
    422: Unprocessable,
}


class OperationFailed(Exception):
    """An asynchronous operation ended with ``state: failed``."""

    def __init__(self, what: str, description: str | None) -> None:
        self.what = what
        self.description = description
        super().__init__(f"{what} failed: {description or 'the broker gave no description'}")


class OperationTimeout(Exception):
    """An asynchronous operation was still in progress when the polling timeout ran out."""

    def __init__(self, what: str, timeout: float, last: LastOperation | None) -> None:
        self.what = what
        self.timeout = timeout
        self.last = last
        state = f" (last state: {last.state!r}, {last.description or 'no description'})" if last else ""
        super().__init__(f"{what} did not finish within {timeout:g}s{state}")


# -- results ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InstanceResult:
    """Answer to provision, update or deprovision."""

    status: int
    operation: str | None = None
    dashboard_url: str | None = None

    @property
    def is_async(self) -> bool:
        return self.status == 202

    @property
    def gone(self) -> bool:
        return self.status == 410


@dataclass(frozen=True)
class BindingResult:
    """Answer to bind, unbind or a binding GET."""

    status: int
    operation: str | None = None
    credentials: dict[str, Any] | None = field(default=None, repr=False)
    syslog_drain_url: str | None = None
    route_service_url: str | None = None
    volume_mounts: list[Any] | None = None
    parameters: dict[str, Any] | None = None

    @property
    def is_async(self) -> bool:
        return self.status == 202

    @property
    def gone(self) -> bool:
        return self.status == 410


@dataclass(frozen=True)
class LastOperation:
    """Answer to a last_operation poll; ``gone`` when the broker said 410."""

    state: str
    description: str | None = None
    retry_after: float | None = None
    gone: bool = False


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


# -- the client ------------------------------------------------------------------------------------------------


class Client:
    """An OSB client bound to one broker. Use as a context manager (it owns an ``httpx.Client``)."""

    def __init__(self, broker: Broker, *, transport: httpx.BaseTransport | None = None) -> None:
        self.broker = broker
        self._http = httpx.Client(
            base_url=broker.url.rstrip("/"),
            auth=httpx.BasicAuth(broker.username, broker.password),
            timeout=broker.timeout,
            transport=transport,
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _headers(self) -> dict[str, str]:
        headers = {
            "X-Broker-API-Version": self.broker.api_version,
            "X-Broker-API-Request-Identity": str(uuid.uuid4()),
        }
        if self.broker.originating_identity:
            encoded = base64.b64encode(json.dumps(dict(self.broker.originating_identity)).encode()).decode()
            headers["X-Broker-API-Originating-Identity"] = f"pulumi {encoded}"
        return headers

    def _request(
        self,
        method: str,
        path: str,
        *,
        what: str,
        params: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
        ok: tuple[int, ...] = (200, 201, 202),
    ) -> tuple[httpx.Response, dict[str, Any]]:
        response = self._http.request(method, path, params=params, json=body, headers=self._headers())
        payload = _json_object(response)
        if response.status_code in ok:
            if payload is None and response.status_code == 410:
                return response, {}
            if payload is None:
                raise MalformedResponse(response.status_code, None, "the body is not a JSON object", operation=what)
            return response, payload
        payload = payload or {}
        error_class = _BY_STATUS.get(response.status_code, OSBError)
        raise error_class(
            response.status_code,
            _str_or_none(payload.get("error")),
            _str_or_none(payload.get("description")) or (response.text[:200] if not payload else None),
            operation=what,
        )

    # -- catalog and instances ------------------------------------------------------------------------------

    def catalog(self) -> dict[str, Any]:
        return self._request("GET", "/v2/catalog", what="catalog", ok=(200,))[1]

    def provision(
        self,
        instance_id: str,
        *,
        service_id: str,
        plan_id: str,
        organization_guid: str,
        space_guid: str,
        parameters: Mapping[str, Any] | None = None,
        context: Mapping[str, Any] | None = None,
        maintenance_info: Mapping[str, Any] | None = None,
    ) -> InstanceResult:
        """PUT the instance (accepts_incomplete): 201 created, 200 identical exists, 202 in progress."""
        body = _compact(
            service_id=service_id,
            plan_id=plan_id,
            organization_guid=organization_guid,
            space_guid=space_guid,
            parameters=parameters,
            context=context,
            maintenance_info=maintenance_info,
        )
        response, payload = self._request(
            "PUT",
            f"/v2/service_instances/{instance_id}",
            what=f"provision of instance {instance_id}",
            params={"accepts_incomplete": "true"},
            body=body,
        )
        return _instance(response.status_code, payload)

    def update(
        self,
        instance_id: str,
        *,
        service_id: str,
        plan_id: str | None = None,
        parameters: Mapping[str, Any] | None = None,
        previous_values: Mapping[str, Any] | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> InstanceResult:
        """PATCH the instance (accepts_incomplete): 200 done, 202 in progress."""
        body = _compact(
            service_id=service_id,
            plan_id=plan_id,
            parameters=parameters,
            previous_values=previous_values,
            context=context,
        )
        response, payload = self._request(
            "PATCH",
            f"/v2/service_instances/{instance_id}",
            what=f"update of instance {instance_id}",
            params={"accepts_incomplete": "true"},
            body=body,
            ok=(200, 202),
        )
        return _instance(response.status_code, payload)

    def deprovision(self, instance_id: str, *, service_id: str, plan_id: str) -> InstanceResult:
        """DELETE the instance (accepts_incomplete): 200 done, 202 in progress, 410 already gone."""
        response, payload = self._request(
            "DELETE",
            f"/v2/service_instances/{instance_id}",
            what=f"deprovision of instance {instance_id}",
            params={"accepts_incomplete": "true", "service_id": service_id, "plan_id": plan_id},
            ok=(200, 202, 410),
        )
        return InstanceResult(response.status_code, _str_or_none(payload.get("operation")))

    def get_instance(
        self, instance_id: str, *, service_id: str | None = None, plan_id: str | None = None
    ) -> dict[str, Any] | None:
        """GET the instance (``instances_retrievable``): what the broker holds now; None when it does not exist
        (404, 410). A broker that does not serve the fetch answers 400 (or another error): that is raised."""
        try:
            return self._request(
                "GET",
                f"/v2/service_instances/{instance_id}",
                what=f"fetch of instance {instance_id}",
                params=_compact(service_id=service_id, plan_id=plan_id),
                ok=(200,),
            )[1]
        except (NotFound, Gone):
            return None

    def last_operation(
        self, instance_id: str, *, operation: str | None, service_id: str | None, plan_id: str | None
    ) -> LastOperation:
        """GET the instance's last_operation; a 410 comes back as ``gone`` (deprovision finished)."""
        params = _compact(operation=operation, service_id=service_id, plan_id=plan_id)
        return self._last_operation(
            f"/v2/service_instances/{instance_id}/last_operation", params, what=f"last_operation of {instance_id}"
        )

    # -- bindings ----------------------------------------------------------------------------------------------

    def bind(
        self,
        instance_id: str,
        binding_id: str,
        *,
        service_id: str,
        plan_id: str,
        parameters: Mapping[str, Any] | None = None,
        bind_resource: Mapping[str, Any] | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> BindingResult:
        """PUT the binding (accepts_incomplete): 201 created, 200 identical exists, 202 in progress."""
        body = _compact(
            service_id=service_id,
            plan_id=plan_id,
            parameters=parameters,
            bind_resource=bind_resource,
            context=context,
        )
        response, payload = self._request(
            "PUT",
            f"/v2/service_instances/{instance_id}/service_bindings/{binding_id}",
            what=f"bind {binding_id} to instance {instance_id}",
            params={"accepts_incomplete": "true"},
            body=body,
        )
        return _binding(response.status_code, payload)

    def get_binding(
        self, instance_id: str, binding_id: str, *, service_id: str | None = None, plan_id: str | None = None
    ) -> BindingResult:
        """GET the binding (``bindings_retrievable``): how async bindings hand over their credentials."""
        response, payload = self._request(
            "GET",
            f"/v2/service_instances/{instance_id}/service_bindings/{binding_id}",
            what=f"fetch of binding {binding_id}",
            params=_compact(service_id=service_id, plan_id=plan_id),
            ok=(200,),
        )
        return _binding(response.status_code, payload)

    def binding_last_operation(
        self, instance_id: str, binding_id: str, *, operation: str | None, service_id: str | None, plan_id: str | None
    ) -> LastOperation:
        params = _compact(operation=operation, service_id=service_id, plan_id=plan_id)
        return self._last_operation(
            f"/v2/service_instances/{instance_id}/service_bindings/{binding_id}/last_operation",
            params,
            what=f"last_operation of binding {binding_id}",
        )

    def unbind(self, instance_id: str, binding_id: str, *, service_id: str, plan_id: str) -> BindingResult:
        """DELETE the binding (accepts_incomplete): 200 done, 202 in progress, 410 already gone."""
        response, payload = self._request(
            "DELETE",
            f"/v2/service_instances/{instance_id}/service_bindings/{binding_id}",
            what=f"unbind {binding_id} from instance {instance_id}",
            params={"accepts_incomplete": "true", "service_id": service_id, "plan_id": plan_id},
            ok=(200, 202, 410),
        )
        return _binding(response.status_code, payload)

    def _last_operation(self, path: str, params: Mapping[str, str], *, what: str) -> LastOperation:
        try:
            response, payload = self._request("GET", path, what=what, params=params, ok=(200,))
        except Gone:
            return LastOperation(state=SUCCEEDED, gone=True)
        state = payload.get("state")
        if state not in (IN_PROGRESS, SUCCEEDED, FAILED):
            raise MalformedResponse(response.status_code, None, f"unknown state {state!r}", operation=what)
        return LastOperation(
            state=state,
            description=_str_or_none(payload.get("description")),
            retry_after=parse_retry_after(response.headers.get("Retry-After")),
        )


# -- polling -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Polling:
    """How long and how often to poll: backoff from ``interval`` doubling up to ``max_interval``; a
    ``Retry-After`` from the broker replaces the backoff delay for that poll."""

    timeout: float = 1800.0
    interval: float = 2.0
    max_interval: float = 30.0
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


def wait(poll: Callable[[], LastOperation], *, what: str, polling: Polling) -> LastOperation:
    """Poll until the operation succeeds (or is gone); raise OperationFailed or OperationTimeout otherwise."""
    deadline = polling.clock() + polling.timeout
    delay = polling.interval
    last: LastOperation | None = None
    while True:
        last = poll()
        if last.gone or last.state == SUCCEEDED:
            return last
        if last.state == FAILED:
            raise OperationFailed(what, last.description)
        remaining = deadline - polling.clock()
        if remaining <= 0:
            raise OperationTimeout(what, polling.timeout, last)
        pause = last.retry_after if last.retry_after is not None else delay
        polling.sleep(min(pause, remaining))
        delay = min(delay * 2, polling.max_interval)


# -- helpers ---------------------------------------------------------------------------------------------------


def _compact(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _json_object(response: httpx.Response) -> dict[str, Any] | None:
    try:
        payload = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return payload if isinstance(payload, dict) else None


def _instance(status: int, payload: Mapping[str, Any]) -> InstanceResult:
    return InstanceResult(status, _str_or_none(payload.get("operation")), _str_or_none(payload.get("dashboard_url")))


def _binding(status: int, payload: Mapping[str, Any]) -> BindingResult:
    credentials = payload.get("credentials")
    return BindingResult(
        status=status,
        operation=_str_or_none(payload.get("operation")),
        credentials=credentials if isinstance(credentials, dict) else None,
        syslog_drain_url=_str_or_none(payload.get("syslog_drain_url")),
        route_service_url=_str_or_none(payload.get("route_service_url")),
        volume_mounts=payload.get("volume_mounts") if isinstance(payload.get("volume_mounts"), list) else None,
        parameters=payload.get("parameters") if isinstance(payload.get("parameters"), dict) else None,
    )
