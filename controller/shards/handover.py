"""Before an instance's or a binding's reconcile: is the object this shard's to handle (issue 46)?

Called by the reconcilers' read, with the object they read (from the store: no extra request), the one point every
reconcile of a key passes before deciding anything. An object that belongs to another shard by the rule
(:func:`opbroker.api.shards.shard_of`: ``--shards`` changed since it was labelled) is handed over here: its label
rewritten by its owner, guarded by the resourceVersion read, and nothing else is done with it on this shard. The
write's answer goes into the store, so a key queued again before the watch drops the object finds it labelled for
its new shard, and leaves it.
"""

from __future__ import annotations

import logging

from opbroker.api.shards import Shards, label_of
from opbroker.controller.runtime.kube import Kind, Kube
from opbroker.controller.shards.core import Elsewhere, HandOver, ownership, relabelling
from opbroker.kubeclient.wire import JsonObject, mapping_of, text_of

logger = logging.getLogger(__name__)


def keeps(kube: Kube, shards: Shards, kind: Kind, body: JsonObject, instance: str) -> bool:
    """Whether this shard handles ``body`` (of ``kind``; ``instance``: the name of its instance — its own, or a
    binding's). False: another shard's — handed over first if its label still names this one."""
    if not shards.sharded:
        return True
    meta = mapping_of(body.get("metadata"))
    namespace, name = text_of(meta.get("namespace")) or "", text_of(meta.get("name")) or ""
    decided = ownership(shards, label_of(mapping_of(meta.get("labels"))), namespace, instance)
    if isinstance(decided, Elsewhere):
        return False
    if not isinstance(decided, HandOver):
        return True
    kube.patch_custom(kind, namespace, name, relabelling(meta.get("resourceVersion"), decided.to))
    logger.info(
        "%s %s/%s handed over from shard %d to shard %d", kind.plural, namespace, name, shards.index, decided.to
    )
    return False
