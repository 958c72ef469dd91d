"""Claims in a namespace nobody onboarded say the real cause and its fix (issue 47), against a real API server and
the real controller: a claim that took its service but may not write its binding Secret says so (not a stale
``Pending`` whose candidates were judged before the service was registered), a container health check says why its
Job cannot start, an automatic registration that cannot write says so on its binding — each naming
``opbroker namespace onboard NS`` — and once the namespace is onboarded the claim binds on its own."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from opbroker.controller.claims.core import names
from opbroker.controller.claims.registering import FAILED
from tests.claims.test_registration import OSB_GROUP, OSB_VERSION, bind, osb, provision
from tests.claims_support import create, registered_service, service_claim, status
from tests.cluster_fixtures import onboard
from tests.controller_support import wait_for

pytestmark = pytest.mark.usefixtures("controller")


def _condition(found: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in found.get("conditions") or [] if c.get("type") == kind), {})


def test_a_claim_and_a_check_in_a_namespace_nobody_onboarded_name_the_fix(
    api_client: client.ApiClient, bare_namespace: str
) -> None:
    namespace = bare_namespace
    fix = f"opbroker namespace onboard {namespace}"
    check = {"container": {"image": "postgres:14"}, "periodSeconds": 5}
    endpoints: dict[str, str | tuple[str, str]] = {"host": "pg.example", "port": "5432"}
    create(api_client, namespace, registered_service("checked", endpoints=endpoints, healthcheck=check))
    create(api_client, namespace, registered_service("unchecked", endpoints=endpoints))
    create(api_client, namespace, service_claim("app-db", keys=["host", "port"]))

    def claim_says_the_cause() -> dict[str, Any] | None:
        found = status(api_client, namespace, "ServiceClaim", "app-db")
        return found if fix in (found.get("reason") or "") else None

    claim = wait_for(claim_says_the_cause, 30, "the claim to say why it cannot bind")
    assert (claim["state"], claim["registeredService"]) == ("Resolved", "unchecked"), claim
    ready = _condition(claim, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "NamespaceNotOnboarded") and fix in ready["message"]
    verdicts = {c["name"]: c for c in claim["candidates"]}
    assert verdicts["unchecked"]["accepted"] is True, verdicts  # judged now, not before the service was registered
    assert not any("not yet registered" in c["reason"] for c in claim["candidates"]), claim["candidates"]

    def check_says_the_cause() -> dict[str, Any] | None:
        healthy = _condition(status(api_client, namespace, "RegisteredService", "checked"), "Healthy")
        return healthy if fix in healthy.get("message", "") else None

    healthy = wait_for(check_says_the_cause, 30, "the health check to say why its Job cannot start")
    assert healthy["reason"] == "NamespaceNotOnboarded", healthy
    assert healthy["message"].startswith("cannot start the check: namespace "), healthy

    onboard(api_client, namespace)  # the fix named: the claim binds on its own (retried with backoff)
    wait_for(
        lambda: _condition(status(api_client, namespace, "ServiceClaim", "app-db"), "Ready").get("status") == "True",
        60,
        "the claim to bind once the namespace is onboarded",
    )
    assert status(api_client, namespace, "ServiceClaim", "app-db").get("reason") is None


def test_an_automatic_registration_that_may_not_write_says_so_on_its_binding(
    api_client: client.ApiClient, bare_namespace: str
) -> None:
    """Provisioned and bound in an onboarded namespace; its ``opbroker`` account's RoleBinding then removed (the
    platform offboarding it): opting the binding in to registration writes the endpoint Secret as that account."""
    namespace = bare_namespace
    onboard(api_client, namespace)
    provision(api_client, namespace)
    bind(api_client, namespace, "b1", {})
    rbac = client.RbacAuthorizationV1Api(api_client)
    for binding in rbac.list_namespaced_role_binding(namespace).items:
        if any(s.kind == "ServiceAccount" and s.name == "opbroker" for s in binding.subjects or []):
            rbac.delete_namespaced_role_binding(binding.metadata.name, namespace)
    patch = {"metadata": {"annotations": {names.ANNOTATION_REGISTER: "true", names.ANNOTATION_TYPE: "postgresql"}}}
    osb(api_client).patch_namespaced_custom_object(OSB_GROUP, OSB_VERSION, namespace, "sfservicebindings", "b1", patch)

    def event() -> Any:
        listed = client.CoreV1Api(api_client).list_namespaced_event(namespace, field_selector="involvedObject.name=b1")
        return next((e for e in listed.items if e.message.startswith(FAILED)), None)

    found = wait_for(event, 30, "the registration's failure on the binding")
    assert found.type == "Warning" and found.reason == "NamespaceNotOnboarded", found
    assert f"opbroker namespace onboard {namespace}" in found.message and 'patch secrets (API group ""' in found.message
