"""A TCP relay that can stop forwarding while keeping its connections open: a black hole on the network path.

Between a client and the API server (TLS passes through untouched). :meth:`BlackHole.swallow` stops moving
bytes on every connection, live or new, without closing any — what a client sees when a load balancer
loses its state or a NAT table is flushed: requests sent, never answered, no reset. :meth:`BlackHole.forward`
makes new connections work again; the swallowed ones stay dead (their peers must notice by themselves).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable


class BlackHole:
    """Relays ``127.0.0.1:<port>`` to ``upstream()``; see the module docstring."""

    def __init__(self, upstream: Callable[[], tuple[str, int]]) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._forwarding = True
        self._generation = 0  # bumped by swallow(): connections of an older generation never forward again
        self._sockets: set[socket.socket] = set()
        self.swallowed = 0
        self._closed = threading.Event()
        threading.Thread(target=self._accept, name="blackhole", daemon=True).start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def swallow(self) -> None:
        """Stop forwarding: every connection, open or opened from now on, stays open and moves nothing."""
        with self._lock:
            self._forwarding = False
            self._generation += 1

    def forward(self) -> None:
        """Forward new connections again (the swallowed ones stay dead)."""
        with self._lock:
            self._forwarding = True

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            sockets = list(self._sockets)
        for sock in [self._listener, *sockets]:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    def _live(self, generation: int) -> bool:
        with self._lock:
            return self._forwarding and generation == self._generation

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                generation = self._generation
                forwarding = self._forwarding
                self._sockets.add(client)
            if not forwarding:  # held open, never answered
                with self._lock:
                    self.swallowed += 1
                continue
            try:
                server = socket.create_connection(self.upstream(), timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets.add(server)
            for source, target in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, target, generation), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, generation: int) -> None:
        """Copy one direction while the connection's generation forwards; once swallowed, read nothing more
        (the peer's bytes pile up unread, the connection stays open) until the relay closes."""
        source.settimeout(0.2)
        try:
            while not self._closed.is_set():
                if not self._live(generation):
                    self._closed.wait(0.2)
                    continue
                try:
                    data = source.recv(65536)
                except TimeoutError:
                    continue
                if not data:
                    break
                target.sendall(data)
        except OSError:
            pass
        if self._live(generation):  # an ordinary end: close both sides
            for sock in (source, target):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()
