"""The HTTP client: one method per OSB v2.17 endpoint, no retries and no polling of its own.

Every request carries ``X-Broker-API-Version``, a fresh ``X-Broker-API-Request-Identity``, the configured
authentication and, for the requests a user causes, the originating identity. Answers become values
(``results``) and failures exceptions (``errors``); deciding what to do about them (poll, retry, mitigate) is
left to the caller, because the Pulumi provider blocks and a reconciler requeues.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Generator, Mapping
from typing import Any

import httpx

from opbroker.osbclient.config import Broker, OriginatingIdentity
from opbroker.osbclient.errors import (
    BrokerUnreachable,
    Gone,
    MalformedResponse,
    NotFound,
    ResponseLost,
    error_class,
)
from opbroker.osbclient.polling import parse_retry_after
from opbroker.osbclient.results import STATES, SUCCEEDED, BindingResult, InstanceResult, LastOperation

log = logging.getLogger(__name__)

#: Transport errors raised before the request left this process: the broker cannot have seen it.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol, httpx.ProxyError)


class _HeaderAuth(httpx.Auth):
    """Sets ``Authorization`` from the configured auth (basic or bearer); httpx redacts it in reprs."""

    def __init__(self, header: str) -> None:
        self._header = header

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = self._header
        yield request


class Client:
    """An OSB client bound to one broker. Use as a context manager: it owns an ``httpx.Client`` (a connection
    pool); a controller keeps one per broker and rebuilds it when the ``Broker`` value changes. ``transport``
    replaces the network (tests)."""

    def __init__(self, broker: Broker, *, transport: httpx.BaseTransport | None = None) -> None:
        self.broker = broker
        self._http = httpx.Client(
            base_url=broker.url.rstrip("/"),
            auth=_HeaderAuth(broker.auth.header()) if broker.auth is not None else None,
            timeout=httpx.Timeout(broker.timeout, connect=broker.connect_timeout),
            verify=broker.tls.ssl_context(),
            transport=transport,
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # -- catalog and instances ------------------------------------------------------------------------------

    def catalog(self) -> dict[str, Any]:
        """GET the catalog (sent without originating identity: no user asks for it)."""
        return self._request("GET", "/v2/catalog", what="catalog", ok=(200,), identity=None)[1]

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
        identity: OriginatingIdentity | None = None,
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
            identity=identity or self.broker.originating_identity,
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
        maintenance_info: Mapping[str, Any] | None = None,
        identity: OriginatingIdentity | None = None,
    ) -> InstanceResult:
        """PATCH the instance (accepts_incomplete): 200 done, 202 in progress."""
        body = _compact(
            service_id=service_id,
            plan_id=plan_id,
            parameters=parameters,
            previous_values=previous_values,
            context=context,
            maintenance_info=maintenance_info,
        )
        response, payload = self._request(
            "PATCH",
            f"/v2/service_instances/{instance_id}",
            what=f"update of instance {instance_id}",
            params={"accepts_incomplete": "true"},
            body=body,
            ok=(200, 202),
            identity=identity or self.broker.originating_identity,
        )
        return _instance(response.status_code, payload)

    def deprovision(
        self, instance_id: str, *, service_id: str, plan_id: str, identity: OriginatingIdentity | None = None
    ) -> InstanceResult:
        """DELETE the instance (accepts_incomplete): 200 done, 202 in progress, 410 already gone."""
        response, payload = self._request(
            "DELETE",
            f"/v2/service_instances/{instance_id}",
            what=f"deprovision of instance {instance_id}",
            params={"accepts_incomplete": "true", "service_id": service_id, "plan_id": plan_id},
            ok=(200, 202, 410),
            identity=identity or self.broker.originating_identity,
        )
        return _instance(response.status_code, payload)

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
                identity=self.broker.originating_identity,
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
        identity: OriginatingIdentity | None = None,
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
            identity=identity or self.broker.originating_identity,
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
            identity=self.broker.originating_identity,
        )
        return _binding(response.status_code, payload)

    def binding_last_operation(
        self, instance_id: str, binding_id: str, *, operation: str | None, service_id: str | None, plan_id: str | None
    ) -> LastOperation:
        """GET the binding's last_operation; a 410 comes back as ``gone`` (unbind finished)."""
        params = _compact(operation=operation, service_id=service_id, plan_id=plan_id)
        return self._last_operation(
            f"/v2/service_instances/{instance_id}/service_bindings/{binding_id}/last_operation",
            params,
            what=f"last_operation of binding {binding_id}",
        )

    def unbind(
        self,
        instance_id: str,
        binding_id: str,
        *,
        service_id: str,
        plan_id: str,
        identity: OriginatingIdentity | None = None,
    ) -> BindingResult:
        """DELETE the binding (accepts_incomplete): 200 done, 202 in progress, 410 already gone."""
        response, payload = self._request(
            "DELETE",
            f"/v2/service_instances/{instance_id}/service_bindings/{binding_id}",
            what=f"unbind {binding_id} from instance {instance_id}",
            params={"accepts_incomplete": "true", "service_id": service_id, "plan_id": plan_id},
            ok=(200, 202, 410),
            identity=identity or self.broker.originating_identity,
        )
        return _binding(response.status_code, payload)

    # -- the one request path ----------------------------------------------------------------------------------

    def _last_operation(self, path: str, params: Mapping[str, str], *, what: str) -> LastOperation:
        try:
            response, payload = self._request(
                "GET", path, what=what, params=params, ok=(200,), identity=self.broker.originating_identity
            )
        except Gone:
            return LastOperation(state=SUCCEEDED, gone=True)
        state = payload.get("state")
        if state not in STATES:
            raise MalformedResponse(response.status_code, None, f"unknown state {state!r}", what=what)
        return LastOperation(
            state=state,
            description=_str_or_none(payload.get("description")),
            retry_after=parse_retry_after(response.headers.get("Retry-After")),
        )

    def _headers(self, identity: OriginatingIdentity | None) -> dict[str, str]:
        headers = {
            "X-Broker-API-Version": self.broker.api_version,
            "X-Broker-API-Request-Identity": str(uuid.uuid4()),
        }
        if identity is not None:
            headers["X-Broker-API-Originating-Identity"] = identity.header()
        return headers

    def _request(
        self,
        method: str,
        path: str,
        *,
        what: str,
        identity: OriginatingIdentity | None,
        params: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
        ok: tuple[int, ...] = (200, 201, 202),
    ) -> tuple[httpx.Response, dict[str, Any]]:
        try:
            response = self._http.request(method, path, params=params, json=body, headers=self._headers(identity))
        except _NOT_SENT as exc:
            raise BrokerUnreachable(what, self._reason(exc), timed_out=isinstance(exc, httpx.TimeoutException)) from exc
        except httpx.TransportError as exc:
            raise ResponseLost(what, self._reason(exc), timed_out=isinstance(exc, httpx.TimeoutException)) from exc
        log.debug("OSB %s %s: %s", method, path, response.status_code)
        payload = _json_object(response)
        if response.status_code in ok:
            if payload is None and response.status_code == 410:
                return response, {}
            if payload is None:
                raise MalformedResponse(response.status_code, None, "the body is not a JSON object", what=what)
            return response, payload
        payload = payload or {}
        error, description = _str_or_none(payload.get("error")), _str_or_none(payload.get("description"))
        if not payload:
            description = response.text[:200] or None
        raise error_class(response.status_code)(
            response.status_code,
            self.broker.redact(error) if error else None,
            self.broker.redact(description) if description else None,
            what=what,
        )

    def _reason(self, exc: httpx.TransportError) -> str:
        return self.broker.redact(str(exc) or type(exc).__name__)


# -- decoding answers -------------------------------------------------------------------------------------------


def _compact(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _dict_or_none(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def _list_or_none(value: Any) -> list[Any] | None:
    return value if isinstance(value, list) else None


def _json_object(response: httpx.Response) -> dict[str, Any] | None:
    try:
        payload = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return payload if isinstance(payload, dict) else None


def _instance(status: int, payload: Mapping[str, Any]) -> InstanceResult:
    return InstanceResult(
        status,
        _str_or_none(payload.get("operation")),
        _str_or_none(payload.get("dashboard_url")),
        _dict_or_none(payload.get("metadata")),
    )


def _binding(status: int, payload: Mapping[str, Any]) -> BindingResult:
    return BindingResult(
        status=status,
        operation=_str_or_none(payload.get("operation")),
        credentials=_dict_or_none(payload.get("credentials")),
        syslog_drain_url=_str_or_none(payload.get("syslog_drain_url")),
        route_service_url=_str_or_none(payload.get("route_service_url")),
        volume_mounts=_list_or_none(payload.get("volume_mounts")),
        endpoints=_list_or_none(payload.get("endpoints")),
        parameters=_dict_or_none(payload.get("parameters")),
        metadata=_dict_or_none(payload.get("metadata")),
    )
