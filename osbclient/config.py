"""Where a broker is and how to talk to it: URL, credentials, TLS trust, timeouts, API version and the
originating identity.

One frozen value per broker, so a controller can build it from a broker resource (and its Secret) and compare
it with the last one to know when to rebuild its client. Secrets (password, token) are kept out of ``repr``
and offered to ``redact`` so that no log line or exception message built from broker answers carries them.
"""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from opbroker.osbclient import versions

#: The OSB version this client speaks first (``X-Broker-API-Version``); it steps down to older ones on 412.
API_VERSION = versions.LATEST

_REDACTED = "***"


@dataclass(frozen=True)
class BasicAuth:
    """HTTP basic auth: what the OSB spec requires unless platform and broker agree on something else."""

    username: str
    password: str = field(repr=False)

    def header(self) -> str:
        return "Basic " + base64.b64encode(f"{self.username}:{self.password}".encode()).decode()

    def secrets(self) -> tuple[str, ...]:
        # The encoded header too: a broker that echoes the request headers back must not leak it either.
        return (self.password, self.header().removeprefix("Basic "))


@dataclass(frozen=True)
class BearerToken:
    """An opaque bearer token (``Authorization: Bearer …``), the other mechanism OSB platforms use."""

    token: str = field(repr=False)

    def header(self) -> str:
        return f"Bearer {self.token}"

    def secrets(self) -> tuple[str, ...]:
        return (self.token,)


Auth = BasicAuth | BearerToken


@dataclass(frozen=True)
class TLS:
    """Which server certificates to trust. Real brokers often use a private CA: ``ca_pem`` (one or more PEM
    certificates) then replaces the system trust store, as a Kubernetes ``caBundle`` does. Skipping
    verification exists for test landscapes; it cannot be combined with a CA (one of them would be ignored)."""

    ca_pem: str | bytes | None = field(default=None, repr=False)
    insecure_skip_tls_verify: bool = False

    def __post_init__(self) -> None:
        if self.ca_pem is not None and self.insecure_skip_tls_verify:
            raise ValueError("give either a CA bundle or insecure_skip_tls_verify, not both")
        if self.ca_pem is not None and "-----BEGIN CERTIFICATE-----" not in _pem_text(self.ca_pem):
            raise ValueError("the CA bundle holds no PEM certificate")

    def ssl_context(self) -> ssl.SSLContext:
        """The context httpx gets as ``verify=``: system roots, the given CA only, or no verification."""
        if self.insecure_skip_tls_verify:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            return context
        if self.ca_pem is not None:
            # cadata as str is PEM; as bytes Python would read DER, hence the decode.
            return ssl.create_default_context(cadata=_pem_text(self.ca_pem))
        return ssl.create_default_context()


@dataclass(frozen=True)
class OriginatingIdentity:
    """Who asked, sent as ``X-Broker-API-Originating-Identity: <platform> <base64 JSON>``.

    The platform must equal ``context.platform`` of the same request (OSB spec, "Originating Identity"); the
    value's properties are per platform (OSB profile): Kubernetes sends ``username``, ``uid``, ``groups`` and
    ``extra`` from the requesting user's ``user.info`` (see ``kubernetes_identity``)."""

    platform: str
    value: Mapping[str, Any]

    def __post_init__(self) -> None:
        if not self.platform or any(c.isspace() for c in self.platform):
            raise ValueError(f"the platform must be a non-empty word, got {self.platform!r}")
        object.__setattr__(self, "value", MappingProxyType(dict(self.value)))

    def __hash__(self) -> int:
        # The value is a read-only mapping (not hashable itself): hash what is sent.
        return hash(self.header())

    def header(self) -> str:
        encoded = base64.b64encode(json.dumps(dict(self.value), sort_keys=True).encode()).decode()
        return f"{self.platform} {encoded}"


def kubernetes_identity(
    username: str, uid: str, groups: Sequence[str] = (), extra: Mapping[str, Sequence[str]] | None = None
) -> OriginatingIdentity:
    """The OSB profile's Kubernetes identity: the ``user.info`` of whoever created or changed the resource."""
    value = {
        "username": username,
        "uid": uid,
        "groups": list(groups),
        "extra": {k: list(v) for k, v in (extra or {}).items()},
    }
    return OriginatingIdentity("kubernetes", value)


@dataclass(frozen=True)
class Broker:
    """One broker endpoint. ``timeout`` bounds each HTTP request (reading, writing, waiting for a pooled
    connection), ``connect_timeout`` the TCP and TLS handshake; polling an operation has its own limits
    (``opbroker.osbclient.polling``). ``originating_identity`` is the default for requests that do not name
    their own. ``api_version``: the version to speak first (one of ``versions.SUPPORTED``); the client steps
    down from it on 412, never above it."""

    url: str
    auth: Auth | None = None
    tls: TLS = TLS()
    api_version: str = API_VERSION
    timeout: float = 30.0
    connect_timeout: float = 10.0
    originating_identity: OriginatingIdentity | None = None

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("the broker URL must be an absolute http(s) URL")
        if parts.username is not None or parts.password is not None:
            # They would end up in logs and error messages; the URL is never treated as a secret.
            raise ValueError("put broker credentials in auth=, not in the URL")
        if self.timeout <= 0 or self.connect_timeout <= 0:
            raise ValueError("timeouts must be positive")
        versions.parse(self.api_version)  # raises for a version the client does not speak

    def secrets(self) -> tuple[str, ...]:
        return self.auth.secrets() if self.auth is not None else ()

    def redact(self, text: str) -> str:
        """``text`` with every secret of this broker replaced: for messages built from what a broker said."""
        for secret in sorted(self.secrets(), key=len, reverse=True):
            if secret:
                text = text.replace(secret, _REDACTED)
        return text


def _pem_text(pem: str | bytes) -> str:
    return pem.decode("ascii", errors="replace") if isinstance(pem, bytes) else pem
