"""The in-memory catalog: the SFServices and SFPlans of the trusted namespaces, by OSB id.

Fed by watch events, read by the reconcilers. Plans are kept both as raw wire dicts (what templates
see as ``plan``) and as validated models (what the renderer and the decisions use). A plan that does not
validate is remembered as invalid with the reason, so instances of it fail with that reason instead of
"plan not found".

Trust (the DESIGN's trust model): only objects of the trusted namespaces (``ControllerSettings.
trusted_namespaces``: the control-plane namespace unless a list is configured) ever enter; a tenant's
SFPlan claiming a production plan's id changes nothing. Objects are held by their namespace and name, so an
id is never "last writer wins": when two trusted objects declare one id, neither is served — :meth:`plan`
and :meth:`service` answer an entry without a model whose problem names both, and the entry reconciler
reports each of them (``DuplicateId``) until one goes; then the other serves again.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from pydantic import ValidationError

from opbroker.api import SFPlan, SFService
from opbroker.api.conventions import DEFAULT_NAMESPACE, catalog_id
from opbroker.api.errors import field_errors
from opbroker.controller.core.views import EntryView, Meta
from opbroker.controller.runtime.concurrency import Lock
from opbroker.kubeclient.wire import JsonObject


def spec_hash(spec: object) -> str:
    """A stable hash of a spec (canonical JSON), used to notice plan changes."""
    canonical = json.dumps(spec, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class PlanEntry:
    body: JsonObject
    """The SFPlan as read: what templates see as ``plan`` (never written to)."""
    model: SFPlan | None
    problem: str | None
    hash: str
    duplicates: tuple[str, ...] = ()
    """``namespace/name`` of every trusted SFPlan (or, for a plan whose service id is declared twice, SFService)
    declaring the id, when more than one does: then the entry is not served (no model)."""

    @functools.cached_property
    def view(self) -> EntryView:
        """The plan's typed view (its metadata, ids), built at its first use and kept with the entry."""
        return EntryView.of(self.body)


@dataclass(frozen=True)
class ServiceEntry:
    body: JsonObject
    model: SFService | None
    problem: str | None
    duplicates: tuple[str, ...] = ()
    """As :attr:`PlanEntry.duplicates`."""

    @functools.cached_property
    def view(self) -> EntryView:
        return EntryView.of(self.body)


ObjectKey = tuple[str, str]
"""(namespace, name) of a catalog object."""

E = TypeVar("E", PlanEntry, ServiceEntry)


def ref(key: ObjectKey) -> str:
    return f"{key[0]}/{key[1]}"


def duplicate_problem(kind: str, osb_id: str, holders: Iterable[ObjectKey]) -> str:
    """What an instance of a duplicated id is told (and the catalog entries' condition says)."""
    names = ", ".join(ref(k) for k in sorted(holders))
    return (
        f"the {kind} id {osb_id!r} is declared by more than one {'SFPlan' if kind == 'plan' else 'SFService'} "
        f"({names}); none of them is served until only one declares it"
    )


class _Held(Generic[E]):
    """Entries by object and the objects declaring each id (not thread-safe: the catalog's lock guards it)."""

    def __init__(self) -> None:
        self.entries: dict[ObjectKey, tuple[str, E]] = {}
        self.ids: dict[str, set[ObjectKey]] = {}

    def put(self, key: ObjectKey, osb_id: str, entry: E) -> None:
        self.drop(key)
        self.entries[key] = (osb_id, entry)
        self.ids.setdefault(osb_id, set()).add(key)

    def drop(self, key: ObjectKey) -> None:
        held = self.entries.pop(key, None)
        if held is None:
            return
        holders = self.ids.get(held[0])
        if holders is not None:
            holders.discard(key)
            if not holders:
                del self.ids[held[0]]

    def holders(self, osb_id: str) -> list[ObjectKey]:
        return sorted(self.ids.get(osb_id, ()))

    def id_of(self, key: ObjectKey) -> str | None:
        held = self.entries.get(key)
        return held[0] if held is not None else None


class Catalog:
    """Thread-safe map of OSB ids to the plan/service bodies of the trusted namespaces."""

    def __init__(self, trusted: Iterable[str] = (DEFAULT_NAMESPACE,)) -> None:
        self.trusted = frozenset(trusted)
        self._lock = Lock()
        self._plans: _Held[PlanEntry] = _Held()
        self._services: _Held[ServiceEntry] = _Held()

    @staticmethod
    def key(body: JsonObject) -> ObjectKey:
        meta = Meta.of(body.get("metadata"))
        return meta.namespace, meta.name

    def trusts(self, body: JsonObject) -> bool:
        """Whether ``body`` lives in a trusted namespace (only such objects enter the catalog)."""
        return Meta.of(body.get("metadata")).namespace in self.trusted

    # -- feeding -------------------------------------------------------------------------------------

    def upsert_plan(self, body: JsonObject) -> PlanEntry:
        """The entry for ``body``; recorded only when it lives in a trusted namespace."""
        try:
            model: SFPlan | None = SFPlan.model_validate(body)
            problem = None
        except ValidationError as exc:
            model, problem = None, "; ".join(field_errors(exc))
        entry = PlanEntry(body=body, model=model, problem=problem, hash=spec_hash(body.get("spec") or {}))
        if self.trusts(body):
            with self._lock:
                self._plans.put(self.key(body), catalog_id(body), entry)
        return entry

    def remove_plan(self, body: JsonObject) -> None:
        with self._lock:
            self._plans.drop(self.key(body))

    def upsert_service(self, body: JsonObject) -> ServiceEntry:
        """The entry for ``body``; recorded only when it lives in a trusted namespace."""
        try:
            model: SFService | None = SFService.model_validate(body)
            problem = None
        except ValidationError as exc:
            model, problem = None, "; ".join(field_errors(exc))
        entry = ServiceEntry(body=body, model=model, problem=problem)
        if self.trusts(body):
            with self._lock:
                self._services.put(self.key(body), catalog_id(body), entry)
        return entry

    def remove_service(self, body: JsonObject) -> None:
        with self._lock:
            self._services.drop(self.key(body))

    def seed_plan(self, body: JsonObject) -> bool:
        """Record ``body`` unless its object is known already (a watch event may have delivered a newer
        version first); True when recorded."""
        with self._lock:
            known = self.key(body) in self._plans.entries
        if known or not self.trusts(body):
            return False
        self.upsert_plan(body)
        return True

    def seed_service(self, body: JsonObject) -> bool:
        """As :meth:`seed_plan`."""
        with self._lock:
            known = self.key(body) in self._services.entries
        if known or not self.trusts(body):
            return False
        self.upsert_service(body)
        return True

    # -- reading -------------------------------------------------------------------------------------

    def plan(self, plan_id: str) -> PlanEntry | None:
        """The plan serving ``plan_id``: None when no trusted SFPlan declares it; an entry without a model
        (its problem says why) when several do, or when its service id is declared by several SFServices."""
        with self._lock:
            holders = self._plans.holders(plan_id)
            if not holders:
                return None
            first = self._plans.entries[holders[0]][1]
            if len(holders) > 1:
                duplicates = tuple(ref(k) for k in holders)
                problem = duplicate_problem("plan", plan_id, holders)
                return PlanEntry(first.body, None, problem, spec_hash({"duplicates": duplicates}), duplicates)
            service_id = first.view.service_id
            services = self._services.holders(service_id) if service_id else []
        if len(services) > 1:
            duplicates = tuple(ref(k) for k in services)
            problem = duplicate_problem("service", str(service_id), services)
            return PlanEntry(first.body, None, problem, spec_hash({"duplicates": duplicates}), duplicates)
        return first

    def service(self, service_id: str) -> ServiceEntry | None:
        """The service serving ``service_id``: None when no trusted SFService declares it; an entry without a
        model when several do."""
        with self._lock:
            holders = self._services.holders(service_id)
            if not holders:
                return None
            first = self._services.entries[holders[0]][1]
        if len(holders) > 1:
            duplicates = tuple(ref(k) for k in holders)
            return ServiceEntry(first.body, None, duplicate_problem("service", service_id, holders), duplicates)
        return first

    def plan_holders(self, plan_id: str) -> list[ObjectKey]:
        """Every trusted SFPlan declaring ``plan_id`` (more than one: none is served)."""
        with self._lock:
            return self._plans.holders(plan_id)

    def service_holders(self, service_id: str) -> list[ObjectKey]:
        with self._lock:
            return self._services.holders(service_id)

    def plan_views(self, plan_id: str) -> list[EntryView]:
        """Every trusted SFPlan declaring ``plan_id``, as read."""
        with self._lock:
            return [self._plans.entries[k][1].view for k in self._plans.holders(plan_id)]

    def plan_id_of(self, body: JsonObject) -> str | None:
        """The id the catalog holds ``body``'s object under (None: not held)."""
        with self._lock:
            return self._plans.id_of(self.key(body))

    def service_id_of(self, body: JsonObject) -> str | None:
        with self._lock:
            return self._services.id_of(self.key(body))

    def plan_ids_of_service(self, service_id: str) -> list[str]:
        """The ids of every trusted SFPlan whose ``serviceId`` is ``service_id``."""
        with self._lock:
            return sorted(
                {plan_id for plan_id, entry in self._plans.entries.values() if entry.view.service_id == service_id}
            )

    def plan_views_of_service(self, service_id: str) -> list[EntryView]:
        """Every trusted SFPlan whose ``serviceId`` is ``service_id``, as read."""
        with self._lock:
            return [entry.view for _, entry in self._plans.entries.values() if entry.view.service_id == service_id]

    def service_views(self, service_id: str) -> list[EntryView]:
        """Every trusted SFService declaring ``service_id``, as read."""
        with self._lock:
            return [self._services.entries[k][1].view for k in self._services.holders(service_id)]

    def plans(self) -> Iterable[PlanEntry]:
        """Every plan served (an id declared twice is not)."""
        with self._lock:
            ids = [plan_id for plan_id, holders in self._plans.ids.items() if len(holders) == 1]
        served = (self.plan(plan_id) for plan_id in ids)
        return [entry for entry in served if entry is not None and not entry.duplicates]
