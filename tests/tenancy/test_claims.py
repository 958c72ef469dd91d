"""Claims across tenants (issue 24), on the real control plane with the session's controller, acting AS tenants.

Every object of a tenant is created with that tenant's own ServiceAccount token (:mod:`tests.tenancy_support`),
which holds only its namespace's consumer rights; the admin client only makes namespaces and reads.

Attacks: a claim naming a namespace whose services were not shared with it gets nothing (ReferenceNotShared)
and the victim is unchanged; a registered service whose endpoint names another namespace's Secret reads nothing
there; a service shared with everyone cannot slip into a claim that did not name its namespace; a Secret of the
tenant's that opbroker did not stamp is never overwritten. And consent working: a service shared with a
namespace that its claim names is taken there, and lost (released, credentials withdrawn) when the share is.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from opbroker.api.conventions import ANNOTATION_OWNER_UID
from tests.claims_support import (
    create,
    event_reasons,
    get,
    patch_spec,
    put_secret,
    registered_service,
    secret_data,
    service_claim,
    status,
)
from tests.cluster_fixtures import onboarded_namespace
from tests.controller_support import wait_for
from tests.tenancy_support import Tenant, assert_unchanged, make_tenant, snapshot

pytestmark = pytest.mark.usefixtures("controller")

RS, CLAIM = "RegisteredService", "ServiceClaim"
VICTIM_PASSWORD = "victim-pw-3f1c"


@pytest.fixture
def victim(api_client: client.ApiClient) -> Iterator[Tenant]:
    """A second tenant, in a namespace of its own, holding a database password."""
    with onboarded_namespace(api_client, "v") as name:
        acting = make_tenant(api_client, name)
        put_secret(acting.api, name, "db-credentials", {"password": VICTIM_PASSWORD})
        yield acting
        acting.api.close()


def ready(api: client.ApiClient, namespace: str, kind: str, name: str) -> dict[str, Any]:
    found = status(api, namespace, kind, name)
    return next((c for c in found.get("conditions") or [] if c["type"] == "Ready"), {})


def available(tenant: Tenant, manifest: dict[str, Any]) -> None:
    create(tenant.api, tenant.namespace, manifest)
    name = manifest["metadata"]["name"]
    wait_for(
        lambda: status(tenant.api, tenant.namespace, RS, name).get("state") == "Available", 15, f"{name} Available"
    )


def secrets_holding(api: client.ApiClient, namespace: str, value: str) -> list[str]:
    """The Secrets of ``namespace`` holding ``value`` anywhere in their data."""
    return sorted(
        name
        for name in (s.metadata.name for s in client.CoreV1Api(api).list_namespaced_secret(namespace).items)
        if value in (secret_data(api, namespace, name) or {}).values()
    )


def test_a_claim_gets_nothing_from_a_namespace_that_did_not_share(
    api_client: client.ApiClient, tenant: Tenant, victim: Tenant
) -> None:
    available(
        victim, registered_service("db", endpoints={"host": "db.victim", "password": ("db-credentials", "password")})
    )
    before = snapshot(api_client, victim.namespace)

    grab = service_claim("grab", keys=["host", "password"])
    grab["spec"]["serviceNamespaces"] = [victim.namespace]
    create(tenant.api, tenant.namespace, grab)
    wait_for(
        lambda: ready(tenant.api, tenant.namespace, CLAIM, "grab").get("reason") == "ReferenceNotShared",
        15,
        "the claim refused with ReferenceNotShared",
    )
    found = status(tenant.api, tenant.namespace, CLAIM, "grab")
    assert found["state"] == "Pending" and not found.get("registeredService")
    assert f"namespace '{victim.namespace}' shares no registered service with '{tenant.namespace}'" in found["reason"]
    assert "db" not in [c["name"].split("/")[-1] for c in found.get("candidates") or []]  # not even named
    # The Event follows the status write: waited for, not expected at once.
    wait_for(lambda: "ReferenceNotShared" in event_reasons(tenant.api, tenant.namespace, "grab"), 30, "the event")
    assert secret_data(tenant.api, tenant.namespace, "grab-binding") is None
    assert secrets_holding(api_client, tenant.namespace, VICTIM_PASSWORD) == []
    assert status(api_client, victim.namespace, RS, "db").get("claimedBy") is None
    assert_unchanged(before, snapshot(api_client, victim.namespace))


def test_a_shared_service_is_taken_from_its_namespace_and_lost_with_the_share(
    api_client: client.ApiClient, tenant: Tenant, victim: Tenant
) -> None:
    provider, consumer = victim, tenant
    offered = registered_service("db", endpoints={"host": "db.shared", "password": ("db-credentials", "password")})
    offered["spec"]["shareWith"] = [consumer.namespace]
    available(provider, offered)

    claim = service_claim("app", keys=["host", "password"])
    claim["spec"]["serviceNamespaces"] = [provider.namespace]
    create(consumer.api, consumer.namespace, claim)
    wait_for(lambda: status(consumer.api, consumer.namespace, CLAIM, "app").get("state") == "Resolved", 15, "Resolved")
    found = status(consumer.api, consumer.namespace, CLAIM, "app")
    assert found["registeredService"] == f"{provider.namespace}/db"
    assert status(provider.api, provider.namespace, RS, "db")["claimedBy"] == f"{consumer.namespace}/app"
    # the binding lives in the claim's namespace, made from the endpoint Secret of the service's namespace
    assert secret_data(consumer.api, consumer.namespace, "app-binding") == {
        "type": "postgresql",
        "provider": "aws",
        "host": "db.shared",
        "password": VICTIM_PASSWORD,
    }
    stamp = (
        client.CoreV1Api(consumer.api).read_namespaced_secret("app-binding", consumer.namespace).metadata.annotations
    )
    uid = get(consumer.api, consumer.namespace, CLAIM, "app")["metadata"]["uid"]  # type: ignore[index]
    assert stamp[ANNOTATION_OWNER_UID] == uid

    patch_spec(provider.api, provider.namespace, RS, "db", {"shareWith": None})  # the owner withdraws consent
    wait_for(
        lambda: ready(consumer.api, consumer.namespace, CLAIM, "app").get("reason") == "ReferenceNotShared",
        15,
        "the claim losing the service",
    )
    wait_for(lambda: secret_data(consumer.api, consumer.namespace, "app-binding") is None, 10, "the binding withdrawn")
    wait_for(
        lambda: status(provider.api, provider.namespace, RS, "db").get("state") == "Available", 10, "the service free"
    )
    assert status(provider.api, provider.namespace, RS, "db").get("claimedBy") is None


def test_a_catalog_lists_what_is_shared_with_the_namespace(
    api_client: client.ApiClient, tenant: Tenant, victim: Tenant
) -> None:
    provider, consumer = victim, tenant
    offered = registered_service("db", endpoints={"host": "db.shared"})
    offered["spec"]["shareWith"] = [consumer.namespace]
    available(provider, offered)
    available(provider, registered_service("private", endpoints={"host": "private.shared"}))
    create(consumer.api, consumer.namespace, service_claim("later", identity={"type": "none-yet"}, keys=["host"]))

    def entries() -> list[tuple[str, str | None]]:
        found = get(consumer.api, consumer.namespace, "ServiceCatalog", "dev") or {}
        return [(e["name"], e.get("namespace")) for e in (found.get("spec") or {}).get("services") or []]

    # the shared one, with its namespace; never the one that was not shared
    wait_for(lambda: entries() == [("db", provider.namespace)], 15, "the shared service in the consumer's catalog")


def test_an_endpoint_naming_another_namespaces_secret_reads_nothing_there(
    api_client: client.ApiClient, tenant: Tenant, victim: Tenant
) -> None:
    before = snapshot(api_client, victim.namespace)
    lure = registered_service("lure", endpoints={"host": "lure.example", "password": ("db-credentials", "password")})
    lure["spec"]["serviceEndpointDefinition"][1]["valueFromSecret"]["namespace"] = victim.namespace
    create(tenant.api, tenant.namespace, lure)
    stored = get(tenant.api, tenant.namespace, RS, "lure")
    assert stored is not None
    assert "namespace" not in stored["spec"]["serviceEndpointDefinition"][1]["valueFromSecret"]  # no such field
    wait_for(
        lambda: status(tenant.api, tenant.namespace, RS, "lure").get("state") == "Undetermined", 15, "Undetermined"
    )
    healthy = next(c for c in status(tenant.api, tenant.namespace, RS, "lure")["conditions"] if c["type"] != "Ready")
    assert healthy["reason"] == "SecretMissing" and "Secret 'db-credentials'" in healthy["message"]

    create(tenant.api, tenant.namespace, service_claim("thief", keys=["host", "password"]))
    wait_for(
        lambda: ready(tenant.api, tenant.namespace, CLAIM, "thief").get("reason") in ("BindingFailed", "NoMatch"),
        15,
        "the claim bound to nothing",
    )
    assert secret_data(tenant.api, tenant.namespace, "thief-binding") is None
    assert secrets_holding(api_client, tenant.namespace, VICTIM_PASSWORD) == []
    assert_unchanged(before, snapshot(api_client, victim.namespace))


def test_a_service_shared_with_everyone_does_not_slip_into_a_claim_that_did_not_name_its_namespace(
    api_client: client.ApiClient, tenant: Tenant, victim: Tenant
) -> None:
    attacker = tenant
    lure = registered_service("lure", endpoints={"host": "attacker.example", "password": "captured"}, sla="L1")
    lure["spec"]["shareWith"] = ["*"]
    available(attacker, lure)
    available(
        victim,
        registered_service("db", endpoints={"host": "db.victim", "password": ("db-credentials", "password")}, sla="L3"),
    )

    create(victim.api, victim.namespace, service_claim("app", keys=["host", "password"]))
    wait_for(lambda: status(victim.api, victim.namespace, CLAIM, "app").get("state") == "Resolved", 15, "Resolved")
    assert status(victim.api, victim.namespace, CLAIM, "app")["registeredService"] == "db"
    assert (secret_data(victim.api, victim.namespace, "app-binding") or {}).get("host") == "db.victim"
    assert status(attacker.api, attacker.namespace, RS, "lure").get("claimedBy") is None


def test_a_secret_the_claim_did_not_stamp_is_never_overwritten(api_client: client.ApiClient, tenant: Tenant) -> None:
    """The tenant's own Secret ``app-binding`` — made by another tool, owned by the claim, labelled like
    opbroker's — carries no ``opbroker.io/owner-uid`` stamp: a record on the object proves nothing by itself."""
    ns, core = tenant.namespace, tenant.core
    create(tenant.api, ns, service_claim("app", identity={"type": "postgresql", "tier": "later"}, keys=["host"]))
    claim = wait_for(lambda: get(tenant.api, ns, CLAIM, "app"), 5, "the claim")
    wait_for(lambda: status(tenant.api, ns, CLAIM, "app").get("state") == "Pending", 15, "Pending")
    core.create_namespaced_secret(
        ns,
        {
            "metadata": {
                "name": "app-binding",
                "labels": {"app.kubernetes.io/managed-by": "opbroker", "claims.opbroker.io/claim": "app"},
                "ownerReferences": [
                    {
                        "apiVersion": "primaza.io/v1alpha1",
                        "kind": "ServiceClaim",
                        "name": "app",
                        "uid": claim["metadata"]["uid"],
                        "controller": True,
                    }
                ],
            },
            "type": "servicebinding.io/postgresql",
            "stringData": {"mine": "keep"},
        },
    )
    written = core.read_namespaced_secret("app-binding", ns).metadata.resource_version

    # the matching service appears (not awaited as Available: the pending claim takes it at once)
    create(
        tenant.api,
        ns,
        registered_service("db", identity={"type": "postgresql", "tier": "later"}, endpoints={"host": "db"}),
    )
    wait_for(lambda: ready(tenant.api, ns, CLAIM, "app").get("reason") == "ObjectNotOwned", 15, "ObjectNotOwned")
    assert "'app-binding' exists and is not stamped as this claim's" in ready(tenant.api, ns, CLAIM, "app")["message"]
    wait_for(lambda: "ObjectNotOwned" in event_reasons(tenant.api, ns, "app"), 30, "the event")  # after the status
    after = core.read_namespaced_secret("app-binding", ns)
    assert after.metadata.resource_version == written
    assert secret_data(tenant.api, ns, "app-binding") == {"mine": "keep"}
