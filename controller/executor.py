"""The one executor: performs a plan's actions (:mod:`.actions`) through the controller's Kubernetes door.

It decides nothing about the object; it owns how each action is carried out, the same way for every kind:

* writes to the reconciled object (status, finalizer) are guarded by the resourceVersion last seen — the one
  read, then the one each of its own writes returned — and a 409 becomes :class:`Conflict` (the runtime drops
  the cached copy and reconciles again on a fresh read, with its rate-limited conflict backoff);
* finalizer writes go through :mod:`.finalizers` (a guarded patch cannot drop another controller's finalizer);
* rendered objects are applied and released under the ownership rules (:mod:`.ownership`, :mod:`.singletons`),
  as the plan's identity (``as_user``);
* the first action the cluster refuses (:class:`Refused`, with the API server's explanation masked,
  :class:`NotOwned`, :class:`SingletonFull`) stops the list; the kind's pure ``on_refusal`` says what to
  write about it, and those actions are run in turn;
* the body read is never changed: the executor keeps its own latest copy of what it wrote.

The result is the queue's :class:`Outcome`: the shortest :class:`Requeue` asked, :data:`AGAIN` for
:class:`Continue`, else done; :class:`Retry` raises :class:`TemporaryError`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubernetes.client.exceptions import ApiException

from opbroker.api.conventions import FINALIZER, LABEL_PLAN
from opbroker.api.meta import ResourceRef
from opbroker.controller import registries, singletons
from opbroker.controller.core import actions as a
from opbroker.controller.core import decisions, finalizers
from opbroker.controller.core.refusals import Severity
from opbroker.controller.kube import Kind, Kube, Refused, ref_of
from opbroker.controller.ownership import NotOwned, apply_owned, release
from opbroker.controller.plan_guard import set_plan_finalizer
from opbroker.controller.reconciler import DONE, Conflict, Key, Outcome, PerKey, TemporaryError
from opbroker.controller.reconciling import AppliedMemory, Deps

logger = logging.getLogger(__name__)

AGAIN = Outcome(requeue_after=0.0)
"""What :class:`~.actions.Continue` makes of a reconcile: observe again at once."""

MAX_PASSES = 4
"""Observe-plan-act passes one reconcile may make (new instance: finalizer, apply, evaluate); a fourth is slack.
Past it the key is requeued at once, so a plan that keeps asking to continue cannot hold a worker."""

REFUSALS = (Refused, NotOwned, singletons.SingletonFull)
"""What stops an action list: the cluster refused an object (or an object is not ours); the kind says why."""

OnRefusal = Callable[[a.Refusal], Sequence[a.Action]]


def refusal_of(exc: Exception) -> a.Refusal:
    """The pure value of a refusal: what a plan may decide on (the API server's explanation masked)."""
    if isinstance(exc, Refused):
        permanent = exc.refusal.severity is Severity.PERMANENT
        return a.Refusal(
            a.Refused.OBJECT, exc.refusal.describe() if permanent else str(exc) or type(exc).__name__, permanent
        )
    if isinstance(exc, NotOwned):
        return a.Refusal(a.Refused.NOT_OWNED, str(exc))
    return a.Refusal(a.Refused.SINGLETON_FULL, str(exc))


class Executor:
    """Runs action lists for one kind (``kind``: its API resource; ``key_kind``: its queue key kind)."""

    def __init__(
        self,
        deps: Deps,
        kind: Kind,
        key_kind: str,
        memory: AppliedMemory,
        followed: PerKey[tuple[tuple[ResourceRef, ...], str]] | None = None,
    ) -> None:
        self.deps = deps
        self.kind = kind
        self.key_kind = key_kind
        self.memory = memory
        self.followed = followed

    def run(
        self,
        key: Key,
        body: Mapping[str, Any],
        actions: Sequence[a.Action],
        on_refusal: OnRefusal | None = None,
    ) -> Outcome:
        """Perform ``actions`` on the object ``key`` read as ``body``, in order; the queue's outcome."""
        run = _Run(self, key, dict(body))
        try:
            return run.all(actions)
        except REFUSALS as exc:
            if on_refusal is None:
                raise
            return run.all(on_refusal(refusal_of(exc)))


class _Run:
    """One action list's execution: the object's latest version, and the outcome asked so far."""

    def __init__(self, executor: Executor, key: Key, body: dict[str, Any]) -> None:
        self.x = executor
        self.key = key
        self.body = body
        """The object as last read or written by this run (replaced, never mutated)."""
        self.requeue: float | None = None
        self.again = False

    def all(self, actions: Sequence[a.Action]) -> Outcome:
        for action in actions:
            self.one(action)
        if self.again:
            return AGAIN
        return DONE if self.requeue is None else Outcome(requeue_after=self.requeue)

    def one(self, action: a.Action) -> None:
        deps = self.x.deps
        match action:
            case a.EnsureFinalizer(present=present):
                meta = self.body["metadata"]
                patch = finalizers.adding(meta, FINALIZER) if present else finalizers.removing(meta, FINALIZER)
                if patch is not None:
                    self._finalizers(patch)
            case a.WriteStatus(patch=patch, guarded=guarded, settled=settled, event=event):
                version = self.body["metadata"].get("resourceVersion") if guarded else None
                written = self._guarded(
                    lambda: deps.kube.patch_custom_status(
                        self.x.kind, *self._where(), dict(patch), resource_version=version
                    )
                )
                if written is not None:
                    self.body = written
                    deps.own_writes.note(self.key, written["metadata"].get("resourceVersion"))
                if settled:
                    deps.index.forget(self.key)
                if event is not None:
                    self.one(event)
            case a.Event(reason=reason, message=message, warning=warning, log=log):
                if log:
                    logger.warning("%s %s: %s", self.body.get("kind"), self.key.name, message)
                deps.kube.emit_event(self.body, reason=reason, message=message, warning=warning)
            case a.Apply():
                self._apply(action)
            case a.Release(ref=ref, owner_uid=uid, as_user=user):
                release(self._actor(user), ref, owner_uid=uid)
            case a.Delete(ref=ref, as_user=user):
                self._actor(user).delete(ref)
            case a.WriteSecret(manifest=manifest, owner_uid=uid, as_user=user):
                self._write_secret(dict(manifest), uid, self._actor(user))
            case a.DeleteSecret(namespace=namespace, name=name, owner_uid=uid, as_user=user):
                kube = self._actor(user)
                secret = kube.read_secret(namespace, name)
                owners = (secret or {}).get("metadata", {}).get("ownerReferences") or []
                if secret is not None and any(owner.get("uid") == uid for owner in owners):
                    kube.delete_secret(namespace, name, uid=secret["metadata"].get("uid"))
            case a.Log(message=message, warning=warning):
                logger.log(logging.WARNING if warning else logging.INFO, "%s: %s", self.key, message)
            case a.Follow(refs=refs, digest=digest):
                if self.x.followed is not None:
                    self.x.followed.put(self.key, (refs, digest))
            case a.Unfollow():
                if self.x.followed is not None:
                    self.x.followed.forget(self.key)
            case a.HoldPlan(plan=plan):
                set_plan_finalizer(deps.kube, dict(plan), hold=True)
            case a.SaveRegistry(registry=registry, labels=labels):
                deps.registries.save(deps.kube, self._place(), dict(registry), dict(labels))
            case a.DropRegistry():
                place = self._place()
                registries.delete(deps.kube, place)  # its own namespace's: no owner reference can take it along
                deps.registries.forget(place)
            case a.Track(refs=refs):
                deps.watchers.ensure(deps.index.track(self.key, list(refs)))
            case a.Remember(version=version, record=record):
                self.x.memory.remember(self.key, version, dict(record))
            case a.Forget():
                self.x.memory.forget(self.key)
            case a.ForgetObject():
                deps.index.forget(self.key)
            case a.Requeue(seconds=seconds):
                self.requeue = seconds if self.requeue is None else min(self.requeue, seconds)
            case a.Continue():
                self.again = True
            case a.Retry(message=message):
                raise TemporaryError(message)

    # -- how -----------------------------------------------------------------------------------------

    def _where(self) -> tuple[str, str]:
        return self.key.namespace, self.key.name

    def _guarded(self, write: Callable[[], dict[str, Any] | None]) -> dict[str, Any] | None:
        try:
            return write()
        except ApiException as exc:
            if exc.status == 409:
                raise Conflict(self.key.name) from exc
            raise

    def _write_secret(self, manifest: dict[str, Any], owner_uid: str | None, kube: Kube) -> None:
        """Apply a Secret, unless one of that name exists and is not ``owner_uid``'s (``NotOwned``)."""
        meta = manifest["metadata"]
        if owner_uid is not None:
            live = kube.read_secret(meta["namespace"], meta["name"], stored=True)
            if decisions.takeover(live, owner_uids=(owner_uid,), adopt=False) is decisions.Takeover.REFUSE:
                ref = ResourceRef(api_version="v1", kind="Secret", name=meta["name"], namespace=meta["namespace"])
                raise NotOwned(ref)
        kube.apply_secret(manifest)

    def _place(self) -> registries.Place:
        """Where the object's registry is kept: the registry namespace, which consumers cannot read."""
        namespace = self.x.deps.settings.registries_namespace
        return registries.place(self.body, kind=self.x.key_kind, namespace=namespace)

    def _finalizers(self, patch: dict[str, Any]) -> None:
        kube = self.x.deps.kube
        written = self._guarded(lambda: kube.patch_custom(self.x.kind, *self._where(), patch))
        if written is not None:
            self.body = written

    def _actor(self, user: str | None) -> Kube:
        kube = self.x.deps.kube
        return kube if user is None else kube.acting_as(user)

    def _apply(self, action: a.Apply) -> None:
        """Apply one rendered object, unless it exists and is not this owner's (``ownership``). A singleton is
        shared by every instance of the plan: if it exists already (made by opbroker for this plan, or adopted)
        it is left as it is and merely gains our owner reference (or, where none can reach it, our entry among
        its tracked users), so it lives while any user does."""
        kube = self._actor(action.as_user)
        manifest = dict(action.manifest)
        uid = action.owner_uid
        if not action.singleton:
            manager = {"field_manager": action.field_manager} if action.field_manager else {}
            apply_owned(kube, manifest, owner_uids=(uid, *action.co_owners), adopt=action.adopt, **manager)
            return
        if kube.create(manifest if action.owned else singletons.tracked(manifest, uid)) is not None:
            return
        ref = ref_of(manifest)
        live = kube.get(ref)
        if live is None:
            return  # deleted meanwhile: the next reconcile creates it
        plan_label = (manifest["metadata"].get("labels") or {}).get(LABEL_PLAN)
        if not action.adopt and not decisions.shared_singleton(live, plan_label=plan_label):
            raise NotOwned(ref)
        if not action.owned:  # owner references cannot reach it: opbroker tracks its users (``singletons``)
            singletons.join(kube, ref, live, uid)
            return
        owners = live["metadata"].get("ownerReferences") or []
        if all(o.get("uid") != uid for o in owners):
            patch = {
                "ownerReferences": [*owners, dict(action.owner_reference)],
                "resourceVersion": live["metadata"]["resourceVersion"],
            }
            kube.merge_patch(ref, {"metadata": patch})
