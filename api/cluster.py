"""SFCluster: a Kubernetes cluster instances can be scheduled onto.

The cluster named ``"1"`` is the master when it also provisions. Its kubeconfig lives in a Secret named by
``secretRef`` (key ``kubeconfig``) in the SFCluster's namespace.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import ConfigDict, Field, model_validator

from opbroker.api.meta import Condition, KubeResource, WireModel
from opbroker.api.policyrules import EVERYTHING_REFUSED, grants_everything

RESOURCE_GROUP = "resource.servicefabrik.io"

#: A ServiceAccount's name (as an SFPlan's ``serviceAccountName``).
AccountName = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")]
#: One word of an RBAC rule: a group, resource, verb or name.
RuleWord = Annotated[str, Field(max_length=253)]
#: A Kubernetes quantity: ``2``, ``"500m"``, ``"16Gi"``.
Quantity = int | str


class SFClusterControllerRule(WireModel):
    """An RBAC rule for the operator kinds the plans render in that cluster (as the ControlPlane's
    ``controller.operator_rules``); `*` verbs on `*` resources is refused, as there."""

    # The same refusal twice: by the API server (an SFCluster written with kubectl) and by the model (the
    # controller's installer reads the spec through it before granting anything).
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "!('*' in self.verbs && '*' in self.resources)", "message": EVERYTHING_REFUSED}
            ]
        }
    )

    # Bounded, so the API server can bound the rule's cost.
    api_groups: list[RuleWord] = Field(max_length=32)
    resources: list[RuleWord] = Field(min_length=1, max_length=64)
    verbs: list[RuleWord] = Field(min_length=1, max_length=16)
    resource_names: list[RuleWord] | None = Field(default=None, max_length=64)

    @model_validator(mode="after")
    def _not_everything(self) -> SFClusterControllerRule:
        if grants_everything(self.model_dump()):
            raise ValueError(EVERYTHING_REFUSED)
        return self


class SFClusterController(WireModel):
    """Opt-in (issue 29): the master installs opbroker's controller into this cluster, with its RBAC, from the
    same definitions the ControlPlane component uses (:mod:`opbroker.api.controllerinstall`); upgrades it when
    these fields or the definitions change; removes it when this is withdrawn or the SFCluster is deleted."""

    image: str = Field(min_length=1, max_length=512)
    """The opbroker image the controller runs."""
    replicas: int = Field(default=2, ge=1, le=10)
    """Controller replicas (one leads, the others stand by)."""
    image_pull_policy: Literal["IfNotPresent", "Always", "Never"] = "IfNotPresent"
    operator_rules: list[SFClusterControllerRule] = Field(default_factory=list, max_length=64)
    """Rules for the operator kinds the plans render there (granted to the default plan account in the
    control-plane namespace and in each namespace onboarded there)."""
    cluster_operator_rules: list[SFClusterControllerRule] = Field(default_factory=list, max_length=64)
    """Rules for cluster-scoped kinds the plans render there (granted to the default plan account cluster-wide:
    no RoleBinding can grant them)."""
    plan_accounts: list[AccountName] = Field(default_factory=list, max_length=64)
    """Further plan accounts (SFPlans' `serviceAccountName`) the controller may impersonate there."""
    webhook: bool = True
    """Serve the Service Catalog admission webhook there (the ControlPlane's ``controller.webhook``)."""


class SFClusterSpec(WireModel):
    secret_ref: str = Field(min_length=1)
    total_capacity: dict[str, Quantity] | None = None
    """Capacity declared by the operator of the cluster, used where nodes cannot be read."""
    scheduling_limit_percentage: int | None = Field(default=None, ge=0, le=100)
    """Capacity-aware scheduling keeps requests below this share of allocatable."""
    controller: SFClusterController | None = None
    """Install opbroker's controller into the cluster (absent: it is installed by hand, or not at all)."""


class SFClusterStatus(WireModel):
    service_instance_count: int | None = Field(default=None, ge=0)
    capacity: dict[str, Quantity] | None = None
    allocatable: dict[str, Quantity] | None = None
    requests: dict[str, Quantity] | None = None
    reachable: bool | None = None
    observed_generation: int | None = None
    conditions: list[Condition] | None = None


class SFCluster(KubeResource):
    GROUP: ClassVar[str] = RESOURCE_GROUP
    KIND: ClassVar[str] = "SFCluster"
    PLURAL: ClassVar[str] = "sfclusters"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("sfc",)
    PRINTER_COLUMNS: ClassVar[tuple[tuple[str, str, str], ...]] = (
        ("Ready", '.status.conditions[?(@.type=="Ready")].status', "string"),
        ("Reason", '.status.conditions[?(@.type=="Ready")].reason', "string"),
        ("Instances", ".status.serviceInstanceCount", "integer"),
        ("Reachable", ".status.reachable", "boolean"),
    )
    """``kubectl get sfclusters`` answers whether each cluster takes work and, if not, why (the ``Ready``
    condition's reason: ``Unreachable``, ``KubeconfigRefused``, ``ControllerInstallFailed``,
    ``ControllerUnavailable``)."""

    spec: SFClusterSpec
    status: SFClusterStatus | None = None
