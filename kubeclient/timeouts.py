"""The deadlines of one process's Kubernetes API calls, as values (no client here: both transports read them).

* an ordinary request: ``connect`` to dial (and TLS), then ``request`` per read of the answer;
* a watch (``watch=true``): ``connect``, then at most :meth:`Timeouts.watch_read` per read — its server-side
  ``timeoutSeconds`` plus a quarter. The API server ends every watch at ``timeoutSeconds`` and sends bookmarks
  in between, so a watch that delivers nothing (no event, no bookmark, no end) for that long is dead: the read
  fails and the watch's loop starts a new one from its last resourceVersion (the watchdog).
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

#: Seconds to dial the API server and finish the TLS handshake.
CONNECT_SECONDS = 10.0
#: Seconds an ordinary request may wait for each read of its answer: the API server's own default
#: ``--request-timeout`` (60 s), past which it gives up on a request itself.
REQUEST_SECONDS = 60.0
#: Server-side duration of a watch request that names none.
WATCH_SECONDS = 60


@dataclass(frozen=True)
class Timeouts:
    """Deadlines of one process's API calls (see the module docstring)."""

    connect: float = CONNECT_SECONDS
    request: float = REQUEST_SECONDS
    watch: int = WATCH_SECONDS
    """The server-side duration (``timeoutSeconds``) of the process's own watches, and of a watch naming none."""

    def watch_read(self, server_seconds: float | None = None) -> float:
        """The longest a watch ending after ``server_seconds`` (default :attr:`watch`) may deliver nothing."""
        seconds = float(server_seconds if server_seconds else self.watch)
        return seconds + max(1.0, seconds / 4)

    def for_query(self, watch: bool, server_seconds: float | None = None) -> tuple[float, float]:
        """(connect, read) timeouts of a watch ending after ``server_seconds``, or of an ordinary request."""
        if watch:
            return (self.connect, self.watch_read(server_seconds or None))
        return (self.connect, self.request)

    def for_url(self, url: str) -> tuple[float, float]:
        """(connect, read) timeouts for a request to ``url``: a watch's, or an ordinary request's."""
        if "watch=" not in url:  # no watch parameter (a name or an encoded value holds no "="): not parsed
            return (self.connect, self.request)
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
        watching = (query.get("watch") or [""])[0].lower() in ("true", "1")
        try:
            server_seconds = float((query.get("timeoutSeconds") or ["0"])[0])
        except ValueError:
            server_seconds = 0.0
        return self.for_query(watching, server_seconds)


DEFAULT_TIMEOUTS = Timeouts()
