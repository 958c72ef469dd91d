"""What the platform team grants outside Pulumi, for ``opbroker dev`` and the tests: the default plan account
(the ServiceAccount plans act as, see ``opbroker.controller.identities``) with the rights its plans need.

The ControlPlane component creates the same objects from ``opbroker.components.rbac`` in a Pulumi stack.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes import client

from opbroker.api.conventions import DEFAULT_PLAN_SERVICE_ACCOUNT
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
