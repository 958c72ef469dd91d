"""Getting a template's text: inline ``content``, base64 ``contentEncoded``, or an https ``url``.

URL templates are fetched through a :class:`Fetcher`, a one-method protocol so tests can plug in their own; the
default, :class:`fetching.HttpFetcher`, bounds the fetch in time, bytes and destination. Here, above any fetcher:

* **Cache.** Fetched bodies are kept per URL for ``Limits.url_cache_ttl`` seconds, at most
  ``Limits.url_cache_bytes`` in all (least recently used go first), so a controller rendering thousands of
  instances fetches each template once and still sees an updated template within minutes. Failures are not
  cached.
* **One fetch per URL at a time.** Renders that miss the cache together wait for the one fetch in flight and
  share its outcome, so a burst of renders is one request, not one per worker.
* **Digest.** A template with ``digest: sha256:...`` is rendered only from a body with that digest; a cached body
  with another digest is fetched again once (the template may have been updated with its plan), then refused.
"""

from __future__ import annotations

import base64
import binascii
import concurrent.futures
import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from opbroker.api.catalog import TemplateSpec, TemplateType
from opbroker.rendering.errors import TemplateSourceError
from opbroker.rendering.fetching import FetchError, HttpFetcher
from opbroker.rendering.limits import Limits

__all__ = ["FetchError", "Fetcher", "HttpFetcher", "TemplateTexts", "label"]


class Fetcher(Protocol):
    """Fetches a template over http(s). Implementations raise :class:`FetchError` with a readable reason, and
    return within ``timeout`` seconds in all."""

    def fetch(self, url: str, *, timeout: float, max_bytes: int) -> bytes: ...


@dataclass(frozen=True)
class _Fetched:
    """A fetched body, when it was fetched and its digest (``sha256:<hex>``)."""

    at: float
    body: bytes
    digest: str


def label(spec: TemplateSpec) -> str:
    """How error messages name a template: its action and where its text comes from."""
    if spec.type is TemplateType.HELM:
        return f"{spec.action.value} (helm chart {spec.url or 'in contentEncoded'})"
    if spec.url is not None:
        return f"{spec.action.value} ({spec.url})"
    if spec.content_encoded is not None:
        return f"{spec.action.value} (contentEncoded)"
    return spec.action.value


class TemplateTexts:
    """Resolves a :class:`TemplateSpec` to its source text; thread-safe, with the URL cache and single flight."""

    def __init__(self, fetcher: Fetcher, limits: Limits, clock: Callable[[], float] = time.monotonic) -> None:
        self._fetcher = fetcher
        self._limits = limits
        self._clock = clock
        self._cache: OrderedDict[str, _Fetched] = OrderedDict()
        self._cached_bytes = 0
        self._in_flight: dict[str, concurrent.futures.Future[_Fetched]] = {}
        self._lock = threading.Lock()

    def text(self, spec: TemplateSpec) -> str:
        if spec.content is not None:
            return self._bounded(spec.content, "content")
        if spec.content_encoded is not None:
            try:
                raw = base64.b64decode(spec.content_encoded, validate=True)
                return self._bounded(raw.decode("utf-8"), "contentEncoded")
            except (binascii.Error, UnicodeDecodeError) as exc:
                raise TemplateSourceError(f"contentEncoded is not base64 of UTF-8 text ({exc})") from None
        assert spec.url is not None  # TemplateSpec guarantees exactly one source
        body = self._fetched(spec.url, spec.digest)
        try:
            return body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TemplateSourceError(f"cannot fetch {spec.url}: the body is not UTF-8 text ({exc})") from None

    def values_template(self, spec: TemplateSpec) -> str:
        """A helm template's values template (``content``), or "" when the chart's defaults are enough."""
        return self._bounded(spec.content, "content") if spec.content is not None else ""

    def chart(self, spec: TemplateSpec) -> bytes:
        """A helm template's chart archive: base64 ``contentEncoded`` or fetched from ``url`` (cached like text)."""
        if spec.content_encoded is not None:
            try:
                raw = base64.b64decode(spec.content_encoded, validate=True)
            except binascii.Error as exc:
                raise TemplateSourceError(f"contentEncoded is not base64 of a chart archive ({exc})") from None
            if len(raw) > self._limits.max_template_bytes:
                raise TemplateSourceError(
                    f"the chart archive is {len(raw)} bytes, over the limit of {self._limits.max_template_bytes}"
                )
            return raw
        assert spec.url is not None  # TemplateSpec guarantees a chart source for helm
        return self._fetched(spec.url, spec.digest)

    def _bounded(self, text: str, what: str) -> str:
        if len(text) > self._limits.max_template_bytes:
            raise TemplateSourceError(
                f"{what} is {len(text)} characters, over the limit of {self._limits.max_template_bytes}"
            )
        return text

    def _fetched(self, url: str, digest: str | None) -> bytes:
        """The body of ``url``: from the cache, from the fetch in flight, or fetched; checked against ``digest``."""
        with self._lock:
            cached = self._cache.get(url)
            usable = (
                cached is not None
                and self._clock() - cached.at < self._limits.url_cache_ttl
                and digest in (None, cached.digest)
            )
            if cached is not None and usable:
                self._cache.move_to_end(url)
                return cached.body
            flight = self._in_flight.get(url)
            leader = flight is None
            if flight is None:
                flight = self._in_flight[url] = concurrent.futures.Future()
        fetched = self._fetch_once(url, flight) if leader else self._join(url, flight)
        if digest is not None and fetched.digest != digest:
            raise TemplateSourceError(
                f"cannot use {url}: its content has digest {fetched.digest}, the template requires {digest}; "
                "nothing was rendered"
            )
        return fetched.body

    def _fetch_once(self, url: str, flight: concurrent.futures.Future[_Fetched]) -> _Fetched:
        """Fetch ``url`` for every render waiting on ``flight``, and cache the body."""
        limit = self._limits.max_template_bytes
        try:
            try:
                body = self._fetcher.fetch(url, timeout=self._limits.fetch_timeout, max_bytes=limit)
            except FetchError as exc:
                raise TemplateSourceError(f"cannot fetch {url}: {exc}") from None
            if len(body) > limit:
                raise TemplateSourceError(f"cannot fetch {url}: the template is larger than the limit of {limit} bytes")
            fetched = _Fetched(self._clock(), body, "sha256:" + hashlib.sha256(body).hexdigest())
        except BaseException as exc:
            with self._lock:
                del self._in_flight[url]
            flight.set_exception(exc)
            raise
        with self._lock:
            del self._in_flight[url]
            self._store(url, fetched)
        flight.set_result(fetched)
        return fetched

    def _join(self, url: str, flight: concurrent.futures.Future[_Fetched]) -> _Fetched:
        """Wait for another render's fetch of ``url`` (bounded: a fetcher answers within its timeout)."""
        try:
            return flight.result(timeout=self._limits.fetch_timeout + 1.0)
        except concurrent.futures.TimeoutError:
            raise TemplateSourceError(f"cannot fetch {url}: no answer within {self._limits.fetch_timeout:g}s") from None
        except TemplateSourceError as exc:
            raise TemplateSourceError(str(exc)) from None  # a fresh error: the leader's traceback is its own

    def _store(self, url: str, fetched: _Fetched) -> None:
        """Cache ``fetched`` (lock held), dropping the least recently used bodies past ``url_cache_bytes``."""
        old = self._cache.pop(url, None)
        if old is not None:
            self._cached_bytes -= len(old.body)
        if len(fetched.body) > self._limits.url_cache_bytes:
            return
        self._cache[url] = fetched
        self._cached_bytes += len(fetched.body)
        while self._cached_bytes > self._limits.url_cache_bytes:
            _, dropped = self._cache.popitem(last=False)
            self._cached_bytes -= len(dropped.body)
