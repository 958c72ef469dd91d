"""Shared singletons that owner references cannot hold, tracked by opbroker (issue 29).

A singleton (``opbroker.io/singleton: "true"``) in its instances' namespace is held by their owner references:
the last owner's release deletes it, the garbage collector does too. One that is cluster-scoped (the seed's
ClusterRole) or in another namespace cannot carry owner references to them, so opbroker keeps the list of its
users on the object itself, in :data:`ANNOTATION_SINGLETON_USERS` (a JSON list of instance uids):

* an instance that creates the singleton creates it listing itself; one that finds it adds itself;
* an instance's release removes itself; the last one deletes the object (``instance_plan.release``).

Which write joining or leaving means is decided purely, from the object as read (:mod:`.core.singleton_plan`: the
users and owners it lists, its version); this module performs it (:func:`perform`).

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
from opbroker.controller.core import actions as a
from opbroker.controller.core import decisions
from opbroker.controller.core.views import ObjectView
from opbroker.controller.osb.core import singleton_plan
from opbroker.controller.runtime.kube import Kube
from opbroker.controller.runtime.outcomes import Conflict
from opbroker.kubeclient.wire import JsonBody, JsonObject, mapping_of


def tracked(manifest: JsonObject, owner_uid: str) -> JsonBody:
    """A copy of a singleton's manifest that, created, lists ``owner_uid`` as its first user."""
    metadata = dict(mapping_of(manifest.get("metadata")))
    annotations = mapping_of(metadata.get("annotations"))
    metadata["annotations"] = {**annotations, ANNOTATION_SINGLETON_USERS: f'["{owner_uid}"]'}
    return {**manifest, "metadata": metadata}


def leave(kube: Kube, ref: ResourceRef, live: ObjectView, owner_uid: str) -> bool:
    """Remove ``owner_uid`` from a shared object's owners (owner references and tracked users) — or delete it
    when it is the last — in one write guarded by the version read (:func:`singleton_plan.leaving` decides; its
    409 propagates: see the module). True while a deletion is in progress."""
    step = singleton_plan.leaving(live, ref, owner_uid=owner_uid)
    if step.write is not None:
        perform(kube, step.write)
    return step.waiting


SingletonWrite = a.JoinSingleton | a.ShareSingleton | a.LeaveSingleton | a.DeleteSingleton


def perform(kube: Kube, action: SingletonWrite) -> None:
    """Make one write :mod:`.core.singleton_plan` decided, as it says, guarded by the version it carries (a 409
    propagates as an ``ApiException``, which the runtime treats as a conflict)."""
    ref = action.ref
    match action:
        case a.JoinSingleton(users=users, resource_version=version):
            annotations = {ANNOTATION_SINGLETON_USERS: decisions.users_annotation(users)}
            patch = {"metadata": {"annotations": annotations, "resourceVersion": version}}
            if kube.merge_patch(ref, patch) is None:
                raise Conflict(f"{ref.kind} {ref.name} went while this instance joined it; it is made again")
        case a.ShareSingleton(owners=owners, resource_version=version):
            shared = {"ownerReferences": [dict(o) for o in owners], "resourceVersion": version}
            kube.merge_patch(ref, {"metadata": shared})
        case a.LeaveSingleton(owners=owners, users=users, resource_version=version):
            changes: JsonBody = {"resourceVersion": version}
            if owners is not None:
                changes["ownerReferences"] = [dict(o) for o in owners]
            if users is not None:
                changes["annotations"] = {ANNOTATION_SINGLETON_USERS: decisions.users_annotation(users)}
            kube.merge_patch(ref, {"metadata": changes})
        case a.DeleteSingleton(resource_version=version):
            kube.delete(ref, resource_version=version)
