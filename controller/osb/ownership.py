"""Applying, releasing and orphaning what a plan renders, only where the live object says it is ours (issue 24).

opbroker deletes, un-owns or overwrites an object only when the live object carries its owner's stamp (the
``opbroker.io/owner-uid`` annotation, or an owner reference or tracked-users entry of a shared singleton): a
record in a status proves nothing by itself — a tenant may write its own objects' status. An object that exists
without the stamp is never taken over, unless the plan's template declares adoption. The decisions are
:func:`decisions.takeover` and :func:`decisions.letting_go` (what letting go writes: the plans'
:func:`.instance_plan.release` and :func:`.instance_plan.orphan`, from the objects :func:`held` reads); this module
is their I/O, through whichever door (identity) the caller acts with.
"""

from __future__ import annotations

import logging

from kubernetes.client.exceptions import ApiException

from opbroker.api.meta import ResourceRef
from opbroker.controller.core import actions as a
from opbroker.controller.core import decisions
from opbroker.controller.core.decisions import Takeover
from opbroker.controller.core.views import ObjectView
from opbroker.controller.osb.core.instance_plan import Held
from opbroker.controller.runtime.executor import Declined
from opbroker.controller.runtime.kube import FIELD_MANAGER, Kube, ref_of
from opbroker.kubeclient.wire import JsonObject

logger = logging.getLogger(__name__)


class NotOwned(Declined):
    """A rendered object exists and is not this owner's: it is left untouched and the operation fails."""

    refused = a.Refused.NOT_OWNED

    def __init__(self, ref: ResourceRef) -> None:
        super().__init__(decisions.not_owned_message(ref))
        self.ref = ref


def apply_owned(
    kube: Kube,
    manifest: JsonObject,
    *,
    owner_uids: tuple[str, ...],
    adopt: bool = False,
    field_manager: str = FIELD_MANAGER,
    must_exist: bool = False,
) -> JsonObject | None:
    """Server-side apply ``manifest`` unless the live object is someone else's (:class:`NotOwned`); the object
    as written (None: nothing was).

    ``owner_uids``: whose stamp makes the live object ours to write (a binding writes its own objects and its
    instance's). The check reads the live object (the store when it holds the kind); an object created by
    someone else in the instant between that read and the apply is the one case it cannot see.
    ``must_exist``: the manifest amends an object that exists (a binding's part of its instance's object): when
    it is gone nothing is written, and the apply carries the live uid, so an object deleted after the read is
    not brought back by it (found: an unbind racing its instance's deprovision re-created the database,
    unstamped, and the deprovision then waited for ever on an object not its own).
    """
    ref = ref_of(manifest)
    live = ObjectView.maybe(kube.get(ref))
    if decisions.takeover(live, owner_uids=owner_uids, adopt=adopt) is Takeover.REFUSE:
        raise NotOwned(ref)
    if not must_exist:
        return kube.apply(manifest, field_manager=field_manager)
    uid = live.meta.uid or None if live is not None else None
    written = None if uid is None else kube.apply(manifest, field_manager=field_manager, uid=uid)
    if written is None:
        where = f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name
        logger.info("%s %s is gone: nothing of it to amend", ref.kind, where)
    return written


def held(kube: Kube, ref: ResourceRef) -> Held:
    """A recorded object as read before it is let go (from the store when it holds the kind): what the plan decides
    on (:func:`.instance_plan.release`, :func:`.instance_plan.orphan`).

    An object the acting account may not even read (403) is not ours: it could not have been written with these
    rights, and a record naming it (a stale one, or one forged before the API server kept records) must not hold
    the owner's deletion for ever — it is read as unreadable, and left alone."""
    try:
        return Held(ref, ObjectView.maybe(kube.get(ref)))
    except ApiException as exc:
        if exc.status != 403:
            raise
        return Held(ref, None, readable=False)


def orphan(kube: Kube, ref: ResourceRef, patch: JsonObject, *, owner_uid: str) -> None:
    """Let go of an object recorded as ``owner_uid``'s without deleting it (its template's ``deletionPolicy:
    orphan``): the metadata merge patch the plan decided (:func:`decisions.orphaning`), which carries the version it
    was decided on. A 409 (it changed since the read) reaches the runtime as a conflict: the reconcile reads
    again."""
    kube.merge_patch(ref, {"metadata": patch})
    where = f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name
    logger.info(
        "orphaned %s %s: left in place without the stamp of %s (deletionPolicy: orphan)", ref.kind, where, owner_uid
    )
