"""``NamespaceOnboarding``: a consumer namespace made ready for opbroker, declared in the platform's program.

A namespace nobody onboarded has no ``opbroker`` account and no plan account bound there: whatever opbroker writes
into it is refused (403). The ControlPlane onboards its ``tenant_namespaces`` with this component; a team's program
uses it alone for a namespace created later (``depends_on`` its Namespace). The objects are
:func:`opbroker.api.controllerinstall.onboarding_objects`'s — the same ``opbroker namespace onboard`` applies: the
namespace's ``opbroker`` account, its RoleBinding to the control plane's namespace writer (a ClusterRole the
ControlPlane creates) and a RoleBinding per plan account.

No ``from __future__ import annotations`` here: the component provider reads these annotations at run time.
"""

from typing import Annotated, Any, NotRequired, TypedDict

import pulumi
import pulumi_kubernetes as k8s
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from opbroker.api import errors
from opbroker.api.controllerinstall import onboarding_objects
from opbroker.api.conventions import DEFAULT_NAMESPACE, DEFAULT_PLAN_SERVICE_ACCOUNT, NAMESPACE_SERVICE_ACCOUNT
from opbroker.components import resources

ONBOARDING_TYPE = "opbroker:index:NamespaceOnboarding"
_NAMESPACE = Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)]
_ACCOUNT = Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", max_length=253)]


class NamespaceOnboardingArgs(TypedDict):
    """A consumer namespace made ready for opbroker: what it writes there for no plan, and where plans may act."""

    namespace: str
    """The consumer namespace to onboard (it must exist, or be created in the same program: ``depends_on`` it)."""
    control_plane: NotRequired[str]
    """Namespace of the control plane whose plans act there (default ``opbroker``)."""
    plan_accounts: NotRequired[list[str]]
    """The control plane's plan accounts to bind there, each to its ClusterRole (default ``["opbroker-plans"]``)."""
    labels: NotRequired[dict[str, str]]
    """Extra labels on every object."""


class Settings(BaseModel):
    """The args, validated, with the defaults filled in."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    namespace: _NAMESPACE
    control_plane: _NAMESPACE = DEFAULT_NAMESPACE
    plan_accounts: list[_ACCOUNT] = Field(default_factory=lambda: [DEFAULT_PLAN_SERVICE_ACCOUNT], min_length=1)
    labels: dict[str, str] = Field(default_factory=dict)


def settings(name: str, args: NamespaceOnboardingArgs) -> Settings:
    """Validated settings for ``args``, or InvalidArgsError naming each field."""
    found = resources.outputs_in(dict(args), "")
    if found:
        reason = "must be a plain value (it is validated at preview time), not an Output"
        raise resources.InvalidArgsError("NamespaceOnboarding", name, [(path, reason) for path in found])
    try:
        return Settings.model_validate(dict(args))
    except ValidationError as exc:
        problems = [line.partition(": ")[::2] for line in errors.field_errors(exc)]
        raise resources.InvalidArgsError("NamespaceOnboarding", name, problems) from None


#: A parent whose class sets this to True created these children itself before this component existed (the
#: ControlPlane's ``tenant_namespaces``): the children keep their old URNs through an alias, so upgrading opbroker
#: neither replaces nor deletes an onboarded namespace's objects.
ONBOARDED_AS_CHILDREN = "onboarded_namespaces_as_children"


class NamespaceOnboarding(pulumi.ComponentResource):
    """Onboards a consumer namespace: its ``opbroker`` account and the control plane's plan accounts bound there."""

    namespace: pulumi.Output[str]
    """The onboarded namespace, known once its objects exist."""
    account: pulumi.Output[str]
    """Name of the namespace's ``opbroker`` ServiceAccount (what opbroker acts as there for no plan)."""

    def __init__(self, name: str, args: NamespaceOnboardingArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        s = settings(name, args)
        super().__init__(ONBOARDING_TYPE, name, None, opts)
        parent = opts.parent if opts is not None else None
        kept = [pulumi.Alias(parent=parent)] if getattr(parent, ONBOARDED_AS_CHILDREN, False) else None
        children: list[pulumi.CustomResource] = []
        for key, manifest in onboarding_objects(s.namespace, s.control_plane, tuple(s.plan_accounts), labels=s.labels):
            options = pulumi.ResourceOptions.merge(
                resources.child_options(self, opts), pulumi.ResourceOptions(aliases=kept)
            )
            body: dict[str, Any] = {k: v for k, v in manifest.items() if k not in ("apiVersion", "kind")}
            if manifest["kind"] == "ServiceAccount":
                children.append(k8s.core.v1.ServiceAccount(f"{name}-{key}", **body, opts=options))
            else:
                body["role_ref"] = body.pop("roleRef")
                children.append(k8s.rbac.v1.RoleBinding(f"{name}-{key}", **body, opts=options))
        self.namespace = pulumi.Output.all(*(child.id for child in children)).apply(lambda _: s.namespace)
        self.account = resources.name_of(children[0], NAMESPACE_SERVICE_ACCOUNT)
        self.register_outputs({"namespace": self.namespace, "account": self.account})
