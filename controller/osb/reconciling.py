"""What the instance and binding reconcilers share: the dependencies, where placement comes in (multi-cluster: its
facts, read in observe, and its effects), the apply memory (our own writes are noted in the runtime's
:class:`~opbroker.controller.runtime.executor.OwnWrites`)."""

from __future__ import annotations

import datetime
import functools
import logging
from collections.abc import Callable, Hashable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Protocol

from opbroker.api.conventions import resource_name
from opbroker.api.meta import ResourceRef
from opbroker.controller.budgets import Budgeting
from opbroker.controller.catalog.catalog import Catalog
from opbroker.controller.core.digests import DigestKey
from opbroker.controller.core.views import BindingView, InstanceView, ObjectView
from opbroker.controller.kinds import BINDINGS, INSTANCES
from opbroker.controller.multicluster.core.placement_plan import PlacementFacts
from opbroker.controller.osb import identities, registries
from opbroker.controller.osb.registries import Place, RegistryCache
from opbroker.controller.runtime.clock import SYSTEM, Clock
from opbroker.controller.runtime.executor import OwnWrites
from opbroker.controller.runtime.kube import Kind, Kube
from opbroker.controller.runtime.sources import ObjectKey, SourceIndex, SourceWatchers
from opbroker.controller.settings import ControllerSettings
from opbroker.controller.shards import handover
from opbroker.kubeclient.wire import JsonObject
from opbroker.rendering import Renderer

logger = logging.getLogger(__name__)


class Placement(Protocol):
    """Where an instance or binding is reconciled (multi-cluster), in the three parts of every kind.

    Observe: the instance and binding reconcilers read the :class:`PlacementFacts` of the object as read (None:
    nothing to place, one cluster); their pure plans branch on them first (``instance_plan.placed``,
    ``binding_plan.placed``). Act: the kind's one executor performs placement's own actions through
    :meth:`effects`, inside :meth:`performing`.
    """

    def instance(self, instance: InstanceView) -> PlacementFacts | None: ...

    def binding(self, binding: BindingView, instance: InstanceView | None) -> PlacementFacts | None:
        """``instance``: the binding's instance as its reconciler read it (None: not found)."""
        ...

    def effects(self, kind: Kind) -> Mapping[type, Callable[..., None]]:
        """The effects of placement's own actions on the objects of ``kind`` (instances or bindings)."""
        ...

    def performing(self, facts: PlacementFacts) -> AbstractContextManager[None]:
        """Around the act of placement's actions (a failed call to a sister makes it suspect, and retries)."""
        ...


class LocalPlacement:
    """Single cluster: everything is reconciled here; nothing is read for it and nothing performed."""

    def instance(self, instance: InstanceView) -> PlacementFacts | None:
        return None

    def binding(self, binding: BindingView, instance: InstanceView | None) -> PlacementFacts | None:
        return None

    def effects(self, kind: Kind) -> Mapping[type, Callable[..., None]]:
        return {}

    def performing(self, facts: PlacementFacts) -> AbstractContextManager[None]:
        return nullcontext()


LOCAL = LocalPlacement()

#: How long a check (a settled instance's, a bound binding's) waits for the first listing of the kinds it reads,
#: after a restart: until then the store does not know them, and each check would read them with GETs — a race
#: of the reconciles against the listings that cost ~900 GETs in a restart over 15 000 objects.
LISTING_WAIT_SECONDS = 30.0


@dataclass(frozen=True)
class Deps:
    kube: Kube
    catalog: Catalog
    renderer: Renderer
    settings: ControllerSettings
    index: SourceIndex
    watchers: SourceWatchers
    placement: Placement = LOCAL
    own_writes: OwnWrites = field(default_factory=lambda: OwnWrites())
    registries: RegistryCache = field(default_factory=RegistryCache)
    budgets: Budgeting = field(default_factory=Budgeting)
    clock: Clock = SYSTEM
    """The runtime's clock: the facts' ``now`` and day two's drift windows read it (tests pass a fake one)."""
    digest_key: DigestKey = field(default_factory=DigestKey)
    """What check digests are made with (``core.digests``): the shared key once the controller's start loaded it."""

    def door(self, actor: str | None) -> Kube:
        """The door a plan's work goes through: acting as its account (``identities.plan_user``) — what the plan's
        ServiceAccount may do, no more — or the controller's own when it has none (no plan, no impersonation)."""
        return self.kube if actor is None else self.kube.acting_as(actor)

    def keeps(self, kind: Kind, body: JsonObject, instance: str) -> bool:
        """Whether this shard handles ``body`` (:func:`opbroker.controller.shards.handover.keeps`; unsharded: yes),
        its rendered objects moved along when it is handed over."""
        rendered = functools.partial(self.rendered_of, kind, body)
        if handover.keeps(self.kube, self.settings.shards, kind, body, instance, rendered):
            return True
        # Another shard's now, which may rewrite its registry: a copy kept here would be stale if it came back.
        self.registries.forget(self.registry_of(kind, body))
        return False

    def registry_of(self, kind: Kind, body: JsonObject) -> Place:
        """Where the registry of an instance or a binding is kept."""
        key_kind = "binding" if kind is BINDINGS else "instance"
        return registries.place(ObjectView.of(body).meta, kind=key_kind, namespace=self.settings.registries_namespace)

    def rendered_of(self, kind: Kind, body: JsonObject) -> Sequence[handover.Moving]:
        """What moves along with an instance or a binding to another shard (issue 46): the objects its status records,
        with the door of its plan's account, which wrote them (``identities``; the controller's own without a plan,
        or without impersonation), and its registry, with the controller's own door (the registry namespace)."""
        if kind is BINDINGS:
            binding = BindingView.of(body)
            found = self.kube.get_custom(INSTANCES, binding.meta.namespace, resource_name(binding.instance_ref))
            plan_id = InstanceView.of(found).plan_id if found is not None else binding.plan_id
            refs = binding.status.resources
        else:
            instance = InstanceView.of(body)
            refs = instance.status.resources
            plan_id = instance.plan_id
        entry = self.catalog.plan(plan_id)
        actor = identities.plan_user(entry.body, self.settings) if entry is not None else None
        where = self.registry_of(kind, body)
        registry = ResourceRef(api_version="v1", kind="Secret", namespace=where.namespace, name=where.name)
        return (
            (self.door(actor), refs),
            (self.kube, (registry,)),
        )


@dataclass(frozen=True)
class DayTwo:
    """What the controller remembers of a settled instance's checks (issue 43): what the last one read and the
    digest of those objects' versions when it found everything as declared, when a live-status change was last
    written (the debounce), and when each object was set back (the fight bound). Lost on a restart: the first check
    after one renders and compares again, and the bounds start afresh."""

    refs: tuple[ResourceRef, ...] = ()
    versions: tuple[str | None, ...] = ()
    """The versions of ``refs`` when it was last found as declared (empty: not since the last change)."""
    shapes: Mapping[ObjectKey, str] = field(default_factory=dict)
    """The rendered objects' shapes (``core.drift.shape``) when last found as declared."""
    digest: str = ""
    last_live_write: datetime.datetime | None = None
    corrections: Mapping[ObjectKey, tuple[datetime.datetime, ...]] = field(default_factory=dict)


class AppliedMemory:
    """Applies whose status record waits for the operation's outcome, kept in memory.

    Recording an apply (resources, appliedSpec, observedGeneration) in its own status write while the
    operator is still working would cost one write per operation; instead the record rides along with the
    final state. Until then this memory stops later reconciles from applying again. It is lost on a
    restart or failover, and then the apply is simply repeated, which server-side apply makes harmless.
    Only the queue's single worker for a key touches its entry.
    """

    def __init__(self) -> None:
        self._records: dict[Hashable, tuple[Any, Any, JsonObject]] = {}

    def remember(self, key: Hashable, version: tuple[Any, Any], record: JsonObject) -> None:
        self._records[key] = (*version, record)

    def recall(self, key: Hashable, version: tuple[Any, Any]) -> JsonObject | None:
        found = self._records.get(key)
        if found is None or (found[0], found[1]) != version:
            return None
        return found[2]

    def forget(self, key: Hashable) -> None:
        self._records.pop(key, None)
