"""Where every instance is placed, kept in memory from watch events: per-cluster counts and requests.

The scheduler reads counts and request sums from here instead of listing instances, so a decision costs
the same with 10 or 10 000 instances. Fed by the master's instance events (``observe``/``forget``) and by
the scheduler's own decisions (``observe`` right away, before the watch event confirms it), seeded once by
a list at start-up. Thread-safe; no I/O.

A cluster's count and requests are part of its SFCluster status: ``on_change`` hears of every cluster whose
members or their plans a call changed (outside the lock), so the status follows a placement at once instead of at
the next probe.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from opbroker.controller.multicluster import quantities
from opbroker.controller.multicluster.quantities import Resources
from opbroker.controller.runtime.concurrency import Lock
from opbroker.controller.runtime.keys import Key


class Ledger:
    def __init__(self, on_change: Callable[[str], None] = lambda _cluster: None) -> None:
        self._on_change = on_change
        self._lock = Lock()
        self._placed: dict[Key, tuple[str, str]] = {}
        self._members: dict[str, set[Key]] = {}
        self._plans: dict[str, Counter[str]] = {}

    def observe(self, key: Key, cluster: str | None, plan_id: str) -> None:
        """Record that instance ``key`` (of plan ``plan_id``) is placed on ``cluster`` (None: nowhere yet)."""
        with self._lock:
            before = self._placed.get(key)
            self._drop(key)
            if cluster:
                self._placed[key] = (cluster, plan_id)
                self._members.setdefault(cluster, set()).add(key)
                self._plans.setdefault(cluster, Counter())[plan_id] += 1
        if before != ((cluster, plan_id) if cluster else None):
            for changed in dict.fromkeys((before[0] if before else None, cluster)):
                if changed:
                    self._on_change(changed)

    def forget(self, key: Key) -> str | None:
        """The instance is gone; returns the cluster it was on."""
        with self._lock:
            cluster = self._drop(key)
        if cluster is not None:
            self._on_change(cluster)
        return cluster

    def _drop(self, key: Key) -> str | None:
        placed = self._placed.pop(key, None)
        if placed is None:
            return None
        cluster, plan_id = placed
        self._members[cluster].discard(key)
        plans = self._plans[cluster]
        plans[plan_id] -= 1
        if plans[plan_id] <= 0:
            del plans[plan_id]
        return cluster

    def cluster_of(self, key: Key) -> str | None:
        with self._lock:
            placed = self._placed.get(key)
            return placed[0] if placed else None

    def count(self, cluster: str) -> int:
        with self._lock:
            return len(self._members.get(cluster, ()))

    def members(self, cluster: str) -> list[Key]:
        with self._lock:
            return sorted(self._members.get(cluster, ()), key=str)

    def requested(self, cluster: str, requests_of: Callable[[str], Resources]) -> Resources:
        """The sum of the plans' ``context.requests`` over the cluster's instances (cost: one term per plan)."""
        with self._lock:
            plans = dict(self._plans.get(cluster, {}))
        return quantities.total(quantities.scaled(requests_of(plan_id), count) for plan_id, count in plans.items())
