"""The broker's edge with the Kubernetes client: deadlines on every call, and types.

The official client has no default timeout: a call whose connection stops answering holds a request thread
for ever. :class:`BoundedApiClient` gives every call that names no ``_request_timeout`` of its own one:
:data:`CONNECT_SECONDS` to connect, then per read :data:`REQUEST_SECONDS` for an ordinary request, or — for a
watch — its server-side ``timeoutSeconds`` plus a quarter (the API server ends the watch by then, so a longer
silence means a dead connection). Sockets have TCP keepalive; urllib3 retries a failed read at most once. The
controller builds its clients the same way (``opbroker.controller.clients``; the layers keep the two apart).

The client annotates custom-object answers as ``object`` (they are the decoded JSON) and its ``watch``
module has no annotations at all; the broker reads both through these.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import urllib3
from kubernetes import client, watch

#: Seconds to dial the API server and finish the TLS handshake.
CONNECT_SECONDS = 10.0
#: Seconds an ordinary request may wait for each read of its answer: half the 60 s an OSB platform commonly
#: waits for the broker, so the broker answers (an error) before the platform gives up on it.
REQUEST_SECONDS = 30.0
#: A watch without ``timeoutSeconds`` may be silent this long.
WATCH_SILENCE_SECONDS = 75.0
RETRIES = urllib3.Retry(total=3, connect=3, read=1, redirect=0, status=0, other=0)


def timeouts_for(url: str) -> tuple[float, float]:
    """(connect, read) timeouts of a request to ``url``: a watch's (see the module docstring), or a request's."""
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
    if (query.get("watch") or [""])[0].lower() not in ("true", "1"):
        return (CONNECT_SECONDS, REQUEST_SECONDS)
    try:
        seconds = float((query.get("timeoutSeconds") or ["0"])[0])
    except ValueError:
        seconds = 0.0
    return (CONNECT_SECONDS, seconds + max(1.0, seconds / 4) if seconds > 0 else WATCH_SILENCE_SECONDS)


class BoundedApiClient(client.ApiClient):
    """An ``ApiClient`` whose calls all have deadlines, on keepalive sockets."""

    def __init__(self, configuration: client.Configuration) -> None:
        configuration.keep_alive = True  # read when the pool is built, in the constructor
        if configuration.retries is None:
            configuration.retries = RETRIES
        super().__init__(configuration)

    def call_api(
        self,
        method: str,
        url: str,
        header_params: dict[str, str] | None = None,
        body: Any = None,
        post_params: list[tuple[str, Any]] | None = None,
        _request_timeout: Any = None,
    ) -> Any:
        return super().call_api(
            method,
            url,
            header_params=header_params,
            body=body,
            post_params=post_params,
            _request_timeout=timeouts_for(url) if _request_timeout is None else _request_timeout,
        )


def json_object(answer: object) -> dict[str, Any]:
    """A custom-object API answer as the JSON object it is."""
    if not isinstance(answer, dict):
        raise TypeError(f"the Kubernetes API answered a {type(answer).__name__}, not a JSON object")
    return answer


class Watch:
    """``kubernetes.watch.Watch``, typed: events are ``{"type": ..., "object": {...}}`` for custom objects."""

    def __init__(self) -> None:
        self._watch: Any = watch.Watch()

    def stream(self, list_call: Callable[..., object], *args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        events: Iterator[dict[str, Any]] = self._watch.stream(list_call, *args, **kwargs)
        return events

    def stop(self) -> None:
        self._watch.stop()
