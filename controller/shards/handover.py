"""Before an instance's or a binding's reconcile: is the object this shard's to handle (issue 46)?

Called by the reconcilers' read, with the object they read (from the store: no extra request), the one point every
reconcile of a key passes before deciding anything. An object that belongs to another shard by the rule
(:func:`opbroker.api.shards.shard_of`: ``--shards`` changed since it was labelled) is handed over here: its label
rewritten by its owner, guarded by the resourceVersion read, and nothing else is done with it on this shard. The
write's answer goes into the store, so a key queued again before the watch drops the object finds it labelled for
its new shard, and leaves it. Its rendered objects and its registry move first (``core.moves_along``), each written
through the door that made it: the new shard's watches follow them from the moment it handles their owner.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from opbroker.api.meta import ResourceRef
from opbroker.api.shards import Shards, label_of
from opbroker.controller.core.views import ObjectView
from opbroker.controller.runtime.kube import Kind, Kube
from opbroker.controller.shards.core import Elsewhere, HandOver, moves_along, ownership, relabelling
from opbroker.kubeclient.wire import JsonObject, mapping_of, text_of

#: Objects that move along with their owner, and the door that may write them: the objects its status records (the
#: plan's account made them), its registry (the controller's own, in the registry namespace).
Moving = tuple[Kube, Sequence[ResourceRef]]
#: What an owner's handover moves along with it; called only when the owner is handed over (a plan to read).
Rendered = Callable[[], Sequence[Moving]]

logger = logging.getLogger(__name__)


def keeps(
    kube: Kube, shards: Shards, kind: Kind, body: JsonObject, instance: str, rendered: Rendered | None = None
) -> bool:
    """Whether this shard handles ``body`` (of ``kind``; ``instance``: the name of its instance — its own, or a
    binding's). False: another shard's — handed over first if its label still names this one (``rendered``: its
    rendered objects, moved along before it)."""
    if not shards.sharded:
        return True
    meta = mapping_of(body.get("metadata"))
    namespace, name = text_of(meta.get("namespace")) or "", text_of(meta.get("name")) or ""
    decided = ownership(shards, label_of(mapping_of(meta.get("labels"))), namespace, instance)
    if isinstance(decided, Elsewhere):
        return False
    if not isinstance(decided, HandOver):
        return True
    for writer, refs in rendered() if rendered is not None else ():
        move_along(text_of(meta.get("uid")) or "", shards.index, decided.to, writer, refs)
    kube.patch_custom(kind, namespace, name, relabelling(meta.get("resourceVersion"), decided.to))
    logger.info(
        "%s %s/%s handed over from shard %d to shard %d", kind.plural, namespace, name, shards.index, decided.to
    )
    return False


def move_along(owner_uid: str, label: int | None, to: int, writer: Kube, refs: Sequence[ResourceRef]) -> int:
    """Relabel for shard ``to`` the objects of ``refs`` that move with their owner off ``label`` (``core.moves_along``),
    each write guarded by the version read; how many were. A failed write fails the move (the owner keeps its label,
    and its reconcile is retried)."""
    moved = 0
    for ref in refs:
        live = ObjectView.maybe(writer.get(ref))
        if live is not None and moves_along(live, owner_uid, label):
            writer.merge_patch(ref, relabelling(live.meta.resource_version, to))
            moved += 1
    return moved
