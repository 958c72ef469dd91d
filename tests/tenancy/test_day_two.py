"""Issue 43, tried as a tenant: day two (live status, drift correction, pause) gives a tenant no new way out of its
namespace, and no way to make the controller loop.

The tenant acts with its own ServiceAccount token: admin of its namespace for opbroker's kinds (status included),
Secrets, ConfigMaps and — here — the demo operator's Databases, the objects its instance's plan renders. It
provisions an instance itself, then tries what day two might open: forging the records a check reads
(``status.resources`` naming the victim's Database, its own conditions), pausing (an administrator's annotation),
deleting and editing its own Database (set back, in its namespace only), playing its operator's failure (its own
Ready only), and fighting the correction with a writer of its own (bounded, ``Synced=False``). Meanwhile a victim
namespace holds an instance the platform provisioned: nothing of it changes, no correction or verdict reaches it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from opbroker.api.conventions import ANNOTATION_PAUSED, PAUSED
from tests.cluster_fixtures import onboarded_namespace
from tests.controller.test_day_two import Rival, condition, events
from tests.controller.test_lifecycle import (
    DB,
    GROUP,
    PLAN_ID,
    SERVICE_ID,
    VERSION,
    get,
    provision,
    wait_state,
)
from tests.controller_support import wait_for
from tests.tenancy_support import Tenant, assert_unchanged, refused, snapshot

pytestmark = pytest.mark.usefixtures("controller")

INSTANCES = "sfserviceinstances"


@pytest.fixture
def victim(api_client: client.ApiClient) -> Iterator[str]:
    with onboarded_namespace(api_client, "v") as name:
        yield name


def grant_databases(admin: client.ApiClient, tenant: Tenant) -> None:
    """The tenant owns its operator's objects too: every verb on Databases in its namespace."""
    rbac = client.RbacAuthorizationV1Api(admin)
    role = {
        "metadata": {"name": "tenant-databases"},
        "rules": [{"apiGroups": [DB[0]], "resources": ["databases", "databases/status"], "verbs": ["*"]}],
    }
    rbac.create_namespaced_role(tenant.namespace, role)
    binding = {
        "metadata": {"name": "tenant-databases"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant-databases"},
        "subjects": [{"kind": "ServiceAccount", "name": tenant.service_account, "namespace": tenant.namespace}],
    }
    rbac.create_namespaced_role_binding(tenant.namespace, binding)


def tenant_database(tenant: Tenant, name: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = tenant.custom.get_namespaced_custom_object(*DB[:2], tenant.namespace, DB[2], name)
    except client.ApiException as exc:
        if exc.status in (403, 404):
            return None
        raise
    return found


def test_day_two_gives_a_tenant_no_way_out_of_its_namespace_and_no_hot_loop(
    api_client: client.ApiClient, tenant: Tenant, victim: str
) -> None:
    grant_databases(api_client, tenant)
    provision(api_client, victim, "victim-db")
    wait_state(api_client, victim, INSTANCES, "victim-db", "succeeded")
    wait_for(
        lambda: (
            (get(api_client, victim, DB[2], "victim-db", *DB[:2]) or {}).get("status", {}).get("phase") == "Running"
        ),
        30,
        "victim Running",
    )

    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SFServiceInstance",
        "metadata": {"name": "mine"},
        "spec": {"serviceId": SERVICE_ID, "planId": PLAN_ID, "instanceId": "mine", "parameters": {}},
    }
    tenant.custom.create_namespaced_custom_object(GROUP, VERSION, tenant.namespace, INSTANCES, body)
    wait_state(api_client, tenant.namespace, INSTANCES, "mine", "succeeded")
    wait_for(lambda: (tenant_database(tenant, "mine") or {}).get("status", {}).get("phase") == "Running", 30, "Running")
    before = snapshot(api_client, victim, DB)

    # Forged records: the check follows status.resources and shows conditions; status is opbroker's.
    victims_db = {"apiVersion": f"{DB[0]}/{DB[1]}", "kind": "Database", "name": "victim-db", "namespace": victim}
    forged = {"status": {"resources": [victims_db], "conditions": [{"type": "Synced", "status": "True"}]}}
    refused(
        lambda: tenant.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, tenant.namespace, INSTANCES, "mine", forged
        ),
        403,
        422,
    )
    # Pausing is an administrator's: the annotation is opbroker's.
    pause = {"metadata": {"annotations": {ANNOTATION_PAUSED: PAUSED}}}
    refused(
        lambda: tenant.custom.patch_namespaced_custom_object(
            GROUP, VERSION, tenant.namespace, INSTANCES, "mine", pause
        ),
        403,
        422,
    )

    # Its own Database deleted, then edited: set back, in its namespace, as the plan's account.
    old_uid = tenant_database(tenant, "mine")["metadata"]["uid"]  # type: ignore[index]
    tenant.custom.delete_namespaced_custom_object(*DB[:2], tenant.namespace, DB[2], "mine")
    wait_for(
        lambda: (tenant_database(tenant, "mine") or {}).get("metadata", {}).get("uid") not in (None, old_uid),
        30,
        "recreated",
    )
    tenant.custom.patch_namespaced_custom_object(*DB[:2], tenant.namespace, DB[2], "mine", {"spec": {"version": "14"}})
    wait_for(lambda: (tenant_database(tenant, "mine") or {}).get("spec", {}).get("version") == "16", 30, "set back")

    # Playing its operator: its own instance's Ready only.
    failed = {"status": {"phase": "Failed", "message": "tenant says failed"}}
    tenant.custom.patch_namespaced_custom_object_status(*DB[:2], tenant.namespace, DB[2], "mine", failed)
    wait_for(
        lambda: (
            (condition(get(api_client, tenant.namespace, INSTANCES, "mine"), "Ready") or {}).get("reason")
            == "OperatorFailed"
        ),
        30,
        "its own Ready=False",
    )

    # Fighting the correction with a writer of its own: bounded, then Synced=False; no hot loop.
    def rival(version: str) -> None:
        spec = {"spec": {"version": version}}
        tenant.custom.patch_namespaced_custom_object(*DB[:2], tenant.namespace, DB[2], "mine", spec)

    writer = Rival(lambda: tenant_database(tenant, "mine"), rival)
    try:
        wait_for(
            lambda: (
                (condition(get(api_client, tenant.namespace, INSTANCES, "mine"), "Synced") or {}).get("reason")
                == "DriftFight"
            ),
            60,
            "Synced=False DriftFight",
        )
    finally:
        writer.stop()
    corrections = events(api_client, tenant.namespace, "mine", "DriftCorrected")
    assert len(corrections) <= 2 + 3  # the delete and the edit above, then at most the bound of the fight

    assert_unchanged(before, snapshot(api_client, victim, DB))
    victim_events = client.CoreV1Api(api_client).list_namespaced_event(victim).items
    day_two = {"DriftCorrected", "DriftDetected", "DriftFight", "OperatorFailed", "OperatorProgressing"}
    assert not [e for e in victim_events if e.reason in day_two]
