"""Reconciling SFServiceInstances: render the plan, apply, read the operator's status back, tear down.

Level-triggered: ``reconcile`` reads the instance as it is now, asks ``decisions.next_instance_step``
what is due, performs it, and tells the queue whether to look again later. Running it twice in a row,
or after a crash at any point, converges to the same objects (server-side apply by name; everything ever
applied is recorded in ``status.resources`` *before* it is applied, so nothing is orphaned).
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import Any

from opbroker.api import TemplateAction
from opbroker.api.conventions import FINALIZER, LABEL_INSTANCE, LABEL_PLAN, instance_registry_name
from opbroker.api.meta import ResourceRef
from opbroker.api.osb import OperationState
from opbroker.controller import decisions, teardown
from opbroker.controller.catalog import PlanEntry
from opbroker.controller.decisions import Reason, Step
from opbroker.controller.kube import BINDINGS, INSTANCES, Refused, ref_of
from opbroker.controller.objects import (
    minus_refs,
    owner_reference,
    ref_dicts,
    refs_of,
    same_namespace,
    stamp,
    union_refs,
)
from opbroker.controller.reconciling import AppliedMemory, Deps, StatusWriter
from opbroker.controller.rendered import fetch_sources, inputs_for, release
from opbroker.controller.workqueue import DONE, Outcome
from opbroker.rendering import RenderError

logger = logging.getLogger(__name__)


class InstanceReconciler:
    def __init__(self, deps: Deps) -> None:
        self.deps = deps
        self.status = StatusWriter(deps, INSTANCES)
        self.applied = AppliedMemory()

    def reconcile(self, namespace: str, name: str) -> Outcome:
        kube = self.deps.kube
        instance = kube.get_custom(INSTANCES, namespace, name)
        key: Hashable = ("instance", namespace, name)
        if instance is None:
            self.deps.index.forget(key)
            return DONE
        placed = self.deps.placement.instance(instance)  # multi-cluster: scheduled / reconciled elsewhere
        if placed is not None:
            return placed
        spec = instance.get("spec") or {}
        entry = self.deps.catalog.plan(spec.get("planId", ""))
        live_bindings = self._live_bindings(instance) if decisions.is_deleting(instance) else 0
        step = decisions.next_instance_step(
            instance,
            plan_hash=entry.hash if entry else None,
            auto_update=bool(entry and entry.model and entry.model.spec.auto_update_instances),
            live_bindings=live_bindings,
        )
        if step == Step.NOTHING:
            return DONE
        if step == Step.ADD_FINALIZER:
            finalizers = [*(instance["metadata"].get("finalizers") or []), FINALIZER]
            kube.patch_custom(INSTANCES, namespace, name, {"metadata": {"finalizers": finalizers}})
            return self.reconcile(namespace, name)
        if step == Step.BLOCKED:
            self.status.transition(
                instance,
                state=OperationState.FAILED,
                reason=Reason.BINDINGS_EXIST,
                error=f"cannot deprovision: {live_bindings} binding(s) still exist; unbind them first",
            )
            return DONE  # a binding's removal enqueues the instance again
        if step == Step.TEARDOWN:
            return self._teardown(instance, entry)
        if entry is None or entry.model is None:
            return self._plan_problem(instance, entry)
        version = (instance["metadata"].get("generation"), entry.hash)
        pending = self.applied.recall(key, version)
        in_progress = (instance.get("status") or {}).get("state") == OperationState.IN_PROGRESS.value
        try:
            if step == Step.APPLY and pending is not None and in_progress:
                return self._operate(instance, entry, applied=pending)  # applied already; outcome pending
            return self._operate(instance, entry, applied=None if step == Step.APPLY else {})
        except RenderError as exc:
            return self.status.fail_or_retry(instance, exc, Reason.RENDER_FAILED)
        except Refused as exc:
            return self.status.refused(instance, exc)

    # -- steps ---------------------------------------------------------------------------------------

    def _plan_problem(self, instance: dict[str, Any], entry: PlanEntry | None) -> Outcome:
        plan_id = instance["spec"].get("planId")
        if entry is None:
            reason, error = Reason.PLAN_NOT_FOUND, f"plan {plan_id!r} is not in the catalog"
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
        meta = instance["metadata"]
        registry_name = instance_registry_name(meta["name"])
        registry = self.deps.registries.load(self.deps.kube, meta["namespace"], registry_name, meta["uid"]) or {}
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
        kube = self.deps.kube
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
            self.deps.registries.save(
                kube, name=instance_registry_name(meta["name"]), owner=instance, values=rendered.registry, labels=labels
            )
        for obj in rendered.objects:
            _, namespaced = kube.plural_of(obj.manifest["apiVersion"], obj.manifest["kind"])
            owned = namespaced and same_namespace(obj.manifest, instance)
            manifest = stamp(obj.manifest, owner=instance, labels=labels, owned=owned)
            self._apply_object(manifest, singleton=obj.singleton, owned=owned, owner=instance)
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
            self.applied.forget(("instance", instance["metadata"]["namespace"], instance["metadata"]["name"]))
            return DONE
        sources = fetch_sources(self.deps.kube, source_refs)
        result = self.deps.renderer.render_status(
            entry.model, inputs_for(self.deps, instance=instance, plan=entry, registry=registry, sources=sources)
        )
        section = result.provision
        key = ("instance", instance["metadata"]["namespace"], instance["metadata"]["name"])
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
        meta = instance["metadata"]
        self.applied.forget(("instance", meta["namespace"], meta["name"]))
        status = instance.get("status") or {}
        if status.get("state") != OperationState.IN_PROGRESS.value:
            self.status.transition(
                instance, state=OperationState.IN_PROGRESS, reason=Reason.DEPROVISIONING, description="deprovisioning"
            )
        terminating = teardown.namespace_going(kube, meta["namespace"])
        scope = decisions.teardown_scope(
            refs_of(status), namespace=meta["namespace"], namespace_terminating=terminating
        )
        remaining = [ref for ref in scope.release if release(kube, ref, owner_uid=meta["uid"])]
        done = not remaining
        if (
            scope.run_templates
            and entry is not None
            and entry.model is not None
            and entry.model.spec.template(TemplateAction.STATUS)
        ):
            try:
                registry = self.deps.registries.load(
                    kube, meta["namespace"], instance_registry_name(meta["name"]), meta["uid"], claim=False
                )
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
                        sources=fetch_sources(kube, source_refs),
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
        finalizers = [f for f in meta.get("finalizers") or [] if f != FINALIZER]
        kube.patch_custom(
            INSTANCES,
            meta["namespace"],
            meta["name"],
            {"metadata": {"finalizers": finalizers or None, "resourceVersion": meta["resourceVersion"]}},
        )
        self.deps.index.forget(("instance", meta["namespace"], meta["name"]))
        self.deps.registries.forget(meta["namespace"], instance_registry_name(meta["name"]), meta["uid"])
        return DONE

    # -- helpers -------------------------------------------------------------------------------------

    def _apply_object(self, manifest: dict[str, Any], *, singleton: bool, owned: bool, owner: dict[str, Any]) -> None:
        """Apply one rendered object. A singleton is shared by every instance of the plan: if it exists
        already it is left as it is and merely gains our owner reference, so it lives while any owner does."""
        kube = self.deps.kube
        if not singleton:
            kube.apply(manifest)
            return
        if kube.create(manifest) is not None or not owned:
            return
        ref = ref_of(manifest)
        live = kube.get(ref)
        if live is None:
            return  # deleted meanwhile: the next reconcile creates it
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
        kinds = self.deps.index.track(("instance", meta["namespace"], meta["name"]), refs)
        self.deps.watchers.ensure(kinds)
