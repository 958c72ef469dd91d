"""Issue 24, plans: a plan acts with the rights the platform granted its account, and opbroker touches only what
it made for the requesting object. Every attack is made as a tenant (a real ServiceAccount token with only its
namespace's consumer rights) against the real API server and the real controller; the victim is unchanged.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from opbroker.api.conventions import ANNOTATION_OWNER_UID
from tests.controller.test_lifecycle import GROUP, PLAN_ID, SERVICE_ID, VERSION, get, wait_state
from tests.controller_support import apply_yaml, wait_for
from tests.tenancy_support import Tenant, assert_unchanged, ensure_service_account, grant, snapshot

pytestmark = pytest.mark.usefixtures("controller")

DB = ("demo.opbroker.io", "v1alpha1", "databases")


@pytest.fixture
def victim(api_client: client.ApiClient) -> Iterator[str]:
    """Another team's namespace, holding a Secret and a ConfigMap of its own."""
    name = f"victim-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": name}})
    core.create_namespaced_secret(name, {"metadata": {"name": "db-admin"}, "stringData": {"password": "s3cr3t-victim"}})
    core.create_namespaced_config_map(name, {"metadata": {"name": "precious"}, "data": {"keep": "me"}})
    yield name
    core.delete_namespace(name)


def instance_body(name: str, *, plan_id: str = PLAN_ID, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SFServiceInstance",
        "metadata": {"name": name},
        "spec": {"instanceId": name, "serviceId": SERVICE_ID, "planId": plan_id, "parameters": {}, **spec},
    }


def create_instance(tenant: Tenant, body: dict[str, Any]) -> None:
    """As the tenant: record an instance in its own namespace (what the broker does, done directly)."""
    tenant.custom.create_namespaced_custom_object(GROUP, VERSION, tenant.namespace, "sfserviceinstances", body)


def install_plan(
    api: client.ApiClient, catalog_namespace: str, tmp_path: Path, templates: list[dict[str, Any]], **spec: Any
) -> str:
    """A plan of the demo service, installed by the platform team (admin) in the control plane's namespace."""
    plan_id = f"tenancy-{uuid.uuid4().hex[:10]}"
    plan = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SFPlan",
        "metadata": {"name": plan_id},
        "spec": {
            "name": plan_id,
            "id": plan_id,
            "serviceId": SERVICE_ID,
            "description": "a plan made for one tenancy test",
            "templates": templates,
            **spec,
        },
    }
    path = tmp_path / f"{plan_id}.yaml"
    path.write_text(yaml.safe_dump(plan))
    apply_yaml(api, path, catalog_namespace)
    return plan_id


def jinja(action: str, content: str, **extra: Any) -> dict[str, Any]:
    return {"action": action, "type": "jinja2", "content": content, **extra}


def test_an_instance_cannot_direct_its_objects_into_another_namespace(
    api_client: client.ApiClient, tenant: Tenant, victim: str
) -> None:
    """Attack 3 (context): a tenant records an instance in its own namespace whose request context names the
    victim's namespace; today the plan's Database lands there. Now the instance fails, nothing is applied."""
    before = snapshot(api_client, victim, DB)
    create_instance(tenant, instance_body("sneaky", context={"platform": "kubernetes", "namespace": victim}))
    failed = wait_state(tenant.api, tenant.namespace, "sfserviceinstances", "sneaky", "failed")
    assert failed["status"]["conditions"][0]["reason"] == "ContextNamespaceRefused"
    assert victim in failed["status"]["error"]
    assert_unchanged(before, snapshot(api_client, victim, DB))


def test_a_forged_resource_record_deletes_nothing_of_the_victim(
    api_client: client.ApiClient, tenant: Tenant, victim: str
) -> None:
    """Attack 3 (release): a tenant lists the victim's Secret and ConfigMap in its instance's ``status.resources``
    and deprovisions. The API server refuses the tenant's status write (issue 42: status is opbroker's); and were
    a record forged anyway (here by the admin, standing in for a bug), release deletes only what carries the
    instance's own stamp."""
    create_instance(tenant, instance_body("forger"))
    ready = wait_state(tenant.api, tenant.namespace, "sfserviceinstances", "forger", "succeeded")
    database = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
        *DB[:2], tenant.namespace, DB[2], "forger"
    )
    assert database["metadata"]["annotations"][ANNOTATION_OWNER_UID] == ready["metadata"]["uid"]
    before = snapshot(api_client, victim, DB)
    forged = [
        *ready["status"]["resources"],
        {"apiVersion": "v1", "kind": "Secret", "name": "db-admin", "namespace": victim},
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "precious", "namespace": victim},
    ]
    with pytest.raises(ApiException) as refused:
        tenant.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, tenant.namespace, "sfserviceinstances", "forger", {"status": {"resources": forged}}
        )
    assert refused.value.status == 403 and "written by opbroker alone" in refused.value.body
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object_status(
        GROUP, VERSION, tenant.namespace, "sfserviceinstances", "forger", {"status": {"resources": forged}}
    )
    tenant.custom.delete_namespaced_custom_object(GROUP, VERSION, tenant.namespace, "sfserviceinstances", "forger")
    wait_for(lambda: get(tenant.api, tenant.namespace, "sfserviceinstances", "forger") is None, 40, "the deprovision")
    assert_unchanged(before, snapshot(api_client, victim, DB))


def test_an_existing_object_is_not_taken_over_unless_the_template_adopts_it(
    api_client: client.ApiClient, tenant: Tenant, catalog_namespace: str, tmp_path: Path
) -> None:
    """Ownership before takeover: a ConfigMap that exists (made by someone else, here the tenant's other app)
    is neither overwritten by a plan rendering its name nor deleted on deprovision; a template that declares
    ``adopt: true`` takes it over."""
    content = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app-settings}\ndata: {owner: opbroker}\n"
    plan = install_plan(api_client, catalog_namespace, tmp_path, [jinja("provision", content)])
    tenant.core.create_namespaced_config_map(
        tenant.namespace, {"metadata": {"name": "app-settings"}, "data": {"owner": "app"}}
    )
    before = snapshot(api_client, tenant.namespace)["configmaps/app-settings"]
    create_instance(tenant, instance_body("taker", plan_id=plan))
    failed = wait_state(tenant.api, tenant.namespace, "sfserviceinstances", "taker", "failed")
    assert failed["status"]["conditions"][0]["reason"] == "ObjectNotOwned"
    assert failed["status"]["observedGeneration"] == failed["metadata"]["generation"]  # answered, not retried
    assert "ConfigMap" in failed["status"]["error"] and "app-settings" in failed["status"]["error"]
    tenant.custom.delete_namespaced_custom_object(GROUP, VERSION, tenant.namespace, "sfserviceinstances", "taker")
    wait_for(lambda: get(tenant.api, tenant.namespace, "sfserviceinstances", "taker") is None, 40, "the deprovision")
    assert snapshot(api_client, tenant.namespace)["configmaps/app-settings"] == before

    adopting = install_plan(api_client, catalog_namespace, tmp_path, [jinja("provision", content, adopt=True)])
    create_instance(tenant, instance_body("adopter", plan_id=adopting))
    ready = wait_state(tenant.api, tenant.namespace, "sfserviceinstances", "adopter", "succeeded")
    adopted = tenant.core.read_namespaced_config_map("app-settings", tenant.namespace)
    assert adopted.data == {"owner": "opbroker"}
    assert adopted.metadata.annotations[ANNOTATION_OWNER_UID] == ready["metadata"]["uid"]


def confined_account(api: client.ApiClient, catalog_namespace: str, namespace: str) -> str:
    """A plan account the platform granted ConfigMaps and Secrets in ``namespace`` only."""
    name = f"confined-{uuid.uuid4().hex[:6]}"
    ensure_service_account(api, catalog_namespace, name)
    rules = [
        {
            "apiGroups": [""],
            "resources": ["configmaps", "secrets"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        }
    ]
    grant(api, namespace, name, rules, {"kind": "ServiceAccount", "name": name, "namespace": catalog_namespace})
    return name


def test_a_plan_acts_only_with_its_accounts_rights(
    api_client: client.ApiClient, tenant: Tenant, catalog_namespace: str, tmp_path: Path, victim: str
) -> None:
    """Attack 3 (a plan can touch anything): a plan naming an account the platform granted one namespace
    (the tenant's) renders into whatever namespace a parameter names. Even a namespace the plan declares (so the
    render lets it through) is refused there with the API server's own answer, and nothing of the victim
    changes; in the tenant's namespace it works."""
    account = confined_account(api_client, catalog_namespace, tenant.namespace)
    content = (
        "apiVersion: v1\nkind: ConfigMap\n"
        'metadata: {name: "{{ instance.metadata.name }}", namespace: "{{ parameter(\'/ns\') }}"}\n'
        "data: {made: by-plan}\n"
    )
    plan = install_plan(
        api_client,
        catalog_namespace,
        tmp_path,
        [jinja("provision", content)],
        serviceAccountName=account,
        namespaces=[victim],
    )
    before = snapshot(api_client, victim)
    create_instance(tenant, instance_body("reach", plan_id=plan, parameters={"ns": victim}))
    failed = wait_state(tenant.api, tenant.namespace, "sfserviceinstances", "reach", "failed", timeout=60)
    assert "403" in failed["status"]["error"] and account in failed["status"]["error"]
    assert_unchanged(before, snapshot(api_client, victim))

    create_instance(tenant, instance_body("home", plan_id=plan, parameters={"ns": tenant.namespace}))
    wait_state(tenant.api, tenant.namespace, "sfserviceinstances", "home", "succeeded")
    assert tenant.core.read_namespaced_config_map("home", tenant.namespace).data == {"made": "by-plan"}


def test_a_plan_writes_only_into_the_instance_namespace_and_the_namespaces_it_declares(
    api_client: client.ApiClient, tenant: Tenant, catalog_namespace: str, tmp_path: Path, victim: str
) -> None:
    """Confinement in one place (issue 42): whatever account a plan has, an object its template puts into a
    namespace neither the instance's nor declared by the plan (``spec.namespaces``) is refused at render, before
    any request; the instance fails with the reason, nothing of the victim changes."""
    content = (
        "apiVersion: v1\nkind: ConfigMap\n"
        'metadata: {name: "{{ instance.metadata.name }}", namespace: "{{ parameter(\'/ns\') }}"}\n'
        "data: {made: by-plan}\n"
    )
    plan = install_plan(api_client, catalog_namespace, tmp_path, [jinja("provision", content)])
    before = snapshot(api_client, victim)
    create_instance(tenant, instance_body("escape", plan_id=plan, parameters={"ns": victim}))
    failed = wait_state(tenant.api, tenant.namespace, "sfserviceinstances", "escape", "failed", timeout=60)
    assert f"would go into namespace '{victim}'" in failed["status"]["error"], failed["status"]
    assert_unchanged(before, snapshot(api_client, victim))


def test_sources_read_only_what_the_plans_account_may_read(
    api_client: client.ApiClient, tenant: Tenant, catalog_namespace: str, tmp_path: Path, victim: str
) -> None:
    """Attack 3 (``sources`` can read any object): a plan whose sources name a Secret by parameters, and whose
    status template reports what it read. The controller's watch cache holds every Secret; the plan's account
    may read only the tenant's namespace, so the victim's password never reaches the tenant."""
    account = confined_account(api_client, catalog_namespace, tenant.namespace)
    sources = (
        "secret: {apiVersion: v1, kind: Secret, name: \"{{ parameter('/name') }}\", "
        "namespace: \"{{ parameter('/ns') }}\"}\n"
    )
    status = (
        "provision:\n"
        "  state: succeeded\n"
        "  description: \"{{ (secret.data.password | b64dec) if secret else 'nothing' }}\"\n"
    )
    templates = [jinja("sources", sources), jinja("status", status), jinja("provision", "")]
    plan = install_plan(api_client, catalog_namespace, tmp_path, templates, serviceAccountName=account)
    create_instance(tenant, instance_body("peek", plan_id=plan, parameters={"name": "db-admin", "ns": victim}))
    failed = wait_state(tenant.api, tenant.namespace, "sfserviceinstances", "peek", "failed", timeout=60)
    text = yaml.safe_dump(failed)
    assert "s3cr3t-victim" not in text
    assert "403" in failed["status"]["error"]
    events = tenant.core.list_namespaced_event(tenant.namespace).items
    assert all("s3cr3t-victim" not in (event.message or "") for event in events)

    tenant.core.create_namespaced_secret(
        tenant.namespace, {"metadata": {"name": "mine"}, "stringData": {"password": "own"}}
    )
    create_instance(tenant, instance_body("own", plan_id=plan, parameters={"name": "mine", "ns": tenant.namespace}))
    ready = wait_state(tenant.api, tenant.namespace, "sfserviceinstances", "own", "succeeded")
    assert ready["status"]["description"] == "own"


def test_the_tenant_cannot_grant_itself_the_plan_account(api_client: client.ApiClient, tenant: Tenant) -> None:
    """The model holds only if a tenant cannot act as the accounts opbroker impersonates."""
    headers = {"Impersonate-User": "system:serviceaccount:opbroker:opbroker-plans"}
    with pytest.raises(ApiException) as refused:
        tenant.core.list_namespaced_config_map(tenant.namespace, _headers=headers)
    assert refused.value.status == 403
