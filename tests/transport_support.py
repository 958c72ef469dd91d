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
