"""What abandoning an instance or a binding does (issue 43, "a way out"): the pure half of ``opbroker instance
abandon`` and ``opbroker binding abandon``.

A deprovision (or an unbind) that cannot finish — an operator that never reports it deprovisioned, a recorded object
held by someone else's finalizer — keeps opbroker's finalizer on the object for ever. Abandoning lets go of it the
way the teardown would, without waiting: every object its status records is deleted when its recorded
``deletionPolicy`` is delete and it is opbroker's for this owner (:func:`.decisions.letting_go`: never what is not
ours), orphaned when it was recorded as an orphan (:func:`.decisions.orphaning`), and a binding's credentials Secret
is deleted when it is the binding's. Then the reason is recorded and opbroker's finalizer removed.

Refused (:func:`refusal`): an object that is not being deleted (delete it first: abandon is the end of a teardown,
not a way to start one), one without opbroker's finalizer (nothing of opbroker's holds it), and an instance whose
bindings still exist — unless they are abandoned with it (``with_bindings``), each first, the same way; a binding not
being deleted yet is deleted first (:attr:`Abandoning.delete_first`), since it cannot outlive its instance.

Pure: the edge (:mod:`opbroker.controller.osb.abandoning`) reads the objects and performs what :func:`plan` decides;
``tests/controller/test_abandon_plan.py`` tables it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from opbroker.api.catalog import DeletionPolicy
from opbroker.api.conventions import credentials_secret_name
from opbroker.api.meta import ResourceRef
from opbroker.controller.core import actions as a
from opbroker.controller.core import decisions
from opbroker.controller.core.decisions import Letting
from opbroker.controller.core.views import BindingView, InstanceView, Meta, ObjectView
from opbroker.controller.runtime.objects import Manifest, ref_key

INSTANCE_KIND = "SFServiceInstance"
BINDING_KIND = "SFServiceBinding"

#: What a read found of one recorded object: the live object (None: it does not exist), keyed by
#: :func:`~opbroker.controller.runtime.objects.ref_key`.
Live = Mapping[tuple[str, str, str, str], ObjectView | None]


class Fate(StrEnum):
    """What abandoning does with one recorded object (and how the report words it)."""

    DELETE = "delete"
    """Ours alone, recorded as delete: deleted (not waited for)."""
    UNOWN = "unown"
    """Recorded as delete, shared with other owners (a singleton's other instances): our share dropped, it lives on."""
    DELETING = "deleting"
    """Ours, being deleted already: nothing to do, and nothing waits for it."""
    ORPHAN = "orphan"
    """Recorded as an orphan and still ours: left in place, our stamp, owner reference and labels dropped."""
    ORPHANED = "orphaned"
    """Recorded as an orphan and no longer ours: let go before (the teardown's ``Orphan`` ran), nothing to do."""
    LEAVE = "leave"
    """Not ours (no stamp, no owner reference of ours) or not readable with the caller's rights: never touched."""
    GONE = "gone"
    """It does not exist."""


#: The fates that write something.
ACTING = frozenset({Fate.DELETE, Fate.UNOWN, Fate.ORPHAN})

#: How each fate is worded in the preview (future) and in the report (past).
WORDS: Mapping[Fate, tuple[str, str]] = {
    Fate.DELETE: ("delete", "deleted"),
    Fate.UNOWN: ("release (shared: its other owners keep it)", "released (shared: its other owners keep it)"),
    Fate.DELETING: ("nothing (being deleted already; not waited for)", "being deleted already (not waited for)"),
    Fate.ORPHAN: ("orphan (kept, no longer managed)", "orphaned (kept, no longer managed)"),
    Fate.ORPHANED: ("nothing (orphaned before)", "orphaned before"),
    Fate.LEAVE: ("leave (not ours: never touched)", "left (not ours)"),
    Fate.GONE: ("nothing (gone)", "gone already"),
}


@dataclass(frozen=True)
class ObjectStep:
    """One recorded object: its recorded policy and what abandoning does with it."""

    ref: ResourceRef
    policy: DeletionPolicy
    fate: Fate
    live: ObjectView | None = field(default=None, repr=False, compare=False)
    """The object as read (what a guarded write carries the version of)."""
    patch: Manifest | None = None
    """:attr:`Fate.ORPHAN`: the metadata merge patch of :func:`.decisions.orphaning` (guarded by the version read)."""

    @property
    def named(self) -> str:
        """``Kind namespace/name`` (``Kind name`` when cluster-scoped)."""
        ref = self.ref
        return f"{ref.kind} {ref.namespace}/{ref.name}" if ref.namespace else f"{ref.kind} {ref.name}"


def object_step(
    ref: ResourceRef, live: ObjectView | None, *, owner_uid: str, policy: DeletionPolicy, readable: bool = True
) -> ObjectStep:
    """What abandoning does with the recorded ``ref`` (read as ``live``; ``readable`` False: the caller may not even
    read it, so it is not ours to touch — :func:`opbroker.controller.osb.ownership.held`'s rule)."""
    if not readable:
        return ObjectStep(ref, policy, Fate.LEAVE)
    letting = decisions.letting_go(live, owner_uid=owner_uid)
    if policy is DeletionPolicy.ORPHAN:
        patch = decisions.orphaning(live, owner_uid=owner_uid)
        if patch is not None:
            return ObjectStep(ref, policy, Fate.ORPHAN, live, patch)
        fate = {Letting.GONE: Fate.GONE, Letting.WAIT: Fate.DELETING}.get(letting, Fate.ORPHANED)
        return ObjectStep(ref, policy, fate, live)
    fate = {
        Letting.GONE: Fate.GONE,
        Letting.DELETE: Fate.DELETE,
        Letting.WAIT: Fate.DELETING,
        Letting.UNOWN: Fate.UNOWN,
        Letting.LEAVE: Fate.LEAVE,
    }[letting]
    return ObjectStep(ref, policy, fate, live)


@dataclass(frozen=True)
class Abandoning:
    """One instance or binding to abandon, and what it takes."""

    kind: str
    """:data:`INSTANCE_KIND` or :data:`BINDING_KIND`."""
    meta: Meta
    objects: tuple[ObjectStep, ...]
    """Its recorded objects (``status.resources``), then a binding's credentials Secret."""
    delete_first: bool = False
    """A binding not being deleted yet (abandoned with its instance): it is deleted first, then let go of."""

    @property
    def registry_kind(self) -> str:
        """Whose registry it has (:func:`opbroker.controller.osb.registries.place`'s ``kind``)."""
        return "instance" if self.kind == INSTANCE_KIND else "binding"

    @property
    def named(self) -> str:
        return f"{self.kind} {self.meta.namespace}/{self.meta.name}"

    def of(self, *fates: Fate) -> tuple[ObjectStep, ...]:
        return tuple(step for step in self.objects if step.fate in fates)


@dataclass(frozen=True)
class AbandonPlan:
    """What ``abandon`` does: nothing and why (``refusal``), or each binding first, then the target."""

    refusal: str | None
    bindings: tuple[Abandoning, ...] = ()
    target: Abandoning | None = None

    @property
    def all(self) -> tuple[Abandoning, ...]:
        """In the order they are abandoned: the bindings first."""
        return (*self.bindings, *((self.target,) if self.target is not None else ()))


def refusal(meta: Meta | None, *, kind: str, namespace: str, name: str) -> str | None:
    """Why ``kind`` ``namespace/name`` (its metadata as read; None: not found) may not be abandoned; None: it may."""
    where = f"{kind} {namespace}/{name}"
    noun = "instance" if kind == INSTANCE_KIND else "binding"
    if meta is None:
        return f"{where} does not exist"
    if not meta.deleting:
        return (
            f"{where} is not being deleted: abandon only ends a {'deprovision' if noun == 'instance' else 'unbind'} "
            f"that cannot finish. Delete it first (kubectl delete {kind.lower()} -n {namespace} {name}), and abandon "
            "it if its teardown then never completes"
        )
    if not meta.held:
        return (
            f"{where} does not carry opbroker's finalizer: nothing of opbroker's holds it (it goes once its other "
            "finalizers do)"
        )
    return None


def recorded(view: InstanceView | BindingView) -> tuple[tuple[ResourceRef, DeletionPolicy], ...]:
    """The objects ``view``'s status records, each with its recorded policy (an entry without one: delete)."""
    orphans = {ref_key(ref) for ref in view.status.orphans}
    return tuple(
        (ref, DeletionPolicy.ORPHAN if ref_key(ref) in orphans else DeletionPolicy.DELETE)
        for ref in view.status.resources
    )


def credentials_ref(binding: BindingView) -> ResourceRef:
    """The binding's credentials Secret (deleted with it: its policy is always delete)."""
    meta = binding.meta
    return ResourceRef(
        api_version="v1", kind="Secret", name=credentials_secret_name(meta.name), namespace=meta.namespace
    )


def to_read(view: InstanceView | BindingView) -> tuple[ResourceRef, ...]:
    """What the edge reads before :func:`plan` decides for ``view``: its recorded objects (and a binding's credentials
    Secret — by its metadata alone: no value of it is ever needed)."""
    refs = tuple(ref for ref, _ in recorded(view))
    return (*refs, credentials_ref(view)) if isinstance(view, BindingView) else refs


def abandoning(
    view: InstanceView | BindingView, live: Live, *, unreadable: Collection[tuple[str, str, str, str]] = ()
) -> Abandoning:
    """What abandoning ``view`` takes, given its recorded objects as read (``live``; absent from it: gone)."""
    uid = view.meta.uid
    wanted: list[tuple[ResourceRef, DeletionPolicy]] = list(recorded(view))
    if isinstance(view, BindingView):
        wanted.append((credentials_ref(view), DeletionPolicy.DELETE))
    steps = tuple(
        object_step(
            ref,
            live.get(ref_key(ref)),
            owner_uid=uid,
            policy=policy,
            readable=ref_key(ref) not in unreadable,
        )
        for ref, policy in wanted
    )
    kind = INSTANCE_KIND if isinstance(view, InstanceView) else BINDING_KIND
    return Abandoning(kind, view.meta, steps, delete_first=not view.meta.deleting)


def plan_instance(
    instance: InstanceView | None,
    bindings: Sequence[BindingView],
    live: Live,
    *,
    namespace: str,
    name: str,
    with_bindings: bool,
    unreadable: Collection[tuple[str, str, str, str]] = (),
) -> AbandonPlan:
    """Abandoning the instance ``namespace/name`` (read as ``instance``; None: not found), ``bindings`` being the
    namespace's bindings as read (those of this instance are picked here) and ``live`` the recorded objects of the
    instance and of its bindings as read. A binding being deleted without opbroker's finalizer is gone already as far
    as the instance goes (:attr:`Meta.leaving`)."""
    why = refusal(instance.meta if instance else None, kind=INSTANCE_KIND, namespace=namespace, name=name)
    if why is not None or instance is None:
        return AbandonPlan(why or "")
    own = [b for b in bindings if b.binds(instance) and not b.meta.leaving]
    if own and not with_bindings:
        names = ", ".join(sorted(b.meta.name for b in own))
        return AbandonPlan(
            f"{INSTANCE_KIND} {namespace}/{name} still has {len(own)} binding(s): {names}. Unbind them first, or pass "
            "--with-bindings to abandon them with it (each first, the same way)"
        )
    return AbandonPlan(
        None,
        bindings=tuple(abandoning(b, live, unreadable=unreadable) for b in sorted(own, key=lambda b: b.meta.name)),
        target=abandoning(instance, live, unreadable=unreadable),
    )


def plan_binding(
    binding: BindingView | None,
    live: Live,
    *,
    namespace: str,
    name: str,
    unreadable: Collection[tuple[str, str, str, str]] = (),
) -> AbandonPlan:
    """Abandoning the binding ``namespace/name`` (read as ``binding``; None: not found)."""
    why = refusal(binding.meta if binding else None, kind=BINDING_KIND, namespace=namespace, name=name)
    if why is not None or binding is None:
        return AbandonPlan(why or "")
    return AbandonPlan(None, target=abandoning(binding, live, unreadable=unreadable))


def event_message(target: Abandoning, *, reason: str, by: str | None) -> str:
    """The Warning Event (reason ``Abandoned``) on an abandoned object: who, why, and what became of its objects
    (counts; the report lists them). Cut to an Event's 1 024 characters by the writer."""
    counts = [
        f"{len(target.of(Fate.DELETE))} deleted",
        f"{len(target.of(Fate.UNOWN))} released (shared)",
        f"{len(target.of(Fate.ORPHAN, Fate.ORPHANED))} orphaned",
        f"{len(target.of(Fate.LEAVE))} left (not ours)",
    ]
    who = by or "an unknown user"
    return (
        f"abandoned by {who}: {reason} — opbroker's finalizer removed without waiting for the teardown; recorded "
        f"objects: {', '.join(counts)}"
    )


def finalizer_released(meta: Meta, *, uid: str) -> tuple[a.EnsureFinalizer, ...] | str:
    """The last step, on the object as read again just before: opbroker's finalizer removed — by the owner's own
    action (:class:`~.actions.EnsureFinalizer`, run by the executor as the owner of the finalizer on the kind,
    :data:`~.finalizers.OWNERS`) — or why there is nothing to remove (gone meanwhile; a namesake made since is not
    this object; not there any more)."""
    if meta.uid != uid:
        return "gone meanwhile"
    if not meta.held:
        return "not there any more"
    return (a.EnsureFinalizer(present=False),)
