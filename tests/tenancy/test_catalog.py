"""Issue 24, attacks on the catalog and on where requests land, run on the real API server.

A tenant acts with its own ServiceAccount token (tests/tenancy_support.py: consumer rights in its namespace
only, SFPlan included); a victim's namespace is snapshotted before and proven unchanged after.

* A — catalog from any namespace: an SFPlan a tenant creates in its namespace with the production plan's id
  must not replace the plan's templates for the real plan's instances (autoUpdateInstances re-renders them at
  once), and deleting it must not take the id away (every instance would fail PlanNotFound). Trusted entries
  declaring one id are both reported and neither served, by the controller and the broker.
* B — consumers' namespaces: the broker records an instance, and the controller defaults its rendered objects,
  in the namespace the request's ``context.namespace`` names; the broker accepts only those the platform
  allows (HTTP 400 otherwise, nothing recorded), with ``--no-context-namespaces`` too.

C (SFCluster kubeconfigs) is tested through the SFCluster reconciler in
tests/multicluster/test_kubeconfigs.py.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from opbroker.api import conventions
from opbroker.controller.core.reasons import Reason
from tests.broker_support import (
    ASYNC_PLAN,
    GROUP,
    INSTANCES,
    SERVICE,
    VERSION,
    Harness,
    StandInController,
    catalog_objects,
    create_namespace,
    install_catalog,
    new_id,
    provision_body,
    start_broker,
)
from tests.controller.test_lifecycle import SERVICE_ID, get, provision, wait_state
from tests.controller_idle import progress, wait_handled
from tests.controller_support import apply_yaml, wait_for
from tests.tenancy_support import Tenant, assert_unchanged, snapshot

DEMO_SERVICE = SERVICE_ID

PLAN = """
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFPlan
metadata:
  name: {name}
spec:
  name: {name}
  id: {plan_id}
  serviceId: {service_id}
  description: {who}
  autoUpdateInstances: true
  templates:
  - action: provision
    type: jinja2
    content: |
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: {{{{ instance.metadata.name }}}}
      data:
        rendered-by: {who}
"""


def plan_manifest(name: str, plan_id: str, who: str) -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load(PLAN.format(name=name, plan_id=plan_id, service_id=DEMO_SERVICE, who=who))
    return body


def install(api: client.ApiClient, namespace: str, tmp_path: Path, name: str, plan_id: str, who: str) -> None:
    """The platform team's plan, in a trusted namespace (as ``pulumi up`` or ``kubectl apply`` would)."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(PLAN.format(name=name, plan_id=plan_id, service_id=DEMO_SERVICE, who=who))
    apply_yaml(api, path, namespace)


def ready_of(body: dict[str, Any] | None) -> tuple[str, str, str] | None:
    status = (body or {}).get("status") or {}
    if status.get("observedGeneration") != (body or {}).get("metadata", {}).get("generation"):
        return None
    found = next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), None)
    return (found["status"], found["reason"], found["message"]) if found else None


def events_on(api: client.ApiClient, namespace: str, name: str) -> list[tuple[str, str, str]]:
    listed = client.CoreV1Api(api).list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}")
    return [(e.type, e.reason, e.message) for e in listed.items]


@pytest.fixture
def victim(api_client: client.ApiClient) -> Iterator[str]:
    """Another team's namespace (created by the platform), holding what an attacker must not change."""
    name = create_namespace(api_client, "victim")
    yield name
    client.CoreV1Api(api_client).delete_namespace(name)


@pytest.fixture
def real_plan(api_client: client.ApiClient, catalog_namespace: str, namespace: str, tmp_path: Path) -> Iterator[str]:
    """A production plan of this test in the control-plane namespace (the trusted one); its id."""
    plan_id = f"real-{namespace}"
    install(api_client, catalog_namespace, tmp_path, plan_id, plan_id, "the-platform")
    yield plan_id


def victim_instance(api: client.ApiClient, victim: str, plan_id: str, name: str = "db") -> None:
    provision(api, victim, name, plan_id=plan_id)
    wait_state(api, victim, "sfserviceinstances", name, "succeeded")
    rendered = client.CoreV1Api(api).read_namespaced_config_map(name, victim)
    assert rendered.data == {"rendered-by": "the-platform"}


def impostor(tenant: Tenant, plan_id: str) -> None:
    """The tenant's SFPlan with the production plan's id, created with the tenant's own token."""
    body = plan_manifest("impostor", plan_id, "the-attacker")
    tenant.custom.create_namespaced_custom_object(GROUP, VERSION, tenant.namespace, "sfplans", body)


def warned(api: client.ApiClient, namespace: str, name: str) -> bool:
    return any(reason == Reason.UNTRUSTED_NAMESPACE.value for _, reason, _ in events_on(api, namespace, name))


# -- A: the catalog comes from the trusted namespaces only ---------------------------------------------------


@pytest.mark.usefixtures("controller")
def test_an_impostor_plan_in_a_tenant_namespace_changes_nothing_of_the_real_plans_instances(
    api_client: client.ApiClient, tenant: Tenant, victim: str, real_plan: str, catalog_namespace: str
) -> None:
    victim_instance(api_client, victim, real_plan)
    before = snapshot(api_client, victim)

    impostor(tenant, real_plan)
    # The controller saw it, and says so on the tenant's object (the tenant can read it); that it decides nothing
    # else is the pure plans' (test_entry_plan, test_catalog_trust: never in the catalog, never held).
    wait_for(lambda: warned(tenant.api, tenant.namespace, "impostor"), 20, "the UntrustedNamespace warning")
    assert_unchanged(before, snapshot(api_client, victim))
    (kind, _, message) = next(e for e in events_on(tenant.api, tenant.namespace, "impostor"))
    assert kind == "Warning" and catalog_namespace in message, message
    found = get(tenant.api, tenant.namespace, "sfplans", "impostor")
    assert found is not None and not found["metadata"].get("finalizers")  # never held by the controller
    real = get(api_client, catalog_namespace, "sfplans", real_plan)
    assert (ready_of(real) or ("", "", ""))[:2] == ("True", Reason.ACCEPTED.value)


@pytest.mark.usefixtures("controller")
def test_deleting_an_impostor_plan_takes_nothing_away_from_the_real_plan(
    api_client: client.ApiClient, tenant: Tenant, victim: str, real_plan: str, controller_metrics_port: int
) -> None:
    victim_instance(api_client, victim, real_plan)
    impostor(tenant, real_plan)
    wait_for(lambda: warned(tenant.api, tenant.namespace, "impostor"), 20, "the controller to have seen the impostor")
    before = snapshot(api_client, victim)
    looked = progress(controller_metrics_port)

    tenant.custom.delete_namespaced_custom_object(GROUP, VERSION, tenant.namespace, "sfplans", "impostor")
    # The impostor goes at once: the controller never held it for the real plan's instances.
    assert get(tenant.api, tenant.namespace, "sfplans", "impostor") is None
    # The controller writes nothing for the deletion (by design: the catalog keeps the real plan,
    # test_catalog_trust), but a tenant's plan deleted is queued for a reconcile: once one ran and nothing is due,
    # the deletion has been handled.
    wait_handled(controller_metrics_port, looked, "plan", 30, "the impostor's deletion handled")
    assert_unchanged(before, snapshot(api_client, victim))
    # The id is still the real plan's: a new instance of it is provisioned from the real plan's templates.
    victim_instance(api_client, victim, real_plan, "db-2")


@pytest.mark.usefixtures("controller")
def test_two_trusted_plans_with_one_id_are_both_reported_neither_serves_until_one_goes(
    api_client: client.ApiClient, catalog_namespace: str, namespace: str, victim: str, tmp_path: Path
) -> None:
    plan_id = f"twice-{namespace}"
    install(api_client, catalog_namespace, tmp_path, f"{plan_id}-a", plan_id, "the-platform")
    install(api_client, catalog_namespace, tmp_path, f"{plan_id}-b", plan_id, "the-platform")

    def both_duplicates() -> bool:
        readies = [ready_of(get(api_client, catalog_namespace, "sfplans", f"{plan_id}-{x}")) for x in "ab"]
        return all(r is not None and r[1] == Reason.DUPLICATE_ID.value for r in readies)

    wait_for(both_duplicates, 20, "both plans to be reported as duplicates")
    a = ready_of(get(api_client, catalog_namespace, "sfplans", f"{plan_id}-a"))
    assert a is not None and a[0] == "False" and f"{catalog_namespace}/{plan_id}-b" in a[2], a

    provision(api_client, victim, "refused", plan_id=plan_id)
    failed = wait_state(api_client, victim, "sfserviceinstances", "refused", "failed")
    assert f"{plan_id}-a" in failed["status"]["error"] and f"{plan_id}-b" in failed["status"]["error"], failed

    client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
        GROUP, VERSION, catalog_namespace, "sfplans", f"{plan_id}-b"
    )
    wait_for(
        lambda: (ready_of(get(api_client, catalog_namespace, "sfplans", f"{plan_id}-a")) or ("",))[0] == "True",
        20,
        "the remaining plan to be accepted again",
    )
    victim_instance(api_client, victim, plan_id)


def test_the_broker_serves_neither_of_two_trusted_plans_with_one_id(api_client: client.ApiClient) -> None:
    control = create_namespace(api_client)
    install_catalog(api_client, control)
    harness = start_broker(api_client, control)
    try:
        with harness.client() as osb:
            offered = {p["id"] for s in osb.get("/v2/catalog").json()["services"] for p in s["plans"]}
            assert ASYNC_PLAN in offered
            (original,) = [body for plural, body in catalog_objects() if body["metadata"]["name"] == ASYNC_PLAN]
            copy = {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "SFPlan",
                "metadata": {"name": "copy"},
                "spec": {**original["spec"], "description": "the same id again"},
            }
            client.CustomObjectsApi(api_client).create_namespaced_custom_object(
                GROUP, VERSION, control, "sfplans", copy
            )

            def offered_now() -> set[str]:
                return {p["id"] for s in osb.get("/v2/catalog").json()["services"] for p in s["plans"]}

            # The broker reads its catalog at most every 2 s: the plan goes from its answer on its next read.
            wait_for(lambda: ASYNC_PLAN not in offered_now(), 20, "the broker to stop offering the twice-declared plan")
            refused = osb.put(
                f"/v2/service_instances/{new_id()}", params={"accepts_incomplete": "true"}, json=provision_body()
            )
            assert refused.status_code == 400 and "more than one" in refused.json()["description"], refused.text
    finally:
        harness.background.stop()
        client.CoreV1Api(api_client).delete_namespace(control)


# -- B: context.namespace only where the platform allows ------------------------------------------------------


@pytest.fixture(scope="module")
def allowing(api_client: client.ApiClient) -> Iterator[tuple[Harness, Harness, str, str]]:
    """Two brokers of one catalog: one recording instances in the request's namespace, one
    ``--no-context-namespaces``; both allowing one listed namespace and namespaces labelled ``lets-in=yes``.
    Also yields the listed namespace and a labelled one."""
    control = create_namespace(api_client)
    install_catalog(api_client, control)
    listed = create_namespace(api_client, "listed")
    labelled = f"labelled-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(api_client).create_namespace(
        {"metadata": {"name": labelled, "labels": {"opbroker.io/test": "true", "lets-in": "yes"}}}
    )
    policy = {"allowed_namespaces": (listed,), "allowed_namespace_selector": "lets-in=yes"}
    honouring = start_broker(api_client, control, **policy)
    ignoring = start_broker(api_client, control, context_namespaces=False, **policy)
    try:
        yield honouring, ignoring, listed, labelled
    finally:
        for harness in (honouring, ignoring):
            harness.background.stop()
        stand_in = StandInController(api_client)
        for name in (control, listed, labelled):
            stand_in.release_all(name)
            client.CoreV1Api(api_client).delete_namespace(name)


def put(osb: httpx.Client, instance_id: str, namespace: str) -> httpx.Response:
    body = provision_body(context={"platform": "kubernetes", "namespace": namespace})
    return osb.put(f"/v2/service_instances/{instance_id}", params={"accepts_incomplete": "true"}, json=body)


def recorded_anywhere(api: client.ApiClient, instance_id: str) -> list[str]:
    items = client.CustomObjectsApi(api).list_cluster_custom_object(
        GROUP, VERSION, INSTANCES, field_selector=f"metadata.name={conventions.resource_name(instance_id)}"
    )["items"]
    return [item["metadata"]["namespace"] for item in items]


@pytest.mark.parametrize("honour", [True, False], ids=["context-namespaces", "no-context-namespaces"])
def test_a_request_naming_a_namespace_the_platform_does_not_allow_is_refused_and_records_nothing(
    api_client: client.ApiClient, allowing: tuple[Harness, Harness, str, str], victim: str, honour: bool
) -> None:
    honouring, ignoring, _, _ = allowing
    harness = honouring if honour else ignoring
    before = snapshot(api_client, victim)
    with harness.client() as osb:
        for target in (victim, "kube-system", "no-such-namespace-x2"):
            instance_id = new_id()
            refused = put(osb, instance_id, target)
            assert refused.status_code == 400, refused.text
            body = refused.json()
            assert (
                body["error"] == "BadRequest" and f"context.namespace {target!r} is not allowed" in body["description"]
            ), body
            assert recorded_anywhere(api_client, instance_id) == []
    assert_unchanged(before, snapshot(api_client, victim))


def test_allowed_namespaces_are_honoured_and_a_change_of_context_is_checked_too(
    api_client: client.ApiClient, allowing: tuple[Harness, Harness, str, str], victim: str
) -> None:
    honouring, ignoring, listed, labelled = allowing
    stand_in = StandInController(api_client)
    with honouring.client() as osb:
        for target in (listed, labelled, honouring.namespace):
            instance_id = new_id()
            accepted = put(osb, instance_id, target)
            assert accepted.status_code == 202, accepted.text
            assert recorded_anywhere(api_client, instance_id) == [target]
        # An update moving the context to a namespace not allowed, and a bind naming one: refused, unchanged.
        instance_id = new_id()
        assert put(osb, instance_id, listed).status_code == 202
        name = conventions.resource_name(instance_id)
        stand_in.succeed("instance", listed, name)
        recorded = stand_in.get("instance", listed, name)
        moved = osb.patch(
            f"/v2/service_instances/{instance_id}",
            params={"accepts_incomplete": "true"},
            json={"service_id": SERVICE, "context": {"platform": "kubernetes", "namespace": victim}},
        )
        assert moved.status_code == 400 and "is not allowed" in moved.json()["description"], moved.text
        after = stand_in.get("instance", listed, name)
        assert recorded is not None and after is not None
        assert after["spec"] == recorded["spec"]
        assert after["metadata"]["generation"] == recorded["metadata"]["generation"]
        bind = osb.put(
            f"/v2/service_instances/{instance_id}/service_bindings/{new_id()}",
            params={"accepts_incomplete": "true"},
            json={"service_id": SERVICE, "plan_id": ASYNC_PLAN, "context": {"namespace": victim}},
        )
        assert bind.status_code == 400 and "is not allowed" in bind.json()["description"], bind.text
    with ignoring.client() as osb:  # every instance in the broker's namespace; the context still checked
        instance_id = new_id()
        assert put(osb, instance_id, labelled).status_code == 202
        assert recorded_anywhere(api_client, instance_id) == [ignoring.namespace]


def test_a_namespace_relabelled_out_is_refused_once_the_labels_cache_expires(
    api_client: client.ApiClient, allowing: tuple[Harness, Harness, str, str]
) -> None:
    """The labels are cached (bounded, ``namespace_labels_ttl``): a short-lived broker shows the expiry."""
    honouring, _, _, labelled = allowing
    quick = start_broker(
        api_client,
        honouring.namespace,
        allowed_namespace_selector="lets-in=yes",
        namespace_labels_ttl=0.5,
    )
    other = f"relabel-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": other, "labels": {"opbroker.io/test": "true", "lets-in": "yes"}}})
    try:
        with quick.client() as osb:
            assert put(osb, new_id(), other).status_code == 202
            core.patch_namespace(other, {"metadata": {"labels": {"lets-in": None}}})
            time.sleep(0.6)
            assert put(osb, new_id(), other).status_code == 400
            assert put(osb, new_id(), labelled).status_code == 202
    finally:
        quick.background.stop()
        StandInController(api_client).release_all(other)
        try:
            core.delete_namespace(other)
        except ApiException as exc:
            if exc.status != 404:
                raise
