"""Small pure helpers over Kubernetes objects: owner references, labels, references; the objects read come as
views (:mod:`.core.views`), the manifests written are plain dicts (:data:`Manifest`)."""

from __future__ import annotations

from collections.abc import Iterable

from opbroker.api.catalog import DeletionPolicy
from opbroker.api.conventions import (
    ANNOTATION_OWNER_UID,
    ANNOTATION_SINGLETON,
    LABEL_BINDING,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    LABEL_PLAN,
    MANAGED_BY,
)
from opbroker.api.meta import ResourceRef
from opbroker.api.shards import SHARD_LABEL
from opbroker.controller.core.views import Meta, ObjectView, Owner
from opbroker.kubeclient.wire import JsonBody, JsonObject, mapping_of, objects_of, path_of, text_of

Manifest = JsonBody
"""A body (or a part of one) the controller writes, built as a plain dict (the wire's :data:`JsonBody`)."""


def reference_to(owner: Owner, *, controller: bool = False) -> Manifest:
    """The owner reference naming ``owner`` (a view of the object read)."""
    reference: Manifest = {
        "apiVersion": owner.api_version,
        "kind": owner.kind,
        "name": owner.meta.name,
        "uid": owner.meta.uid,
        "blockOwnerDeletion": True,
    }
    if controller:
        reference["controller"] = True
    return reference


def owner_reference(owner: JsonObject, *, controller: bool = False) -> Manifest:
    """:func:`reference_to` an object as read (for callers holding the body)."""
    return reference_to(ObjectView.of(owner), controller=controller)


def resource_version(obj: JsonObject | None) -> str | None:
    """The object's ``metadata.resourceVersion``; None for no object or no version. Read alone, not through
    :class:`Meta` (which builds the whole metadata, owner references and all): the store asks it of every object it
    takes, each page of a restart's listing and each write's answer."""
    return None if obj is None else text_of(path_of(obj, "metadata", "resourceVersion"))


def ref_key(ref: ResourceRef) -> tuple[str, str, str, str]:
    """A hashable identity of a reference (apiVersion, kind, namespace, name)."""
    return (ref.api_version, ref.kind, ref.namespace or "", ref.name)


def ref_dicts(refs: list[ResourceRef]) -> list[Manifest]:
    return [ref.model_dump(by_alias=True, exclude_none=True) for ref in refs]


def recorded(refs: list[ResourceRef], orphans: Iterable[ResourceRef] = ()) -> list[Manifest]:
    """``status.resources`` entries for ``refs``: each reference, with ``deletionPolicy: orphan`` when it is one of
    ``orphans``. The default (delete) is not written, so an entry reads the same as one recorded before policies
    were, and such an old entry is deleted as it always was."""
    kept = {ref_key(ref) for ref in orphans}
    return [
        {**entry, "deletionPolicy": DeletionPolicy.ORPHAN.value} if ref_key(ref) in kept else entry
        for ref, entry in zip(refs, ref_dicts(refs), strict=True)
    ]


def union_refs(first: list[ResourceRef], second: list[ResourceRef]) -> list[ResourceRef]:
    seen: dict[tuple[str, str, str, str], ResourceRef] = {}
    for ref in [*first, *second]:
        seen.setdefault(ref_key(ref), ref)
    return list(seen.values())


def minus_refs(first: list[ResourceRef], second: list[ResourceRef]) -> list[ResourceRef]:
    drop = {ref_key(ref) for ref in second}
    return [ref for ref in first if ref_key(ref) not in drop]


#: The labels :func:`stamp` may add (``managed-by`` and the ones the instance and binding plans pass): what an orphaned
#: object loses with its stamp (:func:`.core.decisions.orphaning`).
STAMP_LABELS = (LABEL_MANAGED_BY, LABEL_INSTANCE, LABEL_PLAN, LABEL_BINDING, SHARD_LABEL)


def stamp(manifest: Manifest, *, owner: Owner, labels: dict[str, str], owned: bool, shared: bool = False) -> Manifest:
    """A copy of a rendered object labelled as ours, stamped with its owner's uid (the proof, checked on the live
    object, that opbroker may later change or delete it; not for a ``shared`` singleton, whose owners are its
    owner references) and, when ``owned``, owned by ``owner``.

    A ``shared`` singleton is annotated ``opbroker.io/singleton: "true"`` whatever made it one (the annotation in
    the template, the template's ``singleton: true``, a Couchbase configuration template's ``singleton: true``):
    the next instance of the plan recognises an object it may share by that annotation on the live object
    (:func:`.core.decisions.shared_singleton`), and without it a second instance of a plan whose singletons come
    from the template's flag was refused the object as another's (``ObjectNotOwned``).

    Owner references only work inside one namespace; objects rendered into another namespace (or cluster
    scoped) are cleaned up by the controller itself from ``status.resources``, where their stamp says they are
    the owner's.
    """
    metadata = dict(mapping_of(manifest.get("metadata")))
    metadata["labels"] = {**mapping_of(metadata.get("labels")), LABEL_MANAGED_BY: MANAGED_BY, **labels}
    annotations = mapping_of(metadata.get("annotations"))
    if shared:
        metadata["annotations"] = {**annotations, ANNOTATION_SINGLETON: "true"}
    else:
        metadata["annotations"] = {**annotations, ANNOTATION_OWNER_UID: owner.meta.uid}
    if owned:
        others = [r for r in objects_of(metadata.get("ownerReferences")) if r.get("uid") != owner.meta.uid]
        metadata["ownerReferences"] = [*others, reference_to(owner)]
    return {**manifest, "metadata": metadata}


def same_namespace(manifest: JsonObject, owner: Meta) -> bool:
    """Whether a manifest to write goes into ``owner``'s namespace (where an owner reference to it works)."""
    namespace = mapping_of(manifest.get("metadata")).get("namespace")
    return namespace is not None and namespace == owner.namespace
