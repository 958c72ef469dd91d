"""What the master writes into a sister cluster, and what it copies back. Pure: objects in, objects out.

* :func:`copy_of` — the copy of a master object (instance, binding, SFService, SFPlan) for a sister:
  name, namespace, labels and spec as on the master, plus the ``replicated`` label and the master's uid.
* :func:`mirror` — the master status patch that reports a sister copy's status (None when nothing changed,
  so an idle reconcile writes nothing).
* :func:`unreachable` — the patch that marks an object whose cluster stopped answering: a
  ``ClusterReachable=False`` condition and a description; the state itself is kept.
* :func:`credentials_secret` — the master's copy of a binding's credentials Secret, owned by the master
  binding, so the broker reads credentials from the master alone.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any

from opbroker.api.conventions import (
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
from opbroker.controller.multicluster.reasons import (
    ANNOTATION_CLUSTER,
    ANNOTATION_MASTER_UID,
    LABEL_REPLICATED,
    ConditionType,
)
from opbroker.controller.objects import owner_reference

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


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def copy_of(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as the master wants it in a sister cluster (applied with server-side apply)."""
    meta = obj["metadata"]
    annotations = {
        key: value
        for key, value in (meta.get("annotations") or {}).items()
        if key.startswith(f"{DOMAIN}/") and key != ANNOTATION_CLUSTER
    }
    if meta.get("uid"):
        annotations[ANNOTATION_MASTER_UID] = meta["uid"]
    metadata: dict[str, Any] = {
        "name": meta["name"],
        "namespace": meta["namespace"],
        "labels": {**(meta.get("labels") or {}), LABEL_REPLICATED: "true"},
    }
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": metadata, "spec": obj.get("spec") or {}}


def requested(obj: dict[str, Any]) -> bool:
    """The broker asked for work on the master object that has not been handed to the sister yet."""
    return (obj.get("status") or {}).get("state") in REQUESTED


def pending(obj: dict[str, Any]) -> bool:
    """A request, or a spec the sister has not been given (also after a failure that did not observe it)."""
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    return requested(obj) or meta.get("generation") != status.get("observedGeneration")


def requested_state(obj: dict[str, Any], *, copy_exists: bool) -> str:
    """The state to write on the copy: the broker's request, else a new provision or an update."""
    state = (obj.get("status") or {}).get("state")
    if state in (OperationState.IN_QUEUE.value, OperationState.UPDATE.value):
        return str(state)
    return OperationState.UPDATE.value if copy_exists else OperationState.IN_QUEUE.value


def settled(copy: dict[str, Any]) -> bool:
    """Whether the copy's status answers the current request and may be mirrored.

    Not while its state is still a request. The master always writes the requested state to the copy
    *after* its spec, so every state read after that belongs to the current request: a stale terminal
    state can never be mirrored. Nor while the copy failed only because the sister's controller has not
    seen the plan yet (the master copies the plan first, but the sister's watches of plans and instances
    are separate streams): that failure heals itself once the plan event arrives there.
    """
    status = copy.get("status") or {}
    if status.get("state") in REQUESTED:
        return False
    conditions: list[dict[str, Any]] = status.get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == ConditionType.READY.value), {})
    return not (status.get("state") == OperationState.FAILED.value and ready.get("reason") == PLAN_NOT_FOUND)


def set_condition(
    conditions: Iterable[dict[str, Any]] | None,
    kind: ConditionType,
    *,
    status: bool,
    reason: str,
    message: str,
    generation: int | None = None,
) -> list[dict[str, Any]]:
    """``conditions`` with one condition set; its transition time only moves when its status flips."""
    previous = list(conditions or [])
    old = next((c for c in previous if c.get("type") == kind.value), None)
    value = "True" if status else "False"
    moved = old is None or old.get("status") != value
    condition = {
        "type": kind.value,
        "status": value,
        "reason": reason,
        "message": message[:1024],
        "lastTransitionTime": _now() if moved or old is None else old.get("lastTransitionTime") or _now(),
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    return [*(c for c in previous if c.get("type") != kind.value), condition]


def _comparable(conditions: Iterable[dict[str, Any]] | None) -> list[tuple[Any, ...]]:
    return sorted((c.get("type"), c.get("status"), c.get("reason"), c.get("message")) for c in conditions or [])


def same_conditions(first: Iterable[dict[str, Any]] | None, second: Iterable[dict[str, Any]] | None) -> bool:
    """Equal apart from transition times and generations (what is worth a write)."""
    return _comparable(first) == _comparable(second)


def reachable_condition(obj: dict[str, Any], cluster: str) -> list[dict[str, Any]]:
    return set_condition(
        (obj.get("status") or {}).get("conditions"),
        ConditionType.CLUSTER_REACHABLE,
        status=True,
        reason=Reason.CLUSTER_REACHABLE.value,
        message=f"cluster {cluster!r} answers",
    )


def mirror(master: dict[str, Any], copy: dict[str, Any], *, cluster: str, fields: tuple[str, ...]) -> dict[str, Any]:
    """The master status patch reporting the copy's status (empty when the master already says it).

    Takes the listed fields and the copy's ``Ready`` condition, and marks the cluster reachable.
    """
    theirs = copy.get("status") or {}
    ours = master.get("status") or {}
    patch = {name: theirs.get(name) for name in fields if ours.get(name) != theirs.get(name)}
    conditions = reachable_condition(master, cluster)
    ready = next((c for c in theirs.get("conditions") or [] if c.get("type") == ConditionType.READY.value), None)
    if ready is not None:
        conditions = [
            *(c for c in conditions if c.get("type") != ConditionType.READY.value),
            {**ready, "observedGeneration": (master.get("metadata") or {}).get("generation")},
        ]
    if not same_conditions(conditions, ours.get("conditions")):
        patch["conditions"] = conditions
    return patch


def unreachable(obj: dict[str, Any], *, cluster: str, reason: Reason, message: str) -> dict[str, Any]:
    """The patch marking ``obj`` as out of reach (empty if it says so already). The state is kept."""
    status = obj.get("status") or {}
    description = f"{message}; the last known state ({status.get('state') or 'none'}) is kept"
    conditions = set_condition(
        status.get("conditions"), ConditionType.CLUSTER_REACHABLE, status=False, reason=reason.value, message=message
    )
    patch: dict[str, Any] = {}
    if status.get("description") != description:
        patch["description"] = description
    if not same_conditions(conditions, status.get("conditions")):
        patch["conditions"] = conditions
    return patch


def handed_over(obj: dict[str, Any], *, cluster: str) -> dict[str, Any]:
    """The master status once a request has been copied to ``cluster``: in progress there."""
    meta = obj["metadata"]
    conditions = set_condition(
        (obj.get("status") or {}).get("conditions"),
        ConditionType.READY,
        status=False,
        reason=Reason.IN_PROGRESS.value,
        message=f"handed to cluster {cluster!r}",
        generation=meta.get("generation"),
    )
    return {
        "state": OperationState.IN_PROGRESS.value,
        "description": f"handed to cluster {cluster!r}",
        "error": None,
        "observedGeneration": meta.get("generation"),
        "appliedSpec": obj.get("spec"),
        "conditions": conditions,
    }


def credentials_secret(binding: dict[str, Any], source: dict[str, Any], name: str) -> dict[str, Any]:
    """The master's copy of a sister credentials Secret: the response key only, owned by the master binding."""
    data = {CREDENTIALS_KEY: (source.get("data") or {})[CREDENTIALS_KEY]}
    meta = binding["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": CREDENTIALS_SECRET_TYPE,
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_BINDING: meta["name"]},
            "ownerReferences": [owner_reference(binding, controller=True)],
        },
        "data": data,
    }
