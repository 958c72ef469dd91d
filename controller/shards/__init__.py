"""Shards of the controller (issue 46): which replica handles an instance and its bindings, and how an object that
is not where :func:`opbroker.api.shards.shard_of` puts it gets there.

* :mod:`.core` — pure: whether an object is this shard's to handle, to hand over, or another's; what the assigner
  labels.
* :mod:`.handover` — before a reconcile of an instance or binding: the owner moves an object that belongs
  elsewhere (its label written, guarded by the resourceVersion it read), inside the reconcile of that key, so no
  reconcile of it is running here while it moves.
* :mod:`.assigner` — shard 0: labels the objects no shard handles (a tenant's own, created without the label; a
  removed shard's, once its Lease is free).
"""
