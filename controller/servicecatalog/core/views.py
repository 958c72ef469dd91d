"""Typed, read-only views of the Service Catalog Instance and Binding as read (the plans decide on these).

Like :mod:`opbroker.controller.core.views`: built once from the body the API server returned, reading only the
fields they name (whatever else the server adds is ignored) and reading a field of the wrong type — a status
edited by hand — as absent. ``wire`` keeps the body for the pure status builders of :mod:`.operations` and
:mod:`.statuses`; nothing writes to it (the executor works from the versions its writes return).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple

from opbroker.api.servicecatalog import DeprovisionStatus, ProvisionStatus, UnbindStatus
from opbroker.controller.core import finalizers
from opbroker.controller.core.views import ConditionView, Meta, conditions_of
from opbroker.kubeclient.wire import JsonBody, JsonObject, int_of, mapping_of, strings_of, text_of

#: The Service Catalog kinds' finalizer, on Instances and Bindings (its owners: the table of
#: :mod:`opbroker.controller.core.finalizers`).
FINALIZER = finalizers.SERVICE_CATALOG


@dataclass(frozen=True)
class PlanEntry:
    """One plan of a ServiceClass (``plans[]``), or the one an Instance's status recorded."""

    name: str
    external_id: str
    maximum_polling_duration: int | None
    """Seconds the broker allows an operation on it to take (None: not limited by the catalog)."""

    @classmethod
    def of(cls, raw: object) -> PlanEntry:
        plan = mapping_of(raw)
        return cls(
            name=text_of(plan.get("name")) or "",
            external_id=text_of(plan.get("externalID")) or "",
            maximum_polling_duration=int_of(plan.get("maximumPollingDuration")) or None,
        )

    @classmethod
    def recorded(cls, properties: JsonObject) -> PlanEntry:
        """The plan an Instance's status records (``externalProperties``' ``planName`` and ``planExternalID``;
        "" when not recorded)."""
        return cls(
            name=text_of(properties.get("planName")) or "",
            external_id=text_of(properties.get("planExternalID")) or "",
            maximum_polling_duration=None,
        )


def owner_reference(wire: JsonObject, meta: Meta, *, block_deletion: bool) -> JsonBody:
    """A controlling owner reference to the object ``wire`` (with ``meta``), for a manifest written."""
    return {
        "apiVersion": text_of(wire.get("apiVersion")) or "",
        "kind": text_of(wire.get("kind")) or "",
        "name": meta.name,
        "uid": meta.uid,
        "controller": True,
        "blockOwnerDeletion": block_deletion,
    }


@dataclass(frozen=True)
class OperationStatus:
    """What an Instance's or Binding's status says of its OSB operations."""

    async_op: bool
    """``asyncOpInProgress``: an accepted operation is being polled (no other starts)."""
    orphan_mitigation: bool
    current_operation: str | None
    last_operation: str | None
    """The broker's operation id, echoed on ``last_operation`` polls."""
    operation_start: str | None
    observed_generation: int | None
    provision_status: str | None
    deprovision_status: str | None
    unbind_status: str | None
    external_properties: JsonObject
    in_progress_properties: JsonObject
    secret_name: str | None
    conditions: tuple[ConditionView, ...]
    held_plan: PlanEntry
    """The plan ``externalProperties`` records the broker has the instance on ("" fields: none recorded)."""
    asked_plan: PlanEntry
    """The plan ``inProgressProperties`` records the operation under way asks for."""
    projection_hash: str | None
    """A Binding's ``externalProperties.projectionHash``: the content hash its workloads carry."""

    @classmethod
    def of(cls, status: object) -> OperationStatus:
        s = mapping_of(status)
        held = mapping_of(s.get("externalProperties"))
        asked = mapping_of(s.get("inProgressProperties"))
        return cls(
            async_op=s.get("asyncOpInProgress") is True,
            orphan_mitigation=s.get("orphanMitigationInProgress") is True,
            current_operation=text_of(s.get("currentOperation")),
            last_operation=text_of(s.get("lastOperation")),
            operation_start=text_of(s.get("operationStartTime")),
            observed_generation=int_of(s.get("observedGeneration")),
            provision_status=text_of(s.get("provisionStatus")),
            deprovision_status=text_of(s.get("deprovisionStatus")),
            unbind_status=text_of(s.get("unbindStatus")),
            external_properties=held,
            in_progress_properties=asked,
            secret_name=text_of(s.get("secretName")),
            conditions=conditions_of(s.get("conditions")),
            held_plan=PlanEntry.recorded(held),
            asked_plan=PlanEntry.recorded(asked),
            projection_hash=text_of(held.get("projectionHash")),
        )

    @property
    def provisioned(self) -> bool:
        return self.provision_status == ProvisionStatus.PROVISIONED.value

    @property
    def deprovision_owed(self) -> bool:
        """The broker has (or may have) the instance: a deletion deprovisions it."""
        return self.deprovision_status in (DeprovisionStatus.REQUIRED.value, DeprovisionStatus.FAILED.value)

    @property
    def unbind_owed(self) -> bool:
        """The broker has (or may have) the binding: a deletion, or consent withdrawn, unbinds it."""
        return self.unbind_status in (UnbindStatus.REQUIRED.value, UnbindStatus.FAILED.value)

    def condition(self, type_: str) -> ConditionView | None:
        return next((c for c in self.conditions if c.type == type_), None)


@dataclass(frozen=True)
class SecretKeyRef:
    """One ``parametersFrom[].secretKeyRef``: a key of a Secret in the object's own namespace ("" when unnamed:
    no such Secret is found, which is reported)."""

    name: str
    key: str


def _parameters_from(value: object) -> tuple[SecretKeyRef, ...]:
    if not isinstance(value, list):
        return ()
    refs = (mapping_of(mapping_of(source).get("secretKeyRef")) for source in value)
    return tuple(SecretKeyRef(text_of(ref.get("name")) or "", text_of(ref.get("key")) or "") for ref in refs)


@dataclass(frozen=True)
class InstanceSpec:
    """An Instance's ``spec``: the class and plan it asks for, its parameters and whom it is shared with."""

    class_name: str
    """``serviceClassName``: a class's object name or its service's ``externalName``."""
    plan_name: str | None
    update_requests: int
    share_with: tuple[str, ...]
    parameters: JsonObject
    parameters_from: tuple[SecretKeyRef, ...]

    @classmethod
    def of(cls, spec: object) -> InstanceSpec:
        s = mapping_of(spec)
        return cls(
            class_name=text_of(s.get("serviceClassName")) or "",
            plan_name=text_of(s.get("planName")),
            update_requests=int_of(s.get("updateRequests")) or 0,
            share_with=strings_of(s.get("shareWith")),
            parameters=mapping_of(s.get("parameters")),
            parameters_from=_parameters_from(s.get("parametersFrom")),
        )


@dataclass(frozen=True)
class BindingSpec:
    """A Binding's ``spec``: the Instance it uses, where its credentials go and its parameters."""

    instance_namespace: str | None
    """``instanceRef.namespace`` (None: the Binding's own)."""
    instance_name: str
    secret_name: str | None
    """``secretName`` (None: the Binding's name)."""
    application: JsonObject | None
    """``application``: the workloads its credentials project into, as written (None: none)."""
    parameters: JsonObject
    parameters_from: tuple[SecretKeyRef, ...]

    @classmethod
    def of(cls, spec: object) -> BindingSpec:
        s = mapping_of(spec)
        ref = mapping_of(s.get("instanceRef"))
        application = mapping_of(s.get("application"))
        return cls(
            instance_namespace=text_of(ref.get("namespace")),
            instance_name=text_of(ref.get("name")) or "",
            secret_name=text_of(s.get("secretName")),
            application=application or None,
            parameters=mapping_of(s.get("parameters")),
            parameters_from=_parameters_from(s.get("parametersFrom")),
        )


@dataclass(frozen=True)
class CatalogObject:
    """A Service Catalog Instance or Binding as read."""

    meta: Meta
    status: OperationStatus
    wire: JsonObject = field(repr=False, compare=False)
    chosen_id: str | None = None
    """``spec.externalID``: the OSB id it chose (None: derived from its uid, see ``tenancy``)."""
    created: str = ""
    """``metadata.creationTimestamp`` (RFC 3339, which orders as text; set by the API server, never a tenant)."""

    @classmethod
    def of(cls, body: JsonObject) -> CatalogObject:
        return cls(
            Meta.of(body.get("metadata")),
            OperationStatus.of(body.get("status")),
            body,
            chosen_id=text_of(mapping_of(body.get("spec")).get("externalID")),
            created=text_of(mapping_of(body.get("metadata")).get("creationTimestamp")) or "",
        )

    @cached_property
    def instance_spec(self) -> InstanceSpec:
        """Its spec read as an Instance's."""
        return InstanceSpec.of(self.wire.get("spec"))

    @cached_property
    def binding_spec(self) -> BindingSpec:
        """Its spec read as a Binding's."""
        return BindingSpec.of(self.wire.get("spec"))

    @property
    def instance_ref(self) -> tuple[str, str]:
        """A Binding's Instance: (namespace, name), its own namespace unless it names another."""
        spec = self.binding_spec
        return spec.instance_namespace or self.meta.namespace, spec.instance_name

    @property
    def owner_reference(self) -> JsonBody:
        """A controlling owner reference to it that blocks its deletion (its credentials Secret's)."""
        return owner_reference(self.wire, self.meta, block_deletion=True)

    @property
    def secret_name(self) -> str:
        """A Binding's credentials Secret: ``spec.secretName``, else the Binding's name."""
        return self.binding_spec.secret_name or self.meta.name

    @property
    def held(self) -> bool:
        """Whether the Service Catalog finalizer is on it."""
        return FINALIZER in self.meta.finalizers

    @property
    def observed(self) -> bool:
        """The status has observed this generation (settled, or failed waiting for a spec change)."""
        return self.status.observed_generation == self.meta.generation

    @property
    def spec(self) -> JsonObject:
        return mapping_of(self.wire.get("spec"))


_TOP_LEVEL_WIRE = ("metadata", "status", "apiVersion", "kind")


class AuthRef(NamedTuple):
    """The Secret a Broker's ``spec.authInfo`` names: its auth kind (basic, bearer), namespace and name."""

    kind: str
    namespace: str
    name: str

    @classmethod
    def of(cls, auth_info: object) -> AuthRef | None:
        auth = mapping_of(auth_info)
        for kind in ("basic", "bearer"):
            ref = mapping_of(mapping_of(auth.get(kind)).get("secretRef"))
            name = text_of(ref.get("name"))
            if name:
                return cls(kind, text_of(ref.get("namespace")) or "default", name)
        return None


@dataclass(frozen=True)
class BrokerSpec:
    """A Broker's ``spec``: where it is, how to authenticate, which OSB version, when to relist."""

    url: str
    auth: AuthRef | None
    ca_bundle: str | None
    """Base64 PEM (``caBundle``)."""
    insecure_skip_tls_verify: bool
    api_version: str | None
    """``brokerAPIVersion``: the OSB version asked for (None: the newest the client speaks)."""
    relist_behavior: str
    """``Duration`` (the default) or ``Manual``."""
    relist_duration: str
    """A Go duration (default ``15m``)."""
    relist_requests: int

    @classmethod
    def of(cls, spec: object) -> BrokerSpec:
        s = mapping_of(spec)
        return cls(
            url=text_of(s.get("url")) or "",
            auth=AuthRef.of(s.get("authInfo")),
            ca_bundle=text_of(s.get("caBundle")),
            insecure_skip_tls_verify=s.get("insecureSkipTLSVerify") is True,
            api_version=text_of(s.get("brokerAPIVersion")),
            relist_behavior=text_of(s.get("relistBehavior")) or "Duration",
            relist_duration=text_of(s.get("relistDuration")) or "15m",
            relist_requests=int_of(s.get("relistRequests")) or 0,
        )


@dataclass(frozen=True)
class BrokerView:
    """A (cluster-scoped) Broker as read."""

    meta: Meta
    spec: BrokerSpec
    accepted_api_version: str | None
    """``status.brokerAPIVersion``: the OSB version the broker accepted at the last catalog fetch."""
    observed_generation: int | None
    reconciled_relist_requests: int
    last_catalog_retrieval: str | None
    """``status.lastCatalogRetrievalTime`` (RFC 3339)."""
    service_class_count: int
    conditions: tuple[ConditionView, ...]
    wire: JsonObject = field(repr=False, compare=False)
    """The body as read: the executor's and the owner references' (apiVersion, kind)."""

    @classmethod
    def of(cls, body: JsonObject) -> BrokerView:
        status = mapping_of(body.get("status"))
        return cls(
            meta=Meta.of(body.get("metadata")),
            spec=BrokerSpec.of(body.get("spec")),
            accepted_api_version=text_of(status.get("brokerAPIVersion")),
            observed_generation=int_of(status.get("observedGeneration")),
            reconciled_relist_requests=int_of(status.get("reconciledRelistRequests")) or 0,
            last_catalog_retrieval=text_of(status.get("lastCatalogRetrievalTime")),
            service_class_count=int_of(status.get("serviceClassCount")) or 0,
            conditions=conditions_of(status.get("conditions")),
            wire=body,
        )

    @property
    def ready(self) -> bool:
        return any(c.type == "Ready" and c.status == "True" for c in self.conditions)

    @property
    def owner_reference(self) -> JsonBody:
        """An owner reference to it, controlling, not blocking its deletion (written into its classes)."""
        return owner_reference(self.wire, self.meta, block_deletion=False)


@dataclass(frozen=True)
class ServiceClassView:
    """A ServiceClass (one service of a Broker's relisted catalog) as read."""

    meta: Meta
    broker_name: str
    external_name: str
    external_id: str
    plans: tuple[PlanEntry, ...]
    """Its plans; an entry that is not an object is skipped."""
    removed: bool
    """``status.removedFromBrokerCatalog``: gone from the catalog (existing instances keep it)."""
    instances_retrievable: bool
    """``instancesRetrievable``: its broker answers a GET of an instance (day two looks at them again)."""
    content: JsonObject
    """Its top-level fields but metadata, status, apiVersion and kind: what a relist compares and rewrites."""
    wire: JsonObject = field(repr=False, compare=False)

    @classmethod
    def of(cls, body: JsonObject) -> ServiceClassView:
        plans = body.get("plans")
        return cls(
            meta=Meta.of(body.get("metadata")),
            broker_name=text_of(body.get("brokerName")) or "",
            external_name=text_of(body.get("externalName")) or "",
            external_id=text_of(body.get("externalID")) or "",
            plans=tuple(PlanEntry.of(p) for p in plans if isinstance(p, Mapping)) if isinstance(plans, list) else (),
            removed=mapping_of(body.get("status")).get("removedFromBrokerCatalog") is True,
            instances_retrievable=body.get("instancesRetrievable") is True,
            content={k: v for k, v in body.items() if k not in _TOP_LEVEL_WIRE},
            wire=body,
        )

    def plan(self, name: str) -> PlanEntry | None:
        return next((p for p in self.plans if p.name == name), None)


@dataclass(frozen=True)
class ReviewRequest:
    """An ``admission.k8s.io/v1`` AdmissionReview's ``request``, as far as the Instance webhook reads it."""

    uid: str
    operation: str
    instance: CatalogObject
    """The Instance it is about: ``oldObject`` (a DELETE's), else one named by the request's namespace and name."""

    @classmethod
    def of(cls, request: object) -> ReviewRequest:
        """Raises :class:`TypeError` when ``request`` is not an object (the review is answered 400)."""
        if not isinstance(request, Mapping):
            raise TypeError(f"an AdmissionReview request is an object, not {type(request).__name__}")
        old = request.get("oldObject")
        named = {"metadata": {"namespace": request.get("namespace"), "name": request.get("name")}}
        return cls(
            uid=text_of(request.get("uid")) or "",
            operation=text_of(request.get("operation")) or "",
            instance=CatalogObject.of(old if isinstance(old, Mapping) and old else named),
        )
