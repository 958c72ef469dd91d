"""What the platform team grants outside Pulumi, for ``opbroker dev`` and the tests: the default plan account
(the ServiceAccount plans act as, see ``opbroker.controller.identities``) with the rights its plans need.

The ControlPlane component creates the same objects from ``opbroker.api.rbac`` in a Pulumi stack.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes import client

from opbroker.api.conventions import DEFAULT_PLAN_SERVICE_ACCOUNT, NAMESPACE_SERVICE_ACCOUNT
from opbroker.components import rbac
from opbroker.controller.kube import Kube


def grant_plan_account(
    api: client.ApiClient,
    namespace: str,
    operator_rules: Sequence[Mapping[str, Any]],
    *,
    account: str = DEFAULT_PLAN_SERVICE_ACCOUNT,
) -> None:
    """Create (or update) the plan account ``namespace/account`` with the ClusterRole of
    :func:`rbac.plan_account_rules` for ``operator_rules``."""
    kube = Kube(api)
    for manifest in rbac.plan_account_manifests(namespace, rbac.plan_account_rules(operator_rules), account):
        kube.apply(manifest, field_manager="opbroker-dev")


#: The ClusterRole a consumer namespace's ``opbroker`` account is bound to there (:func:`onboard_namespace`).
NAMESPACE_WRITER = "opbroker-namespace-writer"


def onboard_namespace(api: client.ApiClient, namespace: str) -> None:
    """What the platform does for a new consumer namespace: its ``opbroker`` account (Flux's default service
    account, per tenant), bound there to :data:`NAMESPACE_WRITER` (:func:`rbac.tenant_write_rules`: what opbroker
    writes into a namespace for no plan — Service Catalog Binding Secrets, claims' Secrets, Jobs, projections)."""
    kube = Kube(api)
    manifests: list[dict[str, Any]] = [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": NAMESPACE_WRITER},
            "rules": [rule.to_manifest() for rule in rbac.tenant_write_rules()],
        },
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": NAMESPACE_SERVICE_ACCOUNT, "namespace": namespace},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": NAMESPACE_WRITER, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAMESPACE_WRITER},
            "subjects": [{"kind": "ServiceAccount", "name": NAMESPACE_SERVICE_ACCOUNT, "namespace": namespace}],
        },
    ]
    for manifest in manifests:
        kube.apply(manifest, field_manager="opbroker-dev")
