"""Reconciling SFServiceInstances: render the plan, apply, read the operator's status back, tear down.

Level-triggered: ``reconcile`` reads the instance as it is now, asks ``decisions.next_instance_step``
what is due, performs it, and tells the queue whether to look again later. Running it twice in a row,
or after a crash at any point, converges to the same objects (server-side apply by name; everything ever
applied is recorded in ``status.resources`` *before* it is applied, so nothing is orphaned).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from opbroker.api import TemplateAction
from opbroker.api.conventions import FINALIZER, LABEL_INSTANCE, LABEL_PLAN
from opbroker.api.meta import ResourceRef
from opbroker.api.osb import OperationState
from opbroker.controller import decisions, finalizers, identities, registries, singletons, teardown
from opbroker.controller.catalog import PlanEntry
from opbroker.controller.decisions import Step
from opbroker.controller.kube import BINDINGS, INSTANCES, Kube, Refused, ref_of
from opbroker.controller.objects import (
    minus_refs,
    owner_reference,
    ref_dicts,
    refs_of,
    same_namespace,
    stamp,
    union_refs,
)
from opbroker.controller.ownership import NotOwned, apply_owned, release
from opbroker.controller.plan_guard import set_plan_finalizer
from opbroker.controller.reasons import Reason
from opbroker.controller.reconciler import DONE, Key, Memories, ObservePlanAct, Outcome
from opbroker.controller.reconciling import AppliedMemory, Deps, StatusWriter
from opbroker.controller.rendered import fetch_sources, inputs_for
from opbroker.rendering import RenderError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class InstanceFacts:
    """What one reconcile of an instance decides on, read once."""

    key: Key
    body: dict[str, Any]
    """The instance as read (act's status writes update it in place, so later steps see their result)."""
    entry: PlanEntry | None
    live_bindings: int
    """Bindings still referring to the instance (counted only while it is being deleted)."""
    pending: dict[str, Any] | None
    """The record of an apply of this generation and plan version whose outcome is still awaited."""
    trusted: tuple[str, ...] = ()
    """The control plane's namespaces (where the broker records instances whose context it checked)."""


class InstanceReconciler(ObservePlanAct[InstanceFacts, Step]):
    kind: ClassVar[str] = "instance"

    def __init__(self, deps: Deps, memories: Memories) -> None:
        self.deps = deps
        self.status = StatusWriter(deps, INSTANCES)
        self.applied = memories.keep(AppliedMemory())

    def reconcile(self, key: Key) -> Outcome:
        facts = self.observe(key)
        if facts is None:
            return DONE
        placed = self.deps.placement.instance(facts.body)  # multi-cluster: scheduled / reconciled elsewhere
        if placed is not None:
            return placed
        return self.act(facts, self.plan(facts))

    def observe(self, key: Key) -> InstanceFacts | None:
        instance = self.deps.kube.get_custom(INSTANCES, key.namespace, key.name)
        if instance is None:
            return None
        entry = self.deps.catalog.plan((instance.get("spec") or {}).get("planId", ""))
        live_bindings = self._live_bindings(instance) if decisions.is_deleting(instance) else 0
        version = (instance["metadata"].get("generation"), entry.hash if entry else None)
        return InstanceFacts(
            key, instance, entry, live_bindings, self.applied.recall(key, version), (self.deps.settings.namespace,)
        )

    @staticmethod
    @staticmethod
    def plan(facts: InstanceFacts) -> Sequence[Step]:
        entry = facts.entry
        step = decisions.next_instance_step(
            facts.body,
            plan_hash=entry.hash if entry else None,
            auto_update=bool(entry and entry.model and entry.model.spec.auto_update_instances),
            live_bindings=facts.live_bindings,
        )
        if step == Step.NOTHING:
            return ()
        if step in (Step.ADD_FINALIZER, Step.BLOCKED, Step.TEARDOWN):
            return (step,)
        if entry is None or entry.model is None:
            return (Step.REPORT_PLAN_PROBLEM,)
        if step == Step.APPLY and decisions.refuses_new_instance(facts.body, entry.body):
            return (Step.REFUSE_WITHDRAWN,)
        if step == Step.APPLY and decisions.context_namespace_refused(facts.body, trusted_namespaces=facts.trusted):
            return (Step.REFUSE_CONTEXT_NAMESPACE,)
        in_progress = (facts.body.get("status") or {}).get("state") == OperationState.IN_PROGRESS.value
        if step == Step.APPLY and facts.pending is not None and in_progress:
            return (Step.AWAIT_OUTCOME,)  # applied already; its outcome is pending
        if step == Step.APPLY and not decisions.has_finalizer(entry.body) and not decisions.is_deleting(entry.body):
            return (Step.HOLD_PLAN, Step.APPLY)  # the plan cannot be deleted while this instance uses it
        return (step,)

    def act(self, facts: InstanceFacts, actions: Sequence[Step]) -> Outcome:
        instance, entry = facts.body, facts.entry
        for step in actions:
            if step == Step.ADD_FINALIZER:
                patch = finalizers.adding(instance["metadata"], FINALIZER)
                if patch is not None:
                    self.deps.kube.patch_custom(INSTANCES, facts.key.namespace, facts.key.name, patch)
                return self.reconcile(facts.key)
            if step == Step.BLOCKED:
                self.status.transition(
                    instance,
                    state=OperationState.FAILED,
                    reason=Reason.BINDINGS_EXIST,
                    error=f"cannot deprovision: {facts.live_bindings} binding(s) still exist; unbind them first",
                )
                return DONE  # a binding's removal enqueues the instance again
            if step == Step.TEARDOWN:
                return self._teardown(instance, entry)
            if step == Step.REPORT_PLAN_PROBLEM:
                return self._plan_problem(instance, entry)
            assert entry is not None and entry.model is not None
            if step == Step.HOLD_PLAN:
                set_plan_finalizer(self.deps.kube, entry.body, hold=True)
                continue
            if step == Step.REFUSE_WITHDRAWN:
                self.status.transition(
                    instance,
                    state=OperationState.FAILED,
                    reason=Reason.PLAN_WITHDRAWN,
                    error=f"plan {entry.body['metadata']['name']!r} is being deleted: it takes no new instances",
                )
                return DONE
            if step == Step.REFUSE_CONTEXT_NAMESPACE:
                why = decisions.context_namespace_refused(instance, trusted_namespaces=(self.deps.settings.namespace,))
                self.status.transition(
                    instance, state=OperationState.FAILED, reason=Reason.CONTEXT_NAMESPACE_REFUSED, error=why or ""
                )
                return DONE
            try:
                if step == Step.AWAIT_OUTCOME:
                    return self._operate(instance, entry, applied=facts.pending)
                return self._operate(instance, entry, applied=None if step == Step.APPLY else {})
            except RenderError as exc:
                return self.status.fail_or_retry(instance, exc, Reason.RENDER_FAILED)
            except Refused as exc:
                return self.status.refused(instance, exc)
            except NotOwned as exc:
                self.status.transition(
                    instance, state=OperationState.FAILED, reason=Reason.OBJECT_NOT_OWNED, error=str(exc)
                )
                return DONE
            except singletons.SingletonFull as exc:
                self.status.transition(
                    instance, state=OperationState.FAILED, reason=Reason.SINGLETON_FULL, error=str(exc)
                )
                return DONE
        return DONE

    def reread(self, key: Key) -> None:
        self.deps.kube.store.discard(INSTANCES.store_key, key.namespace, key.name)

    # -- steps ---------------------------------------------------------------------------------------

    def _plan_problem(self, instance: dict[str, Any], entry: PlanEntry | None) -> Outcome:
        plan_id = instance["spec"].get("planId")
        if entry is None:
            reason, error = Reason.PLAN_NOT_FOUND, f"plan {plan_id!r} is not in the catalog"
        elif entry.duplicates:
            reason, error = Reason.DUPLICATE_ID, f"plan {plan_id!r} is not served: {entry.problem}"
        else:
            reason, error = Reason.PLAN_INVALID, f"plan {plan_id!r} is invalid: {entry.problem}"
        self.status.transition(instance, state=OperationState.FAILED, reason=reason, error=error)
        return DONE  # the plan's arrival or fix enqueues its instances again

    def _operate(self, instance: dict[str, Any], entry: PlanEntry, *, applied: dict[str, Any] | None) -> Outcome:
        """Apply the plan if asked, then read the operation's state back through the status template.

        ``applied`` None means "apply now"; otherwise it is the record of an earlier apply of this
        generation whose outcome is pending (empty: nothing to record). Writes are the expensive part (the
        benchmark counts them): moving to ``in progress`` and recording the resources is one status write,
        and the apply's record rides along with the final state (see ``AppliedMemory``).
        """
        assert entry.model is not None
        registry = self.deps.registries.load(self.deps.kube, self._place(instance), legacy=self._actor(entry)) or {}
        source_refs = self.deps.renderer.render_sources(
            entry.model, inputs_for(self.deps, instance=instance, plan=entry, registry=registry)
        )
        if applied is None:
            applied, registry = self._apply(instance, entry, registry, source_refs)
        self._watch(instance, [*source_refs.values(), *refs_of(instance.get("status"))])
        return self._evaluate(instance, entry, registry, source_refs, applied)

    def _apply(
        self, instance: dict[str, Any], entry: PlanEntry, registry: dict[str, Any], source_refs: dict[str, ResourceRef]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Render and apply ``provision``; returns the status fields recording it, and the registry."""
        assert entry.model is not None
        kube = self._actor(entry)
        meta = instance["metadata"]
        sources = fetch_sources(kube, source_refs)
        rendered = self.deps.renderer.render_objects(
            entry.model,
            TemplateAction.PROVISION,
            inputs_for(self.deps, instance=instance, plan=entry, registry=registry, sources=sources),
        )
        new_refs = [ref_of(obj.manifest) for obj in rendered.objects]
        old_refs = refs_of(instance.get("status"))
        # Record first, apply second: a crash in between leaves nothing unrecorded.
        self.status.transition(
            instance,
            state=OperationState.IN_PROGRESS,
            reason=Reason.IN_PROGRESS,
            description="applying",
            extra={
                "resources": ref_dicts(union_refs(old_refs, new_refs)),
                **decisions.started_operation(instance),
            },
        )
        labels = {LABEL_INSTANCE: meta["name"], LABEL_PLAN: entry.body["metadata"]["name"]}
        if rendered.registry != registry:
            self.deps.registries.save(self.deps.kube, self._place(instance), rendered.registry, labels)
        for obj in rendered.objects:
            _, namespaced = kube.plural_of(obj.manifest["apiVersion"], obj.manifest["kind"])
            owned = namespaced and same_namespace(obj.manifest, instance)
            manifest = stamp(obj.manifest, owner=instance, labels=labels, owned=owned, shared=obj.singleton)
            self._apply_object(kube, manifest, singleton=obj.singleton, owned=owned, owner=instance, adopt=obj.adopt)
        for gone in minus_refs(old_refs, new_refs):
            release(kube, gone, owner_uid=meta["uid"])
        applied = {
            "resources": ref_dicts(new_refs),
            "appliedSpec": instance.get("spec"),
            "appliedPlanHash": entry.hash,
            "observedGeneration": meta.get("generation"),
            "errorCount": 0,
        }
        return applied, rendered.registry

    def _evaluate(
        self,
        instance: dict[str, Any],
        entry: PlanEntry,
        registry: dict[str, Any],
        source_refs: dict[str, ResourceRef],
        applied: dict[str, Any],
    ) -> Outcome:
        assert entry.model is not None
        if entry.model.spec.template(TemplateAction.STATUS) is None:
            dashboard = decisions.dashboard_url(None, registry)
            self.status.transition(
                instance,
                state=OperationState.SUCCEEDED,
                reason=Reason.PROVISIONED,
                description="resources applied (the plan has no status template)",
                extra={**applied, **({"dashboardUrl": dashboard} if dashboard else {})},
            )
            self.applied.forget(Key.of("instance", instance))
            return DONE
        sources = fetch_sources(self._actor(entry), source_refs)
        result = self.deps.renderer.render_status(
            entry.model, inputs_for(self.deps, instance=instance, plan=entry, registry=registry, sources=sources)
        )
        section = result.provision
        key = Key.of("instance", instance)
        if section is None or section.state == OperationState.IN_PROGRESS.value:
            outcome = self.status.still_in_progress(instance, extra=applied)
            if applied and outcome is not DONE:
                self.applied.remember(key, (instance["metadata"].get("generation"), entry.hash), applied)
            elif outcome is DONE:
                self.applied.forget(key)
            return outcome
        self.applied.forget(key)
        reported = {
            "dashboardUrl": decisions.dashboard_url(section.dashboard_url, registry),
            "instanceUsable": section.instance_usable,
            "updateRepeatable": section.update_repeatable,
        }
        extra = {**applied, **{k: v for k, v in reported.items() if v is not None}}
        if section.state == OperationState.SUCCEEDED.value:
            self.status.transition(
                instance,
                state=OperationState.SUCCEEDED,
                reason=Reason.PROVISIONED,
                description=section.description or "",
                extra=extra,
            )
        else:
            self.status.transition(
                instance,
                state=OperationState.FAILED,
                reason=Reason.FAILED,
                description=section.description or "",
                error=section.error or section.description or "the operator reported a failure",
                extra=extra,
            )
        return DONE

    def _teardown(self, instance: dict[str, Any], entry: PlanEntry | None) -> Outcome:
        kube = self.deps.kube
        actor = self._actor(entry)
        meta = instance["metadata"]
        self.applied.forget(Key("instance", meta["namespace"], meta["name"]))
        status = instance.get("status") or {}
        if status.get("state") != OperationState.IN_PROGRESS.value:
            self.status.transition(
                instance, state=OperationState.IN_PROGRESS, reason=Reason.DEPROVISIONING, description="deprovisioning"
            )
        terminating = teardown.namespace_going(kube, meta["namespace"])
        scope = decisions.teardown_scope(
            refs_of(status), namespace=meta["namespace"], namespace_terminating=terminating
        )
        remaining = [ref for ref in scope.release if release(actor, ref, owner_uid=meta["uid"])]
        done = not remaining
        if (
            scope.run_templates
            and entry is not None
            and entry.model is not None
            and entry.model.spec.template(TemplateAction.STATUS)
        ):
            try:
                registry = self.deps.registries.load(self.deps.kube, self._place(instance), legacy=actor)
                inputs = inputs_for(self.deps, instance=instance, plan=entry, registry=registry)
                source_refs = self.deps.renderer.render_sources(entry.model, inputs)
                self._watch(instance, [*source_refs.values(), *refs_of(status)])
                result = self.deps.renderer.render_status(
                    entry.model,
                    inputs_for(
                        self.deps,
                        instance=instance,
                        plan=entry,
                        registry=registry,
                        sources=fetch_sources(actor, source_refs),
                    ),
                )
            except RenderError as exc:
                if not done:
                    return self.status.fail_or_retry(instance, exc, Reason.RENDER_FAILED)
                # Everything recorded is gone, and the status template cannot speak for it (most often it
                # reads the very objects that just went). Keeping the finalizer would hang the DELETE for
                # good (a repeated DELETE only repeats this): finish, and say why in a Warning event.
                message = f"every recorded object is deleted; the status template could not confirm it: {exc}"
                logger.warning("%s %s: %s", instance["kind"], meta["name"], message)
                kube.emit_event(instance, reason=Reason.DEPROVISION_UNCONFIRMED.value, message=message, warning=True)
                result = None
            section = result.deprovision if result is not None else None
            if section is not None:
                if section.state == OperationState.FAILED.value:
                    self.status.transition(
                        instance,
                        state=OperationState.FAILED,
                        reason=Reason.FAILED,
                        error=section.error or section.description or "deprovision failed",
                    )
                    return DONE
                done = done and section.state == OperationState.SUCCEEDED.value
        if not done:
            return Outcome(requeue_after=self.deps.settings.status_poll_seconds)
        if terminating:
            teardown.announce(kube, instance, scope)
        place = self._place(instance)
        registries.delete(kube, place)  # its own namespace's: no owner reference can take it along
        self.deps.registries.forget(place)
        meta = instance["metadata"]  # as last written: the status write above replaced the object's contents
        patch = finalizers.removing(meta, FINALIZER)
        if patch is not None:
            kube.patch_custom(INSTANCES, meta["namespace"], meta["name"], patch)
        self.deps.index.forget(Key("instance", meta["namespace"], meta["name"]))
        return DONE

    # -- helpers -------------------------------------------------------------------------------------

    def _place(self, instance: dict[str, Any]) -> registries.Place:
        """Where the instance's registry is kept: the registry namespace, which consumers cannot read."""
        return registries.place(instance, kind="instance", namespace=self.deps.settings.registries_namespace)

    def _actor(self, entry: PlanEntry | None) -> Kube:
        """The door a plan's work goes through: its ServiceAccount's rights (see ``identities``)."""
        if entry is None:
            return self.deps.kube
        return self.deps.kube.acting_as(identities.plan_user(entry.body, self.deps.settings))

    @staticmethod
    def _apply_object(
        kube: Kube, manifest: dict[str, Any], *, singleton: bool, owned: bool, owner: dict[str, Any], adopt: bool
    ) -> None:
        """Apply one rendered object, unless it exists and is not this instance's (``ownership``). A singleton is
        shared by every instance of the plan: if it exists already (made by opbroker for this plan, or adopted)
        it is left as it is and merely gains our owner reference (or, where none can reach it, our entry among its
        tracked users), so it lives while any user does."""
        if not singleton:
            apply_owned(kube, manifest, owner_uids=(owner["metadata"]["uid"],), adopt=adopt)
            return
        uid = owner["metadata"]["uid"]
        if kube.create(manifest if owned else singletons.tracked(manifest, uid)) is not None:
            return
        ref = ref_of(manifest)
        live = kube.get(ref)
        if live is None:
            return  # deleted meanwhile: the next reconcile creates it
        plan_label = manifest["metadata"]["labels"].get(LABEL_PLAN)
        if not adopt and not decisions.shared_singleton(live, plan_label=plan_label):
            raise NotOwned(ref)
        if not owned:  # owner references cannot reach it: opbroker tracks its users (``singletons``)
            singletons.join(kube, ref, live, uid)
            return
        owners = live["metadata"].get("ownerReferences") or []
        ours = owner_reference(owner)
        if all(o.get("uid") != ours["uid"] for o in owners):
            patch = {"ownerReferences": [*owners, ours], "resourceVersion": live["metadata"]["resourceVersion"]}
            kube.merge_patch(ref, {"metadata": patch})

    def _live_bindings(self, instance: dict[str, Any]) -> int:
        meta = instance["metadata"]
        bindings = self.deps.kube.list_custom(BINDINGS, meta["namespace"])
        instance_id = instance["spec"].get("instanceId") or meta["name"]
        return sum(1 for b in bindings if (b.get("spec") or {}).get("instanceId") in (instance_id, meta["name"]))

    def _watch(self, instance: dict[str, Any], refs: list[ResourceRef]) -> None:
        meta = instance["metadata"]
        kinds = self.deps.index.track(Key("instance", meta["namespace"], meta["name"]), refs)
        self.deps.watchers.ensure(kinds)
