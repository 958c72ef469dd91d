"""Kubernetes API clients with deadlines on every call and TCP keepalive (the broker's and the controller's).

The official client has no default timeout: a call whose connection stops answering (a load balancer that
lost its state, a NAT table flush, a half-dead API server) waits for ever, and with it a reconcile worker or a
watch. :class:`BoundedApiClient` gives every call that names no ``_request_timeout`` of its own a deadline,
chosen once, here, from :class:`Timeouts`:

* an ordinary request: ``connect`` to dial (and TLS), then ``request`` per read of the answer;
* a watch (``watch=true``): ``connect``, then at most :meth:`Timeouts.watch_read` per read — its server-side
  ``timeoutSeconds`` plus a quarter. The API server ends every watch at ``timeoutSeconds`` and sends bookmarks
  in between, so a watch that delivers nothing (no event, no bookmark, no end) for that long is dead: the read
  fails and the watch's loop starts a new one from its last resourceVersion (the watchdog);

and urllib3 retries a failed read at most once (its default retries an idempotent call three times, which
would quadruple the bound). TCP keepalive (client-go's timings: probes after 30 s idle) lets the kernel close
a connection whose peer vanished while it was idle. Every HTTP answer is reported to ``on_answer`` (the
controller's :class:`~opbroker.controller.runtime.contact.ApiContact`), whatever its status: it proves the path works.

Each process picks its own :class:`Timeouts` (the broker answers OSB platforms within their 60 s, so its
requests get half of that; the controller waits as long as the API server itself).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client import rest
from kubernetes.client.exceptions import ApiException

from opbroker.kubeclient.lean import APPLY_PATCH, JSON, JSON_PATCH, MERGE_PATCH

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

    def for_url(self, url: str) -> tuple[float, float]:
        """(connect, read) timeouts for a request to ``url``: a watch's, or an ordinary request's."""
        if "watch=" not in url:  # no watch parameter (a name or an encoded value holds no "="): not parsed
            return (self.connect, self.request)
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
        if (query.get("watch") or [""])[0].lower() in ("true", "1"):
            try:
                server_seconds = float((query.get("timeoutSeconds") or ["0"])[0])
            except ValueError:
                server_seconds = 0.0
            return (self.connect, self.watch_read(server_seconds or None))
        return (self.connect, self.request)


DEFAULT_TIMEOUTS = Timeouts()

#: urllib3's retries: a dropped connection is dialled again, a failed read is retried once (idempotent calls
#: only, as urllib3 does), nothing else — the callers retry with backoff (the reconcile's error table).
RETRIES = urllib3.Retry(total=3, connect=3, read=1, redirect=0, status=0, other=0)


#: At most one run of a configuration's credentials hook per this many seconds (see :class:`ThrottledRefresh`).
REFRESH_SECONDS = 10.0


class ThrottledRefresh:
    """A configuration's ``refresh_api_key_hook``, run at most once per ``seconds``.

    The client runs the hook before every request. A kubeconfig's hook sets the server, CA and proxy on the
    configuration again each time (the host setter reads the proxy environment: every variable of it), and was
    2.8 % of the controller's CPU while provisioning (issue 31, py-spy). Tokens it refreshes are rotated minutes
    before they expire (kubelet renews a projected token at 80 % of its life; the in-cluster loader re-reads its
    file once a minute), so a refresh at most ``seconds`` late loses nothing.
    """

    def __init__(
        self, hook: Callable[[Any], None], seconds: float = REFRESH_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.hook = hook
        self.seconds = seconds
        self.clock = clock
        self._next = float("-inf")
        self._lock = threading.Lock()

    def __call__(self, configuration: Any) -> None:
        now = self.clock()
        with self._lock:
            if now < self._next:
                return
            self._next = now + self.seconds
        self.hook(configuration)
        installed = configuration.refresh_api_key_hook
        if installed is not self:
            # A kubeconfig's hook installs itself again each time it runs (``KubeConfigLoader._set_config``):
            # keep throttling what it installed, or every request after the first refresh runs it again.
            self.hook = installed
            configuration.refresh_api_key_hook = self


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
        self._server_pool: urllib3.HTTPConnectionPool | None = None
        self._path_prefix = urllib.parse.urlsplit(configuration.host).path.rstrip("/")
        self._timeouts_made: dict[Any, urllib3.Timeout] = {}

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
        headers = header_params or {}
        pool = None if post_params else self._direct_pool(url, headers.get("Content-Type"), body)
        if pool is None:
            response = super().call_api(
                method,
                url,
                header_params=header_params,
                body=body,
                post_params=post_params,
                _request_timeout=_request_timeout,
            )
        else:
            response = self._send(pool, method, url, headers, body, _request_timeout)
        if self.on_answer is not None:
            self.on_answer()
        return response

    def _direct_pool(self, url: str, content_type: str | None, body: Any) -> urllib3.HTTPConnectionPool | None:
        """The connection pool of the API server, for a request :meth:`_send` can make as the client would (no
        body, or a JSON one); None for any other (a proxy's, a form's, a URL of another host): the client's path."""
        if body is not None and not (isinstance(body, dict | list) and content_type in _JSON_BODIES):
            return None
        if content_type == JSON_PATCH and not isinstance(body, list):
            return None  # the client sends it as a strategic merge patch
        manager = self.rest_client.pool_manager
        host = self.configuration.host
        if (
            type(manager) is not urllib3.PoolManager
            or not url.startswith(host)
            or url[len(host) : len(host) + 1] != "/"
        ):
            return None
        pool = self._server_pool
        if pool is None or pool.pool is None:  # none yet, or closed by its manager
            pool = self._server_pool = manager.connection_from_url(host)
        return pool

    def _send(
        self,
        pool: urllib3.HTTPConnectionPool,
        method: str,
        url: str,
        headers: dict[str, str],
        body: Any,
        timeout: Any,
    ) -> rest.RESTResponse:
        """The request the client's ``RESTClientObject.request`` makes, made on the API server's pool directly.

        Why: that path checks the content type against four patterns and has urllib3's pool manager parse the
        URL and look its pool up again, on every request (issue 31). The same request is sent — the body as the
        client's ``json.dumps`` writes it, the pool's retries, ``timeout``,
        the answer unread (the caller reads it, or streams a watch), an SSL failure an ``ApiException`` of
        status 0. Left out: following a redirect (the API server sends none; a 3xx is an error answer here).
        """
        path = self._path_prefix + url[len(self.configuration.host) :]
        try:
            answer = pool.urlopen(
                method,
                path,
                body=None if body is None else json.dumps(body),
                headers=headers,
                timeout=self._timeout(timeout),
                preload_content=False,
                redirect=False,
                assert_same_host=False,
            )
        except urllib3.exceptions.SSLError as exc:
            raise ApiException(status=0, reason=f"{type(exc).__name__}\n{exc}") from exc
        return rest.RESTResponse(answer)

    def _timeout(self, timeout: Any) -> urllib3.Timeout | None:
        """urllib3's ``Timeout`` of a ``_request_timeout`` as the client reads it (seconds; (connect, read); else
        none), made once per value."""
        if not isinstance(timeout, int | float | tuple) or not timeout:
            return None
        made = self._timeouts_made.get(timeout)
        if made is None:
            if isinstance(timeout, tuple):
                if len(timeout) != 2:
                    return None
                made = urllib3.Timeout(connect=timeout[0], read=timeout[1])
            else:
                made = urllib3.Timeout(total=timeout)
            if len(self._timeouts_made) < 64:
                self._timeouts_made[timeout] = made
        return made


#: Content types whose body the client encodes as JSON (server-side apply's YAML included: JSON is YAML).
_JSON_BODIES = frozenset({JSON, MERGE_PATCH, "application/strategic-merge-patch+json", APPLY_PATCH, JSON_PATCH})


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
    """Whether ``exc`` is a read deadline that passed (urllib3 wraps it when it gave up retrying): a watch's
    watchdog firing, as the watch loops tell it apart from other failures."""
    reason = getattr(exc, "reason", None)
    return isinstance(exc, urllib3.exceptions.ReadTimeoutError) or isinstance(
        reason, urllib3.exceptions.ReadTimeoutError
    )
