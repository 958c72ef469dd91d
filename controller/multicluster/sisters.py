"""The Kubernetes edge towards sister clusters: clients from kubeconfig Secrets, probes, capacity, watches.

A sister is reached through the same :class:`opbroker.controller.runtime.kube.Kube` door as the master, built on an
``ApiClient`` of its own; :class:`SisterKube` adds the few calls only the multi-cluster controller makes.
:class:`SisterWatch` follows the copies in one sister (instances and bindings carrying the ``replicated``
label, one :mod:`informer <opbroker.kubeclient.informer>` each) and reports each change by the master key it
belongs to — the copy has the master object's namespace and name — so the master reconciles at once instead of
polling.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
from collections.abc import Callable
from decimal import Decimal

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from opbroker.api import rbac
from opbroker.controller.kinds import BINDINGS, INSTANCES
from opbroker.controller.multicluster import quantities
from opbroker.controller.multicluster.core import kubeconfigs
from opbroker.controller.multicluster.core.views import ReplicaView
from opbroker.controller.multicluster.quantities import Resources
from opbroker.controller.multicluster.reasons import LABEL_REPLICATED
from opbroker.controller.runtime.concurrency import Lock
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.kube import Kind, Kube
from opbroker.kubeclient import deadlines
from opbroker.kubeclient.informer import RETRIES, Body, Collection, Informer, LeanSource, stop_all
from opbroker.kubeclient.lean import LeanApi
from opbroker.osbclient import Backoff

logger = logging.getLogger(__name__)

#: Seconds a probe may take before the cluster counts as unreachable.
PROBE_TIMEOUT = 3.0


class KubeconfigError(ValueError):
    """A kubeconfig Secret that cannot be used (missing key, not YAML, no usable context)."""


class KubeconfigRefused(KubeconfigError):
    """A kubeconfig that would make the controller run a command or read a file (:mod:`.kubeconfigs`)."""


def kubeconfig_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def client_from_kubeconfig(text: str) -> client.ApiClient:
    """An API client for the cluster a kubeconfig (as stored in an SFCluster's Secret) describes; refused
    (:class:`KubeconfigRefused`, naming the fields) before anything is built when it names a command or a file."""
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise KubeconfigError(f"the kubeconfig is not YAML: {type(exc).__name__}") from None
    refused = kubeconfigs.problems(loaded)
    if refused:
        raise KubeconfigRefused("the kubeconfig is refused: " + "; ".join(refused))
    try:
        configuration = client.Configuration()
        config.load_kube_config_from_dict(loaded, client_configuration=configuration, persist_config=False)
    except Exception as exc:  # the loader raises many kinds; all mean "unusable"
        raise KubeconfigError(f"the kubeconfig is not usable: {type(exc).__name__}: {exc}") from exc
    configuration.connection_pool_maxsize = 16
    configuration.retries = 0  # an unreachable sister must fail fast, not hang in urllib3 retries
    return deadlines.bounded(configuration)  # deadlines on every call and watch, keepalive


class SisterKube(Kube):
    """:class:`Kube` plus what the master needs of a sister: namespaces, a probe, capacity."""

    def __init__(self, api_client: client.ApiClient, *, control_plane: str | None = None) -> None:
        super().__init__(api_client)
        self._namespaces: set[str] = set()
        self._lock = Lock()
        self.control_plane = control_plane
        """The sister's control-plane namespace: a namespace the master creates there is onboarded for its
        default plan account (None: the master's own cluster, whose namespaces the platform onboards)."""

    def close(self) -> None:
        """Close the sister's connections: the transport's pool (every lean request) and the official client's."""
        self.custom.close()
        self.api_client.close()  # type: ignore[no-untyped-call]  # the client's ApiClient.close is unannotated

    def probe(self) -> None:
        """One cheap request (``/version``); raises if the cluster does not answer in time."""
        self.server_version(timeout=PROBE_TIMEOUT)

    def ensure_namespace(self, name: str) -> None:
        """Create ``name`` unless it is known to exist (remembered, so it costs one call per namespace)."""
        with self._lock:
            if name in self._namespaces:
                return
        created = self.create_namespace(name)  # False: it existed already, as well
        if created and self.control_plane is not None and name != self.control_plane:
            # The plan account is bound per namespace (issue 42): the namespace the master made for an instance
            # is onboarded for it, as the platform onboards a consumer namespace; one it found is the platform's.
            self.apply(rbac.plan_binding(name, self.control_plane), field_manager="opbroker-master")
        with self._lock:
            self._namespaces.add(name)

    def forget_namespaces(self) -> None:
        with self._lock:
            self._namespaces.clear()

    def capacity(self) -> tuple[Resources, Resources, Resources] | None:
        """(capacity, allocatable, requests) summed over nodes and running pods; None without nodes."""
        nodes = self.list_nodes(timeout=PROBE_TIMEOUT * 3)
        if not nodes:
            return None
        capacity = quantities.total(quantities.parse(node.capacity) for node in nodes)
        allocatable = quantities.total(quantities.parse(node.allocatable) for node in nodes)
        requests: Resources = {}
        try:
            pods = self.list_pods(
                field_selector="status.phase!=Succeeded,status.phase!=Failed", timeout=PROBE_TIMEOUT * 3
            )
        except ApiException as exc:
            if exc.status != 403:
                raise
            pods = []  # not allowed to read pods: only the plans' requests count
        for pod in pods:
            for wanted in pod.requests:
                requests = quantities.total([requests, quantities.parse(wanted)])
        return capacity, allocatable, {k: v for k, v in requests.items() if v != Decimal(0)}


class SisterWatch:
    """Informers of the copies in one sister cluster (instances and bindings carrying the ``replicated`` label),
    as tasks on the controller's loop, until :meth:`stop`: each change, and each copy gone while a stream was
    broken, is reported by the master key it belongs to; a failing stream is reported once (``on_failure``) until
    its kind is listed again."""

    KINDS: tuple[tuple[str, Kind], ...] = (("instance", INSTANCES), ("binding", BINDINGS))

    def __init__(
        self,
        cluster: str,
        kube: SisterKube,
        on_change: Callable[[Key], None],
        on_failure: Callable[[str, str], None],
        *,
        retry: Backoff = RETRIES,
    ) -> None:
        self.cluster = cluster
        self._on_change = on_change
        self._on_failure = on_failure
        self._failing: set[str] = set()
        self._source = source = LeanSource(LeanApi(kube.api_client))
        self.informers = [
            Informer(
                source,
                Collection(kind.api_version, kind.plural, label_selector=f"{LABEL_REPLICATED}=true"),
                functools.partial(self._report, name),
                on_listed=functools.partial(self._listed, name),
                on_lost=functools.partial(self._failed, name),
                retry=retry,
                name=f"sister-{cluster}-{name}",
            )
            for name, kind in self.KINDS
        ]

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Follow the copies as tasks on ``loop`` (the controller's; callable from any thread)."""
        for informer in self.informers:
            informer.start(loop)

    def stop(self) -> None:
        """End the streams now (from any thread): the sister's connections are closed, not left open to their
        server-side end."""
        stop_all(self.informers, self._source)

    def _report(self, name: str, _event_type: str, obj: Body) -> None:
        copy = ReplicaView.of(obj)
        self._on_change(Key(name, copy.meta.namespace, copy.meta.name))

    def _listed(self, name: str, _listed: frozenset[tuple[str, str]]) -> None:
        self._failing.discard(name)

    def _failed(self, name: str, why: str) -> None:
        if name not in self._failing:
            self._failing.add(name)
            self._on_failure(self.cluster, why)
