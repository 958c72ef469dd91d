"""Building blocks shared by every resource: wire conventions, object metadata, conditions, references.

Wire convention: Python attributes are snake_case, the wire (YAML/JSON, the CRD schema) is camelCase,
exactly as Kubernetes and the Service Fabrik seeds spell it. Models are frozen: code that changes a
resource builds a new one with ``model_copy(update=...)``, so nothing shared is mutated behind a
reconciler's back.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

#: A namespace's name (a DNS-1123 label).
NamespaceName = Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]

#: Free-form JSON objects passed through verbatim (OSB context, parameters, catalog metadata).
#: In the CRD they become ``x-kubernetes-preserve-unknown-fields`` objects.
FreeForm = dict[str, Any]


class WireModel(BaseModel):
    """Base of every spec/status part: camelCase on the wire, immutable, unknown fields rejected.

    Rejecting unknown fields matters: the API server would silently prune them from a structural CRD,
    so a typo such as ``planUpdateable`` would vanish instead of failing. ``opbroker validate`` and the
    Pulumi components catch it first, naming the field.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        extra="forbid",
        use_attribute_docstrings=True,
    )


class ObjectMeta(BaseModel):
    """The part of Kubernetes ``metadata`` opbroker reads; everything else the server sets is kept."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True, extra="allow")

    name: str | None = Field(default=None, min_length=1, max_length=253)
    generate_name: str | None = None
    namespace: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    finalizers: list[str] | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None

    @model_validator(mode="after")
    def _named(self) -> ObjectMeta:
        if not self.name and not self.generate_name:
            raise ValueError("metadata.name is required (or metadata.generateName)")
        return self


class ResourceRef(WireModel):
    """A pointer to a Kubernetes object: how ``sources`` entries and ``status.resources`` name things."""

    api_version: str = Field(min_length=1)
    kind: str = Field(min_length=1)
    name: str = Field(min_length=1)
    namespace: str | None = None


class Condition(WireModel):
    """A Kubernetes-style condition, so resources are waitable (``kubectl wait``, ``pulumi.com/waitFor``)."""

    type: str
    """What the condition is about, e.g. ``Ready``."""
    status: Literal["True", "False", "Unknown"]
    """Whether the condition holds."""
    reason: str | None = None
    """Why, in one CamelCase word (machine-readable)."""
    message: str | None = None
    """Why, for people."""
    last_transition_time: datetime | None = None
    """When status last changed."""
    observed_generation: int | None = None
    """The metadata.generation the condition was computed from."""


class KubeResource(BaseModel):
    """A custom resource owned by opbroker: apiVersion/kind checked against the class, typed spec/status.

    Subclasses declare ``spec`` and ``status`` with concrete types, and the CRD facts as class variables
    (group, version, plural, short names, printer columns), from which ``opbroker.api.crd`` builds the CRD.
    """

    model_config = ConfigDict(populate_by_name=True, frozen=True, extra="forbid")

    GROUP: ClassVar[str]
    VERSION: ClassVar[str] = "v1alpha1"
    KIND: ClassVar[str]
    PLURAL: ClassVar[str]
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ()
    CATEGORIES: ClassVar[tuple[str, ...]] = ("opbroker",)
    #: (name, JSON path, type[, priority]) — shown by ``kubectl get``.
    PRINTER_COLUMNS: ClassVar[tuple[tuple[str, str, str], ...]] = ()
    #: Whether ``spec`` may be omitted (ServiceCatalog is written by the controller alone). A kind without a
    #: ``spec`` field (ServiceClass keeps its fields at the top level, as Service Catalog v1alpha1 did) sets
    #: it False; its own required top-level fields are then required in the CRD instead.
    SPEC_REQUIRED: ClassVar[bool] = True
    #: ``Namespaced`` or ``Cluster``: the CRD's scope. A cluster-scoped object may not name a namespace.
    SCOPE: ClassVar[Literal["Namespaced", "Cluster"]] = "Namespaced"
    #: The ``api-approved.kubernetes.io`` annotation a CRD in a protected group (``*.k8s.io``,
    #: ``*.kubernetes.io``) must carry: the URL of the approved API review, or a reason starting "unapproved".
    API_APPROVAL: ClassVar[str | None] = None

    api_version: str = Field(alias="apiVersion")
    kind: str
    metadata: ObjectMeta

    @classmethod
    def api_version_string(cls) -> str:
        return f"{cls.GROUP}/{cls.VERSION}"

    @model_validator(mode="before")
    @classmethod
    def _fill_type_meta(cls, data: Any) -> Any:
        """Let Python callers omit apiVersion/kind; a wrong one on the wire is still an error below."""
        if isinstance(data, dict) and hasattr(cls, "KIND"):
            data = dict(data)
            data.setdefault("apiVersion", cls.api_version_string())
            data.setdefault("kind", cls.KIND)
        return data

    @field_validator("api_version")
    @classmethod
    def _check_api_version(cls, value: str) -> str:
        if value != cls.api_version_string():
            raise ValueError(f"must be {cls.api_version_string()!r}, got {value!r}")
        return value

    @field_validator("kind")
    @classmethod
    def _check_kind(cls, value: str) -> str:
        if value != cls.KIND:
            raise ValueError(f"must be {cls.KIND!r}, got {value!r}")
        return value

    @model_validator(mode="after")
    def _check_scope(self) -> KubeResource:
        """The API server silently drops a cluster-scoped object's namespace; saying so beats a surprise."""
        if self.SCOPE == "Cluster" and self.metadata.namespace:
            raise ValueError(
                f"metadata.namespace: {self.KIND} is cluster-scoped; remove namespace {self.metadata.namespace!r}"
            )
        return self

    def to_manifest(self) -> dict[str, Any]:
        """The object as the API server wants it: camelCase, no nulls."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
