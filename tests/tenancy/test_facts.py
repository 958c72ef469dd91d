"""Issue 42: the facts opbroker acts on are opbroker's, kept by the API server (``opbroker.api.admission``).

A tenant is admin of its own namespace: every verb on every opbroker kind there, status included. Each test acts
with a real ServiceAccount token holding exactly that (``tests.tenancy_support.make_tenant``) and shows the API
server refuses the forgery, or that a forged object answers for nothing of the victim's:

* status — the ``/status`` of every opbroker kind (an instance refused for its ``context.namespace`` given
  ``state: succeeded``; a Service Catalog Instance told it provisioned at a broker);
* opbroker's labels and annotations (``opbroker.io/...``): the broker's record stamp above all;
* placement — ``spec.clusterId``;
* admin requests — a ConfigMap labelled as one in the control-plane namespace, written by an account with
  ConfigMap rights there (what the default plan account had);
* an OSB id belongs to the object the broker recorded: a tenant's SFServiceInstance named after a victim's id
  captures neither the platform's bind nor its deprovision; a duplicate is reported, not chosen.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from opbroker.api import admission, conventions
from opbroker.api.adminrequests import LABEL as ADMIN_REQUEST_LABEL
from opbroker.devcluster.admission import install_admission
from tests.broker_support import (
    ASYNC_PLAN,
    GROUP,
    INSTANCES,
    SERVICE,
    VERSION,
    Harness,
    StandInController,
    create_namespace,
    install_catalog,
    new_id,
    provision_body,
    start_broker,
    wait_for,
)
from tests.tenancy_support import (
    Tenant,
    await_enforced,
    ensure_service_account,
    grant,
    make_tenant,
    service_account_client,
)

SC_GROUP, SC_VERSION = "servicecatalog.k8s.io", "v1alpha1"


def refused(call: Any, *args: Any, **kwargs: Any) -> ApiException:
    """Run an API call that the admission policy must refuse; its refusal (403, the policy's message)."""
    with pytest.raises(ApiException) as caught:
        call(*args, **kwargs)
    assert caught.value.status == 403, caught.value.body
    assert "opbroker" in (caught.value.body or ""), caught.value.body
    return caught.value


def instance_body(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SFServiceInstance",
        "metadata": {"name": name},
        "spec": {"serviceId": SERVICE, "planId": ASYNC_PLAN, "organizationGuid": "o", "spaceGuid": "s", **spec},
    }


# -- status ------------------------------------------------------------------------------------------------


def test_a_tenant_cannot_write_the_status_of_any_opbroker_kind(
    api_client: client.ApiClient, tenant: Tenant, namespace: str
) -> None:
    """The tenant owns the object, spec and all; its status (what opbroker did) stays opbroker's record."""
    name = f"i-{uuid.uuid4().hex[:8]}"
    tenant.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, INSTANCES, instance_body(name))
    admin = client.CustomObjectsApi(api_client)
    admin.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, INSTANCES, name, {"status": {"state": "failed", "error": "refused"}}
    )
    refused(
        tenant.custom.patch_namespaced_custom_object_status,
        GROUP,
        VERSION,
        namespace,
        INSTANCES,
        name,
        {"status": {"state": "succeeded", "resources": [{"apiVersion": "v1", "kind": "Secret", "name": "x"}]}},
    )
    # A replace carries the version read: when the session's controller has written the object since, the API
    # server answers 409 before admission is asked (seen in CI) — read it again until the policy answers.
    for _ in range(20):
        current = admin.get_namespaced_custom_object(GROUP, VERSION, namespace, INSTANCES, name)
        with pytest.raises(ApiException) as caught:
            tenant.custom.replace_namespaced_custom_object_status(GROUP, VERSION, namespace, INSTANCES, name, current)
        if caught.value.status != 409:
            break
    assert caught.value.status == 403 and "opbroker" in (caught.value.body or ""), caught.value.body
    after = admin.get_namespaced_custom_object(GROUP, VERSION, namespace, INSTANCES, name)
    # (A controller running in the same session may have written its own verdict meanwhile: never the tenant's.)
    assert after["status"]["state"] == "failed" and "resources" not in after["status"], after["status"]

    # The Service Catalog Instance: "provisioned at the broker" and "deprovision owed" are facts too.
    sc = {
        "apiVersion": f"{SC_GROUP}/{SC_VERSION}",
        "kind": "Instance",
        "metadata": {"name": name},
        "spec": {"clusterServiceClassExternalName": "c", "clusterServicePlanExternalName": "p"},
    }
    try:
        tenant.custom.create_namespaced_custom_object(SC_GROUP, SC_VERSION, namespace, "instances", sc)
    except ApiException as exc:  # the schema names the class differently: the status refusal is what counts
        assert exc.status == 422, exc.body
        sc["spec"] = {"serviceClassName": "c", "planName": "p"}
        tenant.custom.create_namespaced_custom_object(SC_GROUP, SC_VERSION, namespace, "instances", sc)
    refused(
        tenant.custom.patch_namespaced_custom_object_status,
        SC_GROUP,
        SC_VERSION,
        namespace,
        "instances",
        name,
        {"status": {"provisionStatus": "Provisioned", "deprovisionStatus": "Required", "externalID": "victim"}},
    )


def test_the_policy_covers_the_status_of_every_opbroker_kind() -> None:
    from opbroker.api.registry import RESOURCE_KINDS

    policy = admission.facts_policy("p", admission.control_plane_writers("opbroker"))
    resources = set(policy["spec"]["matchConstraints"]["resourceRules"][0]["resources"])
    groups = set(policy["spec"]["matchConstraints"]["resourceRules"][0]["apiGroups"])
    for kind in RESOURCE_KINDS:
        assert {kind.PLURAL, f"{kind.PLURAL}/status"} <= resources and kind.GROUP in groups, kind.KIND


# -- opbroker's labels and annotations, placement -------------------------------------------------------------


def test_a_tenant_cannot_forge_opbroker_labels_annotations_or_placement(
    api_client: client.ApiClient, tenant: Tenant, namespace: str
) -> None:
    create = tenant.custom.create_namespaced_custom_object
    stamped = instance_body(f"s-{uuid.uuid4().hex[:8]}")
    stamped["metadata"]["labels"] = {conventions.LABEL_RECORDED_BY: conventions.RECORDED_BY_BROKER}
    refused(create, GROUP, VERSION, namespace, INSTANCES, stamped)
    annotated = instance_body(f"a-{uuid.uuid4().hex[:8]}")
    annotated["metadata"]["annotations"] = {"opbroker.io/cluster": "sister-1"}
    refused(create, GROUP, VERSION, namespace, INSTANCES, annotated)
    refused(create, GROUP, VERSION, namespace, INSTANCES, instance_body(f"c-{uuid.uuid4().hex[:8]}", clusterId="2"))

    # Its own labels and any other spec field are the tenant's to write.
    name = f"o-{uuid.uuid4().hex[:8]}"
    body = instance_body(name)
    body["metadata"]["labels"] = {"team": "a"}
    create(GROUP, VERSION, namespace, INSTANCES, body)
    patch = tenant.custom.patch_namespaced_custom_object
    patch(GROUP, VERSION, namespace, INSTANCES, name, {"metadata": {"labels": {"team": "b"}}})
    for forged in (
        {"metadata": {"labels": {conventions.LABEL_RECORDED_BY: conventions.RECORDED_BY_BROKER}}},
        {"metadata": {"annotations": {conventions.ANNOTATION_ORIGINATING_IDENTITY: "{}"}}},
        {"spec": {"clusterId": "2"}},
    ):
        refused(patch, GROUP, VERSION, namespace, INSTANCES, name, forged)

    # What opbroker wrote stays: neither removed nor changed by the tenant, while the rest stays writable.
    admin = client.CustomObjectsApi(api_client)
    admin.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        INSTANCES,
        name,
        {"metadata": {"labels": {conventions.LABEL_PLAN: "p1"}}, "spec": {"clusterId": "1"}},
    )
    refused(patch, GROUP, VERSION, namespace, INSTANCES, name, {"metadata": {"labels": {conventions.LABEL_PLAN: None}}})
    refused(patch, GROUP, VERSION, namespace, INSTANCES, name, {"metadata": {"labels": {conventions.LABEL_PLAN: "p2"}}})
    refused(patch, GROUP, VERSION, namespace, INSTANCES, name, {"spec": {"clusterId": None}})
    patch(
        GROUP, VERSION, namespace, INSTANCES, name, {"metadata": {"labels": {"team": "c"}}, "spec": {"parameters": {}}}
    )
    after = admin.get_namespaced_custom_object(GROUP, VERSION, namespace, INSTANCES, name)
    assert after["metadata"]["labels"] == {"team": "c", conventions.LABEL_PLAN: "p1"}
    assert after["spec"]["clusterId"] == "1"


# -- admin requests ---------------------------------------------------------------------------------------------


@pytest.fixture
def admin_policy(api_client: client.ApiClient, namespace: str) -> Iterator[str]:
    """The admission policies of a control plane whose namespace is this test's (removed afterwards)."""
    install_admission(api_client, namespace)
    yield namespace
    registration = client.AdmissionregistrationV1Api(api_client)
    for name in admission.policy_names(namespace):
        registration.delete_validating_admission_policy_binding(name)
        registration.delete_validating_admission_policy(name)


def test_only_the_broker_writes_admin_requests(api_client: client.ApiClient, admin_policy: str) -> None:
    """An account with every right on ConfigMaps in the control-plane namespace (the default plan account had
    them) cannot create, label or change an admin request there: the controller executes them."""
    namespace = admin_policy
    ensure_service_account(api_client, namespace, "writer")
    grant(
        api_client,
        namespace,
        "writer",
        [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}],
        {"kind": "ServiceAccount", "name": "writer", "namespace": namespace},
    )
    writer = client.CoreV1Api(service_account_client(api_client, namespace, "writer"))
    forged = {"metadata": {"name": "rollout-x", "labels": {ADMIN_REQUEST_LABEL: "rollout"}}, "data": {"a": "b"}}
    await_enforced(lambda: writer.create_namespaced_config_map(namespace, forged, dry_run="All"))
    refused(writer.create_namespaced_config_map, namespace, forged)
    writer.create_namespaced_config_map(namespace, {"metadata": {"name": "plain"}, "data": {"a": "b"}})
    refused(
        writer.patch_namespaced_config_map, "plain", namespace, {"metadata": {"labels": {ADMIN_REQUEST_LABEL: "x"}}}
    )
    client.CoreV1Api(api_client).create_namespaced_config_map(namespace, forged)  # as the broker (an admin here)
    refused(writer.patch_namespaced_config_map, "rollout-x", namespace, {"data": {"request.json": "{}"}})
    refused(writer.delete_namespaced_config_map, "rollout-x", namespace)
    kept = client.CoreV1Api(api_client).read_namespaced_config_map("rollout-x", namespace)
    assert kept.data == {"a": "b"}


# -- an OSB id belongs to the object the broker recorded --------------------------------------------------------


@pytest.fixture(scope="module")
def broker_of_two(api_client: client.ApiClient) -> Iterator[tuple[Harness, str, Tenant]]:
    """A broker honouring ``context.namespace`` for a victim's namespace and an attacker's; the attacker."""
    control = create_namespace(api_client)
    install_catalog(api_client, control)
    victim = create_namespace(api_client, "victim")
    attacker = create_namespace(api_client, "attacker")
    harness = start_broker(api_client, control, allowed_namespaces=(victim, attacker))
    tenant = make_tenant(api_client, attacker)
    try:
        yield harness, victim, tenant
    finally:
        harness.background.stop()
        stand_in = StandInController(api_client)
        for name in (control, victim, attacker):
            stand_in.release_all(name)
            client.CoreV1Api(api_client).delete_namespace(name)
        tenant.api.close()


def provision_into(harness: Harness, instance_id: str, namespace: str) -> Any:
    body = provision_body(context={"platform": "kubernetes", "namespace": namespace})
    with harness.client() as osb:
        return osb.put(f"/v2/service_instances/{instance_id}", params={"accepts_incomplete": "true"}, json=body)


def test_a_same_named_object_in_another_namespace_never_answers_for_a_victims_id(
    api_client: client.ApiClient, broker_of_two: tuple[Harness, str, Tenant]
) -> None:
    harness, victim, tenant = broker_of_two
    stand_in = StandInController(api_client)
    victim_id = new_id()
    name = conventions.resource_name(victim_id)
    assert provision_into(harness, victim_id, victim).status_code == 202
    stand_in.adopt("instance", victim, name)
    stand_in.succeed("instance", victim, name)

    # The attacker's impostor, created after (the index's last writer) and before the platform's requests.
    tenant.custom.create_namespaced_custom_object(
        GROUP, VERSION, tenant.namespace, INSTANCES, instance_body(name, planId=ASYNC_PLAN)
    )
    impostor = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
        GROUP, VERSION, tenant.namespace, INSTANCES, name
    )
    binding_id = new_id()
    with harness.client() as osb:
        bound = osb.put(
            f"/v2/service_instances/{victim_id}/service_bindings/{binding_id}",
            params={"accepts_incomplete": "true"},
            json={"service_id": SERVICE, "plan_id": ASYNC_PLAN},
        )
        assert bound.status_code == 202, bound.text
        binding = conventions.resource_name(binding_id)
        assert stand_in.get("binding", victim, binding) is not None
        assert stand_in.get("binding", tenant.namespace, binding) is None
        # The victim's instance is the one the platform deprovisions; the impostor is left as it was.
        unbound = osb.delete(
            f"/v2/service_instances/{victim_id}/service_bindings/{binding_id}",
            params={"accepts_incomplete": "true", "service_id": SERVICE, "plan_id": ASYNC_PLAN},
        )
        assert unbound.status_code == 202, unbound.text
        stand_in.release("binding", victim, binding)
        wait_for(lambda: stand_in.get("binding", victim, binding) is None, what="the binding gone")
        gone = osb.delete(
            f"/v2/service_instances/{victim_id}",
            params={"accepts_incomplete": "true", "service_id": SERVICE, "plan_id": ASYNC_PLAN},
        )
        assert gone.status_code == 202, gone.text
    marked = stand_in.get("instance", victim, name)
    assert marked is not None and marked["status"]["state"] == "delete"
    # The impostor answered for nothing: not marked, not deleted, no binding beside it (a controller running in
    # the same session may have refused it meanwhile; that is its own verdict, not the broker's doing).
    after = stand_in.get("instance", tenant.namespace, name)
    assert after is not None and after["spec"] == impostor["spec"] and "deletionTimestamp" not in after["metadata"]
    assert (after.get("status") or {}).get("state") != "delete"
    assert (
        client.CustomObjectsApi(api_client).list_namespaced_custom_object(
            GROUP, VERSION, tenant.namespace, "sfservicebindings"
        )["items"]
        == []
    )


def test_an_id_held_by_an_unrecorded_object_or_recorded_twice_is_refused_not_chosen(
    api_client: client.ApiClient, broker_of_two: tuple[Harness, str, Tenant]
) -> None:
    harness, victim, tenant = broker_of_two
    squatted = new_id()
    name = conventions.resource_name(squatted)
    tenant.custom.create_namespaced_custom_object(GROUP, VERSION, tenant.namespace, INSTANCES, instance_body(name))
    answer = provision_into(harness, squatted, tenant.namespace)
    assert answer.status_code == 409 and "not recorded by the broker" in answer.json()["description"], answer.text

    # One id recorded in two namespaces (an administrator's copy, say): reported, neither chosen.
    twice = new_id()
    assert provision_into(harness, twice, victim).status_code == 202
    copy: dict[str, Any] = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
        GROUP, VERSION, victim, INSTANCES, conventions.resource_name(twice)
    )
    copy["metadata"] = {"name": copy["metadata"]["name"], "labels": copy["metadata"]["labels"]}
    copy.pop("status", None)
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        GROUP, VERSION, tenant.namespace, INSTANCES, copy
    )

    def reported() -> Any:
        with harness.client() as osb:
            asked = osb.get(f"/v2/service_instances/{twice}/last_operation")
        return asked if asked.status_code != 200 else None  # 200 until the broker's index has seen the copy

    asked = wait_for(reported, what="the duplicate reported")
    assert asked.status_code == 409 and "more than one namespace" in asked.json()["description"], asked.text
