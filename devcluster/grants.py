"""What the platform team grants outside Pulumi, for ``opbroker dev`` and the tests: the default plan account
(the ServiceAccount plans act as, see ``opbroker.controller.osb.identities``) with the rights its plans need, and the
onboarding of a consumer namespace.

The objects come from ``opbroker.api.rbac``, as the ControlPlane component's do (``tenant_namespaces``,
``controller.cluster_operator_rules``): a plan account is bound in its control plane's namespace and in each
onboarded namespace, cluster-wide only for the cluster-scoped kinds it is given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes import client

from opbroker.api.conventions import DEFAULT_NAMESPACE, DEFAULT_PLAN_SERVICE_ACCOUNT
from opbroker.components import rbac
from opbroker.controller import onboarding
from opbroker.controller.runtime.kube import Kube


def grant_plan_account(
    api: client.ApiClient,
    namespace: str,
    operator_rules: Sequence[Mapping[str, Any]],
    *,
    account: str = DEFAULT_PLAN_SERVICE_ACCOUNT,
    cluster_rules: Sequence[Mapping[str, Any]] = (),
) -> None:
    """Create (or update) the plan account ``namespace/account``: a ClusterRole of :func:`rbac.plan_account_rules`
    for ``operator_rules`` bound in ``namespace`` (onboarded namespaces get their own binding,
    :func:`onboard_namespace`), and ``cluster_rules`` — cluster-scoped kinds — bound cluster-wide."""
    kube = Kube(api)
    manifests = rbac.plan_account_manifests(
        namespace,
        rbac.plan_account_rules(operator_rules),
        account,
        cluster_rules=[rbac.Rule.from_args(rule) for rule in cluster_rules],
    )
    for manifest in manifests:
        kube.apply(manifest, field_manager="opbroker-dev")


def onboard_namespace(
    api: client.ApiClient,
    namespace: str,
    *,
    control_plane: str = DEFAULT_NAMESPACE,
    plan_accounts: Sequence[str] = (DEFAULT_PLAN_SERVICE_ACCOUNT,),
) -> None:
    """What the platform does for a new consumer namespace, as ``opbroker namespace onboard`` does it
    (:func:`opbroker.controller.onboarding.onboard`): its ``opbroker`` account (Flux's default service account, per
    tenant), bound there to ``control_plane``'s namespace writer (:func:`rbac.tenant_write_rules`: what opbroker
    writes into a namespace for no plan — Service Catalog Binding Secrets, claims' Secrets, Jobs, projections), and
    ``control_plane``'s ``plan_accounts`` bound there to their ClusterRoles (granted by :func:`grant_plan_account`)."""
    onboarding.onboard(Kube(api), onboarding.Onboarding(namespace, control_plane, tuple(plan_accounts)))
