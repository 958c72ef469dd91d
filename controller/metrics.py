"""Prometheus metrics of the controller: instances/bindings by state, reconcile durations, errors."""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable, Iterator
from contextlib import contextmanager

from prometheus_client import Counter, Gauge, Histogram

RECONCILE_SECONDS = Histogram(
    "opbroker_reconcile_seconds",
    "Duration of one reconcile",
    ["kind"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
RECONCILE_ERRORS = Counter("opbroker_reconcile_errors_total", "Reconciles that raised", ["kind", "reason"])
OBJECTS_BY_STATE = Gauge("opbroker_objects", "Instances and bindings by state", ["kind", "state"])
#: The reconcile queue (set to read the live queue when the controller starts): keys waiting (ready or delayed)
#: and keys being reconciled. Both 0, with the reconcile count standing still, is an idle controller.
WORKQUEUE_DEPTH = Gauge("opbroker_workqueue_depth", "Keys waiting in the reconcile queue (ready or delayed)")
WORKQUEUE_IN_FLIGHT = Gauge("opbroker_workqueue_in_flight", "Keys being reconciled")

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
