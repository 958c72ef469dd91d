"""The bounds of one HTTP connection to the broker, before any of its requests reaches the app.

**Size.** uvicorn's ``h11_max_incomplete_event_size`` bounds only what h11 buffers of a head *not yet complete*:
a head that arrives whole in one read (asyncio reads up to 256 KiB at a time) is parsed whatever its size, so
250 KB method names reached the app with the limit at 16 KiB. :class:`BoundedConnection` also measures every
complete head and refuses one above the limit (uvicorn's 400, connection closed) before the app sees it.

**Time.** uvicorn gives a request head no deadline: a connection that sends nothing, or half a head, is held
for ever (its keep-alive timeout runs only after a response). Every such connection costs a file descriptor
and up to the head limit of buffered bytes, so a client opening thousands of them could exhaust the broker
without sending one complete request. From the moment a connection opens, and again after each response, a
complete head must arrive within ``head_timeout`` seconds or the connection is closed. Requests themselves are
not limited in time here (a synchronous plan waits ``--sync-timeout``).

h11, not httptools, on purpose: uvicorn picks httptools when it is installed, and httptools ignores the head
limit.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

#: The largest request line plus headers read (h11's and uvicorn's default). A larger head is refused with
#: 400 and the connection closed. OSB requests need a few hundred bytes; a 10 000-character operation token
#: (OSB's maximum) fits with room for the platform's identity headers.
DEFAULT_MAX_HEAD_BYTES = 16 * 1024
#: Seconds a connection may take to send a complete request head (Go's servers are commonly given 10 s too).
DEFAULT_HEAD_TIMEOUT = 10.0


def head_size(request: h11.Request) -> int:
    """The bytes of a parsed request line and headers (as sent, but for optional whitespace)."""
    line = len(request.method) + len(request.target) + len(b"  HTTP/1.1\r\n")
    return line + sum(len(name) + len(value) + 4 for name, value in request.headers.raw_items()) + 2


class BoundedConnection(h11.Connection):
    """An h11 server connection refusing request heads above ``max_head_bytes``, complete or not."""

    def __init__(self, max_head_bytes: int) -> None:
        super().__init__(h11.SERVER, max_incomplete_event_size=max_head_bytes)
        self.max_head_bytes = max_head_bytes

    def next_event(self) -> Any:
        event = super().next_event()
        if isinstance(event, h11.Request) and head_size(event) > self.max_head_bytes:
            # uvicorn answers every h11 protocol error with 400 and closes the connection.
            raise h11.RemoteProtocolError(f"request head larger than {self.max_head_bytes} bytes")
        return event


class DeadlineH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, with heads bounded in bytes (whole ones too) and in time (``head_timeout``)."""

    head_timeout = DEFAULT_HEAD_TIMEOUT

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.conn = BoundedConnection(self.config.h11_max_incomplete_event_size or DEFAULT_MAX_HEAD_BYTES)
        self._head_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a head it cannot take (malformed, or above the limit), in the broker's own form: an
        OSB error body in JSON. uvicorn's is ``text/plain``, which the OSB API never answers (the reliability
        suite's schemathesis run stopped on it: a 40 KB query string)."""
        body = json.dumps({"description": msg}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode("ascii")),
            (b"connection", b"close"),
        ]
        self.transport.write(self.conn.send(h11.Response(status_code=400, headers=headers, reason=b"Bad Request")))
        self.transport.write(self.conn.send(h11.Data(data=body)))
        self.transport.write(self.conn.send(h11.EndOfMessage()))
        self.transport.close()

    def _arm(self) -> None:
        self._disarm()
        if not self.transport.is_closing():
            self._head_deadline = self.loop.call_later(self.head_timeout, self._expired)

    def _disarm(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _expired(self) -> None:
        """Close unless a request is being answered (its head arrived in time)."""
        self._head_deadline = None
        waiting_for_head = self.conn.their_state is h11.IDLE
        answered = self.conn.our_state in (h11.DONE, h11.MUST_CLOSE, h11.CLOSED)
        if (waiting_for_head or answered) and not self.transport.is_closing():
            self.transport.close()


def protocol(head_timeout: float) -> type[DeadlineH11Protocol]:
    """The protocol class for uvicorn's ``http`` setting, with this deadline (uvicorn instantiates it)."""
    return type("DeadlineH11Protocol", (DeadlineH11Protocol,), {"head_timeout": head_timeout})
