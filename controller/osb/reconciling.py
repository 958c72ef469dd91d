"""What the instance and binding reconcilers share: the dependencies, the placement hook, the apply memory (our own
writes are noted in the runtime's :class:`~opbroker.controller.runtime.executor.OwnWrites`)."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from opbroker.api.meta import ResourceRef
from opbroker.controller.budgets import Budgeting
from opbroker.controller.catalog.catalog import Catalog
from opbroker.controller.osb.registries import RegistryCache
from opbroker.controller.runtime.clock import SYSTEM, Clock
from opbroker.controller.runtime.executor import OwnWrites
from opbroker.controller.runtime.kube import Kube
from opbroker.controller.runtime.outcomes import Outcome
from opbroker.controller.runtime.sources import ObjectKey, SourceIndex, SourceWatchers
from opbroker.controller.settings import ControllerSettings
from opbroker.kubeclient.wire import JsonObject
from opbroker.rendering import Renderer

logger = logging.getLogger(__name__)


class Placement(Protocol):
    """Where an instance or binding is reconciled: consulted first by the reconcilers.

    Each method returns None when the object is reconciled right here, or the queue's outcome when the
    placement took care of it (multi-cluster: scheduled, handed to a sister cluster, mirrored back).
    """

    def instance(self, instance: JsonObject) -> Outcome | None: ...

    def binding(self, binding: JsonObject) -> Outcome | None: ...


class LocalPlacement:
    """Single cluster: everything is reconciled here."""

    def instance(self, instance: JsonObject) -> Outcome | None:
        return None

    def binding(self, binding: JsonObject) -> Outcome | None:
        return None


LOCAL = LocalPlacement()


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
