"""The broker's FastAPI application: OSB routes, the checks every OSB request passes first, error mapping,
health, readiness and metrics.

Order of checks for ``/v2/*``: credentials (401) → API version (412) → body size (413, before the body is
read; see :mod:`opbroker.broker.bodylimit`) → the route (body/params 400, then the core's decisions).
Every response echoes ``X-Broker-API-Request-Identity`` and is counted in the metrics, under bounded labels
(:mod:`opbroker.broker.metrics`). ``/metrics`` needs the same credentials unless it is served on a port of
its own (``Settings.metrics_port``). No state lives in the process that two replicas could disagree on: the
catalog, the objects and the operation tokens come from (or are derived from) the API server on every request.

The operations endpoints are ``async``: sync routes run on anyio's thread pool (40 threads), and liveness must
answer while every thread waits on a hung Kubernetes call. ``/readyz`` runs its blocking check on a thread of
its own, within a deadline (:mod:`opbroker.broker.readiness`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import urllib3.exceptions
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from prometheus_client import start_http_server
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route

from opbroker.api.errors import field_path
from opbroker.api.selectors import SelectorError
from opbroker.broker import admin, bodies, documentation, errors, routes
from opbroker.broker.authentication import Authenticator, ConfigurationError
from opbroker.broker.bodylimit import BodySizeLimit
from opbroker.broker.edge import METRICS, Edge, error_response
from opbroker.broker.locating import NamespaceIndex
from opbroker.broker.metrics import Metrics
from opbroker.broker.readiness import Readiness
from opbroker.broker.records import Kind
from opbroker.broker.repository import Repository
from opbroker.broker.settings import Settings
from opbroker.kubeclient import transport
from opbroker.kubeclient.wire import JsonBody

log = logging.getLogger("opbroker.broker")


DESCRIPTION = """\
Open Service Broker API v2.17 for the services of opbroker's catalog (SFService/SFPlan).

Every `/v2` request needs HTTP basic auth and `X-Broker-API-Version` 2.12 to 2.17. Provision, update and
bind are recorded as SFServiceInstance/SFServiceBinding resources that opbroker's controller reconciles;
`last_operation` answers from their status. Error bodies are OSB error objects (`error`, `description`).
"""


def _validation_description(exc: RequestValidationError) -> str:
    """Which field is wrong and why, never the submitted value (bodies may carry secrets)."""
    problems = []
    for item in exc.errors()[:10]:
        location = [part for part in item.get("loc", ()) if part not in ("body",)]
        problems.append(f"{field_path(tuple(location)) if location else 'body'}: {item.get('msg', 'invalid')}")
    return "invalid request: " + "; ".join(problems)


HEALTHZ, READYZ = "/healthz", "/readyz"


def _admin_authenticator(settings: Settings, api_client: client.ApiClient, osb: Authenticator) -> Authenticator | None:
    """The admin API's credentials (None: it is not served). Refused when they are the OSB platform's: the
    platform may provision, it must not re-render every instance of a plan."""
    if not settings.admin_enabled:
        return None
    if (
        settings.admin_credentials_secret is not None
        and settings.admin_credentials_secret == settings.credentials_secret
    ):
        raise ConfigurationError("--admin-credentials-secret must not be the OSB credentials Secret")
    checked = Authenticator(settings.admin_credentials(), api_client)
    checked.verify()
    if checked.expected() == osb.expected():
        raise ConfigurationError("the admin credentials must differ from the OSB credentials")
    return checked


class BrokerApp(FastAPI):
    """FastAPI, its OpenAPI document without the 422 answers the broker never gives (it answers 400)."""

    def openapi(self) -> JsonBody:
        if self.openapi_schema is None:  # made once, as FastAPI's own: every /openapi.json answers the cached one
            self.openapi_schema = documentation.without_fastapi_validation(super().openapi())
        return self.openapi_schema


def create_app(settings: Settings, api_client: client.ApiClient) -> FastAPI:
    """The broker app for one process. Credentials are checked now, so a misconfiguration stops start-up."""
    secret = settings.admin_credentials_secret
    if secret is not None and secret == settings.credentials_secret:
        raise ConfigurationError("--admin-credentials-secret must not be the OSB credentials Secret")
    authenticator = Authenticator(settings, api_client)
    authenticator.verify()
    admin_authenticator = _admin_authenticator(settings, api_client, authenticator)
    index = NamespaceIndex(api_client, (Kind.INSTANCE, Kind.BINDING)) if settings.namespace_index else None
    repository = Repository(api_client, settings, index)

    def check_ready() -> None:
        repository.ping()
        authenticator.expected()

    readiness = Readiness(check_ready, settings.readiness_deadline)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        exporter = None
        if settings.metrics_port is not None:
            exporter, _ = start_http_server(settings.metrics_port, settings.metrics_host, registry=metrics.registry)
        if index is not None:
            index.start()
        yield
        if index is not None:
            index.stop()
            await index.wait()
        if exporter is not None:
            exporter.shutdown()
            exporter.server_close()
        readiness.close()

    app = BrokerApp(
        title="opbroker OSB broker",
        version="2.17",
        description=DESCRIPTION,
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
        strict_content_type=False,  # OSB: a body without Content-Type MAY still be processed
    )
    try:
        app.state.broker = routes.Broker(settings, repository)
    except SelectorError as exc:
        raise ConfigurationError(f"--allowed-namespace-selector: {exc}") from None
    app.include_router(routes.router)
    if admin_authenticator is not None:
        app.state.admin = admin.Admin(api_client, settings.namespace, settings.retry_after)
        app.include_router(admin.router)
    # Added before the edge middleware below, so it runs inside it: credentials and version first, then size.
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(
        Edge,
        authenticator=authenticator,
        admin=(admin_authenticator, admin.PREFIX) if admin_authenticator is not None else None,
        metrics_need_credentials=settings.metrics_port is None and settings.metrics_authentication,
        candidates=lambda: candidates,
        metrics=lambda: metrics,
    )

    @app.exception_handler(errors.BrokerError)
    async def broker_error(_request: Request, exc: errors.BrokerError) -> JSONResponse:
        if errors.STATUS[exc.reason] >= 500:
            log.warning("%s", exc)
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(errors.bad_request(_validation_description(exc)))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(errors.http_body(exc.status_code, str(exc.detail)), status_code=exc.status_code)

    @app.exception_handler(ApiException)
    async def kubernetes_error(request: Request, exc: ApiException) -> JSONResponse:
        # Only status and reason: the body of a failed call may echo what was sent.
        log.warning("Kubernetes API error %s %s in %s %s", exc.status, exc.reason, request.method, request.url.path)
        return error_response(
            errors.BrokerError(errors.Reason.INTERNAL_ERROR, f"Kubernetes API error {exc.status} {exc.reason}")
        )

    @app.exception_handler(urllib3.exceptions.HTTPError)  # the generated client's calls
    @app.exception_handler(transport.Unreachable)  # the project's transport's (``kubeclient.lean``)
    async def kubernetes_unreachable(_request: Request, exc: Exception) -> JSONResponse:
        log.warning("Kubernetes API unreachable: %s", type(exc).__name__)
        return error_response(errors.BrokerError(errors.Reason.UNAVAILABLE, "the Kubernetes API is not reachable"))

    @app.get(HEALTHZ, summary="Liveness: the process serves requests", tags=["operations"])
    async def healthz() -> dict[str, Any]:
        return {"status": "ok"}

    @app.get(
        READYZ,
        summary="Readiness: the Kubernetes API answers and the credentials are readable",
        tags=["operations"],
        responses={503: {"description": "Not ready", "model": bodies.ErrorBody}},
    )
    async def readyz() -> JSONResponse:
        ready, why = await readiness.verdict()
        if not ready:
            return JSONResponse(errors.http_body(503, f"not ready: {why}"), status_code=503)
        return JSONResponse({"status": "ready"})

    if settings.metrics_port is None:

        @app.get(
            METRICS,
            summary="Prometheus metrics (basic auth unless the broker runs with --no-metrics-authentication)",
            tags=["operations"],
            response_class=PlainTextResponse,
            responses={
                200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
                401: {"description": "Unauthorized", "model": bodies.ErrorBody},
            },
        )
        async def prometheus() -> Response:
            payload, content_type = metrics.exposition()
            return Response(payload, media_type=content_type)

    # Every route is declared now: the templates the metrics count by name (the middleware, the lifespan and
    # /metrics above use these two once requests come).
    candidates: list[Route] = [
        route for route in (*app.router.routes, *routes.router.routes, *admin.router.routes) if isinstance(route, Route)
    ]
    metrics: Metrics = Metrics(route.path for route in candidates)
    app.state.metrics = metrics
    app.state.index = index
    return app
