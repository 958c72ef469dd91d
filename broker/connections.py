"""The bounds of one HTTP connection to the broker, before any of its requests reaches the app.

uvicorn bounds the size of a request head (h11's ``max_incomplete_event_size``) but gives it no deadline: a
connection that sends nothing, or half a head, is held for ever (uvicorn's keep-alive timeout runs only after
a response). Every such connection costs a file descriptor and up to the head limit of buffered bytes, so a
client opening thousands of them could exhaust the broker without sending one complete request.
:func:`protocol` is uvicorn's h11 protocol with that deadline: from the moment the connection opens, and
again after each response, a complete head must arrive within ``head_timeout`` seconds or the connection is
closed. Requests themselves are not limited in time here (a synchronous plan waits ``--sync-timeout``).

h11, not httptools, on purpose: uvicorn picks httptools when it is installed, and httptools ignores the head
limit.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

#: The largest request line plus headers read (h11's and uvicorn's default). A larger head is refused with
#: 400 and the connection closed. OSB requests need a few hundred bytes; a 10 000-character operation token
#: (OSB's maximum) fits with room for the platform's identity headers.
DEFAULT_MAX_HEAD_BYTES = 16 * 1024
#: Seconds a connection may take to send a complete request head (Go's servers are commonly given 10 s too).
DEFAULT_HEAD_TIMEOUT = 10.0


class DeadlineH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request head is not complete within ``head_timeout``."""

    head_timeout = DEFAULT_HEAD_TIMEOUT

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
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
