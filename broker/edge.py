"""The checks every request passes before its route, and what is recorded after it: a plain ASGI middleware.

Credentials (401) for ``/v2/*``, ``/admin/*`` and (when it needs them) ``/metrics``, then the OSB API version
(412) for ``/v2/*``; the request identity echoed on every answer; a route's unhandled exception answered as an
OSB 500 (logged without the request); every answer counted in the metrics and logged as one bounded access line.

Plain ASGI rather than Starlette's ``BaseHTTPMiddleware`` (``@app.middleware("http")``), which the broker used
before: that one runs the app in a task of its own and streams its answer back through a memory channel, and
under the provisioning bench it cost a third of the broker's CPU (py-spy, issue 31), more than the routes.
Here the app's ``send`` is wrapped instead: the start of the answer gains the identity header and gives its
status.

Credentials from the environment, or a Secret read less than ``credentials_ttl`` ago, are compared on the event
loop (a constant-time comparison, no I/O); only a Secret read goes to a worker thread (``Authenticator.cached``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from starlette.datastructures import Headers, MutableHeaders
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from opbroker.broker import errors, headers
from opbroker.broker.authentication import Authenticator
from opbroker.broker.metrics import Metrics, method_label

log = logging.getLogger("opbroker.broker")
#: One line per request, instead of uvicorn's access log (which prints the raw request line, up to the 16 KiB
#: request head, control characters included): method and route as the metrics label them, the path cut and
#: escaped, the status and the duration. Never a header, a query or a body.
access_log = logging.getLogger("opbroker.broker.access")
#: Characters of the request path an access line shows (an instance and a binding id fit; a 16 KiB path does not).
ACCESS_PATH_CHARS = 200
#: Path prefixes and paths the edge treats apart (admin's prefix is ``opbroker.broker.admin.PREFIX``).
OSB_PREFIX, METRICS = "/v2", "/metrics"


def shown_path(path: str) -> str:
    """``path`` for a log line: at most :data:`ACCESS_PATH_CHARS` characters, control characters escaped."""
    cut = path[:ACCESS_PATH_CHARS]
    escaped = cut.encode("unicode_escape").decode("ascii")
    return escaped + ("…" if len(path) > ACCESS_PATH_CHARS else "")


def url_path(scope: Scope) -> str:
    """The request's path as ``Request.url.path`` gives it (``?``, ``#`` and ``\\`` escaped), without building
    the whole URL."""
    path: str = scope["path"]
    return path.replace("?", "%3F").replace("#", "%23").replace("\\", "%5C")


def error_response(error: errors.BrokerError) -> JSONResponse:
    status, body = errors.to_response(error)
    extra = {"WWW-Authenticate": 'Basic realm="opbroker"'} if status == 401 else None
    return JSONResponse(body, status_code=status, headers=extra)


def endpoint_of(candidates: Sequence[Route], scope: Scope) -> str:
    """The route template (bounded label cardinality for metrics), or ``unmatched``. ``candidates``: every route,
    those of included routers too (a request refused before routing, a 401, has no route in its scope yet)."""
    route = scope.get("route")
    if route is None:
        for candidate in candidates:
            match, _ = candidate.matches(scope)
            if match is Match.FULL:
                route = candidate
                break
    return str(getattr(route, "path", "unmatched"))


async def authorized(authenticator: Authenticator, authorization: str | None) -> bool:
    """Whether ``authorization`` carries ``authenticator``'s credentials; a worker thread only to read them."""
    expected = authenticator.cached()
    if expected is None:
        return await run_in_threadpool(authenticator.check, authorization)
    return headers.credentials_match(headers.basic_credentials(authorization), expected)


class Edge:
    """ASGI middleware: the checks before every route, the identity header, metrics and the access line.

    ``admin``: the admin API's authenticator and path prefix (None: not served). ``metrics_need_credentials``:
    ``/metrics`` is served by the app and asks for the OSB credentials. ``candidates`` and ``metrics`` are
    read when a request comes (the app declares its routes after adding this).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        authenticator: Authenticator,
        admin: tuple[Authenticator, str] | None,
        metrics_need_credentials: bool,
        candidates: Callable[[], Sequence[Route]],
        metrics: Callable[[], Metrics],
    ) -> None:
        self.app = app
        self.authenticator = authenticator
        self.admin = admin
        self.metrics_need_credentials = metrics_need_credentials
        self.candidates = candidates
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        request_headers = Headers(scope=scope)
        identity = headers.request_identity(request_headers.get(headers.REQUEST_IDENTITY_HEADER))
        status = 500
        answered = recorded = False
        path = url_path(scope)

        def record() -> None:
            nonlocal recorded
            recorded = True
            endpoint, seconds = self._endpoint(scope), time.perf_counter() - started
            self.metrics().observe(endpoint, scope["method"], status, seconds)
            access_log.info(
                "%s %s %s %d %.3fs", method_label(scope["method"]), endpoint, shown_path(path), status, seconds
            )

        async def send_answer(message: Message) -> None:
            nonlocal status, answered
            if message["type"] == "http.response.start":
                answered = True
                status = message["status"]
                if identity is not None:
                    MutableHeaders(scope=message)[headers.REQUEST_IDENTITY_HEADER] = identity
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                record()  # before the last of the answer leaves: the client never sees it before the log does
            await send(message)

        try:
            refusal = await self._refusal(path, request_headers)
            if refusal is not None:
                await refusal(scope, receive, send_answer)
            else:
                await self.app(scope, receive, send_answer)
        except Exception:
            if answered:
                raise  # the answer has begun: nothing better to send (the server closes the connection)
            log.exception("unhandled error in %s %s", method_label(scope["method"]), self._endpoint(scope))
            failed = JSONResponse(errors.http_body(500, "internal broker error"), status_code=500)
            await failed(scope, receive, send_answer)
        finally:
            if not recorded:
                record()

    def _endpoint(self, scope: Scope) -> str:
        return endpoint_of(self.candidates(), scope)

    async def _refusal(self, path: str, request_headers: Headers) -> Response | None:
        """The answer refusing the request before its route (401, 412), or None to go on."""
        osb = path.startswith(OSB_PREFIX + "/") or path == OSB_PREFIX
        authorization = request_headers.get("authorization")
        try:
            if self.admin is not None and path.startswith(self.admin[1] + "/"):
                admitted = await authorized(self.admin[0], authorization)
                if not admitted:
                    raise errors.BrokerError(errors.Reason.UNAUTHORIZED, "valid admin credentials are required")
            elif osb or (self.metrics_need_credentials and path == METRICS):
                admitted = await authorized(self.authenticator, authorization)
                if not admitted:
                    raise errors.BrokerError(errors.Reason.UNAUTHORIZED, "valid basic-auth credentials are required")
            if osb:
                headers.check_api_version(request_headers.get(headers.VERSION_HEADER))
        except errors.BrokerError as exc:
            return error_response(exc)
        return None
