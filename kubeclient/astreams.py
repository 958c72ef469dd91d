"""The transport's asynchronous twin, for the watches and the lease (issue 45: they are asyncio tasks on the loop).

Each informer (:mod:`opbroker.kubeclient.informer`) used to hold a thread blocked in a socket read for as long as
its stream was open, and a stop had to shut the socket down under it. On the loop, a watch is a coroutine awaiting
its next chunk: cancelling its task ends the read at once, and no thread is held.

What is asked is what :class:`~opbroker.kubeclient.transport.Transport` asks — the request is built by its
:meth:`~opbroker.kubeclient.transport.Transport.prepare` (headers, the bearer token and its refresh hook, the
target, the deadlines of :class:`~opbroker.kubeclient.timeouts.Timeouts`: a watch's reads at most its server-side
seconds plus a quarter, the TLS server name), the connections are dialled as its own are
(:class:`~opbroker.kubeclient.transport.Dialling`: TLS context, proxy, keepalive socket options, dial retries),
every answer is reported to ``on_answer``, a non-2xx answer raises its ``ApiException``, a broken connection
:class:`~opbroker.kubeclient.transport.Unreachable` and a read past its deadline
:class:`~opbroker.kubeclient.transport.DeadlinePassed` — over ``httpcore.AsyncConnectionPool`` (its connection
matching is O(connections) per request, which the few watch requests of a process never notice; the hot requests
stay on the blocking transport and its pool). A watch's stream is read by a protocol of
:mod:`opbroker.kubeclient.watchstream` instead (httpcore's chain of async generators cost twice the blocking
reader's CPU per event), except through a proxy.

With a bearer-token refresh hook (an in-cluster token file, a kubeconfig's credential command), requests are built
in a thread: the hook, when due, never runs on the loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping

import httpcore

from opbroker.kubeclient.transport import (
    BROKEN,
    IDLE_SECONDS,
    MAX_LINE_BYTES,
    LineSplitter,
    Transport,
    refusal,
    retries_after,
    unreachable,
)
from opbroker.kubeclient.watchstream import WatchStream, open_watch


class AsyncStream:
    """An open answer read on the loop as it arrives (a watch): its lines, each bounded before it is held whole.
    :meth:`aclose` when done: read to its end, its connection is kept for the next request; left mid-answer, it is
    closed (what is unread cannot be another request's answer). Cancelling the reader ends a read at once."""

    def __init__(self, response: httpcore.Response) -> None:
        self._response = response
        self.status = response.status

    async def lines(self, limit: int = MAX_LINE_BYTES) -> AsyncIterator[bytes]:
        """The answer's non-empty lines, each at most ``limit`` bytes (a longer one raises ``ValueError``)."""
        split = LineSplitter(limit)
        try:
            async for chunk in self._response.aiter_stream():
                for line in split.feed(chunk):
                    yield line
        except BROKEN as exc:
            raise unreachable(exc) from exc
        for line in split.end():
            yield line

    async def aclose(self) -> None:
        await self._response.aclose()


class AsyncTransport:
    """The asynchronous requests of the watches, to ``transport``'s server as ``transport`` makes them (see the
    module docstring). Used on one event loop; :meth:`aclose` when done."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self._pool: httpcore.AsyncConnectionPool | None = None

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Iterable[tuple[str, str]] = (),
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        watch: bool = False,
        server_seconds: float | None = None,
    ) -> bytes:
        """The whole body of a 2xx answer to ``method`` ``path`` (else the ``ApiException`` of it); ``body``: what
        is sent (a write)."""
        response = await self._send(await self._prepare(method, path, query, headers, watch, server_seconds, body))
        try:
            return await response.aread()
        except BROKEN as exc:
            raise unreachable(exc) from exc
        finally:
            await response.aclose()

    async def stream(
        self,
        method: str,
        path: str,
        *,
        query: Iterable[tuple[str, str]] = (),
        headers: Mapping[str, str] | None = None,
        watch: bool = True,
        server_seconds: float | None = None,
    ) -> AsyncStream | WatchStream:
        """The answer to ``method`` ``path`` opened (2xx; else the ``ApiException`` of it), to be read as it
        arrives — a watch's, by default, with a watch's read deadline: on a connection of its own, read by
        :mod:`~opbroker.kubeclient.watchstream` (through a proxy: by httpcore, on the pool)."""
        request = await self._prepare(method, path, query, headers, watch, server_seconds, None)
        if self.transport.dialling.proxy is None:
            return await open_watch(self.transport, request)
        return AsyncStream(await self._send(request))

    async def _prepare(
        self,
        method: str,
        path: str,
        query: Iterable[tuple[str, str]],
        headers: Mapping[str, str] | None,
        watch: bool,
        server_seconds: float | None,
        body: bytes | None,
    ) -> httpcore.Request:
        """The request as the blocking transport builds it. With a bearer-token refresh hook, built in a thread: the
        hook may run a kubeconfig's credential command (seconds, or hanging), which must never hold the loop."""
        prepare = self.transport.prepare
        if self.transport.configuration.refresh_api_key_hook is None:
            return prepare(method, path, query, body, headers, None, watch, server_seconds)
        return await asyncio.to_thread(prepare, method, path, query, body, headers, None, watch, server_seconds)

    async def aclose(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.aclose()

    async def _send(self, request: httpcore.Request) -> httpcore.Response:
        """The answer to ``request`` (made by :meth:`_prepare`), its body unread (a non-2xx one: read, and raised)."""
        transport = self.transport
        retries = transport.retries_of(request.method.decode("ascii"))
        pool = self._pool_of()
        while True:
            try:
                response = await pool.handle_async_request(request)
                break
            except BROKEN as exc:
                retries = retries_after(exc, retries)
        if transport.on_answer is not None:
            transport.on_answer()
        if 200 <= response.status <= 299:
            return response
        try:
            data = await response.aread()
        except BROKEN as exc:
            raise unreachable(exc) from exc
        finally:
            await response.aclose()
        raise refusal(response, data)

    def _pool_of(self) -> httpcore.AsyncConnectionPool:
        """The pool, made at the first request (on the loop that uses it)."""
        if self._pool is None:
            dialling = self.transport.dialling
            self._pool = httpcore.AsyncConnectionPool(
                ssl_context=dialling.ssl_context,
                proxy=dialling.proxy,
                max_connections=None,
                max_keepalive_connections=dialling.keep,
                keepalive_expiry=IDLE_SECONDS,
                retries=dialling.retries,
                socket_options=dialling.socket_options,
            )
        return self._pool


def on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether the calling thread is running ``loop`` (a call made there need not hop through its self-pipe)."""
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
