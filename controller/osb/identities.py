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

from opbroker.api.conventions import DEFAULT_PLAN_SERVICE_ACCOUNT, service_account_user
from opbroker.controller.settings import ControllerSettings
from opbroker.kubeclient.wire import JsonObject, path_of, text_of


def plan_user(plan: JsonObject, settings: ControllerSettings) -> str | None:
    """The user a plan acts as."""
    if not settings.impersonate:
        return None
    return plan_account(plan, namespace=settings.namespace, default_account=settings.default_plan_service_account)


def plan_account(plan: JsonObject, *, namespace: str, default_account: str = DEFAULT_PLAN_SERVICE_ACCOUNT) -> str:
    """The plan's ServiceAccount as a user name: ``spec.serviceAccountName``, else ``default_account``, in the
    plan's namespace (``namespace`` when the body names none). What a preview outside the controller (``opbroker
    plan diff --as-plan-account``, the SFPlan component) impersonates, assuming the controller's default account."""
    account = text_of(path_of(plan, "spec", "serviceAccountName")) or default_account
    return service_account_user(text_of(path_of(plan, "metadata", "namespace")) or namespace, account)


def namespace_user(namespace: str, settings: ControllerSettings) -> str | None:
    """The user opbroker writes into ``namespace`` as, when no plan is involved."""
    if not settings.impersonate:
        return None
    return service_account_user(namespace, settings.namespace_service_account)
