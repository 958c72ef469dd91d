"""Whether the controller the master installed into a sister runs: its Deployment, as the sister returned it.

Applying the objects only says the API server took them; a Deployment of 0 available replicas (no node to run on,
an image that cannot be pulled, a crash loop) reconciles nothing placed there. So ``ControllerInstalled`` is
True only once the Deployment's current generation has as many available replicas as it asks for, and until then
says how many there are and what the Deployment's own conditions say (their messages name the ReplicaSet and the
cause: ``ProgressDeadlineExceeded``, ``MinimumReplicasUnavailable``). Pure: the caller reads the Deployment.
"""

from __future__ import annotations

from dataclasses import dataclass

from opbroker.kubeclient.wire import JsonObject, int_of, mapping_of, objects_of, path_of

#: Characters of the Deployment's condition messages kept in the SFCluster's message.
MESSAGE_LIMIT = 300


@dataclass(frozen=True)
class Availability:
    available: bool
    message: str


def availability(where: str, deployment: JsonObject | None) -> Availability:
    """``deployment`` (``where``: ``Deployment ns/name``, for the message) judged available or not, and why."""
    if deployment is None:
        return Availability(False, f"{where} is missing in the cluster")
    status = mapping_of(deployment.get("status"))
    replicas = int_of(path_of(deployment, "spec", "replicas"))
    wanted = 1 if replicas is None else replicas
    generation = int_of(path_of(deployment, "metadata", "generation")) or 0
    observed = int_of(status.get("observedGeneration")) or 0
    available = int_of(status.get("availableReplicas")) or 0
    updated = int_of(status.get("updatedReplicas")) or 0
    counts = f"{where}: {available} of {wanted} replica(s) available"
    if observed >= generation and available >= wanted and updated >= wanted:
        return Availability(True, counts)
    said = [
        f"{c.get('type')}: {c.get('reason') or ''} {c.get('message') or ''}".strip()
        for c in objects_of(status.get("conditions"))
        if c.get("status") != "True"
    ]
    if observed < generation:
        said.insert(0, f"generation {generation} not rolled out yet")
    detail = f" ({'; '.join(said)[:MESSAGE_LIMIT]})" if said else ""
    return Availability(False, f"{counts}, {updated} up to date{detail}")
