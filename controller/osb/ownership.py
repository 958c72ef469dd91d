"""Applying, releasing and orphaning what a plan renders, only where the live object says it is ours (issue 24).

opbroker deletes, un-owns or overwrites an object only when the live object carries its owner's stamp (the
``opbroker.io/owner-uid`` annotation, or an owner reference or tracked-users entry of a shared singleton): a
record in a status proves nothing by itself — a tenant may write its own objects' status. An object that exists
without the stamp is never taken over, unless the plan's template declares adoption. The decisions are the plans':
:func:`.instance_plan.guarded` (on the objects observe read before an apply: :func:`decisions.takeover`),
:func:`decisions.letting_go` (what letting go writes: :func:`.instance_plan.release` and
:func:`.instance_plan.orphan`, from the objects :func:`held` reads); this module is their I/O, through whichever
door (identity) the caller acts with.
"""

from __future__ import annotations

import logging

from kubernetes.client.exceptions import ApiException

from opbroker.api.meta import ResourceRef
from opbroker.controller.core.views import ObjectView
from opbroker.controller.osb.core.instance_plan import Held
from opbroker.controller.runtime.kube import FIELD_MANAGER, Kube, ref_of
from opbroker.kubeclient.wire import JsonObject

logger = logging.getLogger(__name__)


def apply_decided(
    kube: Kube, manifest: JsonObject, *, uid: str | None = None, field_manager: str = FIELD_MANAGER
) -> JsonObject | None:
    """Server-side apply ``manifest`` as the plan decided it (``instance_plan.guarded``: over no object, or one that
    is the owner's); ``uid``: an amendment, written onto that object only (one deleted or replaced since is not
    re-created). The object as written (None: nothing was — an amendment's object gone meanwhile)."""
    if uid is None:
        return kube.apply(manifest, field_manager=field_manager)
    written = kube.apply(manifest, field_manager=field_manager, uid=uid)
    if written is None:
        ref = ref_of(manifest)
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
