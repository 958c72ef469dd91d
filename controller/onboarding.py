"""Onboarding a consumer namespace outside Pulumi (``opbroker namespace onboard``, ``opbroker dev``): the objects of
:func:`opbroker.api.controllerinstall.onboarding_objects`, server-side applied, and removed again by offboarding.

A namespace nobody onboarded has no ``opbroker`` account and no plan account bound there: what opbroker writes into
it is refused (403). Onboarding is the platform's act, done with the platform's rights (the kubeconfig given), not
the controller's: the controller's ClusterRole cannot create RoleBindings.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from opbroker.api.controllerinstall import namespace_writer, onboarding_objects
from opbroker.api.conventions import DEFAULT_PLAN_SERVICE_ACCOUNT
from opbroker.api.meta import ResourceRef
from opbroker.controller.kube import Kube, ref_of

#: The field manager of what onboarding applies (``kubectl get -o yaml --show-managed-fields`` names it).
FIELD_MANAGER = "opbroker-onboarding"
#: ``app.kubernetes.io/managed-by`` of what onboarding applies.
MANAGED_BY = "opbroker-cli"

Progress = Callable[[str], None]


class NotOnboardable(RuntimeError):
    """The namespace cannot be onboarded as asked (it does not exist): something the user fixes."""


@dataclass(frozen=True)
class Onboarding:
    """One namespace's onboarding by one control plane."""

    namespace: str
    control_plane: str
    plan_accounts: Sequence[str] = (DEFAULT_PLAN_SERVICE_ACCOUNT,)

    def objects(self) -> list[tuple[str, dict[str, Any]]]:
        return onboarding_objects(self.namespace, self.control_plane, self.plan_accounts, managed_by=MANAGED_BY)


def _say(progress: Progress | None, message: str) -> None:
    if progress is not None:
        progress(message)


def onboard(kube: Kube, onboarding: Onboarding, progress: Progress | None = None) -> list[ResourceRef]:
    """Apply the control plane's namespace writer ClusterRole (the same the ControlPlane creates: applied again it
    changes nothing) and the namespace's objects; the refs of what was applied in the namespace."""
    if kube.get(ResourceRef(api_version="v1", kind="Namespace", name=onboarding.namespace)) is None:
        raise NotOnboardable(f"the namespace {onboarding.namespace} does not exist: create it first")
    kube.apply(namespace_writer(onboarding.control_plane, managed_by=MANAGED_BY), field_manager=FIELD_MANAGER)
    applied = []
    for _, manifest in onboarding.objects():
        kube.apply(manifest, field_manager=FIELD_MANAGER)
        ref = ref_of(manifest)
        applied.append(ref)
        _say(progress, f"applied {ref.kind} {ref.namespace}/{ref.name}")
    return applied


def offboard(kube: Kube, onboarding: Onboarding, progress: Progress | None = None) -> list[ResourceRef]:
    """Delete the namespace's onboarding objects (the plan accounts' bindings first, the account last); the refs
    of what was there. The namespace writer ClusterRole stays: other namespaces are bound to it."""
    deleted = []
    for _, manifest in reversed(onboarding.objects()):
        ref = ref_of(manifest)
        if kube.delete(ref):
            deleted.append(ref)
            _say(progress, f"deleted {ref.kind} {ref.namespace}/{ref.name}")
    return deleted
