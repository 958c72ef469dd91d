"""The decisions of sharding, pure (table-tested in tests/controller/test_shards_core.py).

Ownership is the label, read: a replica handles an object only while its ``opbroker.io/shard`` names the replica's
shard (and it holds that shard's Lease: a replica acts only while leading). Only two parties ever write the label,
and never on the same object at once:

* the **owner** (the shard the label names), when the object belongs elsewhere (``--shards`` changed): it writes
  the new label as a step of the object's own reconcile — no reconcile of that key runs meanwhile on this shard
  (the queue runs one per key), and once written this shard no longer sees the object (its watch selects its own
  label), while the new owner's watch delivers it;
* the **assigner** (shard 0), for an object no shard handles: no label (a tenant created it directly), or a label
  naming a shard beyond the count whose Lease nobody holds (the shard was removed). A label naming a shard whose
  Lease is still held (a replica running with a larger ``--shards`` during a change of it) is left to that shard.

Every label write is guarded by the resourceVersion read, so a write that raced another fails with a conflict and
is decided again from a fresh read.

An owner's **rendered objects** carry its shard's label too (so only that shard's source watches follow them).
Whoever moves an owner moves them first (:func:`moves_along`: each the owner's by its stamp and labelled as the
owner was), then the owner itself — the owner's handover, or the assigner placing an unlabelled owner (created before
the controller was sharded) or a removed shard's — so by the time the new shard handles the owner its watch follows
the owner's objects (a read before the relabel reaches it goes to the API: a shard's source store is never taken as
complete). The label is bookkeeping, not a declaration: drift does not compare it (``osb.core.drift``), so moving
shards is never reported to a tenant as its objects drifting.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from opbroker.api.shards import SHARD_LABEL, Shards, label_of
from opbroker.controller.core.views import ObjectView


@dataclass(frozen=True)
class Mine:
    """This shard's to handle: the reconcile goes on."""


@dataclass(frozen=True)
class Elsewhere:
    """Another shard's (or nobody's yet: the assigner's): this shard does nothing with it."""


@dataclass(frozen=True)
class HandOver:
    """This shard's by its label, but it belongs to ``to``: relabel it, and do nothing else with it."""

    to: int


Ownership = Mine | Elsewhere | HandOver

MINE = Mine()
ELSEWHERE = Elsewhere()


def ownership(shards: Shards, label: int | None, namespace: str, instance: str) -> Ownership:
    """What this replica does with an object labelled ``label`` of the instance ``namespace/instance``.
    Unsharded, everything is its own, whatever a label says (a label left from a sharded past is ignored)."""
    if not shards.sharded:
        return MINE
    if label != shards.index:
        return ELSEWHERE
    wanted = shards.of(namespace, instance)
    return MINE if wanted == shards.index else HandOver(wanted)


def assignment(shards: Shards, label: int | None, namespace: str, instance: str, *, lease_held: bool) -> int | None:
    """The label the assigner writes on an object labelled ``label``, or None to leave it. ``lease_held``: the
    Lease of the shard ``label`` names is held (renewed within its duration) — that shard still runs."""
    if label is not None and label < shards.count:
        return None  # a current shard's: its owner moves it if it must
    if label is not None and lease_held:
        return None  # a shard beyond the count still runs (the count is being changed): it stays its own
    return shards.of(namespace, instance)


def lease_held(holder: str, renewed: datetime.datetime | None, duration_seconds: int, now: datetime.datetime) -> bool:
    """Whether a shard's Lease is held: a holder, renewed less than its duration ago (clocks of the pods differ by
    little against a lease of seconds; a Lease never renewed is not held)."""
    if not holder or renewed is None:
        return False
    return now - renewed < datetime.timedelta(seconds=max(duration_seconds, 1))


def relabelling(resource_version: object, shard: int) -> dict[str, object]:
    """The merge patch moving an object to ``shard``, guarded by the ``resource_version`` its decision read (a 409
    if the object moved on meanwhile: decided again from a fresh read)."""
    return {"metadata": {"resourceVersion": resource_version, "labels": {SHARD_LABEL: str(shard)}}}


def moves_along(live: ObjectView | None, owner_uid: str, label: int | None) -> bool:
    """Whether a rendered object recorded by an owner being moved off ``label`` (its shard label; None: none) moves
    with it: one stamped as the owner's (a tenant writes its own object's ``status.resources``, so a record names
    nothing it proves) and labelled as the owner was (a shared singleton is stamped as no one's; one moved already
    carries its new label)."""
    if live is None or not owner_uid or not live.meta.stamped(owner_uid):
        return False
    return label_of(live.meta.labels) == label and (label is not None or SHARD_LABEL not in live.meta.labels)
