"""ServiceClaims on the real control plane, with the session's controller.

Aspects: a match takes the best-ranked service and records every candidate with its reason; no match
is Pending with the reasons and resolves when a service appears; a match is exclusive when claims race;
release frees exactly the held service; re-matching when the held service is deleted or changed, and
when the claim changes; the servicebinding.io Secret; projection into Deployments by name and by label
selector (volume, mount, env, SERVICE_BINDING_ROOT) including workloads created or relabelled later and
withdrawal on release; rotation of a source Secret re-rendering the binding and rolling the pods; an
unsupported application kind makes the claim Invalid.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from kubernetes import client

from opbroker.controller.claims.core import names
from tests.claims_support import (
    catalog_names,
    create,
    delete,
    deployment,
    event_reasons,
    get,
    patch_spec,
    put_secret,
    registered_service,
    secret_data,
    service_claim,
    status,
)
from tests.controller_support import wait_for

pytestmark = pytest.mark.usefixtures("controller")

RS, CLAIM = "RegisteredService", "ServiceClaim"
HASH_ANNOTATION = "binding.claims.opbroker.io/app-db"


@pytest.fixture
def credentials(api_client: client.ApiClient, namespace: str) -> None:
    put_secret(api_client, namespace, "db-credentials", {"password": "pw-1"})


def available(api: client.ApiClient, namespace: str, *services: dict[str, Any]) -> None:
    for manifest in services:
        create(api, namespace, manifest)
    for manifest in services:
        name = manifest["metadata"]["name"]
        wait_for(lambda name=name: status(api, namespace, RS, name).get("state") == "Available", 15, f"{name}")


def claim_state(api: client.ApiClient, namespace: str, name: str, wanted: str, timeout: float = 15) -> dict[str, Any]:
    wait_for(lambda: status(api, namespace, CLAIM, name).get("state") == wanted, timeout, f"claim {name} {wanted}")
    return status(api, namespace, CLAIM, name)


def holder(api: client.ApiClient, namespace: str, service: str) -> str | None:
    return status(api, namespace, RS, service).get("claimedBy")


def ready(found: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in found["conditions"] if c["type"] == "Ready")


@pytest.mark.usefixtures("credentials")
def test_a_claim_takes_the_best_ranked_service_and_records_every_candidate(
    api_client: client.ApiClient, namespace: str
) -> None:
    available(
        api_client,
        namespace,
        registered_service("pg-silver", sla="L2", environments=["dev"]),
        registered_service("pg-gold-b", sla="L1"),
        registered_service("pg-gold-a", sla="L1"),
        registered_service("pg-prod-only", sla="L1", environments=["!dev"]),
        registered_service("cache", identity={"type": "redis"}, endpoints={"host": "cache.example"}),
    )
    create(api_client, namespace, service_claim("app-db"))
    found = claim_state(api_client, namespace, "app-db", "Resolved")
    assert found["registeredService"] == "pg-gold-a"  # L1 beats L2; the L1 tie goes by name
    assert holder(api_client, namespace, "pg-gold-a") == "app-db"
    assert status(api_client, namespace, RS, "pg-gold-a")["state"] == "Claimed"
    wait_for(
        lambda: (
            [c["name"] for c in status(api_client, namespace, CLAIM, "app-db")["candidates"]][:3]
            == ["pg-gold-a", "pg-gold-b", "pg-silver"]
        ),
        10,
        "the ranked candidates",
    )
    verdicts = {c["name"]: c for c in status(api_client, namespace, CLAIM, "app-db")["candidates"]}
    assert verdicts["pg-gold-a"]["accepted"] and verdicts["pg-gold-a"]["reason"].startswith("Chosen: rank 1 of 3")
    assert verdicts["pg-gold-b"]["accepted"] and verdicts["pg-gold-b"]["reason"].startswith("Acceptable: rank 2 of 3")
    assert verdicts["pg-prod-only"] == {
        "name": "pg-prod-only",
        "accepted": False,
        "reason": "NotOfferedInEnvironment: environment 'dev' is excluded (!dev)",
    }
    assert verdicts["cache"]["reason"] == (
        "IdentityMismatch: type=postgresql wanted, has redis; MissingEndpointKeys: port, password"
    )
    assert ready(found)["status"] == "True" and ready(found)["reason"] == "Bound"

    secret = client.CoreV1Api(api_client).read_namespaced_secret(found["bindingSecret"], namespace)
    assert secret.type == "servicebinding.io/postgresql"
    assert secret.metadata.owner_references[0].kind == "ServiceClaim"
    assert secret_data(api_client, namespace, found["bindingSecret"]) == {
        "type": "postgresql",
        "provider": "aws",
        "host": "pg-gold-a.example",
        "port": "5432",
        "password": "pw-1",
    }
    wait_for(
        lambda: catalog_names(api_client, namespace, "dev") == ["cache", "pg-gold-b", "pg-silver"],
        10,
        "the claimed service to leave the catalog",
    )


@pytest.mark.usefixtures("credentials")
def test_nothing_matches_pending_with_reasons_then_a_new_service_resolves_it(
    api_client: client.ApiClient, namespace: str
) -> None:
    available(api_client, namespace, registered_service("pg"))
    create(api_client, namespace, service_claim("app-db", identity={"type": "mysql"}))
    found = claim_state(api_client, namespace, "app-db", "Pending")
    assert found["candidates"] == [
        {"name": "pg", "accepted": False, "reason": "IdentityMismatch: type=mysql wanted, has postgresql"}
    ]
    assert "no acceptable registered service among 1" in found["reason"]
    assert (ready(found)["status"], ready(found)["reason"]) == ("False", "NoMatch")

    create(api_client, namespace, registered_service("my", identity={"type": "mysql"}))  # taken as soon as Available
    found = claim_state(api_client, namespace, "app-db", "Resolved")
    assert found["registeredService"] == "my"


@pytest.mark.usefixtures("credentials")
def test_a_match_is_exclusive_when_claims_race(api_client: client.ApiClient, namespace: str) -> None:
    available(api_client, namespace, registered_service("only-db"))
    claims = [f"racer-{i}" for i in range(6)]
    threads = [threading.Thread(target=create, args=(api_client, namespace, service_claim(c))) for c in claims]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    def settled() -> dict[str, str] | None:
        states = {c: status(api_client, namespace, CLAIM, c).get("state") for c in claims}
        return states if all(s in ("Resolved", "Pending") for s in states.values()) else None

    states = wait_for(settled, 20, "every claim to settle")
    winners = [c for c, s in states.items() if s == "Resolved"]
    assert len(winners) == 1
    assert holder(api_client, namespace, "only-db") == winners[0]
    for loser in set(claims) - set(winners):
        reasons = [c["reason"] for c in status(api_client, namespace, CLAIM, loser)["candidates"]]
        assert reasons == [f"ClaimedByAnother: held by claim {winners[0]!r}"]

    delete(api_client, namespace, CLAIM, winners[0])  # released: exactly one of the others takes it
    second = wait_for(
        lambda: (h := holder(api_client, namespace, "only-db")) not in (None, winners[0]) and h, 20, "a new holder"
    )
    claim_state(api_client, namespace, second, "Resolved")
    remaining = set(claims) - {winners[0]}
    assert [c for c in remaining if status(api_client, namespace, CLAIM, c).get("state") == "Resolved"] == [second]


@pytest.mark.usefixtures("credentials")
def test_release_frees_exactly_the_held_service(api_client: client.ApiClient, namespace: str) -> None:
    available(api_client, namespace, registered_service("db-1", sla="L1"), registered_service("db-2", sla="L2"))
    create(api_client, namespace, service_claim("first"))
    claim_state(api_client, namespace, "first", "Resolved")
    create(api_client, namespace, service_claim("second"))
    claim_state(api_client, namespace, "second", "Resolved")
    assert (holder(api_client, namespace, "db-1"), holder(api_client, namespace, "db-2")) == ("first", "second")

    delete(api_client, namespace, CLAIM, "first")
    wait_for(lambda: get(api_client, namespace, CLAIM, "first") is None, 10, "the claim to go")
    db1 = status(api_client, namespace, RS, "db-1")
    assert db1.get("claimedBy") is None and db1["state"] == "Available"
    assert holder(api_client, namespace, "db-2") == "second"
    assert status(api_client, namespace, CLAIM, "second")["registeredService"] == "db-2"  # no re-shuffling
    wait_for(
        lambda: secret_data(api_client, namespace, names.binding_secret_name("first")) is None, 10, "its binding to go"
    )
    assert "Released" in event_reasons(api_client, namespace, "db-1")


@pytest.mark.usefixtures("credentials")
def test_re_matching_when_the_held_service_is_deleted(api_client: client.ApiClient, namespace: str) -> None:
    available(api_client, namespace, registered_service("db-1", sla="L1"), registered_service("db-2", sla="L2"))
    create(api_client, namespace, service_claim("app-db"))
    found = claim_state(api_client, namespace, "app-db", "Resolved")
    assert found["registeredService"] == "db-1"

    delete(api_client, namespace, RS, "db-1")
    wait_for(lambda: holder(api_client, namespace, "db-2") == "app-db", 15, "the claim to move to db-2")
    wait_for(
        lambda: status(api_client, namespace, CLAIM, "app-db").get("registeredService") == "db-2", 10, "its status"
    )
    assert claim_state(api_client, namespace, "app-db", "Resolved")["conditions"][0]["reason"] == "Bound"
    wait_for(
        lambda: (secret_data(api_client, namespace, "app-db-binding") or {}).get("host") == "db-2.example",
        10,
        "the binding to follow",
    )

    delete(api_client, namespace, RS, "db-2")  # nothing left: Pending, saying what was lost
    found = claim_state(api_client, namespace, "app-db", "Pending")
    assert found["reason"].startswith("registered service 'db-2' no longer matches")
    assert ready(found)["reason"] == "MatchLost"
    wait_for(lambda: secret_data(api_client, namespace, "app-db-binding") is None, 10, "the binding to go")


@pytest.mark.usefixtures("credentials")
def test_re_matching_when_the_held_service_or_the_claim_changes(api_client: client.ApiClient, namespace: str) -> None:
    available(
        api_client,
        namespace,
        registered_service("db-1", sla="L1"),
        registered_service(
            "db-2",
            sla="L2",
            endpoints={"host": "db-2.example", "port": "5432", "password": ("db-credentials", "password"), "ca": "c"},
        ),
    )
    create(api_client, namespace, service_claim("app-db"))
    assert claim_state(api_client, namespace, "app-db", "Resolved")["registeredService"] == "db-1"

    # The service's endpoint definition changes: the binding is re-rendered (the seed's update case).
    patch_spec(
        api_client,
        namespace,
        RS,
        "db-1",
        {
            "serviceEndpointDefinition": [
                {"name": "host", "value": "db-1-new.example"},
                {"name": "port", "value": "5433"},
                {"name": "password", "valueFromSecret": {"name": "db-credentials", "key": "password"}},
            ]
        },
    )
    wait_for(
        lambda: (secret_data(api_client, namespace, "app-db-binding") or {}).get("port") == "5433", 10, "re-render"
    )

    # The service no longer matches (excluded from dev): released, and the claim moves on.
    patch_spec(api_client, namespace, RS, "db-1", {"constraints": {"environments": ["!dev"]}})
    wait_for(lambda: holder(api_client, namespace, "db-2") == "app-db", 15, "the claim to move to db-2")
    wait_for(lambda: status(api_client, namespace, RS, "db-1").get("state") == "Available", 10, "db-1 released")
    assert holder(api_client, namespace, "db-1") is None

    # The claim changes: it asks for a key only db-2 has — it keeps db-2 and the binding gains the key.
    patch_spec(api_client, namespace, CLAIM, "app-db", {"serviceEndpointDefinitionKeys": ["host", "ca"]})
    wait_for(
        lambda: (
            secret_data(api_client, namespace, "app-db-binding")
            == {"type": "postgresql", "provider": "aws", "host": "db-2.example", "ca": "c"}
        ),
        10,
        "the binding to follow the claim",
    )
    # ... and then for another environment where db-2 is not offered but db-1 is.
    patch_spec(api_client, namespace, RS, "db-2", {"constraints": {"environments": ["dev"]}})
    patch_spec(
        api_client, namespace, CLAIM, "app-db", {"environmentTag": "prod", "serviceEndpointDefinitionKeys": ["host"]}
    )
    wait_for(lambda: holder(api_client, namespace, "db-1") == "app-db", 15, "the claim to move back to db-1")
    assert holder(api_client, namespace, "db-2") is None


def deployments(api: client.ApiClient) -> client.AppsV1Api:
    return client.AppsV1Api(api)


def pod_spec(api: client.ApiClient, namespace: str, name: str) -> Any:
    return deployments(api).read_namespaced_deployment(name, namespace).spec.template


def projected(api: client.ApiClient, namespace: str, name: str) -> bool:
    template = pod_spec(api, namespace, name)
    return HASH_ANNOTATION in (template.metadata.annotations or {})


@pytest.mark.usefixtures("credentials")
def test_projection_into_deployments_by_selector_and_rotation_and_release(
    api_client: client.ApiClient, namespace: str
) -> None:
    apps = deployments(api_client)
    apps.create_namespaced_deployment(namespace, deployment("web", {"app": "orders", "tier": "web"}))
    apps.create_namespaced_deployment(
        namespace,
        deployment(
            "worker",
            {"app": "orders", "tier": "worker"},
            containers=[
                {"name": "main", "image": "example/w:1", "env": [{"name": "SERVICE_BINDING_ROOT", "value": "/srv/b"}]}
            ],
        ),
    )
    apps.create_namespaced_deployment(namespace, deployment("batch", {"app": "orders", "tier": "batch"}))
    apps.create_namespaced_deployment(namespace, deployment("other", {"app": "cart", "tier": "web"}))
    available(api_client, namespace, registered_service("db"))
    selector = {
        "selector": {
            "matchLabels": {"app": "orders"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["web", "worker"]}],
        }
    }
    create(api_client, namespace, service_claim("app-db", application=selector))
    claim_state(api_client, namespace, "app-db", "Resolved")
    wait_for(lambda: projected(api_client, namespace, "web") and projected(api_client, namespace, "worker"), 10, "proj")
    assert not projected(api_client, namespace, "batch") and not projected(api_client, namespace, "other")

    template = pod_spec(api_client, namespace, "web")
    assert [(v.name, v.secret.secret_name) for v in template.spec.volumes] == [("binding-app-db", "app-db-binding")]
    (container,) = template.spec.containers
    assert container.image == "example/app:1"  # the user's fields are untouched
    assert [(m.name, m.mount_path, m.read_only) for m in container.volume_mounts] == [
        ("binding-app-db", "/bindings/app-db", True)
    ]
    env = {e.name: e for e in container.env}
    assert env["SERVICE_BINDING_ROOT"].value == "/bindings"
    assert env["APP_DB_PASSWORD"].value_from.secret_key_ref.name == "app-db-binding"
    assert env["APP_DB_PASSWORD"].value_from.secret_key_ref.key == "password"
    assert set(env) == {
        "SERVICE_BINDING_ROOT",
        *(f"APP_DB_{k}" for k in ("HOST", "PORT", "PASSWORD", "TYPE", "PROVIDER")),
    }
    worker = pod_spec(api_client, namespace, "worker").spec.containers[0]
    assert worker.volume_mounts[0].mount_path == "/srv/b/app-db"  # the container's own root is kept
    assert [e.value for e in worker.env if e.name == "SERVICE_BINDING_ROOT"] == ["/srv/b"]
    assert "pw-1" not in str(apps.read_namespaced_deployment("web", namespace).to_dict())

    # A workload created later, and one relabelled into the selection, get the binding too.
    apps.create_namespaced_deployment(namespace, deployment("web-2", {"app": "orders", "tier": "web"}))
    apps.patch_namespaced_deployment("batch", namespace, {"metadata": {"labels": {"tier": "worker"}}})
    wait_for(lambda: projected(api_client, namespace, "web-2") and projected(api_client, namespace, "batch"), 10, "new")
    # One relabelled out of it loses it.
    apps.patch_namespaced_deployment("batch", namespace, {"metadata": {"labels": {"tier": "batch"}}})
    wait_for(lambda: not projected(api_client, namespace, "batch"), 10, "withdrawal from a relabelled workload")
    assert pod_spec(api_client, namespace, "batch").spec.volumes is None

    # Rotation: the source Secret changes -> binding re-rendered, pod-template hash bumped (pods roll).
    before = pod_spec(api_client, namespace, "web").metadata.annotations[HASH_ANNOTATION]
    put_secret(api_client, namespace, "db-credentials", {"password": "pw-2"})
    wait_for(
        lambda: (secret_data(api_client, namespace, "app-db-binding") or {}).get("password") == "pw-2", 10, "rotation"
    )
    wait_for(
        lambda: pod_spec(api_client, namespace, "web").metadata.annotations[HASH_ANNOTATION] != before, 10, "a roll"
    )
    # Each workload is re-projected on its own: wait for the second as for the first.
    wait_for(
        lambda: pod_spec(api_client, namespace, "worker").metadata.annotations[HASH_ANNOTATION] != before,
        10,
        "the second workload's roll",
    )
    wait_for(lambda: "CredentialsRotated" in event_reasons(api_client, namespace, "app-db"), 10, "the event")

    # Release: the projection is withdrawn everywhere, the user's own settings stay.
    delete(api_client, namespace, CLAIM, "app-db")
    wait_for(lambda: get(api_client, namespace, CLAIM, "app-db") is None, 10, "the claim to go")
    for name in ("web", "worker", "web-2"):
        template = pod_spec(api_client, namespace, name)
        assert HASH_ANNOTATION not in (template.metadata.annotations or {})
        assert template.spec.volumes is None
        assert all(not e.name.startswith("APP_DB_") for e in template.spec.containers[0].env or [])
    assert [e.value for e in pod_spec(api_client, namespace, "worker").spec.containers[0].env] == ["/srv/b"]
    assert pod_spec(api_client, namespace, "web").spec.containers[0].env is None


@pytest.mark.usefixtures("credentials")
def test_projection_by_name(api_client: client.ApiClient, namespace: str) -> None:
    apps = deployments(api_client)
    apps.create_namespaced_deployment(namespace, deployment("web", {"app": "orders"}))
    apps.create_namespaced_deployment(namespace, deployment("api", {"app": "orders"}))
    available(api_client, namespace, registered_service("db"))
    create(api_client, namespace, service_claim("app-db", application={"name": "api"}))
    wait_for(lambda: projected(api_client, namespace, "api"), 15, "projection by name")
    assert not projected(api_client, namespace, "web")
    found = claim_state(api_client, namespace, "app-db", "Resolved")
    assert ready(found)["message"] == "bound to 'db'; projected into 1 workload(s)"


def test_an_unsupported_application_kind_makes_the_claim_invalid(api_client: client.ApiClient, namespace: str) -> None:
    create(api_client, namespace, service_claim("app-db", application={"apiVersion": "v1", "kind": "Pod", "name": "p"}))
    found = claim_state(api_client, namespace, "app-db", "Invalid")
    assert "application kind v1/Pod is not supported" in found["reason"]
    assert ready(found)["reason"] == "ClaimInvalid"
