"""An HTTPS server for one POST endpoint, hardened for an admission webhook.

Its only legitimate client is the API server, which gives up on a review after the webhook's
``timeoutSeconds`` and then applies ``failurePolicy``. Anything that can hold the server up is therefore a way
to make every review fail. The first webhook did its TLS handshake in the accept loop: one client that
connected and sent nothing held that loop, every review timed out, and ``failurePolicy: Ignore`` let every
DELETE through. Here:

* each connection is its own task on the controller's asyncio loop (issue 45: no thread of its own): accepting
  never waits for a client; the TLS handshake runs in the connection's task, within ``handshake_seconds``;
* at most ``max_connections`` connections at once, handshakes included: one more is closed at once;
* a request's head is at most ``max_head_bytes`` (431), its body at most ``max_body_bytes`` (413, refused on
  its Content-Length before a byte of it is read), and all the bodies being read at once at most
  ``max_inflight_bytes`` (503): memory is bounded before it is allocated;
* a request must arrive whole within ``read_seconds`` of its first byte (a client dripping a byte at a time
  is cut off, 408); a kept-alive connection may wait ``idle_seconds`` for its next request;
* HTTP/1.1 framing is ``h11``'s (the parser uvicorn and httpx use), not hand-rolled.

``answer(body) -> (status, JSON bytes)`` is called on the loop: it must not block (the webhook's answers come
from memory).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass

import h11

logger = logging.getLogger(__name__)

#: Bytes read from a socket at a time.
CHUNK = 64 * 1024


@dataclass(frozen=True)
class Limits:
    """Bounds of the server; each default is explained in docs/servicecatalog.md (the webhook)."""

    handshake_seconds: float = 5.0
    read_seconds: float = 5.0
    idle_seconds: float = 30.0
    max_head_bytes: int = 16 * 1024
    max_body_bytes: int = 3 * 1024 * 1024
    max_inflight_bytes: int = 32 * 1024 * 1024
    max_connections: int = 256


Answer = Callable[[bytes], tuple[int, bytes]]


class _Refused(Exception):
    """The request is answered with ``status`` and the connection closed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ReviewServer:
    """Serves POST ``path`` over HTTPS on ``port`` (0: any free port, see :attr:`port`)."""

    def __init__(
        self,
        port: int,
        context: ssl.SSLContext,
        path: str,
        answer: Answer,
        *,
        limits: Limits | None = None,
        host: str = "0.0.0.0",
    ) -> None:
        self.context = context
        """The TLS context new connections get; replace it (never modify it) to serve a renewed certificate."""
        self.limits = limits or Limits()
        self._path, self._answer, self._host, self._port = path, answer, host, port
        self._loop: asyncio.AbstractEventLoop | None = None
        """The loop it serves on (the controller's), once started."""
        self._server: asyncio.Server | None = None
        self._connections = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._inflight = 0
        self.port = port

    def start(self, loop: asyncio.AbstractEventLoop, timeout: float = 10.0) -> None:
        """Listen, and serve every connection as a task on ``loop`` (the controller's: no thread of its own). Call
        from another thread (a pool thread): it waits until the port is bound."""
        self._loop = loop
        self.port = asyncio.run_coroutine_threadsafe(self._listen(), loop).result(timeout)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop listening and end the connections (call from another thread than the loop's)."""
        loop, self._loop = self._loop, None
        if loop is not None and not loop.is_closed():
            asyncio.run_coroutine_threadsafe(self._close(), loop).result(timeout)

    @property
    def connections(self) -> int:
        """Connections open now (handshaking ones included)."""
        return self._connections

    async def _listen(self) -> int:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Accepted(self._accepted), self._host, self._port)
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _accepted(self, transport: asyncio.Transport) -> None:
        """Called on accept, with the connection not yet read from: the rest happens in its own task."""
        if self._connections >= self.limits.max_connections:
            transport.abort()
            return
        self._connections += 1
        task = asyncio.get_running_loop().create_task(self._connection(transport))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connection(self, transport: asyncio.Transport) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=CHUNK, loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        current: asyncio.BaseTransport = transport
        try:
            tls = await asyncio.wait_for(
                loop.start_tls(
                    transport,
                    protocol,
                    self.context,
                    server_side=True,
                    ssl_handshake_timeout=self.limits.handshake_seconds,
                ),
                self.limits.handshake_seconds,
            )
            if tls is None:
                return
            current = tls
            protocol.connection_made(tls)
            writer = asyncio.StreamWriter(tls, protocol, reader, loop)
            await self._serve(reader, writer)
            writer.close()  # the TLS close, bounded: what was written is sent first
            await asyncio.wait_for(writer.wait_closed(), self.limits.read_seconds)
        except (TimeoutError, ssl.SSLError, ConnectionError, OSError):
            pass  # a client that does not finish its handshake or its request: dropped, nothing to answer
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("the webhook's connection handler failed")
        finally:
            self._connections -= 1
            current.abort()  # type: ignore[attr-defined]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Requests on one connection, one after the other (HTTP/1.1 keep-alive)."""
        wire = _Wire(h11.Connection(h11.SERVER, max_incomplete_event_size=self.limits.max_head_bytes), reader)
        waiting = self.limits.read_seconds  # a new connection has no reason to wait before its first request
        while True:
            if not wire.buffered:  # wait for the next request's first bytes
                try:
                    if not await asyncio.wait_for(wire.read(), waiting):
                        return
                except TimeoutError:
                    return
            try:
                status, payload = await asyncio.wait_for(self._exchange(wire), self.limits.read_seconds)
            except TimeoutError:
                status, payload = 408, _error("the request did not arrive in time")
            except _Refused as refused:
                status, payload = refused.status, _error(str(refused))
            except h11.RemoteProtocolError as exc:
                status, payload = exc.error_status_hint, _error("malformed HTTP request")
            conn = wire.conn
            close = (status >= 400 and status != 404) or conn.their_state is not h11.DONE
            await self._respond(conn, writer, status, payload, close=close)
            if close or conn.our_state is not h11.DONE:
                return
            conn.start_next_cycle()
            waiting = self.limits.idle_seconds

    async def _exchange(self, wire: _Wire) -> tuple[int, bytes]:
        """Read one request whole (bounded), and its answer."""
        start = wire.consumed
        request = await wire.next()
        if not isinstance(request, h11.Request):
            raise _Refused(400, "expected a request")
        # h11 bounds a head only while it is incomplete: one that came whole in one read is measured here.
        if wire.consumed - start > self.limits.max_head_bytes:
            raise _Refused(431, f"the request head exceeds {self.limits.max_head_bytes} bytes")
        if request.method != b"POST":
            raise _Refused(405, "only POST")
        length = _content_length(request)
        if length is not None and length > self.limits.max_body_bytes:
            raise _Refused(413, f"the body exceeds {self.limits.max_body_bytes} bytes")
        reserved = length if length is not None else self.limits.max_body_bytes
        if self._inflight + reserved > self.limits.max_inflight_bytes:
            raise _Refused(503, "too many bodies being read at once")
        self._inflight += reserved
        try:
            body = bytearray()
            while True:
                event = await wire.next()
                if isinstance(event, h11.Data):
                    if len(body) + len(event.data) > self.limits.max_body_bytes:
                        raise _Refused(413, f"the body exceeds {self.limits.max_body_bytes} bytes")
                    body += event.data
                elif isinstance(event, h11.EndOfMessage):
                    break
                else:
                    raise _Refused(400, "unexpected end of the request")
            if request.target.split(b"?", 1)[0] != self._path.encode():
                return 404, _error("not found")
            return self._answer(bytes(body))
        finally:
            self._inflight -= reserved

    async def _respond(
        self, conn: h11.Connection, writer: asyncio.StreamWriter, status: int, payload: bytes, *, close: bool
    ) -> None:
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(payload)))]
        if close:
            headers.append(("Connection", "close"))
        with contextlib.suppress(h11.LocalProtocolError):  # a request too broken to be answered at all
            data = conn.send(h11.Response(status_code=status, headers=headers))
            data = (data or b"") + (conn.send(h11.Data(data=payload)) or b"")
            data += conn.send(h11.EndOfMessage()) or b""
            writer.write(data)
            await asyncio.wait_for(writer.drain(), self.limits.read_seconds)


class _Wire:
    """An h11 connection fed from a stream, counting what it was fed (to measure request heads)."""

    def __init__(self, conn: h11.Connection, reader: asyncio.StreamReader) -> None:
        self.conn = conn
        self._reader = reader
        self._received = 0

    @property
    def buffered(self) -> bool:
        return bool(self.conn.trailing_data[0])

    @property
    def consumed(self) -> int:
        """Bytes of the stream h11 has parsed so far."""
        return self._received - len(self.conn.trailing_data[0])

    async def read(self) -> bool:
        """Feed h11 the next bytes; False once the client has closed."""
        data = await self._reader.read(CHUNK)
        self._received += len(data)
        self.conn.receive_data(data)
        return bool(data)

    async def next(self) -> object:
        """The connection's next event, reading as needed (the caller's deadline bounds the waiting)."""
        while True:
            event = self.conn.next_event()
            if event is h11.NEED_DATA:
                await self.read()  # b"": h11 then reports ConnectionClosed or a protocol error
                continue
            if isinstance(event, h11.ConnectionClosed):
                raise ConnectionResetError("the client closed the connection")
            return event


class _Accepted(asyncio.Protocol):
    """A just-accepted connection, not read from (so the TLS layer sees the client's hello whole), handed on."""

    def __init__(self, accepted: Callable[[asyncio.Transport], None]) -> None:
        self._accepted = accepted

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.pause_reading()
        self._accepted(transport)


def _content_length(request: h11.Request) -> int | None:
    for name, value in request.headers:
        if name == b"content-length":
            return int(value)  # h11 has checked it is a number
    return None


def _error(message: str) -> bytes:
    return json.dumps({"error": message}).encode()
