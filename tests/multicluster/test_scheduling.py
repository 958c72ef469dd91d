"""Schedulers, label selectors, quantities and the ledger: pure, table-driven, no server.

Covers: each policy's choice and tie-breaks; every exclusion reason named in the failure message;
selector grammar and semantics (apimachinery's); quantity arithmetic; ledger bookkeeping; and the cost
of one decision with 5 000 instances over 10 clusters (it must not grow with the instance count).
"""

from __future__ import annotations

import re
import time
from decimal import Decimal

import pytest

from opbroker.api import selectors
from opbroker.controller.multicluster import quantities
from opbroker.controller.multicluster.core.ledger import Ledger
from opbroker.controller.multicluster.core.scheduling import (
    MASTER,
    ClusterView,
    Constraint,
    Demand,
    SchedulerName,
    schedule,
)

D = Decimal


def res(**amounts: str | int) -> dict[str, Decimal]:
    return quantities.parse(amounts)


A = ClusterView("a", labels={"zone": "eu", "tier": "gold"}, instances=3, allocatable=res(cpu=8), used=res(cpu=6))
B = ClusterView("b", labels={"zone": "us", "tier": "gold"}, instances=1, allocatable=res(cpu=4), used=res(cpu=1))
C = ClusterView("c", labels={"zone": "eu"}, instances=1, allocatable=res(cpu=16), used=res(cpu=2), limit_percentage=25)
DOWN = ClusterView("d", labels={"zone": "eu"}, reachable=False, reason="connection refused")
GONE = ClusterView("e", labels={"zone": "eu"}, removing=True)
ALL = [A, B, C, DOWN, GONE]


def sel(text: str) -> Demand:
    return Demand(selector=selectors.parse(text))


CASES = [
    # reason, policy, clusters, demand, previous, want
    ("default places on the master, whatever is registered", SchedulerName.DEFAULT, ALL, Demand(), None, MASTER),
    ("default needs no SFCluster at all", SchedulerName.DEFAULT, [], Demand(), None, MASTER),
    ("round-robin starts with the first name", SchedulerName.ROUND_ROBIN, ALL, Demand(), None, "a"),
    ("round-robin takes the next name after the previous", SchedulerName.ROUND_ROBIN, ALL, Demand(), "a", "b"),
    ("round-robin wraps around", SchedulerName.ROUND_ROBIN, ALL, Demand(), "c", "a"),
    (
        "round-robin skips unreachable and removed clusters",
        SchedulerName.ROUND_ROBIN,
        [A, DOWN, GONE],
        Demand(),
        "a",
        "a",
    ),
    ("round-robin continues after a cluster that left", SchedulerName.ROUND_ROBIN, [A, C], Demand(), "b", "c"),
    ("least-utilized: fewest instances, ties by name", SchedulerName.LEAST_UTILIZED, ALL, Demand(), None, "b"),
    ("least-utilized ignores capacity", SchedulerName.LEAST_UTILIZED, [A, C], Demand(requests=res(cpu=100)), None, "c"),
    ("label-selector: the only match", SchedulerName.LABEL_SELECTOR, ALL, sel("zone=us"), None, "b"),
    ("label-selector: least-utilized among matches", SchedulerName.LABEL_SELECTOR, ALL, sel("zone=eu"), None, "c"),
    ("label-selector: set and existence", SchedulerName.LABEL_SELECTOR, ALL, sel("zone in (eu),tier"), None, "a"),
    ("label-selector: != holds without the label", SchedulerName.LABEL_SELECTOR, ALL, sel("tier!=gold"), None, "c"),
    ("label-selector: no selector selects all", SchedulerName.LABEL_SELECTOR, ALL, Demand(), None, "b"),
    (
        "capacity-aware: the emptiest after placement",
        SchedulerName.CAPACITY_AWARE,
        ALL,
        Demand(requests=res(cpu=1)),
        None,
        "b",
    ),
    (
        "capacity-aware honours schedulingLimitPercentage (c: 25% of 16 = 4, 2 used)",
        SchedulerName.CAPACITY_AWARE,
        [A, C],
        Demand(requests=res(cpu="1500m")),
        None,
        "c",
    ),
    (
        "capacity-aware: exactly at the limit fits",
        SchedulerName.CAPACITY_AWARE,
        [B],
        Demand(requests=res(cpu=3)),
        None,
        "b",
    ),
    (
        "capacity-aware with a selector",
        SchedulerName.CAPACITY_AWARE,
        ALL,
        Demand(selector=selectors.parse("zone=eu"), requests=res(cpu=1)),
        None,
        "c",
    ),
    ("capacity-aware without requests: least share", SchedulerName.CAPACITY_AWARE, [A, B], Demand(), None, "b"),
]


@pytest.mark.parametrize(
    ("reason", "policy", "clusters", "demand", "previous", "want"), CASES, ids=[c[0] for c in CASES]
)
def test_policy_chooses(
    reason: str, policy: SchedulerName, clusters: list[ClusterView], demand: Demand, previous: str | None, want: str
) -> None:
    assert schedule(policy, clusters, demand, previous=previous).cluster == want, reason


FAILURES = [
    (
        "nothing registered",
        SchedulerName.LEAST_UTILIZED,
        [],
        Demand(),
        "no cluster is registered (create an SFCluster)",
        {},
    ),
    (
        "every cluster excluded, each for its reason",
        SchedulerName.CAPACITY_AWARE,
        ALL,
        Demand(selector=selectors.parse("zone=eu"), requests=res(cpu=3)),
        "no cluster can take the instance: a: capacity",
        {
            "a": Constraint.CAPACITY,
            "b": Constraint.SELECTOR,
            "c": Constraint.CAPACITY,
            "d": Constraint.UNREACHABLE,
            "e": Constraint.REMOVING,
        },
    ),
    (
        "a resource the cluster does not declare",
        SchedulerName.CAPACITY_AWARE,
        [B],
        Demand(requests=res(gpu=1)),
        "b: capacity (gpu: the cluster declares none)",
        {"b": Constraint.CAPACITY},
    ),
    (
        "a cluster without any capacity",
        SchedulerName.CAPACITY_AWARE,
        [ClusterView("x")],
        Demand(requests=res(cpu=1)),
        "x: capacity (no capacity known: set spec.totalCapacity)",
        {"x": Constraint.CAPACITY},
    ),
    (
        "selector matches nothing",
        SchedulerName.LABEL_SELECTOR,
        [A, B],
        sel("zone=asia"),
        "a: label selector (zone=asia — labels do not meet zone=asia)",
        {"a": Constraint.SELECTOR, "b": Constraint.SELECTOR},
    ),
]


@pytest.mark.parametrize(
    ("reason", "policy", "clusters", "demand", "phrase", "excluded"), FAILURES, ids=[f[0] for f in FAILURES]
)
def test_no_match_names_each_cluster_and_constraint(
    reason: str,
    policy: SchedulerName,
    clusters: list[ClusterView],
    demand: Demand,
    phrase: str,
    excluded: dict[str, Constraint],
) -> None:
    decision = schedule(policy, clusters, demand)
    assert decision.cluster is None, reason
    assert phrase in decision.message
    assert {e.cluster: e.constraint for e in decision.exclusions} == excluded


def test_capacity_message_gives_the_numbers() -> None:
    decision = schedule(SchedulerName.CAPACITY_AWARE, [C], Demand(requests=res(cpu="2500m")))
    assert decision.message == (
        "no cluster can take the instance: c: capacity (cpu: 2500m requested + 2 in use > 4 (25% of allocatable 16))"
    )


def test_unreachable_cluster_is_named_with_its_error() -> None:
    decision = schedule(SchedulerName.ROUND_ROBIN, [DOWN], Demand())
    assert decision.message == "no cluster can take the instance: d: unreachable (connection refused)"


# -- selectors -------------------------------------------------------------------------------------------

LABELS = {"plan": "gold", "zone": "eu", "size": "3", "app.kubernetes.io/name": "db", "empty": ""}

SELECTORS = [
    ("", True),
    ("plan=gold", True),
    ("plan==gold", True),
    ("plan = gold , zone=eu", True),
    ("plan=silver", False),
    ("plan!=silver", True),
    ("missing!=x", True),
    ("plan in (gold, silver)", True),
    ("plan notin (gold)", False),
    ("missing notin (x)", True),
    ("missing in (x)", False),
    ("plan", True),
    ("!plan", False),
    ("!missing", True),
    ("size>2", True),
    ("size<3", False),
    ("plan>2", False),
    ("app.kubernetes.io/name=db", True),
    ("empty=", True),
    ("empty", True),
    ("empty in ()", True),
    ("plan in ()", False),
    ("plan in (,gold)", True),
    ("plan notin (silver,)", True),
]


@pytest.mark.parametrize(("text", "matches"), SELECTORS)
def test_selector_semantics(text: str, matches: bool) -> None:
    assert selectors.parse(text).matches(LABELS) is matches


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("plan=gold,", "trailing"),
        ("=gold", "not a valid label key"),
        ("plan ~ gold", "unexpected character"),
        ("plan in (a b)", "',' expected"),
        ("plan in a", "'(' expected"),
        ("plan=a b", "',' expected"),
        ("size>x", "not an integer"),
        ("plan=-bad-", "not a valid label value"),
    ],
)
def test_selector_errors_say_what_is_wrong(text: str, problem: str) -> None:
    with pytest.raises(selectors.SelectorError, match=re.escape(problem)):
        selectors.parse(text)


def test_selector_prints_back_parseably() -> None:
    text = "a in (x,y),!b,c!=d,e>1,f"
    assert str(selectors.parse(text)) == text
    assert selectors.parse(str(selectors.parse(text))) == selectors.parse(text)


# -- quantities ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [("500m", "500m"), (2, "2"), ("1.5", "1500m"), ("16Gi", "16Gi"), ("1024Mi", "1Gi"), ("0.0001", "0.0001")],
)
def test_quantities_round_trip(value: str | int, text: str) -> None:
    assert quantities.text(quantities.parse({"x": value})["x"]) == text


def test_quantities_add_and_reject() -> None:
    assert quantities.total([res(cpu="500m"), res(cpu=1, memory="1Gi")]) == {"cpu": D("1.5"), "memory": D(2**30)}
    with pytest.raises(quantities.QuantityError, match="cpu: 'lots' is not a quantity"):
        quantities.parse({"cpu": "lots"})


# -- ledger ----------------------------------------------------------------------------------------------


def test_ledger_counts_moves_and_forgets() -> None:
    ledger = Ledger()
    ledger.observe(("instance", "ns", "a"), "x", "small")
    ledger.observe(("instance", "ns", "b"), "x", "big")
    ledger.observe(("instance", "ns", "c"), None, "big")  # not placed yet: counted nowhere
    ledger.observe(("instance", "ns", "b"), "x", "big")  # repeated events do not double-count
    assert ledger.count("x") == 2
    plans = {"small": res(cpu="500m"), "big": res(cpu=2)}
    assert ledger.requested("x", plans.__getitem__) == {"cpu": D("2.5")}
    ledger.observe(("instance", "ns", "a"), "y", "small")
    assert (ledger.count("x"), ledger.count("y")) == (1, 1)
    assert ledger.forget(("instance", "ns", "b")) == "x"
    assert ledger.count("x") == 0 and ledger.requested("x", plans.__getitem__) == {}
    assert ledger.members("y") == [("instance", "ns", "a")]


def test_the_ledger_names_each_cluster_whose_count_or_requests_a_call_changed() -> None:
    """The SFCluster's status shows count and requests: a change is heard at once, a repeated event is not."""
    heard: list[str] = []
    ledger = Ledger(on_change=heard.append)
    ledger.observe(("instance", "ns", "a"), "x", "small")
    ledger.observe(("instance", "ns", "a"), "x", "small")  # the same again: nothing changed
    ledger.observe(("instance", "ns", "c"), None, "big")  # placed nowhere: no cluster changed
    assert heard == ["x"]
    ledger.observe(("instance", "ns", "a"), "x", "big")  # another plan, other requests
    ledger.observe(("instance", "ns", "a"), "y", "big")  # moved: both clusters
    assert heard == ["x", "x", "x", "y"]
    ledger.forget(("instance", "ns", "a"))
    ledger.forget(("instance", "ns", "a"))  # forgotten already
    assert heard == ["x", "x", "x", "y", "y"]


def test_one_decision_costs_the_same_with_5000_instances() -> None:
    """5 000 instances over 10 clusters: decisions read counts from the ledger, never the instances."""
    ledger = Ledger()
    names = [f"c{i}" for i in range(10)]
    plans = {"p0": res(cpu="100m"), "p1": res(cpu="250m", memory="256Mi")}
    for i in range(5000):
        ledger.observe(("instance", "ns", f"i{i}"), names[i % 10], f"p{i % 2}")

    def views() -> list[ClusterView]:
        return [
            ClusterView(
                n,
                labels={"n": n},
                instances=ledger.count(n),
                allocatable=res(cpu=1000, memory="1Ti"),
                used=ledger.requested(n, plans.__getitem__),
            )
            for n in names
        ]

    timings = {}
    for policy in SchedulerName:
        started = time.perf_counter()
        for _ in range(200):
            decision = schedule(policy, views(), Demand(selectors.parse("n in (c3,c4)"), res(cpu="100m")))
        timings[policy] = (time.perf_counter() - started) / 200
        assert decision.cluster is not None
    print({p.value: f"{t * 1e6:.0f}µs" for p, t in timings.items()})
    assert max(timings.values()) < 0.005, timings
