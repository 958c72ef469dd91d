"""The controller process: the informers deliver watch events, the one runtime runs level-triggered reconciles.

The informers (:mod:`opbroker.controller.runtime.informers`) list and watch SFService, SFPlan, SFServiceInstance and
SFServiceBinding, and the claims, multi-cluster and Service Catalog subsystems add their own watches;
:mod:`.running` runs the process (its event loop, signals, the Lease). SFServices and SFPlans are watched
cluster-wide, but only those of the trusted namespaces enter the catalog; any other is queued only to be
warned about (see :mod:`opbroker.controller.catalog.catalog`). Event handlers do nothing but
update the in-memory catalog and indexes and enqueue keys on the :class:`~opbroker.controller.runtime.Runtime`;
nothing is written for an event (no progress annotations).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
from collections.abc import Sequence
from typing import Any, NamedTuple

from kubernetes import client

from opbroker.api.conventions import catalog_id, resource_name
from opbroker.api.meta import ResourceRef
from opbroker.api.rbac import ONBOARDER_ACCOUNT
from opbroker.api.shards import Shards
from opbroker.controller.budgets import Budgeting
from opbroker.controller.catalog import admin_requests
from opbroker.controller.catalog.catalog import Catalog, PlanEntry
from opbroker.controller.catalog.catalog_entries import PlanEntryReconciler, ServiceEntryReconciler
from opbroker.controller.claims.handlers import Claims
from opbroker.controller.core import decisions
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.views import EntryView, EventView
from opbroker.controller.kinds import BINDINGS, INSTANCES, PLANS, SERVICES
from opbroker.controller.multicluster.runtime import MultiCluster
from opbroker.controller.onboarding import NAMESPACES, NamespaceOnboarder
from opbroker.controller.osb import digest_key, identities, registries, registry_sweep
from opbroker.controller.osb.bindings import BindingReconciler
from opbroker.controller.osb.instances import InstanceReconciler
from opbroker.controller.osb.reconciling import Deps
from opbroker.controller.runtime import metrics, resync, trim
from opbroker.controller.runtime.clock import SYSTEM
from opbroker.controller.runtime.executor import OwnWrites
from opbroker.controller.runtime.informers import Informers, StreamKey
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.kube import SECRETS, Kind, Kube
from opbroker.controller.runtime.memory import Dependents, PerKey
from opbroker.controller.runtime.outcomes import DONE
from opbroker.controller.runtime.runner import Runtime
from opbroker.controller.runtime.sources import Portion, SourceIndex, SourceWatchers
from opbroker.controller.runtime.store import UNKNOWN, ObjectStore
from opbroker.controller.runtime.watches import Watch
from opbroker.controller.servicecatalog.handlers import ServiceCatalog
from opbroker.controller.settings import ControllerSettings
from opbroker.controller.shards.assigner import Assigner, BindingAssigner, InstanceAssigner
from opbroker.kubeclient.wire import JsonBody, mapping_of
from opbroker.rendering import HttpFetcher, Renderer

logger = logging.getLogger(__name__)


class Controller:
    """Wires the catalog, the reconcilers and the one runtime; :meth:`start` and :meth:`stop` run on the process's
    event loop (:mod:`.running`)."""

    def __init__(self, api_client: client.ApiClient, settings: ControllerSettings) -> None:
        self.settings = settings
        exempt = settings.budget_exempt
        cache_bytes = settings.budgets.cached_bytes or None
        self.kube = Kube(api_client, store=ObjectStore(namespace_bytes=cache_bytes, exempt=exempt))
        self.budgets = Budgeting(settings.budgets, store=self.kube.store, exempt=exempt)
        metrics.report_store(self.kube.store.census)
        # The informers keep our instances and bindings in the store (complete once listed): reconciles read
        # them from there.
        self.kube.store.feed(INSTANCES.store_key)
        self.kube.store.feed(BINDINGS.store_key)
        self.informers: Informers | None = None
        self.catalog = Catalog(settings.trusted_namespaces)
        # The one clock: the runtime and its queue read time from it (tests of them pass a fake one).
        self.runtime = Runtime(
            workers=settings.total_workers,
            namespace_workers=settings.namespace_workers,
            uncapped_namespaces=settings.budget_exempt,
            clock=SYSTEM,
            policies=settings.policies,
        )
        memories = self.runtime.memories
        self.index = memories.keep(SourceIndex())
        # Secrets by metadata only: the cluster's other Secrets cost a key and a version each, not their
        # bodies; our own are listed with theirs, those reconciles read are fetched on demand (runtime.sources).
        # Their events are told on the loop: the loop-side enqueue.
        self.watchers = SourceWatchers(
            self.kube,
            self.index,
            self.runtime.enqueue,
            watch_seconds=settings.timeouts.watch,
            metadata_only=[SECRETS],
            own_bodies={SECRETS: (settings.registries_namespace, own_registries(settings.shards))},
            portion=source_portion(settings.shards),
            retry=settings.policies.watches,
            clock=self.runtime.clock,
        )
        self.renderer = Renderer(fetcher=HttpFetcher(settings.template_fetch))
        deps = Deps(
            self.kube,
            self.catalog,
            self.renderer,
            settings,
            self.index,
            self.watchers,
            own_writes=memories.keep(OwnWrites()),
            budgets=self.budgets,
            clock=self.runtime.clock,
        )
        self.own_writes = deps.own_writes
        self.digest_key = deps.digest_key
        self.multicluster = MultiCluster(deps, self.runtime) if settings.multicluster else None
        if self.multicluster is not None:
            deps = dataclasses.replace(deps, placement=self.multicluster.placement)
        self.instances = InstanceReconciler(deps, memories)
        self.bindings = BindingReconciler(deps, memories)
        for reconciler in (
            self.instances,
            self.bindings,
            PlanEntryReconciler(
                self.kube,
                self.renderer,
                self.catalog,
                policies=self.runtime.policies,
                clock=self.runtime.clock,
                hold_unused=settings.shards.sharded,
            ),
            ServiceEntryReconciler(
                self.kube, self.renderer, self.catalog, policies=self.runtime.policies, clock=self.runtime.clock
            ),
        ):
            self.runtime.register(reconciler)
        shards = settings.shards
        self.assigners: tuple[Assigner, ...] = ()
        if shards.sharded and shards.coordinator:  # shard 0 labels what no shard handles (issue 46)
            self.assigners = tuple(
                assigner(
                    self.kube,
                    shards,
                    namespace=settings.namespace,
                    lease=settings.lease_name,
                    lease_seconds=settings.lease_seconds,
                    clock=self.runtime.clock,
                    rendered=deps.rendered_of,
                )
                for assigner in (InstanceAssigner, BindingAssigner)
            )
        for assigner in self.assigners:
            self.runtime.register(assigner)
        self.claims = Claims(self.kube, settings.claims, self.catalog, self.runtime, self.namespace_door)
        self.service_catalog = ServiceCatalog(
            self.kube,
            self.runtime,
            control_plane=settings.namespace,
            max_operation_seconds=settings.max_operation_seconds,
            writer=self.namespace_door,
            budgets=self.budgets,
            resync_seconds=settings.resync_seconds,
        )
        self._plan_members: Dependents[str] = memories.keep(Dependents())
        self._instance_bindings: Dependents[Key] = memories.keep(Dependents())
        self._fingerprints: PerKey[tuple[Any, ...]] = memories.keep(PerKey())
        self._plan_reads: PerKey[PlanRead] = memories.keep(PerKey())
        self._trimmer: asyncio.Task[None] | None = None
        self._housekeeper: asyncio.Task[None] | None = None
        self._resync: asyncio.Task[None] | None = None
        self._admin: admin_requests.AdminRequests | None = None
        self.onboarder = (
            NamespaceOnboarder(
                self.kube.acting_as(f"system:serviceaccount:{settings.namespace}:{ONBOARDER_ACCOUNT}"),
                settings.namespace,
                settings.onboard_namespace_selector,
                (settings.default_plan_service_account,),
                clock=self.runtime.clock,
            )
            if settings.onboard_namespace_selector is not None and settings.shards.coordinator
            else None
        )

    def namespace_door(self, namespace: str) -> Kube:
        """Where writes into a consumer's namespace go for no plan: its ``opbroker`` account (issue 24)."""
        return self.kube.acting_as(identities.namespace_user(namespace, self.settings))

    # -- lifecycle -----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start on the loop. What start-up reads from the API is read in the runtime's pool, never on the loop: the
        loop races the lease's renew deadline, and a read hanging on it (an API server that stopped answering
        mid-start-up: 40 s of dials) kept a leader acting past that deadline."""
        await asyncio.to_thread(self._read_before_start)
        self.runtime.start()
        self.watchers.start(asyncio.get_running_loop())
        coordinator = self.settings.shards.coordinator
        if coordinator:
            # One Secret watch for everyone: the claims' events and the store's Secret versions (the plans' sources).
            self.watchers.subscribe(SECRETS, lambda _event_type, secret: self.claims.on_secret(secret))
            self.watchers.subscribe(SECRETS, lambda _event_type, secret: self.service_catalog.on_secret(secret))
        else:
            # Every shard's registries come from its own Secret watch (their bodies listed at its start): without it
            # each new instance's registry was a GET 404, and a restarted shard read every registry with a GET.
            self.watchers.ensure([SECRETS])
        runtime = self.runtime
        self._trimmer = asyncio.get_running_loop().create_task(
            trim.trim_when_settled(
                lambda: runtime.reconciles,
                lambda: runtime.idle,
                every=runtime.policies.memory_trim.base,
                clock=runtime.clock,
            ),
            name="memory trim",
        )
        self._resync = asyncio.get_running_loop().create_task(
            resync.resync_forever(
                self._followed,
                self._stored_version,
                self._enqueue,
                period=self.settings.resync_seconds,
                clock=runtime.clock,
            ),
            name="day-two resync",
        )
        if coordinator:
            self._start_coordination()
        self.informers = Informers(
            self.kube.api_client,
            self.all_watches(),
            on_page=self._listed_page,
            on_listed=self._listed,
            on_lost=self._lost,
            watch_seconds=self.settings.timeouts.watch,
            retry=self.settings.policies.watches,
        )
        self.informers.start()

    def _start_coordination(self) -> None:
        """What is done once per control plane — by its one controller, or sharded by shard 0 (issue 46): registry
        housekeeping, multi-cluster, the admin API's requests, namespace onboarding, the assigner."""
        runtime = self.runtime
        self._housekeeper = asyncio.get_running_loop().create_task(
            registry_sweep.keep_house(
                self.kube,
                self.settings.registries_namespace,
                self.namespace_door,
                policies=runtime.policies,
                clock=runtime.clock,
            ),
            name="registry housekeeping",
        )
        if self.multicluster is not None:
            self.multicluster.start()
        # The admin API's previews and rollouts, written by the broker into the control-plane namespace.
        self._admin = admin_requests.AdminRequests(
            self.kube,
            namespace=self.settings.namespace,
            registry_namespace=self.settings.registries_namespace,
            plan_user=lambda plan: identities.plan_user(plan, self.settings),
            renderer=lambda: self.renderer,
            clock=runtime.clock,
            policies=runtime.policies,
        )
        self._admin.start()
        if self.onboarder is not None:  # Namespaces: a core kind, watched like Secrets (the informers take none)
            self.onboarder.start()
            self.watchers.subscribe(NAMESPACES, self.onboarder.on_namespace)

    def _followed(self) -> list[resync.Followed]:
        """The settled instances the resync sweeps: each with what its last check read, and the versions read."""
        return [
            resync.Followed(key, memo.refs, memo.versions) for key, memo in self.instances.day_two.items() if memo.refs
        ]

    def _stored_version(self, ref: ResourceRef) -> object:
        """An object's version as the store holds it (None: known not to exist; ``resync.Unknown``: not held)."""
        found = self.kube.store.version_of((ref.api_version, ref.kind), ref.namespace, ref.name)
        if found is UNKNOWN:
            return resync.Unknown
        return None if found is None else str(found)

    def _stored(self, stream: StreamKey) -> Kind | None:
        """The kind the store keeps from ``stream``: our instances' and bindings' (this shard's, sharded)."""
        for kind in (INSTANCES, BINDINGS):
            if stream == (kind.api_version, kind.plural, self.settings.shards.selector):
                return kind
        return None

    def _listed_page(self, stream: StreamKey, objects: Sequence[JsonBody]) -> None:
        """A page of a listing of one of our kinds: held in the store before its events are handled."""
        kind = self._stored(stream)
        if kind is not None:
            self.kube.store.hold_page(kind.store_key, objects)

    def _listed(self, stream: StreamKey, listed: frozenset[tuple[str, str]]) -> None:
        """A whole listing of one of our kinds: its store type is complete (absent means absent) — unless sharded:
        then it holds one shard's, and an object it lacks may be another shard's (a binding's instance read while
        the two move, the coordinator's reads of any instance), so such a read goes to the API."""
        kind = self._stored(stream)
        if kind is not None:
            self.kube.store.complete(kind.store_key, listed, whole=not self.settings.shards.sharded)

    def _lost(self, stream: StreamKey) -> None:
        """A stream broke off: events may be missed until it is listed again, so reads go to the API."""
        kind = self._stored(stream)
        if kind is not None:
            self.kube.store.forget_type(kind.store_key)

    def _read_before_start(self) -> None:
        """Start-up's blocking reads: the catalog, the digest key (a digest recorded in a status is trusted only once
        the shared key is in), and the discovery of the core kinds subscribed to below (then answered from memory on
        the loop)."""
        self.load_catalog()
        digest_key.load(self.digest_key, self.kube, self.settings.registries_namespace)
        for kind in (SECRETS, NAMESPACES):
            self.kube.served.resource(*kind)

    def load_catalog(self) -> None:
        """Read every SFService and SFPlan of the trusted namespaces once, before the first reconcile.

        Each kind is watched in a stream of its own, so after a (re)start an instance's event can arrive
        before its plan's; reconciled then, the instance would be failed with "plan not in the catalog"
        (the reliability suite's controller kills found three). The watches keep the catalog current after.
        """
        for namespace in self.settings.trusted_namespaces:
            for body in self.kube.list_custom(SERVICES, namespace):
                self.catalog.upsert_service(body)
            for body in self.kube.list_custom(PLANS, namespace):
                self.catalog.upsert_plan(body)

    async def stop(self, drain: float = 0.0) -> None:
        """Stop watching and take no more work; reconciles running now get up to ``drain`` seconds to finish."""
        if self.informers is not None:
            self.informers.stop()
        if self._admin is not None:
            self._admin.stop()
        if self.onboarder is not None:
            self.onboarder.stop()
        self.service_catalog.stop_webhook()
        for task in (self._trimmer, self._housekeeper, self._resync):
            if task is not None:
                task.cancel()
        self.watchers.stop()
        self.claims.stop()
        if self.informers is not None:
            await self.informers.wait()
        await self.watchers.wait()
        if self.multicluster is not None:
            await self.multicluster.stop()
        await self.runtime.stop(drain)

    # -- events --------------------------------------------------------------------------------------

    def watches(self) -> list[Watch]:
        """The catalog entries, instances and bindings: what the controller's own reconcilers watch."""
        shards = self.settings.shards
        selector = shards.selector  # sharded: this shard's instances and bindings only
        unplaced = [
            Watch.of(
                assigner.resource,
                functools.partial(self._on_unplaced, assigner),
                id=f"unplaced-{assigner.resource.plural}",
                label_selector=shards.unplaced_selector,
            )
            for assigner in self.assigners
        ]
        return [
            Watch.of(SERVICES, self.on_service, id="sfservices"),
            Watch.of(PLANS, self.on_plan, id="sfplans"),
            Watch.of(INSTANCES, self.on_instance, id="sfserviceinstances", label_selector=selector),
            Watch.of(BINDINGS, self.on_binding, id="sfservicebindings", label_selector=selector),
            *unplaced,
        ]

    def _on_unplaced(self, assigner: Assigner, event_type: str, body: JsonBody) -> None:
        """An instance or binding no shard handles (sharded, shard 0): queued for the assigner to label."""
        key = assigner.on_event(event_type, body)
        if key is not None:
            self.runtime.enqueue(key)

    def all_watches(self) -> list[Watch]:
        """Every subsystem's watches: the controller's, the clusters' (multi-cluster), the claims', the Service
        Catalog's — the last two on the coordinator only (sharded, shard 0: claims and the Service Catalog's objects
        are not sharded)."""
        clusters = self.multicluster.watches() if self.multicluster is not None else []
        if not self.settings.shards.coordinator:
            return [*self.watches(), *clusters]
        return [*self.watches(), *clusters, *self.claims.watches(), *self.service_catalog.watches()]

    def _enqueue(self, key: Key) -> None:
        if key.kind in COORDINATED and not self.settings.shards.coordinator:
            return  # the catalog's entries are reconciled by shard 0 (their events reach every shard)
        self.runtime.enqueue(key)

    def on_service(self, event_type: str, body: JsonBody) -> None:
        key = Key.of("service", body)
        if not self.catalog.trusts(body):
            self._enqueue(key)  # a tenant's: never in the catalog; its reconcile warns (once per generation)
            return
        previous = self.catalog.service_id_of(body)
        if event_type == "DELETED":
            self.catalog.remove_service(body)
        else:
            self._enqueue_unreported("service", self.catalog.upsert_service(body).view)
        if self.multicluster is not None:
            self.multicluster.on_catalog("sfservices", event_type, body)
        for service_id in {i for i in (previous, catalog_id(body)) if i}:
            self._enqueue_siblings("service", key, self.catalog.service_holders(service_id))
            for plan_id in self.catalog.plan_ids_of_service(service_id):  # served or not with the service
                for member in self._plan_members.of(plan_id):
                    self._enqueue(member)

    def _enqueue_siblings(self, kind: str, key: Key, holders: list[tuple[str, str]]) -> None:
        """Queue the other trusted objects declaring an id ``key``'s object declares or declared: whether
        they are duplicates changed with it."""
        for namespace, name in holders:
            if (namespace, name) != (key.namespace, key.name):
                self._enqueue(Key(kind, namespace, name))

    def _enqueue_unreported(self, kind: str, entry: EntryView) -> None:
        """Queue a catalog entry whose Ready condition does not yet speak of its current generation, or
        reports a duplicate id (which other objects decide: one may have gone while no controller ran)."""
        ready = entry.condition("Ready")
        duplicate = ready is not None and ready.reason == Reason.DUPLICATE_ID.value
        if ready is None or duplicate or entry.observed_generation != entry.meta.generation:
            self._enqueue(Key(kind, entry.meta.namespace, entry.meta.name))

    def on_plan(self, event_type: str, body: JsonBody) -> None:
        key = Key.of("plan", body)
        if not self.catalog.trusts(body):
            self._enqueue(key)  # a tenant's: never in the catalog; its reconcile warns (once per generation)
            return
        previous = self.catalog.plan_id_of(body)
        services = {p.service_id for p in self.catalog.plan_views(previous or "") if _key_of("plan", p) == key}
        planned: PlanEntry | None = None
        if event_type == "DELETED":
            services.add(EntryView.of(body).service_id)
            self.catalog.remove_plan(body)
        else:
            planned = self.catalog.upsert_plan(body)
            entry = planned.view
            services.add(entry.service_id)
            if entry.meta.deleting and entry.meta.held:
                self._enqueue(key)  # held by its instances: released once none is left
            else:
                self._enqueue_unreported("plan", entry)
        if self.multicluster is not None:
            self.multicluster.on_catalog("sfplans", event_type, body)
        if planned is None:  # deleted: its instances decide anew (they may wait for it, or hold it)
            before = self._plan_reads.forget(key)
            members_decide_anew, pause_moved = True, before is not None and before.paused
        else:
            read = what_instances_read(planned)
            before = self._plan_reads.put(key, read)
            members_decide_anew = before != read
            pause_moved = (before is not None and before.paused) != read.paused
        for plan_id in {i for i in (previous, catalog_id(body)) if i}:
            self._enqueue_siblings("plan", key, self.catalog.plan_holders(plan_id))
            if members_decide_anew:
                for member in self._plan_members.of(plan_id):
                    self._enqueue(member)
                    if pause_moved:  # a binding is paused by its plan too: told directly, not through its instance
                        for binding in self._instance_bindings.of(member):
                            self._enqueue(binding)
        for service_id in services:
            self._enqueue_guarded_services(service_id)

    def _enqueue_guarded_services(self, service_id: str) -> None:
        """Queue the services declaring ``service_id`` whose finalizer may change with a plan or an instance
        of it (issue 29): one not held yet (a new plan holds it), or one being deleted (it may now go)."""
        for service in self.catalog.service_views(service_id):
            if decisions.entry_needs_count(service.meta):
                self._enqueue(_key_of("service", service))

    def on_instance(self, event_type: str, body: JsonBody) -> None:
        key = Key.of("instance", body)
        if self.multicluster is not None:
            self.multicluster.on_instance(event_type, body)
        self._store(INSTANCES.store_key, event_type, body)
        seen = EventView.of(body)
        self.budgets.observe(key, None if event_type == "DELETED" else seen.state)
        if event_type == "DELETED":
            self.runtime.forget(key)
            metrics.observe_health(key, None)
            for plan in self.catalog.plan_views(seen.plan_id):
                if decisions.withdrawn(plan):
                    self._enqueue(_key_of("plan", plan))  # its deletion may have waited for this instance
            self._enqueue_guarded_services(seen.service_id)  # as may its service's
            return
        self._plan_members.link(seen.plan_id, key)
        if self._worth_a_reconcile(key, seen):
            self._enqueue(key)
        for plan in self.catalog.plan_views(seen.plan_id):
            if not plan.meta.held and not plan.meta.deleting:
                self._enqueue(_key_of("plan", plan))  # its reconciler holds it before this instance's first apply
        for binding in self._instance_bindings.of(key):
            self._enqueue(binding)
        metrics.observe_state("instance", key, seen.state or "none")

    def on_binding(self, event_type: str, body: JsonBody) -> None:
        key = Key.of("binding", body)
        seen = EventView.of(body)
        instance_key = Key("instance", key.namespace, resource_name(seen.instance_ref))
        self._store(BINDINGS.store_key, event_type, body)
        self.budgets.observe(key, None if event_type == "DELETED" else seen.state)
        if event_type == "DELETED":
            self.runtime.forget(key)
            self._enqueue(instance_key)  # a deprovision may have been waiting for this binding to go
            metrics.observe_state("binding", key, None)
            return
        self._instance_bindings.link(instance_key, key)
        if self._worth_a_reconcile(key, seen):
            self._enqueue(key)
        metrics.observe_state("binding", key, seen.state or "none")

    def _store(self, type_key: tuple[str, str], event_type: str, body: JsonBody) -> None:
        """Keep the store current — before anything is enqueued, so a reconcile never reads older."""
        if event_type == "DELETED":
            self.kube.store.remove(type_key, body)
        else:
            self.kube.store.put(type_key, body)

    def _worth_a_reconcile(self, key: Key, seen: EventView) -> bool:
        """False for events that change nothing a reconcile decides on.

        Our own writes (their reconcile already decided what comes next), and changes that leave the spec
        generation, the requested state, deletion, our finalizer and the pause annotation as they were — such as
        the broker recording ``lastOperation`` after the controller had already started (:attr:`EventView.fingerprint`).
        """
        previous = self._fingerprints.put(key, seen.fingerprint)
        if self.own_writes.caused(key, seen.resource_version):
            return False
        return previous != seen.fingerprint


def own_registries(shards: Shards) -> str:
    """The label selector of the registries whose bodies this controller lists at start: every registry, or sharded
    its shard's (``osb_effects.save_registry`` labels them)."""
    return registries.LABEL_REGISTRY_OF + (f",{shards.selector}" if shards.selector else "")


#: The kinds reconciled once per control plane: sharded, by shard 0 only (:attr:`Shards.coordinator`).
COORDINATED = frozenset({"service", "plan"})


class PlanRead(NamedTuple):
    """What the instances and bindings of a plan decide on (:func:`what_instances_read`)."""

    spec_hash: str
    metadata: str
    """Its metadata as text, less what every write changes."""
    paused: bool
    """Its pause annotation (part of ``metadata`` too): a change brings the bindings of its instances back as well."""


def what_instances_read(plan: PlanEntry) -> PlanRead:
    """What the instances and bindings of ``plan`` decide on: its spec (by the hash the catalog keeps of it) and
    its metadata (held, being deleted, its identity, its annotations — the pause among them) as text, less what
    every write changes — not its status, which the plan's own reconcile writes and no instance reads. A plan event
    that leaves this as it was needs no instance of the plan reconciled (each such status write brought every
    instance of the plan back: about one reconcile in eight of a provisioning run, issue 31)."""
    meta = {name: value for name, value in mapping_of(plan.body.get("metadata")).items() if name not in _EVERY_WRITE}
    return PlanRead(plan.hash, json.dumps(meta, sort_keys=True, default=str), plan.view.meta.paused)


#: Metadata every write of an object changes (the plan's status writes included).
_EVERY_WRITE = frozenset({"resourceVersion", "managedFields", "generation"})


def _key_of(kind: str, entry: EntryView) -> Key:
    return Key(kind, entry.meta.namespace, entry.meta.name)


__all__ = ["DONE", "Controller"]


def source_portion(shards: Shards) -> Portion | None:
    """What a shard's source watches follow (None: unsharded, every object): its own instances' rendered objects
    and what no shard labelled; the coordinator follows Secrets and Namespaces whole — the claims, the Service
    Catalog and onboarding, which run there only, read any of them."""
    selector = shards.sources_selector
    if selector is None:
        return None
    whole = frozenset({SECRETS, NAMESPACES}) if shards.coordinator else frozenset()
    return Portion(selector, shards.covers, whole)
