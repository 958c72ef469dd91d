"""Refuse request bodies above a size limit with 413, before any of the body is parsed.

A Kubernetes object cannot exceed about 1.5 MiB (etcd's request limit), and every OSB body ends up in one
(the instance's or binding's spec), so a larger body can never be honoured; reading and parsing it first
would only cost memory and CPU. A declared ``Content-Length`` above the limit is refused without reading
a byte; a body without one (chunked) is read only up to the limit. Under the limit the body is handed on
unchanged.

This sits inside the broker's edge middleware (credentials and API version are checked first, so an
unauthenticated client cannot make the broker read anything), and its 413 is an OSB error body like every
other refusal. Plain ASGI: Starlette has no body limit of its own, and uvicorn limits only headers.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from opbroker.broker import errors

#: The default limit: well below what the API server would store (1.5 MiB), far above any real request.
DEFAULT_MAX_BODY_BYTES = 1024 * 1024

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def declared_length(scope: Scope) -> int | None:
    """The request's ``Content-Length``, or None when absent or not a number (the server rejects those)."""
    for name, value in scope.get("headers") or []:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class BodySizeLimit:
    """ASGI middleware: 413 for bodies over ``max_bytes``."""

    def __init__(self, app: ASGIApp, max_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = declared_length(scope)
        if declared is not None:
            if declared > self.max_bytes:
                await self._refuse(send)
                return
            await self.app(scope, receive, send)
            return
        # No length declared: read up to the limit here, then replay what was read.
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break  # the client went away; let the app see that as it would
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                await self._refuse(send)
                return
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            if message["type"] != "http.request":
                return message
            return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        body = json.dumps(
            errors.http_body(413, f"the request body exceeds the broker's limit of {self.max_bytes} bytes")
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})
