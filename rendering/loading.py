"""Getting a template's text: inline ``content``, base64 ``contentEncoded``, or an http(s) ``url``.

URL templates are fetched through a :class:`Fetcher`, a one-method protocol so the controller can plug in its
own client (proxy, CA bundle) and tests can serve templates from a loopback server. The default,
:class:`HttpFetcher`, bounds the request in time and size. Fetched text is cached in memory per URL for
``Limits.url_cache_ttl`` seconds, so a controller rendering thousands of instances fetches each template once
and still sees an updated template within minutes. Failures are not cached.
"""

from __future__ import annotations

import base64
import binascii
import threading
import time
from collections.abc import Callable
from typing import Protocol

from opbroker.api.catalog import TemplateSpec, TemplateType
from opbroker.rendering.errors import TemplateSourceError
from opbroker.rendering.limits import Limits


class FetchError(Exception):
    """A fetcher could not deliver the document: unreachable, an HTTP error, too large, not text."""


class Fetcher(Protocol):
    """Fetches a template over http(s). Implementations raise :class:`FetchError` with a readable reason."""

    def fetch(self, url: str, *, timeout: float, max_bytes: int) -> bytes: ...


class HttpFetcher:
    """The default fetcher: one GET with httpx, redirects followed, body streamed and cut off at ``max_bytes``."""

    def fetch(self, url: str, *, timeout: float, max_bytes: int) -> bytes:
        import httpx  # imported on first use: most plans inline their templates

        try:
            with httpx.stream("GET", url, timeout=timeout, follow_redirects=True) as response:
                if response.status_code != 200:
                    raise FetchError(f"HTTP {response.status_code} {response.reason_phrase}")
                declared = response.headers.get("content-length")
                if declared is not None and declared.isdigit() and int(declared) > max_bytes:
                    raise FetchError(f"the template is {declared} bytes, over the limit of {max_bytes}")
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > max_bytes:
                        raise FetchError(f"the template is larger than the limit of {max_bytes} bytes")
                return bytes(body)
        except httpx.TimeoutException:
            raise FetchError(f"no answer within {timeout:g}s") from None
        except httpx.HTTPError as exc:
            raise FetchError(f"unreachable ({type(exc).__name__}: {exc})") from None


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
    """Resolves a :class:`TemplateSpec` to its source text; thread-safe, with the URL cache."""

    def __init__(self, fetcher: Fetcher, limits: Limits, clock: Callable[[], float] = time.monotonic) -> None:
        self._fetcher = fetcher
        self._limits = limits
        self._clock = clock
        self._cache: dict[str, tuple[float, bytes]] = {}
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
        return self._fetched(spec.url)

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
        return self._fetched_bytes(spec.url)

    def _bounded(self, text: str, what: str) -> str:
        if len(text) > self._limits.max_template_bytes:
            raise TemplateSourceError(
                f"{what} is {len(text)} characters, over the limit of {self._limits.max_template_bytes}"
            )
        return text

    def _fetched(self, url: str) -> str:
        body = self._fetched_bytes(url)
        try:
            return body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TemplateSourceError(f"cannot fetch {url}: the body is not UTF-8 text ({exc})") from None

    def _fetched_bytes(self, url: str) -> bytes:
        now = self._clock()
        with self._lock:
            cached = self._cache.get(url)
        if cached is not None and now - cached[0] < self._limits.url_cache_ttl:
            return cached[1]
        try:
            body = self._fetcher.fetch(
                url, timeout=self._limits.fetch_timeout, max_bytes=self._limits.max_template_bytes
            )
        except FetchError as exc:
            raise TemplateSourceError(f"cannot fetch {url}: {exc}") from None
        if len(body) > self._limits.max_template_bytes:
            raise TemplateSourceError(
                f"cannot fetch {url}: the template is larger than the limit of {self._limits.max_template_bytes} bytes"
            )
        with self._lock:
            self._cache[url] = (now, body)
        return body
