"""The one action vocabulary: what a kind's pure ``plan`` returns and :mod:`opbroker.controller.runtime.executor`
performs.

Each action is an immutable value that says what to write, never whether: every decision (succeeded, failed,
still in progress, give up, which objects to release, when to look again) is taken by the plan that builds the
list. The executor runs the list in order and owns the how — the Kubernetes door, guarded writes, conflicts,
refusal masking, ownership rules — and stops at the first action the cluster refuses.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from opbroker.api.meta import ResourceRef
from opbroker.kubeclient.wire import JsonObject


@dataclass(frozen=True)
class EnsureFinalizer:
    """Add (``present``) or remove the reconciled object's finalizer, guarded by the resourceVersion last seen: the
    finalizer the table of :mod:`.finalizers` gives the running reconciler on its kind (it owns it alone; the
    executor refuses the action of a reconciler that owns none there). The one way the controller writes a
    finalizer."""

    present: bool = True


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event on the reconciled object (and, with ``log``, a warning line in the log)."""

    reason: str
    message: str
    warning: bool = False
    log: bool = False


@dataclass(frozen=True)
class WriteStatus:
    """Merge ``patch`` into the status (conditions included, computed by the plan).

    ``guarded``: carries the resourceVersion last seen, so a concurrent change fails it with a conflict.
    ``settled``: the operation is over, so the objects its status template read stop enqueueing the object.
    """

    patch: JsonObject = field(repr=False)
    guarded: bool = True
    settled: bool = False
    event: Event | None = None
    """Emitted after the write (an outcome's Event)."""


@dataclass(frozen=True)
class Apply:
    """Apply one rendered object, as the plan decided on the object it observed (``instance_plan.guarded``: only
    over one that is the owner's; :mod:`opbroker.controller.osb.singletons` for shared singletons).

    ``as_user``: the identity the write is made as (a plan's ServiceAccount), None for the controller's own.
    """

    manifest: JsonObject = field(repr=False)
    owner_uid: str
    owner_reference: JsonObject = field(repr=False)
    singleton: bool = False
    owned: bool = True
    """Owner references can reach it (same namespace); else a singleton tracks its users in an annotation."""
    adopt: bool = False
    as_user: str | None = None
    co_owners: tuple[str, ...] = ()
    """Other owners whose stamp also lets it be written over (an unbind object: the binding's or the instance's)."""
    field_manager: str | None = None
    """The server-side apply field manager (a binding's own, on its instance's objects); None: opbroker's."""
    must_exist: bool = False
    """Amend an existing object only (a binding's part of its instance's object): gone, nothing is written —
    never re-created half-specified by the apply."""
    uid: str | None = None
    """An amendment's object as the plan read it: the apply is written onto that object only (one deleted or
    replaced since is not re-created). Whether it may be written at all is the plan's decision
    (``instance_plan.guarded``); the effect performs it."""


@dataclass(frozen=True)
class Orphan:
    """Let go of a recorded object without deleting it (its template's ``deletionPolicy: orphan``): merge ``patch``
    into its metadata — what :func:`.decisions.orphaning` decided from the object as observed: ``owner_uid``'s owner
    reference, its entry among a singleton's users and its stamp dropped; opbroker's labels too once no other owner
    of opbroker's holds it —, guarded by the resourceVersion it carries (a 409 is a conflict: the reconcile decides
    again). It then outlives its owner, unmanaged."""

    ref: ResourceRef
    owner_uid: str
    patch: JsonObject = field(repr=False)
    as_user: str | None = None


@dataclass(frozen=True)
class JoinSingleton:
    """List ``users`` (the users read, and the joining instance) on a shared singleton that owner references cannot
    reach (:mod:`opbroker.controller.osb.singletons`): one merge patch guarded by ``resource_version``, the version the
    users were read at — a 409 is a conflict (the reconcile reads again), a singleton gone meanwhile too."""

    ref: ResourceRef
    users: tuple[str, ...]
    resource_version: str | None
    as_user: str | None = None


@dataclass(frozen=True)
class ShareSingleton:
    """Write ``owners`` (the owner references read, and the sharing instance's) on a shared singleton in its
    instances' namespace: one merge patch guarded by ``resource_version``."""

    ref: ResourceRef
    owners: tuple[JsonObject, ...] = field(repr=False)
    resource_version: str | None
    as_user: str | None = None


@dataclass(frozen=True)
class LeaveSingleton:
    """Drop one owner from a shared object that others still hold: write ``owners`` (its owner references less
    the leaving one's; None: unchanged) and ``users`` (its tracked users less the leaving one; None: unchanged,
    empty: the annotation removed) in one merge patch guarded by ``resource_version``."""

    ref: ResourceRef
    owners: tuple[JsonObject, ...] | None = field(default=None, repr=False)
    users: tuple[str, ...] | None = None
    resource_version: str | None = None
    as_user: str | None = None


@dataclass(frozen=True)
class DeleteSingleton:
    """Delete a shared object its last user lets go of, only at ``resource_version`` (a user that joined since makes
    it a conflict: the object stays)."""

    ref: ResourceRef
    resource_version: str | None
    as_user: str | None = None


@dataclass(frozen=True)
class Delete:
    """Delete an object by reference (gone already is fine); with ``resource_version``, only that version of it —
    the one a plan decided on (a recorded object ours alone, :func:`.decisions.letting_go`): a 409 is a conflict,
    the reconcile decides again on what it reads then."""

    ref: ResourceRef
    as_user: str | None = None
    resource_version: str | None = None


@dataclass(frozen=True)
class WriteSecret:
    """Apply a Secret (server-side). Whether it may be written over the Secret of that name (a binding's only over
    one of its own) is decided by the plan, from the Secret as observed (``binding_plan.secret_refusal``), and the
    write is guarded by what it observed: ``create`` — there was none: it is created, never written over one made
    since —, else ``resource_version`` — the version it decided on: a Secret changed since is not overwritten. Either
    way a 409 is a conflict and the reconcile decides again on a fresh read. Neither: an unguarded apply (a copy
    the writer alone keeps)."""

    manifest: JsonObject = field(repr=False)
    as_user: str | None = None
    resource_version: str | None = None
    create: bool = False


@dataclass(frozen=True)
class DeleteSecret:
    """Delete a Secret the plan observed and found ``owner_uid``'s (an owner reference says so): only the one of
    ``uid``, only at ``resource_version`` (a 409 is a conflict: the reconcile decides again on a fresh read; gone
    already is fine). The effect decides nothing."""

    namespace: str
    name: str
    owner_uid: str
    as_user: str | None = None
    uid: str | None = None
    resource_version: str | None = None


@dataclass(frozen=True)
class Log:
    """A line in the controller's log only (no Event: what it says is not for the object's readers)."""

    message: str
    warning: bool = True


@dataclass(frozen=True)
class Follow:
    """Remember in memory what a bound binding's credentials were last checked against (sources and digest)."""

    refs: tuple[ResourceRef, ...]
    digest: str


@dataclass(frozen=True)
class Unfollow:
    """Drop the remembered sources (they are recorded in the status now)."""


@dataclass(frozen=True)
class SaveRegistry:
    """Persist the object's registry (values generated at render time) where consumers cannot read it (the
    registry namespace: where is the executor's rule, :func:`.registries.place`)."""

    registry: JsonObject = field(repr=False)
    labels: Mapping[str, str]


@dataclass(frozen=True)
class DropRegistry:
    """Delete the object's registry (teardown)."""


@dataclass(frozen=True)
class Track:
    """Watch ``refs``: a change of any of them enqueues the object again (its status template reads them).

    ``seen``: versions the decision read (from the store) before the object followed them. A change landing between
    that read and this action enqueued nobody — its event came before anyone followed the object — so one found moved
    once they are followed makes the object looked at again at once."""

    refs: tuple[ResourceRef, ...]
    seen: tuple[tuple[ResourceRef, str | None], ...] = ()


@dataclass(frozen=True)
class Correct:
    """Day two: set a drifted object back (``apply``, performed as any apply), then — only if the write changed it —
    an Event naming ``fields`` (``core.drift.drift_message``) and the correction counted for the fight bound. A
    write that changed nothing (a value the API server normalises, found different by the comparison) is silent.
    ``at``: the facts' now, the moment the correction counts at (the effect reads no clock)."""

    apply: Apply
    fields: tuple[str, ...]
    at: datetime.datetime


@dataclass(frozen=True)
class Checked:
    """Day two: the instance was found as declared: remember ``digest`` (what its check read), so a resync or an
    event that changes none of it costs no render. ``live_written``: a live-status change was written now."""

    digest: str
    live_written: bool = False
    refs: tuple[ResourceRef, ...] = ()
    """What the check read: the next one computes its digest over these."""
    versions: tuple[str | None, ...] = ()
    """Their versions as read (empty: not found as declared, or not checked yet): what the resync sweep compares."""
    shapes: Mapping[Any, str | None] = field(default_factory=dict)
    """The rendered objects' shapes as found declared (``core.drift.shape``): a later check whose objects all keep
    them compares nothing (empty: compare at the next check)."""
    at: datetime.datetime | None = None
    """The moment of the check (a live-status write is remembered at it)."""


@dataclass(frozen=True)
class ReportHealth:
    """Day two: count the instance under ``health`` (``core.live_status.Health``) in the metric."""

    health: str


@dataclass(frozen=True)
class Remember:
    """Keep the record of an apply in memory until the operation's outcome writes it (``AppliedMemory``)."""

    version: tuple[Any, Any]
    record: JsonObject = field(repr=False)


@dataclass(frozen=True)
class Forget:
    """Drop the remembered apply."""


@dataclass(frozen=True)
class ForgetObject:
    """The object is released: drop what the controller tracks for it (its watched sources)."""


@dataclass(frozen=True)
class Requeue:
    """Look at the object again after ``seconds`` (the reconcile ends)."""

    seconds: float


@dataclass(frozen=True)
class Continue:
    """Observe again at once, within this reconcile: what was just written changes what is due (a finalizer
    added, an apply recorded). Bounded by the reconciler (:data:`.executor.MAX_PASSES`)."""


@dataclass(frozen=True)
class Retry:
    """End the reconcile with a temporary error (the queue backs off); written actions before it stand."""

    message: str


class Refused(StrEnum):
    """Why the executor stopped an action list."""

    OBJECT = "object"
    """The API server refused a rendered object (its explanation masked: ``refusals``)."""
    NOT_OWNED = "not-owned"
    """A rendered object exists and is someone else's."""
    SINGLETON_FULL = "singleton-full"
    """A shared singleton lists as many users as it may."""


@dataclass(frozen=True)
class Refusal:
    """What the executor hands a kind's pure ``refused`` plan when it stopped: why, and what to say."""

    why: Refused
    message: str
    permanent: bool = True
    """False: the refusal can be fixed outside the request (a quota, a missing namespace): count and retry."""
    shown: str | None = None
    """The reason :mod:`.shown_failures` gives the refusal (``NamespaceNotOnboarded``, ``AccountLacksRight``...), for
    a kind that writes it as its own condition's reason."""


Action = (
    EnsureFinalizer
    | WriteStatus
    | Event
    | Apply
    | Orphan
    | JoinSingleton
    | ShareSingleton
    | LeaveSingleton
    | DeleteSingleton
    | Delete
    | WriteSecret
    | DeleteSecret
    | Log
    | Follow
    | Unfollow
    | SaveRegistry
    | DropRegistry
    | Track
    | Correct
    | Checked
    | ReportHealth
    | Remember
    | Forget
    | ForgetObject
    | Requeue
    | Continue
    | Retry
)
