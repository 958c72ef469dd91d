"""Basic-auth credentials of the broker: from a Secret in the control-plane namespace, or the environment.

A Secret read is reused for ``credentials_ttl`` seconds, so a rotated password is honoured within that
time by every replica, without a restart. Comparison is constant-time (:func:`headers.credentials_match`).
"""

from __future__ import annotations

import base64
import threading
import time

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from opbroker.broker import errors, headers
from opbroker.broker.settings import PASSWORD_ENV, USERNAME_ENV, Settings
from opbroker.kubeclient.lean import LeanApi, object_path
from opbroker.kubeclient.wire import mapping_of, string_map_of


class ConfigurationError(RuntimeError):
    """The broker cannot start as configured (no credentials, unreadable Secret)."""


class Authenticator:
    def __init__(self, settings: Settings, api_client: client.ApiClient | None) -> None:
        self.settings = settings
        self._api = LeanApi(api_client) if api_client is not None else None  # the project's transport, bounded
        self._lock = threading.Lock()
        #: The credentials last read from the Secret and when (one attribute: read without the lock).
        self._read: tuple[tuple[str, str], float] | None = None

    def verify(self) -> None:
        """Fail fast at start-up when no usable credentials are configured."""
        try:
            self.expected()
        except errors.BrokerError as exc:
            raise ConfigurationError(exc.description) from None

    def expected(self) -> tuple[str, str]:
        settings = self.settings
        if settings.credentials_secret is None:
            if settings.username and settings.password:
                return settings.username, settings.password
            raise errors.BrokerError(
                errors.Reason.UNAVAILABLE,
                f"no broker credentials: give a Secret (--credentials-secret) or set {USERNAME_ENV} and {PASSWORD_ENV}",
            )
        with self._lock:
            read = self._read
            if read is not None and time.monotonic() - read[1] < settings.credentials_ttl:
                return read[0]
            try:
                self._read = (self._read_secret(settings.credentials_secret), time.monotonic())
            except (ApiException, OSError) as exc:  # refused; unreachable or past its deadline (the transport's)
                if read is None:
                    raise errors.BrokerError(
                        errors.Reason.UNAVAILABLE,
                        f"cannot read the credentials Secret {settings.namespace}/{settings.credentials_secret}: "
                        f"{getattr(exc, 'status', None) or type(exc).__name__}",
                    ) from None
                return read[0]
            return self._read[0]

    def cached(self) -> tuple[str, str] | None:
        """The expected credentials when they are at hand without I/O (from the environment, or a Secret read
        less than ``credentials_ttl`` ago); None when :meth:`expected` must read (or refuse). Never blocks:
        the event loop asks this before every request, and sends only the rest to a worker thread."""
        settings = self.settings
        if settings.credentials_secret is None:
            return (settings.username, settings.password) if settings.username and settings.password else None
        read = self._read
        if read is not None and time.monotonic() - read[1] < settings.credentials_ttl:
            return read[0]
        return None

    def _read_secret(self, name: str) -> tuple[str, str]:
        assert self._api is not None
        secret = mapping_of(self._api.request("GET", object_path("/api/v1", "secrets", self.settings.namespace, name)))
        data = string_map_of(secret.get("data"))
        try:
            username = base64.b64decode(data.get("username") or "").decode("utf-8")
            password = base64.b64decode(data.get("password") or "").decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            username = password = ""
        if not username or not password:
            raise errors.BrokerError(
                errors.Reason.UNAVAILABLE,
                f"the credentials Secret {self.settings.namespace}/{name} needs non-empty "
                "'username' and 'password' keys",
            )
        return username, password

    def check(self, authorization: str | None) -> bool:
        """Whether the ``Authorization`` header carries the broker's credentials."""
        return headers.credentials_match(headers.basic_credentials(authorization), self.expected())
