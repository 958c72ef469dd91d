"""The project's own HTTP transport to the Kubernetes API server, over httpcore (httpx's transport layer; issue 45).

Why: the hot calls (custom objects, Secrets, Events, watches) went through the official client's ``ApiClient``
and urllib3, reached into past their public surface (its pool manager, ``RESTResponse``, its auth helper) to
skip its per-call machinery. This module owns that path outright, reading only the public attributes of a
``kubernetes.client.Configuration`` (which stays the project's way to load a kubeconfig or the in-cluster
account), and keeps every behaviour the bounded client gave:

* deadlines from :class:`~opbroker.kubeclient.timeouts.Timeouts`: ``connect`` to dial and finish TLS, then
  ``request`` per read of an answer; a watch's reads at most its server-side ``timeoutSeconds`` plus a quarter
  (the watchdog: a read past it raises :class:`DeadlinePassed`);
* TCP keepalive (client-go's timings, ``kubernetes.utils.keepalive``) on every socket;
* a refused or dropped dial retried (the configuration's ``retries``, default 3), a failed read of an
  idempotent call's answer retried once, nothing else (the callers retry with backoff);
* every HTTP answer, whatever its status, reported to ``on_answer`` (the controller's ``ApiContact``);
* ``connections`` kept alive (the configuration's ``connection_pool_maxsize``); more are dialled when needed
  and closed after, as urllib3's non-blocking pool did, so a burst never waits for a connection
  (:mod:`opbroker.kubeclient.pool`);
* the bearer token (and its refresh hook, throttled: :class:`~opbroker.kubeclient.refresh.ThrottledRefresh`),
  client certificates, CA, ``verify_ssl``, ``tls_server_name``, a proxy; default headers (User-Agent, an acting
  door's ``Impersonate-User``) read from the mapping given, at each request.

A non-2xx answer raises the official :class:`~kubernetes.client.exceptions.ApiException` subclass the generated
client raises (``NotFoundException`` for a 404, …; its public ``from_response``) with the answer's body and
headers, so callers handle errors as before; an API server that cannot be reached raises :class:`Unreachable`
(a ``ConnectionError``), one that stopped answering within its deadline :class:`DeadlinePassed` (also a
``TimeoutError``), a TLS failure an ``ApiException`` of status 0 (as the official client's).

Built on ``httpcore`` — httpx's own transport layer: its connections, TLS and HTTP/1.1 framing (h11), under a
pool of the project's (:mod:`~opbroker.kubeclient.pool`) — rather than ``httpx.Client``, whose per-request layers
(URL parsing character by character, header models, cookie extraction, auth and redirect flows) cost more CPU
than the requests need (measured: the provisioning bench's controller 10.14 → 11.79 ms per instance, the broker
3.08 → 4.12, through ``httpx.Client``). The server's URL is parsed once; each request's target is the path and
query this module writes.

A watch's answer is a :class:`StreamedAnswer`: its chunks (``stream``), its lines, each bounded in size
(``lines``), and :meth:`StreamedAnswer.abort` to end it at once from another thread.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import httpcore
import httpx
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.utils.keepalive import tcp_keepalive_socket_options

from opbroker.kubeclient.pool import Pool
from opbroker.kubeclient.refresh import ThrottledRefresh
from opbroker.kubeclient.timeouts import DEFAULT_TIMEOUTS, Timeouts

#: Connections kept alive when the configuration names no pool size.
CONNECTIONS = 10
#: Seconds an idle connection is kept for reuse (Go's ``http.Transport`` default, as client-go's).
IDLE_SECONDS = 90.0
#: Dials of a refused or dropped connection when the configuration names no retries.
CONNECT_RETRIES = 3
#: Methods whose failed read is retried (once): those urllib3 deems idempotent.
IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS", "TRACE"})
#: The longest line of a streamed answer read by default (one watch event; objects are at most 1.5 MiB).
MAX_LINE_BYTES = 8 * 1024 * 1024


class Unreachable(ConnectionError):
    """The API server could not be reached, or the connection broke before its answer was whole."""


class DeadlinePassed(Unreachable, TimeoutError):
    """A read waited past its deadline (for a watch: the watchdog; it delivered nothing for that long)."""


class Network(Protocol):
    """What answers HTTP requests: an ``httpcore.ConnectionPool``, or a test's stand-in."""

    def handle_request(self, request: httpcore.Request) -> httpcore.Response: ...


#: Transport failures of a request whose answer had not begun: retried once for an idempotent method.
RETRIED = (httpcore.ReadError, httpcore.ReadTimeout, httpcore.RemoteProtocolError)
#: Every transport failure (raised as :class:`Unreachable`, :class:`DeadlinePassed` or a TLS ``ApiException``).
BROKEN = (httpcore.NetworkError, httpcore.TimeoutException, httpcore.ProtocolError)


def retries_after(exc: Exception, retries: int) -> int:
    """The retries left once ``exc`` ended an attempt (one of :data:`BROKEN`), or the error the request fails
    with when it is not retried — the one rule of the blocking :class:`Transport` and its asynchronous twin
    (``astreams.AsyncTransport``), whose send loops differ only in awaiting."""
    if isinstance(exc, RETRIED) and retries > 0:
        return retries - 1
    raise unreachable(exc) from exc


@dataclass(frozen=True)
class Dialling:
    """How a transport's connections are made: TLS, a proxy, socket options (keepalive), dial retries, and how
    many idle ones are kept."""

    ssl_context: ssl.SSLContext | None
    proxy: httpcore.Proxy | None
    socket_options: Iterable[httpcore.SOCKET_OPTION]
    retries: int
    keep: int


@dataclass(frozen=True)
class Answer:
    """A whole 2xx answer."""

    status: int
    content: bytes


@dataclass(frozen=True)
class _ErrorAnswer:
    """What ``ApiException.from_response`` reads of an answer."""

    status: int
    reason: str
    headers: httpx.Headers
    data: bytes


class LineSplitter:
    """A streamed answer's chunks cut into its non-empty lines, each at most ``limit`` bytes: a longer one raises
    ``ValueError`` as soon as it is known to be longer, before it is held whole (shared by the blocking and the
    asynchronous streams)."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> list[bytes]:
        """The lines ``chunk`` completes."""
        buffer, limit = self._buffer, self._limit
        buffer.extend(chunk)
        lines: list[bytes] = []
        start = 0
        while (end := buffer.find(b"\n", start)) != -1:
            if end - start > limit:
                raise ValueError(f"a line over {limit} bytes")
            if end > start:
                lines.append(bytes(buffer[start:end]))
            start = end + 1
        del buffer[:start]
        if len(buffer) > limit:
            raise ValueError(f"a line over {limit} bytes")
        return lines

    def end(self) -> list[bytes]:
        """The last line, unended by a newline (none if it is blank)."""
        return [bytes(self._buffer)] if self._buffer.strip() else []


class StreamedAnswer:
    """An open answer read as it arrives (a watch): the shape the official ``watch.Watch`` and the informers
    read — ``status``, ``stream()``, ``close()``, ``release_conn()`` and ``connection.sock`` — and its own
    :meth:`lines` and :meth:`abort`."""

    def __init__(self, response: httpcore.Response) -> None:
        self._response = response
        self.status = response.status
        self._ending = False
        self._done = False

    def stream(self, amt: int | None = None, decode_content: bool = False) -> Iterator[bytes]:
        """The answer's bytes in the chunks they arrive in (as sent: no content decoding is asked for)."""
        del amt, decode_content  # the urllib3 signature the official watch calls; chunks are as they arrive
        try:
            yield from self._response.iter_stream()
        except BROKEN as exc:
            if self._ending:
                return  # aborted from another thread: the end the aborter asked for
            raise unreachable(exc) from exc
        except RuntimeError:  # closed under the reader
            if self._ending:
                return
            raise
        self._done = True

    def lines(self, limit: int = MAX_LINE_BYTES) -> Iterator[bytes]:
        """The answer's non-empty lines, each at most ``limit`` bytes (a longer one raises ``ValueError`` before
        it is held whole)."""
        split = LineSplitter(limit)
        for chunk in self.stream():
            yield from split.feed(chunk)
        yield from split.end()

    @property
    def connection(self) -> _Connection:
        """The socket under the answer (``connection.sock``), for the callers that end a stream by shutting it
        down (the official ``Watch.stop``, the informers' ``abort``): taking it marks the stream as ending, so
        the reader's failed read is the end it was asked for, not an error."""
        self._ending = True
        return _Connection(self._socket())

    def abort(self) -> None:
        """End the answer now, from any thread: shut its socket down, so that a read blocked on it returns at
        once (closing alone would wait for it), then close it. The connection is not reused: it is dead."""
        self._ending = True
        sock = self._socket()
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(Exception):  # whatever the reader's side left: the answer is over either way
            self._response.close()

    def close(self) -> None:
        """Close the answer: read to its end, its connection goes back to the pool; else it is aborted (a
        half-read answer's connection cannot carry another request)."""
        if self._done:
            self._response.close()
        else:
            self.abort()

    def release_conn(self) -> None:
        """As :meth:`close` (urllib3's name for handing the connection back)."""
        self.close()

    def _socket(self) -> socket.socket | None:
        stream = self._response.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        return sock if isinstance(sock, socket.socket) else None


@dataclass(frozen=True)
class _Connection:
    sock: socket.socket | None


class Transport:
    """HTTP requests to one API server (see the module docstring). Thread-safe; :meth:`close` when done."""

    def __init__(
        self,
        configuration: client.Configuration,
        *,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
        on_answer: Callable[[], None] | None = None,
        headers: Mapping[str, str] | None = None,
        connections: int | None = None,
        network: Network | None = None,
        backend: httpcore.NetworkBackend | None = None,
    ) -> None:
        """``network``: what answers the requests instead of a connection pool (a test's); ``backend``: what
        dials the pool's connections (a test's that counts them; default sockets)."""
        hook = configuration.refresh_api_key_hook
        if hook is not None and not isinstance(hook, ThrottledRefresh):
            configuration.refresh_api_key_hook = ThrottledRefresh(hook)
        self.configuration = configuration
        self.timeouts = timeouts
        self.on_answer = on_answer
        self.headers: Mapping[str, str] = headers if headers is not None else {}
        """Sent with every request, read at each (a caller may set one later: the mapping is not copied)."""
        server = urllib.parse.urlsplit(configuration.host)
        self._scheme = server.scheme.encode("ascii")
        self._host = (server.hostname or "").encode("ascii")
        self._port = server.port
        self._prefix = server.path.rstrip("/")
        self._host_header = server.netloc.rpartition("@")[2].encode("ascii")
        connect_retries, self._read_retries = _retries(configuration.retries)
        keep = connections or configuration.connection_pool_maxsize or CONNECTIONS
        ssl_context = _tls_context(configuration) if self._scheme == b"https" else None
        socket_options = configuration.socket_options or tcp_keepalive_socket_options()
        proxy = _proxy(configuration)
        self.dialling = Dialling(ssl_context, proxy, socket_options, connect_retries, keep)
        """How connections are dialled, for a pool beside this one (the asynchronous twin's)."""
        self._pool: Network
        if network is not None:
            self._pool = network
        elif proxy is not None:  # a proxy's tunnels: httpcore's own pool (the hot path is the direct one)
            self._pool = httpcore.ConnectionPool(
                ssl_context=ssl_context,
                proxy=proxy,
                max_connections=None,
                max_keepalive_connections=keep,
                keepalive_expiry=IDLE_SECONDS,
                retries=connect_retries,
                network_backend=backend,
                socket_options=socket_options,
            )
        else:
            port = self._port or (443 if self._scheme == b"https" else 80)
            self._pool = Pool(
                httpcore.Origin(self._scheme, self._host, port),
                ssl_context=ssl_context,
                keep=keep,
                keepalive_expiry=IDLE_SECONDS,
                retries=connect_retries,
                socket_options=socket_options,
                backend=backend,
            )
        self._sni = {"sni_hostname": configuration.tls_server_name} if configuration.tls_server_name else {}
        self._deadlines: dict[tuple[float, float], dict[str, float]] = {}
        self._deadlines_lock = threading.Lock()

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Iterable[tuple[str, str]] = (),
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: Any = None,
        watch: bool = False,
        server_seconds: float | None = None,
    ) -> Answer:
        """The whole answer to ``method`` ``path`` (2xx; else the ``ApiException`` of it). ``timeout``: the
        official client's ``_request_timeout`` (seconds, or (connect, read)); by default :attr:`timeouts`'."""
        response = self._send(method, path, query, body, headers, timeout, watch, server_seconds)
        return Answer(response.status, _read_whole(response))

    def stream(
        self,
        method: str,
        path: str,
        *,
        query: Iterable[tuple[str, str]] = (),
        headers: Mapping[str, str] | None = None,
        timeout: Any = None,
        watch: bool = True,
        server_seconds: float | None = None,
    ) -> StreamedAnswer:
        """The answer to ``method`` ``path`` opened (2xx; else the ``ApiException`` of it), to be read as it
        arrives — a watch's, by default, with a watch's read deadline."""
        return StreamedAnswer(self._send(method, path, query, None, headers, timeout, watch, server_seconds))

    def close(self) -> None:
        if isinstance(self._pool, Pool | httpcore.ConnectionPool):
            self._pool.close()

    # -- one request ---------------------------------------------------------------------------------------

    def _send(
        self,
        method: str,
        path: str,
        query: Iterable[tuple[str, str]],
        body: bytes | None,
        headers: Mapping[str, str] | None,
        timeout: Any,
        watch: bool,
        server_seconds: float | None,
    ) -> httpcore.Response:
        """The answer to one request, its body unread (a non-2xx one: read, and raised)."""
        request = self.prepare(method, path, query, body, headers, timeout, watch, server_seconds)
        retries = self.retries_of(method)
        while True:
            try:
                response = self._pool.handle_request(request)
                break
            except BROKEN as exc:
                retries = retries_after(exc, retries)
        if self.on_answer is not None:
            self.on_answer()
        if 200 <= response.status <= 299:
            return response
        raise refusal(response, _read_whole(response))

    def prepare(
        self,
        method: str,
        path: str,
        query: Iterable[tuple[str, str]],
        body: bytes | None,
        headers: Mapping[str, str] | None,
        timeout: Any,
        watch: bool,
        server_seconds: float | None,
    ) -> httpcore.Request:
        """One request as sent, by this transport or by its asynchronous twin
        (:class:`~opbroker.kubeclient.astreams.AsyncTransport`): the headers (the bearer token read now, its
        refresh hook run when due), the target, the deadlines and the TLS server name."""
        sent = [(b"Host", self._host_header)]
        for name, value in {**self.headers, **(headers or {})}.items():
            sent.append((name.encode("ascii"), value.encode("latin-1")))
        token = self.configuration.get_api_key_with_prefix("BearerToken", alias="authorization")  # runs the hook
        if token:
            sent.append((b"Authorization", token.encode("latin-1")))
        if body is not None:
            sent.append((b"Content-Length", str(len(body)).encode("ascii")))
        target = self._prefix + path
        pairs = list(query)
        if pairs:
            target += "?" + urllib.parse.urlencode(pairs)
        url = httpcore.URL(scheme=self._scheme, host=self._host, port=self._port, target=target.encode("ascii"))
        extensions: dict[str, object] = {"timeout": self._deadline(timeout, watch, server_seconds), **self._sni}
        return httpcore.Request(method.encode("ascii"), url, headers=sent, content=body, extensions=extensions)

    def retries_of(self, method: str) -> int:
        """Retries of a failed read of ``method``'s answer (once for an idempotent method, else none)."""
        return self._read_retries if method in IDEMPOTENT else 0

    def _deadline(self, timeout: Any, watch: bool, server_seconds: float | None) -> dict[str, float]:
        """httpcore's ``timeout`` extension of a request: ``timeout`` as the official client reads a
        ``_request_timeout`` (seconds for each phase, or (connect, read)), else :attr:`timeouts`' for a watch or
        a request."""
        if isinstance(timeout, tuple) and len(timeout) == 2:
            connect, read = float(timeout[0]), float(timeout[1])
        elif isinstance(timeout, int | float) and not isinstance(timeout, bool) and timeout > 0:
            connect = read = float(timeout)
        else:
            connect, read = self.timeouts.for_query(watch, server_seconds)
        key = (connect, read)
        made = self._deadlines.get(key)
        if made is None:
            # write: sending a body is bounded as reading an answer is; pool: never waited on (no connection limit)
            made = {"connect": connect, "read": read, "write": read, "pool": connect}
            with self._deadlines_lock:
                if len(self._deadlines) < 64:
                    self._deadlines[key] = made
        return made


def transport_of(
    api_client: client.ApiClient,
    *,
    connections: int | None = None,
    network: Network | None = None,
    backend: httpcore.NetworkBackend | None = None,
) -> Transport:
    """A :class:`Transport` to ``api_client``'s server with its configuration, default headers (read at each
    request: the same mapping) and, for a bounded client, its deadlines and answer hook."""
    timeouts = getattr(api_client, "timeouts", None)
    return Transport(
        api_client.configuration,
        timeouts=timeouts if isinstance(timeouts, Timeouts) else DEFAULT_TIMEOUTS,
        on_answer=getattr(api_client, "on_answer", None),
        headers=api_client.default_headers,
        connections=connections,
        network=network,
        backend=backend,
    )


def _retries(configured: Any) -> tuple[int, int]:
    """(dials, read retries) of a configuration's ``retries``: a count, urllib3's ``Retry`` (its public
    ``connect``/``read``/``total``) or None (the default: 3 dials, one read retry)."""
    if configured is None:
        return CONNECT_RETRIES, 1
    if isinstance(configured, int) and not isinstance(configured, bool):
        return max(0, configured), min(1, max(0, configured))
    total = getattr(configured, "total", None)
    connect = getattr(configured, "connect", None)
    read = getattr(configured, "read", None)
    dials = connect if isinstance(connect, int) else total if isinstance(total, int) else CONNECT_RETRIES
    reads = read if isinstance(read, int) else total if isinstance(total, int) else 1
    return max(0, dials), min(1, max(0, reads))


def _tls_context(configuration: client.Configuration) -> ssl.SSLContext:
    """The TLS settings the official client builds its pool with, from the configuration's public fields."""
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert, cadata=configuration.ca_cert_data)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif configuration.assert_hostname is False:
        context.check_hostname = False
    return context


def _proxy(configuration: client.Configuration) -> httpcore.Proxy | None:
    """The configuration's HTTP proxy, unless its ``no_proxy`` names the server."""
    if not configuration.proxy:
        return None
    host = urllib.parse.urlsplit(configuration.host).hostname or ""
    for entry in str(configuration.no_proxy or "").split(","):
        entry = entry.strip().lstrip(".").lower()
        if entry == "*" or (entry and (host == entry or host.endswith("." + entry))):
            return None
    headers = dict(configuration.proxy_headers or {})
    return httpcore.Proxy(configuration.proxy, headers=headers or None)


def refusal(response: httpcore.Response, data: bytes) -> ApiException:
    """The ``ApiException`` of a non-2xx answer whose body is ``data`` (the subclass the generated client raises)."""
    reason = response.extensions.get("reason_phrase", b"")
    answer = _ErrorAnswer(
        response.status,
        reason.decode("latin-1") if isinstance(reason, bytes) else str(reason),
        httpx.Headers(response.headers),
        data,
    )
    try:  # the official client's from_response raises the subclass of the status (it never returns it)
        ApiException.from_response(http_resp=answer, body=data.decode("utf-8", "replace"), data=None)
    except ApiException as refused:
        return refused
    return ApiException(http_resp=answer, body=data.decode("utf-8", "replace"))


def _read_whole(response: httpcore.Response) -> bytes:
    """The rest of an answer, its connection then handed back (a broken read is the server unreachable)."""
    try:
        return response.read()
    except BROKEN as exc:
        raise unreachable(exc) from exc
    finally:
        response.close()


def unreachable(exc: Exception) -> Exception:
    """The error a transport failure is raised as (see the module docstring)."""
    if isinstance(exc, httpcore.ReadTimeout):
        return DeadlinePassed(f"{type(exc).__name__}: {exc}")
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, ssl.SSLError):
        cause = cause.__cause__ or cause.__context__
    if isinstance(exc, httpcore.ConnectError) and cause is not None:
        return ApiException(status=0, reason=f"{type(cause).__name__}\n{cause}")
    return Unreachable(f"{type(exc).__name__}: {exc}")
