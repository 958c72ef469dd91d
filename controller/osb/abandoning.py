"""Abandoning an instance or a binding whose teardown cannot finish (issue 43, "a way out"): the I/O around
:mod:`opbroker.controller.osb.core.abandon`, used by ``opbroker instance abandon`` and ``opbroker binding abandon``.

:func:`read_instance` and :func:`read_binding` read what the pure plan decides on (the object, the namespace's
bindings, each recorded object's metadata); :func:`perform` does what it decided, object after object, with the
caller's own rights (a kubeconfig's user, never the controller's): per object abandoned, the reason annotation
(:data:`~opbroker.api.conventions.ANNOTATION_ABANDONED_REASON`), a binding's DELETE when it was not being deleted
yet, each recorded object deleted, released or orphaned (a 409 re-reads it and decides again), the registry dropped
as a deprovision drops it, the Warning Event (best effort, as every Event of the controller's), and last opbroker's
finalizer — by its owner's action through the one executor, guarded by the version read (:mod:`.core.finalizers`),
so no other finalizer is lost. Nothing waits for
a deletion to finish. The first error stops it with the object's finalizer still on: what was done is reported, and
running it again goes on from there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException

from opbroker.api.conventions import ANNOTATION_ABANDONED_BY, ANNOTATION_ABANDONED_REASON
from opbroker.api.meta import ResourceRef
from opbroker.controller.core import decisions, finalizers
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.views import ApiStatus, BindingView, InstanceView, Meta, ObjectView
from opbroker.controller.kinds import BINDINGS, INSTANCES
from opbroker.controller.osb import registries, singletons
from opbroker.controller.osb.core import abandon
from opbroker.controller.osb.core.abandon import Abandoning, AbandonPlan, Fate, ObjectStep
from opbroker.controller.runtime.executor import Executor, Target
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.kube import Kind, Kube, KubeError, Refused
from opbroker.controller.runtime.objects import ref_key
from opbroker.controller.runtime.outcomes import Conflict
from opbroker.controller.runtime.policies import DEFAULTS
from opbroker.kubeclient.wire import JsonObject

logger = logging.getLogger(__name__)

KINDS = {abandon.INSTANCE_KIND: INSTANCES, abandon.BINDING_KIND: BINDINGS}


def who_am_i(kube: Kube) -> str | None:
    """The user the caller's credentials authenticate as (a SelfSubjectReview); None when the API server does not
    say (an old one, or a review refused)."""
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    try:
        answer = kube.custom.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", body=body)
    except ApiException:
        return None
    user = ((answer or {}).get("status") or {}).get("userInfo") or {}
    name = user.get("username")
    return name if isinstance(name, str) and name else None


def _seen(kube: Kube, refs: tuple[ResourceRef, ...]) -> tuple[abandon.Live, frozenset[tuple[str, str, str, str]]]:
    """Each recorded object's metadata as read (a Secret's without its data), and those the caller may not read (not
    ours to touch: :func:`opbroker.controller.osb.ownership.held`'s rule). An object of a kind the API server no longer
    serves (its CRD removed: a common way for a teardown to hang) is gone."""
    live: dict[tuple[str, str, str, str], ObjectView | None] = {}
    unreadable = set()
    for ref in refs:
        key = ref_key(ref)
        if key in live or key in unreadable:
            continue
        try:
            if (ref.api_version, ref.kind) == ("v1", "Secret"):
                body = kube.read_secret(ref.namespace or "", ref.name)
            else:
                body = kube.get(ref, fresh=True)
        except KubeError:
            body = None
        except ApiException as exc:
            if exc.status != 403:
                raise
            unreadable.add(key)
            continue
        live[key] = _metadata_only(body)
    return live, frozenset(unreadable)


def _metadata_only(body: JsonObject | None) -> ObjectView | None:
    """A view of an object without its content (a Secret's values are never held, shown or logged)."""
    if body is None:
        return None
    return ObjectView.of({"apiVersion": body.get("apiVersion"), "kind": body.get("kind"), "metadata": body["metadata"]})


def read_instance(kube: Kube, namespace: str, name: str, *, with_bindings: bool) -> AbandonPlan:
    """Read the instance, its namespace's bindings and what they record, and decide (:func:`abandon.plan_instance`)."""
    body = kube.get_custom(INSTANCES, namespace, name, fresh=True)
    instance = InstanceView.of(body) if body is not None else None
    bindings = [BindingView.of(b) for b in kube.list_custom(BINDINGS, namespace)] if instance is not None else []
    refs: tuple[ResourceRef, ...] = ()
    if instance is not None:
        own = [b for b in bindings if b.binds(instance)] if with_bindings else []
        refs = (*abandon.to_read(instance), *(ref for b in own for ref in abandon.to_read(b)))
    live, unreadable = _seen(kube, refs)
    return abandon.plan_instance(
        instance, bindings, live, namespace=namespace, name=name, with_bindings=with_bindings, unreadable=unreadable
    )


def read_binding(kube: Kube, namespace: str, name: str) -> AbandonPlan:
    """Read the binding and what it records, and decide (:func:`abandon.plan_binding`)."""
    body = kube.get_custom(BINDINGS, namespace, name, fresh=True)
    binding = BindingView.of(body) if body is not None else None
    live, unreadable = _seen(kube, abandon.to_read(binding) if binding is not None else ())
    return abandon.plan_binding(binding, live, namespace=namespace, name=name, unreadable=unreadable)


class Stopped(RuntimeError):
    """A write was refused (or kept conflicting): abandoning stops there, the object's finalizer still on."""


@dataclass
class Outcome:
    """What :func:`perform` did with one instance or binding."""

    target: Abandoning
    objects: list[ObjectStep] = field(default_factory=list)
    """Each recorded object with what became of it (decided again after a conflict)."""
    finalizer: str = ""
    """``removed``, or why not (gone meanwhile, not there any more)."""


def perform(
    kube: Kube,
    plan: AbandonPlan,
    *,
    reason: str,
    by: str | None,
    registry_namespace: str,
    report: Callable[[Outcome], None] = lambda _: None,
) -> list[Outcome]:
    """Abandon what ``plan`` lists (not refused), the bindings first; ``report`` hears of each one done. Raises
    :class:`Stopped` at the first write refused: what is done stays done, the rest is left as it was."""
    if plan.refusal is not None:
        raise ValueError(plan.refusal)
    done = []
    for target in plan.all:
        outcome = _abandon(kube, target, reason=reason, by=by, registry_namespace=registry_namespace)
        report(outcome)
        done.append(outcome)
    return done


def _abandon(kube: Kube, target: Abandoning, *, reason: str, by: str | None, registry_namespace: str) -> Outcome:
    kind, meta = KINDS[target.kind], target.meta
    outcome = Outcome(target)
    annotations = {ANNOTATION_ABANDONED_REASON: reason, ANNOTATION_ABANDONED_BY: by}
    patch = {"metadata": {"uid": meta.uid, "annotations": annotations}}  # the uid: this object, not a namesake
    written = _refusing(f"record the reason on {target.named}", lambda: kube.patch_custom(kind, meta.namespace,
                                                                                        meta.name, patch))  # fmt: skip
    if written is None:
        outcome.finalizer = "gone meanwhile"
        return outcome
    if target.delete_first:
        _refusing(f"delete {target.named}", lambda: kube.delete_custom(kind, meta.namespace, meta.name, uid=meta.uid))
    for step in target.objects:
        outcome.objects.append(_let_go(kube, step, owner_uid=meta.uid))
    where = registries.place(meta, kind=target.registry_kind, namespace=registry_namespace)
    _refusing(f"delete the registry of {target.named}", lambda: registries.delete(kube, where))
    done = Abandoning(target.kind, meta, tuple(outcome.objects), target.delete_first)
    kube.emit_event(written, reason=Reason.ABANDONED.value, message=abandon.event_message(done, reason=reason, by=by),
                    warning=True)  # fmt: skip
    outcome.finalizer = _drop_finalizer(kube, kind, target)
    return outcome


def _let_go(kube: Kube, step: ObjectStep, *, owner_uid: str) -> ObjectStep:
    """Do what ``step`` says; a conflict (the object moved on since the read) reads it and decides again. A loop
    in place, on the policy table's ``write_retries``: this runs in ``opbroker ... abandon``, outside the
    controller, where no runtime repeats a conflict."""
    for _ in DEFAULTS.attempts(DEFAULTS.write_retries):
        live = step.live
        try:
            if step.fate is Fate.ORPHAN:
                assert step.patch is not None
                kube.merge_patch(step.ref, {"metadata": dict(step.patch)})
            elif step.fate is Fate.UNOWN or (
                step.fate is Fate.DELETE and live is not None and decisions.singleton_users(live.meta)
            ):
                assert live is not None
                singletons.leave(kube, step.ref, live, owner_uid)  # tracked users: each write guarded, as a teardown
            elif step.fate is Fate.DELETE:
                assert live is not None
                kube.delete(step.ref, resource_version=live.meta.resource_version)
            return step
        except ApiException as exc:
            if exc.status != 409:
                raise Stopped(f"could not {step.fate.value} {step.named}: {_said(exc)}") from None
        seen, unreadable = _seen(kube, (step.ref,))
        fresh = seen.get(ref_key(step.ref))
        step = abandon.object_step(step.ref, fresh, owner_uid=owner_uid, policy=step.policy, readable=not unreadable)
    raise Stopped(f"{step.named} kept changing while it was let go of")


def owners_executor(kube: Kube, kind: Kind) -> Executor:
    """The executor of the finalizer's owner on ``kind`` (:data:`~.core.finalizers.OWNERS`), for abandoning's last
    step: the finalizer is removed the one way the controller removes it, in its owner's name — only where the
    table lets abandon do so."""
    row = finalizers.OWNERS.on(kind.group, kind.plural)
    if row is None or not row.abandonable:
        raise finalizers.NotOwner(f"abandon: no finalizer of opbroker's on {kind.plural} may be abandoned")
    return Executor(Target(kube, kind, row.owner))


def _drop_finalizer(kube: Kube, kind: Kind, target: Abandoning) -> str:
    """Remove opbroker's finalizer, and only it, guarded by the version read (:func:`owners_executor`). A conflict
    (:class:`~.runtime.outcomes.Conflict`) reads again, on the policy table's ``write_retries`` as :func:`_let_go`:
    this runs outside the controller, where no runtime repeats a conflict."""
    meta, executor = target.meta, owners_executor(kube, kind)
    for _ in DEFAULTS.attempts(DEFAULTS.write_retries):
        body = kube.get_custom(kind, meta.namespace, meta.name, fresh=True)
        if body is None:
            return "gone meanwhile"
        step = abandon.finalizer_released(Meta.of(body.get("metadata")), uid=meta.uid)
        if isinstance(step, str):
            return step
        try:
            executor.run(Key(executor.target.key_kind, meta.namespace, meta.name), body, step)
            return "removed"
        except Conflict:
            continue
        except ApiException as exc:
            raise Stopped(f"could not remove opbroker's finalizer from {target.named}: {_said(exc)}") from None
    raise Stopped(f"{target.named} kept changing: opbroker's finalizer is still on it (run abandon again)")


def _refusing(what: str, write: Callable[[], Any]) -> Any:
    try:
        return write()
    except ApiException as exc:
        raise Stopped(f"could not {what}: {_said(exc)}") from None


def _said(exc: ApiException) -> str:
    """What the API server said of a refusal (its message, else the status), never the body it quotes."""
    if isinstance(exc, Refused):
        return str(exc)  # masked already
    return ApiStatus.of(exc.body).message or f"HTTP {exc.status} {exc.reason or ''}".strip()
