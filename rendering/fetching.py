"""The default :class:`Fetcher` of ``url`` templates: one GET, bounded in time and bytes, kept off private networks.

Built on httpcore (httpx's own transport) because it lets a fetch decide where its sockets connect, which httpx's
client does not:

* **Addresses.** Each host is resolved here and refused if any of its addresses is loopback, link-local, private
  or otherwise not public, unless the operator allowed its network (:mod:`.urlpolicy`); the connection then goes
  to the address that was checked, never to a second lookup's answer, so DNS rebinding (a name that resolves to a
  public address for the check and to 127.0.0.1 for the connect) cannot slip through. TLS still verifies the
  certificate for the URL's host name.
* **Redirects** are followed by hand, at most ``FetchPolicy.max_redirects``, each on the URL's own scheme and each
  target's addresses checked like the first.
* **One deadline per fetch.** DNS, connect, TLS, every write and every read get only the time left of ``timeout``,
  so a host that sends a byte every few seconds fails at the deadline instead of holding a worker for ever.
* **Bytes.** A declared ``Content-Length`` over ``max_bytes`` is refused before reading; otherwise reading stops
  once the body passes ``max_bytes``.
* **No proxy from the environment.** ``HTTP(S)_PROXY``/``ALL_PROXY`` are never read; ``FetchPolicy.proxy`` is the
  only proxy. Through a proxy the proxy resolves names, so only IP-literal hosts are checked here: the proxy's
  own rules bound where it connects.
"""

from __future__ import annotations

import concurrent.futures
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit

import httpcore

from opbroker.rendering import urlpolicy
from opbroker.rendering.urlpolicy import FetchPolicy

#: Resolves (host, port, seconds) to IP address strings; raises FetchError when it cannot.
Resolver = Callable[[str, int, float], Sequence[str]]


class FetchError(Exception):
    """A fetcher could not deliver the document: unreachable, an HTTP error, too large, not text, refused."""


class _DeadlinePassed(FetchError):
    pass


class Deadline:
    """The one deadline of a fetch; :meth:`left` caps each socket operation's timeout to the time remaining."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self._at = clock() + seconds

    def left(self, timeout: float | None = None) -> float:
        left = self._at - self._clock()
        if left <= 0:
            raise _DeadlinePassed(f"no complete answer within {self.seconds:g}s")
        return left if timeout is None else min(timeout, left)


_lookups: concurrent.futures.ThreadPoolExecutor | None = None
_lookups_lock = threading.Lock()


def resolve(host: str, port: int, seconds: float) -> list[str]:
    """The addresses of ``host``, looked up within ``seconds`` (getaddrinfo has no timeout of its own, so it runs
    on a small pool of lookup threads; one that hangs is abandoned, not waited for)."""
    global _lookups
    with _lookups_lock:
        if _lookups is None:
            _lookups = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="template-dns")
    future = _lookups.submit(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM)
    try:
        infos = future.result(timeout=seconds)
    except concurrent.futures.TimeoutError:
        raise _DeadlinePassed(f"no answer from DNS for {host} in time") from None
    except OSError as exc:
        raise FetchError(f"cannot resolve {host} ({exc.strerror or exc})") from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class _BoundedStream(httpcore.NetworkStream):
    """A connection whose every operation gets only the time left of the fetch."""

    def __init__(self, inner: httpcore.NetworkStream, deadline: Deadline) -> None:
        self._inner = inner
        self._deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, self._deadline.left(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, self._deadline.left(timeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        inner = self._inner.start_tls(ssl_context, server_hostname, self._deadline.left(timeout))
        return _BoundedStream(inner, self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    """Connects to checked addresses only (``check``), each connection bounded by the fetch's deadline."""

    def __init__(self, deadline: Deadline, policy: FetchPolicy, resolver: Resolver, *, check: bool) -> None:
        self._sync = httpcore.SyncBackend()
        self._deadline = deadline
        self._policy = policy
        self._resolver = resolver
        self._check = check

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        addresses = self._resolver(host, port, self._deadline.left(timeout))
        if not addresses:
            raise FetchError(f"{host} has no address")
        if self._check:
            for address in addresses:
                reason = urlpolicy.refusal(address, self._policy)
                if reason is not None:
                    raise FetchError(f"refused: {host} resolves to {address}, {reason} {urlpolicy.HINT}")
        failure: Exception | None = None
        for address in addresses:  # the checked addresses themselves: no second lookup to be answered differently
            try:
                stream = self._sync.connect_tcp(
                    address, port, self._deadline.left(timeout), local_address, socket_options
                )
            except httpcore.ConnectError as exc:
                failure = exc
                continue
            return _BoundedStream(stream, self._deadline)
        assert failure is not None
        raise failure

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        raise FetchError("templates are not fetched over unix sockets")

    def sleep(self, seconds: float) -> None:
        time.sleep(min(seconds, self._deadline.left()))


class HttpFetcher:
    """The default fetcher (see the module's docstring). Thread-safe; one per renderer.

    ``ssl_context`` verifies servers (default: httpx's, certifi's CAs); ``resolver`` looks names up (tests fake DNS
    with it); ``clock`` drives the deadline.
    """

    def __init__(
        self,
        policy: FetchPolicy | None = None,
        *,
        ssl_context: ssl.SSLContext | None = None,
        resolver: Resolver = resolve,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.policy = policy or FetchPolicy()
        self._ssl_context = ssl_context
        self._resolver = resolver
        self._clock = clock

    def fetch(self, url: str, *, timeout: float, max_bytes: int) -> bytes:
        deadline = Deadline(timeout, self._clock)
        scheme = urlsplit(url).scheme
        current = url
        try:
            with self._pool(deadline) as pool:
                for _ in range(self.policy.max_redirects + 1):
                    try:
                        body, location = self._get(pool, current, deadline, max_bytes)
                    except FetchError as exc:
                        raise FetchError(f"redirected to {current}: {exc}" if current != url else str(exc)) from None
                    if body is not None:
                        return body
                    try:
                        current = urlpolicy.redirect_target(current, location, scheme)
                    except ValueError as exc:
                        raise FetchError(str(exc)) from None
        except httpcore.TimeoutException:
            raise FetchError(f"no complete answer within {timeout:g}s") from None
        except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.ProxyError) as exc:
            raise FetchError(f"unreachable ({type(exc).__name__}: {exc})") from None
        except httpcore.UnsupportedProtocol as exc:
            raise FetchError(f"unsupported URL ({exc})") from None
        raise FetchError(f"more than {self.policy.max_redirects} redirects")

    def _pool(self, deadline: Deadline) -> httpcore.ConnectionPool:
        context = self._ssl_context or _default_context()
        if self.policy.proxy is not None:
            return httpcore.HTTPProxy(
                proxy_url=self.policy.proxy,
                ssl_context=context,
                network_backend=_Backend(deadline, self.policy, self._resolver, check=False),
            )
        return httpcore.ConnectionPool(
            ssl_context=context, network_backend=_Backend(deadline, self.policy, self._resolver, check=True)
        )

    def _get(
        self, pool: httpcore.ConnectionPool, url: str, deadline: Deadline, max_bytes: int
    ) -> tuple[bytes | None, str | None]:
        """The body of a 200, or (None, Location) for a redirect; FetchError for anything else."""
        host = urlsplit(url).hostname or ""
        refused = urlpolicy.literal_refusal(host, self.policy)
        if refused is not None:
            raise FetchError(refused)
        left = deadline.left()
        timeouts = {"connect": left, "read": left, "write": left, "pool": left}
        headers = [("Accept", "*/*"), ("Accept-Encoding", "identity"), ("User-Agent", "opbroker-template-fetcher")]
        with pool.stream("GET", url, headers=headers, extensions={"timeout": timeouts}) as response:
            if response.status in urlpolicy.REDIRECTS:
                return None, _header(response, b"location")
            if response.status != 200:
                phrase = response.extensions.get("reason_phrase", b"").decode("latin-1")
                raise FetchError(f"HTTP {response.status} {phrase}".rstrip())
            declared = _header(response, b"content-length")
            if declared is not None and declared.isdigit() and int(declared) > max_bytes:
                raise FetchError(f"the template is {declared} bytes, over the limit of {max_bytes}")
            body = bytearray()
            for chunk in response.iter_stream():
                body += chunk
                if len(body) > max_bytes:
                    raise FetchError(f"the template is larger than the limit of {max_bytes} bytes")
            return bytes(body), None


def _header(response: httpcore.Response, name: bytes) -> str | None:
    value = next((v for k, v in response.headers if k.lower() == name), None)
    return value.decode("latin-1") if value is not None else None


_context: ssl.SSLContext | None = None


def _default_context() -> ssl.SSLContext:
    """httpx's verifying context (certifi's CAs), made once: loading the CA bundle costs tens of milliseconds."""
    global _context
    if _context is None:
        import httpx

        _context = httpx.create_ssl_context(trust_env=False)
    return _context
