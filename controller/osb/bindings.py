"""Reconciling SFServiceBindings: render ``bind``, read the credentials back, keep them in a Secret.

Credentials are only published once the plan's status template reports the bind ``succeeded`` *with* a
response, i.e. once the objects that produce them exist — never frozen early. They live in a Secret
owned by the binding (``status.response.secretRef``); they never enter status, logs or events.

Bind templates often change an object of the instance (the seed's Zalando plan adds a database user to
the instance's ``postgresql``). Such shared objects are applied under a field manager of the binding's
own, so unbinding releases exactly the binding's fields and never deletes the instance's object.

As :mod:`.instances`: ``observe`` reads and renders what the step due needs into :class:`BindingFacts`, the
pure :mod:`.binding_plan` decides, the one :class:`~.executor.Executor` acts; passes repeat on Continue.
"""

from __future__ import annotations

import dataclasses
import hmac
import logging
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from opbroker.api import DeletionPolicy, DriftPolicy, TemplateAction
from opbroker.api.conventions import credentials_secret_name, resource_name
from opbroker.api.meta import ResourceRef
from opbroker.controller.core import decisions
from opbroker.controller.core.decisions import Step
from opbroker.controller.core.views import BindingView, InstanceView, ObjectView, SecretView
from opbroker.controller.kinds import BINDINGS, INSTANCES
from opbroker.controller.osb import identities, ownership, registries, teardown
from opbroker.controller.osb.core.binding_plan import (
    BindingFacts,
    BindPiece,
    BindRendering,
    BindReport,
    ObservedBind,
    Refresh,
    SecretRead,
    Unbind,
    binding_field_manager,
    followed_status,
    placed,
    plan,
    refused,
    steps,
)
from opbroker.controller.osb.core.instance_plan import Held, OsbAction, Piece, Teardown
from opbroker.controller.osb.instances import limits_of, observe
from opbroker.controller.osb.osb_effects import osb_executor
from opbroker.controller.osb.reconciling import LISTING_WAIT_SECONDS, AppliedMemory, DayTwo, Deps
from opbroker.controller.osb.rendered import fetch_sources, inputs_for
from opbroker.controller.runtime import metrics
from opbroker.controller.runtime.executor import refusal_of
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.kube import Kube, Refused
from opbroker.controller.runtime.memory import Memories, PerKey
from opbroker.controller.runtime.objects import minus_refs, ref_key, resource_version
from opbroker.controller.runtime.outcomes import Outcome
from opbroker.controller.runtime.passes import PassingReconciler
from opbroker.kubeclient.wire import JsonObject
from opbroker.rendering import RenderError, RenderInputs

logger = logging.getLogger(__name__)

__all__ = [
    "BindingFacts",
    "BindingReconciler",
    "binding_field_manager",
    "followed_status",
]


class BindingReconciler(PassingReconciler[BindingFacts, OsbAction]):
    kind: ClassVar[str] = "binding"

    def __init__(self, deps: Deps, memories: Memories) -> None:
        self.deps = deps
        self.applied = memories.keep(AppliedMemory())
        self.day_two: PerKey[DayTwo] = memories.keep(PerKey())
        """Day two: when each of the binding's objects was set back (the fight bound)."""
        self.followed: PerKey[tuple[tuple[ResourceRef, ...], str]] = memories.keep(PerKey())
        """For bound bindings: the sources and digest (see ``decisions.sources_digest``) of the credentials
        as last checked by a refresh, when that wrote nothing (``status.sourcesDigest`` stays as it was)."""
        self.executor = osb_executor(deps, BINDINGS, self.kind, self.applied, self.followed, day_two=self.day_two)

    steps = staticmethod(steps)

    @staticmethod
    def plan(facts: BindingFacts) -> Sequence[OsbAction]:
        return plan(facts)

    @staticmethod
    def decided_by_placement(facts: BindingFacts) -> bool:
        return placed(facts) is not None

    def act(self, facts: BindingFacts, actions: Sequence[OsbAction]) -> Outcome:
        if facts.placement is not None and placed(facts) is not None:  # multi-cluster: placement's actions
            with self.deps.placement.performing(facts.placement):
                return self.executor.run(facts.key, facts.binding.wire, actions)
        self.deps.budgets.note(facts.key, actions)
        return self.executor.run(facts.key, facts.binding.wire, actions, lambda refusal: refused(facts, refusal))

    def reread(self, key: Key) -> None:
        self.deps.kube.store.stale(BINDINGS.store_key, key.namespace, key.name)

    # -- observing -----------------------------------------------------------------------------------

    def read(self, key: Key) -> BindingFacts | None:
        kube = self.deps.kube
        body = kube.get_custom(BINDINGS, key.namespace, key.name)
        if body is None:
            return None
        binding = BindingView.of(body)
        instance_name = resource_name(binding.instance_ref)
        if not self.deps.keeps(BINDINGS, body, instance_name):
            return None  # another shard's (issue 46)
        found = kube.get_custom(INSTANCES, key.namespace, instance_name)
        instance = InstanceView.of(found) if found is not None else None
        entry = self.deps.catalog.plan(instance.plan_id if instance is not None else binding.plan_id)
        version = (binding.meta.generation, entry.hash if entry else None)
        settings = self.deps.settings
        return BindingFacts(
            key,
            binding,
            instance,
            entry,
            self.applied.recall(key, version),
            limits_of(settings),
            actor=identities.plan_user(entry.body, settings) if entry is not None else None,
            now=self.deps.clock.now(),
            watched_kinds=self.deps.watchers.live,
            over_budget=self.deps.budgets.refusal(key),
            placement=self.deps.placement.binding(binding, instance),  # multi-cluster: read last, as it always was
            shard_labels=settings.shards.label(key.namespace, instance_name),
        )

    def gather(self, facts: BindingFacts, previous: BindingFacts | None) -> BindingFacts:
        due = steps(facts)
        try:
            if Step.APPLY in due:
                rendering = self._render(facts, TemplateAction.BIND)
                own = [p.piece.ref for p in rendering.pieces if not p.instance_own]
                gone = minus_refs(list(facts.binding.status.resources), own)
                released = tuple(ownership.held(self._actor(facts), ref) for ref in gone)  # what the apply lets go
                live = self._live(facts, rendering.pieces)
                rendering = dataclasses.replace(rendering, released=released, live=live)
                return dataclasses.replace(facts, rendering=rendering)
            if Step.AWAIT_OUTCOME in due or Step.EVALUATE in due:
                return dataclasses.replace(facts, report=self._report(facts))
        except RenderError as exc:
            return dataclasses.replace(facts, render_error=str(exc) or type(exc).__name__)
        except Refused as exc:
            return dataclasses.replace(facts, refusal=refusal_of(exc))
        if Step.REFRESH in due:
            return dataclasses.replace(facts, refresh=self._refresh(facts))
        if Step.TEARDOWN in due:
            return self._gather_unbind(facts, previous)
        return facts

    def _actor(self, facts: BindingFacts) -> Kube:
        return self.deps.door(facts.actor)

    def _inputs(self, facts: BindingFacts, sources: Mapping[str, JsonObject | None] | None = None) -> RenderInputs:
        assert facts.instance is not None and facts.entry is not None
        kube, legacy, cache = self.deps.kube, self._actor(facts), self.deps.registries
        namespace = self.deps.settings.registries_namespace
        instance_registry = cache.load(
            kube, registries.place(facts.instance.meta, kind="instance", namespace=namespace), legacy=legacy
        )
        binding_registry = cache.load(
            kube, registries.place(facts.binding.meta, kind="binding", namespace=namespace), legacy=legacy
        )
        return inputs_for(
            self.deps,
            instance=facts.instance,
            plan=facts.entry,
            registry=instance_registry,
            binding=facts.binding,
            binding_registry=binding_registry,
            sources=sources,
        )

    def _sources(self, facts: BindingFacts) -> tuple[dict[str, ResourceRef], Mapping[str, JsonObject | None]]:
        assert facts.entry is not None and facts.entry.model is not None
        source_refs = self.deps.renderer.render_sources(facts.entry.model, self._inputs(facts))
        return source_refs, fetch_sources(self._actor(facts), source_refs)

    def _pieces(
        self,
        facts: BindingFacts,
        objects: Sequence[Any],
        *,
        kinds_of_own: bool,
        policy: DeletionPolicy,
        drift_policy: DriftPolicy = DriftPolicy.CORRECT,
    ) -> tuple[BindPiece, ...]:
        assert facts.instance is not None
        instance_refs = {ref_key(ref) for ref in facts.instance.status.resources}
        kube, out = self._actor(facts), []
        for obj in objects:
            piece = Piece(obj.manifest, adopt=obj.adopt, deletion_policy=policy, drift=drift_policy)
            if ref_key(piece.ref) in instance_refs:
                out.append(BindPiece(piece, instance_own=True))
            else:
                namespaced = kube.plural_of(piece.ref.api_version, piece.ref.kind)[1] if kinds_of_own else True
                out.append(BindPiece(dataclasses.replace(piece, namespaced=namespaced)))
        return tuple(out)

    def _live(self, facts: BindingFacts, pieces: Sequence[BindPiece]) -> tuple[Held, ...]:
        """Each object the apply writes, as it is (the store's copy when it holds the kind): the plan writes over
        one only if it is the binding's (or, for its instance's object, the instance's)."""
        kube = self._actor(facts)
        return tuple(Held(p.piece.ref, ObjectView.maybe(kube.get(p.piece.ref))) for p in pieces)

    def _render(self, facts: BindingFacts, action: TemplateAction) -> BindRendering:
        assert facts.entry is not None and facts.entry.model is not None
        _, sources = self._sources(facts)
        inputs = self._inputs(facts, sources)
        rendered = self.deps.renderer.render_objects(facts.entry.model, action, inputs)
        metrics.RENDERS.labels("binding", action.value).inc()
        changed = rendered.binding_registry is not None and rendered.binding_registry != inputs.binding_registry
        template = facts.entry.model.spec.template(action)
        policy = template.deletion if template is not None else DeletionPolicy.DELETE
        drift_policy = template.drift_policy if template is not None else DriftPolicy.CORRECT
        pieces = self._pieces(facts, rendered.objects, kinds_of_own=True, policy=policy, drift_policy=drift_policy)
        return BindRendering(pieces, rendered.binding_registry, changed)

    def _digest(
        self, facts: BindingFacts, refs: Mapping[str, ResourceRef], fetched: Mapping[str, JsonObject | None]
    ) -> str:
        assert facts.instance is not None and facts.entry is not None
        versions = [(ref, resource_version(fetched.get(name))) for name, ref in refs.items()]
        return decisions.sources_digest(
            key=self.deps.digest_key,
            plan_hash=facts.entry.hash,
            instance=facts.instance.meta,
            binding=facts.binding.meta,
            versions=versions,
        )

    def _report(self, facts: BindingFacts) -> BindReport:
        """The status template's ``bind`` verdict (or, without one, the registries' credentials)."""
        entry = facts.entry
        assert entry is not None and entry.model is not None
        if entry.model.spec.template(TemplateAction.STATUS) is None:
            inputs = self._inputs(facts)
            source_refs = self.deps.renderer.render_sources(entry.model, inputs)
            credentials = (
                (inputs.binding_registry or {}).get("credentials") or (inputs.registry or {}).get("credentials") or {}
            )
            secret = self._secret(facts)
            return BindReport(False, credentials=credentials, source_refs=tuple(source_refs.values()), secret=secret)
        source_refs, fetched = self._sources(facts)
        result = self.deps.renderer.render_status(entry.model, self._inputs(facts, fetched))
        section = result.bind
        due = section is not None and section.state == "succeeded" and bool((section.response or {}).get("credentials"))
        return BindReport(
            True,
            section,
            source_refs=tuple(source_refs.values()),
            digest=self._digest(facts, source_refs, fetched),
            secret=self._secret(facts) if due else None,
        )

    def _secret(self, facts: BindingFacts) -> SecretRead:
        """The credentials Secret as it is before the plan writes it (the store's copy while it holds its body)."""
        meta = facts.binding.meta
        live = self._actor(facts).read_secret(meta.namespace, credentials_secret_name(meta.name), stored=True)
        return SecretRead(ObjectView.maybe(live))

    def _refresh(self, facts: BindingFacts) -> Refresh | None:
        """A bound binding's check: rendered again only when something its credentials are rendered from moved
        (``decisions.sources_digest`` against the digest recorded when they were last written or checked): a
        restart over thousands of bound bindings then reads no registry and no Secret, and renders nothing."""
        entry, binding = facts.entry, facts.binding
        assert entry is not None and entry.model is not None
        if entry.model.spec.template(TemplateAction.STATUS) is None:
            return None  # registry credentials: generated once, never re-rendered
        followed = self._followed(facts)
        if followed is not None:
            watched, sources, digest = followed
            following = self.deps.index.follows(facts.key, watched)
            if not following:  # a restart's first check: their kinds watched (and listed) before the versions are read
                self.deps.watchers.ensure({(ref.api_version, ref.kind) for ref in sources})
            seen = self._unchanged(facts, sources, digest)
            if seen is not None:
                return Refresh(unchanged=True, follow=() if following else watched, seen=() if following else seen)
            if not following:
                return Refresh(follow=watched)  # the plan follows them first, then renders: observing changes nothing
        try:
            source_refs, fetched = self._sources(facts)
            result = self.deps.renderer.render_status(entry.model, self._inputs(facts, fetched))
        except RenderError as exc:
            return Refresh(render_error=str(exc) or type(exc).__name__)
        report = BindReport(
            True, result.bind, source_refs=tuple(source_refs.values()), digest=self._digest(facts, source_refs, fetched)
        )
        try:
            observed = self._observe_bind(facts)
        except RenderError as exc:
            return Refresh(render_error=str(exc) or type(exc).__name__)
        section = result.bind
        response = (section.response if section else None) or {}
        changed, read = False, None
        if section is not None and section.state == "succeeded" and response.get("credentials"):
            secret = ResourceRef(
                api_version="v1",
                kind="Secret",
                name=credentials_secret_name(binding.meta.name),
                namespace=binding.meta.namespace,
            )
            live = self._actor(facts).get(secret)
            changed = decisions.credentials_changed(SecretView.maybe(live), response)
            read = SecretRead(ObjectView.maybe(live))  # what the rewrite, if any, decides on
        return Refresh(report=report, secret_changed=changed, observed=observed, secret=read)

    def _observe_bind(self, facts: BindingFacts) -> tuple[ObservedBind, ...]:
        """Day two: what ``bind`` renders now, each object read live (past the store when a drift of it would be a
        fight, to name the other writer), with when it was set back before."""
        assert facts.entry is not None and facts.entry.model is not None
        if facts.entry.model.spec.template(TemplateAction.BIND) is None:
            return ()
        rendering = self._render(facts, TemplateAction.BIND)
        memo = self.day_two.get(facts.key) or DayTwo()
        kube, now, bounds = self._actor(facts), self.deps.clock.now(), facts.limits.drift_bounds
        return tuple(ObservedBind(observe(kube, p.piece, memo, now, bounds), p.instance_own) for p in rendering.pieces)

    def _followed(self, facts: BindingFacts) -> tuple[tuple[ResourceRef, ...], tuple[ResourceRef, ...], str] | None:
        """What a bound binding follows (its credentials' sources and its objects), the sources and the digest its
        credentials were last checked against (remembered, else recorded in the status); None: not known."""
        binding = facts.binding
        remembered = self.followed.get(facts.key)
        if remembered is not None:
            refs, digest = remembered
        elif binding.sources_digest and binding.sources is not None:
            refs, digest = binding.sources, binding.sources_digest
        else:
            return None
        return (*refs, *binding.status.resources), tuple(refs), digest

    def _unchanged(
        self, facts: BindingFacts, refs: Sequence[ResourceRef], digest: str
    ) -> tuple[tuple[ResourceRef, str | None], ...] | None:
        """The versions read of what the credentials were last rendered from, if it is still what it was (the digest
        matches; None: it moved). Their kinds are watched: the versions come from the store once it has listed
        them."""
        binding, instance, entry = facts.binding, facts.instance, facts.entry
        assert instance is not None and entry is not None
        kinds = {(ref.api_version, ref.kind) for ref in refs}
        self.deps.watchers.wait_listed(kinds, LISTING_WAIT_SECONDS)
        versions = [(ref, self.deps.kube.version_of(ref)) for ref in refs]
        current = decisions.sources_digest(
            key=self.deps.digest_key,
            plan_hash=entry.hash,
            instance=instance.meta,
            binding=binding.meta,
            versions=versions,
        )
        return tuple(versions) if hmac.compare_digest(current, digest) else None  # (the recorded one: status)

    def _gather_unbind(self, facts: BindingFacts, previous: BindingFacts | None) -> BindingFacts:
        binding, instance, entry = facts.binding, facts.instance, facts.entry
        kube = self._actor(facts)
        terminating = teardown.namespace_going(self.deps.kube, binding.meta.namespace)
        scope = decisions.teardown_scope(
            list(binding.status.resources), namespace=binding.meta.namespace, namespace_terminating=terminating
        )
        gathered = Teardown(terminating, tuple(ownership.held(kube, ref) for ref in scope.release))
        # The credentials Secret, read before the plan deletes it (in a terminating namespace it goes with it).
        secret = None if terminating else self._secret(facts)
        if not scope.run_templates or instance is None or entry is None or entry.model is None:
            return dataclasses.replace(facts, unbind=Unbind(gathered, secret=secret))
        applied_before = bool(previous and previous.unbind and previous.unbind.pieces)
        try:
            pieces: tuple[BindPiece, ...] = ()
            if entry.model.spec.template(TemplateAction.UNBIND) is not None:
                pieces = self._render(facts, TemplateAction.UNBIND).pieces
            section = None
            if entry.model.spec.template(TemplateAction.STATUS) is not None:
                _, fetched = self._sources(facts)
                section = self.deps.renderer.render_status(entry.model, self._inputs(facts, fetched)).unbind
        except RenderError as exc:
            unbind = Unbind(gathered, templates_ran=True, applied_before=applied_before, secret=secret)
            return dataclasses.replace(facts, unbind=unbind, render_error=str(exc) or type(exc).__name__)
        live = self._live(facts, pieces) if pieces and not applied_before else ()
        unbind = Unbind(gathered, True, pieces, section, applied_before, secret, live)
        return dataclasses.replace(facts, unbind=unbind)
