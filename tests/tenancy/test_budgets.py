"""Issue 42: nothing a tenant writes sizes the controller — per-namespace budgets, tried as a tenant.

A tenant is admin of its namespace: it may create as many SFServiceInstances as it likes, each as large as the API
server takes. Against a controller with small budgets (``--namespace-operations 3 --namespace-cache-mib 1
--namespace-workers 1``), a tenant acting with its own ServiceAccount token floods its namespace with instances
whose operator never reports an outcome, then with large ones; past each budget a new operation waits with
``Ready=False, NamespaceBudgetExceeded`` saying why, and starts once the namespace is within it again. Meanwhile a
victim namespace's instance, provisioned by the platform, is unchanged and a new one there provisions.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from opbroker.devcluster.controlplane import ControlPlane
from tests.cluster_fixtures import onboarded_namespace
from tests.controller.test_lifecycle import (
    GROUP,
    STALLING_PLAN,
    VERSION,
    get,
    provision,
    wait_state,
)
from tests.controller_support import Process, apply_yaml, controller_command, wait_for
from tests.tenancy_support import Tenant, assert_unchanged, snapshot

PLURAL = "sfserviceinstances"
SERVICE_ID = "6f4e7a0c-2f0a-4d5e-9b1a-0d6c1e0f5a11"


@pytest.fixture
def victim(api_client: client.ApiClient) -> Iterator[str]:
    with onboarded_namespace(api_client, "v") as name:
        yield name


def tenant_instance(tenant: Tenant, name: str, plan: str, **parameters: Any) -> None:
    """What a tenant writes itself: an SFServiceInstance in its namespace, no broker asked (no status: it may
    not write one)."""
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SFServiceInstance",
        "metadata": {"name": name},
        "spec": {"serviceId": SERVICE_ID, "planId": plan, "instanceId": name, "parameters": parameters},
    }
    client.CustomObjectsApi(tenant.api).create_namespaced_custom_object(GROUP, VERSION, tenant.namespace, PLURAL, body)


def ready(obj: dict[str, Any] | None) -> dict[str, Any]:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "Ready"), {})


def waiting(api: client.ApiClient, namespace: str, name: str) -> bool:
    return ready(get(api, namespace, PLURAL, name)).get("reason") == "NamespaceBudgetExceeded"


def state(api: client.ApiClient, namespace: str, name: str) -> str | None:
    return ((get(api, namespace, PLURAL, name) or {}).get("status") or {}).get("state")


def test_a_tenants_flood_waits_at_its_namespaces_budgets_and_the_victim_provisions(
    api_client: client.ApiClient,
    tenant: Tenant,
    victim: str,
    catalog_namespace: str,
    control_plane: ControlPlane,
    controller: Process,
    tmp_path: Path,
) -> None:
    plan = f"stalling-{tenant.namespace}"
    (tmp_path / "plan.yaml").write_text(STALLING_PLAN.format(name=plan))
    apply_yaml(api_client, tmp_path / "plan.yaml", catalog_namespace)
    controller.stop()  # the session's controller has the default budgets; this one has small ones
    budgeted = Process(
        "controller-budgets",
        controller_command(
            control_plane, "--namespace-operations", "3", "--namespace-cache-mib", "1", "--namespace-workers", "1"
        ),
        tmp_path,
    )
    budgeted.start()
    try:
        provision(api_client, victim, "kept", plan_id=plan)
        wait_state(api_client, victim, PLURAL, "kept", "succeeded")
        before = snapshot(api_client, victim)

        # Operations: six instances whose operator never answers; three run, three wait saying why.
        names = [f"stall{n}" for n in range(6)]
        for name in names:
            tenant_instance(tenant, name, plan, stall=True)
        wait_for(
            lambda: (
                sum(state(api_client, tenant.namespace, n) == "in progress" for n in names) == 3
                and sum(waiting(api_client, tenant.namespace, n) for n in names) == 3
            ),
            60,
            "three instances in progress and three waiting for the budget",
        )
        held = [n for n in names if waiting(api_client, tenant.namespace, n)]
        message = ready(get(api_client, tenant.namespace, PLURAL, held[0]))["message"]
        assert f"namespace {tenant.namespace!r} has 3 operations in progress, its budget of 3" in message
        assert state(api_client, tenant.namespace, held[0]) == "in_queue"
        events = client.CoreV1Api(api_client).list_namespaced_event(
            tenant.namespace, field_selector=f"involvedObject.name={held[0]}"
        )
        assert any(e.reason == "NamespaceBudgetExceeded" and e.type == "Warning" for e in events.items)

        # The victim's namespace has its own budget: a new instance there provisions meanwhile.
        provision(api_client, victim, "fresh", plan_id=plan)
        wait_state(api_client, victim, PLURAL, "fresh", "succeeded")

        # One of the tenant's operations ends (its instance goes): a waiting one starts.
        running = next(n for n in names if state(api_client, tenant.namespace, n) == "in progress")
        client.CustomObjectsApi(tenant.api).delete_namespaced_custom_object(
            GROUP, VERSION, tenant.namespace, PLURAL, running
        )
        wait_for(
            lambda: sum(state(api_client, tenant.namespace, n) == "in progress" for n in held) == 1,
            60,
            "a waiting instance to start once one of the three went",
        )

        # Cached bytes: large instances take the namespace past 1 MiB; a new one waits, saying so.
        for n in range(4):
            tenant_instance(tenant, f"large{n}", plan, pad="x" * 400_000)
        for name in names:
            if get(api_client, tenant.namespace, PLURAL, name) is not None:
                client.CustomObjectsApi(tenant.api).delete_namespaced_custom_object(
                    GROUP, VERSION, tenant.namespace, PLURAL, name
                )
        wait_for(
            lambda: all(get(api_client, tenant.namespace, PLURAL, n) is None for n in names),
            60,
            "the stalled instances to go (their operations end)",
        )
        tenant_instance(tenant, "small", plan)
        wait_for(lambda: waiting(api_client, tenant.namespace, "small"), 60, "the small instance to wait for bytes")
        why = ready(get(api_client, tenant.namespace, PLURAL, "small"))["message"]
        assert "bytes of objects the controller watches" in why, why

        after = snapshot(api_client, victim)
        after.pop(f"{PLURAL}/fresh")
        after.pop("configmaps/fresh-stall")
        assert_unchanged(before, after)
    finally:
        budgeted.stop()
        controller.start()
