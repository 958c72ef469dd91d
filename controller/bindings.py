"""Reconciling SFServiceBindings: render ``bind``, read the credentials back, keep them in a Secret.

Credentials are only published once the plan's status template reports the bind ``succeeded`` *with* a
response, i.e. once the objects that produce them exist — never frozen early. They live in a Secret
owned by the binding (``status.response.secretRef``); they never enter status, logs or events.

Bind templates often change an object of the instance (the seed's Zalando plan adds a database user to
the instance's ``postgresql``). Such shared objects are applied under a field manager of the binding's
own, so unbinding releases exactly the binding's fields and never deletes the instance's object.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from opbroker.api import TemplateAction
from opbroker.api.conventions import (
    ANNOTATION_OWNER_UID,
    CREDENTIALS_KEY,
    CREDENTIALS_SECRET_TYPE,
    FINALIZER,
    LABEL_BINDING,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    credentials_secret_name,
    resource_name,
)
from opbroker.api.meta import ResourceRef
from opbroker.api.osb import OperationState
from opbroker.controller import decisions, finalizers, identities, registries, teardown
from opbroker.controller.catalog import PlanEntry
from opbroker.controller.decisions import Step
from opbroker.controller.kube import BINDINGS, INSTANCES, Kube, Refused, ref_of
from opbroker.controller.objects import (
    minus_refs,
    owner_reference,
    ref_dicts,
    ref_key,
    refs_of,
    resource_version,
    same_namespace,
    stamp,
)
from opbroker.controller.ownership import NotOwned, apply_owned, release
from opbroker.controller.reasons import Reason
from opbroker.controller.reconciler import DONE, Key, Memories, ObservePlanAct, Outcome, PerKey
from opbroker.controller.reconciling import AppliedMemory, Deps, StatusWriter
from opbroker.controller.rendered import fetch_sources, inputs_for
from opbroker.rendering import RenderError

logger = logging.getLogger(__name__)

#: How long a bound binding's check waits for the first listing of its sources' kinds (after a restart):
#: until then the store does not know them, and each check would read its sources with GETs.
LISTING_WAIT_SECONDS = 30.0


def delete_credentials(kube: Kube, binding: dict[str, Any]) -> None:
    """Delete the binding's credentials Secret as the binding goes (only the one it owns).

    The owner reference would let the garbage collector do it too, but in its own time: on a young cluster
    it learns of a new custom resource kind only at its next discovery resync (30 s), and until then the
    credentials of a binding that no longer exists would stay readable.
    """
    meta = binding["metadata"]
    secret = kube.read_secret(meta["namespace"], credentials_secret_name(meta["name"]))
    if secret is None:
        return
    owners = secret["metadata"].get("ownerReferences") or []
    if any(owner.get("uid") == meta["uid"] for owner in owners):
        kube.delete_secret(meta["namespace"], secret["metadata"]["name"], uid=secret["metadata"].get("uid"))


def followed_status(followed: tuple[tuple[ResourceRef, ...], str]) -> dict[str, Any]:
    """The status fields recording what a binding's credentials were rendered from."""
    refs, digest = followed
    return {"sources": ref_dicts(list(refs)), "sourcesDigest": digest}


def binding_field_manager(binding_name: str) -> str:
    return f"opbroker-binding-{binding_name}"[:128]


@dataclass(frozen=True)
class BindingFacts:
    """What one reconcile of a binding decides on, read once."""

    key: Key
    body: dict[str, Any]
    instance: dict[str, Any] | None
    entry: PlanEntry | None
    pending: dict[str, Any] | None
    """The record of an apply of this generation and plan version whose outcome is still awaited."""

    @property
    def instance_state(self) -> str | None:
        state: str | None = ((self.instance or {}).get("status") or {}).get("state")
        return state


class BindingReconciler(ObservePlanAct[BindingFacts, Step]):
    kind: ClassVar[str] = "binding"

    def __init__(self, deps: Deps, memories: Memories) -> None:
        self.deps = deps
        self.status = StatusWriter(deps, BINDINGS)
        self.applied = memories.keep(AppliedMemory())
        self.followed: PerKey[tuple[tuple[ResourceRef, ...], str]] = memories.keep(PerKey())
        """For bound bindings: the sources and digest (see ``decisions.sources_digest``) of the credentials
        as last checked by a refresh, when that wrote nothing (``status.sourcesDigest`` stays as it was)."""

    def reconcile(self, key: Key) -> Outcome:
        facts = self.observe(key)
        if facts is None:
            return DONE
        placed = self.deps.placement.binding(facts.body)  # multi-cluster: reconciled in the instance's cluster
        if placed is not None:
            return placed
        return self.act(facts, self.plan(facts))

    def observe(self, key: Key) -> BindingFacts | None:
        kube = self.deps.kube
        binding = kube.get_custom(BINDINGS, key.namespace, key.name)
        if binding is None:
            return None
        instance = kube.get_custom(INSTANCES, key.namespace, resource_name(binding["spec"]["instanceId"]))
        entry = self.deps.catalog.plan((instance or binding).get("spec", {}).get("planId", ""))
        version = (binding["metadata"].get("generation"), entry.hash if entry else None)
        return BindingFacts(key, binding, instance, entry, self.applied.recall(key, version))

    @staticmethod
    def plan(facts: BindingFacts) -> Sequence[Step]:
        step = decisions.next_binding_step(facts.body, instance_state=facts.instance_state)
        if step in (Step.NOTHING,):
            return ()
        if step in (Step.ADD_FINALIZER, Step.TEARDOWN):
            return (step,)
        if step == Step.REFRESH:
            instance, entry = facts.instance, facts.entry
            if instance is None or decisions.is_deleting(instance) or entry is None or entry.model is None:
                return ()  # the credentials stay as they are; nothing to read them from now
            return (step,)
        if facts.instance is None or decisions.is_deleting(facts.instance):
            return (Step.ABANDON,)
        if step == Step.BLOCKED:
            return (Step.REPORT_INSTANCE_FAILED,) if facts.instance_state == OperationState.FAILED.value else (step,)
        if facts.entry is None or facts.entry.model is None:
            return (Step.REPORT_PLAN_PROBLEM,)
        in_progress = (facts.body.get("status") or {}).get("state") == OperationState.IN_PROGRESS.value
        if step == Step.APPLY and facts.pending is not None and in_progress:
            return (Step.AWAIT_OUTCOME,)
        return (step,)

    def act(self, facts: BindingFacts, actions: Sequence[Step]) -> Outcome:
        kube = self.deps.kube
        binding, instance, entry = facts.body, facts.instance, facts.entry
        namespace, name = facts.key.namespace, facts.key.name
        for step in actions:
            if step == Step.ADD_FINALIZER:
                patch = finalizers.adding(binding["metadata"], FINALIZER)
                if patch is not None:
                    kube.patch_custom(BINDINGS, namespace, name, patch)
                return self.reconcile(facts.key)
            if step == Step.TEARDOWN:
                return self._teardown(binding, instance, entry)
            if step == Step.REFRESH:
                assert instance is not None and entry is not None
                return self._refresh(binding, instance, entry)
            if step == Step.ABANDON:
                # A bind that raced a deprovision (both accepted) can never complete. Left in place, it would
                # block the deprovision forever; never bound, it has nothing to undo, so it is removed.
                going = "does not exist" if instance is None else "is being deprovisioned"
                self.status.transition(
                    binding,
                    state=OperationState.FAILED,
                    reason=Reason.INSTANCE_NOT_FOUND,
                    error=f"instance {binding['spec']['instanceId']!r} {going}; the binding was never completed",
                )
                if not (binding.get("status") or {}).get("response"):
                    kube.delete_custom(BINDINGS, namespace, name)
                return DONE
            if step == Step.REPORT_INSTANCE_FAILED:
                self.status.transition(
                    binding,
                    state=OperationState.FAILED,
                    reason=Reason.INSTANCE_NOT_READY,
                    error="the instance's last operation failed; it cannot be bound",
                )
                return DONE
            if step == Step.BLOCKED:
                return Outcome(requeue_after=self.deps.settings.status_poll_seconds)
            if step == Step.REPORT_PLAN_PROBLEM:
                error = f"plan {binding['spec'].get('planId')!r} is " + (
                    "not in the catalog" if entry is None else "invalid"
                )
                self.status.transition(binding, state=OperationState.FAILED, reason=Reason.PLAN_NOT_FOUND, error=error)
                return DONE
            assert instance is not None and entry is not None and entry.model is not None
            try:
                version = (binding["metadata"].get("generation"), entry.hash)
                pending = facts.pending
                if step == Step.APPLY:
                    pending = self._apply(binding, instance, entry)
                outcome = self._evaluate(binding, instance, entry, pending or {})
                if outcome.requeue_after is not None and pending:
                    self.applied.remember(facts.key, version, pending)  # recorded with the outcome (AppliedMemory)
                else:
                    self.applied.forget(facts.key)
                return outcome
            except RenderError as exc:
                return self.status.fail_or_retry(binding, exc, Reason.RENDER_FAILED)
            except Refused as exc:
                return self.status.refused(binding, exc)
            except NotOwned as exc:
                self.status.transition(
                    binding, state=OperationState.FAILED, reason=Reason.OBJECT_NOT_OWNED, error=str(exc)
                )
                return DONE
        return DONE

    def reread(self, key: Key) -> None:
        self.deps.kube.store.discard(BINDINGS.store_key, key.namespace, key.name)

    # -- steps ---------------------------------------------------------------------------------------

    def _actor(self, entry: PlanEntry | None) -> Kube:
        """The door a plan's work goes through: its ServiceAccount's rights (see ``identities``)."""
        if entry is None:
            return self.deps.kube
        return self.deps.kube.acting_as(identities.plan_user(entry.body, self.deps.settings))

    def _place(self, owner: dict[str, Any], kind: str) -> registries.Place:
        """Where a registry is kept: the registry namespace, which consumers cannot read."""
        return registries.place(owner, kind=kind, namespace=self.deps.settings.registries_namespace)

    def _registries(
        self, binding: dict[str, Any], instance: dict[str, Any], entry: PlanEntry
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        kube, legacy, cache = self.deps.kube, self._actor(entry), self.deps.registries
        instance_registry = cache.load(kube, self._place(instance, "instance"), legacy=legacy)
        binding_registry = cache.load(kube, self._place(binding, "binding"), legacy=legacy)
        return instance_registry, binding_registry

    def _inputs(
        self, binding: dict[str, Any], instance: dict[str, Any], entry: PlanEntry, sources: dict[str, Any] | None = None
    ) -> Any:
        instance_registry, binding_registry = self._registries(binding, instance, entry)
        return inputs_for(
            self.deps,
            instance=instance,
            plan=entry,
            registry=instance_registry,
            binding=binding,
            binding_registry=binding_registry,
            sources=sources,
        )

    def _apply(self, binding: dict[str, Any], instance: dict[str, Any], entry: PlanEntry) -> dict[str, Any]:
        """Render and apply ``bind``; returns the status fields recording it (written with the next state)."""
        assert entry.model is not None
        kube = self._actor(entry)
        meta = binding["metadata"]
        inputs = self._inputs(binding, instance, entry)
        sources = fetch_sources(kube, self.deps.renderer.render_sources(entry.model, inputs))
        rendered = self.deps.renderer.render_objects(
            entry.model, TemplateAction.BIND, self._inputs(binding, instance, entry, sources)
        )
        instance_refs = {ref_key(ref) for ref in refs_of(instance.get("status"))}
        own_refs = [ref_of(o.manifest) for o in rendered.objects if ref_key(ref_of(o.manifest)) not in instance_refs]
        old_refs = refs_of(binding.get("status"))
        # Record first, apply second (one write together with the move to "in progress").
        self.status.transition(
            binding,
            state=OperationState.IN_PROGRESS,
            reason=Reason.IN_PROGRESS,
            description="binding",
            extra={
                "resources": ref_dicts([*old_refs, *minus_refs(own_refs, old_refs)]),
                **decisions.started_operation(binding),
            },
        )
        labels = {LABEL_INSTANCE: instance["metadata"]["name"], LABEL_BINDING: meta["name"]}
        if rendered.binding_registry is not None and rendered.binding_registry != inputs.binding_registry:
            self.deps.registries.save(
                self.deps.kube, self._place(binding, "binding"), rendered.binding_registry, labels
            )
        for obj in rendered.objects:
            ref = ref_of(obj.manifest)
            if ref_key(ref) in instance_refs:  # the instance's own object (the live stamp must say so)
                apply_owned(
                    kube,
                    obj.manifest,
                    owner_uids=(instance["metadata"]["uid"],),
                    field_manager=binding_field_manager(meta["name"]),
                )
                continue
            _, namespaced = kube.plural_of(ref.api_version, ref.kind)
            owned = namespaced and same_namespace(obj.manifest, binding)
            manifest = stamp(obj.manifest, owner=binding, labels=labels, owned=owned)
            apply_owned(kube, manifest, owner_uids=(meta["uid"],), adopt=obj.adopt)
        for gone in minus_refs(old_refs, own_refs):
            release(kube, gone, owner_uid=meta["uid"])
        return {
            "resources": ref_dicts(own_refs),
            "appliedSpec": binding.get("spec"),
            "observedGeneration": meta.get("generation"),
            "errorCount": 0,
        }

    def _evaluate(
        self, binding: dict[str, Any], instance: dict[str, Any], entry: PlanEntry, applied: dict[str, Any]
    ) -> Outcome:
        assert entry.model is not None
        kube = self._actor(entry)
        inputs = self._inputs(binding, instance, entry)
        source_refs = self.deps.renderer.render_sources(entry.model, inputs)
        watched = [*source_refs.values(), *refs_of(binding.get("status"))]
        self._watch(binding, watched)
        if entry.model.spec.template(TemplateAction.STATUS) is None:
            credentials = (
                (inputs.binding_registry or {}).get("credentials") or (inputs.registry or {}).get("credentials") or {}
            )
            return self._succeed(binding, {"credentials": credentials}, applied, watched, kube)
        fetched = fetch_sources(kube, source_refs)
        result = self.deps.renderer.render_status(entry.model, self._inputs(binding, instance, entry, fetched))
        section = result.bind
        waiting = section is None or section.state == OperationState.IN_PROGRESS.value
        response = (section.response if section else None) or {}
        if not waiting and section is not None and section.state == OperationState.FAILED.value:
            self.status.transition(
                binding,
                state=OperationState.FAILED,
                reason=Reason.FAILED,
                error=section.error or section.description or "bind failed",
                extra=applied,
            )
            return DONE
        if waiting or not response.get("credentials"):
            # Not done, or "succeeded" without credentials: the objects that produce them are not there yet.
            return self.status.still_in_progress(binding, extra=applied)
        followed = self._followed(binding, instance, entry, source_refs, fetched)
        return self._succeed(binding, response, {**applied, **followed_status(followed)}, watched, kube)

    def _succeed(
        self,
        binding: dict[str, Any],
        response: dict[str, Any],
        applied: dict[str, Any],
        watched: list[ResourceRef],
        kube: Kube,
    ) -> Outcome:
        secret_name = self._write_credentials(binding, response, kube)
        self.followed.forget(Key("binding", binding["metadata"]["namespace"], binding["metadata"]["name"]))
        self.status.transition(
            binding,
            state=OperationState.SUCCEEDED,
            reason=Reason.BOUND,
            description="credentials ready",
            extra={**applied, "response": {"secretRef": secret_name}},
        )
        # The transition stopped tracking what the status template read (an outcome); a bound binding goes
        # on following it, so that its credentials follow a rotation (see _refresh).
        self._watch(binding, watched)
        return DONE

    def _write_credentials(self, binding: dict[str, Any], response: dict[str, Any], kube: Kube) -> str:
        """Write the credentials Secret (as the plan's account: a write into the consumer's namespace) — never
        over a Secret of that name that this binding did not make."""
        meta = binding["metadata"]
        secret_name = credentials_secret_name(meta["name"])
        live = kube.read_secret(meta["namespace"], secret_name, stored=True)
        if decisions.takeover(live, owner_uids=(meta["uid"],), adopt=False) is decisions.Takeover.REFUSE:
            raise NotOwned(ResourceRef(api_version="v1", kind="Secret", name=secret_name, namespace=meta["namespace"]))
        kube.apply_secret(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": CREDENTIALS_SECRET_TYPE,
                "metadata": {
                    "name": secret_name,
                    "namespace": meta["namespace"],
                    "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_BINDING: meta["name"]},
                    "annotations": {ANNOTATION_OWNER_UID: meta["uid"]},
                    "ownerReferences": [owner_reference(binding, controller=True)],
                },
                "data": {CREDENTIALS_KEY: base64.b64encode(json.dumps(response).encode()).decode()},
            }
        )
        return secret_name

    def _refresh(self, binding: dict[str, Any], instance: dict[str, Any], entry: PlanEntry) -> Outcome:
        """A bound binding: render its credentials again from what the status template reads now, and
        rewrite the credentials Secret only when they changed (a rotated password). Never fails the binding:
        while the operator reports no credentials (mid-rotation, say), the Secret keeps the last ones.

        Rendered again only when something they are rendered from moved (``decisions.sources_digest``
        against the digest recorded when they were last written or checked): a restart over thousands of
        bound bindings then reads no registry and no Secret, and renders nothing."""
        assert entry.model is not None
        if entry.model.spec.template(TemplateAction.STATUS) is None:
            return DONE  # registry credentials: generated once, never re-rendered
        kube = self._actor(entry)
        meta = binding["metadata"]
        key = Key("binding", meta["namespace"], meta["name"])
        if self._unchanged(key, binding, instance, entry):
            return DONE
        try:
            inputs = self._inputs(binding, instance, entry)
            source_refs = self.deps.renderer.render_sources(entry.model, inputs)
            self._watch(binding, [*source_refs.values(), *refs_of(binding.get("status"))])
            fetched = fetch_sources(kube, source_refs)
            result = self.deps.renderer.render_status(entry.model, self._inputs(binding, instance, entry, fetched))
        except RenderError as exc:
            logger.warning("binding %s/%s: credentials not refreshed: %s", meta["namespace"], meta["name"], exc)
            return DONE
        followed = self._followed(binding, instance, entry, source_refs, fetched)
        section = result.bind
        response = (section.response if section else None) or {}
        if section is None or section.state != OperationState.SUCCEEDED.value or not response.get("credentials"):
            self.followed.put(key, followed)
            return DONE
        secret_ref = ResourceRef(
            api_version="v1", kind="Secret", name=credentials_secret_name(meta["name"]), namespace=meta["namespace"]
        )
        changed = decisions.credentials_changed(kube.get(secret_ref), response)
        if changed:
            try:
                self._write_credentials(binding, response, kube)
            except NotOwned as exc:
                logger.warning("binding %s/%s: credentials not refreshed: %s", meta["namespace"], meta["name"], exc)
                return DONE
            message = "the credentials changed at their source; the credentials Secret was rewritten"
            logger.info("binding %s/%s: %s", meta["namespace"], meta["name"], message)
            self.deps.kube.emit_event(binding, reason=Reason.ROTATED.value, message=message)
        if changed or not (binding.get("status") or {}).get("sourcesDigest"):
            # Recorded with a write that happens anyway (or once, for a binding bound before digests were):
            # a source merely touched writes nothing, and is checked again by rendering after a restart.
            self.status.patch(binding, followed_status(followed), guarded=False)
            self.followed.forget(key)
        else:
            self.followed.put(key, followed)
        return DONE

    def _unchanged(self, key: Key, binding: dict[str, Any], instance: dict[str, Any], entry: PlanEntry) -> bool:
        """True if what the credentials were last rendered from is still what it was (the digest matches);
        also makes sure the binding follows its sources again (after a restart it is not tracked yet)."""
        status = binding.get("status") or {}
        remembered = self.followed.get(key)
        if remembered is not None:
            refs, digest = remembered
        elif status.get("sourcesDigest") and isinstance(status.get("sources"), list):
            refs, digest = tuple(ResourceRef.model_validate(raw) for raw in status["sources"]), status["sourcesDigest"]
        else:
            return False
        kinds = self._watch(binding, [*refs, *refs_of(status)])
        self.deps.watchers.wait_listed({(ref.api_version, ref.kind) for ref in refs} & kinds, LISTING_WAIT_SECONDS)
        versions = [(ref, self.deps.kube.version_of(ref)) for ref in refs]
        current = decisions.sources_digest(plan_hash=entry.hash, instance=instance, binding=binding, versions=versions)
        return current == digest

    def _followed(
        self,
        binding: dict[str, Any],
        instance: dict[str, Any],
        entry: PlanEntry,
        source_refs: dict[str, ResourceRef],
        fetched: dict[str, dict[str, Any] | None],
    ) -> tuple[tuple[ResourceRef, ...], str]:
        """The sources the credentials were just rendered from, and their digest (``decisions.sources_digest``)."""
        versions = [(ref, resource_version(fetched.get(name))) for name, ref in source_refs.items()]
        digest = decisions.sources_digest(plan_hash=entry.hash, instance=instance, binding=binding, versions=versions)
        return tuple(source_refs.values()), digest

    def _teardown(self, binding: dict[str, Any], instance: dict[str, Any] | None, entry: PlanEntry | None) -> Outcome:
        kube = self.deps.kube
        actor = self._actor(entry)
        meta = binding["metadata"]
        self.applied.forget(Key("binding", meta["namespace"], meta["name"]))
        status = binding.get("status") or {}
        if status.get("state") != OperationState.IN_PROGRESS.value:
            self.status.transition(
                binding, state=OperationState.IN_PROGRESS, reason=Reason.UNBINDING, description="unbinding"
            )
        terminating = teardown.namespace_going(kube, meta["namespace"])
        scope = decisions.teardown_scope(
            refs_of(status), namespace=meta["namespace"], namespace_terminating=terminating
        )
        done = True
        if scope.run_templates and instance is not None and entry is not None and entry.model is not None:
            try:
                inputs = self._inputs(binding, instance, entry)
                source_refs = self.deps.renderer.render_sources(entry.model, inputs)
                sources = fetch_sources(actor, source_refs)
                if entry.model.spec.template(TemplateAction.UNBIND) is not None:
                    rendered = self.deps.renderer.render_objects(
                        entry.model, TemplateAction.UNBIND, self._inputs(binding, instance, entry, sources)
                    )
                    instance_refs = {ref_key(ref) for ref in refs_of(instance.get("status"))}
                    labels = {LABEL_INSTANCE: instance["metadata"]["name"], LABEL_BINDING: meta["name"]}
                    for obj in rendered.objects:
                        manifest = obj.manifest
                        ref = ref_of(manifest)
                        if ref_key(ref) not in instance_refs:
                            # An object of the unbind's own (a Job that drops a database role): stamped and owned
                            # like a bind object, so the next pass (the status template waits for it) may apply it
                            # again and the binding's deletion takes it along.
                            _, namespaced = actor.plural_of(ref.api_version, ref.kind)
                            owned = namespaced and same_namespace(manifest, binding)
                            manifest = stamp(manifest, owner=binding, labels=labels, owned=owned)
                        apply_owned(
                            actor,
                            manifest,
                            owner_uids=(meta["uid"], instance["metadata"]["uid"]),
                            adopt=obj.adopt,
                            field_manager=binding_field_manager(meta["name"]),
                        )
                if entry.model.spec.template(TemplateAction.STATUS) is not None:
                    result = self.deps.renderer.render_status(
                        entry.model, self._inputs(binding, instance, entry, fetch_sources(actor, source_refs))
                    )
                    if result.unbind is not None:
                        if result.unbind.state == OperationState.FAILED.value:
                            self.status.transition(
                                binding,
                                state=OperationState.FAILED,
                                reason=Reason.FAILED,
                                error=result.unbind.error or "unbind failed",
                            )
                            return DONE
                        done = result.unbind.state == OperationState.SUCCEEDED.value
            except RenderError as exc:
                return self.status.fail_or_retry(binding, exc, Reason.RENDER_FAILED)
            except NotOwned as exc:
                self.status.transition(
                    binding, state=OperationState.FAILED, reason=Reason.OBJECT_NOT_OWNED, error=str(exc)
                )
                return DONE
        remaining = [ref for ref in scope.release if release(actor, ref, owner_uid=meta["uid"])]
        if remaining or not done:
            return Outcome(requeue_after=self.deps.settings.status_poll_seconds)
        if terminating:
            teardown.announce(kube, binding, scope)
        delete_credentials(actor, binding)
        place = self._place(binding, "binding")
        registries.delete(kube, place)  # its own namespace's: no owner reference can take it along
        self.deps.registries.forget(place)
        meta = binding["metadata"]  # as last written: the status write above replaced the object's contents
        patch = finalizers.removing(meta, FINALIZER)
        if patch is not None:
            kube.patch_custom(BINDINGS, meta["namespace"], meta["name"], patch)
        self.deps.index.forget(Key("binding", meta["namespace"], meta["name"]))
        return DONE

    def _watch(self, binding: dict[str, Any], refs: list[Any]) -> set[tuple[str, str]]:
        meta = binding["metadata"]
        kinds = self.deps.index.track(Key("binding", meta["namespace"], meta["name"]), refs)
        self.deps.watchers.ensure(kinds)
        return kinds
