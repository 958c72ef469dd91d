"""Small pure helpers over Kubernetes objects as dicts: owner references, labels, references."""

from __future__ import annotations

from typing import Any

from opbroker.api.conventions import ANNOTATION_OWNER_UID, LABEL_MANAGED_BY, MANAGED_BY
from opbroker.api.meta import ResourceRef


def owner_reference(owner: dict[str, Any], *, controller: bool = False) -> dict[str, Any]:
    meta = owner["metadata"]
    reference = {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "blockOwnerDeletion": True,
    }
    if controller:
        reference["controller"] = True
    return reference


def resource_version(obj: dict[str, Any] | None) -> str | None:
    """The object's ``metadata.resourceVersion``; None for no object or no version."""
    version = ((obj or {}).get("metadata") or {}).get("resourceVersion")
    return version if isinstance(version, str) else None


def ref_key(ref: ResourceRef) -> tuple[str, str, str, str]:
    """A hashable identity of a reference (apiVersion, kind, namespace, name)."""
    return (ref.api_version, ref.kind, ref.namespace or "", ref.name)


def refs_of(status: dict[str, Any] | None) -> list[ResourceRef]:
    """The references recorded in a status' ``resources`` list."""
    return [ResourceRef.model_validate(raw) for raw in (status or {}).get("resources") or []]


def ref_dicts(refs: list[ResourceRef]) -> list[dict[str, Any]]:
    return [ref.model_dump(by_alias=True, exclude_none=True) for ref in refs]


def union_refs(first: list[ResourceRef], second: list[ResourceRef]) -> list[ResourceRef]:
    seen: dict[tuple[str, str, str, str], ResourceRef] = {}
    for ref in [*first, *second]:
        seen.setdefault(ref_key(ref), ref)
    return list(seen.values())


def minus_refs(first: list[ResourceRef], second: list[ResourceRef]) -> list[ResourceRef]:
    drop = {ref_key(ref) for ref in second}
    return [ref for ref in first if ref_key(ref) not in drop]


def stamp(
    manifest: dict[str, Any], *, owner: dict[str, Any], labels: dict[str, str], owned: bool, shared: bool = False
) -> dict[str, Any]:
    """A copy of a rendered object labelled as ours, stamped with its owner's uid (the proof, checked on the live
    object, that opbroker may later change or delete it; not for a ``shared`` singleton, whose owners are its
    owner references) and, when ``owned``, owned by ``owner``.

    Owner references only work inside one namespace; objects rendered into another namespace (or cluster
    scoped) are cleaned up by the controller itself from ``status.resources``, where their stamp says they are
    the owner's.
    """
    metadata = dict(manifest.get("metadata") or {})
    metadata["labels"] = {**(metadata.get("labels") or {}), LABEL_MANAGED_BY: MANAGED_BY, **labels}
    if not shared:
        annotations = metadata.get("annotations") or {}
        metadata["annotations"] = {**annotations, ANNOTATION_OWNER_UID: owner["metadata"]["uid"]}
    if owned:
        others = [r for r in metadata.get("ownerReferences") or [] if r.get("uid") != owner["metadata"]["uid"]]
        metadata["ownerReferences"] = [*others, owner_reference(owner)]
    return {**manifest, "metadata": metadata}


def same_namespace(manifest: dict[str, Any], owner: dict[str, Any]) -> bool:
    namespace = (manifest.get("metadata") or {}).get("namespace")
    return namespace is not None and namespace == owner["metadata"].get("namespace")
