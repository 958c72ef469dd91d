"""The Kubernetes Service Catalog resource model (`servicecatalog.k8s.io/v1alpha1`): Broker, ServiceClass,
Instance and Binding, so that application teams consume any OSB broker with kubectl and the Service Catalog
design's manifests.

Who writes what:

* A cluster admin creates a **Broker** (cluster-scoped): the broker's URL and how to authenticate to it.
* The controller fetches the broker's catalog and writes one **ServiceClass** (cluster-scoped) per OSB service,
  named after the service's name made a valid object name (:func:`service_class_name`), its plans inline. A
  service that disappears from the catalog is marked `status.removedFromBrokerCatalog`, not deleted, so
  existing instances keep working.
* An application team creates an **Instance** (namespaced): a provision request for a class and plan.
* and a **Binding** (namespaced, possibly in another namespace than its instance, where the Instance consents in
  its `shareWith`): a bind request whose
  credentials the controller writes to a Secret in the binding's namespace and, when `spec.application` is
  given, projects into the selected workloads as a ServiceClaim does (servicebinding.io workload projection).

Field names and semantics follow Service Catalog v1alpha1 as the design shows it (ServiceClass fields at the
top level, plans inline), with the details v1beta1 got right: relist behaviour, `parametersFrom`, the
operation bookkeeping in status, `externalName` next to the sanitised object name. Credentials never appear
in any status: a binding's status names the Secret that holds them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, ClassVar, Literal

from pydantic import AfterValidator, ConfigDict, Field, WithJsonSchema, field_validator, model_validator
from pydantic.alias_generators import to_camel

from opbroker.api.catalog import MaintenanceInfo
from opbroker.api.conventions import SHARE_WITH_ALL
from opbroker.api.meta import Condition, FreeForm, KubeResource, ObjectMeta, WireModel
from opbroker.api.osb import OSBId
from opbroker.api.primaza import ApplicationSelector

SERVICE_CATALOG_GROUP = "servicecatalog.k8s.io"
SERVICE_CATALOG_VERSION = "v1alpha1"
#: `kubectl get svcat` lists every Service Catalog object (named after Service Catalog's own CLI, svcat).
SERVICE_CATALOG_CATEGORIES: tuple[str, ...] = ("opbroker", "svcat")

# --- names -------------------------------------------------------------------------------------------------

_DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_SECRET_KEY = r"^[-._a-zA-Z0-9]+$"
_SHARE_TARGET = r"^(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$"
_URL = r"^https?://[^\s/?#]+([/?#]\S*)?$"
#: A Go `time.Duration` string without sign: `15m`, `1h30m`, `90s`, `1.5h`.
_GO_DURATION = r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$"
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ns|us|ms|s|m|h)")


def _subdomain(value: str) -> str:
    if len(value) > 253 or not re.match(_DNS1123_SUBDOMAIN, value):
        raise ValueError(
            f"{value!r} is not a valid Kubernetes name (DNS-1123 subdomain: at most 253 lowercase letters, digits, "
            f"'-' and '.', starting and ending with a letter or digit); try {service_class_name(value)!r}"
        )
    return value


def _label(value: str) -> str:
    if len(value) > 63 or not re.match(_DNS1123_LABEL, value):
        raise ValueError(
            f"{value!r} is not a valid namespace name (DNS-1123 label: at most 63 lowercase letters, digits and "
            "'-', starting and ending with a letter or digit)"
        )
    return value


def _secret_key(value: str) -> str:
    if len(value) > 253 or not re.match(_SECRET_KEY, value):
        raise ValueError(f"{value!r} is not a valid Secret key (letters, digits, '-', '_' and '.')")
    return value


#: A Kubernetes object name (Secrets, Instances, Brokers): checked with a readable message, and the same
#: pattern in the CRD so the API server refuses it too.
DNSSubdomain = Annotated[
    str,
    AfterValidator(_subdomain),
    WithJsonSchema({"type": "string", "minLength": 1, "maxLength": 253, "pattern": _DNS1123_SUBDOMAIN}),
]
#: A namespace name.
DNSLabel = Annotated[
    str,
    AfterValidator(_label),
    WithJsonSchema({"type": "string", "minLength": 1, "maxLength": 63, "pattern": _DNS1123_LABEL}),
]
#: A namespace name, or `*` for every namespace (an entry of `shareWith`).
ShareTarget = Annotated[
    str,
    AfterValidator(lambda value: value if value == SHARE_WITH_ALL else _label(value)),
    WithJsonSchema({"type": "string", "minLength": 1, "maxLength": 63, "pattern": _SHARE_TARGET}),
]
SecretKey = Annotated[
    str,
    AfterValidator(_secret_key),
    WithJsonSchema({"type": "string", "minLength": 1, "maxLength": 253, "pattern": _SECRET_KEY}),
]


def service_class_name(osb_name: str) -> str:
    """The ServiceClass object name for an OSB service name: lowercased, every run of characters a
    Kubernetes name may not hold turned into `-`, trimmed to 253 characters (`smallDB` → `smalldb`,
    `Best_Data Base` → `best-data-base`). A name with nothing usable left becomes `class-` plus a digest.
    """
    name = re.sub(r"[^a-z0-9.-]+", "-", osb_name.lower())
    name = re.sub(r"\.{2,}", ".", name)
    name = re.sub(r"-*\.-*", ".", name)
    name = name.strip(".-")[:253].rstrip(".-")
    if not name:
        return "class-" + hashlib.sha256(osb_name.encode("utf-8")).hexdigest()[:16]
    return name


def parse_go_duration(text: str) -> timedelta:
    """A Go `time.Duration` string (`15m`, `1h30m`, `1.5h`) as a timedelta; ValueError if malformed."""
    if not re.match(_GO_DURATION, text):
        raise ValueError(f"{text!r} is not a duration such as '15m', '1h30m' or '90s' (units: h, m, s, ms, us, ns)")
    seconds = sum(float(number) * _DURATION_UNITS[unit] for number, unit in _DURATION_PART.findall(text))
    return timedelta(seconds=seconds)


def _checked_metadata(metadata: ObjectMeta) -> ObjectMeta:
    """The API server accepts only DNS-1123 subdomains as custom resource names; say so before it does."""
    if metadata.name is not None:
        try:
            _subdomain(metadata.name)
        except ValueError as exc:
            raise ValueError(f"name {exc}") from None
    return metadata


#: servicecatalog.k8s.io is a Kubernetes project group (the retired Service Catalog's): the API server accepts
#: CRDs in it only with this annotation, and marks them KubernetesAPIApprovalPolicyConformant=False.
API_APPROVAL = (
    "unapproved, opbroker serves the retired Kubernetes Service Catalog's v1alpha1 API so that its manifests apply"
)


class _CatalogResource(KubeResource):
    """Common CRD facts of the four kinds."""

    GROUP: ClassVar[str] = SERVICE_CATALOG_GROUP
    API_APPROVAL: ClassVar[str | None] = API_APPROVAL
    VERSION: ClassVar[str] = SERVICE_CATALOG_VERSION
    CATEGORIES: ClassVar[tuple[str, ...]] = SERVICE_CATALOG_CATEGORIES

    @field_validator("metadata")
    @classmethod
    def _valid_name(cls, metadata: ObjectMeta) -> ObjectMeta:
        return _checked_metadata(metadata)


def _ready_reason(json_path: str = ".status.conditions") -> str:
    return json_path + '[?(@.type=="Ready")].reason'


# --- Broker ------------------------------------------------------------------------------------------------


class SecretReference(WireModel):
    """A Secret in a named namespace (a Broker is cluster-scoped, so the namespace is required)."""

    namespace: DNSLabel
    """Namespace of the Secret: the control plane's (the controller's namespace, `opbroker` by default). The
    controller reads a Broker's credentials only there, where tenants cannot write or read: naming a Secret in
    any other namespace would let whoever may create a Broker have another team's Secret sent to a URL of
    their choosing, so such a Broker is refused (`AuthSecretNotInControlPlane`) and nothing is read or sent."""
    name: DNSSubdomain
    """Name of the Secret."""


class BasicAuthConfig(WireModel):
    """HTTP basic authentication to the broker."""

    secret_ref: SecretReference
    """The Secret holding the credentials, in keys `username` and `password`."""


class BearerTokenAuthConfig(WireModel):
    """A bearer token sent to the broker in `Authorization: Bearer <token>`."""

    secret_ref: SecretReference
    """The Secret holding the token (without the `Bearer` scheme) in key `token`."""


class BrokerAuthInfo(WireModel):
    """How the controller authenticates to the broker: exactly one of `basic` or `bearer`."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "has(self.basic) != has(self.bearer)", "message": "exactly one of basic or bearer is required"}
            ]
        }
    )

    basic: BasicAuthConfig | None = None
    """Basic authentication: username and password read from a Secret."""
    bearer: BearerTokenAuthConfig | None = None
    """Bearer token authentication: the token read from a Secret."""

    @model_validator(mode="after")
    def _exactly_one(self) -> BrokerAuthInfo:
        if (self.basic is None) == (self.bearer is None):
            raise ValueError("exactly one of basic or bearer is required")
        return self


#: The OSB API versions the controller speaks to a Broker, newest first (the OSB client's ``versions.SUPPORTED``;
#: a test keeps the two equal — the resource model cannot import the client).
OSB_VERSIONS: tuple[str, ...] = ("2.17", "2.16", "2.15", "2.14", "2.13")
OSBVersion = Literal["2.17", "2.16", "2.15", "2.14", "2.13"]


class RelistBehavior(StrEnum):
    """When the controller fetches the broker's catalog again."""

    DURATION = "Duration"
    """Every `relistDuration`, and whenever the spec or `relistRequests` changes."""
    MANUAL = "Manual"
    """Only when the spec or `relistRequests` changes."""


class BrokerSpec(WireModel):
    """An OSB broker: where it is, how to authenticate to it and how often to read its catalog."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!(has(self.caBundle) && has(self.insecureSkipTLSVerify) && self.insecureSkipTLSVerify)",
                    "message": "caBundle cannot be used when insecureSkipTLSVerify is true",
                }
            ]
        }
    )

    url: str = Field(min_length=1, max_length=2048, json_schema_extra={"pattern": _URL})
    """The broker's base URL (http or https), to which the controller appends `/v2/catalog` and the other
    OSB paths."""
    auth_info: BrokerAuthInfo | None = None
    """How to authenticate to the broker; none when the broker needs no authentication."""
    broker_api_version: OSBVersion = Field(default="2.17", alias="brokerAPIVersion")
    """The OSB API version to speak first (`X-Broker-API-Version`): 2.17 (the default) to 2.13. A broker that
    answers 412 is asked again one version lower, down to 2.13; the version it accepted is recorded in
    status.brokerAPIVersion and spoken from then on. The controller tries this version again (upward) only when
    the spec changes or relistRequests is increased, never on a periodic relist."""
    ca_bundle: str | None = Field(default=None, json_schema_extra={"format": "byte"})
    """Base64 of a PEM bundle of CA certificates trusted for the broker's serving certificate (instead of the
    system's)."""
    insecure_skip_tls_verify: bool = Field(default=False, alias="insecureSkipTLSVerify")
    """Do not verify the broker's TLS certificate. Strongly discouraged: use caBundle instead."""
    relist_behavior: RelistBehavior = RelistBehavior.DURATION
    """`Duration` (the default): fetch the catalog again every relistDuration. `Manual`: only when the spec
    changes or relistRequests is increased."""
    relist_duration: str = Field(
        default="15m",
        json_schema_extra={
            "pattern": _GO_DURATION,
            "x-kubernetes-validations": [
                {"rule": "duration(self) > duration('0s')", "message": "relistDuration must be greater than zero"}
            ],
        },
    )
    """How often the catalog is fetched again with relistBehavior Duration, as a Go duration (`15m`,
    `1h30m`); 15m when omitted, ignored with relistBehavior Manual. Low values load both the broker and the
    controller."""
    relist_requests: int = Field(
        default=0,
        ge=0,
        json_schema_extra={
            "x-kubernetes-validations": [{"rule": "self >= oldSelf", "message": "relistRequests may only be increased"}]
        },
    )
    """Increase to make the controller fetch the catalog now (it records the value it acted on in
    status.reconciledRelistRequests). Never decreases."""

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not re.match(_URL, value):
            raise ValueError(f"{value!r} is not an http:// or https:// URL with a host")
        return value

    @field_validator("relist_duration")
    @classmethod
    def _positive_duration(cls, value: str) -> str:
        if parse_go_duration(value) <= timedelta(0):
            raise ValueError("relistDuration must be greater than zero")
        return value

    @field_validator("ca_bundle")
    @classmethod
    def _pem_bundle(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            pem = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("caBundle must be base64 (of a PEM bundle of CA certificates)") from None
        if b"-----BEGIN CERTIFICATE-----" not in pem:
            raise ValueError("caBundle must be base64 of a PEM bundle with at least one CERTIFICATE block")
        return value

    @model_validator(mode="after")
    def _tls(self) -> BrokerSpec:
        if self.insecure_skip_tls_verify and self.ca_bundle is not None:
            raise ValueError("caBundle cannot be used when insecureSkipTLSVerify is true")
        return self

    @property
    def relist_interval(self) -> timedelta | None:
        """How long between catalog fetches; None with relistBehavior Manual."""
        if self.relist_behavior is RelistBehavior.MANUAL:
            return None
        return parse_go_duration(self.relist_duration)


class BrokerStatus(WireModel):
    """What the controller last learnt from the broker."""

    conditions: list[Condition] | None = None
    """`Ready`: True once the catalog was fetched and the ServiceClasses written (reason FetchedCatalog);
    False with reason ErrorFetchingCatalog, ErrorGettingAuthCredentials or ErrorSyncingCatalog and the error
    in the message. `CatalogComplete`: after each fetch, True (reason AllEntriesListed, or CatalogFieldsIgnored
    when optional fields of the wrong type were dropped) or False (CatalogEntriesSkipped) naming every service
    and plan that could not become a class, and the field why; the rest of the catalog is listed either way."""
    last_catalog_retrieval_time: datetime | None = None
    """When the catalog was last fetched successfully."""
    operation_start_time: datetime | None = None
    """When the catalog fetch in progress began, if one is."""
    observed_generation: int | None = None
    """The metadata.generation the status describes."""
    reconciled_relist_requests: int | None = Field(default=None, ge=0)
    """The spec.relistRequests the last fetch answered."""
    service_class_count: int | None = Field(default=None, ge=0)
    """How many ServiceClasses the broker's catalog currently offers (removed ones excluded)."""
    broker_api_version: OSBVersion | None = Field(default=None, alias="brokerAPIVersion")
    """The OSB API version the broker accepted at the last catalog fetch: spec.brokerAPIVersion, or an older
    one it stepped down to after 412s. Every request for the Broker's Instances and Bindings starts from it."""


class Broker(_CatalogResource):
    """An Open Service Broker registered with the cluster (cluster-scoped). The controller fetches its
    catalog and writes one ServiceClass per service it offers."""

    KIND: ClassVar[str] = "Broker"
    PLURAL: ClassVar[str] = "brokers"
    SCOPE: ClassVar[Literal["Namespaced", "Cluster"]] = "Cluster"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("scbroker",)
    PRINTER_COLUMNS: ClassVar[tuple[tuple[str, str, str], ...]] = (
        ("URL", ".spec.url", "string"),
        ("OSB", ".status.brokerAPIVersion", "string"),
        ("Status", _ready_reason(), "string"),
        ("Classes", ".status.serviceClassCount", "integer"),
        ("Catalog-Fetched", ".status.lastCatalogRetrievalTime", "date"),
    )

    spec: BrokerSpec
    status: BrokerStatus | None = None


# --- ServiceClass ------------------------------------------------------------------------------------------


class ServicePlan(WireModel):
    """One plan of a service: a variant such as a size or quality of service."""

    name: str = Field(min_length=1, max_length=253, pattern=r"^\S+$")
    """The plan's name in the broker's catalog; what Instance spec.planName refers to."""
    external_id: str = Field(min_length=1, alias="externalID")
    """The plan's OSB id (`plan_id` in OSB requests)."""
    description: str = ""
    """A short description of the plan."""
    free: bool = True
    """Whether the plan is free of charge."""
    bindable: bool | None = None
    """Overrides the class's bindable for instances of this plan, when set."""
    external_metadata: FreeForm | None = None
    """The plan's OSB `metadata` (display names, costs, bullets), verbatim."""
    instance_create_parameter_schema: FreeForm | None = None
    """JSON schema of the parameters accepted when provisioning an Instance of this plan."""
    instance_update_parameter_schema: FreeForm | None = None
    """JSON schema of the parameters accepted when updating an Instance of this plan."""
    binding_create_parameter_schema: FreeForm | None = None
    """JSON schema of the parameters accepted when binding to an Instance of this plan."""
    maintenance_info: MaintenanceInfo | None = None
    """The plan's OSB maintenance_info: the version instances of the plan are upgraded to."""
    maximum_polling_duration: int | None = Field(default=None, ge=1)
    """The plan's OSB maximum_polling_duration, in seconds: an asynchronous operation on an Instance or
    Binding of this plan still in progress this long after it started is failed (the controller's own
    maximum applies when it is shorter)."""


class ServiceClassStatus(WireModel):
    """The class's standing in its broker's catalog."""

    removed_from_broker_catalog: bool = False
    """The broker's catalog no longer offers the service. The class stays so existing Instances keep working;
    no new Instance can be provisioned from it."""
    conditions: list[Condition] | None = None
    """Conditions the controller reports on the class."""


class ServiceClass(_CatalogResource):
    """A service offered by a Broker (cluster-scoped), written by the controller from the broker's catalog.
    Named after the service's name (see externalName) made a valid object name; the fields sit at the top
    level, not under spec, as in Service Catalog v1alpha1."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        extra="forbid",
        use_attribute_docstrings=True,
    )

    KIND: ClassVar[str] = "ServiceClass"
    PLURAL: ClassVar[str] = "serviceclasses"
    SCOPE: ClassVar[Literal["Namespaced", "Cluster"]] = "Cluster"
    SPEC_REQUIRED: ClassVar[bool] = False
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("scclass",)
    PRINTER_COLUMNS: ClassVar[tuple[tuple[str, str, str], ...]] = (
        ("Broker", ".brokerName", "string"),
        ("External-Name", ".externalName", "string"),
        ("External-ID", ".externalID", "string"),
        ("Removed", ".status.removedFromBrokerCatalog", "boolean"),
    )

    broker_name: DNSSubdomain
    """The Broker offering the service."""
    external_name: str | None = Field(default=None, min_length=1, pattern=r"^\S+$")
    """The service's name in the broker's catalog, as the broker spells it (the object name is this made a
    valid Kubernetes name)."""
    external_id: str = Field(min_length=1, alias="externalID")
    """The service's OSB id (`service_id` in OSB requests)."""
    description: str = ""
    """A short description of the service."""
    bindable: bool = True
    """Whether Bindings to Instances of this class can be created (a plan may override it)."""
    plan_updatable: bool = False
    """Whether an Instance may change to another plan of the class after provisioning."""
    instances_retrievable: bool = False
    """Whether the broker answers a GET of an instance (OSB `instances_retrievable`): a provisioned Instance of
    this class is then looked at again at the broker after each resync, its answer shown (live status, drift)."""
    tags: list[str] | None = None
    """The service's OSB tags."""
    requires: list[str] | None = None
    """Cloud Foundry permissions the service requires (`syslog_drain`, `route_forwarding`,
    `volume_mount`); none of them has a meaning in Kubernetes."""
    external_metadata: FreeForm | None = None
    """The service's OSB `metadata` (display name, image, documentation URL), verbatim."""
    plans: list[ServicePlan] = Field(
        min_length=1,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    """The service's plans; every service has at least one. Plan names are unique within the class."""
    status: ServiceClassStatus | None = None

    @model_validator(mode="after")
    def _unique_plans(self) -> ServiceClass:
        for attribute, wire in (("name", "name"), ("external_id", "externalID")):
            seen: set[str] = set()
            for plan in self.plans:
                value = getattr(plan, attribute)
                if value in seen:
                    raise ValueError(f"plans: {wire} {value!r} appears more than once")
                seen.add(value)
        return self

    def plan(self, name: str) -> ServicePlan | None:
        """The plan called `name`, if the class has one."""
        return next((p for p in self.plans if p.name == name), None)


# --- Instance and Binding: shared parts --------------------------------------------------------------------


class SecretKeyReference(WireModel):
    """One key of a Secret in the object's own namespace."""

    name: DNSSubdomain
    """Name of the Secret, in the same namespace as the object referring to it."""
    key: SecretKey
    """The key whose value is used."""


class ParametersFromSource(WireModel):
    """Parameters read from a Secret: the key's value must be a JSON object, whose fields are merged into the
    parameters. A field given both inline and from a Secret (or by two Secrets) is an error, not an override."""

    secret_key_ref: SecretKeyReference
    """The Secret key holding a JSON object of parameters."""


_CHECKSUM = r"^[0-9a-f]{64}$"


# --- Instance ----------------------------------------------------------------------------------------------


class InstanceSpec(WireModel):
    """A request to provision a service: which class and plan, with which parameters."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.serviceClassName == oldSelf.serviceClassName",
                    "message": "serviceClassName is immutable",
                },
                {
                    "rule": "has(oldSelf.externalID) ? (has(self.externalID) && self.externalID == oldSelf.externalID)"
                    " : !has(self.externalID)",
                    "message": "externalID cannot be set, changed or removed after creation",
                },
            ]
        }
    )

    service_class_name: str = Field(min_length=1, max_length=253, pattern=r"^\S+$")
    """The ServiceClass to provision from: its object name (`kubectl get serviceclasses`) or the broker's
    name for the service (the class's externalName, e.g. `smallDB` for the class `smalldb`); an object
    name match wins, and an externalName offered by two brokers is ambiguous. Immutable."""
    plan_name: str | None = Field(default=None, min_length=1, max_length=253, pattern=r"^\S+$")
    """The plan (a name from the class's plans). May be omitted when the class has exactly one plan.
    Changing it asks the broker to update the instance to the new plan, if the class is planUpdatable."""
    parameters: FreeForm | None = None
    """Parameters for the broker, passed verbatim in the provision and update requests."""
    parameters_from: list[ParametersFromSource] | None = None
    """Parameters read from Secrets (e.g. passwords): each names a Secret key holding a JSON object whose
    fields are merged into parameters."""
    external_id: OSBId | None = Field(default=None, alias="externalID")
    """The OSB instance id to use. When omitted the controller derives a UUID from the Instance's uid (so only
    this Instance can ever hold it) and records it in status.externalID. Immutable. A chosen id is this
    Instance's only if no earlier Instance in the cluster holds it and the broker lets it be created: an id
    the broker already has (409) is someone else's, and the Instance fails (`ExternalIDInUse`) without ever
    updating, binding or deprovisioning it. It is sent in OSB URLs, so: 1 to 255 bytes (UTF-8) without '/', '?',
    '#', '%' or control characters, and not '.' or '..'."""
    share_with: list[ShareTarget] | None = Field(default=None, json_schema_extra={"x-kubernetes-list-type": "set"})
    """Namespaces whose Bindings may bind to this Instance (`*`: every namespace); Bindings in the Instance's
    own namespace always may. A Binding elsewhere gets credentials to the Instance and keeps it from being
    deleted, so it needs the owner's consent — Gateway API's ReferenceGrant in spirit, kept on the Instance
    itself: without it such a Binding fails (`ReferenceNotShared`), nothing is sent to the broker, and it does
    not hold up the Instance's deletion. Removing a namespace revokes the consent: its bound Bindings are
    unbound."""
    update_requests: int = Field(
        default=0,
        ge=0,
        json_schema_extra={
            "x-kubernetes-validations": [{"rule": "self >= oldSelf", "message": "updateRequests may only be increased"}]
        },
    )
    """Increase to make the controller send an update request with the current spec, even unchanged."""


class InstanceOperation(StrEnum):
    PROVISION = "Provision"
    UPDATE = "Update"
    DEPROVISION = "Deprovision"


class ProvisionStatus(StrEnum):
    PROVISIONED = "Provisioned"
    NOT_PROVISIONED = "NotProvisioned"


class DeprovisionStatus(StrEnum):
    NOT_REQUIRED = "NotRequired"
    """No provision request was ever sent: deleting the Instance needs no deprovision."""
    REQUIRED = "Required"
    """A provision request was sent: the broker must be asked to deprovision before the Instance goes."""
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class InstancePropertiesState(WireModel):
    """The plan and parameters of the instance as the broker knows them (or is being told)."""

    plan_name: str | None = None
    """The plan's name."""
    plan_external_id: str | None = Field(default=None, alias="planExternalID")
    """The plan's OSB id."""
    parameters_checksum: str | None = Field(default=None, pattern=_CHECKSUM)
    """sha256 (hex) of the parameters sent, parametersFrom included; the parameters themselves are never
    recorded, since they may hold Secret values."""
    update_requests: int | None = Field(default=None, ge=0)
    """The spec.updateRequests the request answered. A spec change that moves none of plan, parameters and
    updateRequests (e.g. shareWith) sends the broker nothing."""


class InstanceStatus(WireModel):
    """Where provisioning stands. Holds no parameters and no credentials."""

    conditions: list[Condition] | None = None
    """`Ready`: True once the broker provisioned (reason ProvisionedSuccessfully) or updated
    (InstanceUpdatedSuccessfully) the instance; False while an operation runs (Provisioning, UpdatingInstance,
    Deprovisioning) or with the reason of an error (ErrorNonexistentServiceClass, ErrorNonexistentServicePlan,
    ErrorWithParameters, ProvisionCallFailed, ...). `Failed`: True when the controller stopped retrying."""
    async_op_in_progress: bool = False
    """The broker answered 202 and the controller is polling last_operation."""
    orphan_mitigation_in_progress: bool = False
    """A provision failed in a way that may have left an instance behind; the controller is deprovisioning it."""
    current_operation: InstanceOperation | None = None
    """The operation in progress, if any."""
    last_operation: str | None = None
    """The `operation` string the broker returned with 202, sent back on each last_operation poll."""
    operation_start_time: datetime | None = None
    """When the current operation began; the controller gives up after its maximum operation time."""
    observed_generation: int | None = None
    """The metadata.generation the status describes."""
    external_id: str | None = Field(default=None, alias="externalID")
    """The OSB instance id in use (spec.externalID, or the UUID derived from the Instance's uid). Written for
    people and tools to read; the controller never takes it from here."""
    dashboard_url: str | None = Field(default=None, alias="dashboardURL")
    """The instance's dashboard, if the broker returned one."""
    provision_status: ProvisionStatus | None = None
    """Whether the instance is provisioned."""
    deprovision_status: DeprovisionStatus | None = None
    """Whether deleting the Instance requires a deprovision request, and how that went: `Required` from the
    moment a provision request is sent (it may have created something), `NotRequired` again when the broker
    refused to create the chosen externalID (the id is someone else's, or nothing was made)."""
    external_properties: InstancePropertiesState | None = None
    """The plan and parameters checksum the broker last accepted."""
    in_progress_properties: InstancePropertiesState | None = None
    """The plan and parameters checksum of the operation in progress."""


class Instance(_CatalogResource):
    """A provisioned instance of a ServiceClass (namespaced). Deleting it deprovisions it at the broker;
    the controller keeps it (a finalizer) while Bindings to it exist."""

    KIND: ClassVar[str] = "Instance"
    PLURAL: ClassVar[str] = "instances"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("scinstance",)
    PRINTER_COLUMNS: ClassVar[tuple[tuple[str, str, str], ...]] = (
        ("Class", ".spec.serviceClassName", "string"),
        ("Plan", ".spec.planName", "string"),
        ("Status", _ready_reason(), "string"),
    )

    spec: InstanceSpec
    status: InstanceStatus | None = None


# --- Binding -----------------------------------------------------------------------------------------------


class InstanceReference(WireModel):
    """The Instance a Binding binds to."""

    name: DNSSubdomain
    """Name of the Instance."""
    namespace: DNSLabel | None = None
    """Namespace of the Instance; the Binding's own namespace when omitted. An Instance in another namespace
    is bound to only when it lists this Binding's namespace (or `*`) in its `spec.shareWith`."""


class BindingSpec(WireModel):
    """A request for credentials to an Instance, written to a Secret and optionally projected into workloads."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self.instanceRef == oldSelf.instanceRef", "message": "instanceRef is immutable"},
                {
                    "rule": "has(oldSelf.externalID) ? (has(self.externalID) && self.externalID == oldSelf.externalID)"
                    " : !has(self.externalID)",
                    "message": "externalID cannot be set, changed or removed after creation",
                },
                {
                    "rule": "has(oldSelf.secretName) ? (has(self.secretName) && self.secretName == oldSelf.secretName)"
                    " : !has(self.secretName)",
                    "message": "secretName cannot be set, changed or removed after creation",
                },
            ]
        }
    )

    instance_ref: InstanceReference
    """The Instance to bind to. Immutable."""
    secret_name: DNSSubdomain | None = None
    """The Secret, in the Binding's namespace, the controller writes the credentials to; the Binding's own
    name when omitted. Created by the controller, stamped with the Binding's uid (annotation
    `opbroker.io/owner-uid`) and deleted with the Binding; a Secret of that name that exists without this
    Binding's stamp is never overwritten or deleted: the Binding fails (`SecretNotOwned`) instead. Immutable."""
    parameters: FreeForm | None = None
    """Parameters for the broker, passed verbatim in the bind request. OSB has no binding update: a change is
    not sent to the broker; delete and recreate the Binding instead."""
    parameters_from: list[ParametersFromSource] | None = None
    """Parameters read from Secrets: each names a Secret key holding a JSON object whose fields are merged
    into parameters."""
    external_id: OSBId | None = Field(default=None, alias="externalID")
    """The OSB binding id to use. When omitted the controller derives a UUID from the Binding's uid and records
    it in status.externalID. Immutable. As for an Instance, a chosen id held by an earlier Binding, or one the
    broker already has (409), is not this Binding's: it fails (`ExternalIDInUse`) and never unbinds it. The same
    rule as an Instance's externalID applies (it is sent in OSB URLs)."""
    application: ApplicationSelector | None = None
    """Workloads in the Binding's namespace (Deployments, StatefulSets or DaemonSets, by name or by label
    selector) the credentials Secret is projected into, the servicebinding.io way ServiceClaims do: a read-only
    volume at $SERVICE_BINDING_ROOT/<binding name> (root /bindings unless the container sets one), the
    SERVICE_BINDING_ROOT variable, and one variable per credential key read from the Secret. Replaces the
    design's PodInjectionPolicy. Without it the Secret is only written."""

    def effective_secret_name(self, binding_name: str) -> str:
        """The Secret the credentials go to: spec.secretName, else the Binding's name."""
        return self.secret_name or binding_name


class BindingOperation(StrEnum):
    BIND = "Bind"
    UNBIND = "Unbind"


class UnbindStatus(StrEnum):
    NOT_REQUIRED = "NotRequired"
    """No bind request was ever sent: deleting the Binding needs no unbind."""
    REQUIRED = "Required"
    """A bind request was sent: the broker must be asked to unbind before the Binding goes."""
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class BindingPropertiesState(WireModel):
    """The binding's parameters as the broker knows them (or is being told), by checksum only."""

    parameters_checksum: str | None = Field(default=None, pattern=_CHECKSUM)
    """sha256 (hex) of the parameters sent, parametersFrom included."""
    projection_hash: str | None = Field(default=None, pattern=r"^[0-9a-f]{16}$")
    """With `spec.application`: the content hash of the credentials the selected workloads carry (their pod
    template annotation); a new one rolls their pods."""


class BindingStatus(WireModel):
    """Where binding stands. Names the credentials Secret; never holds credentials."""

    conditions: list[Condition] | None = None
    """`Ready`: True once the credentials are in the Secret (reason InjectedBindResult); False while binding
    (Binding) or with the reason of an error (ErrorNonexistentInstance, ErrorInstanceNotReady, BindCallFailed,
    ...). `Failed`: True when the controller stopped retrying."""
    async_op_in_progress: bool = False
    """The broker answered 202 and the controller is polling the binding's last_operation."""
    orphan_mitigation_in_progress: bool = False
    """A bind failed in a way that may have left a binding behind; the controller is unbinding it."""
    current_operation: BindingOperation | None = None
    """The operation in progress, if any."""
    last_operation: str | None = None
    """The `operation` string the broker returned with 202, sent back on each last_operation poll."""
    operation_start_time: datetime | None = None
    """When the current operation began."""
    observed_generation: int | None = None
    """The metadata.generation the status describes."""
    external_id: str | None = Field(default=None, alias="externalID")
    """The OSB binding id in use (spec.externalID, or the UUID derived from the Binding's uid). Written for
    people and tools to read; the controller never takes it from here."""
    secret_name: str | None = None
    """The Secret the credentials were written to."""
    external_properties: BindingPropertiesState | None = None
    """The parameters checksum the broker last accepted."""
    in_progress_properties: BindingPropertiesState | None = None
    """The parameters checksum of the bind in progress."""
    unbind_status: UnbindStatus | None = None
    """Whether deleting the Binding requires an unbind request, and how that went."""


class Binding(_CatalogResource):
    """Credentials to an Instance for an application (namespaced, possibly in another namespace than the
    Instance): written to a Secret and optionally projected into workloads. Deleting it unbinds at the broker
    and deletes the Secret."""

    KIND: ClassVar[str] = "Binding"
    PLURAL: ClassVar[str] = "bindings"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("scbinding",)
    PRINTER_COLUMNS: ClassVar[tuple[tuple[str, str, str], ...]] = (
        ("Instance", ".spec.instanceRef.name", "string"),
        ("Secret", ".status.secretName", "string"),
        ("Status", _ready_reason(), "string"),
    )

    spec: BindingSpec
    status: BindingStatus | None = None


#: The four kinds, in install order.
SERVICE_CATALOG_KINDS: tuple[type[KubeResource], ...] = (Broker, ServiceClass, Instance, Binding)
