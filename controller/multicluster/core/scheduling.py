"""Schedulers: which cluster an instance goes to. Pure: facts in, a decision (and every exclusion) out.

The facts are small frozen values built from memory — the SFClusters as last seen, reachability from the
last probe, per-cluster instance counts and request sums kept from watch events (:mod:`ledger`) — so a
decision never lists anything. Policies:

=================  ==========================================================================================
``default``        the master itself (cluster ``"1"``), always; no SFCluster is needed
``round-robin``    the next eligible cluster after the previous decision's, in name order
``least-utilized`` the eligible cluster with the fewest instances (ties: name order)
``label-selector`` clusters whose labels the plan's ``clusterSelector`` selects (every cluster when the plan
                   has none), then least-utilized
``capacity-aware`` like label-selector, then only clusters where the plan's ``context.requests`` fit below
                   ``schedulingLimitPercentage`` (default 100) of allocatable; the emptiest after placement
                   wins (highest share of any resource; ties: fewest instances, then name)
=================  ==========================================================================================

*Eligible* means registered, reachable at the last probe and not being removed. When nothing is left, the
decision names every cluster and the constraint that excluded it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum

from opbroker.api.selectors import Selector
from opbroker.controller.multicluster import quantities
from opbroker.controller.multicluster.quantities import Resources

#: The master's SFCluster name when it also provisions (Service Fabrik's convention).
MASTER = "1"


class SchedulerName(StrEnum):
    DEFAULT = "default"
    ROUND_ROBIN = "round-robin"
    LEAST_UTILIZED = "least-utilized"
    LABEL_SELECTOR = "label-selector"
    CAPACITY_AWARE = "capacity-aware"


class Constraint(StrEnum):
    """Why a cluster was not chosen (named in the failure message)."""

    UNREACHABLE = "unreachable"
    REMOVING = "being removed"
    SELECTOR = "label selector"
    CAPACITY = "capacity"


@dataclass(frozen=True)
class ClusterView:
    """One SFCluster as the scheduler sees it."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    reachable: bool = True
    removing: bool = False
    instances: int = 0
    allocatable: Resources | None = None
    """Allocatable resources (from nodes, else the declared ``spec.totalCapacity``); None if unknown."""
    used: Resources = field(default_factory=dict)
    """Requests already placed on the cluster."""
    limit_percentage: int | None = None
    reason: str = ""
    """Why the cluster is unreachable (the last probe's error)."""


@dataclass(frozen=True)
class Demand:
    """What the instance asks for: the rendered cluster selector and the plan's ``context.requests``."""

    selector: Selector = field(default_factory=Selector)
    requests: Resources = field(default_factory=dict)


@dataclass(frozen=True)
class Exclusion:
    cluster: str
    constraint: Constraint
    detail: str

    def __str__(self) -> str:
        return f"{self.cluster}: {self.constraint.value} ({self.detail})" if self.detail else self.cluster


@dataclass(frozen=True)
class Decision:
    cluster: str | None
    exclusions: tuple[Exclusion, ...] = ()

    @property
    def message(self) -> str:
        """What the instance's status says: the chosen cluster, or why there is none."""
        if self.cluster is not None:
            return f"scheduled to cluster {self.cluster!r}"
        if not self.exclusions:
            return "no cluster is registered (create an SFCluster)"
        return "no cluster can take the instance: " + "; ".join(str(e) for e in self.exclusions)


def schedule(
    policy: SchedulerName, clusters: Sequence[ClusterView], demand: Demand, *, previous: str | None = None
) -> Decision:
    """Choose a cluster for one instance. ``previous`` is round-robin's last choice."""
    if policy is SchedulerName.DEFAULT:
        return Decision(MASTER)
    exclusions: list[Exclusion] = []
    eligible = _available(sorted(clusters, key=lambda c: c.name), exclusions)
    if policy in (SchedulerName.LABEL_SELECTOR, SchedulerName.CAPACITY_AWARE):
        eligible = _selected(eligible, demand.selector, exclusions)
    if policy is SchedulerName.CAPACITY_AWARE:
        eligible = _fitting(eligible, demand.requests, exclusions)
    ordered = tuple(sorted(exclusions, key=lambda e: e.cluster))
    if not eligible:
        return Decision(None, ordered)
    if policy is SchedulerName.ROUND_ROBIN:
        after = [c for c in eligible if previous is not None and c.name > previous]
        return Decision((after or eligible)[0].name, ordered)
    if policy is SchedulerName.CAPACITY_AWARE:
        best = min(eligible, key=lambda c: (_share_after(c, demand.requests), c.instances, c.name))
        return Decision(best.name, ordered)
    return Decision(min(eligible, key=lambda c: (c.instances, c.name)).name, ordered)


def _available(clusters: Sequence[ClusterView], exclusions: list[Exclusion]) -> list[ClusterView]:
    kept = []
    for cluster in clusters:
        if cluster.removing:
            exclusions.append(Exclusion(cluster.name, Constraint.REMOVING, "its SFCluster is being deleted"))
        elif not cluster.reachable:
            exclusions.append(Exclusion(cluster.name, Constraint.UNREACHABLE, cluster.reason or "not reachable"))
        else:
            kept.append(cluster)
    return kept


def _selected(clusters: list[ClusterView], selector: Selector, exclusions: list[Exclusion]) -> list[ClusterView]:
    kept = []
    for cluster in clusters:
        failing = selector.failing(cluster.labels)
        if failing:
            unmet = ", ".join(str(r) for r in failing)
            exclusions.append(Exclusion(cluster.name, Constraint.SELECTOR, f"{selector} — labels do not meet {unmet}"))
        else:
            kept.append(cluster)
    return kept


def limits(cluster: ClusterView) -> Resources:
    """How much of each resource may be requested on the cluster in all."""
    percentage = 100 if cluster.limit_percentage is None else cluster.limit_percentage
    return {name: amount * percentage / 100 for name, amount in (cluster.allocatable or {}).items()}


def _fitting(clusters: list[ClusterView], requests: Resources, exclusions: list[Exclusion]) -> list[ClusterView]:
    if not requests:
        return clusters
    kept = []
    for cluster in clusters:
        if cluster.allocatable is None:
            exclusions.append(Exclusion(cluster.name, Constraint.CAPACITY, "no capacity known: set spec.totalCapacity"))
            continue
        bound = limits(cluster)
        problems = []
        for name in sorted(requests):
            if name not in bound:
                problems.append(f"{name}: the cluster declares none")
                continue
            used = cluster.used.get(name, Decimal(0))
            if used + requests[name] > bound[name]:
                percentage = 100 if cluster.limit_percentage is None else cluster.limit_percentage
                problems.append(
                    f"{name}: {quantities.text(requests[name])} requested + {quantities.text(used)} in use > "
                    f"{quantities.text(bound[name])} ({percentage}% of allocatable "
                    f"{quantities.text(cluster.allocatable[name])})"
                )
        if problems:
            exclusions.append(Exclusion(cluster.name, Constraint.CAPACITY, "; ".join(problems)))
        else:
            kept.append(cluster)
    return kept


def _share_after(cluster: ClusterView, requests: Resources) -> Decimal:
    """The largest share of any limited resource in use once the instance is placed."""
    bound = limits(cluster)
    shares = [
        (cluster.used.get(name, Decimal(0)) + requests.get(name, Decimal(0))) / bound[name]
        for name in bound
        if bound[name] > 0
    ]
    return max(shares, default=Decimal(0))
