"""What tests of the project's transport share (tests/controller/test_kube_transport.py, test_kube_door.py)."""

from __future__ import annotations

from typing import Any

import httpcore


class Dials(httpcore.NetworkBackend):
    """Sockets, counted as they are dialled (a pool's reuse is what it does not dial)."""

    def __init__(self) -> None:
        self.count = 0
        self._sockets = httpcore.SyncBackend()

    def connect_tcp(self, *args: Any, **kwargs: Any) -> httpcore.NetworkStream:
        self.count += 1
        return self._sockets.connect_tcp(*args, **kwargs)

    def sleep(self, seconds: float) -> None:
        self._sockets.sleep(seconds)


class Writes(httpcore.NetworkBackend):
    """Sockets whose writes are recorded (what reaches the socket, after any wrapping by the transport)."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self._sockets = httpcore.SyncBackend()

    def connect_tcp(self, *args: Any, **kwargs: Any) -> httpcore.NetworkStream:
        return _Recorded(self._sockets.connect_tcp(*args, **kwargs), self.writes)

    def sleep(self, seconds: float) -> None:
        self._sockets.sleep(seconds)


class _Recorded(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream, writes: list[bytes]) -> None:
        self._inner, self._writes = inner, writes

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if buffer:  # an empty write sends nothing (httpcore's socket stream returns at once)
            self._writes.append(buffer)
        self._inner.write(buffer, timeout)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, timeout)

    def close(self) -> None:
        self._inner.close()

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)
