"""The HTTP client: one method per OSB endpoint (2.13 … 2.17), no retries and no polling of its own.

Every request carries ``X-Broker-API-Version``, the configured authentication and, for the requests a user
causes, the originating identity (and from 2.15 a fresh ``X-Broker-API-Request-Identity``). Answers become
values (``results``) and failures exceptions (``errors``); deciding what to do about them (poll, retry,
mitigate) is left to the caller, because the Pulumi provider blocks and a reconciler requeues.

Version negotiation (``versions``): the client starts at ``Broker.api_version``; a ``412`` (the broker does not
speak that version, and so did nothing) makes it send the same request again one version lower, shaped for
that version, down to 2.13. The version that worked is kept in ``Client.version`` for every later request of
this client (never raised again: a caller that wants to probe upward builds a new client) so that a caller can
record it. Answers are read the tolerant way (``tolerance``): what a field of the wrong type was dropped
from an answer is in the result's ``warnings``.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Callable, Generator, Mapping
from typing import Any

import httpx

from opbroker.osbclient import catalog as catalogs
from opbroker.osbclient import paths, tolerance, versions
from opbroker.osbclient.config import Broker, OriginatingIdentity
from opbroker.osbclient.errors import (
    BrokerUnreachable,
    Gone,
    MalformedResponse,
    NotFound,
    NotInVersion,
    PreconditionFailed,
    ResponseLost,
    error_class,
)
from opbroker.osbclient.polling import parse_retry_after
from opbroker.osbclient.results import STATES, SUCCEEDED, BindingResult, InstanceResult, LastOperation
from opbroker.osbclient.versions import Feature

#: The longest ``operation`` a broker may return (OSB 2.15: 10,000 characters); a longer one is dropped.
MAX_OPERATION = 10_000
#: What the request path asks of each version: the query parameters and the body to send in it.
Shape = Callable[[str], tuple[Mapping[str, str] | None, Mapping[str, Any] | None]]

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
        self.version = broker.api_version
        """The version spoken now: ``broker.api_version`` until a 412 made the client step down."""
        self._lock = threading.Lock()
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
        """GET the catalog (sent without originating identity: no user asks for it), as sent."""
        return self._request("GET", "/v2/catalog", what="catalog", ok=(200,), identity=None)[1]

    def read_catalog(self) -> catalogs.Catalog:
        """GET the catalog and read it entry by entry (``catalog.read``) as the version spoken defines it: odd
        entries are skipped and reported in ``Catalog.problems``, not raised."""
        payload = self.catalog()
        try:
            return catalogs.read(payload, self.version)
        except catalogs.NotACatalog as exc:
            raise MalformedResponse(200, None, str(exc), what="catalog") from exc

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
        """PUT the instance (accepts_incomplete): 201 created, 200 identical exists, 202 in progress.
        ``maintenance_info`` is sent only to a broker speaking 2.15 or later."""

        def shape(version: str) -> tuple[Mapping[str, str], Mapping[str, Any]]:
            body = _compact(
                service_id=service_id,
                plan_id=plan_id,
                organization_guid=organization_guid,
                space_guid=space_guid,
                parameters=parameters,
                context=context,
                maintenance_info=maintenance_info if versions.defines(version, Feature.MAINTENANCE_INFO) else None,
            )
            return {"accepts_incomplete": "true"}, body

        response, payload, version = self._request(
            "PUT",
            paths.instance(instance_id),
            what=f"provision of instance {instance_id}",
            shape=shape,
            identity=identity or self.broker.originating_identity,
        )
        return _instance(response.status_code, payload, version)

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
        """PATCH the instance (accepts_incomplete): 200 done, 202 in progress. ``maintenance_info`` (also in
        ``previous_values``) is sent only to a broker speaking 2.15 or later."""

        def shape(version: str) -> tuple[Mapping[str, str], Mapping[str, Any]]:
            maintenance = versions.defines(version, Feature.MAINTENANCE_INFO)
            previous = previous_values
            if previous is not None and not maintenance:
                previous = {k: v for k, v in previous.items() if k != "maintenance_info"}
            body = _compact(
                service_id=service_id,
                plan_id=plan_id,
                parameters=parameters,
                previous_values=previous,
                context=context,
                maintenance_info=maintenance_info if maintenance else None,
            )
            return {"accepts_incomplete": "true"}, body

        response, payload, version = self._request(
            "PATCH",
            paths.instance(instance_id),
            what=f"update of instance {instance_id}",
            shape=shape,
            ok=(200, 202),
            identity=identity or self.broker.originating_identity,
        )
        return _instance(response.status_code, payload, version)

    def deprovision(
        self, instance_id: str, *, service_id: str, plan_id: str, identity: OriginatingIdentity | None = None
    ) -> InstanceResult:
        """DELETE the instance (accepts_incomplete): 200 done, 202 in progress, 410 already gone."""
        response, payload, version = self._request(
            "DELETE",
            paths.instance(instance_id),
            what=f"deprovision of instance {instance_id}",
            shape=_fixed({"accepts_incomplete": "true", "service_id": service_id, "plan_id": plan_id}),
            ok=(200, 202, 410),
            identity=identity or self.broker.originating_identity,
        )
        return _instance(response.status_code, payload, version)

    def get_instance(
        self, instance_id: str, *, service_id: str | None = None, plan_id: str | None = None
    ) -> dict[str, Any] | None:
        """GET the instance (``instances_retrievable``, OSB 2.14+): what the broker holds now, its known fields
        read the tolerant way; None when it does not exist (404, 410). A broker that does not serve the fetch
        answers 400 (or another error): that is raised, as ``NotInVersion`` is before 2.14. The ids are sent as
        hints from 2.16 on."""
        what = f"fetch of instance {instance_id}"
        self._require(Feature.FETCH, what)
        try:
            _, payload, version = self._request(
                "GET",
                paths.instance(instance_id),
                what=what,
                shape=_hints(service_id, plan_id),
                ok=(200,),
                identity=self.broker.originating_identity,
            )
        except (NotFound, Gone):
            return None
        return _fetched_instance(payload, version)

    def last_operation(
        self, instance_id: str, *, operation: str | None, service_id: str | None, plan_id: str | None
    ) -> LastOperation:
        """GET the instance's last_operation; a 410 comes back as ``gone`` (deprovision finished)."""
        params = _compact(operation=operation, service_id=service_id, plan_id=plan_id)
        return self._last_operation(
            paths.instance_last_operation(instance_id), params, what=f"last_operation of {instance_id}"
        )

    @property
    def async_bindings(self) -> bool:
        """Whether the version spoken has asynchronous bindings (2.14+): before, bind and unbind are sent without
        ``accepts_incomplete`` and a binding has no ``last_operation``."""
        return versions.defines(self.version, Feature.ASYNC_BINDINGS)

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
        """PUT the binding: 201 created, 200 identical exists, 202 in progress (``accepts_incomplete`` from 2.14;
        before, bindings are synchronous only)."""
        body = _compact(
            service_id=service_id,
            plan_id=plan_id,
            parameters=parameters,
            bind_resource=bind_resource,
            context=context,
        )

        def shape(version: str) -> tuple[Mapping[str, str], Mapping[str, Any]]:
            return _accepts_incomplete(version), body

        response, payload, version = self._request(
            "PUT",
            paths.binding(instance_id, binding_id),
            what=f"bind {binding_id} to instance {instance_id}",
            shape=shape,
            identity=identity or self.broker.originating_identity,
        )
        return _binding(response.status_code, payload, version)

    def get_binding(
        self, instance_id: str, binding_id: str, *, service_id: str | None = None, plan_id: str | None = None
    ) -> BindingResult:
        """GET the binding (``bindings_retrievable``, OSB 2.14+): how async bindings hand over their credentials.
        The ids are sent as hints from 2.16 on."""
        what = f"fetch of binding {binding_id}"
        self._require(Feature.FETCH, what)
        response, payload, version = self._request(
            "GET",
            paths.binding(instance_id, binding_id),
            what=what,
            shape=_hints(service_id, plan_id),
            ok=(200,),
            identity=self.broker.originating_identity,
        )
        return _binding(response.status_code, payload, version)

    def binding_last_operation(
        self, instance_id: str, binding_id: str, *, operation: str | None, service_id: str | None, plan_id: str | None
    ) -> LastOperation:
        """GET the binding's last_operation (OSB 2.14+); a 410 comes back as ``gone`` (unbind finished)."""
        self._require(Feature.ASYNC_BINDINGS, f"last_operation of binding {binding_id}")
        params = _compact(operation=operation, service_id=service_id, plan_id=plan_id)
        return self._last_operation(
            paths.binding_last_operation(instance_id, binding_id),
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
        """DELETE the binding: 200 done, 202 in progress, 410 already gone (``accepts_incomplete`` from 2.14)."""

        def shape(version: str) -> tuple[Mapping[str, str], None]:
            return {**_accepts_incomplete(version), "service_id": service_id, "plan_id": plan_id}, None

        response, payload, version = self._request(
            "DELETE",
            paths.binding(instance_id, binding_id),
            what=f"unbind {binding_id} from instance {instance_id}",
            shape=shape,
            ok=(200, 202, 410),
            identity=identity or self.broker.originating_identity,
        )
        return _binding(response.status_code, payload, version)

    # -- the one request path ----------------------------------------------------------------------------------

    def _require(self, feature: Feature, what: str) -> None:
        if not versions.defines(self.version, feature):
            since = ".".join(map(str, versions.SINCE[feature]))
            raise NotInVersion(what, feature.value, since, self.version)

    def _last_operation(self, path: str, params: Mapping[str, str], *, what: str) -> LastOperation:
        try:
            response, payload, version = self._request(
                "GET", path, what=what, shape=_fixed(params), ok=(200,), identity=self.broker.originating_identity
            )
        except Gone:
            return LastOperation(state=SUCCEEDED, gone=True)
        state = payload.get("state")
        if state not in STATES:
            raise MalformedResponse(response.status_code, None, f"unknown state {tolerance.quoted(state)}", what=what)
        warnings = tolerance.Warnings()
        description = tolerance.optional_str(payload, "description", warnings)
        retry_after = None
        if versions.defines(version, Feature.RETRY_AFTER):
            retry_after = parse_retry_after(response.headers.get("Retry-After"))
        return LastOperation(
            state=state,
            description=self.broker.redact(description) if description else None,
            retry_after=retry_after,
            warnings=warnings.texts(),
        )

    def _headers(self, version: str, identity: OriginatingIdentity | None) -> dict[str, str]:
        headers = {"X-Broker-API-Version": version}
        if versions.defines(version, Feature.REQUEST_IDENTITY):
            headers["X-Broker-API-Request-Identity"] = str(uuid.uuid4())
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
        shape: Shape | None = None,
        ok: tuple[int, ...] = (200, 201, 202),
    ) -> tuple[httpx.Response, dict[str, Any], str]:
        """Send, stepping down a version on each 412 (the broker did nothing: it is safe to ask again); returns
        the answer and the version it was given in."""
        version = self.version
        while True:
            params, body = shape(version) if shape is not None else (None, None)
            try:
                response, payload = self._send(method, path, version, what, identity, params, body, ok)
            except PreconditionFailed as exc:
                lower = versions.below(version)
                if lower is None:
                    tried = versions.tried_from(self.broker.api_version)
                    raise PreconditionFailed(
                        412,
                        exc.error,
                        f"the broker accepts none of the OSB versions {', '.join(tried)}"
                        + (f" (it said: {exc.description})" if exc.description else ""),
                        what=what,
                    ) from exc
                log.info("OSB %s %s: the broker does not speak %s (412); trying %s", method, path, version, lower)
                version = lower
                self._spoken(version)
                continue
            return response, payload, version

    def _spoken(self, version: str) -> None:
        """Keep ``version`` for later requests, unless another request already stepped further down."""
        with self._lock:
            if versions.SUPPORTED.index(version) > versions.SUPPORTED.index(self.version):
                self.version = version

    def _send(
        self,
        method: str,
        path: str,
        version: str,
        what: str,
        identity: OriginatingIdentity | None,
        params: Mapping[str, str] | None,
        body: Mapping[str, Any] | None,
        ok: tuple[int, ...],
    ) -> tuple[httpx.Response, dict[str, Any]]:
        try:
            response = self._http.request(
                method, path, params=params, json=body, headers=self._headers(version, identity)
            )
        except _NOT_SENT as exc:
            raise BrokerUnreachable(what, self._reason(exc), timed_out=isinstance(exc, httpx.TimeoutException)) from exc
        except httpx.TransportError as exc:
            raise ResponseLost(what, self._reason(exc), timed_out=isinstance(exc, httpx.TimeoutException)) from exc
        log.debug("OSB %s %s (%s): %s", method, path, version, response.status_code)
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


def _fixed(params: Mapping[str, str]) -> Shape:
    """The same query in every version, no body."""
    return lambda _version: (params, None)


def _hints(service_id: str | None, plan_id: str | None) -> Shape:
    """The fetches' ``service_id``/``plan_id`` hints: defined from 2.16 on, not sent before."""

    def shape(version: str) -> tuple[Mapping[str, str] | None, None]:
        if not versions.defines(version, Feature.FETCH_HINTS):
            return None, None
        return _compact(service_id=service_id, plan_id=plan_id), None

    return shape


def _accepts_incomplete(version: str) -> dict[str, str]:
    return {"accepts_incomplete": "true"} if versions.defines(version, Feature.ASYNC_BINDINGS) else {}


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _json_object(response: httpx.Response) -> dict[str, Any] | None:
    try:
        payload = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return payload if isinstance(payload, dict) else None


def _operation(payload: Mapping[str, Any], warnings: tolerance.Warnings) -> str | None:
    operation = tolerance.optional_str(payload, "operation", warnings)
    if operation is not None and len(operation) > MAX_OPERATION:
        warnings.add("operation", f"is {len(operation)} characters, more than OSB's {MAX_OPERATION}: ignored")
        return None
    return operation


def _instance(status: int, payload: Mapping[str, Any], version: str) -> InstanceResult:
    warnings = tolerance.Warnings()
    metadata = None
    if versions.defines(version, Feature.RESPONSE_METADATA):
        metadata = tolerance.optional_dict(payload, "metadata", warnings)
    return InstanceResult(
        status,
        _operation(payload, warnings),
        tolerance.optional_str(payload, "dashboard_url", warnings),
        metadata,
        warnings=warnings.texts(),
    )


def _fetched_instance(payload: Mapping[str, Any], version: str) -> dict[str, Any]:
    """A fetched instance's known fields, read the tolerant way (unknown ones ignored)."""
    warnings = tolerance.Warnings()
    found: dict[str, Any] = {
        "service_id": tolerance.optional_str(payload, "service_id", warnings),
        "plan_id": tolerance.optional_str(payload, "plan_id", warnings),
        "dashboard_url": tolerance.optional_str(payload, "dashboard_url", warnings),
        "parameters": tolerance.optional_dict(payload, "parameters", warnings),
    }
    if versions.defines(version, Feature.MAINTENANCE_INFO):
        found["maintenance_info"] = tolerance.optional_dict(payload, "maintenance_info", warnings)
    if versions.defines(version, Feature.RESPONSE_METADATA):
        found["metadata"] = tolerance.optional_dict(payload, "metadata", warnings)
    return {k: v for k, v in found.items() if v is not None}


def _binding(status: int, payload: Mapping[str, Any], version: str) -> BindingResult:
    warnings = tolerance.Warnings()
    endpoints = metadata = None
    if versions.defines(version, Feature.BINDING_ENDPOINTS):
        endpoints = tolerance.optional_list(payload, "endpoints", warnings)
    if versions.defines(version, Feature.RESPONSE_METADATA):
        metadata = tolerance.optional_dict(payload, "metadata", warnings)
    return BindingResult(
        status=status,
        operation=_operation(payload, warnings),
        credentials=tolerance.optional_dict(payload, "credentials", warnings, secret=True),
        syslog_drain_url=tolerance.optional_str(payload, "syslog_drain_url", warnings),
        route_service_url=tolerance.optional_str(payload, "route_service_url", warnings),
        volume_mounts=tolerance.optional_list(payload, "volume_mounts", warnings),
        endpoints=endpoints,
        parameters=tolerance.optional_dict(payload, "parameters", warnings),
        metadata=metadata,
        warnings=warnings.texts(),
    )
