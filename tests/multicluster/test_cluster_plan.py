"""The SFCluster plan, table-tested: exact action lists (the executor's Target finalizer is cluster-protection)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from opbroker.controller.core import actions as a
from opbroker.controller.core.reasons import Reason
from opbroker.controller.multicluster.core.cluster_plan import (
    ClusterFacts,
    Replicate,
    SFClusterView,
    Unregister,
    blocked_message,
    cluster_status,
    plan,
)
from opbroker.controller.multicluster.reasons import CLUSTER_FINALIZER
from opbroker.controller.runtime.clock import FAKE_EPOCH as NOW
from opbroker.controller.runtime.keys import Key
from tests.plan_support import timeless

PLACED = (Key("instance", "team", "db"),)


def facts(
    *,
    held: bool = True,
    deleting: bool = False,
    reachable: bool = True,
    remaining: tuple[Key, ...] | None = None,
    pending: bool = False,
    settled: bool = False,
) -> ClusterFacts:
    """Cluster c2 at generation 1; ``settled``: its status already is what the plan wants."""
    meta: dict[str, Any] = {"name": "c2", "namespace": "opbroker", "generation": 1, "resourceVersion": "5"}
    if held:
        meta["finalizers"] = [CLUSTER_FINALIZER]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    body: dict[str, Any] = {"kind": "SFCluster", "metadata": meta, "spec": {"secretRef": "c2-kubeconfig"}}
    made = ClusterFacts(
        "c2", SFClusterView.of(body), reachable, "" if reachable else "timed out", None, 1, {}, remaining, 30.0,
        controller_pending=pending, now=NOW,
    )  # fmt: skip
    if not settled:
        return made
    body = {**body, "status": cluster_status(made)}
    return dataclasses.replace(made, cluster=SFClusterView.of(body))


def status(given: ClusterFacts, event: a.Event | None = None) -> a.WriteStatus:
    """The write of a cluster whose status is empty: every field the wanted status sets."""
    patch = {k: v for k, v in cluster_status(given).items() if v is not None}
    return a.WriteStatus(patch, guarded=False, event=event)


NEW = facts(held=False)
DOWN = facts(reachable=False)
BLOCKED = facts(deleting=True, remaining=PLACED)
PENDING = facts(deleting=True, remaining=(), pending=True)
REMAINS = a.Event(Reason.INSTANCES_REMAIN.value, blocked_message("c2", PLACED), warning=True)


@pytest.mark.parametrize(
    ("given", "wanted"),
    [
        (NEW, [a.EnsureFinalizer(present=True), Replicate(), status(NEW), a.Requeue(30.0)]),
        (facts(settled=True), [Replicate(), a.Requeue(30.0)]),
        (DOWN, [status(DOWN), a.Requeue(30.0)]),
        (facts(reachable=False, settled=True), [a.Requeue(30.0)]),
        (BLOCKED, [status(BLOCKED, REMAINS), a.Requeue(30.0)]),
        (facts(deleting=True, remaining=PLACED, settled=True), [a.Requeue(30.0)]),
        # (as before: the Removable condition then says "0 instance(s)" — noted, not changed here)
        (PENDING, [status(PENDING, dataclasses.replace(REMAINS, message=blocked_message("c2", ()))), a.Requeue(30.0)]),
        (
            facts(deleting=True, remaining=(), settled=True),
            [
                a.EnsureFinalizer(present=False),
                a.Log("cluster c2 released: no instance is placed on it any more", warning=False),
                Unregister(),
            ],
        ),
        (facts(held=False, deleting=True, remaining=(), settled=True), [a.Requeue(30.0)]),
    ],
    ids=[
        "new: held, catalog copied, status written",
        "nothing changed: catalog checked, probed again",
        "unreachable: no copy, status says why",
        "still unreachable, said: probed again only",
        "deleted with instances placed: blocked, said once with a Warning",
        "still blocked, said: probed again only",
        "deleted, its controller not removed yet: the finalizer stays",
        "deleted, nothing placed: released and forgotten",
        "deleted, not held: nothing to release",
    ],
)
def test_cluster_plan(given: ClusterFacts, wanted: list[Any]) -> None:
    assert timeless(plan(given)) == timeless(wanted)
