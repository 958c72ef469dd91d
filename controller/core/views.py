"""Typed, read-only views over the wire objects the controller reconciles.

A view is built once from the body the API server (or the store) returned, and the reconcilers decide on its
attributes instead of reading string keys out of nested dicts. Views tolerate everything the server adds:
they read the fields they name and ignore the rest, and a field of the wrong type (an object edited by hand)
reads as absent rather than failing the reconcile.

Why not the pydantic models of :mod:`opbroker.api`: those are the *contract* of what a user may write
(``extra="forbid"``, patterns, minimum lengths), so they refuse objects the controller must still be able to
reconcile — a status written by an older controller, a hand-made object with a typo — and validating every
body on every reconcile would cost the controller CPU the bench counts. The views reuse the api's value types
(:class:`~opbroker.api.meta.ResourceRef`, :class:`~opbroker.api.osb.OperationState`'s values) and its
conventions (:data:`~opbroker.api.conventions.FINALIZER`).

``wire`` keeps the body as read, for what needs the whole object (the renderer's inputs, owner references).
Nothing writes to it: the executor (:mod:`opbroker.controller.runtime.executor`) works from the versions its own
writes return.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from opbroker.api.catalog import DeletionPolicy
from opbroker.api.conventions import ANNOTATION_OWNER_UID, ANNOTATION_PAUSED, FINALIZER, PAUSED
from opbroker.api.meta import ResourceRef
from opbroker.api.osb import OperationState
from opbroker.kubeclient.wire import (
    EMPTY,
    JsonBody,
    JsonObject,
    int_of,
    mapping_of,
    objects_of,
    path_of,
    string_map_of,
    strings_of,
    text_of,
)

# The field readers every kind's views use are the wire's: a field of the wrong type reads as absent (a tenant may
# write anything into an object the controller reads; it must not make the controller fail).


def recorded_refs(value: object) -> tuple[ResourceRef, ...]:
    """A status' recorded references; an entry that is not a reference is skipped (never released)."""
    if not isinstance(value, list):
        return ()
    refs = []
    for raw in value:
        if isinstance(raw, Mapping) and raw.get("apiVersion") and raw.get("kind") and raw.get("name"):
            refs.append(
                ResourceRef(
                    api_version=str(raw["apiVersion"]),
                    kind=str(raw["kind"]),
                    name=str(raw["name"]),
                    namespace=text_of(raw.get("namespace")),
                )
            )
    return tuple(refs)


def _orphans(value: object) -> tuple[ResourceRef, ...]:
    """The recorded references whose ``deletionPolicy`` is ``orphan`` (any other value, or none, is delete)."""
    if not isinstance(value, list):
        return ()
    kept = [raw for raw in value if isinstance(raw, Mapping) and raw.get("deletionPolicy") == DeletionPolicy.ORPHAN]
    return recorded_refs(kept)


def _spec(body: JsonObject) -> JsonObject | None:
    spec = body.get("spec")
    return spec if isinstance(spec, Mapping) else None


@dataclass(frozen=True)
class OwnerRef:
    """One of ``metadata.ownerReferences``."""

    uid: str
    api_version: str | None = None
    kind: str | None = None
    name: str | None = None
    controller: bool = False
    wire: JsonObject = field(default_factory=lambda: EMPTY, repr=False, compare=False)
    """The entry as read, whole: what a patch of the list writes back for the owners it keeps."""


def owner_refs_of(value: object) -> tuple[OwnerRef, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(
        OwnerRef(
            uid=uid,
            api_version=text_of(o.get("apiVersion")),
            kind=text_of(o.get("kind")),
            name=text_of(o.get("name")),
            controller=o.get("controller") is True,
            wire=o,
        )
        for o in value
        if isinstance(o, Mapping) and (uid := text_of(o.get("uid")))
    )


@dataclass(frozen=True)
class Meta:
    """The ``metadata`` every kind shares."""

    name: str
    namespace: str
    uid: str
    generation: int | None
    resource_version: str | None
    finalizers: tuple[str, ...]
    deleting: bool
    """``deletionTimestamp`` is set: the object goes once its finalizers are removed."""
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    owners: tuple[OwnerRef, ...]
    """Its ``ownerReferences`` (an entry without a uid is skipped: it names no owner)."""

    @classmethod
    def of(cls, metadata: object) -> Meta:
        meta = mapping_of(metadata)
        return cls(
            name=text_of(meta.get("name")) or "",
            namespace=text_of(meta.get("namespace")) or "",
            uid=text_of(meta.get("uid")) or "",
            generation=int_of(meta.get("generation")),
            resource_version=text_of(meta.get("resourceVersion")),
            finalizers=strings_of(meta.get("finalizers")),
            deleting=bool(meta.get("deletionTimestamp")),
            labels=string_map_of(meta.get("labels")),
            annotations=string_map_of(meta.get("annotations")),
            owners=owner_refs_of(meta.get("ownerReferences")),
        )

    @property
    def owner_uids(self) -> tuple[str, ...]:
        """The uids of its ``ownerReferences``."""
        return tuple(o.uid for o in self.owners)

    def owned_by(self, uid: str) -> bool:
        """Whether an owner reference names ``uid``."""
        return any(o.uid == uid for o in self.owners)

    def stamped(self, uid: str) -> bool:
        """Whether it carries opbroker's owner stamp for ``uid`` (:data:`ANNOTATION_OWNER_UID`): the proof that
        opbroker made it for that owner (see :func:`opbroker.api.conventions.owned_by`)."""
        return self.annotations.get(ANNOTATION_OWNER_UID) == uid

    @property
    def paused(self) -> bool:
        """Whether an administrator paused the object (:data:`ANNOTATION_PAUSED` is :data:`PAUSED`): opbroker
        changes nothing for it but its deletion."""
        return self.annotations.get(ANNOTATION_PAUSED) == PAUSED

    @property
    def held(self) -> bool:
        """Whether opbroker's finalizer is on the object."""
        return FINALIZER in self.finalizers

    @property
    def leaving(self) -> bool:
        """Being deleted without opbroker's finalizer: its DELETE completes without the controller, so it is
        gone already as far as a count of users goes."""
        return self.deleting and not self.held


class Owner(Protocol):
    """What an owner reference names: any view of an object (its kind and its metadata)."""

    @property
    def api_version(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def meta(self) -> Meta: ...


@dataclass(frozen=True)
class ConditionView:
    type: str
    status: str
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = None
    observed_generation: int | None = None


def conditions_of(value: object) -> tuple[ConditionView, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(
        ConditionView(
            type=str(c["type"]),
            status=str(c.get("status") or "Unknown"),
            reason=text_of(c.get("reason")),
            message=text_of(c.get("message")),
            last_transition_time=text_of(c.get("lastTransitionTime")),
            observed_generation=int_of(c.get("observedGeneration")),
        )
        for c in value
        if isinstance(c, Mapping) and isinstance(c.get("type"), str)
    )


@dataclass(frozen=True)
class OperationView:
    """What a status says of the current operation: its state and the fields the controller keeps beside it."""

    state: str | None
    """An :class:`OperationState` value, or None before the controller or broker wrote one."""
    description: str | None
    error: str | None
    last_operation_type: str | None
    """The broker's ``lastOperation.type`` (provision, update, bind...)."""
    resources: tuple[ResourceRef, ...]
    """Everything ever applied for the object and not released yet (``status.resources``)."""
    observed_generation: int | None
    error_count: int
    conditions: tuple[ConditionView, ...]
    records_resources: bool = False
    """``status.resources`` holds anything, even entries that are not references: something was applied."""
    started_at: str | None = None
    """When the controller saw the current operation begin (``status.operationStartedAt``)."""
    requested_at: str | None = None
    """When the broker was asked for it (``status.lastOperation.startedAt``)."""
    orphans: tuple[ResourceRef, ...] = ()
    """The recorded objects to be let go without deletion (their entry's ``deletionPolicy: orphan``, recorded from
    the template that rendered them when they were applied); every other recorded object is deleted."""

    @classmethod
    def of(cls, status: object) -> OperationView:
        s = mapping_of(status)
        last = mapping_of(s.get("lastOperation"))
        return cls(
            state=text_of(s.get("state")),
            description=text_of(s.get("description")),
            error=text_of(s.get("error")),
            last_operation_type=text_of(last.get("type")),
            resources=recorded_refs(s.get("resources")),
            observed_generation=int_of(s.get("observedGeneration")),
            error_count=int_of(s.get("errorCount")) or 0,
            conditions=conditions_of(s.get("conditions")),
            records_resources=bool(s.get("resources")),
            started_at=text_of(s.get("operationStartedAt")),
            requested_at=text_of(last.get("startedAt")),
            orphans=_orphans(s.get("resources")),
        )

    @property
    def in_progress(self) -> bool:
        return self.state == OperationState.IN_PROGRESS.value

    def condition(self, type_: str) -> ConditionView | None:
        return next((c for c in self.conditions if c.type == type_), None)


@dataclass(frozen=True)
class CheckedView:
    """``status.checked``: what a settled instance's last check found as declared read beside the recorded objects
    (the status template's ``sources``) and the digest of it all. Written by the controller, writable by a tenant:
    trusted only when the digest, made with the controller's key (``core.digests``), matches what the store holds."""

    sources: tuple[ResourceRef, ...]
    digest: str
    health: str
    """The health the check found (``ready``, ``unready``, ``unknown``: anything else reads as unknown)."""

    @classmethod
    def maybe(cls, value: object) -> CheckedView | None:
        checked = mapping_of(value)
        digest = text_of(checked.get("digest"))
        if not digest:
            return None
        health = text_of(checked.get("health"))
        known = health if health in ("ready", "unready", "unknown") else "unknown"
        return cls(sources=recorded_refs(checked.get("sources")), digest=digest, health=known)


@dataclass(frozen=True)
class InstanceView:
    """An SFServiceInstance as read."""

    api_version: str
    kind: str
    meta: Meta
    instance_id: str
    """The OSB instance id (``spec.instanceId``; the object's name when absent)."""
    service_id: str
    plan_id: str
    context: JsonObject
    """The OSB request context (``spec.context``)."""
    context_namespace: str | None
    """The namespace the request context names (``spec.context.namespace``)."""
    status: OperationView
    applied_plan_hash: str | None
    """The plan version last applied (``status.appliedPlanHash``; None: never applied)."""
    spec: JsonObject | None
    """The spec as read, whole (recorded with an apply as ``status.appliedSpec``)."""
    wire: JsonObject = field(repr=False, compare=False)
    """The body as read, for the renderer's inputs (never written to)."""
    checked: CheckedView | None = None
    """The last check found as declared, as recorded in the status (``status.checked``; None: none recorded)."""

    @classmethod
    def of(cls, body: JsonObject) -> InstanceView:
        meta = Meta.of(body.get("metadata"))
        spec = mapping_of(body.get("spec"))
        status = mapping_of(body.get("status"))
        return cls(
            api_version=text_of(body.get("apiVersion")) or "",
            kind=text_of(body.get("kind")) or "",
            meta=meta,
            instance_id=text_of(spec.get("instanceId")) or meta.name,
            service_id=text_of(spec.get("serviceId")) or "",
            plan_id=text_of(spec.get("planId")) or "",
            context=(context := mapping_of(spec.get("context"))),
            context_namespace=text_of(context.get("namespace")),
            status=OperationView.of(status),
            applied_plan_hash=text_of(status.get("appliedPlanHash")),
            spec=_spec(body),
            wire=body,
            checked=CheckedView.maybe(status.get("checked")),
        )

    @property
    def generation_pending(self) -> bool:
        """The spec changed since the controller last applied it."""
        return self.meta.generation != self.status.observed_generation


@dataclass(frozen=True)
class BindingView:
    """An SFServiceBinding as read."""

    api_version: str
    kind: str
    meta: Meta
    binding_id: str
    instance_ref: str
    """The instance it binds (``spec.instanceId``: the instance's OSB id or name)."""
    plan_id: str
    status: OperationView
    responded: bool
    """A bind response is recorded (``status.response``): the binding was bound once."""
    sources: tuple[ResourceRef, ...] | None
    """What its credentials were last rendered from (``status.sources``; None: not recorded)."""
    sources_digest: str | None
    spec: JsonObject | None
    """The spec as read, whole (recorded with a bind as ``status.appliedSpec``)."""
    wire: JsonObject = field(repr=False, compare=False)

    @classmethod
    def of(cls, body: JsonObject) -> BindingView:
        meta = Meta.of(body.get("metadata"))
        spec = mapping_of(body.get("spec"))
        status = mapping_of(body.get("status"))
        return cls(
            api_version=text_of(body.get("apiVersion")) or "",
            kind=text_of(body.get("kind")) or "",
            meta=meta,
            binding_id=text_of(spec.get("id")) or meta.name,
            instance_ref=text_of(spec.get("instanceId")) or "",
            plan_id=text_of(spec.get("planId")) or "",
            status=OperationView.of(status),
            responded=bool(status.get("response")),
            sources=recorded_refs(status.get("sources")) if isinstance(status.get("sources"), list) else None,
            sources_digest=text_of(status.get("sourcesDigest")),
            spec=_spec(body),
            wire=body,
        )

    @property
    def generation_pending(self) -> bool:
        """The spec changed since the controller last applied it."""
        return self.meta.generation != self.status.observed_generation

    def binds(self, instance: InstanceView) -> bool:
        """Whether this binding refers to ``instance`` (by OSB id or by name)."""
        return self.instance_ref in (instance.instance_id, instance.meta.name)


@dataclass(frozen=True)
class EntryView:
    """An SFService or SFPlan (a catalog entry) as read: its id and what its status says of it."""

    meta: Meta
    osb_id: str
    """The OSB id it declares (``spec.id``; "" when absent)."""
    service_id: str
    """An SFPlan's service (``spec.serviceId``; "" when absent, and for an SFService)."""
    spec: JsonObject
    """The spec as read, whole (what a plan's version is hashed from)."""
    observed_generation: int | None
    conditions: tuple[ConditionView, ...]
    wire: JsonObject = field(repr=False, compare=False)
    """The body as read, for what needs the whole object (validation, the trial render)."""

    @classmethod
    def of(cls, body: JsonObject) -> EntryView:
        status, spec = mapping_of(body.get("status")), mapping_of(body.get("spec"))
        return cls(
            meta=Meta.of(body.get("metadata")),
            osb_id=text_of(spec.get("id")) or "",
            service_id=text_of(spec.get("serviceId")) or "",
            spec=spec,
            observed_generation=int_of(status.get("observedGeneration")),
            conditions=conditions_of(status.get("conditions")),
            wire=body,
        )

    @property
    def mark(self) -> tuple[str, int | None]:
        """What a verdict on it holds for: its uid and generation (a new spec is a new generation)."""
        return self.meta.uid, self.meta.generation

    def condition(self, type_: str) -> ConditionView | None:
        return next((c for c in self.conditions if c.type == type_), None)


def condition_wire(condition: ConditionView) -> JsonBody:
    """A condition as written back (a status patch replaces the whole list, so kept ones are written too)."""
    wire: JsonBody = {"type": condition.type, "status": condition.status}
    for name, value in (
        ("reason", condition.reason),
        ("message", condition.message),
        ("lastTransitionTime", condition.last_transition_time),
        ("observedGeneration", condition.observed_generation),
    ):
        if value is not None:
            wire[name] = value
    return wire


@dataclass(frozen=True)
class ObjectView:
    """Any object as read (a live object the controller may write over or release, a singleton, a Namespace):
    its identity and metadata."""

    api_version: str
    kind: str
    meta: Meta
    wire: JsonObject = field(repr=False, compare=False)

    @classmethod
    def of(cls, body: JsonObject) -> ObjectView:
        return cls(
            api_version=text_of(body.get("apiVersion")) or "",
            kind=text_of(body.get("kind")) or "",
            meta=Meta.of(body.get("metadata")),
            wire=body,
        )

    @classmethod
    def maybe(cls, body: JsonObject | None) -> ObjectView | None:
        """The view of ``body``, None for no object (a read that found nothing)."""
        return None if body is None else cls.of(body)


@dataclass(frozen=True)
class ApiStatus:
    """The API server's answer to a refused request (a ``Status``, as text or parsed): what it says and why, and
    which resource it is about (``details.kind`` — the plural — and ``details.group``); anything else in it
    (``details.causes`` quote the values refused) is never read."""

    message: str | None
    reason: str | None
    resource: str | None = None
    """``details.kind``: the plural the request was for (``configmaps``), when the API server names it."""
    group: str | None = None
    """``details.group``: its API group (``""`` or absent: the core group)."""

    @classmethod
    def of(cls, body: object) -> ApiStatus:
        if isinstance(body, (str, bytes)):
            try:
                body = json.loads(body)
            except ValueError:
                body = None
        parsed = mapping_of(body)
        details = mapping_of(parsed.get("details"))
        return cls(
            message=text_of(parsed.get("message")),
            reason=text_of(parsed.get("reason")),
            resource=text_of(details.get("kind")),
            group=text_of(details.get("group")),
        )


@dataclass(frozen=True)
class ApiResource:
    """One entry of an API group version's discovery document (``resources``)."""

    name: str
    """The plural (``sfserviceinstances``; a subresource's is ``<plural>/<sub>``)."""
    kind: str
    singular_name: str | None
    short_names: tuple[str, ...]
    verbs: frozenset[str]
    namespaced: bool = False

    @classmethod
    def of(cls, entry: object) -> ApiResource:
        raw = mapping_of(entry)
        return cls(
            name=text_of(raw.get("name")) or "",
            kind=text_of(raw.get("kind")) or "",
            singular_name=text_of(raw.get("singularName")),
            short_names=strings_of(raw.get("shortNames")),
            verbs=frozenset(strings_of(raw.get("verbs"))),
            namespaced=raw.get("namespaced") is True,
        )

    @property
    def subresource(self) -> bool:
        return "/" in self.name

    def named(self, name: str) -> bool:
        """Whether a selector's ``name`` denotes it (like kopf: plural, kind, singular or a short name)."""
        lowered = name.lower()
        names = {self.name, self.kind.lower(), self.singular_name, *self.short_names}
        return lowered in names or name == self.kind


def resources_of(discovery: object) -> tuple[ApiResource, ...]:
    """The ``resources`` of a discovery document (parsed)."""
    listed = mapping_of(discovery).get("resources")
    return tuple(ApiResource.of(r) for r in listed) if isinstance(listed, list) else ()


@dataclass(frozen=True)
class SecretView:
    """A Secret as read: its metadata and its (base64) data; a value that is not a string reads as absent."""

    meta: Meta
    type: str | None
    data: Mapping[str, str]
    wire: JsonObject = field(repr=False, compare=False)

    @classmethod
    def of(cls, body: JsonObject) -> SecretView:
        return cls(
            meta=Meta.of(body.get("metadata")),
            type=text_of(body.get("type")),
            data=string_map_of(body.get("data")),
            wire=body,
        )

    @classmethod
    def maybe(cls, body: JsonObject | None) -> SecretView | None:
        return None if body is None else cls.of(body)


@dataclass(frozen=True)
class NodeView:
    """A Node as the capacity of a cluster reads it: its ``status.capacity`` and ``status.allocatable`` (resource
    name to quantity, as sent: a string or a number)."""

    meta: Meta
    capacity: JsonObject
    allocatable: JsonObject

    @classmethod
    def of(cls, body: JsonObject) -> NodeView:
        status = mapping_of(body.get("status"))
        return cls(
            meta=Meta.of(body.get("metadata")),
            capacity=mapping_of(status.get("capacity")),
            allocatable=mapping_of(status.get("allocatable")),
        )


@dataclass(frozen=True)
class PodView:
    """A Pod as the capacity of a cluster reads it: what each of its containers requests
    (``spec.containers[].resources.requests``, one map per container)."""

    meta: Meta
    requests: tuple[JsonObject, ...]

    @classmethod
    def of(cls, body: JsonObject) -> PodView:
        containers = objects_of(mapping_of(body.get("spec")).get("containers"))
        return cls(
            meta=Meta.of(body.get("metadata")),
            requests=tuple(mapping_of(path_of(c, "resources", "requests")) for c in containers),
        )


def namespace_terminating(namespace: JsonObject | None) -> bool:
    """Whether a Namespace (as read; None: it does not exist) is going: phase ``Terminating`` or a
    ``deletionTimestamp``. Nothing can be created in it any more (the API server answers 403)."""
    if namespace is None:
        return True
    meta = Meta.of(namespace.get("metadata"))
    return meta.deleting or mapping_of(namespace.get("status")).get("phase") == "Terminating"


class EventView(NamedTuple):
    """What the watch handlers read of an instance's or a binding's event, and no more: it is built for every
    event (thousands at a restart), so it reads a handful of fields and no conditions or references (and is a
    named tuple: a frozen dataclass' construction costs twice as much)."""

    plan_id: str
    service_id: str
    instance_ref: str
    """A binding's instance (``spec.instanceId``; "" for an instance)."""
    state: str | None
    resource_version: str | None
    fingerprint: tuple[object, ...]
    """What a reconcile decides on (generation, deletion, our finalizer, state, observed generation, paused): an
    event that leaves it unchanged needs no reconcile."""

    @classmethod
    def of(cls, body: JsonObject) -> EventView:
        meta, spec, status = (
            mapping_of(body.get("metadata")),
            mapping_of(body.get("spec")),
            mapping_of(body.get("status")),
        )
        state = status.get("state")
        return cls(
            plan_id=text_of(spec.get("planId")) or "",
            service_id=text_of(spec.get("serviceId")) or "",
            instance_ref=text_of(spec.get("instanceId")) or "",
            state=text_of(state),
            resource_version=text_of(meta.get("resourceVersion")),
            fingerprint=(
                meta.get("generation"),
                meta.get("deletionTimestamp"),
                FINALIZER in strings_of(meta.get("finalizers")),
                state,
                status.get("observedGeneration"),
                mapping_of(meta.get("annotations")).get(ANNOTATION_PAUSED) == PAUSED,
            ),
        )
