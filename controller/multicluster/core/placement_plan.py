"""The pure decisions of multi-cluster placement: where an instance or binding is reconciled, and what the
master writes about it (:mod:`opbroker.controller.multicluster.placement` reads the facts and performs placement's
own actions).

:func:`instance` and :func:`binding` are the first branch of the instance's and binding's own plans
(:mod:`opbroker.controller.osb.core.instance_plan`, :mod:`~opbroker.controller.osb.core.binding_plan`), on the
:class:`PlacementFacts` their observe read. They return None when the object is reconciled right here (placed on
the master, cluster ``"1"``; or unplaced and already rendered here; or a plan problem the local reconciler
reports), else the actions of the shared vocabulary (:mod:`opbroker.controller.core.actions`) plus the few of
placement's own (:class:`SetCluster`, :class:`AnnotateCluster`, :class:`ReplicateCatalog`, :class:`HandOver`,
:class:`DeleteCopy`: writes to a sister or to the master object's spec and metadata). Every decision of
:mod:`~opbroker.controller.multicluster.placement`'s docstring is taken here: schedule or fail, hold the
teardown finalizer, hand over, mirror back, report a lost copy or an unreachable cluster, refuse a deprovision
under live bindings, tear down and release.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field

from opbroker.api.conventions import FINALIZER, credentials_secret_name
from opbroker.api.meta import ResourceRef
from opbroker.api.osb import OperationState
from opbroker.controller.core import actions as a
from opbroker.controller.core import decisions
from opbroker.controller.core.decisions import TERMINAL, outcome_status
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.views import Meta, ObjectView, OperationView, SecretView
from opbroker.controller.multicluster.core import replicas
from opbroker.controller.multicluster.core.scheduling import MASTER
from opbroker.controller.multicluster.core.views import ReplicaView
from opbroker.controller.multicluster.reasons import ANNOTATION_CLUSTER, ConditionType
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.policies import DEFAULTS
from opbroker.kubeclient.wire import JsonBody, JsonObject

WARNINGS = frozenset({Reason.CLUSTER_UNREACHABLE, Reason.CLUSTER_NOT_REGISTERED, Reason.SCHEDULING_FAILED})


# -- placement's own actions ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SetCluster:
    """Record the scheduler's choice in the master instance's ``spec.clusterId`` (guarded by the version read)."""

    cluster: str


@dataclass(frozen=True)
class AnnotateCluster:
    """Record on the master binding the cluster it is handed to (its instance may move; the binding stays)."""

    cluster: str


@dataclass(frozen=True)
class ReplicateCatalog:
    """Copy the plan and service an instance needs into ``cluster`` before the instance itself."""

    cluster: str
    bodies: tuple[JsonObject, ...] = field(repr=False)


@dataclass(frozen=True)
class HandOver:
    """Apply the copy into ``cluster`` (its namespace first), then write the requested ``state`` on it."""

    cluster: str
    copy: JsonObject = field(repr=False)
    state: str


@dataclass(frozen=True)
class DeleteCopy:
    """Delete the copy of that ``uid`` in ``cluster`` (gone, or another object of the name now: fine); with
    ``deprovision`` the copy's state says so first, so the sister's controller tears it down."""

    cluster: str
    uid: str
    deprovision: bool = False


PlacementAction = SetCluster | AnnotateCluster | ReplicateCatalog | HandOver | DeleteCopy
"""Placement's own actions: their effects (``MultiClusterPlacement.effects``) are registered in the OSB executor
when multi-cluster is on."""

Placed = list[a.Action | PlacementAction]
"""What placement decides for an instance or a binding: the one vocabulary and its own actions."""


# -- facts ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reach:
    """What the cluster registry says of the cluster an object is placed on."""

    registered: bool
    reachable: bool
    reason: str = ""


@dataclass(frozen=True)
class Scheduling:
    """The scheduler's answer for an unplaced instance (its choice is reserved in the ledger as it is made)."""

    cluster: str | None
    message: str
    policy: str = ""


@dataclass(frozen=True)
class PlacementFacts:
    """An instance or binding on the master, and what placing it depends on."""

    key: Key
    obj: ReplicaView = field(repr=False)
    """The master object as read (never written to; ``obj.wire`` is what the executor's guarded writes start
    from)."""
    ready: bool = True
    """The start-up picture (catalog, clusters) is whole."""
    cluster: str | None = None
    """Where it is placed (an instance's ``spec.clusterId``; a binding's annotation, else its instance's)."""
    reach: Reach | None = None
    copy: ReplicaView | None = field(default=None, repr=False)
    """The copy in the sister (read when the cluster answers)."""
    here: bool = False
    """Unplaced but already rendered by this controller (before multi-cluster was switched on); for a binding:
    its instance is."""
    plan_known: bool = True
    """The catalog has a usable plan for it (else the local reconciler reports the problem)."""
    catalog: tuple[JsonObject, ...] = field(default=(), repr=False)
    """The plan and service bodies a handed-over instance needs in the sister."""
    scheduling: Scheduling | None = None
    live_bindings: int = 0
    """An instance being deleted: bindings of it that still exist on the master."""
    instance_copied: bool = True
    """A binding: its instance's copy exists in the sister."""
    source: SecretView | None = field(default=None, repr=False)
    """A binding bound in the sister: the copy's credentials Secret there."""
    credentials: ObjectView | None = field(default=None, repr=False)
    """A binding: its credentials Secret on the master as read (None: there is none), read when the copy's are
    there to mirror and when the binding is deleted: the plan writes over it only when it is the binding's, and
    deletes it only when an owner reference says so, each at the version read."""
    plan_user: str | None = None
    """The plan's ServiceAccount: the credentials Secret is written as it (issue 24)."""
    poll_seconds: float = 5.0
    not_ready_in: float = DEFAULTS.placement_not_ready.base
    """How soon a reconcile waiting for the controller's start-up looks again (the policy table's
    ``placement_not_ready``, jittered by the edge)."""
    handover_in: float = DEFAULTS.placement_handover.base
    """How soon a binding whose instance is still being handed over looks again (``placement_handover``)."""
    probe_seconds: float = 30.0
    now: datetime.datetime = field(kw_only=True)
    """The moment of the read (observe's clock; the plan reads none): a flipped condition's transition time."""

    @property
    def meta(self) -> Meta:
        return self.obj.meta

    @property
    def operation(self) -> OperationView:
        """What the master object's status says of the current operation."""
        return self.obj.status

    @property
    def copy_state(self) -> str | None:
        """The copy's state (None: no copy, or none written yet)."""
        return None if self.copy is None else self.copy.status.state


# -- shared steps ---------------------------------------------------------------------------------------------


def reconciled_here(obj: ReplicaView) -> bool:
    """An unplaced instance already rendered by this controller (before multi-cluster was switched on)."""
    return obj.rendered and not obj.cluster_id


def stale(copy: ReplicaView, obj: ReplicaView) -> bool:
    """The copy was made for an earlier object of the same name (its master uid differs)."""
    uid = copy.master_uid
    return uid is not None and uid != obj.meta.uid


def needs_schedule(obj: ReplicaView) -> bool:
    """An unplaced, living instance with a pending request: the scheduler is asked (then the plan decides)."""
    return not obj.meta.deleting and replicas.pending(obj)


def write(facts: PlacementFacts, patch: JsonObject, event: tuple[Reason, str] | None = None) -> Placed:
    """Patch the master status; an Event goes with it when given, or when the state changed."""
    if not patch:
        return []
    before = facts.operation.state
    after = patch.get("state", before)
    if event is None and after != before:
        event = (Reason.REPLICATED, f"{after} (reported by cluster {facts.cluster!r})")
    said = None
    if event is not None:
        reason, message = event
        said = a.Event(reason.value, message, warning=reason in WARNINGS or after == OperationState.FAILED.value)
    return [a.WriteStatus(dict(patch), event=said)]


def unreachable(facts: PlacementFacts) -> Placed:
    """The cluster cannot be worked with: the object says so (its state kept); probed again later."""
    assert facts.cluster is not None and facts.reach is not None
    cluster = facts.cluster
    if not facts.reach.registered:
        reason, message = Reason.CLUSTER_NOT_REGISTERED, f"cluster {cluster!r} is not registered (no SFCluster)"
    else:
        reason = Reason.CLUSTER_UNREACHABLE
        message = f"cluster {cluster!r} is unreachable: {facts.reach.reason or 'not probed yet'}"
    patch = replicas.unreachable(facts.obj, cluster=cluster, reason=reason, message=message, now=facts.now)
    return [*write(facts, patch, (reason, message)), a.Requeue(facts.probe_seconds)]


def hold(facts: PlacementFacts) -> Placed:
    return [] if FINALIZER in facts.meta.finalizers else [a.EnsureFinalizer(present=True)]


def hand_over(facts: PlacementFacts) -> Placed:
    """Copy the object and its requested state into the cluster; the master then says in progress."""
    assert facts.cluster is not None
    obj = facts.obj
    requested = replicas.requested_state(obj, copy_exists=facts.copy is not None)
    message = f"handed to cluster {facts.cluster!r}"
    return [
        HandOver(facts.cluster, replicas.copy_of(obj), requested),
        *write(facts, replicas.handed_over(obj, cluster=facts.cluster, now=facts.now), (Reason.REPLICATED, message)),
        a.Requeue(facts.poll_seconds),
    ]


def mirror(facts: PlacementFacts, fields: tuple[str, ...]) -> Placed:
    """Report the copy's status on the master, once it answers the current request."""
    assert facts.copy is not None and facts.cluster is not None
    if not replicas.settled(facts.copy):
        return [a.Requeue(facts.poll_seconds)]
    patch = replicas.mirror(facts.obj, facts.copy, cluster=facts.cluster, fields=fields, now=facts.now)
    done = facts.copy_state in TERMINAL
    return [*write(facts, patch), *([] if done else [a.Requeue(facts.poll_seconds)])]


def lost(facts: PlacementFacts) -> Placed:
    """The copy is gone although the master asked for nothing: the cluster lost it. Said, not redone."""
    assert facts.cluster is not None
    message = f"the copy in cluster {facts.cluster!r} has disappeared; a new update request re-creates it"
    conditions = replicas.set_condition(
        replicas.reachable_condition(facts.obj, facts.cluster, facts.now),
        ConditionType.READY,
        status=False,
        reason=Reason.CLUSTER_UNREACHABLE.value,
        message=message,
        generation=facts.meta.generation,
        now=facts.now,
    )
    operation = facts.operation
    patch: JsonBody = {}
    if operation.state != OperationState.FAILED.value or operation.error != message:
        patch = {"state": OperationState.FAILED.value, "error": message, "description": message}
    if not replicas.same_conditions(conditions, operation.conditions):
        patch["conditions"] = replicas.wire(conditions)
    return write(facts, patch, (Reason.CLUSTER_UNREACHABLE, message))


def teardown(facts: PlacementFacts, fields: tuple[str, ...], *, credentials: bool) -> Placed:
    """Delete the copy, report its teardown, release the master object once the copy is gone (a binding's
    credentials Secret first: the garbage collector may take its time)."""
    assert facts.cluster is not None
    meta = facts.meta
    if FINALIZER not in meta.finalizers:
        return []
    copy = facts.copy
    if copy is not None:
        if not copy.meta.deleting:
            return [DeleteCopy(facts.cluster, copy.meta.uid, deprovision=True), a.Requeue(facts.poll_seconds)]
        if replicas.settled(copy):
            patch = replicas.mirror(facts.obj, copy, cluster=facts.cluster, fields=fields, now=facts.now)
            return [*write(facts, patch), a.Requeue(facts.poll_seconds)]
        return [a.Requeue(facts.poll_seconds)]
    return [*(delete_credentials(facts) if credentials else []), a.EnsureFinalizer(present=False)]


def delete_credentials(facts: PlacementFacts) -> Placed:
    """Delete the binding's credentials Secret as read when an owner reference says it is the binding's, at the
    version read (changed since: a conflict, decided again); another's of that name, or none, is left alone."""
    live, meta = facts.credentials, facts.meta
    if live is None or not live.meta.owned_by(meta.uid):
        return []
    name = credentials_secret_name(meta.name)
    version = live.meta.resource_version
    return [a.DeleteSecret(meta.namespace, name, meta.uid, uid=live.meta.uid or None, resource_version=version)]


def credentials_refused(facts: PlacementFacts) -> Placed | None:
    """A binding's credentials Secret of its name that is someone else's: the binding fails on the master (its state,
    error and Ready condition say why), and its copy's credentials stay in the sister (None: the Secret may be
    written). The binding's own carries its stamp
    (``decisions.takeover``) or, written before the copies were stamped, its owner reference."""
    live, meta = facts.credentials, facts.meta
    if live is None or live.meta.owned_by(meta.uid):
        return None
    if decisions.takeover(live, owner_uids=(meta.uid,), adopt=False) is not decisions.Takeover.REFUSE:
        return None
    name = credentials_secret_name(meta.name)
    message = decisions.not_owned_message(
        ResourceRef(api_version="v1", kind="Secret", namespace=meta.namespace, name=name)
    )
    failed = OperationState.FAILED.value
    if facts.operation.state == failed and facts.operation.error == message:
        return []
    conditions = replicas.set_condition(
        facts.operation.conditions, ConditionType.READY, status=False, reason=Reason.OBJECT_NOT_OWNED.value,
        message=message, generation=facts.meta.generation, now=facts.now,
    )  # fmt: skip
    patch = {"state": failed, "error": message, "description": message, "conditions": replicas.wire(conditions)}
    return write(facts, patch, (Reason.OBJECT_NOT_OWNED, message))


def write_credentials(facts: PlacementFacts, secret: JsonObject) -> a.WriteSecret:
    """Write the mirrored credentials into the binding's Secret (:func:`credentials_refused` let it), guarded by the
    Secret as read: created when there was none, else written over the version read (a Secret made or changed
    since is a conflict: the reconcile decides again on what it reads then)."""
    live = facts.credentials
    if live is None:
        return a.WriteSecret(secret, as_user=facts.plan_user, create=True)
    return a.WriteSecret(secret, as_user=facts.plan_user, resource_version=live.meta.resource_version)


def _replaced_copy(facts: PlacementFacts) -> Placed | None:
    """A copy left by an earlier object of the same name: delete it, wait until it is gone."""
    if facts.copy is None or not stale(facts.copy, facts.obj):
        return None
    assert facts.cluster is not None
    return [DeleteCopy(facts.cluster, facts.copy.meta.uid), a.Requeue(facts.poll_seconds)]


# -- instances ------------------------------------------------------------------------------------------------


def instance(facts: PlacementFacts) -> Placed | None:
    """Where the instance is reconciled, and what the master does about it (None: right here)."""
    if not facts.ready:  # nothing is decided before the start-up picture (catalog, clusters) is whole
        return [a.Requeue(facts.not_ready_in)]
    cluster = facts.cluster
    if cluster == MASTER or (cluster is None and facts.here):
        return None
    if cluster is None:
        return unscheduled(facts)
    assert facts.reach is not None
    if not facts.reach.reachable:
        return unreachable(facts)
    if facts.meta.deleting:
        if facts.live_bindings:  # as in one cluster: no deprovision under live bindings (their removal re-enqueues)
            return blocked(facts)
        return teardown(facts, replicas.INSTANCE_FIELDS, credentials=False)
    placed = instance_on(facts)
    return None if placed is None else [*hold(facts), *placed]


def blocked(facts: PlacementFacts) -> Placed:
    error = f"cannot deprovision: {facts.live_bindings} binding(s) still exist; unbind them first"
    failed = facts.operation.state == OperationState.FAILED.value  # an outcome's Event only when the state changes
    if failed and facts.operation.error == error:
        return []
    patch = outcome_status(
        facts.operation,
        facts.meta.generation,
        state=OperationState.FAILED,
        reason=Reason.BINDINGS_EXIST,
        error=error,
        at=facts.now,
    )
    event = None if failed else a.Event(Reason.BINDINGS_EXIST.value, error, warning=True)
    return [a.WriteStatus(patch, settled=True, event=event)]


def unscheduled(facts: PlacementFacts) -> Placed | None:
    if facts.meta.deleting:
        return [a.EnsureFinalizer(present=False)]  # never placed anywhere: nothing to tear down
    if not needs_schedule(facts.obj):
        return []  # a scheduling failure stays until the next request
    if not facts.plan_known:
        return None  # the local reconciler reports the plan problem; it never applies without a plan
    decided = facts.scheduling
    assert decided is not None
    if decided.cluster is None:
        return unschedulable(facts, decided.message)
    message = f"{decided.message} by the {decided.policy} scheduler"
    generation = facts.meta.generation
    conditions = replicas.set_condition(
        facts.operation.conditions,
        ConditionType.SCHEDULED,
        status=True,
        reason=Reason.SCHEDULED.value,
        message=message,
        generation=None if generation is None else generation + 1,  # the spec write below makes the next one
        now=facts.now,
    )
    return [
        SetCluster(decided.cluster),
        a.WriteStatus(
            {"conditions": replicas.wire(conditions)}, guarded=False, event=a.Event(Reason.SCHEDULED.value, message)
        ),
        a.Log(f"instance {facts.key.namespace}/{facts.key.name} {message}", warning=False),
        a.Requeue(0.0),
    ]


def unschedulable(facts: PlacementFacts, message: str) -> Placed:
    generation = facts.meta.generation
    conditions = facts.operation.conditions
    for kind in (ConditionType.SCHEDULED, ConditionType.READY):
        conditions = replicas.set_condition(
            conditions, kind, status=False, reason=Reason.SCHEDULING_FAILED.value, message=message,
            generation=generation, now=facts.now,
        )  # fmt: skip
    failed = OperationState.FAILED.value
    patch = {
        "state": failed,
        "description": message,
        "error": message,
        "observedGeneration": generation,
        "conditions": replicas.wire(conditions),
    }
    event = None if facts.operation.state == failed else a.Event(Reason.SCHEDULING_FAILED.value, message, True)
    return [
        a.WriteStatus(patch, event=event),
        a.Log(f"instance {facts.key.namespace}/{facts.key.name}: {message}"),
    ]


def instance_on(facts: PlacementFacts) -> Placed | None:
    replaced = _replaced_copy(facts)
    if replaced is not None:
        return replaced
    if replicas.pending(facts.obj):
        if not facts.plan_known:
            return None  # the local reconciler reports the plan problem (it applies nothing without a plan)
        assert facts.cluster is not None
        return [ReplicateCatalog(facts.cluster, facts.catalog), *hand_over(facts)]
    if facts.copy is None:
        return lost(facts)
    return mirror(facts, replicas.INSTANCE_FIELDS)


# -- bindings -------------------------------------------------------------------------------------------------


def binding(facts: PlacementFacts) -> Placed | None:
    """Where the binding is reconciled, and what the master does about it (None: right here)."""
    if not facts.ready:
        return [a.Requeue(facts.not_ready_in)]
    cluster = facts.cluster
    if cluster == MASTER:
        return None
    if cluster is None:
        if facts.here:
            return None
        if facts.meta.deleting:
            return [a.EnsureFinalizer(present=False)]  # its instance was never placed: nothing to undo anywhere
        return None  # the local reconciler waits for (or fails with) the instance; it applies nothing
    assert facts.reach is not None
    if not facts.reach.reachable:
        return unreachable(facts)
    if facts.meta.deleting:  # the master's credentials Secret goes with it
        return teardown(facts, replicas.BINDING_FIELDS, credentials=True)
    return [*hold(facts), *binding_on(facts)]


def binding_on(facts: PlacementFacts) -> Placed:
    assert facts.cluster is not None
    replaced = _replaced_copy(facts)
    if replaced is not None:
        return replaced
    obj = facts.obj
    if replicas.pending(obj):
        if not facts.instance_copied:
            return [a.Requeue(facts.handover_in)]  # the instance is still being handed over
        annotated = facts.meta.annotations.get(ANNOTATION_CLUSTER) == facts.cluster
        return [*([] if annotated else [AnnotateCluster(facts.cluster)]), *hand_over(facts)]
    copy = facts.copy
    if copy is None:
        return lost(facts)
    if not replicas.settled(copy):
        return [a.Requeue(facts.poll_seconds)]
    if facts.copy_state != OperationState.SUCCEEDED.value:
        return mirror(facts, replicas.BINDING_FIELDS)
    if facts.source is None:
        return [a.Requeue(facts.poll_seconds)]
    name = credentials_secret_name(facts.meta.name)
    patch = replicas.mirror(obj, copy, cluster=facts.cluster, fields=replicas.BINDING_FIELDS, now=facts.now)
    if obj.secret_ref != name:
        patch["response"] = {"secretRef": name}
    refused = credentials_refused(facts)
    if refused is not None:
        return refused
    secret = replicas.credentials_secret(obj, facts.source, name)
    return [write_credentials(facts, secret), *write(facts, patch)]


def source_secret_name(copy: ReplicaView | None) -> str | None:
    """The credentials Secret a bound copy names in the sister (None: not bound, or not yet)."""
    if copy is None or not replicas.settled(copy):
        return None
    if copy.status.state != OperationState.SUCCEEDED.value:
        return None
    return copy.secret_ref
