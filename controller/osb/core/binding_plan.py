"""The pure half of reconciling an SFServiceBinding: its facts, and the plan that turns them into actions.

As :mod:`.instance_plan` for instances: every decision about a binding — wait for the instance, give up on it,
bind, read the credentials back, publish them, follow a rotation, unbind — is a function of
:class:`BindingFacts` returning actions of the one vocabulary (:mod:`.actions`). Credentials appear here only
inside the Secret manifest a :class:`~.actions.WriteSecret` carries (kept out of every ``repr``); they never
enter status, logs or events.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from opbroker.api.conventions import (
    ANNOTATION_OWNER_UID,
    CREDENTIALS_KEY,
    CREDENTIALS_SECRET_TYPE,
    LABEL_BINDING,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    credentials_secret_name,
)
from opbroker.api.meta import ResourceRef
from opbroker.api.osb import OperationState
from opbroker.controller.catalog.catalog import PlanEntry
from opbroker.controller.core import actions as a
from opbroker.controller.core import decisions
from opbroker.controller.core.decisions import Step
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.views import BindingView, InstanceView, ObjectView
from opbroker.controller.multicluster.core import placement_plan
from opbroker.controller.multicluster.core.placement_plan import PlacementFacts
from opbroker.controller.osb.core.instance_plan import (
    Held,
    Limits,
    Observed,
    OsbAction,
    Piece,
    Teardown,
    all_watched,
    count_error,
    find_drift,
    guarded_in_order,
    let_go,
    no_longer_rendered,
    orphans_of,
    pause,
    resume,
    still_in_progress,
    synced_actions,
    wait_for_budget,
    write_status,
)
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.objects import (
    Manifest,
    minus_refs,
    recorded,
    ref_dicts,
    reference_to,
    same_namespace,
    stamp,
)
from opbroker.kubeclient.wire import JsonObject
from opbroker.rendering.status import SectionStatus


def binding_field_manager(binding_name: str) -> str:
    """The field manager a binding applies its instance's objects with (so unbinding releases only its fields)."""
    return f"opbroker-binding-{binding_name}"[:128]


def followed_status(refs: Sequence[ResourceRef], digest: str) -> Manifest:
    """The status fields recording what a binding's credentials were rendered from."""
    return {"sources": ref_dicts(list(refs)), "sourcesDigest": digest}


@dataclass(frozen=True)
class BindPiece:
    """One object a ``bind`` or ``unbind`` template rendered; ``instance_own``: it is one of the instance's
    recorded objects (applied under the binding's field manager, never stamped as the binding's)."""

    piece: Piece
    instance_own: bool = False


@dataclass(frozen=True)
class BindRendering:
    """The ``bind`` template's output: what an apply writes."""

    pieces: tuple[BindPiece, ...]
    registry: JsonObject | None = dataclasses.field(default=None, repr=False)
    registry_changed: bool = False
    released: tuple[Held, ...] = ()
    """The binding's recorded objects it no longer renders, as read (what the apply lets go of)."""
    live: tuple[Held, ...] = ()
    """Each object it renders, as read before the apply (``instance_plan.guarded`` decides on it)."""


@dataclass(frozen=True)
class SecretRead:
    """The binding's credentials Secret as read before the plan writes it (``live`` None: there is none). The
    credentials go only into a Secret that does not exist or carries the binding's stamp (``decisions.takeover``):
    the plan decides it, the write merely performs it."""

    live: ObjectView | None


@dataclass(frozen=True)
class BindReport:
    """What the status template's ``bind`` section says (or, without a status template, the registries'
    credentials), what it read, and the digest of what it read (``decisions.sources_digest``)."""

    has_template: bool
    section: SectionStatus | None = None
    credentials: JsonObject = dataclasses.field(default_factory=dict, repr=False)
    source_refs: tuple[ResourceRef, ...] = ()
    digest: str = ""
    secret: SecretRead | None = None
    """The credentials Secret, read when the report gives credentials to write (None: not read)."""


@dataclass(frozen=True)
class ObservedBind:
    """Day two: one object ``bind`` renders now (the binding's own, or its part of the instance's), and the live
    object it is compared with."""

    observed: Observed
    instance_own: bool = False


@dataclass(frozen=True)
class Refresh:
    """A bound binding's check: its sources stand still (``unchanged``), or what rendering them again says."""

    unchanged: bool = False
    report: BindReport | None = None
    secret_changed: bool = False
    """The credentials Secret no longer holds what the report says (``decisions.credentials_changed``)."""
    secret: SecretRead | None = None
    """The credentials Secret as that comparison read it (None: not read)."""
    render_error: str | None = None
    observed: tuple[ObservedBind, ...] = ()
    """Day two: what ``bind`` renders now, each with its live object (compared as an instance's are)."""
    follow: tuple[ResourceRef, ...] = ()
    """The binding does not follow what its credentials were rendered from yet (after a restart, say): these
    objects, to follow. ``unchanged``: followed now, with the versions the check read (``seen``); else followed
    before the check renders (the next pass)."""
    seen: tuple[tuple[ResourceRef, str | None], ...] = ()
    """The versions an ``unchanged`` check read of what it is to follow (``a.Track.seen``)."""


@dataclass(frozen=True)
class Unbind:
    """What an unbind decides on: the teardown's facts, and the plan's templates when they ran."""

    teardown: Teardown
    templates_ran: bool = False
    pieces: tuple[BindPiece, ...] = ()
    section: SectionStatus | None = None
    applied_before: bool = False
    """This reconcile's pass before applied ``pieces``: the verdict read now is the one after them."""
    secret: SecretRead | None = None
    """The credentials Secret as read before it is deleted (None: not read — in a terminating namespace it goes
    with the namespace)."""
    live: tuple[Held, ...] = ()
    """Each object of ``pieces`` as read before they are applied (``instance_plan.guarded`` decides on it)."""


@dataclass(frozen=True)
class BindingFacts:
    """What one pass of a binding's reconcile decides on, read once."""

    key: Key
    binding: BindingView
    instance: InstanceView | None
    entry: PlanEntry | None
    pending: JsonObject | None
    """The record of an apply of this generation and plan version whose outcome is still awaited."""
    limits: Limits = dataclasses.field(default_factory=Limits)
    now: datetime.datetime = dataclasses.field(kw_only=True)
    actor: str | None = None
    rendering: BindRendering | None = None
    report: BindReport | None = None
    refresh: Refresh | None = None
    unbind: Unbind | None = None
    render_error: str | None = None
    refusal: a.Refusal | None = None
    watched_kinds: frozenset[tuple[str, str]] = frozenset()
    """The (apiVersion, kind)s whose watch is live at the read (see ``InstanceFacts.watched_kinds``)."""
    over_budget: str | None = None
    """Why the namespace may start no new operation now (see ``InstanceFacts.over_budget``)."""
    placement: PlacementFacts | None = None
    """Multi-cluster: what placing the binding depends on, as observe read it (None: one cluster). The plan's first
    branch (:func:`placed`)."""
    shard_labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Sharded (issue 46): the shard label the binding's own rendered objects carry (its instance's shard, this
    one's; empty unsharded)."""


def _paused_where(facts: BindingFacts) -> str | None:
    plan = facts.entry.view.meta if facts.entry is not None else None
    return decisions.paused_where(facts.binding.meta, plan, kind="binding")


def placed(facts: BindingFacts) -> tuple[OsbAction, ...] | None:
    """The plan's first branch: what multi-cluster placement does with the binding (handing it to its instance's
    cluster, mirroring the copy and its credentials back, deleting the copy...: :func:`.placement_plan.binding`);
    None when it is reconciled right here, as in one cluster."""
    if facts.placement is None:
        return None
    actions = placement_plan.binding(facts.placement)
    return None if actions is None else tuple(actions)


def steps(facts: BindingFacts) -> tuple[Step, ...]:
    """What the binding needs next (nothing when placement decides: :func:`placed`)."""
    if placed(facts) is not None:
        return ()
    binding, instance, entry = facts.binding, facts.instance, facts.entry
    paused = decisions.pause_step(binding.meta, binding.status, _paused_where(facts))
    if paused is not None:
        return () if paused is Step.NOTHING else (paused,)
    state = instance.status.state if instance is not None else None
    step = decisions.next_binding_step(binding, instance_state=state)
    if step == Step.NOTHING:
        return ()
    if step in (Step.ADD_FINALIZER, Step.TEARDOWN):
        return (step,)
    if step == Step.REFRESH:
        if instance is None or instance.meta.deleting or entry is None or entry.model is None:
            return ()  # the credentials stay as they are; nothing to read them from now
        return (step,)
    if instance is None or instance.meta.deleting:
        return (Step.ABANDON,)
    if step == Step.BLOCKED:
        return (Step.REPORT_INSTANCE_FAILED,) if state == OperationState.FAILED.value else (step,)
    if entry is None or entry.model is None:
        return (Step.REPORT_PLAN_PROBLEM,)
    if step == Step.APPLY and facts.pending is not None and binding.status.in_progress:
        return (Step.AWAIT_OUTCOME,)
    if step == Step.APPLY and facts.over_budget is not None and not binding.status.in_progress:
        return (Step.WAIT_FOR_BUDGET,)
    return (step,)


def plan(facts: BindingFacts) -> tuple[OsbAction, ...]:
    placement = placed(facts)
    if placement is not None:
        return placement
    out: list[OsbAction] = []
    for step in steps(facts):
        out.extend(_expand(step, facts))
    return tuple(out)


def refused(facts: BindingFacts, refusal: a.Refusal) -> tuple[a.Action, ...]:
    """What to write when the cluster refused an object (or the credentials Secret is someone else's)."""
    if Step.REFRESH in steps(facts):  # a refresh never fails the binding: the Secret keeps the last credentials
        return (a.Log(f"credentials not refreshed: {refusal.message}"),)
    if refusal.why is a.Refused.OBJECT and not refusal.permanent:
        return _count_error(facts, refusal.message, Reason.APPLY_FAILED)
    reason = Reason.APPLY_REFUSED if refusal.why is a.Refused.OBJECT else Reason.OBJECT_NOT_OWNED
    answered = {"observedGeneration": facts.binding.meta.generation}  # refused for good: no re-apply until asked
    return (_transition(facts, OperationState.FAILED, reason, error=refusal.message, extra=answered, log=True),)


def _transition(
    facts: BindingFacts,
    state: OperationState,
    reason: Reason,
    *,
    description: str = "",
    error: str | None = None,
    extra: JsonObject | None = None,
    log: bool = False,
) -> a.WriteStatus:
    return write_status(
        facts.binding, facts.now, state, reason, description=description, error=error, extra=extra, log=log
    )


def _count_error(facts: BindingFacts, message: str, reason: Reason) -> tuple[a.Action, ...]:
    return count_error(facts.binding, facts.now, facts.limits.error_threshold, message, reason)


def _expand(step: Step, facts: BindingFacts) -> Sequence[a.Action]:
    binding, instance, entry = facts.binding, facts.instance, facts.entry
    if step == Step.PAUSE:
        return pause(binding, facts.now, _paused_where(facts) or "")
    if step == Step.RESUME:
        return resume(binding, facts.now)
    if step == Step.ADD_FINALIZER:
        return (a.EnsureFinalizer(), a.Continue())
    if step == Step.TEARDOWN:
        return _unbind(facts)
    if step == Step.REFRESH:
        return _refresh(facts)
    if step == Step.ABANDON:
        # A bind that raced a deprovision (both accepted) can never complete. Left in place, it would block the
        # deprovision forever; never bound, it has nothing to undo, so it is removed.
        going = "does not exist" if instance is None else "is being deprovisioned"
        error = f"instance {binding.instance_ref!r} {going}; the binding was never completed"
        failed = _transition(facts, OperationState.FAILED, Reason.INSTANCE_NOT_FOUND, error=error)
        if binding.responded:
            return (failed,)
        return (failed, a.Delete(ResourceRef(api_version=binding.api_version, kind="SFServiceBinding",
                                             name=binding.meta.name, namespace=binding.meta.namespace)))  # fmt: skip
    if step == Step.REPORT_INSTANCE_FAILED:
        error = "the instance's last operation failed; it cannot be bound"
        return (_transition(facts, OperationState.FAILED, Reason.INSTANCE_NOT_READY, error=error),)
    if step == Step.BLOCKED:
        return (a.Requeue(facts.limits.poll_seconds),)
    if step == Step.WAIT_FOR_BUDGET:
        return wait_for_budget(binding, facts.now, facts.limits, facts.over_budget or "")
    if step == Step.REPORT_PLAN_PROBLEM:
        error = f"plan {binding.plan_id!r} is " + ("not in the catalog" if entry is None else "invalid")
        return (_transition(facts, OperationState.FAILED, Reason.PLAN_NOT_FOUND, error=error),)
    if facts.render_error is not None:
        return _count_error(facts, facts.render_error, Reason.RENDER_FAILED)
    if facts.refusal is not None:
        return refused(facts, facts.refusal)
    if step == Step.APPLY:
        return _apply(facts)
    return _evaluate(facts, applied=facts.pending if step == Step.AWAIT_OUTCOME else {})


def _stamped(facts: BindingFacts, piece: Piece, labels: Mapping[str, str]) -> Manifest:
    owned = piece.namespaced and same_namespace(piece.manifest, facts.binding.meta)
    return stamp(dict(piece.manifest), owner=facts.binding, labels=dict(labels), owned=owned)


def _labels(facts: BindingFacts) -> dict[str, str]:
    assert facts.instance is not None
    return {LABEL_INSTANCE: facts.instance.meta.name, LABEL_BINDING: facts.binding.meta.name, **facts.shard_labels}


def bind_apply(facts: BindingFacts, p: BindPiece) -> a.Apply:
    """The apply of one object ``bind`` renders: the binding's part of its instance's object under the binding's
    field manager (never creating it: the instance's object must exist), or the binding's own object, stamped and
    owned. The same for the bind and a day-two correction."""
    binding, instance = facts.binding, facts.instance
    assert instance is not None
    if p.instance_own:  # the instance's own object (the live stamp must say so)
        manager = binding_field_manager(binding.meta.name)
        return a.Apply(p.piece.manifest, instance.meta.uid, {}, field_manager=manager, as_user=facts.actor,
                       must_exist=True)  # fmt: skip
    manifest = _stamped(facts, p.piece, _labels(facts))
    return a.Apply(manifest, binding.meta.uid, {}, adopt=p.piece.adopt, as_user=facts.actor)


def _apply(facts: BindingFacts) -> tuple[a.Action, ...]:
    """Record, then apply ``bind``'s objects (the instance's own under the binding's field manager), release
    what it no longer renders, and continue: the next pass reads the outcome."""
    binding, instance, entry, rendering = facts.binding, facts.instance, facts.entry, facts.rendering
    assert instance is not None and entry is not None and rendering is not None
    meta = binding.meta
    own = [p.piece for p in rendering.pieces if not p.instance_own]
    own_refs = [piece.ref for piece in own]
    old_refs = list(binding.status.resources)
    # Each object's policy as its template says now; an object no longer rendered keeps the one recorded with it.
    new_orphans = orphans_of(own)
    orphans = [*minus_refs(list(binding.status.orphans), own_refs), *new_orphans]
    labels = _labels(facts)
    out: list[a.Action] = [
        _transition(  # record first, apply second (one write together with the move to "in progress")
            facts,
            OperationState.IN_PROGRESS,
            Reason.IN_PROGRESS,
            description="binding",
            extra={
                "resources": recorded([*old_refs, *minus_refs(own_refs, old_refs)], orphans),
                **decisions.started_operation(binding.status, at=facts.now),
            },
        )
    ]
    if rendering.registry_changed and rendering.registry is not None:
        out.append(a.SaveRegistry(rendering.registry, labels))
    applies, refusal = guarded_in_order([(bind_apply(facts, p), p.piece.ref) for p in rendering.pieces], rendering.live)
    out.extend(applies)
    if refusal is not None:
        return (*out, *refused(facts, refusal))
    gone = minus_refs(old_refs, own_refs)
    out.extend(no_longer_rendered(gone, rendering.released, binding.status.orphans, meta.uid, facts.actor))
    record = {
        "resources": recorded(own_refs, new_orphans),
        "appliedSpec": binding.spec,
        "observedGeneration": meta.generation,
        "errorCount": 0,
    }
    return (*out, a.Remember((meta.generation, entry.hash), record), a.Continue())


def credentials_secret(binding: BindingView, response: JsonObject) -> Manifest:
    """The Secret holding a binding's credentials, owned by the binding."""
    meta = binding.meta
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": CREDENTIALS_SECRET_TYPE,
        "metadata": {
            "name": credentials_secret_name(meta.name),
            "namespace": meta.namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_BINDING: meta.name},
            "annotations": {ANNOTATION_OWNER_UID: meta.uid},
            "ownerReferences": [reference_to(binding, controller=True)],
        },
        "data": {CREDENTIALS_KEY: base64.b64encode(json.dumps(dict(response)).encode()).decode()},
    }


SECRET_NOT_READ = "the credentials Secret was not read before writing it"
"""A report with credentials to write but no read of their Secret: observe's mistake, never a write unchecked."""


def secret_refusal(binding: BindingView, seen: SecretRead) -> a.Refusal | None:
    """Why the binding's credentials may not be written into the Secret of their name (None: they may): it exists
    and does not carry the binding's stamp (``decisions.takeover``, never adopted)."""
    ref = ResourceRef(
        api_version="v1",
        kind="Secret",
        name=credentials_secret_name(binding.meta.name),
        namespace=binding.meta.namespace,
    )
    if decisions.takeover(seen.live, owner_uids=(binding.meta.uid,), adopt=False) is decisions.Takeover.REFUSE:
        return a.Refusal(a.Refused.NOT_OWNED, decisions.not_owned_message(ref))
    return None


def write_secret(binding: BindingView, response: JsonObject, seen: SecretRead, actor: str | None) -> a.WriteSecret:
    """Write the credentials into their Secret, guarded by the Secret as read (``seen``, which
    :func:`secret_refusal` let it be written over): created when there was none, else written over the version
    read — a Secret made or changed since is a conflict, and the reconcile decides again on what it reads then."""
    manifest = credentials_secret(binding, response)
    if seen.live is None:
        return a.WriteSecret(manifest, as_user=actor, create=True)
    return a.WriteSecret(manifest, as_user=actor, resource_version=seen.live.meta.resource_version)


def delete_secret(binding: BindingView, seen: SecretRead, actor: str | None) -> tuple[a.Action, ...]:
    """Delete the credentials Secret as read (``seen``) when an owner reference says it is the binding's, at the
    version read (one changed since is a conflict: the reconcile decides again); another's of that name, or none,
    is left alone."""
    live, meta = seen.live, binding.meta
    if live is None or not live.meta.owned_by(meta.uid):
        return ()
    name = credentials_secret_name(meta.name)
    version = live.meta.resource_version
    return (a.DeleteSecret(meta.namespace, name, meta.uid, actor, uid=live.meta.uid or None, resource_version=version),)


def _evaluate(facts: BindingFacts, *, applied: JsonObject | None) -> tuple[a.Action, ...]:
    """Read the bind's outcome; publish the credentials once the status template reports them."""
    binding, report, entry = facts.binding, facts.report, facts.entry
    assert report is not None and entry is not None
    applied = dict(applied or {})
    refs = (*report.source_refs, *binding.status.resources)
    track = a.Track(refs)
    if not report.has_template:
        return (track, *_succeed(facts, {"credentials": dict(report.credentials)}, applied, refs, report.secret))
    section = report.section
    waiting = section is None or section.state == OperationState.IN_PROGRESS.value
    response = (section.response if section else None) or {}
    if not waiting and section is not None and section.state == OperationState.FAILED.value:
        error = section.error or section.description or "bind failed"
        return (track, a.Forget(), _transition(facts, OperationState.FAILED, Reason.FAILED, error=error, extra=applied))
    if waiting or not response.get("credentials"):
        # Not done, or "succeeded" without credentials: the objects that produce them are not there yet.
        version = (binding.meta.generation, entry.hash)
        polling = still_in_progress(
            binding, facts.now, facts.limits, applied, version, watched=all_watched(refs, facts.watched_kinds)
        )
        return (track, *polling)
    followed = followed_status(report.source_refs, report.digest)
    return (track, *_succeed(facts, response, {**applied, **followed}, refs, report.secret))


def _succeed(
    facts: BindingFacts,
    response: JsonObject,
    applied: JsonObject,
    watched: tuple[ResourceRef, ...],
    seen: SecretRead | None,
) -> tuple[a.Action, ...]:
    binding = facts.binding
    if seen is None:
        return (a.Retry(SECRET_NOT_READ),)
    refusal = secret_refusal(binding, seen)
    if refusal is not None:
        return (a.Forget(), *refused(facts, refusal))  # the Secret is someone else's: the bind fails
    bound = _transition(
        facts,
        OperationState.SUCCEEDED,
        Reason.BOUND,
        description="credentials ready",
        extra={**applied, "response": {"secretRef": credentials_secret_name(binding.meta.name)}},
    )
    # The outcome stops tracking what the status template read; a bound binding goes on following it, so that
    # its credentials follow a rotation (see _refresh).
    return (
        a.Forget(),
        write_secret(binding, response, seen, facts.actor),
        a.Unfollow(),
        bound,
        a.Track(watched),
    )


def _refresh(facts: BindingFacts) -> tuple[a.Action, ...]:
    """A bound binding: rewrite the credentials Secret only when the credentials changed at their source (a
    rotated password). Never fails the binding: while the operator reports no credentials (mid-rotation, say),
    the Secret keeps the last ones."""
    refresh, binding = facts.refresh, facts.binding
    if refresh is None:
        return ()  # registry credentials (no status template: never re-rendered)
    resync = _resync(facts)
    if refresh.unchanged:  # nothing moved (a restart's first check: followed from now on)
        return (a.Track(refresh.follow, seen=refresh.seen), *resync) if refresh.follow else resync
    if refresh.follow:
        return (a.Track(refresh.follow), a.Continue())  # follow first; the render runs on the next pass
    if refresh.render_error is not None:
        return (a.Log(f"credentials not refreshed: {refresh.render_error}"), *resync)
    report = refresh.report
    assert report is not None
    track = a.Track((*report.source_refs, *binding.status.resources))
    kept = _keep_declared(facts, refresh)
    section = report.section
    response = (section.response if section else None) or {}
    if section is None or section.state != OperationState.SUCCEEDED.value or not response.get("credentials"):
        return (track, *kept, a.Follow(report.source_refs, report.digest), *resync)
    out: list[a.Action] = [track, *kept]
    if refresh.secret_changed:
        if refresh.secret is None:
            return (*out, a.Retry(SECRET_NOT_READ))
        refusal = secret_refusal(binding, refresh.secret)
        if refusal is not None:
            return (*out, *refused(facts, refusal))  # the Secret is not the binding's: the last credentials stay
        message = "the credentials changed at their source; the credentials Secret was rewritten"
        out += [
            write_secret(binding, response, refresh.secret, facts.actor),
            a.Log(message, warning=False),
            a.Event(Reason.ROTATED.value, message),
        ]
    if refresh.secret_changed or not binding.sources_digest:
        # Recorded with a write that happens anyway (or once, for a binding bound before digests were): a source
        # merely touched writes nothing, and is checked again by rendering after a restart.
        out += [a.WriteStatus(followed_status(report.source_refs, report.digest), guarded=False), a.Unfollow()]
    else:
        out.append(a.Follow(report.source_refs, report.digest))
    return (*out, *resync)


def _resync(facts: BindingFacts) -> tuple[a.Action, ...]:
    """A bound binding's look after the resync period (none when it is 0), as an instance's."""
    seconds = decisions.resync_after(facts.binding.meta.uid, facts.limits.resync_seconds)
    return (a.Requeue(seconds),) if seconds > 0 else ()


def _keep_declared(facts: BindingFacts, refresh: Refresh) -> list[a.Action]:
    """Day two for a bound binding: what ``bind`` renders now compared with the live objects, set back or reported
    per its template's ``drift`` (``instance_plan.find_drift``, as for instances); ``Synced`` when it changes. An
    object corrected is followed up after the backoff (its own write's echo brings nothing back)."""
    now = facts.now
    pairs = [(seen.observed, bind_apply(facts, BindPiece(seen.observed.piece, seen.instance_own)))
             for seen in refresh.observed]  # fmt: skip
    findings = find_drift(pairs, now, facts.limits.drift_bounds)
    if findings.refusal is not None:
        return [*findings.corrections, *refused(facts, findings.refusal)]
    out: list[a.Action] = [*findings.corrections, *synced_actions(facts.binding, findings.synced, now)]
    waits = [*findings.waits, *((facts.limits.drift_bounds.backoff.base,) if findings.corrections else ())]
    if waits:
        out.append(a.Requeue(max(0.5, min(waits))))
    return out


def _unbind(facts: BindingFacts) -> tuple[a.Action, ...]:
    """Unbind: apply ``unbind``'s objects, wait for the status template's verdict and for what is released,
    then delete the credentials and the registry and drop the finalizer."""
    binding, unbind = facts.binding, facts.unbind
    assert unbind is not None
    meta = binding.meta
    out: list[a.Action] = [a.Forget()]
    if not binding.status.in_progress:
        out.append(_transition(facts, OperationState.IN_PROGRESS, Reason.UNBINDING, description="unbinding"))
    gathered = unbind.teardown
    scope = decisions.teardown_scope(
        list(binding.status.resources), namespace=meta.namespace, namespace_terminating=gathered.terminating
    )
    done = True
    if unbind.templates_ran:
        if facts.render_error is not None:
            return (*out, *_count_error(facts, facts.render_error, Reason.RENDER_FAILED))
        if unbind.pieces and not unbind.applied_before:
            assert facts.instance is not None
            labels, manager = _labels(facts), binding_field_manager(meta.name)
            asked: list[tuple[a.Apply, ResourceRef]] = []
            for p in unbind.pieces:
                # An object of the unbind's own (a Job that drops a database role) is stamped and owned like a
                # bind object, so the next pass may apply it again and the binding's deletion takes it along.
                manifest = p.piece.manifest if p.instance_own else _stamped(facts, p.piece, labels)
                apply = a.Apply(manifest, meta.uid, {}, adopt=p.piece.adopt, as_user=facts.actor,
                                co_owners=(facts.instance.meta.uid,), field_manager=manager,
                                must_exist=p.instance_own)  # fmt: skip
                asked.append((apply, p.piece.ref))
            applies, refusal = guarded_in_order(asked, unbind.live)
            out.extend(applies)
            if refusal is not None:
                return (*out, *refused(facts, refusal))
            return (*out, a.Continue())  # the verdict is read after them, on the next pass
        section = unbind.section
        if section is not None:
            if section.state == OperationState.FAILED.value:
                error = section.error or "unbind failed"
                return (*out, _transition(facts, OperationState.FAILED, Reason.FAILED, error=error))
            done = section.state == OperationState.SUCCEEDED.value
    letting = let_go(scope.release, gathered, binding.status.orphans, meta.uid, facts.actor)
    out.extend(letting.actions)
    if not done or letting.waiting:
        return (*out, a.Requeue(facts.limits.poll_seconds))
    if letting.orphaned:
        out.append(a.Event(Reason.ORPHANED.value, decisions.orphaned_message(letting.orphaned, why="unbound")))
    if gathered.terminating:
        message = decisions.terminating_teardown_message(meta.namespace, scope)
        out.append(a.Event(Reason.NAMESPACE_TERMINATING.value, message))
    else:
        # In a terminating namespace the credentials Secret goes with it — and the plan account's grant there (a
        # RoleBinding of that namespace) may already be gone, so deleting it would be refused for ever.
        seen = unbind.secret
        if seen is None:
            return (*out, a.Retry(SECRET_NOT_READ))
        out.extend(delete_secret(binding, seen, facts.actor))
    return (
        *out,
        a.DropRegistry(),
        a.EnsureFinalizer(present=False),
        a.ForgetObject(),
    )
