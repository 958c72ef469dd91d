"""Tenancy of the Service Catalog kinds (issue 24), attacked as a tenant: every object of an attacker is created
with its own ServiceAccount token, holding only its namespace's consumer rights (``tests/tenancy_support.py``),
against the real controller process and the independent second broker. The victim (``payments``, the test's
namespace) is snapshotted and must come out unchanged.

1. A Binding in another namespace gets no credentials to an Instance that does not share itself with it
   (``spec.shareWith``), and holds up none of its deletions.
2. ``parametersFrom`` reads Secrets of the object's own namespace only.
3. An Instance or Binding never provisions, updates, binds, unbinds or deprovisions an OSB id that is someone
   else's — one an earlier object holds, or one the broker already has (409) — whatever its status claims.
4. A Broker reads its auth Secret only from the control-plane namespace.
5. A Binding never overwrites or deletes a Secret it did not create.
6. An ``externalID`` that would take the OSB client's URL out of its segment (``../<victim id>/...``) is refused
   by the API server on create.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from opbroker import osbclient
from opbroker.api.conventions import ANNOTATION_OWNER_UID, DEFAULT_NAMESPACE
from tests.brokers.fixture import DB_SERVICE, DB_SYNC_PLAN, SecondBroker
from tests.cluster_fixtures import onboard
from tests.controller_support import wait_for
from tests.servicecatalog_support import (
    GROUP,
    VERSION,
    condition,
    create,
    custom,
    delete,
    get,
    ready,
    refused_by_webhook,
    webhook_serving,
)
from tests.tenancy_support import (
    Tenant,
    assert_unchanged,
    make_tenant,
    refused,
    service_account_client,
    snapshot,
)

pytestmark = pytest.mark.usefixtures("controller")

BOUND = ("True", "InjectedBindResult")
PROVISIONED = ("True", "Provisioned")


@pytest.fixture
def attacker(api_client: client.ApiClient, namespace: str) -> Iterator[Tenant]:
    """A second tenant, of its own namespace next to the victim's (the test's namespace)."""
    name = f"{namespace}-attacker"
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": name, "labels": {"opbroker.io/test": "true"}}})
    onboard(api_client, name)
    acting = make_tenant(api_client, name)
    yield acting
    acting.api.close()
    core.delete_namespace(name)


def reason_of(tenant: Tenant, plural: str, name: str) -> tuple[str, str] | None:
    """The Ready condition of the tenant's own object, read with the tenant's own token."""
    return ready(get(tenant.api, plural, name, tenant.namespace))


def binding_requests(broker: SecondBroker, method: str | None = None) -> list[dict[str, Any]]:
    return [
        r for r in broker.requests() if "/service_bindings/" in r["path"] and (method is None or r["method"] == method)
    ]


def instance_requests(broker: SecondBroker, instance_id: str, method: str | None = None) -> list[dict[str, Any]]:
    path = f"/v2/service_instances/{instance_id}"
    return [r for r in broker.requests() if r["path"] == path and (method is None or r["method"] == method)]


def provisioned_instance(tenant: Tenant, suffix: str, name: str, **spec: Any) -> dict[str, Any]:
    """An Instance of the second broker's synchronous plan, created by ``tenant`` and waited for."""
    create(
        tenant.api,
        tenant.namespace,
        "instances",
        "Instance",
        name,
        {"serviceClassName": f"second-db-{suffix}", "planName": "sync-small", **spec},
    )

    def done() -> dict[str, Any] | None:
        found = get(tenant.api, "instances", name, tenant.namespace)
        return found if ready(found) == PROVISIONED else None

    provisioned: dict[str, Any] = wait_for(done, 60, f"instance {name} provisioned")
    return provisioned


def events_of(tenant: Tenant, name: str, reason: str) -> list[client.CoreV1Event]:
    return [
        e
        for e in tenant.core.list_namespaced_event(tenant.namespace).items
        if e.involved_object.name == name and e.reason == reason
    ]


# -- 1. credentials across namespaces ------------------------------------------------------------------------------


def test_a_binding_gets_no_credentials_to_an_instance_not_shared_with_its_namespace(
    api_client: client.ApiClient,
    registered: tuple[str, str],
    second_broker: SecondBroker,
    tenant: Tenant,
    attacker: Tenant,
) -> None:
    """A Binding in ``attacker`` naming ``payments/orders-db``: nothing is bound or written, it fails with
    ReferenceNotShared (and an event), and neither the admission webhook nor the finalizer counts it when the
    victim deletes its Instance."""
    _, suffix = registered
    victim = tenant
    provisioned_instance(victim, suffix, "orders-db")
    create(victim.api, victim.namespace, "bindings", "Binding", "orders-app", {"instanceRef": {"name": "orders-db"}})
    wait_for(lambda: reason_of(victim, "bindings", "orders-app") == BOUND, 60, "the victim's own binding")
    before = snapshot(api_client, victim.namespace)
    second_broker.clear_requests()

    ref = {"namespace": victim.namespace, "name": "orders-db"}
    create(attacker.api, attacker.namespace, "bindings", "Binding", "steal", {"instanceRef": ref})
    wait_for(
        lambda: reason_of(attacker, "bindings", "steal") == ("False", "ReferenceNotShared"), 30, "the binding refused"
    )
    # Events are posted after the status write: wait for it, do not expect it at once.
    wait_for(lambda: events_of(attacker, "steal", "ReferenceNotShared"), 30, "an event saying why")
    # No bind is sent while the Instance is not shared: the plan's decision (no Call in the actions of an
    # unresolved Binding: test_plans.py::test_a_binding_that_may_not_use_its_instance_sends_nothing).
    assert binding_requests(second_broker) == []
    refused(lambda: attacker.core.read_namespaced_secret("steal", attacker.namespace), 404)
    assert_unchanged(before, snapshot(api_client, victim.namespace))

    # The victim deletes: the webhook names its own binding only, and with that gone the Instance goes.
    with webhook_serving(api_client, DEFAULT_NAMESPACE):
        message = wait_for(
            lambda: refused_by_webhook(victim.api, victim.namespace, "orders-db"),
            20,
            "the webhook to refuse while the victim's own binding exists",
        )
        assert f"{victim.namespace}/orders-app" in message and "1 binding(s)" in message
        assert attacker.namespace not in message

        delete(victim.api, victim.namespace, "bindings", "orders-app")
        wait_for(lambda: get(victim.api, "bindings", "orders-app", victim.namespace) is None, 60, "unbound")
        wait_for(lambda: not refused_by_webhook(victim.api, victim.namespace, "orders-db"), 10, "the webhook to allow")
        delete(victim.api, victim.namespace, "instances", "orders-db")  # the webhook lets it through...
        wait_for(lambda: get(victim.api, "instances", "orders-db", victim.namespace) is None, 60, "deprovisioned")
    assert second_broker.state()["instances"] == {}  # ...and so does the finalizer: the broker deprovisioned it

    delete(attacker.api, attacker.namespace, "bindings", "steal")
    wait_for(lambda: get(attacker.api, "bindings", "steal", attacker.namespace) is None, 30, "the refused binding gone")
    assert [r["path"] for r in binding_requests(second_broker, "PUT")] == []


def test_consent_lets_another_namespace_bind_and_withdrawing_it_unbinds(
    api_client: client.ApiClient,
    registered: tuple[str, str],
    second_broker: SecondBroker,
    tenant: Tenant,
    attacker: Tenant,
) -> None:
    """``shareWith`` is the owner's consent: a Binding from a listed namespace is bound; taking the namespace out
    unbinds it at the broker and removes its Secret (ReferenceNotShared); ``*`` binds it again. Sharing sends
    the broker no update."""
    _, suffix = registered
    owner, consumer = tenant, attacker
    instance = provisioned_instance(owner, suffix, "shared-db", shareWith=[consumer.namespace])
    ref = {"namespace": owner.namespace, "name": "shared-db"}
    create(consumer.api, consumer.namespace, "bindings", "Binding", "app", {"instanceRef": ref})
    wait_for(lambda: reason_of(consumer, "bindings", "app") == BOUND, 60, "bound with consent")
    assert consumer.core.read_namespaced_secret("app", consumer.namespace).data

    def share(share_with: list[str]) -> None:
        custom(owner.api).patch_namespaced_custom_object(
            GROUP, VERSION, owner.namespace, "instances", "shared-db", {"spec": {"shareWith": share_with}}
        )

    share([])
    wait_for(lambda: reason_of(consumer, "bindings", "app") == ("False", "ReferenceNotShared"), 60, "consent withdrawn")
    assert second_broker.state()["bindings"] == {}  # unbound at the broker
    assert [r["method"] for r in binding_requests(second_broker)] == ["PUT", "DELETE"]
    refused(lambda: consumer.core.read_namespaced_secret("app", consumer.namespace), 404)

    share(["*"])
    wait_for(lambda: reason_of(consumer, "bindings", "app") == BOUND, 60, "bound again with consent for all")
    external_id = instance["status"]["externalID"]
    assert instance_requests(second_broker, external_id, "PATCH") == []  # sharing is not an OSB update
    settled = get(owner.api, "instances", "shared-db", owner.namespace)
    assert settled is not None and settled["status"]["observedGeneration"] == settled["metadata"]["generation"]

    delete(consumer.api, consumer.namespace, "bindings", "app")
    wait_for(lambda: get(consumer.api, "bindings", "app", consumer.namespace) is None, 60, "unbound")
    delete(owner.api, owner.namespace, "instances", "shared-db")
    wait_for(lambda: get(owner.api, "instances", "shared-db", owner.namespace) is None, 60, "deprovisioned")


# -- 2. parametersFrom: Secrets of the object's own namespace only -------------------------------------------------


def test_parameters_come_only_from_secrets_of_the_objects_own_namespace(
    api_client: client.ApiClient,
    registered: tuple[str, str],
    second_broker: SecondBroker,
    tenant: Tenant,
    attacker: Tenant,
) -> None:
    """An attacker's Instance and Binding naming the victim's parameters Secret (with a namespace added, which the
    schema does not have) read nothing of it: ErrorWithParameters, nothing sent."""
    _, suffix = registered
    victim = tenant
    victim.core.create_namespaced_secret(
        victim.namespace, {"metadata": {"name": "db-params"}, "stringData": {"params": '{"password": "v1ct1m"}'}}
    )
    provisioned_instance(attacker, suffix, "own-db", shareWith=[])
    before = snapshot(api_client, victim.namespace)
    second_broker.clear_requests()
    source = [{"secretKeyRef": {"name": "db-params", "key": "params", "namespace": victim.namespace}}]
    create(
        attacker.api,
        attacker.namespace,
        "instances",
        "Instance",
        "peek",
        {"serviceClassName": f"second-db-{suffix}", "planName": "sync-small", "parametersFrom": source},
    )
    create(
        attacker.api,
        attacker.namespace,
        "bindings",
        "Binding",
        "peek",
        {"instanceRef": {"name": "own-db"}, "parametersFrom": source},
    )
    for plural in ("instances", "bindings"):
        wait_for(
            lambda plural=plural: reason_of(attacker, plural, "peek") == ("False", "ErrorWithParameters"),
            30,
            f"the {plural} refused",
        )
        found = get(attacker.api, plural, "peek", attacker.namespace)
        assert "namespace" not in found["spec"]["parametersFrom"][0]["secretKeyRef"]
    assert not [r for r in second_broker.requests() if r["method"] in ("PUT", "PATCH")]
    assert "v1ct1m" not in json.dumps(second_broker.requests())
    assert_unchanged(before, snapshot(api_client, victim.namespace))


# -- 3. someone else's external id ---------------------------------------------------------------------------------


def forge_status(tenant: Tenant, plural: str, name: str, status: dict[str, Any], admin: client.ApiClient) -> None:
    """A tenant forging its own object's status: the API server refuses it (issue 42: status is opbroker's record,
    ``opbroker.api.admission``). The same status is then written by the admin — standing in for a bug that let
    one through — so the test shows the controller acts on no status it did not earn either."""
    found = get(tenant.api, plural, name, tenant.namespace)
    assert found is not None
    status = {**status, "observedGeneration": found["metadata"]["generation"]}
    with pytest.raises(ApiException) as refused_write:
        custom(tenant.api).patch_namespaced_custom_object_status(
            GROUP, VERSION, tenant.namespace, plural, name, {"status": status}
        )
    assert refused_write.value.status == 403 and "written by opbroker alone" in (refused_write.value.body or "")
    custom(admin).patch_namespaced_custom_object_status(
        GROUP, VERSION, tenant.namespace, plural, name, {"status": status}
    )


def test_an_instance_never_acts_for_another_tenants_instance_id(
    api_client: client.ApiClient,
    registered: tuple[str, str],
    second_broker: SecondBroker,
    tenant: Tenant,
    attacker: Tenant,
) -> None:
    """The attacker's Instance names the victim's instance id — with the very same class, plan and parameters,
    which the broker would answer 200 — then claims in its status to have provisioned it: it is refused
    (ExternalIDInUse), binds nothing, and its deletion deprovisions nothing."""
    _, suffix = registered
    victim = tenant
    victim_id = provisioned_instance(victim, suffix, "orders-db")["status"]["externalID"]
    before = snapshot(api_client, victim.namespace)
    second_broker.clear_requests()

    spec = {"serviceClassName": f"second-db-{suffix}", "planName": "sync-small", "externalID": victim_id}
    create(attacker.api, attacker.namespace, "instances", "Instance", "squat", spec)
    wait_for(lambda: reason_of(attacker, "instances", "squat") == ("False", "ExternalIDInUse"), 30, "the refusal")
    forged = {"provisionStatus": "Provisioned", "deprovisionStatus": "Required", "externalID": victim_id}
    forge_status(attacker, "instances", "squat", forged, api_client)
    create(attacker.api, attacker.namespace, "bindings", "Binding", "steal", {"instanceRef": {"name": "squat"}})
    wait_for(lambda: reason_of(attacker, "bindings", "steal") == ("False", "ExternalIDInUse"), 30, "no binding")
    # Neither the Instance nor the Binding sends anything for an id it does not hold, whatever its status claims:
    # the plans' decision (test_plans.py::test_an_object_without_its_id_sends_nothing).
    assert instance_requests(second_broker, victim_id) == [] and binding_requests(second_broker) == []
    refused(lambda: attacker.core.read_namespaced_secret("steal", attacker.namespace), 404)

    delete(attacker.api, attacker.namespace, "bindings", "steal")
    delete(attacker.api, attacker.namespace, "instances", "squat")
    wait_for(lambda: get(attacker.api, "instances", "squat", attacker.namespace) is None, 30, "the squatter gone")
    wait_for(lambda: get(attacker.api, "bindings", "steal", attacker.namespace) is None, 30, "its binding gone")
    assert [r for r in second_broker.requests() if r["method"] == "DELETE"] == []
    # The deletions were reconciled on the forged status: nothing was sent for the victim's id, start to end.
    assert instance_requests(second_broker, victim_id) == [] and binding_requests(second_broker) == []
    assert victim_id in second_broker.state()["instances"]
    assert_unchanged(before, snapshot(api_client, victim.namespace))


def test_a_chosen_instance_id_the_broker_already_has_is_not_ours(
    registered: tuple[str, str], second_broker: SecondBroker, attacker: Tenant
) -> None:
    """An id another platform provisioned at the same broker: the provision answers 409, so the Instance fails
    with ExternalIDInUse and deprovisionStatus NotRequired, and deleting it sends no DELETE."""
    _, suffix = registered
    theirs = "provisioned-by-another-platform"
    with second_broker.client() as platform:
        answer = platform.put(
            f"/v2/service_instances/{theirs}",
            json={"service_id": DB_SERVICE, "plan_id": DB_SYNC_PLAN, "parameters": {"size": 9}},
        )
        assert answer.status_code == 201, answer.text
    second_broker.clear_requests()

    spec = {"serviceClassName": f"second-db-{suffix}", "planName": "sync-small", "externalID": theirs}
    create(attacker.api, attacker.namespace, "instances", "Instance", "squat", spec)

    def failed() -> dict[str, Any] | None:
        found = get(attacker.api, "instances", "squat", attacker.namespace)
        failure = condition(found, "Failed") or {}
        return found if failure.get("status") == "True" and failure.get("reason") == "ExternalIDInUse" else None

    found = wait_for(failed, 30, "the instance failed with ExternalIDInUse")
    assert found["status"]["deprovisionStatus"] == "NotRequired"
    assert [r["method"] for r in instance_requests(second_broker, theirs)] == ["PUT"]

    delete(attacker.api, attacker.namespace, "instances", "squat")
    wait_for(lambda: get(attacker.api, "instances", "squat", attacker.namespace) is None, 30, "the instance gone")
    assert [r["method"] for r in instance_requests(second_broker, theirs)] == ["PUT"]  # no DELETE
    assert theirs in second_broker.state()["instances"]


def test_a_binding_never_acts_for_another_tenants_binding_id(
    api_client: client.ApiClient,
    registered: tuple[str, str],
    second_broker: SecondBroker,
    tenant: Tenant,
    attacker: Tenant,
) -> None:
    """The victim shares its Instance, and the attacker's Binding to it names the victim's binding id (same
    parameters: the broker would answer 200 with the victim's credentials): refused (ExternalIDInUse), and its
    deletion unbinds nothing."""
    _, suffix = registered
    victim = tenant
    provisioned_instance(victim, suffix, "orders-db", shareWith=[attacker.namespace])
    create(victim.api, victim.namespace, "bindings", "Binding", "orders-app", {"instanceRef": {"name": "orders-db"}})
    wait_for(lambda: reason_of(victim, "bindings", "orders-app") == BOUND, 60, "the victim's binding")
    victim_binding = get(victim.api, "bindings", "orders-app", victim.namespace)["status"]["externalID"]
    before = snapshot(api_client, victim.namespace)
    second_broker.clear_requests()

    spec = {"instanceRef": {"namespace": victim.namespace, "name": "orders-db"}, "externalID": victim_binding}
    create(attacker.api, attacker.namespace, "bindings", "Binding", "steal", spec)
    wait_for(lambda: reason_of(attacker, "bindings", "steal") == ("False", "ExternalIDInUse"), 30, "the refusal")
    forge_status(attacker, "bindings", "steal", {"unbindStatus": "Required", "externalID": victim_binding}, api_client)
    # The deletion below is reconciled on the forged status (the Binding goes only once the controller has read
    # it): its finalizer is released without an unbind (test_plans.py::…without_its_id…).
    delete(attacker.api, attacker.namespace, "bindings", "steal")
    wait_for(lambda: get(attacker.api, "bindings", "steal", attacker.namespace) is None, 30, "the binding gone")
    assert binding_requests(second_broker) == []
    assert len(second_broker.state()["bindings"]) == 1  # the victim's, still there
    assert_unchanged(before, snapshot(api_client, victim.namespace))


def test_an_external_id_with_dot_segments_is_refused_and_reaches_nothing_of_the_victim(
    api_client: client.ApiClient,
    registered: tuple[str, str],
    second_broker: SecondBroker,
    tenant: Tenant,
    attacker: Tenant,
) -> None:
    """The ids the review found (issue 42): ``../<victim id>/service_bindings/x`` made the OSB client bind on the
    victim's instance, ``x/../<victim id>`` reach the instance itself (httpx resolves dot segments). The API server
    refuses each on create, for an Instance and a Binding alike, naming the rule; the broker hears nothing for the
    victim's id and the victim is unchanged. (An id made before the schema held the rule: the controller's
    ``InvalidExternalID``, test_fakekube.py::test_an_external_id_made_before_the_schema_refused_it_…;
    the client's own check: test_paths.py.)"""
    _, suffix = registered
    victim = tenant
    victim_id = provisioned_instance(victim, suffix, "orders-db")["status"]["externalID"]
    provisioned_instance(attacker, suffix, "own-db")
    before = snapshot(api_client, victim.namespace)
    second_broker.clear_requests()

    escaping = (f"../{victim_id}/service_bindings/x", f"x/../{victim_id}", f"%2e%2e/{victim_id}", "..", ".")
    for n, external_id in enumerate(escaping):
        instance = {"serviceClassName": f"second-db-{suffix}", "planName": "sync-small", "externalID": external_id}
        binding = {"instanceRef": {"name": "own-db"}, "externalID": external_id}
        for plural, kind, spec in (("instances", "Instance", instance), ("bindings", "Binding", binding)):
            attempt = partial(create, attacker.api, attacker.namespace, plural, kind, f"squat-{n}", spec)
            message = json.loads(refused(attempt, 422).body)["message"]
            assert "spec.externalID" in message and osbclient.ID_RULE in message, message
            assert get(attacker.api, plural, f"squat-{n}", attacker.namespace) is None

    assert [r for r in second_broker.requests() if victim_id in r["path"]] == []
    assert binding_requests(second_broker) == []
    assert victim_id in second_broker.state()["instances"]
    assert_unchanged(before, snapshot(api_client, victim.namespace))


# -- 4. a Broker's auth Secret -------------------------------------------------------------------------------------


def test_a_broker_reads_no_secret_outside_the_control_plane_namespace(
    api_client: client.ApiClient, second_broker: SecondBroker, tenant: Tenant, attacker: Tenant
) -> None:
    """Someone allowed to register Brokers (and nothing else) names the victim's Secret as the auth Secret of a
    Broker pointing at a URL they control: refused with AuthSecretNotInControlPlane, nothing read or sent."""
    victim = tenant
    victim.core.create_namespaced_secret(
        victim.namespace,
        {"metadata": {"name": "payments-db"}, "stringData": {"username": "payments", "password": "v1ct1m-pw"}},
    )
    before = snapshot(api_client, victim.namespace)
    rbac = client.RbacAuthorizationV1Api(api_client)
    role = f"{attacker.namespace}-brokers"
    rbac.create_cluster_role(
        {
            "metadata": {"name": role},
            "rules": [{"apiGroups": [GROUP], "resources": ["brokers"], "verbs": ["create", "get", "delete"]}],
        }
    )
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": attacker.service_account, "namespace": attacker.namespace}],
        }
    )
    registrar = service_account_client(api_client, attacker.namespace, attacker.service_account)
    name = f"{attacker.namespace}-exfil"
    try:
        refused(lambda: client.CoreV1Api(registrar).read_namespaced_secret("payments-db", victim.namespace))
        custom(registrar).create_cluster_custom_object(
            GROUP,
            VERSION,
            "brokers",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "Broker",
                "metadata": {"name": name},
                "spec": {
                    "url": second_broker.url,  # stands for the attacker's server: it records every request
                    "authInfo": {"basic": {"secretRef": {"namespace": victim.namespace, "name": "payments-db"}}},
                },
            },
        )
        wait_for(
            lambda: ready(get(registrar, "brokers", name)) == ("False", "AuthSecretNotInControlPlane"),
            30,
            "the Broker refused",
        )
        # No catalog is fetched with a Secret outside the control plane: refused before any read (test_servicecatalog_
        # decisions.py::test_a_brokers_credentials_are_read_only_from_the_control_plane_namespace); the plan then
        # writes only the refusal and comes back.
        assert second_broker.requests() == []
        broker = get(registrar, "brokers", name)
        assert "v1ct1m-pw" not in json.dumps(broker)
        assert_unchanged(before, snapshot(api_client, victim.namespace))
    finally:
        custom(api_client).delete_cluster_custom_object(GROUP, VERSION, "brokers", name)
        rbac.delete_cluster_role_binding(role)
        rbac.delete_cluster_role(role)
        registrar.close()


# -- 5. a Binding's secretName -------------------------------------------------------------------------------------


def test_a_binding_never_overwrites_or_deletes_a_secret_it_did_not_create(
    api_client: client.ApiClient, registered: tuple[str, str], second_broker: SecondBroker, tenant: Tenant
) -> None:
    """A Binding whose secretName is an existing Secret (the namespace's database admin password): it fails with
    SecretNotOwned before binding, the Secret is untouched, and deleting the Binding leaves it. A Binding's own
    Secret carries its uid, and goes with it."""
    _, suffix = registered
    provisioned_instance(tenant, suffix, "db")
    api_client_core = client.CoreV1Api(api_client)
    api_client_core.create_namespaced_secret(
        tenant.namespace, {"metadata": {"name": "db-admin"}, "stringData": {"password": "adm1n"}}
    )
    kept = api_client_core.read_namespaced_secret("db-admin", tenant.namespace)
    second_broker.clear_requests()

    spec = {"instanceRef": {"name": "db"}, "secretName": "db-admin"}
    create(tenant.api, tenant.namespace, "bindings", "Binding", "clobber", spec)
    wait_for(lambda: reason_of(tenant, "bindings", "clobber") == ("False", "SecretNotOwned"), 30, "the refusal")
    wait_for(lambda: events_of(tenant, "clobber", "SecretNotOwned"), 30, "the SecretNotOwned event")
    # No bind is sent while the Secret is not the Binding's: the plan's decision (an unresolved Binding's actions
    # hold no Call: test_plans.py::test_a_binding_that_may_not_use_its_instance_sends_nothing).
    assert binding_requests(second_broker) == []
    delete(tenant.api, tenant.namespace, "bindings", "clobber")
    wait_for(lambda: get(tenant.api, "bindings", "clobber", tenant.namespace) is None, 30, "the binding gone")
    after = api_client_core.read_namespaced_secret("db-admin", tenant.namespace)
    assert after.metadata.resource_version == kept.metadata.resource_version and after.data == kept.data

    create(tenant.api, tenant.namespace, "bindings", "Binding", "own", {"instanceRef": {"name": "db"}})
    wait_for(lambda: reason_of(tenant, "bindings", "own") == BOUND, 60, "bound")
    binding = get(tenant.api, "bindings", "own", tenant.namespace)
    own = tenant.core.read_namespaced_secret("own", tenant.namespace)
    assert binding is not None and own.metadata.annotations[ANNOTATION_OWNER_UID] == binding["metadata"]["uid"]
    delete(tenant.api, tenant.namespace, "bindings", "own")
    wait_for(lambda: get(tenant.api, "bindings", "own", tenant.namespace) is None, 60, "unbound")
    refused(lambda: tenant.core.read_namespaced_secret("own", tenant.namespace), 404)
    delete(tenant.api, tenant.namespace, "instances", "db")
    wait_for(lambda: get(tenant.api, "instances", "db", tenant.namespace) is None, 60, "deprovisioned")
