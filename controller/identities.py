"""Whose rights an action runs with (issue 24): pure, from the plan or namespace and the settings.

The controller's own rights cover its kinds, Leases, Events, impersonation and access reviews; everything else
it does for someone runs as an identity the platform granted (Flux's multi-tenancy model):

* what a plan's templates render, read and release, and the instance's and bindings' Secrets: the plan's
  ServiceAccount (``spec.serviceAccountName``, else the default plan account) in the plan's namespace;
* writes into a consumer's namespace for no plan (Service Catalog Bindings, claims): that namespace's
  ``opbroker`` account.

None means "the controller itself" (``--single-tenant``).
"""

from __future__ import annotations

from typing import Any

from opbroker.api.conventions import service_account_user
from opbroker.controller.settings import ControllerSettings


def plan_user(plan: dict[str, Any], settings: ControllerSettings) -> str | None:
    """The user a plan acts as."""
    if not settings.impersonate:
        return None
    account = (plan.get("spec") or {}).get("serviceAccountName") or settings.default_plan_service_account
    return service_account_user(plan["metadata"].get("namespace") or settings.namespace, account)


def namespace_user(namespace: str, settings: ControllerSettings) -> str | None:
    """The user opbroker writes into ``namespace`` as, when no plan is involved."""
    if not settings.impersonate:
        return None
    return service_account_user(namespace, settings.namespace_service_account)
