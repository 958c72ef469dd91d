"""Shared singletons that owner references cannot hold, tracked by opbroker (issue 29).

A singleton (``opbroker.io/singleton: "true"``) in its instances' namespace is held by their owner references:
the last owner's release deletes it, the garbage collector does too. One that is cluster-scoped (the seed's
ClusterRole) or in another namespace cannot carry owner references to them, so opbroker keeps the list of its
users on the object itself, in :data:`ANNOTATION_SINGLETON_USERS` (a JSON list of instance uids):

* an instance that creates the singleton creates it listing itself; one that finds it adds itself;
* an instance's release removes itself; the last one deletes the object (``ownership.release``).

Why on the object and not in a record of our own: the list and the object then live and die together (no
record to leak or to disagree with what exists), and every change is one write guarded by the object's
resourceVersion, so two instances joining or leaving at once never lose each other's entry: the loser of the
race gets a 409, which propagates — in a reconcile the runtime's one conflict policy repeats the whole reconcile
on a fresh read (the door marks its copy of the object behind), out of one (``opbroker instance abandon``) the
caller reads afresh and decides again. Deleting the last user's singleton is guarded the same way (a
precondition on the version), so an instance that joined in between keeps it.
"""

from __future__ import annotations

from opbroker.api.conventions import ANNOTATION_SINGLETON_USERS
from opbroker.api.meta import ResourceRef
from opbroker.controller.core import decisions
from opbroker.controller.core.views import ObjectView
from opbroker.controller.kube import Kube
from opbroker.controller.runtime.outcomes import Conflict
from opbroker.kubeclient.wire import JsonBody, JsonObject, mapping_of


class SingletonFull(RuntimeError):
    """The singleton lists :data:`decisions.MAX_SINGLETON_USERS` instances already; this one is refused."""

    def __init__(self, ref: ResourceRef) -> None:
        where = f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name
        super().__init__(
            f"{ref.kind} {where} is shared by {decisions.MAX_SINGLETON_USERS} instances already, the most opbroker "
            "tracks on one object; give the plan's singleton a name per group of instances"
        )
        self.ref = ref


def tracked(manifest: JsonObject, owner_uid: str) -> JsonBody:
    """A copy of a singleton's manifest that, created, lists ``owner_uid`` as its first user."""
    metadata = dict(mapping_of(manifest.get("metadata")))
    annotations = mapping_of(metadata.get("annotations"))
    metadata["annotations"] = {**annotations, ANNOTATION_SINGLETON_USERS: f'["{owner_uid}"]'}
    return {**manifest, "metadata": metadata}


def join(kube: Kube, ref: ResourceRef, live: ObjectView, owner_uid: str) -> None:
    """List ``owner_uid`` among the users of the existing singleton ``live`` (nothing when it is listed); one
    write guarded by the version read (its 409 propagates: see the module)."""
    users = decisions.singleton_users(live.meta)
    if owner_uid in users:
        return
    if len(users) >= decisions.MAX_SINGLETON_USERS:
        raise SingletonFull(ref)
    patch = {
        "metadata": {
            "annotations": {ANNOTATION_SINGLETON_USERS: decisions.users_annotation([*users, owner_uid])},
            "resourceVersion": live.meta.resource_version,
        }
    }
    if kube.merge_patch(ref, patch) is None:
        raise Conflict(f"{ref.kind} {ref.name} went while this instance joined it; it is made again")


def leave(kube: Kube, ref: ResourceRef, live: ObjectView, owner_uid: str) -> bool:
    """Remove ``owner_uid`` from a shared object's owners (owner references and tracked users) — or delete it
    when it is the last — in one write guarded by the version read (its 409 propagates: see the module). True
    while a deletion is in progress."""
    step = decisions.letting_go(live, owner_uid=owner_uid)
    if step in (decisions.Letting.GONE, decisions.Letting.LEAVE):
        return False
    if step is decisions.Letting.WAIT:
        return True
    meta = live.meta
    if step is decisions.Letting.DELETE:
        kube.delete(ref, resource_version=meta.resource_version)
        return True
    users = decisions.singleton_users(meta)
    changes: JsonBody = {"resourceVersion": meta.resource_version}
    if meta.owned_by(owner_uid):
        changes["ownerReferences"] = [dict(o.wire) for o in meta.owners if o.uid != owner_uid]
    if owner_uid in users:
        rest = decisions.users_annotation(u for u in users if u != owner_uid)
        changes["annotations"] = {ANNOTATION_SINGLETON_USERS: rest}
    kube.merge_patch(ref, {"metadata": changes})
    return False
