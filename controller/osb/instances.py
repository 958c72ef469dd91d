"""Reconciling SFServiceInstances: render the plan, apply, read the operator's status back, tear down.

Level-triggered, in three parts with one job each:

* ``observe`` reads everything a decision needs into :class:`InstanceFacts` — the instance (a typed
  :class:`~.views.InstanceView`), its plan, its bindings' count, the apply awaiting its outcome, and, when the
  next step needs them, what the plan's templates render (objects to apply, the status template's verdict) and
  what the recorded objects' owners allow (teardown). A template that fails to render is a fact too.
* ``plan`` (pure, in :mod:`.instance_plan`, table-tested) turns the facts into actions of the one vocabulary
  (:mod:`.actions`): every decision — apply or wait, succeeded / failed / in progress, overdue, give up, what to
  release, when to look again — is taken here.
* ``act`` hands them to the one :class:`~.executor.Executor`; a refusal met while applying is turned into
  actions by the pure :func:`.instance_plan.refused`.

One reconcile (:mod:`opbroker.controller.runtime.passes`) may make up to :data:`~.executor.MAX_PASSES` such passes when
a plan says :class:`~.actions.Continue` (after adding the finalizer; after an apply, whose outcome the next pass reads
through the status template): each pass observes afresh, nothing recurses. Running it twice in a row, or
after a crash at any point, converges to the same objects (server-side apply by name; everything ever applied
is recorded in ``status.resources`` *before* it is applied, so nothing is orphaned).
"""

from __future__ import annotations

import dataclasses
import datetime
import hmac
import logging
from collections.abc import Mapping, Sequence
from typing import ClassVar

from opbroker.api import DeletionPolicy, DriftPolicy, TemplateAction
from opbroker.api.meta import ResourceRef
from opbroker.controller.catalog.catalog import PlanEntry
from opbroker.controller.core import decisions
from opbroker.controller.core.decisions import Step
from opbroker.controller.core.views import BindingView, CheckedView, InstanceView, ObjectView, recorded_refs
from opbroker.controller.kinds import BINDINGS, INSTANCES
from opbroker.controller.osb import identities, ownership, registries, teardown
from opbroker.controller.osb.core import drift
from opbroker.controller.osb.core.instance_plan import (
    Check,
    Held,
    InstanceFacts,
    Limits,
    Observed,
    OsbAction,
    Piece,
    Rendering,
    Report,
    Teardown,
    placed,
    plan,
    provisioned_by,
    refused,
    steps,
)
from opbroker.controller.osb.osb_effects import osb_executor
from opbroker.controller.osb.reconciling import LISTING_WAIT_SECONDS, AppliedMemory, DayTwo, Deps
from opbroker.controller.osb.rendered import fetch_sources, inputs_for
from opbroker.controller.runtime import metrics
from opbroker.controller.runtime.executor import refusal_of
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.kube import Kube, Refused
from opbroker.controller.runtime.memory import Memories, PerKey
from opbroker.controller.runtime.objects import minus_refs, ref_key, resource_version, union_refs
from opbroker.controller.runtime.outcomes import Outcome
from opbroker.controller.runtime.passes import PassingReconciler
from opbroker.controller.runtime.sources import ObjectKey
from opbroker.controller.settings import ControllerSettings
from opbroker.kubeclient.wire import JsonBody
from opbroker.rendering import RenderError

__all__ = ["InstanceFacts", "InstanceReconciler"]

#: The prefix of opbroker's own field managers (the controller's, a binding's on its instance's objects): never named
#: as the other party of a fight.
OWN_MANAGERS_PREFIX = "opbroker-"


def observe(kube: Kube, piece: Piece, memo: DayTwo, now: datetime.datetime, bounds: drift.Bounds) -> Observed:
    """Day two: one rendered object (an instance's or a binding's), live, with when it was set back before; when a
    drift of it would be a fight, read past the store to name the other writer (the store keeps no
    ``managedFields``)."""
    history = drift.recent(memo.corrections.get(ref_key(piece.ref), ()), now, bounds)
    if not drift.fighting(history, now, bounds):
        return Observed(piece, kube.get(piece.ref), history)
    live = kube.get(piece.ref, fresh=True)
    return Observed(piece, live, history, drift.other_managers(live, OWN_MANAGERS_PREFIX))


logger = logging.getLogger(__name__)


# -- the reconciler -----------------------------------------------------------------------------------------


def _carried(previous: InstanceFacts | None, entry: PlanEntry | None) -> Mapping[str, ResourceRef] | None:
    """The sources the pass before rendered for the same plan version, to reuse (None: nothing to reuse)."""
    if previous is None or previous.rendering is None or previous.entry is None or entry is None:
        return None
    return previous.rendering.sources if previous.entry.hash == entry.hash else None


def limits_of(settings: ControllerSettings) -> Limits:
    return Limits(
        settings.status_poll_seconds,
        settings.max_operation_seconds,
        settings.error_threshold,
        max_poll_seconds=settings.status_poll_max_seconds,
        resync_seconds=settings.resync_seconds,
        live_status_seconds=settings.live_status_seconds,
        drift_bounds=drift.Bounds(
            max_corrections=settings.drift_corrections,
            window_seconds=settings.drift_window_seconds,
            backoff=settings.policies.drift_backoff,
        ),
    )


class InstanceReconciler(PassingReconciler[InstanceFacts, OsbAction]):
    kind: ClassVar[str] = "instance"

    def __init__(self, deps: Deps, memories: Memories) -> None:
        self.deps = deps
        self.applied = memories.keep(AppliedMemory())
        self.day_two: PerKey[DayTwo] = memories.keep(PerKey())
        """Day two: what each settled instance's checks read, wrote and corrected (``DayTwo``)."""
        self.executor = osb_executor(deps, INSTANCES, self.kind, self.applied, day_two=self.day_two)

    steps = staticmethod(steps)

    @staticmethod
    def plan(facts: InstanceFacts) -> Sequence[OsbAction]:
        return plan(facts)

    @staticmethod
    def decided_by_placement(facts: InstanceFacts) -> bool:
        return placed(facts) is not None

    def act(self, facts: InstanceFacts, actions: Sequence[OsbAction]) -> Outcome:
        if facts.placement is not None and placed(facts) is not None:  # multi-cluster: placement's actions
            with self.deps.placement.performing(facts.placement):
                return self.executor.run(facts.key, facts.instance.wire, actions)
        self.deps.budgets.note(facts.key, actions)
        return self.executor.run(facts.key, facts.instance.wire, actions, lambda refusal: refused(facts, refusal))

    def reread(self, key: Key) -> None:
        self.deps.kube.store.stale(INSTANCES.store_key, key.namespace, key.name)

    # -- observing -----------------------------------------------------------------------------------

    def read(self, key: Key) -> InstanceFacts | None:
        """The facts every pass starts from: the instance, its plan, its bindings' count, the apply pending, and where
        it is placed (multi-cluster; read last, as placement always was)."""
        body = self.deps.kube.get_custom(INSTANCES, key.namespace, key.name)
        if body is None or not self.deps.keeps(INSTANCES, body, key.name):
            return None  # gone, or another shard's (issue 46)
        view = InstanceView.of(body)
        entry = self.deps.catalog.plan(view.plan_id)
        settings = self.deps.settings
        return InstanceFacts(
            key,
            view,
            entry,
            self._live_bindings(view) if view.meta.deleting else 0,
            self.applied.recall(key, (view.meta.generation, entry.hash if entry else None)),
            (settings.namespace,),
            limits_of(settings),
            actor=identities.plan_user(entry.body, settings) if entry is not None else None,
            now=self.deps.clock.now(),
            watched_kinds=self.deps.watchers.live,
            over_budget=self.deps.budgets.refusal(key),
            placement=self.deps.placement.instance(view),
            shard_labels=settings.shards.label(key.namespace, key.name),
        )

    def gather(self, facts: InstanceFacts, previous: InstanceFacts | None) -> InstanceFacts:
        """Add what the step due needs read or rendered. ``previous``: this reconcile's pass before, whose render
        of the ``sources`` template the evaluation right after an apply reuses (as one reconcile always did)."""
        entry = facts.entry
        due = steps(facts)
        try:
            if Step.CHECK in due:
                return self._gather_check(facts)
            if Step.APPLY in due:
                rendering = self._render(facts)
                gone = minus_refs(list(facts.instance.status.resources), [piece.ref for piece in rendering.pieces])
                kube = self._actor(facts)
                released = tuple(ownership.held(kube, ref) for ref in gone)  # what the apply lets go of
                # Each object as it is (the store's copy when it holds the kind): the plan writes over one only if it
                # is the instance's, and joins a shared singleton made already rather than creating it.
                live = tuple(
                    Held(p.ref, ObjectView.maybe(self._read(kube, rendering, p.ref))) for p in rendering.pieces
                )
                rendering = dataclasses.replace(rendering, released=released, live=live)
                return dataclasses.replace(facts, rendering=rendering)
            if Step.AWAIT_OUTCOME in due or Step.EVALUATE in due:
                sources = _carried(previous, entry)
                report = self._report(facts, provision=True, sources=sources)
                if not provisioned_by(report):
                    return dataclasses.replace(facts, report=report)
                # A success: the recorded objects' shapes are remembered, and its write carries the first check.
                recorded = self._recorded(facts)
                facts = dataclasses.replace(facts, report=report, shapes=_shapes(recorded))
                return dataclasses.replace(facts, first_check=self._first_check(facts, recorded))
        except RenderError as exc:
            return dataclasses.replace(facts, render_error=str(exc) or type(exc).__name__)
        except Refused as exc:  # a source the plan's account may not read: the operation fails, masked
            return dataclasses.replace(facts, refusal=refusal_of(exc))
        if Step.TEARDOWN in due:
            facts = dataclasses.replace(facts, teardown=self._gather_teardown(facts))
            assert facts.teardown is not None
            if not facts.teardown.terminating:  # in a terminating namespace no template runs
                try:
                    return dataclasses.replace(facts, report=self._report(facts, provision=False))
                except RenderError as exc:  # the plan's verdict is wanted, but cannot be had
                    return dataclasses.replace(
                        facts, report=Report(has_template=True), render_error=str(exc) or type(exc).__name__
                    )
        return facts

    def _actor(self, facts: InstanceFacts) -> Kube:
        """The door a plan's work goes through: its ServiceAccount's rights (see ``identities``)."""
        return self.deps.door(facts.actor)

    def _registry(self, facts: InstanceFacts) -> JsonBody:
        namespace = self.deps.settings.registries_namespace
        where = registries.place(facts.instance.meta, kind="instance", namespace=namespace)
        return self.deps.registries.load(self.deps.kube, where, legacy=self._actor(facts)) or {}

    @staticmethod
    def _read(kube: Kube, rendering: Rendering, ref: ResourceRef) -> JsonBody | None:
        """A rendered object as it is: as the render's ``sources`` read it a moment ago, else read now."""
        key = ref_key(ref)
        return rendering.read[key] if key in rendering.read else kube.get(ref)

    def _render(self, facts: InstanceFacts) -> Rendering:
        """What ``provision`` renders now (with the objects its ``sources`` name, as they are)."""
        entry, view, kube = facts.entry, facts.instance, self._actor(facts)
        assert entry is not None and entry.model is not None
        registry = self._registry(facts)
        source_refs = self.deps.renderer.render_sources(
            entry.model, inputs_for(self.deps, instance=view, plan=entry, registry=registry)
        )
        sources = fetch_sources(kube, source_refs)
        read = {ref_key(ref): sources[name] for name, ref in source_refs.items()}
        rendered = self.deps.renderer.render_objects(
            entry.model,
            TemplateAction.PROVISION,
            inputs_for(self.deps, instance=view, plan=entry, registry=registry, sources=sources),
        )
        metrics.RENDERS.labels("instance", TemplateAction.PROVISION.value).inc()
        template = entry.model.spec.template(TemplateAction.PROVISION)
        policy = template.deletion if template is not None else DeletionPolicy.DELETE
        drift = template.drift_policy if template is not None else DriftPolicy.CORRECT
        pieces = tuple(
            Piece(
                obj.manifest,
                obj.singleton,
                obj.adopt,
                kube.plural_of(obj.manifest["apiVersion"], obj.manifest["kind"])[1],
                policy,
                drift,
            )
            for obj in rendered.objects
        )
        return Rendering(pieces, rendered.registry, rendered.registry != registry, source_refs, read=read)

    def _report(
        self, facts: InstanceFacts, *, provision: bool, sources: Mapping[str, ResourceRef] | None = None
    ) -> Report | None:
        """The status template's verdict on the operation (None: the plan has no model to ask)."""
        entry, view, kube = facts.entry, facts.instance, self._actor(facts)
        if entry is None or entry.model is None:
            return None
        registry = self._registry(facts)
        if entry.model.spec.template(TemplateAction.STATUS) is None:
            return Report(has_template=False, registry=registry)
        source_refs = (
            dict(sources)
            if sources is not None
            else self.deps.renderer.render_sources(
                entry.model, inputs_for(self.deps, instance=view, plan=entry, registry=registry)
            )
        )
        fetched = fetch_sources(kube, source_refs)
        result = self.deps.renderer.render_status(
            entry.model, inputs_for(self.deps, instance=view, plan=entry, registry=registry, sources=fetched)
        )
        section = result.provision if provision else result.deprovision
        versions = tuple(resource_version(body) for body in fetched.values())
        return Report(True, section, registry, tuple(source_refs.values()), versions)

    def _gather_check(self, facts: InstanceFacts) -> InstanceFacts:
        """Day two: what a settled instance's check decides on. Nothing is rendered when nothing it read last time
        has moved (the digest of those objects' versions, from the store, matches the one recorded when it was last
        found as declared): a resync over thousands of settled instances costs a few store lookups each. Else
        ``provision`` is rendered, each object it renders read live, and the status template asked."""
        key, view, entry = facts.key, facts.instance, facts.entry
        assert entry is not None
        remembered = self.day_two.get(key)
        memo = remembered or DayTwo()
        try:
            if not memo.digest:  # a first check (a restart's): answered by status.checked, else checked from the store
                # Only the first check of this process: one after an unsettled check (a debounced verdict) must look.
                recovered = self._recovered(facts) if remembered is None else None
                if recovered is not None:
                    return dataclasses.replace(facts, check=recovered)
                kinds = {(ref.api_version, ref.kind) for ref in view.status.resources}
                self.deps.watchers.wait_listed(kinds, LISTING_WAIT_SECONDS, bodies=True)
            elif self._digest(facts, memo.refs)[0] == memo.digest:
                return dataclasses.replace(facts, check=Check(memo.digest, unchanged=True))
            recorded = self._recorded(facts)
            shapes = _shapes(recorded)
            compare = decisions.drift_checked(view, plan_hash=entry.hash) and not drift.unmoved(shapes, memo.shapes)
            if compare:
                rendering: Rendering | None = self._render(facts)
                assert rendering is not None
                report = self._report(facts, provision=True, sources=rendering.sources)
                observed = tuple(self._observe(facts, piece, memo) for piece in rendering.pieces)
            else:  # nothing rendered moved (only status), or the plan changed since its apply: its live status only
                rendering, observed = None, ()
                report = self._report(facts, provision=True)
            refs, digest, versions, sources = self._read_by_check(
                facts, report, view.status.resources, _first_read(recorded, rendering, report)
            )
        except RenderError as exc:
            check = Check("", last_live_write=memo.last_live_write)
            return dataclasses.replace(facts, check=check, render_error=str(exc) or type(exc).__name__)
        except Refused as exc:
            check = Check("", last_live_write=memo.last_live_write)
            return dataclasses.replace(facts, check=check, refusal=refusal_of(exc))
        held = _holds(view.checked, digest, sources)
        check = Check(digest, False, observed, refs, memo.last_live_write, versions, shapes, sources, held)
        return dataclasses.replace(facts, rendering=rendering, report=report, check=check)

    def _first_check(self, facts: InstanceFacts, recorded: Mapping[ObjectKey, JsonBody | None]) -> Check | None:
        """The check an operation's success makes before its write (``instance_plan.first_checked``): ``provision``
        rendered now, each object it renders read live, the versions of what was read as first read (``recorded``:
        the recorded objects, read for the shapes). None when it cannot be made (a template failing, a source
        refused): the operation's outcome stands as reported, and the next resync sweep checks it."""
        report = facts.report
        assert report is not None
        pending = facts.pending or {}
        resources = recorded_refs(pending["resources"]) if "resources" in pending else facts.instance.status.resources
        try:
            rendering = self._render(facts)
            observed = tuple(self._observe(facts, piece, DayTwo()) for piece in rendering.pieces)
        except (RenderError, Refused) as exc:
            logger.debug("%s: no first check with its success (%s)", facts.key, str(exc) or type(exc).__name__)
            return None
        read = _first_read(recorded, rendering, report)
        refs, digest, versions, sources = self._read_by_check(facts, report, resources, read)
        return Check(digest, observed=observed, refs=refs, versions=versions, shapes=facts.shapes, sources=sources)

    def _read_by_check(
        self,
        facts: InstanceFacts,
        report: Report | None,
        resources: Sequence[ResourceRef],
        read: Mapping[ObjectKey, str | None],
    ) -> tuple[tuple[ResourceRef, ...], str, tuple[str | None, ...], tuple[ResourceRef, ...]]:
        """What a check read — the status template's sources and the recorded objects (``resources``) —, the digest
        of their versions as first ``read``, the versions, and the part beside ``resources`` (what ``status.checked``
        records with the digest)."""
        refs = tuple(union_refs(list(report.source_refs if report else ()), list(resources)))
        digest, versions = self._digest(facts, refs, read)
        return refs, digest, versions, tuple(minus_refs(list(refs), list(resources)))

    def _recovered(self, facts: InstanceFacts) -> Check | None:
        """A first check (after a restart, or a move to this shard) that ``status.checked`` answers: the digest of
        what the last check found as declared, made with the controller's key, matches the versions the store holds
        of the same objects — nothing moved since, so nothing is rendered, as for a check remembered in memory.
        Their kinds are watched from now on (a restart's watches start with the first object that follows them) and
        their first listing waited for (bounded): before it, every version would be a GET."""
        checked = facts.instance.checked
        if checked is None:
            return None
        refs = tuple(union_refs(list(checked.sources), list(facts.instance.status.resources)))
        kinds = {(ref.api_version, ref.kind) for ref in refs}
        self.deps.watchers.ensure(kinds)
        if not self.deps.watchers.wait_listed(kinds, LISTING_WAIT_SECONDS):
            return None
        digest, versions = self._digest(facts, refs)
        if not hmac.compare_digest(digest, checked.digest):
            return None
        return Check(digest, unchanged=True, refs=refs, versions=versions, sources=checked.sources, recorded=True,
                     recovered=True, health=checked.health)  # fmt: skip

    def _recorded(self, facts: InstanceFacts) -> dict[ObjectKey, JsonBody | None]:
        """The recorded objects (``status.resources``) as the store holds them now."""
        kube = self._actor(facts)
        return {ref_key(ref): kube.get(ref) for ref in facts.instance.status.resources}

    def _observe(self, facts: InstanceFacts, piece: Piece, memo: DayTwo) -> Observed:
        return observe(self._actor(facts), piece, memo, facts.now or self.deps.clock.now(), facts.limits.drift_bounds)

    def _digest(
        self, facts: InstanceFacts, refs: Sequence[ResourceRef], read: Mapping[ObjectKey, str | None] | None = None
    ) -> tuple[str, tuple[str | None, ...]]:
        """The versions of what a check reads (``refs``): as it ``read`` them, else as the store holds them now;
        and their digest with the plan's version and the instance's generation."""
        assert facts.entry is not None
        meta = facts.instance.meta
        kube = self._actor(facts)
        versions = tuple(
            read[ref_key(ref)] if read is not None and ref_key(ref) in read else kube.version_of(ref) for ref in refs
        )
        digest = decisions.sources_digest(
            key=self.deps.digest_key,
            plan_hash=facts.entry.hash,
            instance=meta,
            binding=meta,
            versions=list(zip(refs, versions, strict=True)),
        )
        return digest, versions

    def _gather_teardown(self, facts: InstanceFacts) -> Teardown:
        view, kube = facts.instance, self._actor(facts)
        terminating = teardown.namespace_going(self.deps.kube, view.meta.namespace)
        scope = decisions.teardown_scope(
            list(view.status.resources), namespace=view.meta.namespace, namespace_terminating=terminating
        )
        return Teardown(terminating, tuple(ownership.held(kube, ref) for ref in scope.release))

    def _live_bindings(self, instance: InstanceView) -> int:
        bindings = self.deps.kube.list_custom(BINDINGS, instance.meta.namespace)
        return sum(1 for b in bindings if BindingView.of(b).binds(instance))


def _holds(checked: CheckedView | None, digest: str, sources: Sequence[ResourceRef]) -> bool:
    """Whether ``status.checked`` records this check already: its digest (compared in constant time: a tenant can
    write it) and what it read beside the recorded objects."""
    if checked is None or not hmac.compare_digest(checked.digest, digest):
        return False
    return {ref_key(r) for r in checked.sources} == {ref_key(r) for r in sources}


def _shapes(recorded: Mapping[ObjectKey, JsonBody | None]) -> dict[ObjectKey, str | None]:
    """The recorded objects' shapes (``drift.shape``), as read."""
    return {key: drift.shape(body) for key, body in recorded.items()}


def _first_read(
    recorded: Mapping[ObjectKey, JsonBody | None], rendering: Rendering | None, report: Report | None
) -> dict[ObjectKey, str | None]:
    """The version of each object a check read, as its first read saw it (the recorded objects, then the render's
    sources, then the status template's). What a check remembers is what it decided on: a change landing while it
    reads — an operator's status written between the status template's read and the digest — must make the next
    look differ, or the event that change sends is answered "unchanged" and the change waits for the resync."""
    seen = {key: resource_version(body) for key, body in recorded.items()}
    for key, body in (rendering.read if rendering is not None else {}).items():
        seen.setdefault(key, resource_version(body))
    for ref, version in zip(report.source_refs, report.source_versions, strict=True) if report is not None else ():
        seen.setdefault(ref_key(ref), version)
    return seen
