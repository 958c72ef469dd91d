"""The pure side of an SFCluster: its typed view, the facts a reconcile decides on, the status it should have,
and the plan (:func:`plan`) in the shared action vocabulary (:mod:`opbroker.controller.core.actions`).

:class:`~opbroker.controller.multicluster.clusters.ClusterReconciler` observes (reads the SFCluster, connects,
probes, converges the sister's controller) and hands the plan's actions to the one executor, whose Target
finalizer is ``cluster-protection`` (:data:`~opbroker.controller.multicluster.reasons.CLUSTER_FINALIZER`):

* the finalizer is held while the SFCluster lives; being deleted, it is released once no instance is placed on
  it and its controller is removed (then the registry drops the cluster: :class:`Unregister`);
* a reachable cluster that is not being deleted gets the master's catalog (:class:`Replicate`);
* the status (instance count, capacity, requests, reachability, the ``Ready``, ``ControllerInstalled`` and
  ``Removable`` conditions) is written only when it would change; the removal becoming blocked also says so
  in a Warning Event (reason ``InstancesRemain``);
* the cluster is probed again every ``cluster_probe_seconds``.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from opbroker.controller.core import actions as a
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.views import ConditionView
from opbroker.controller.multicluster import quantities
from opbroker.controller.multicluster.core import replicas
from opbroker.controller.multicluster.core.views import SFClusterView
from opbroker.controller.multicluster.quantities import Resources
from opbroker.controller.multicluster.reasons import CLUSTER_FINALIZER, ConditionType
from opbroker.controller.runtime.keys import Key
from opbroker.kubeclient.wire import JsonBody, JsonObject

__all__ = ["ClusterFacts", "Installation", "Replicate", "SFClusterView", "Unregister", "cluster_status", "plan"]


@dataclass(frozen=True)
class Installation:
    """What the last installation step in a sister came to, for the SFCluster's ``ControllerInstalled``
    condition. ``removed``: the objects are gone and the condition goes with them."""

    ok: bool
    reason: str
    message: str
    removed: bool = False


@dataclass(frozen=True)
class ClusterFacts:
    """An SFCluster as read, with what the probe found and what the ledger places on it."""

    name: str
    cluster: SFClusterView
    reachable: bool | None
    reason: str
    observed: tuple[Resources, Resources, Resources] | None
    instances: int
    used: Resources
    remaining: tuple[Key, ...] | None
    """The instances still placed on a cluster being deleted (None while it is not)."""
    probe_seconds: float
    refused: bool = False
    """Unreachable because its kubeconfig was refused (reason ``KubeconfigRefused``)."""
    install: Installation | None = None
    """The last step of the controller's installation in the cluster (None: nothing to say)."""
    controller_pending: bool = False
    """Being deleted with its controller not removed yet: the finalizer stays."""
    now: datetime.datetime = field(kw_only=True)
    """The moment of the read (observe's clock; the plan reads none): a flipped condition's transition time."""


@dataclass(frozen=True)
class Replicate:
    """Copy the master's catalog into the (reachable) cluster."""


@dataclass(frozen=True)
class Unregister:
    """The SFCluster is released: drop the cluster from the registry (its client and watch close)."""


def cluster_status(facts: ClusterFacts, conditions: tuple[ConditionView, ...] | None = None) -> JsonBody:
    """The status an SFCluster should have (the manifest written); ``conditions``: :func:`cluster_conditions`,
    when the caller has them already."""
    cluster = facts.cluster
    capacity: JsonObject | None
    allocatable: JsonObject | None
    if facts.observed is not None:
        capacity, allocatable = quantities.wire(facts.observed[0]), quantities.wire(facts.observed[1])
    else:
        capacity = allocatable = dict(cluster.total_capacity) if cluster.total_capacity else None
    return {
        "serviceInstanceCount": facts.instances,
        "capacity": capacity,
        "allocatable": allocatable,
        "requests": quantities.wire({k: v for k, v in facts.used.items() if v != Decimal(0)}),
        "reachable": bool(facts.reachable),
        "observedGeneration": cluster.meta.generation,
        "conditions": replicas.wire(cluster_conditions(facts) if conditions is None else conditions),
    }


def cluster_conditions(facts: ClusterFacts) -> tuple[ConditionView, ...]:
    """The conditions an SFCluster should have: ``Ready``, ``ControllerInstalled``, ``Removable``."""
    cluster = facts.cluster
    generation = cluster.meta.generation
    install = facts.install
    install_failed = install is not None and not install.ok and not install.removed
    if facts.reachable and install_failed:
        assert install is not None
        ready, reason, message = False, install.reason, install.message
    elif facts.reachable:
        ready, reason, message = True, Reason.REACHABLE.value, "the cluster answers"
    else:
        ready = False
        reason = (Reason.KUBECONFIG_REFUSED if facts.refused else Reason.UNREACHABLE).value
        message = facts.reason or "not probed yet"
    conditions = replicas.set_condition(
        cluster.conditions,
        ConditionType.READY,
        status=ready,
        reason=reason,
        message=message,
        generation=generation,
        now=facts.now,
    )
    if install is not None and install.removed:
        conditions = tuple(c for c in conditions if c.type != ConditionType.CONTROLLER_INSTALLED.value)
    elif install is not None:
        conditions = replicas.set_condition(
            conditions,
            ConditionType.CONTROLLER_INSTALLED,
            status=install.ok,
            reason=install.reason,
            message=install.message,
            generation=generation,
            now=facts.now,
        )
    remaining = facts.remaining
    if remaining is not None:
        conditions = replicas.set_condition(
            conditions,
            ConditionType.REMOVABLE,
            status=False,
            reason=Reason.INSTANCES_REMAIN.value,
            message=blocked_message(facts.name, remaining),
            generation=generation,
            now=facts.now,
        )
    return conditions


def blocked_message(name: str, remaining: Sequence[Key]) -> str:
    """Why a cluster being deleted stays: the instances placed on it (the first five named)."""
    shown = ", ".join(f"{k.namespace}/{k.name}" for k in remaining[:5])
    more = f" and {len(remaining) - 5} more" if len(remaining) > 5 else ""
    return (
        f"cannot remove cluster {name!r}: {len(remaining)} instance(s) are placed on it "
        f"({shown}{more}); deprovision them first"
    )


ClusterAction = a.Action | Replicate | Unregister
"""What a cluster's plan returns: the one vocabulary, and the cluster's own effects."""


def plan(facts: ClusterFacts) -> list[ClusterAction]:
    """Hold or release the finalizer, replicate the catalog, report the status, probe again later."""
    cluster = facts.cluster
    removing, held = cluster.meta.deleting, CLUSTER_FINALIZER in cluster.meta.finalizers
    actions: list[ClusterAction] = []
    if not removing and not held:
        actions.append(a.EnsureFinalizer(present=True))
    if facts.reachable and not removing:
        actions.append(Replicate())
    if removing and not facts.remaining and not facts.controller_pending and held:
        return [
            *actions,
            a.EnsureFinalizer(present=False),
            a.Log(f"cluster {facts.name} released: no instance is placed on it any more", warning=False),
            Unregister(),
        ]
    conditions = cluster_conditions(facts)
    wanted = cluster_status(facts, conditions)
    current = cluster.reported
    patch = {k: v for k, v in wanted.items() if k != "conditions" and current.get(k) != v}
    event = None
    if not replicas.same_conditions(cluster.conditions, conditions):
        patch["conditions"] = replicas.wire(conditions)
        if facts.remaining is not None and not cluster.has_condition(ConditionType.REMOVABLE):
            message = blocked_message(facts.name, facts.remaining)
            event = a.Event(Reason.INSTANCES_REMAIN.value, message, warning=True)
    if patch:
        # Unguarded: the status is the probe's and the controller's alone; the next probe corrects a stale one.
        actions.append(a.WriteStatus(patch, guarded=False, event=event))
    return [*actions, a.Requeue(facts.probe_seconds)]
