"""The one executor: performs a plan's actions (:mod:`.actions`) through the controller's Kubernetes door.

It decides nothing about the object; it owns how each action is carried out, the same way for every kind
(a :class:`Target`: the kind's API resource and queue key kind):

* writes to the reconciled object (status, finalizer) are guarded by the resourceVersion last seen — the one
  read, then the one each of its own writes returned — and a 409 becomes :class:`Conflict` (the runtime drops
  the cached copy and reconciles again on a fresh read, with its rate-limited conflict backoff);
* finalizer writes go through :mod:`.finalizers`: the finalizer is the one its table gives the running reconciler
  on the kind it reconciles — a reconciler that owns none there is refused (:class:`~.finalizers.NotOwner`) — and
  the patch is guarded (it cannot drop another controller's finalizer);
* actions of one kind only (an OSB call, a sister-cluster copy, rendered objects applied under the ownership
  rules: :mod:`.osb_effects`) are *effects* the kind hands in, keyed by action type; an effect performs its
  action and decides nothing — where a result must be decided on, it asks the kind's pure core for the
  actions that follow and performs them (:meth:`Run.perform`);
* the first action the cluster refuses (:class:`Refused`, with the API server's explanation masked) stops the
  list; the kind's pure ``on_refusal`` says what to write about it, and those actions are run in turn;
* the body read is never changed: the executor keeps its own latest copy of what it wrote.

The result is the queue's :class:`Outcome`: the shortest :class:`Requeue` asked, :data:`AGAIN` for
:class:`Continue`, else done; :class:`Retry` raises :class:`TemporaryError`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from kubernetes.client.exceptions import ApiException

from opbroker.controller.core import actions as a
from opbroker.controller.core import finalizers
from opbroker.controller.core.refusals import Severity
from opbroker.controller.core.shown_failures import explain, refused_trouble
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.kube import Kind, Kube, Refused
from opbroker.controller.runtime.objects import resource_version
from opbroker.controller.runtime.outcomes import DONE, Conflict, Outcome, TemporaryError
from opbroker.kubeclient.wire import JsonObject, mapping_of

logger = logging.getLogger(__name__)

AGAIN = Outcome(requeue_after=0.0)
"""What :class:`~.actions.Continue` makes of a reconcile: observe again at once."""

MAX_PASSES = 4
"""Observe-plan-act passes one reconcile may make (new instance: finalizer, apply, evaluate); a fourth is slack.
Past it the key is requeued at once, so a plan that keeps asking to continue cannot hold a worker."""


REFUSALS = (Refused,)
"""What stops an action list: the cluster refused an object; the kind's ``on_refusal`` says what follows. (A kind's
effect never declines an action: whether an object may be written is its plan's decision, on what it observed.)"""

OnRefusal = Callable[[a.Refusal], Sequence[a.Action]]


def refusal_of(exc: Refused) -> a.Refusal:
    """The pure value of a refusal: what a plan may decide on (the API server's explanation masked, after the fix
    :mod:`.core.shown_failures` names for it)."""
    permanent = exc.refusal.severity is Severity.PERMANENT
    shown = explain(refused_trouble(exc.refusal))
    return a.Refusal(a.Refused.OBJECT, shown.message, permanent, shown=shown.reason.value)


T = TypeVar("T")


class OwnWrites:
    """The resourceVersion each object got from our own last write to it.

    The watch event a write of ours causes carries exactly that version; the reconcile that wrote it has
    already decided what comes next, so that event need not trigger another reconcile (each would cost
    several reads). Any other change — the broker's, a user's — has a version we did not write.
    """

    def __init__(self) -> None:
        self._versions: dict[Hashable, str] = {}

    def note(self, key: Hashable, resource_version: str | None) -> None:
        if resource_version:
            self._versions[key] = resource_version

    def caused(self, key: Hashable, resource_version: str | None) -> bool:
        return resource_version is not None and self._versions.get(key) == resource_version

    def forget(self, key: Hashable) -> None:
        self._versions.pop(key, None)


@dataclass(frozen=True)
class Target:
    """What one kind's executor writes to."""

    kube: Kube
    """The one Kubernetes door (:mod:`.kube`)."""
    kind: Kind
    """The reconciled object's API resource."""
    key_kind: str
    """Its queue key kind."""
    owners: finalizers.Owners = finalizers.OWNERS
    """Which finalizer :class:`~.actions.EnsureFinalizer` adds or removes: the one the table gives ``key_kind`` on
    ``kind`` (the controller's one table; a kind defined outside the controller, a test's, adds its row)."""
    own_writes: OwnWrites | None = None
    """Where our writes' resourceVersions are noted, so the watch events they cause are not reconciled again."""
    forget: Callable[[Key], None] | None = None
    """What :class:`~.actions.ForgetObject` and a ``settled`` status write call (the objects it followed)."""
    wrote: Callable[[Key, JsonObject], None] | None = None
    """Told of each object an apply of the reconciled object's wrote (the answer), so the watch event it causes
    does not bring that object back (:meth:`~.sources.SourceIndex.wrote`)."""


Effect = Callable[["Run", Any], None]
"""Performs one action type of a kind's own (the second argument is the action)."""


class Executor:
    """Runs action lists for one kind: the generic actions itself, the kind's own through ``effects``."""

    def __init__(self, target: Target, effects: Mapping[type, Effect] | None = None) -> None:
        self.target = target
        self.effects: Mapping[type, Effect] = dict(effects or {})

    def run(
        self,
        key: Key,
        body: JsonObject,
        actions: Sequence[Any],
        on_refusal: OnRefusal | None = None,
    ) -> Outcome:
        """Perform ``actions`` on the object ``key`` read as ``body``, in order; the queue's outcome."""
        run = Run(self, key, dict(body))
        try:
            return run.all(actions)
        except REFUSALS as exc:
            if on_refusal is None:
                raise
            return run.all(on_refusal(refusal_of(exc)))


class Run:
    """One action list's execution: the object's latest version, and the outcome asked so far.

    Effects receive it: they act through :meth:`actor`, report a write to the reconciled object with
    :meth:`replace`, and :meth:`perform` the actions a result leads to.
    """

    def __init__(self, executor: Executor, key: Key, body: JsonObject) -> None:
        self.executor = executor
        self.target = executor.target
        self.key = key
        self.body = body
        """The object as last read or written by this run (replaced, never mutated)."""
        self.requeue: float | None = None
        self.again = False

    def all(self, actions: Sequence[Any]) -> Outcome:
        for action in actions:
            self.perform(action)
        if self.again:
            return AGAIN
        return DONE if self.requeue is None else Outcome(requeue_after=self.requeue)

    def perform(self, action: Any) -> None:
        """Carry out one action: a generic one here, a kind's own through its effect."""
        target = self.target
        match action:
            case a.EnsureFinalizer(present=present):
                name = target.owners.owned(target.kind.group, target.kind.plural, target.key_kind).finalizer
                meta = mapping_of(self.body["metadata"])
                change = finalizers.adding(meta, name) if present else finalizers.removing(meta, name)
                if change is not None:
                    written = self.guarded(lambda: target.kube.patch_custom(target.kind, *self._where(), change))
                    self.replace(written)
            case a.WriteStatus(patch=patch, guarded=guarded, settled=settled, event=event):
                version = resource_version(self.body) if guarded else None
                written = self.guarded(
                    lambda: target.kube.patch_custom_status(
                        target.kind, *self._where(), dict(patch), resource_version=version
                    )
                )
                self.replace(written)
                if written is not None and target.own_writes is not None:
                    target.own_writes.note(self.key, resource_version(written))
                if settled and target.forget is not None:
                    target.forget(self.key)
                if event is not None:
                    self.perform(event)
            case a.Event(reason=reason, message=message, warning=warning, log=log):
                if log:
                    logger.warning("%s %s: %s", self.body.get("kind"), self.key.name, message)
                target.kube.emit_event(self.body, reason=reason, message=message, warning=warning)
            case a.Delete(ref=ref, as_user=user, resource_version=version):
                self.actor(user).delete(ref, resource_version=version)  # a 409 propagates: a conflict
            case a.Log(message=message, warning=warning):
                logger.log(logging.WARNING if warning else logging.INFO, "%s: %s", self.key, message)
            case a.ForgetObject():
                if target.forget is not None:
                    target.forget(self.key)
            case a.Requeue(seconds=seconds):
                self.requeue = seconds if self.requeue is None else min(self.requeue, seconds)
            case a.Continue():
                self.again = True
            case a.Retry(message=message):
                raise TemporaryError(message)
            case _:
                effect = self.executor.effects.get(type(action))
                if effect is None:
                    raise TypeError(f"no effect performs {type(action).__name__} for {target.key_kind}")
                effect(self, action)

    def actor(self, user: str | None) -> Kube:
        """The door, or the door acting as ``user`` (a plan's ServiceAccount)."""
        kube = self.target.kube
        return kube if user is None else kube.acting_as(user)

    def replace(self, written: JsonObject | None) -> None:
        """The reconciled object as a write of this run returned it (None: the write changed nothing)."""
        if written is not None:
            self.body = written

    def guarded(self, write: Callable[[], T]) -> T:
        """Make ``write``; a 409 (the object moved on since it was read) becomes :class:`Conflict`."""
        try:
            return write()
        except ApiException as exc:
            if exc.status == 409:
                raise Conflict(self.key.name) from exc
            raise

    def _where(self) -> tuple[str, str]:
        return self.key.namespace, self.key.name
