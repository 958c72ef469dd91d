"""The effects of the OSB kinds (SFServiceInstance, SFServiceBinding): what their plans do beyond the executor's
generic actions — rendered objects applied and orphaned under the ownership rules, the credentials
Secret, the per-instance registry, the objects a status template follows, the apply record
kept in memory.

Each effect performs its action the same way every time and decides nothing: the plan said what, from what observe
read, the rules in :mod:`.ownership` say whether the cluster lets it (a refusal stops the list, see
:mod:`.executor`). Where a write finds what observe could not see (a singleton's create finds it made meanwhile),
the effect raises a conflict: the reconcile observes again and the plan decides.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from opbroker.api.conventions import LABEL_INSTANCE
from opbroker.api.meta import ResourceRef
from opbroker.controller.core import actions as a
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.views import ObjectView
from opbroker.controller.osb import ownership, registries, singletons
from opbroker.controller.osb.core import drift
from opbroker.controller.osb.ownership import orphan
from opbroker.controller.osb.reconciling import AppliedMemory, DayTwo, Deps
from opbroker.controller.runtime import metrics
from opbroker.controller.runtime.executor import Effect, Executor, Run, Target
from opbroker.controller.runtime.kube import Kind, Kube, ref_of
from opbroker.controller.runtime.memory import PerKey
from opbroker.controller.runtime.objects import ref_key, resource_version
from opbroker.controller.runtime.outcomes import Conflict
from opbroker.kubeclient.wire import JsonObject


def osb_executor(
    deps: Deps,
    kind: Kind,
    key_kind: str,
    memory: AppliedMemory,
    followed: PerKey[tuple[tuple[ResourceRef, ...], str]] | None = None,
    *,
    day_two: PerKey[DayTwo] | None = None,
) -> Executor:
    """The executor of an instance or binding reconciler (``kind``: its API resource; ``key_kind``: its key), with
    multi-cluster placement's own effects when it is on (``Deps.placement``: none in one cluster)."""
    target = Target(
        deps.kube, kind, key_kind, own_writes=deps.own_writes, forget=deps.index.forget, wrote=deps.index.wrote
    )
    return Executor(target, {**osb_effects(deps, memory, followed, day_two=day_two), **deps.placement.effects(kind)})


def osb_effects(
    deps: Deps,
    memory: AppliedMemory,
    followed: PerKey[tuple[tuple[ResourceRef, ...], str]] | None = None,
    *,
    day_two: PerKey[DayTwo] | None = None,
) -> Mapping[type, Effect]:
    """The instance and binding actions, bound to the controller's dependencies."""
    checks: PerKey[DayTwo] = day_two if day_two is not None else PerKey()

    def correct(run: Run, action: a.Correct) -> None:
        """Set a drifted object back; only a write that changed it is an Event and counts for the fight bound."""
        ref = ref_of(dict(action.apply.manifest))
        before = run.actor(action.apply.as_user).version_of(ref)
        written = apply(run, action.apply)
        after = resource_version(written)
        if written is None or after == before:
            return  # nothing changed: a value the API server normalises, or a singleton left as it is
        memo = checks.get(run.key) or DayTwo()
        when = action.at
        key = ref_key(ref)
        corrections = {k: v for k, v in memo.corrections.items() if k != key}
        corrections[key] = (*memo.corrections.get(key, ())[-8:], when)
        checks.put(run.key, dataclasses.replace(memo, corrections=corrections, digest="", versions=(), shapes={}))
        run.perform(a.Event(Reason.DRIFT_CORRECTED.value, drift.drift_message(ref, action.fields, corrected=True)))

    def checked(run: Run, action: a.Checked) -> None:
        memo = checks.get(run.key) or DayTwo()
        last = action.at if action.live_written else memo.last_live_write
        shapes = {key: shape for key, shape in action.shapes.items() if shape is not None}
        remembered = dataclasses.replace(
            memo, refs=action.refs, versions=action.versions, digest=action.digest, shapes=shapes, last_live_write=last
        )
        checks.put(run.key, remembered)

    def report_health(run: Run, action: a.ReportHealth) -> None:
        metrics.observe_health(run.key, action.health)

    def place(run: Run) -> registries.Place:
        """Where the object's registry is kept: the registry namespace, which consumers cannot read."""
        return registries.place(
            ObjectView.of(run.body).meta, kind=run.target.key_kind, namespace=deps.settings.registries_namespace
        )

    def save_registry(run: Run, action: a.SaveRegistry) -> None:
        where = place(run)
        # Sharded, the registry carries its instance's shard: each shard lists only its own registries' bodies at
        # start (app: ``own_bodies``). One written before M changed keeps its old shard until it is written again:
        # its shard then reads it with a GET, as any Secret whose body it does not hold.
        shard = deps.settings.shards.label(where.owner_namespace, action.labels.get(LABEL_INSTANCE, where.owner_name))
        deps.registries.save(deps.kube, where, dict(action.registry), {**action.labels, **shard})

    def drop_registry(run: Run, action: a.DropRegistry) -> None:
        where = place(run)
        registries.delete(deps.kube, where)  # its own namespace's: no owner reference can take it along
        deps.registries.forget(where)

    def track(run: Run, action: a.Track) -> None:
        deps.watchers.ensure(deps.index.track(run.key, list(action.refs)))
        if any(deps.kube.version_of(ref) != version for ref, version in action.seen):
            run.perform(a.Requeue(0.0))  # moved before it was followed: no event will bring it

    def follow(run: Run, action: a.Follow) -> None:
        if followed is not None:
            followed.put(run.key, (action.refs, action.digest))

    def unfollow(run: Run, action: a.Unfollow) -> None:
        if followed is not None:
            followed.forget(run.key)

    return {
        a.Apply: lambda run, action: void(apply(run, action)),
        a.Orphan: orphan_object,
        a.JoinSingleton: perform_singleton,
        a.ShareSingleton: perform_singleton,
        a.LeaveSingleton: perform_singleton,
        a.DeleteSingleton: perform_singleton,
        a.WriteSecret: write_secret,
        a.DeleteSecret: delete_secret,
        a.Follow: follow,
        a.Unfollow: unfollow,
        a.SaveRegistry: save_registry,
        a.DropRegistry: drop_registry,
        a.Track: track,
        a.Remember: lambda run, action: memory.remember(run.key, action.version, dict(action.record)),
        a.Correct: correct,
        a.Checked: checked,
        a.ReportHealth: report_health,
        a.Forget: lambda run, action: memory.forget(run.key),
    }


def perform_singleton(run: Run, action: singletons.SingletonWrite) -> None:
    """A shared singleton's join or leave, as :mod:`.core.singleton_plan` decided it (guarded by the version read)."""
    singletons.perform(run.actor(action.as_user), action)


def orphan_object(run: Run, action: a.Orphan) -> None:
    """Let the object go as the plan decided (its patch carries the version it was decided on)."""
    orphan(run.actor(action.as_user), action.ref, action.patch, owner_uid=action.owner_uid)


def write_secret(run: Run, action: a.WriteSecret) -> None:
    """Write the Secret; whether it may be written was the plan's decision (``binding_plan.secret_refusal``), and
    the write is guarded by the Secret it decided on (a 409 is a conflict: the reconcile decides again)."""
    run.actor(action.as_user).apply_secret(
        dict(action.manifest), resource_version=action.resource_version, create=action.create
    )


def delete_secret(run: Run, action: a.DeleteSecret) -> None:
    """Delete the Secret the plan found the owner's, at the uid and version it found (a 409 is a conflict: the
    reconcile decides again; gone already is fine)."""
    run.actor(action.as_user).delete_secret(
        action.namespace, action.name, uid=action.uid, resource_version=action.resource_version, conflicts=True
    )


def void(_: object) -> None:
    """An effect's result is nothing (the apply's answer matters to a correction only)."""


def apply(run: Run, action: a.Apply) -> JsonObject | None:
    """Apply one rendered object, unless it exists and is not this owner's (``ownership``). A singleton is
    shared by every instance of the plan: the plan applies one observe found absent, and it is created here (listing
    this instance among its users where owner references cannot reach it); one observe found made already is joined
    by the write the plan decided (``instance_plan.apply_or_join``), never by this effect. Found made meanwhile,
    the create is a conflict: the reconcile observes it and the plan decides."""
    kube: Kube = run.actor(action.as_user)
    manifest = dict(action.manifest)
    uid = action.owner_uid
    if not action.singleton:
        manager = {"field_manager": action.field_manager} if action.field_manager else {}
        written = ownership.apply_decided(kube, manifest, uid=action.uid, **manager)
        if written is not None and run.target.wrote is not None:
            run.target.wrote(run.key, written)
        return written
    created = kube.create(manifest if action.owned else singletons.tracked(manifest, uid))
    if created is None:
        # Made meanwhile (observe found none): what joining it writes is the plan's decision, on the next pass, which
        # reads it (``instance_plan.apply_or_join``).
        ref = ref_of(manifest)
        raise Conflict(f"{ref.kind} {ref.name} was made meanwhile; the next pass reads it and decides how to join it")
    return created
