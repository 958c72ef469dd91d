"""What the master writes into a sister cluster, and what it copies back. Pure: objects in, objects out.

* :func:`copy_of` — the copy of a master object (instance, binding, SFService, SFPlan) for a sister:
  name, namespace, labels and spec as on the master, plus the ``replicated`` label and the master's uid.
* :func:`mirror` — the master status patch that reports a sister copy's status (None when nothing changed,
  so an idle reconcile writes nothing).
* :func:`unreachable` — the patch that marks an object whose cluster stopped answering: a
  ``ClusterReachable=False`` condition and a description; the state itself is kept.
* :func:`credentials_secret` — the master's copy of a binding's credentials Secret, owned by the master
  binding, so the broker reads credentials from the master alone.

The objects read come in as :class:`~.views.ReplicaView`; what goes out (the copy, status patches, the Secret) are
the manifests written, plain dicts. Conditions are :class:`~opbroker.controller.core.views.ConditionView` values
until a patch is written (:func:`wire`).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable

from opbroker.api.conventions import (
    ANNOTATION_OWNER_UID,
    CREDENTIALS_KEY,
    CREDENTIALS_SECRET_TYPE,
    DOMAIN,
    LABEL_BINDING,
    LABEL_MANAGED_BY,
    MANAGED_BY,
)
from opbroker.api.osb import OperationState
from opbroker.controller.core.decisions import REQUESTED
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.views import ConditionView, SecretView, condition_wire
from opbroker.controller.multicluster.core.views import ReplicaView
from opbroker.controller.multicluster.reasons import (
    ANNOTATION_CLUSTER,
    ANNOTATION_MASTER_UID,
    LABEL_REPLICATED,
    ConditionType,
)
from opbroker.controller.runtime.objects import owner_reference
from opbroker.kubeclient.wire import JsonBody

#: Instance status fields that the master takes over from the sister copy.
INSTANCE_FIELDS = (
    "state",
    "description",
    "error",
    "dashboardUrl",
    "instanceUsable",
    "updateRepeatable",
    "appliedPlanHash",
)
#: The sister controller's reason for a plan it does not know (yet).
PLAN_NOT_FOUND = Reason.PLAN_NOT_FOUND.value
#: Binding status fields taken over (the credentials travel separately, in a Secret).
BINDING_FIELDS = ("state", "description", "error")


def _stamp(now: datetime.datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def copy_of(obj: ReplicaView) -> JsonBody:
    """The object as the master wants it in a sister cluster (applied with server-side apply)."""
    meta = obj.meta
    annotations = {
        key: value
        for key, value in meta.annotations.items()
        if key.startswith(f"{DOMAIN}/") and key != ANNOTATION_CLUSTER
    }
    if meta.uid:
        annotations[ANNOTATION_MASTER_UID] = meta.uid
    metadata: JsonBody = {
        "name": meta.name,
        "namespace": meta.namespace,
        "labels": {**meta.labels, LABEL_REPLICATED: "true"},
    }
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": obj.api_version, "kind": obj.kind, "metadata": metadata, "spec": dict(obj.spec)}


def requested(obj: ReplicaView) -> bool:
    """The broker asked for work on the master object that has not been handed to the sister yet."""
    return obj.status.state in REQUESTED


def pending(obj: ReplicaView) -> bool:
    """A request, or a spec the sister has not been given (also after a failure that did not observe it)."""
    return requested(obj) or obj.meta.generation != obj.status.observed_generation


def requested_state(obj: ReplicaView, *, copy_exists: bool) -> str:
    """The state to write on the copy: the broker's request, else a new provision or an update."""
    state = obj.status.state
    if state in (OperationState.IN_QUEUE.value, OperationState.UPDATE.value):
        return str(state)
    return OperationState.UPDATE.value if copy_exists else OperationState.IN_QUEUE.value


def settled(copy: ReplicaView) -> bool:
    """Whether the copy's status answers the current request and may be mirrored.

    Not while its state is still a request. The master always writes the requested state to the copy
    *after* its spec, so every state read after that belongs to the current request: a stale terminal
    state can never be mirrored. Nor while the copy failed only because the sister's controller has not
    seen the plan yet (the master copies the plan first, but the sister's watches of plans and instances
    are separate streams): that failure heals itself once the plan event arrives there.
    """
    state = copy.status.state
    if state in REQUESTED:
        return False
    ready = copy.condition(ConditionType.READY)
    return not (state == OperationState.FAILED.value and ready is not None and ready.reason == PLAN_NOT_FOUND)


def set_condition(
    conditions: Iterable[ConditionView],
    kind: ConditionType,
    *,
    status: bool,
    reason: str,
    message: str,
    generation: int | None = None,
    now: datetime.datetime,
) -> tuple[ConditionView, ...]:
    """``conditions`` with one condition set; its transition time (``now``, the facts' moment: this core reads no
    clock) only moves when its status flips."""
    previous = tuple(conditions)
    old = next((c for c in previous if c.type == kind.value), None)
    value = "True" if status else "False"
    moved = old is None or old.status != value
    condition = ConditionView(
        type=kind.value,
        status=value,
        reason=reason,
        message=message[:1024],
        last_transition_time=_stamp(now) if moved or old is None else old.last_transition_time or _stamp(now),
        observed_generation=generation,
    )
    return (*(c for c in previous if c.type != kind.value), condition)


def wire(conditions: Iterable[ConditionView]) -> list[JsonBody]:
    """Conditions as a status patch writes them (the whole list: a patch replaces it)."""
    return [condition_wire(c) for c in conditions]


def _comparable(conditions: Iterable[ConditionView]) -> list[tuple[str, str, str | None, str | None]]:
    # An empty reason or message reads back as absent (the views' rule): both compare as None, so a condition
    # written with "" is not written again on every pass.
    return sorted(((c.type, c.status, c.reason or None, c.message or None) for c in conditions), key=repr)


def same_conditions(first: Iterable[ConditionView], second: Iterable[ConditionView]) -> bool:
    """Equal apart from transition times and generations (what is worth a write)."""
    return _comparable(first) == _comparable(second)


def reachable_condition(obj: ReplicaView, cluster: str, now: datetime.datetime) -> tuple[ConditionView, ...]:
    return set_condition(
        obj.status.conditions,
        ConditionType.CLUSTER_REACHABLE,
        status=True,
        reason=Reason.CLUSTER_REACHABLE.value,
        message=f"cluster {cluster!r} answers",
        now=now,
    )


def mirror(
    master: ReplicaView, copy: ReplicaView, *, cluster: str, fields: tuple[str, ...], now: datetime.datetime
) -> JsonBody:
    """The master status patch reporting the copy's status (empty when the master already says it).

    Takes the listed fields (verbatim) and the copy's ``Ready`` condition, and marks the cluster reachable.
    """
    theirs, ours = copy.reported, master.reported
    patch: JsonBody = {name: theirs.get(name) for name in fields if ours.get(name) != theirs.get(name)}
    conditions = reachable_condition(master, cluster, now)
    ready = copy.condition(ConditionType.READY)
    if ready is not None:
        conditions = (
            *(c for c in conditions if c.type != ConditionType.READY.value),
            dataclasses.replace(ready, observed_generation=master.meta.generation),
        )
    if not same_conditions(conditions, master.status.conditions):
        patch["conditions"] = wire(conditions)
    return patch


def unreachable(obj: ReplicaView, *, cluster: str, reason: Reason, message: str, now: datetime.datetime) -> JsonBody:
    """The patch marking ``obj`` as out of reach (empty if it says so already). The state is kept."""
    status = obj.status
    description = f"{message}; the last known state ({status.state or 'none'}) is kept"
    conditions = set_condition(
        status.conditions,
        ConditionType.CLUSTER_REACHABLE,
        status=False,
        reason=reason.value,
        message=message,
        now=now,
    )
    patch: JsonBody = {}
    if status.description != description:
        patch["description"] = description
    if not same_conditions(conditions, status.conditions):
        patch["conditions"] = wire(conditions)
    return patch


def handed_over(obj: ReplicaView, *, cluster: str, now: datetime.datetime) -> JsonBody:
    """The master status once a request has been copied to ``cluster``: in progress there."""
    generation = obj.meta.generation
    conditions = set_condition(
        obj.status.conditions,
        ConditionType.READY,
        status=False,
        reason=Reason.IN_PROGRESS.value,
        message=f"handed to cluster {cluster!r}",
        generation=generation,
        now=now,
    )
    return {
        "state": OperationState.IN_PROGRESS.value,
        "description": f"handed to cluster {cluster!r}",
        "error": None,
        "observedGeneration": generation,
        "appliedSpec": dict(obj.spec),
        "conditions": wire(conditions),
    }


def credentials_secret(binding: ReplicaView, source: SecretView, name: str) -> JsonBody:
    """The master's copy of a sister credentials Secret: the response key only, owned by the master binding and
    stamped as its (what lets the placement write over it again: ``placement_plan.credentials_refused``)."""
    data = {CREDENTIALS_KEY: source.data[CREDENTIALS_KEY]}
    meta = binding.meta
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": CREDENTIALS_SECRET_TYPE,
        "metadata": {
            "name": name,
            "namespace": meta.namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_BINDING: meta.name},
            "annotations": {ANNOTATION_OWNER_UID: meta.uid},
            "ownerReferences": [owner_reference(dict(binding.wire), controller=True)],
        },
        "data": data,
    }
