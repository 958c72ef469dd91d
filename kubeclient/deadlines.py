"""Kubernetes API clients with deadlines on every call and TCP keepalive (the broker's and the controller's).

The official client has no default timeout: a call whose connection stops answering (a load balancer that
lost its state, a NAT table flush, a half-dead API server) waits for ever, and with it a reconcile worker or a
watch. :class:`BoundedApiClient` gives every call that names no ``_request_timeout`` of its own a deadline,
chosen once, from :class:`~opbroker.kubeclient.timeouts.Timeouts` (an ordinary request's, or a watch's: its
server-side duration plus a quarter, the watchdog); urllib3 retries a failed read at most once (its default
retries an idempotent call three times, which would quadruple the bound). TCP keepalive (client-go's timings:
probes after 30 s idle) lets the kernel close a connection whose peer vanished while it was idle. Every HTTP
answer is reported to ``on_answer`` (the controller's :class:`~opbroker.controller.runtime.contact.ApiContact`),
whatever its status: it proves the path works.

The hot calls (custom objects, Secrets, Events, every watch of plain JSON) do not go through this client but
through :mod:`opbroker.kubeclient.transport`, the project's own, built from this client's configuration,
deadlines, answer hook and headers (:mod:`opbroker.kubeclient.lean`); what is left here are the generated
client's typed calls (version, nodes, pods, leases, namespaces, access reviews, the broker's admin ConfigMaps).

Each process picks its own :class:`Timeouts` (the broker answers OSB platforms within their 60 s, so its
requests get half of that; the controller waits as long as the API server itself).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import urllib3
from kubernetes import client

from opbroker.kubeclient.refresh import REFRESH_SECONDS, ThrottledRefresh
from opbroker.kubeclient.timeouts import (
    CONNECT_SECONDS,
    DEFAULT_TIMEOUTS,
    REQUEST_SECONDS,
    WATCH_SECONDS,
    Timeouts,
)
from opbroker.kubeclient.transport import DeadlinePassed

__all__ = [
    "CONNECT_SECONDS",
    "DEFAULT_TIMEOUTS",
    "REFRESH_SECONDS",
    "REQUEST_SECONDS",
    "RETRIES",
    "WATCH_SECONDS",
    "BoundedApiClient",
    "ThrottledRefresh",
    "Timeouts",
    "bounded",
    "sibling",
    "sibling_with",
    "timed_out",
]

#: urllib3's retries: a dropped connection is dialled again, a failed read is retried once (idempotent calls
#: only, as urllib3 does), nothing else — the callers retry with backoff (the reconcile's error table).
RETRIES = urllib3.Retry(total=3, connect=3, read=1, redirect=0, status=0, other=0)


class BoundedApiClient(client.ApiClient):
    """An ``ApiClient`` whose calls all have deadlines, on keepalive sockets (see the module docstring)."""

    def __init__(
        self,
        configuration: client.Configuration,
        *,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
        on_answer: Callable[[], None] | None = None,
    ) -> None:
        configuration.keep_alive = True  # read when the pool is built, in the constructor
        if configuration.retries is None:
            configuration.retries = RETRIES
        hook = configuration.refresh_api_key_hook
        if hook is not None and not isinstance(hook, ThrottledRefresh):
            configuration.refresh_api_key_hook = ThrottledRefresh(hook)
        super().__init__(configuration)
        self.timeouts = timeouts
        self.on_answer = on_answer

    def call_api(
        self,
        method: str,
        url: str,
        header_params: dict[str, str] | None = None,
        body: Any = None,
        post_params: list[tuple[str, Any]] | None = None,
        _request_timeout: Any = None,
    ) -> Any:
        if _request_timeout is None:
            _request_timeout = self.timeouts.for_url(url)
        response = super().call_api(
            method,
            url,
            header_params=header_params,
            body=body,
            post_params=post_params,
            _request_timeout=_request_timeout,
        )
        if self.on_answer is not None:
            self.on_answer()
        return response


def bounded(
    configuration: client.Configuration,
    *,
    timeouts: Timeouts = DEFAULT_TIMEOUTS,
    on_answer: Callable[[], None] | None = None,
    user_agent: str | None = None,
) -> BoundedApiClient:
    """A :class:`BoundedApiClient` over ``configuration`` (which gains keepalive and bounded retries)."""
    api = BoundedApiClient(configuration, timeouts=timeouts, on_answer=on_answer)
    if user_agent:
        api.user_agent = user_agent
    return api


def sibling(api: client.ApiClient) -> client.ApiClient:
    """A new client sharing ``api``'s configuration, deadlines and answer hook (its own headers and pool)."""
    return sibling_with(api, api.configuration)


def sibling_with(api: client.ApiClient, configuration: client.Configuration) -> client.ApiClient:
    """A new client over ``configuration`` (read when its pool is built) with ``api``'s deadlines, answer hook and
    user agent."""
    if isinstance(api, BoundedApiClient):
        twin: client.ApiClient = BoundedApiClient(configuration, timeouts=api.timeouts, on_answer=api.on_answer)
    else:
        twin = client.ApiClient(configuration)
    twin.user_agent = api.user_agent
    return twin


def timed_out(exc: BaseException) -> bool:
    """Whether ``exc`` is a read deadline that passed — the project's transport's :class:`DeadlinePassed`, or
    urllib3's (wrapped when it gave up retrying): a watch's watchdog firing, as the watch loops tell it apart
    from other failures."""
    reason = getattr(exc, "reason", None)
    return isinstance(exc, DeadlinePassed | urllib3.exceptions.ReadTimeoutError) or isinstance(
        reason, urllib3.exceptions.ReadTimeoutError
    )
