"""What sharing a singleton means, decided from the live object as read (issue 29, issue 45).

A shared singleton is joined when an instance applies it and finds it made already, and left when an instance
releases it. Both are decisions over the object as read — its owner references, its tracked users
(:data:`~opbroker.api.conventions.ANNOTATION_SINGLETON_USERS`), its version — and are taken here, purely: each
returns the exact write (:class:`~.actions.JoinSingleton`, :class:`~.actions.ShareSingleton`,
:class:`~.actions.LeaveSingleton`, :class:`~.actions.DeleteSingleton`), guarded by the version read, or why there is
none. The effects (:mod:`opbroker.controller.osb.singletons`) only perform them: a write that lost a race to another
instance is a 409, and the reconcile decides again on a fresh read.
"""

from __future__ import annotations

from dataclasses import dataclass

from opbroker.api.conventions import LABEL_PLAN
from opbroker.api.meta import ResourceRef
from opbroker.controller.core import actions as a
from opbroker.controller.core import decisions
from opbroker.controller.core.decisions import Letting
from opbroker.controller.core.views import ObjectView
from opbroker.kubeclient.wire import JsonObject

Joining = a.JoinSingleton | a.ShareSingleton | a.Refused | None
"""The write that joins a singleton, why it may not be joined (``NOT_OWNED``, ``SINGLETON_FULL``), or None: the
instance is one of its users already."""


def joining(live: ObjectView, ref: ResourceRef, apply: a.Apply) -> Joining:
    """How the instance applying ``apply`` (a singleton's manifest) joins ``live``, the singleton as it exists.

    Joined only when it is a singleton opbroker made for this plan, one the instance shares already, or adopted
    (the template says so). Where owner references reach it (``apply.owned``: its instances' namespace) the
    instance's owner reference is added; elsewhere the instance is listed among its tracked users — at most
    :data:`decisions.MAX_SINGLETON_USERS`. The write carries the version read."""
    meta, uid = live.meta, apply.owner_uid
    plan_label = ObjectView.of(apply.manifest).meta.labels.get(LABEL_PLAN)
    if not (
        apply.adopt or decisions.shared_singleton(meta, plan_label=plan_label) or decisions.singleton_user(meta, uid)
    ):
        return a.Refused.NOT_OWNED
    if not apply.owned:
        return listing(live, ref, owner_uid=uid, as_user=apply.as_user)
    if meta.owned_by(uid):
        return None
    owners = (*(o.wire for o in meta.owners), apply.owner_reference)
    return a.ShareSingleton(ref, owners, meta.resource_version, as_user=apply.as_user)


def listing(
    live: ObjectView, ref: ResourceRef, *, owner_uid: str, as_user: str | None = None
) -> a.JoinSingleton | a.Refused | None:
    """How ``owner_uid`` is listed among the tracked users of ``live``, a singleton it may share: nothing when it
    is listed; refused when :data:`decisions.MAX_SINGLETON_USERS` are; else the users read and it, at the version
    read."""
    users = decisions.singleton_users(live.meta)
    if owner_uid in users:
        return None
    if len(users) >= decisions.MAX_SINGLETON_USERS:
        return a.Refused.SINGLETON_FULL
    return a.JoinSingleton(ref, (*users, owner_uid), live.meta.resource_version, as_user=as_user)


@dataclass(frozen=True)
class Leaving:
    """How an owner lets go of a shared object: the write (None: none), and whether a deletion is in progress
    (the owner waits for it)."""

    write: a.LeaveSingleton | a.DeleteSingleton | None
    waiting: bool


def leaving(live: ObjectView | None, ref: ResourceRef, *, owner_uid: str, as_user: str | None = None) -> Leaving:
    """How ``owner_uid`` lets go of ``live`` (:func:`decisions.letting_go`): nothing when it is gone or not the
    owner's; wait while it is being deleted; delete it, at the version read, when the owner is its last; else drop
    the owner's reference and its entry among the tracked users, at the version read."""
    step = decisions.letting_go(live, owner_uid=owner_uid)
    if live is None or step in (Letting.GONE, Letting.LEAVE):
        return Leaving(None, False)
    if step is Letting.WAIT:
        return Leaving(None, True)
    meta = live.meta
    if step is Letting.DELETE:
        return Leaving(a.DeleteSingleton(ref, meta.resource_version, as_user=as_user), True)
    users = decisions.singleton_users(meta)
    owners: tuple[JsonObject, ...] | None = None
    if meta.owned_by(owner_uid):
        owners = tuple(o.wire for o in meta.owners if o.uid != owner_uid)
    rest = tuple(u for u in users if u != owner_uid) if owner_uid in users else None
    return Leaving(a.LeaveSingleton(ref, owners, rest, meta.resource_version, as_user=as_user), False)
