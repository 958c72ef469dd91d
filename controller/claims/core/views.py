"""Typed, read-only views over the claims kinds' wire objects (as :mod:`opbroker.controller.core.views` for
instances and bindings): the plans decide on attributes, not on string keys read out of nested dicts.

They tolerate what the server adds (unknown fields are ignored) and a field of the wrong type reads as absent.
``wire`` keeps the body as read for what needs the whole object (a pydantic model of the spec, a manifest's
owner); nothing writes to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from opbroker.api.conventions import ANNOTATION_OWNER_UID
from opbroker.controller.core.views import BindingView, ConditionView, Meta, conditions_of
from opbroker.kubeclient.wire import JsonBody, JsonObject, int_of, mapping_of, objects_of, strings_of, text_of


@dataclass(frozen=True)
class OwnerRef:
    """What an owner reference names: the object that owns (and whose uid stamps) a Secret or Job written."""

    api_version: str
    kind: str
    name: str
    namespace: str
    uid: str

    @classmethod
    def of(cls, body: JsonObject) -> OwnerRef:
        meta = Meta.of(body.get("metadata"))
        return cls(
            api_version=text_of(body.get("apiVersion")) or "",
            kind=text_of(body.get("kind")) or "",
            name=meta.name,
            namespace=meta.namespace,
            uid=meta.uid,
        )

    def controlling(self) -> JsonBody:
        """The owner reference written (controlling, blocking the owner's deletion until it is gone)."""
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


@dataclass(frozen=True)
class Stamped:
    """What every stamped object shares: its metadata and whose it is (``opbroker.io/owner-uid``)."""

    meta: Meta

    def owned_by(self, uid: str) -> bool:
        return bool(uid) and self.meta.annotations.get(ANNOTATION_OWNER_UID) == uid


@dataclass(frozen=True)
class ClaimView(Stamped):
    """A ServiceClaim as read."""

    state: str | None
    registered_service: str | None
    """The service the status says it holds (as the claim names it: ``ns/name`` when of another namespace)."""
    binding_secret: str | None
    reason: str | None
    conditions: tuple[JsonObject, ...]
    candidates: tuple[JsonObject, ...]
    """``status.candidates``: the verdicts last written (plain JSON, compared whole)."""
    service_namespaces: tuple[str, ...]
    """``spec.serviceNamespaces``, deduplicated in order."""
    environment: str
    """``spec.environmentTag`` ("" when absent)."""
    application_kind: tuple[str, str] | None
    """The workload kind ``spec.application`` selects (apiVersion, kind; Deployments by default), None: none."""
    wire: JsonObject = field(repr=False, compare=False)

    @classmethod
    def of(cls, body: JsonObject) -> ClaimView:
        status = mapping_of(body.get("status"))
        spec = mapping_of(body.get("spec"))
        application = spec.get("application")
        kind = None
        if isinstance(application, Mapping) and application:
            api_version = text_of(application.get("apiVersion")) or "apps/v1"
            kind = (api_version, text_of(application.get("kind")) or "Deployment")
        return cls(
            meta=Meta.of(body.get("metadata")),
            state=text_of(status.get("state")),
            registered_service=text_of(status.get("registeredService")),
            binding_secret=text_of(status.get("bindingSecret")),
            reason=text_of(status.get("reason")),
            conditions=objects_of(status.get("conditions")),
            candidates=objects_of(status.get("candidates")),
            service_namespaces=tuple(dict.fromkeys(strings_of(spec.get("serviceNamespaces")))),
            environment=text_of(spec.get("environmentTag")) or "",
            application_kind=kind,
            wire=body,
        )

    def condition(self, type_: str) -> JsonObject | None:
        return next((c for c in self.conditions if c.get("type") == type_), None)

    def condition_reason(self, type_: str) -> str | None:
        """The reason of its condition ``type_`` (None: no such condition, or no reason)."""
        return text_of((self.condition(type_) or {}).get("reason"))


@dataclass(frozen=True)
class ServiceView(Stamped):
    """A RegisteredService as read."""

    state: str | None
    claimed_by: str | None
    consecutive_failures: int
    conditions: tuple[JsonObject, ...]
    endpoint_secrets: frozenset[str]
    """The Secrets its endpoint definition reads (``valueFromSecret.name``), in its own namespace."""
    wire: JsonObject = field(repr=False, compare=False)

    @classmethod
    def of(cls, body: JsonObject) -> ServiceView:
        status = mapping_of(body.get("status"))
        failures = status.get("consecutiveFailures")
        items = mapping_of(body.get("spec")).get("serviceEndpointDefinition")
        secrets = frozenset(
            name
            for item in (items if isinstance(items, list) else ())
            if isinstance(item, Mapping) and (name := text_of(mapping_of(item.get("valueFromSecret")).get("name")))
        )
        return cls(
            meta=Meta.of(body.get("metadata")),
            state=text_of(status.get("state")),
            claimed_by=text_of(status.get("claimedBy")),
            consecutive_failures=int_of(failures) or 0,
            conditions=objects_of(status.get("conditions")),
            endpoint_secrets=secrets,
            wire=body,
        )


def _owners(metadata: JsonObject) -> tuple[tuple[str, str, str], ...]:
    refs = metadata.get("ownerReferences")
    return tuple(
        (text_of(ref.get("kind")) or "", text_of(ref.get("name")) or "", text_of(ref.get("uid")) or "")
        for ref in (refs if isinstance(refs, list) else ())
        if isinstance(ref, Mapping)
    )


@dataclass(frozen=True)
class ObjectView(Stamped):
    """A Secret or a Job opbroker writes for a claim or a service: whose it is, its type, its version."""

    type: str | None
    wire: JsonObject = field(repr=False, compare=False)
    owners: tuple[tuple[str, str, str], ...] = ()
    """(kind, name, uid) of each of its ``ownerReferences`` ("" for a missing field)."""

    @classmethod
    def of(cls, body: JsonObject) -> ObjectView:
        metadata = mapping_of(body.get("metadata"))
        return cls(meta=Meta.of(metadata), type=text_of(body.get("type")), wire=body, owners=_owners(metadata))

    @classmethod
    def maybe(cls, body: JsonObject | None) -> ObjectView | None:
        return None if body is None else cls.of(body)


@dataclass(frozen=True)
class JobView(ObjectView):
    """A container check's Job as read: its conditions (Complete, Failed) and when it was created."""

    conditions: tuple[ConditionView, ...] = ()
    created: object = None
    """``metadata.creationTimestamp`` (text on the wire; a datetime from some clients)."""

    @classmethod
    def of(cls, body: JsonObject) -> JobView:
        meta = mapping_of(body.get("metadata"))
        return cls(
            meta=Meta.of(meta),
            type=None,
            wire=body,
            owners=_owners(meta),
            conditions=conditions_of(mapping_of(body.get("status")).get("conditions")),
            created=meta.get("creationTimestamp"),
        )

    @classmethod
    def maybe(cls, body: JsonObject | None) -> JobView | None:
        return None if body is None else cls.of(body)


#: The env var a container may set to choose where bindings are mounted (servicebinding.io).
BINDING_ROOT_ENV = "SERVICE_BINDING_ROOT"


@dataclass(frozen=True)
class ContainerView:
    """One container (or init container) of a workload's pod template, as far as a projection reads it."""

    name: str
    sets_binding_root: bool
    """It has an env entry ``SERVICE_BINDING_ROOT`` (the first one counts, as for the kubelet)."""
    binding_root: str | None
    """That entry's literal ``value`` (None: absent, or set from elsewhere with ``valueFrom``)."""

    @classmethod
    def of(cls, raw: object) -> ContainerView:
        container = mapping_of(raw)
        env = container.get("env")
        entry = next(
            (
                e
                for e in (env if isinstance(env, list) else ())
                if isinstance(e, Mapping) and e.get("name") == BINDING_ROOT_ENV
            ),
            None,
        )
        return cls(
            name=text_of(container.get("name")) or "",
            sets_binding_root=entry is not None,
            binding_root=text_of(entry.get("value")) if entry is not None else None,
        )


def _containers(value: object) -> tuple[ContainerView, ...]:
    return tuple(ContainerView.of(c) for c in value if isinstance(c, Mapping)) if isinstance(value, list) else ()


@dataclass(frozen=True)
class WorkloadView:
    """A Deployment, StatefulSet or DaemonSet as a claim's (or a Service Catalog Binding's) projection reads it:
    which it is, its labels, its pod template's annotations and containers, who manages its fields."""

    meta: Meta
    api_version: str
    kind: str
    template_annotations: Mapping[str, str]
    """``spec.template.metadata.annotations`` (a projection's content hash is one)."""
    init_containers: tuple[ContainerView, ...]
    containers: tuple[ContainerView, ...]
    managers: frozenset[str]
    """The field managers of ``metadata.managedFields`` (a claim's projection has one of its own)."""
    wire: JsonObject = field(repr=False, compare=False)

    @classmethod
    def of(cls, body: JsonObject) -> WorkloadView:
        metadata = mapping_of(body.get("metadata"))
        template = mapping_of(mapping_of(body.get("spec")).get("template"))
        pod = mapping_of(template.get("spec"))
        annotations = mapping_of(mapping_of(template.get("metadata")).get("annotations"))
        managed = metadata.get("managedFields")
        return cls(
            meta=Meta.of(metadata),
            api_version=text_of(body.get("apiVersion")) or "",
            kind=text_of(body.get("kind")) or "",
            template_annotations={k: v for k, v in annotations.items() if isinstance(v, str)},
            init_containers=_containers(pod.get("initContainers")),
            containers=_containers(pod.get("containers")),
            managers=frozenset(
                m
                for entry in (managed if isinstance(managed, list) else ())
                if (m := text_of(mapping_of(entry).get("manager")))
            ),
            wire=body,
        )


@dataclass(frozen=True)
class CatalogEntry:
    """An SFService or SFPlan of the OSB catalog, as far as an automatic registration reads it."""

    meta: Meta
    name: str | None
    """``spec.name``: the service's or plan's name in the catalog."""

    @classmethod
    def of(cls, body: JsonObject) -> CatalogEntry:
        return cls(meta=Meta.of(body.get("metadata")), name=text_of(mapping_of(body.get("spec")).get("name")))

    @classmethod
    def maybe(cls, body: JsonObject | None) -> CatalogEntry | None:
        return None if body is None else cls.of(body)


def service_id_of(binding: BindingView) -> str:
    """A broker binding's ``spec.serviceId`` (the SFService it is of; "" when absent)."""
    return text_of(mapping_of(binding.wire.get("spec")).get("serviceId")) or ""


def credentials_secret_of(binding: BindingView) -> str | None:
    """A broker binding's credentials Secret (``status.response.secretRef``; None: none recorded)."""
    return text_of(mapping_of(mapping_of(binding.wire.get("status")).get("response")).get("secretRef"))


@dataclass(frozen=True)
class ListedCatalog:
    """A claims ServiceCatalog (one per namespace and environment) as read: its name and the services it lists, as
    written (compared whole with the ones wanted)."""

    meta: Meta
    services: list[object]
    """``spec.services`` (empty when absent or not a list)."""

    @classmethod
    def of(cls, body: JsonObject) -> ListedCatalog:
        services = mapping_of(body.get("spec")).get("services")
        return cls(meta=Meta.of(body.get("metadata")), services=services if isinstance(services, list) else [])
