"""The assigner (shard 0 of a sharded controller, issue 46): labels the instances and bindings no shard handles.

A tenant may create an SFServiceInstance or SFServiceBinding itself (not through the broker, which labels what it
creates): it carries no shard label — the admission policy refuses a tenant's ``opbroker.io/`` label, so it cannot
pick one — and no shard's watch selects it. An object may also name a shard beyond ``--shards`` once the count was
lowered. The assigner watches exactly those (``opbroker.io/shard notin (0, …, M-1)``: objects without the label
match too) and writes the label :func:`opbroker.api.shards.shard_of` gives, guarded by the resourceVersion it read;
the object's shard then sees it arrive — after the object's rendered objects labelled as it was (none, made before the
controller was sharded, or the removed shard's), moved along first (``handover.move_along``). A label naming a removed
shard whose Lease is still held is left until the Lease is free (that replica, running with a larger count, still
handles it; :func:`.core.assignment`).
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Sequence
from typing import ClassVar

from opbroker.api.conventions import resource_name
from opbroker.api.meta import ResourceRef
from opbroker.api.shards import Shards, label_of, lease_name
from opbroker.controller.core.views import BindingView
from opbroker.controller.kinds import BINDINGS, INSTANCES
from opbroker.controller.runtime.clock import Clock
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.kube import Kind, Kube
from opbroker.controller.runtime.leadership import LeaseRecord
from opbroker.controller.runtime.outcomes import DONE, Outcome, requeue
from opbroker.controller.shards.core import assignment, lease_held, relabelling
from opbroker.controller.shards.handover import Moving, move_along
from opbroker.kubeclient.wire import JsonBody, JsonObject, mapping_of, text_of

logger = logging.getLogger(__name__)

#: What moves along with an instance or binding the assigner places: its rendered objects and its registry, each with
#: the door that wrote them (``osb.reconciling.Deps.rendered_of``).
Rendered = Callable[[Kind, JsonObject], Sequence[Moving]]
LEASE_API = "coordination.k8s.io/v1"


class Assigner:
    """Labels one kind's unplaced objects (a reconciler: one key at a time, retried by the runtime's table)."""

    kind: ClassVar[str]
    resource: ClassVar[Kind]

    def __init__(
        self,
        kube: Kube,
        shards: Shards,
        *,
        namespace: str,
        lease: str,
        lease_seconds: float,
        clock: Clock,
        rendered: Rendered | None = None,
    ) -> None:
        self.kube = kube
        self.shards = shards
        self.rendered = rendered
        """What moves along with an object placed (``handover.move_along``): its rendered objects and their writer."""
        self.namespace = namespace
        """Where the shards' Leases are (the control plane's namespace)."""
        self.lease = lease
        """The Leases' base name (shard ``i``'s is ``<lease>-shard-<i>``)."""
        self.lease_seconds = lease_seconds
        """A Lease's length: an object of a removed shard whose Lease is held is looked at again this much later."""
        self.clock = clock

    def reconcile(self, key: Key) -> Outcome:
        body = self.kube.get_custom(self.resource, key.namespace, key.name, fresh=True)
        if body is None:
            return DONE
        meta = mapping_of(body.get("metadata"))
        label = label_of(mapping_of(meta.get("labels")))
        held = label is not None and label >= self.shards.count and self._lease_held(label)
        target = assignment(self.shards, label, key.namespace, self.instance_of(body), lease_held=held)
        if target is None:
            # A removed shard's, its Lease still held: look again once it may have lapsed.
            return requeue(self.lease_seconds) if held else DONE
        for writer, refs in self.rendered(self.resource, body) if self.rendered is not None else ():
            move_along(text_of(meta.get("uid")) or "", label, target, writer, refs)
        self.kube.patch_custom(self.resource, key.namespace, key.name, relabelling(meta.get("resourceVersion"), target))
        logger.info("%s %s/%s assigned to shard %d", self.resource.plural, key.namespace, key.name, target)
        return DONE

    def reread(self, key: Key) -> None:
        return None  # every read is fresh

    def instance_of(self, body: JsonObject) -> str:
        """The name of the instance whose shard ``body`` takes."""
        raise NotImplementedError

    def _lease_held(self, shard: int) -> bool:
        name = lease_name(self.lease, shard)
        lease = self.kube.get(ResourceRef(api_version=LEASE_API, kind="Lease", namespace=self.namespace, name=name))
        if lease is None:
            return False
        record = LeaseRecord.of(lease)
        return lease_held(record.holder, _micro_time(record.renew_time), record.duration_seconds, self.clock.now())

    def on_event(self, event_type: str, body: JsonBody) -> Key | None:
        """The key to queue for a watch event (None for a deletion: nothing to label)."""
        return None if event_type == "DELETED" else Key.of(self.kind, body)


class InstanceAssigner(Assigner):
    kind: ClassVar[str] = "shard-instance"
    resource: ClassVar[Kind] = INSTANCES

    def instance_of(self, body: JsonObject) -> str:
        return text_of(mapping_of(body.get("metadata")).get("name")) or ""


class BindingAssigner(Assigner):
    kind: ClassVar[str] = "shard-binding"
    resource: ClassVar[Kind] = BINDINGS

    def instance_of(self, body: JsonObject) -> str:
        return resource_name(BindingView.of(body).instance_ref)


def _micro_time(value: str | None) -> datetime.datetime | None:
    """A Lease's renewTime (RFC 3339 with microseconds); None when absent or unreadable."""
    if not value:
        return None
    try:
        return datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
