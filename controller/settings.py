"""Controller configuration: one frozen value built by the CLI (or a test) and passed down.

Every subsystem's settings are part of it (the claims subsystem's as :attr:`ControllerSettings.claims`), so
what a controller runs with is visible in one place and never read from the environment.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from opbroker.api import webhooks
from opbroker.api.conventions import (
    DEFAULT_NAMESPACE,
    DEFAULT_PLAN_SERVICE_ACCOUNT,
    NAMESPACE_SERVICE_ACCOUNT,
    catalog_namespaces,
)
from opbroker.api.shards import Shards
from opbroker.controller.claims.settings import ClaimsSettings
from opbroker.controller.core.budgets import NamespaceBudgets
from opbroker.controller.runtime.policies import Policies
from opbroker.kubeclient.deadlines import Timeouts
from opbroker.rendering.urlpolicy import FetchPolicy


@dataclass(frozen=True)
class ControllerSettings:
    namespace: str = DEFAULT_NAMESPACE
    """The control-plane namespace: the catalog (SFService, SFPlan), SFClusters and the leader-election Lease."""
    catalog_namespaces: tuple[str, ...] = ()
    """The trusted namespaces SFServices and SFPlans are read from (``--catalog-namespace``, repeatable); empty:
    ``namespace`` alone. The broker's ``--catalog-namespace`` must name the same. Any other namespace's are a
    tenant's: ignored with a Warning event."""
    registry_namespace: str | None = None
    """Where the registries of instances and bindings are kept (``--registry-namespace``; None: :attr:`namespace`):
    they hold generated passwords and keys, so a namespace consumers cannot read (issue 29)."""
    error_threshold: int = 8
    """Consecutive errors after which an operation is marked failed instead of retried."""
    status_poll_seconds: float = 10.0
    """Safety-net re-check of in-progress operations; source watches usually react much sooner."""
    status_poll_max_seconds: float = 300.0
    """The safety net's longest interval: when every object an operation's status template reads is of a kind
    whose watch is live, its re-check interval grows with its age (half of it, from :attr:`status_poll_seconds`)
    up to this, so a long wait is not paid for with a status render every :attr:`status_poll_seconds`; otherwise
    the poll is the only news and stays at :attr:`status_poll_seconds` (at or below it: no growth)."""
    resync_seconds: float = 600.0
    """Day two: the safety net for a missed event (``--resync-seconds``; 0: never). Every this many seconds the
    resync sweep (``controller.resync``) queues the provisioned instances whose objects moved without an event; a
    bound binding is looked at again this long after its last look (±10 % by uid)."""
    live_status_seconds: float = 10.0
    """Day two: at most one live-status change (Ready and its Event) is written per instance per this many seconds,
    so an operator flapping between healthy and failing does not flood writes."""
    drift_corrections: int = 3
    """Day two: corrections of one object within :attr:`drift_window_seconds` before opbroker stops (``Synced=False``
    naming the other writer): two writers fighting over a field end there, not in a hot loop."""
    drift_window_seconds: float = 300.0
    """Day two: the window :attr:`drift_corrections` are counted in (the wait after a correction before the next is
    the policy table's ``drift_backoff``, doubling with each in the window)."""
    workers: int = 4
    """Reconciles running at once (each does blocking API calls in a thread)."""
    namespace_workers: int = 2
    """Reconciles of one namespace at once, of all the runtime's workers (:attr:`total_workers`); the other
    namespaces' keys are served in turn meanwhile (issue 42: nothing a tenant writes sizes the controller). A
    tenant that floods its namespace with objects holds at most this many workers, and another namespace's next
    key waits for at most one key of each namespace with work ready, not for the flood."""
    leader_election: bool = True
    lease_name: str = "opbroker-controller"
    """The Lease replicas campaign for; sharded, each shard's is ``<lease_name>-shard-<i>`` (:attr:`lease`)."""
    shards: Shards = field(default_factory=Shards)
    """This replica's shard of the instances and bindings (``--shards``, ``--shard``; issue 46): it watches only
    those labelled with it and campaigns for its shard's Lease; shard 0 also does what is done once per control
    plane. One shard (the default): everything, as before shards. Not with :attr:`multicluster`."""
    shard_takeover: bool = False
    """A standby campaigns for every shard's Lease, its own first, and runs as the shard whose Lease it takes
    (``--shard-takeover``; issue 46): a few spare pods cover any shard whose own replicas are gone (a lost node
    holds a StatefulSet's pod of that ordinal until the node is known dead). Sharded, under leader election."""
    lease_seconds: int = 15
    """How long a leader's lease lasts without renewal: the longest a failover takes."""
    shutdown_seconds: float = 5.0
    """On SIGTERM or SIGINT: how long the reconciles running may take to end before the process exits all the
    same (``--shutdown-seconds``). An idle controller exits at once. Under leader election it is capped
    (:attr:`drain_seconds`): the Lease is still renewed while the controller stops, but a stop that fails to
    renew must end before the renew deadline ends leading, so that the leader itself releases the Lease."""
    request_timeout_seconds: float = 60.0
    """How long an API request may wait for each read of its answer (connecting has 10 s): the API server's own
    default request timeout, past which it gives up itself. See :mod:`opbroker.kubeclient.deadlines`."""
    watch_seconds: int = 60
    """Server-side duration of each of the controller's watch requests; a watch that delivers nothing (no event,
    no bookmark, no end) for a quarter longer is dead and restarted from its last resourceVersion."""
    stuck_seconds: float = 120.0
    """Liveness fails (``/healthz`` 503) when a reconcile has run this long, keys wait while no reconcile started
    or finished this long, or the API server has answered nothing (its probe included) this long. Readiness
    fails after three probe periods (15 s) of silence."""
    metrics_port: int | None = None
    """Serve Prometheus metrics and the health probes (``/healthz``, ``/readyz``) on this port (0.0.0.0); None
    to disable."""
    api_wait_seconds: float = 120.0
    """At start (and on becoming the leader): how long to wait for the API server to serve every resource the
    controller watches before giving up and exiting non-zero."""
    multicluster: bool = False
    """Be the master of several clusters: schedule instances onto SFClusters, hand them to sister clusters
    and mirror their status back (``opbroker.controller.multicluster``)."""
    scheduler: str = "default"
    """Which scheduler places instances (multi-cluster only): default, round-robin, least-utilized,
    label-selector or capacity-aware."""
    cluster_probe_seconds: float = 10.0
    """How often each SFCluster is probed and its status refreshed (multi-cluster only)."""
    max_operation_seconds: float = 7200.0
    """A provision, update or bind still in progress this long after the broker requested it (its
    ``lastOperation.startedAt``) is marked failed (reason ``OperationTimedOut``): an operator that never
    reports an outcome must not leave an operation in progress forever. 0 disables the limit."""
    webhook_port: int | None = None
    """Serve the admission webhook refusing the deletion of an Instance with Bindings on this port (HTTPS,
    0.0.0.0) and register it; None: no webhook, the finalizer holds such a deletion instead."""
    webhook_url: str | None = None
    """The URL the API server reaches the webhook at (default ``https://127.0.0.1:<webhook_port>``); the
    controller then applies the whole ValidatingWebhookConfiguration itself."""
    webhook_service: str | None = None
    """In-cluster: the Service in :attr:`namespace` the API server reaches the webhook through (port 443); the
    configuration :attr:`webhook_configuration` exists already (the ControlPlane creates it) and the controller
    only fills in its ``caBundle``. Takes precedence over :attr:`webhook_url`."""
    webhook_configuration: str = webhooks.CONFIGURATION
    """The ValidatingWebhookConfiguration's name."""
    webhook_secret: str = webhooks.SECRET
    """The Secret in :attr:`namespace` holding the webhook's CA and serving certificate, shared by all replicas
    (created by the first replica that needs it)."""
    onboard_namespace_selector: str | None = None
    """A label selector on Namespaces: the controller onboards those whose labels match, as the onboarder account
    (``--onboard-namespace-selector``; :class:`opbroker.controller.onboarding.NamespaceOnboarder`)."""
    impersonate: bool = True
    """Act with the rights the platform granted, never the controller's own: a plan's objects, sources, registries
    and credentials Secrets through the plan's ServiceAccount; writes into a namespace for no plan (Service Catalog
    Bindings, claims) through that namespace's :attr:`namespace_service_account`. False (``--single-tenant``) acts
    with the controller's own rights: only for a cluster with one tenant, whose controller is granted everything
    its plans render."""
    default_plan_service_account: str = DEFAULT_PLAN_SERVICE_ACCOUNT
    """The account a plan that names none (``spec.serviceAccountName``) acts with, in the plan's namespace."""
    namespace_service_account: str = NAMESPACE_SERVICE_ACCOUNT
    """The account, in a consumer's namespace, that writes there for no plan (Flux's default service account)."""
    template_fetch: FetchPolicy = field(default_factory=FetchPolicy)
    """How ``url`` templates are fetched: the networks that may be fetched from although not public
    (``--template-allow-network``), the proxy (``--template-proxy``); never the ``*_PROXY`` variables."""
    claims: ClaimsSettings = field(default_factory=ClaimsSettings)
    """The claims subsystem: SLA order, catalog environments, binding root, probe timeout, its workers."""
    budgets: NamespaceBudgets = field(default_factory=NamespaceBudgets)
    """What one namespace may make the controller hold and run at once (``--namespace-operations``,
    ``--namespace-cache-mib``; issue 42): past a budget a new operation waits, saying why in its Ready condition.
    The control plane's namespaces are exempt (:attr:`budget_exempt`)."""
    policies: Policies = field(default_factory=Policies)
    """Every backoff and retry or poll interval, with jitter (:mod:`opbroker.controller.runtime.policies`;
    ``--policy NAME=BASE[:CAP[:GIVE_UP[:JITTER]]]``, repeatable). Tests name a ``seed`` for the same draws."""

    def __post_init__(self) -> None:
        if self.shards.sharded and self.multicluster:
            raise ValueError("a multi-cluster master runs unsharded (--shards 1): its placement sees every instance")
        if self.shard_takeover and not (self.shards.sharded and self.leader_election):
            raise ValueError("--shard-takeover takes another shard's Lease: it needs --shards > 1 and leader election")

    def as_shard(self, index: int) -> ControllerSettings:
        """These settings for shard ``index`` of the same count (a standby taking that shard's Lease over)."""
        return dataclasses.replace(self, shards=Shards(self.shards.count, index))

    def shard_leases(self) -> tuple[tuple[int, str], ...]:
        """Every shard's ``(index, Lease)`` a standby campaigns for under :attr:`shard_takeover` — its own first,
        then the next ones in turn (spares of different ordinals try different shards first) — else its own only."""
        count, own = self.shards.count, self.shards.index
        order = [(own + step) % count for step in range(count)] if self.shard_takeover else [own]
        return tuple((index, self.as_shard(index).lease) for index in order)

    @property
    def lease(self) -> str:
        """The Lease this replica campaigns for: its shard's (:meth:`opbroker.api.shards.Shards.lease`)."""
        return self.shards.lease(self.lease_name)

    @property
    def registries_namespace(self) -> str:
        """Where registries are kept: :attr:`registry_namespace`, else the control plane's."""
        return self.registry_namespace or self.namespace

    @property
    def trusted_namespaces(self) -> tuple[str, ...]:
        """Where catalog entries are read from (:func:`opbroker.api.conventions.catalog_namespaces`)."""
        return catalog_namespaces(self.namespace, self.catalog_namespaces)

    @property
    def budget_exempt(self) -> tuple[str, ...]:
        """The namespaces no budget bounds: the control plane's, the catalog's and the registries' (only the
        platform writes there)."""
        return (*self.trusted_namespaces, self.registries_namespace)

    @property
    def timeouts(self) -> Timeouts:
        """The deadlines of the controller's API clients."""
        return Timeouts(request=self.request_timeout_seconds, watch=self.watch_seconds)

    @property
    def drain_seconds(self) -> float:
        """The drain time a stop gives running reconciles: :attr:`shutdown_seconds`, under leader election at most
        half the renew deadline (a leader whose renewals fail while it stops exits at the deadline, without
        releasing its Lease)."""
        if self.leader_election:
            return min(self.shutdown_seconds, self.renew_deadline / 2)
        return self.shutdown_seconds

    @property
    def renew_deadline(self) -> float:
        """Seconds a leader keeps acting without renewing its lease (client-go's renewDeadline): two thirds of the
        lease, so it has stopped before a standby may take the lease over."""
        return self.lease_seconds * 2 / 3

    @property
    def total_workers(self) -> int:
        """Reconciles running at once on the one runtime: the instance and binding workers, the claims
        workers (so claims never wait behind a burst of instances), and two for SFClusters when multi-cluster."""
        return self.workers + self.claims.workers + (2 if self.multicluster else 0)
