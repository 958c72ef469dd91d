"""How a broker process is configured (CLI flags and environment fill this in)."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

from opbroker.api.conventions import DEFAULT_NAMESPACE, catalog_namespaces
from opbroker.api.shards import Shards
from opbroker.broker.bodylimit import DEFAULT_MAX_BODY_BYTES
from opbroker.broker.connections import DEFAULT_HEAD_TIMEOUT, DEFAULT_MAX_HEAD_BYTES
from opbroker.broker.readiness import DEFAULT_DEADLINE

USERNAME_ENV = "OPBROKER_BROKER_USERNAME"
PASSWORD_ENV = "OPBROKER_BROKER_PASSWORD"
ADMIN_USERNAME_ENV = "OPBROKER_ADMIN_USERNAME"
ADMIN_PASSWORD_ENV = "OPBROKER_ADMIN_PASSWORD"


@dataclass(frozen=True)
class Settings:
    namespace: str = DEFAULT_NAMESPACE
    """The control-plane namespace: the catalog (SFService, SFPlan) and the credentials Secret live here."""
    catalog_namespaces: tuple[str, ...] = ()
    """The trusted namespaces the catalog is read from (``--catalog-namespace``, repeatable); empty:
    ``namespace`` alone — the controller's default too. Give both the same list."""
    shards: Shards = field(default_factory=Shards)
    """The controller's shards (``--shards``, the controller's count; issue 46): what the broker creates is labelled
    with the shard that handles it (:mod:`opbroker.api.shards`). Unsharded: no label."""
    instance_namespace: str | None = None
    """Where instances go when the request context names no namespace (default: ``namespace``)."""
    context_namespaces: bool = True
    """Honour ``context.namespace`` (Kubernetes profile). Off: every instance lives in ``instance_namespace``
    and every lookup is a single GET (no cluster-wide list)."""
    allowed_namespaces: tuple[str, ...] = ()
    """Namespaces a request's ``context.namespace`` may name (``--allowed-namespace``), besides the default
    instance namespace; see :mod:`opbroker.broker.namespaces`. Any other is refused with 400 unless it matches
    ``allowed_namespace_selector``."""
    allowed_namespace_selector: str | None = None
    """A label selector (``key=value,...``) on Namespaces: a request's ``context.namespace`` may name one whose
    labels match (``--allowed-namespace-selector``). None: only the listed ones."""
    namespace_labels_ttl: float = 30.0
    """How long a Namespace's labels, read for ``allowed_namespace_selector``, are reused (a relabelled namespace
    is honoured, or refused, after at most this)."""
    sync_timeout: float = 60.0
    """How long a synchronous plan's request waits for the controller before answering."""
    retry_after: int = 5
    """Seconds sent as ``Retry-After`` with 202 and with ``last_operation`` answers still in progress."""
    credentials_secret: str | None = None
    """Secret (in ``namespace``) with ``username``/``password`` keys for basic auth."""
    username: str | None = None
    password: str | None = None
    credentials_ttl: float = 30.0
    """How long a credentials Secret read is reused (a rotated password is honoured after at most this)."""
    namespace_index: bool = True
    """Keep a watch-fed name→namespace index as a lookup hint (never as the truth)."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    """Request bodies above this many bytes are refused with 413 before they are read or parsed."""
    max_request_head_bytes: int = DEFAULT_MAX_HEAD_BYTES
    """The largest request line plus headers read; a larger head is refused (400) and its connection closed."""
    request_head_timeout: float = DEFAULT_HEAD_TIMEOUT
    """Seconds a connection may take to send a complete request head, when it opens and after each response;
    then it is closed (see :mod:`opbroker.broker.connections`)."""
    metrics_port: int | None = None
    """Serve ``/metrics`` on this port of ``metrics_host``, without authentication, instead of on the OSB port
    (``--metrics-port``): a port the broker's Service does not expose, for in-cluster scrapes."""
    metrics_host: str = "127.0.0.1"
    """The address ``metrics_port`` listens on (``opbroker broker serve`` gives its ``--host``)."""
    metrics_authentication: bool = True
    """Without ``metrics_port``: ``/metrics`` on the OSB port needs the broker's basic-auth credentials, like
    ``/v2`` (``--no-metrics-authentication`` serves it to anyone)."""
    readiness_deadline: float = DEFAULT_DEADLINE
    """Seconds ``/readyz`` waits for its check before answering 503 (see :mod:`opbroker.broker.readiness`)."""
    withdrawn_bindings_wait: float = 10.0
    """How long an accepted deprovision waits, before its DELETE, for the bindings whose binds lost the race to
    it (withdrawn, held by the controller's finalizer) to be gone (see :mod:`opbroker.broker.effects`)."""

    admin_credentials_secret: str | None = None
    """Secret (in ``namespace``) with ``username``/``password`` keys for the admin API (``/admin``,
    :mod:`opbroker.broker.admin`); they must differ from the OSB credentials. Neither this nor
    ``admin_username``/``admin_password``: the admin API is not served (404)."""
    admin_username: str | None = None
    admin_password: str | None = None

    @property
    def admin_enabled(self) -> bool:
        return self.admin_credentials_secret is not None or bool(self.admin_username and self.admin_password)

    def admin_credentials(self) -> Settings:
        """These settings with the admin credentials in the OSB credentials' place (for an ``Authenticator``)."""
        return dataclasses.replace(
            self,
            credentials_secret=self.admin_credentials_secret,
            username=self.admin_username,
            password=self.admin_password,
        )

    @property
    def trusted_namespaces(self) -> tuple[str, ...]:
        """Where the catalog is read from (:func:`opbroker.api.conventions.catalog_namespaces`)."""
        return catalog_namespaces(self.namespace, self.catalog_namespaces)

    @property
    def default_instance_namespace(self) -> str:
        return self.instance_namespace or self.namespace

    @classmethod
    def with_environment(cls, **values: object) -> Settings:
        """Settings with basic-auth credentials taken from the environment when not given."""
        values.setdefault("username", os.environ.get(USERNAME_ENV) or None)
        values.setdefault("password", os.environ.get(PASSWORD_ENV) or None)
        values.setdefault("admin_username", os.environ.get(ADMIN_USERNAME_ENV) or None)
        values.setdefault("admin_password", os.environ.get(ADMIN_PASSWORD_ENV) or None)
        return cls(**values)  # type: ignore[arg-type]
