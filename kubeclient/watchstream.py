"""A watch's stream read by an asyncio protocol: the bytes of each read handed on as they come, with no coroutine
layers between the socket and the informer.

Why: a watch event is usually one read of its own (the API server flushes each), so the cost of a read is the cost
of an event. Through httpcore's asynchronous connection (its byte stream, the connection's, h11's, the network
stream's: a chain of async generators per read) an event cost the reader ~70 µs of CPU, twice the blocking reader's
~34 µs of the threads it replaced (measured: one process, a server pacing 10 000 events of ~0.8 KiB one per read;
a protocol as below: ~32 µs); under the provisioning bench that was ~0.5 ms of controller CPU per instance (~11
watch events each). Here asyncio's transport calls :meth:`_Reader.data_received` with each read, h11 (the HTTP/1.1
framing httpcore itself uses) takes the chunked framing off, and the informer's one task is woken once for
whatever has arrived since it last read.

What the request is comes from :meth:`~opbroker.kubeclient.transport.Transport.prepare`, as for every other
request (headers, the bearer token, the target, the deadlines, the TLS server name); the connection is the
transport's :class:`~opbroker.kubeclient.transport.Dialling` (TLS context, keepalive socket options) — one
connection per watch, closed at its end (a watch holds it for its minute; the dial is nothing beside that). A
proxy is not dialled here: :class:`~opbroker.kubeclient.astreams.AsyncTransport` streams through httpcore then.

Bounds and deadlines: a read must arrive within the request's read deadline (for a watch its server-side seconds
plus a quarter: the watchdog, one timer per stream moved on by the reads, not one per read) or the stream fails
with :class:`~opbroker.kubeclient.transport.DeadlinePassed`; the connect deadline bounds the dial and the TLS
handshake; reading pauses while more than :data:`PAUSE_BYTES` wait for the reader (a slow keeper never makes the
stream's memory grow); a refusal's body is read up to :data:`MAX_ERROR_BYTES`; lines are bounded by the reader's
``limit`` (:class:`~opbroker.kubeclient.transport.LineSplitter`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator

import h11
import httpcore

from opbroker.kubeclient.transport import (
    MAX_LINE_BYTES,
    DeadlinePassed,
    LineSplitter,
    Transport,
    Unreachable,
    refusal,
    unreachable,
)

#: Bytes read and not yet taken by the reader beyond which the socket is not read (asyncio's flow control).
PAUSE_BYTES = 4 * 1024 * 1024
#: The most of a refusal's body read (the API server's Status: a few hundred bytes).
MAX_ERROR_BYTES = 1024 * 1024


class _Reader(asyncio.Protocol):
    """One watch request on its own connection: the answer's head, then its body's bytes as they come."""

    def __init__(self, loop: asyncio.AbstractEventLoop, request: bytes, read_seconds: float) -> None:
        self._loop = loop
        self._request = request
        self._read_seconds = read_seconds
        self._http = h11.Connection(h11.CLIENT)
        self._transport: asyncio.Transport | None = None
        self.head: asyncio.Future[h11.Response] = loop.create_future()
        """The answer's head (2xx), or the refusal or failure that ended the request before it."""
        self._refused: h11.Response | None = None
        self.answered = False
        """The API server answered (whatever its status): what the transport's ``on_answer`` is told."""
        self._error_body = bytearray()
        self.chunks: collections.deque[bytes] = collections.deque()
        self._queued = 0
        self._paused = False
        self.ended = False
        """The answer was read to its end."""
        self.failure: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._last_read = loop.time()
        self._watchdog: asyncio.TimerHandle | None = None

    # -- asyncio's calls ---------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._last_read = self._loop.time()
        self._watchdog = self._loop.call_at(self._last_read + self._read_seconds, self._check_deadline)
        transport.write(self._request)

    def data_received(self, data: bytes) -> None:
        self._last_read = self._loop.time()
        try:
            self._http.receive_data(data)
            self._take_events()
        except Exception as exc:  # a broken answer (h11's RemoteProtocolError): the stream fails, never hangs
            self._fail(Unreachable(f"{type(exc).__name__}: {exc}"))
            if self._transport is not None:
                self._transport.abort()
            return
        if self._queued > PAUSE_BYTES and not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        with contextlib.suppress(h11.RemoteProtocolError):
            self._http.receive_data(b"")
            self._take_events()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        if not self.ended:
            why = f"{type(exc).__name__}: {exc}" if exc is not None else "closed by the server"
            self._fail(Unreachable(f"the watch's connection broke off ({why})"))

    # -- the reader's side -------------------------------------------------------------------------------

    async def wait(self) -> None:
        """Until more has arrived, or the answer ended or failed."""
        if self.chunks or self.ended or self.failure is not None:
            return
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def took(self, size: int) -> None:
        """The reader took ``size`` bytes: reading goes on once few wait."""
        self._queued -= size
        if self._paused and self._queued <= PAUSE_BYTES // 2 and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()

    def close(self) -> None:
        """Done: the connection closed (aborted if the answer was not read to its end)."""
        if self._watchdog is not None:
            self._watchdog.cancel()
        if self._transport is not None:
            if self.ended:
                self._transport.close()
            else:
                self.ended = True  # whatever comes now is nobody's
                self._transport.abort()

    # -- inside ------------------------------------------------------------------------------------------

    def _take_events(self) -> None:
        while True:
            event = self._http.next_event()
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.Response):
                self.answered = True
                if 200 <= event.status_code <= 299:
                    if not self.head.done():
                        self.head.set_result(event)
                else:
                    self._refused = event
            elif isinstance(event, h11.Data):
                if self._refused is not None:
                    room = MAX_ERROR_BYTES - len(self._error_body)
                    self._error_body.extend(bytes(event.data[: max(0, room)]))
                else:
                    chunk = bytes(event.data)
                    self.chunks.append(chunk)
                    self._queued += len(chunk)
            elif isinstance(event, h11.EndOfMessage):
                if self._refused is not None:
                    self._fail(_refusal(self._refused, bytes(self._error_body)))
                self.ended = True
                if self._transport is not None:
                    self._transport.close()
                return
            elif isinstance(event, h11.ConnectionClosed):
                return

    def _check_deadline(self) -> None:
        """The watchdog: no read within the read deadline fails the stream (a reader that stopped taking what
        came — reading paused — is not the server's silence)."""
        if self.ended or self.failure is not None:
            return
        now, due = self._loop.time(), self._last_read + self._read_seconds
        if self._paused or now < due:
            self._watchdog = self._loop.call_at(now + 1.0 if self._paused else due, self._check_deadline)
            return
        self._fail(DeadlinePassed(f"ReadTimeout: nothing read for {self._read_seconds:.0f} s"))
        if self._transport is not None:
            self._transport.abort()

    def _fail(self, failure: BaseException) -> None:
        if self.failure is None:
            self.failure = failure
        if not self.head.done():
            self.head.set_exception(failure)
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class WatchStream:
    """An open watch's answer (2xx), read as it arrives: the :class:`~opbroker.kubeclient.informer.Stream` the
    informers read."""

    def __init__(self, reader: _Reader, status: int) -> None:
        self._reader = reader
        self.status = status

    async def lines(self, limit: int = MAX_LINE_BYTES) -> AsyncIterator[bytes]:
        """The answer's non-empty lines, each at most ``limit`` bytes (a longer one raises ``ValueError``)."""
        reader = self._reader
        split = LineSplitter(limit)
        while True:
            while reader.chunks:
                chunk = reader.chunks.popleft()
                reader.took(len(chunk))
                for line in split.feed(chunk):
                    yield line
            if reader.failure is not None:
                raise reader.failure
            if reader.ended:
                break
            await reader.wait()
        for line in split.end():
            yield line

    async def aclose(self) -> None:
        self._reader.close()


async def open_watch(transport: Transport, request: httpcore.Request) -> WatchStream:
    """Send ``request`` (made by ``transport.prepare``) on a connection of its own and wait for its answer's head:
    a 2xx one's stream, else the ``ApiException`` of the refusal (``Unreachable``, ``DeadlinePassed`` or a TLS
    ``ApiException`` when the server cannot be reached)."""
    loop = asyncio.get_running_loop()
    url = request.url
    deadlines: dict[str, float | None] = dict(request.extensions.get("timeout") or {})
    connect, read = float(deadlines.get("connect") or 30.0), float(deadlines.get("read") or 60.0)
    dialling = transport.dialling
    host = url.host.decode("ascii")
    port = url.port or (443 if url.scheme == b"https" else 80)
    reader = _Reader(loop, _request_bytes(request), read)
    try:
        async with asyncio.timeout(connect):
            if url.scheme == b"https":
                sni = str(request.extensions.get("sni_hostname") or host)
                sent, _ = await loop.create_connection(
                    lambda: reader,
                    host,
                    port,
                    ssl=dialling.ssl_context,
                    server_hostname=sni,
                    ssl_handshake_timeout=connect,
                )
            else:
                sent, _ = await loop.create_connection(lambda: reader, host, port)
    except (OSError, TimeoutError) as exc:
        failed = httpcore.ConnectTimeout(str(exc)) if isinstance(exc, TimeoutError) else httpcore.ConnectError(str(exc))
        failed.__cause__ = exc  # what tells a TLS failure (an ApiException of status 0) from an unreachable server
        raise unreachable(failed) from exc
    sock = sent.get_extra_info("socket")
    for option in dialling.socket_options:
        with contextlib.suppress(OSError):
            sock.setsockopt(*option)
    try:
        head = await reader.head
    except BaseException:
        reader.close()
        raise
    finally:
        if reader.answered and transport.on_answer is not None:
            transport.on_answer()
    return WatchStream(reader, head.status_code)


def _request_bytes(request: httpcore.Request) -> bytes:
    """The request as HTTP/1.1 bytes (a GET: no body)."""
    http = h11.Connection(h11.CLIENT)
    head = h11.Request(method=request.method, target=request.url.target, headers=request.headers)
    return http.send(head) + http.send(h11.EndOfMessage())


def _refusal(response: h11.Response, body: bytes) -> Exception:
    """The ``ApiException`` of a non-2xx answer (as the transport raises it)."""
    answer = httpcore.Response(
        response.status_code, headers=list(response.headers), extensions={"reason_phrase": response.reason}
    )
    return refusal(answer, body)
