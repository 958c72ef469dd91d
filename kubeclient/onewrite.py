"""Each request in one write: a network backend whose streams hold what is written until the answer is read.

httpcore's HTTP/1.1 connection writes a request as h11 hands it out: the head, then each piece of the body, each a
``send`` of its own. With ``TCP_NODELAY`` (httpcore sets it) every write is a TLS record and a TCP segment of its own,
so a status patch — a head and a small JSON body — costs the client two TLS records and two system calls, and the API
server reads the head, finds the body missing and waits on its poller for the second segment. Held back until the
first read, the request goes out in one record and one segment: nothing is sent later than it would have been, since
httpcore reads the answer only once the whole request is written.

What is held is the request itself (already in memory: our bodies are bytes, bounded by the callers' limits), and
only until the read that follows. A write that fails is handled as httpcore handles one: the read that follows
says what happened (an answer the server sent before closing, or a ``ReadError`` the transport retries once for an
idempotent request, as before).
"""

from __future__ import annotations

import ssl
import typing

import httpcore


class OneWriteBackend(httpcore.NetworkBackend):
    """Dials through ``inner`` (sockets by default) and wraps each stream in :class:`OneWriteStream`."""

    def __init__(self, inner: httpcore.NetworkBackend | None = None) -> None:
        self._inner = inner if inner is not None else httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        return OneWriteStream(self._inner.connect_tcp(host, port, timeout, local_address, socket_options))

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        return OneWriteStream(self._inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class OneWriteStream(httpcore.NetworkStream):
    """A stream whose writes are held and sent as one before the next read (or TLS handshake)."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner
        self._held: list[bytes] = []
        self._timeout: float | None = None

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if buffer:
            self._held.append(buffer)
            self._timeout = timeout

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            self._send()
        except httpcore.WriteError:
            # As httpcore does when a request's write fails: the server may have answered and closed (an error
            # answer), or gone — the read tells which (an answer, or a ReadError the transport retries).
            pass
        return self._inner.read(max_bytes, timeout)

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        self._send()
        return OneWriteStream(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def close(self) -> None:
        self._held.clear()
        self._inner.close()

    def get_extra_info(self, info: str) -> typing.Any:
        return self._inner.get_extra_info(info)

    def _send(self) -> None:
        """What was written since the last read, in one write (with the last write's deadline)."""
        if not self._held:
            return
        held = self._held[0] if len(self._held) == 1 else b"".join(self._held)
        self._held.clear()
        self._inner.write(held, self._timeout)
