"""Prometheus metrics of the controller: instances/bindings by state, reconcile durations, errors, and what
its object store holds."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from contextlib import contextmanager

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

from opbroker.controller.runtime.store import Census, TypeKey

RECONCILE_SECONDS = Histogram(
    "opbroker_reconcile_seconds",
    "Duration of one reconcile",
    ["kind"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
RECONCILE_ERRORS = Counter("opbroker_reconcile_errors_total", "Reconciles that raised", ["kind", "reason"])
RENDERS = Counter(
    "opbroker_renders_total",
    "Plan templates rendered into objects (what a check or an operation renders; a check answered by its record "
    "renders nothing), by kind and template action",
    ["kind", "action"],
)
OBJECTS_BY_STATE = Gauge("opbroker_objects", "Instances and bindings by state", ["kind", "state"])
INSTANCES_BY_HEALTH = Gauge(
    "opbroker_instance_health",
    "Provisioned instances by what their status template says of them now (ready, unready, unknown)",
    ["health"],
)
#: The reconcile queue (set to read the live queue when the controller starts): keys waiting (ready or delayed)
#: and keys being reconciled. Both 0, with the reconcile count standing still, is an idle controller.
WORKQUEUE_DEPTH = Gauge("opbroker_workqueue_depth", "Keys waiting in the reconcile queue (ready or delayed)")
WORKQUEUE_IN_FLIGHT = Gauge("opbroker_workqueue_in_flight", "Keys being reconciled")
#: The depth's two parts. Since day two (issue 43) every provisioned instance waits for its resync, so the depth
#: never drains: keys due now (``due``, ready or held by their tenant's cap) are what an idle controller has none
#: of; ``delayed`` counts the entries waiting for their time (one key may have several).
WORKQUEUE_DUE = Gauge("opbroker_workqueue_due", "Keys due now in the reconcile queue (ready or held by a tenant cap)")
WORKQUEUE_DELAYED = Gauge("opbroker_workqueue_delayed", "Entries waiting for their time in the reconcile queue")


class _StoreCensus:
    """``opbroker_store_objects{api_version,kind,held}`` (held: ``body`` or ``metadata`` only) and
    ``opbroker_store_body_bytes{api_version,kind}``, read from the store at each scrape: whether the cluster's
    other Secrets stay out of the controller's memory is visible from outside (and tested so)."""

    def __init__(self) -> None:
        self.census: Callable[[], Mapping[TypeKey, Census]] | None = None

    def collect(self) -> Iterable[Metric]:
        objects = GaugeMetricFamily(
            "opbroker_store_objects", "Objects the store knows, by whether it holds their body", labels=STORE_LABELS
        )
        body_bytes = GaugeMetricFamily(
            "opbroker_store_body_bytes", "Bytes of the bodies the store holds (JSON text)", labels=STORE_LABELS[:2]
        )
        for (api_version, kind), found in sorted((self.census() if self.census else {}).items()):
            objects.add_metric([api_version, kind, "body"], found.bodies)
            objects.add_metric([api_version, kind, "metadata"], found.objects - found.bodies)
            body_bytes.add_metric([api_version, kind], found.body_bytes)
        return [objects, body_bytes]


STORE_LABELS = ["api_version", "kind", "held"]
STORE_CENSUS = _StoreCensus()
REGISTRY.register(STORE_CENSUS)


def report_store(census: Callable[[], Mapping[TypeKey, Census]]) -> None:
    """Report this store from now on (the last controller of the process wins, as the queue gauges do)."""
    STORE_CENSUS.census = census


_states: dict[Hashable, tuple[str, str]] = {}
_lock = threading.Lock()


@contextmanager
def reconcile_timer(kind: str) -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    finally:
        RECONCILE_SECONDS.labels(kind=kind).observe(time.perf_counter() - started)


def observe_state(kind: str, key: Hashable, state: str | None) -> None:
    """Keep the by-state gauge exact: move the object from its previous state to the new one."""
    with _lock:
        previous = _states.pop(key, None)
        if previous is not None:
            OBJECTS_BY_STATE.labels(*previous).dec()
        if state is not None:
            current = (kind, state)
            _states[key] = current
            OBJECTS_BY_STATE.labels(*current).inc()


_health: dict[Hashable, str] = {}


def observe_health(key: Hashable, health: str | None) -> None:
    """Keep the by-health gauge exact: move a provisioned instance to ``health`` (None: it is gone)."""
    with _lock:
        previous = _health.pop(key, None)
        if previous is not None:
            INSTANCES_BY_HEALTH.labels(previous).dec()
        if health is not None:
            _health[key] = health
            INSTANCES_BY_HEALTH.labels(health).inc()
