"""RegisteredServices on the real control plane, with the session's controller: the seed's use cases.

Aspects: creation (Registered → Available, catalog entry only once Available), deletion (catalog entry
gone), update (spec changes re-evaluated); health checks that really reach the service — TCP and HTTP
against servers on 127.0.0.1, with the failure threshold and period; an unresolvable host is
Unreachable; Undetermined when the check cannot run (missing Secret, a container check whose Job gets
no verdict by its deadline — this control plane has no kubelet); container verdicts read from the Job
(the test plays the kubelet); health flapping while Claimed back to Claimed, or to Available when the
claim went away meanwhile. The controller polls rarely: every reaction here comes from watches and from
the checks' own periods.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from opbroker.controller.claims.core import names
from tests.claims_support import (
    TcpTarget,
    catalog_names,
    create,
    delete,
    get,
    http_target,
    patch_spec,
    put_secret,
    registered_service,
    secret_data,
    service_claim,
    status,
    tcp_target,
    transitions,
)
from tests.controller_support import wait_for

pytestmark = pytest.mark.usefixtures("controller")

RS = "RegisteredService"


def state(api: client.ApiClient, namespace: str, name: str) -> str | None:
    return status(api, namespace, RS, name).get("state")


def wait_state(api: client.ApiClient, namespace: str, name: str, wanted: str, timeout: float = 20) -> dict[str, Any]:
    wait_for(lambda: state(api, namespace, name) == wanted, timeout, f"{name} to be {wanted}")
    return status(api, namespace, RS, name)


def wait_transitions(api: client.ApiClient, namespace: str, name: str, wanted: set[str]) -> set[str]:
    """Wait until the Events record at least ``wanted``; return every transition recorded."""
    found: set[str] = wait_for(
        lambda: (seen := transitions(api, namespace, name)) >= wanted and seen, 10, f"{name}'s transitions {wanted}"
    )
    return found


def condition(found: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in found.get("conditions") or [] if c["type"] == type_)


@pytest.fixture
def credentials(api_client: client.ApiClient, namespace: str) -> None:
    put_secret(api_client, namespace, "db-credentials", {"password": "pw-1"})


@pytest.mark.usefixtures("credentials")
def test_creation_without_a_check_makes_it_available_and_deletion_removes_it_from_the_catalog(
    api_client: client.ApiClient, namespace: str
) -> None:
    create(api_client, namespace, registered_service("orders-db", environments=["dev"]))
    found = wait_state(api_client, namespace, "orders-db", "Available")
    assert condition(found, "Healthy")["reason"] == "NoHealthCheck"
    assert condition(found, "Ready")["status"] == "True"
    expected = {"new -> Registered", "Registered -> Available"}
    assert wait_transitions(api_client, namespace, "orders-db", expected) == expected
    wait_for(lambda: catalog_names(api_client, namespace, "dev") == ["orders-db"], 10, "the dev catalog")

    delete(api_client, namespace, RS, "orders-db")
    wait_for(lambda: catalog_names(api_client, namespace, "dev") is None, 10, "the dev catalog to go")


@pytest.mark.usefixtures("credentials")
def test_registered_until_the_first_check_passes_and_only_then_in_the_catalog(
    api_client: client.ApiClient, namespace: str
) -> None:
    with http_target(delay=2.0) as target:
        check = {"http": {"url": f"http://$(host):{target.port}/health"}, "periodSeconds": 30}
        create(
            api_client,
            namespace,
            registered_service("slow", endpoints={"host": "127.0.0.1"}, environments=["dev"], healthcheck=check),
        )
        wait_state(api_client, namespace, "slow", "Registered", timeout=10)
        assert catalog_names(api_client, namespace, "dev") in (None, [])  # not Available yet: not offered
        found = wait_state(api_client, namespace, "slow", "Available", timeout=15)
        assert condition(found, "Healthy")["message"] == f"HTTP 200 from 127.0.0.1:{target.port}"
        wait_for(lambda: catalog_names(api_client, namespace, "dev") == ["slow"], 10, "the dev catalog")
        assert target.requests == 1  # one check per period, not one per reconcile


@pytest.mark.usefixtures("credentials")
def test_a_failing_check_counts_to_the_threshold_then_unreachable_and_back(
    api_client: client.ApiClient, namespace: str
) -> None:
    with tcp_target() as target:
        target.down()
        check = {"tcp": {"host": "$(host)", "port": target.port}, "periodSeconds": 1, "failureThreshold": 3}
        create(api_client, namespace, registered_service("db", endpoints={"host": "127.0.0.1"}, healthcheck=check))
        wait_for(lambda: status(api_client, namespace, RS, "db").get("consecutiveFailures") == 1, 10, "one failure")
        below = status(api_client, namespace, RS, "db")
        assert below["state"] == "Registered"  # one failure is not enough
        assert condition(below, "Healthy")["status"] == "False"
        found = wait_state(api_client, namespace, "db", "Unreachable", timeout=15)
        assert found["consecutiveFailures"] == 3
        assert f"TCP connect to 127.0.0.1:{target.port} failed" in condition(found, "Healthy")["message"]

        target.up()
        found = wait_state(api_client, namespace, "db", "Available", timeout=10)
        assert found["consecutiveFailures"] == 0
    expected = {"new -> Registered", "Registered -> Unreachable", "Unreachable -> Available"}
    assert wait_transitions(api_client, namespace, "db", expected) == expected


@pytest.mark.usefixtures("credentials")
def test_an_unresolvable_host_is_unreachable(api_client: client.ApiClient, namespace: str) -> None:
    check = {"tcp": {"host": "$(host)", "port": 5432}, "periodSeconds": 1, "failureThreshold": 1}
    create(
        api_client,
        namespace,
        registered_service("ghost", endpoints={"host": "no-such-host.invalid"}, healthcheck=check),
    )
    found = wait_state(api_client, namespace, "ghost", "Unreachable")
    assert "does not resolve" in condition(found, "Healthy")["message"]


def test_a_missing_secret_makes_it_undetermined_until_the_secret_appears(
    api_client: client.ApiClient, namespace: str
) -> None:
    create(api_client, namespace, registered_service("orders-db", environments=["dev"]))
    found = wait_state(api_client, namespace, "orders-db", "Undetermined")
    healthy = condition(found, "Healthy")
    assert (healthy["status"], healthy["reason"]) == ("Unknown", "SecretMissing")
    assert "Secret 'db-credentials' (endpoint 'password') not found" in healthy["message"]
    assert catalog_names(api_client, namespace, "dev") == []

    put_secret(api_client, namespace, "db-credentials", {"password": "pw"})  # the Secret's watch reacts
    wait_state(api_client, namespace, "orders-db", "Available", timeout=10)
    wait_for(lambda: catalog_names(api_client, namespace, "dev") == ["orders-db"], 10, "the dev catalog")


@pytest.mark.usefixtures("credentials")
def test_a_container_check_runs_as_a_job_and_is_undetermined_without_a_kubelet(
    api_client: client.ApiClient, namespace: str
) -> None:
    batch = client.BatchV1Api(api_client)
    check = {"container": {"image": "postgres:14", "command": "pg_isready -h $HOST"}, "periodSeconds": 2}
    create(api_client, namespace, registered_service("pg", healthcheck=check))
    job_name = names.healthcheck_name("pg")
    job = wait_for(lambda: _job(batch, namespace, job_name), 10, "the health-check Job")
    container = job.spec.template.spec.containers[0]
    assert container.image == "postgres:14" and container.command == ["/bin/sh", "-c", "pg_isready -h $HOST"]
    assert container.volume_mounts[0].mount_path == "/bindings/pg"
    assert job.spec.template.spec.volumes[0].secret.secret_name == job_name
    assert job.spec.active_deadline_seconds == 2
    assert secret_data(api_client, namespace, job_name) == {
        "host": "pg.example",
        "port": "5432",
        "password": "pw-1",
        "provider": "aws",
        "type": "postgresql",
    }
    found = wait_state(api_client, namespace, "pg", "Undetermined", timeout=15)
    assert condition(found, "Healthy")["reason"] == "HealthCheckDeadlineExceeded"
    assert found["consecutiveFailures"] == 0  # the check could not tell: nothing counted against the service


@pytest.mark.usefixtures("credentials")
def test_container_verdicts_come_from_the_job(api_client: client.ApiClient, namespace: str) -> None:
    """The test plays the kubelet: it writes the Job's verdict the way the Job controller would."""
    batch = client.BatchV1Api(api_client)
    check = {"container": {"image": "postgres:14"}, "periodSeconds": 30, "failureThreshold": 1}
    create(api_client, namespace, registered_service("good", healthcheck=check))
    create(api_client, namespace, registered_service("bad", healthcheck=check))
    # A finished Job's status as the Job controller writes it (the API server checks it is consistent).
    started = "2026-01-01T00:00:00Z"
    done = "2026-01-01T00:00:05Z"
    succeeded = {
        "startTime": started,
        "completionTime": done,
        "succeeded": 1,
        "conditions": [{"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}],
    }
    failed = {
        "startTime": started,
        "failed": 1,
        "conditions": [
            {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded"},
            {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"},
        ],
    }
    for name, verdict in (("good", succeeded), ("bad", failed)):
        job_name = names.healthcheck_name(name)
        wait_for(lambda job_name=job_name: _job(batch, namespace, job_name), 10, f"{name}'s Job")
        batch.patch_namespaced_job_status(job_name, namespace, {"status": verdict})
    wait_state(api_client, namespace, "good", "Available")
    found = wait_state(api_client, namespace, "bad", "Unreachable")
    assert condition(found, "Healthy")["message"].startswith("health-check container failed (BackoffLimitExceeded)")
    wait_for(lambda: _job(batch, namespace, names.healthcheck_name("good")) is None, 10, "the finished Job to go")


@pytest.mark.usefixtures("credentials")
def test_health_flapping_while_claimed_returns_to_claimed_or_to_available(
    api_client: client.ApiClient, namespace: str
) -> None:
    with tcp_target() as target:
        check = {"tcp": {"host": "127.0.0.1", "port": target.port}, "periodSeconds": 1, "failureThreshold": 1}
        create(api_client, namespace, registered_service("db", healthcheck=check))
        wait_state(api_client, namespace, "db", "Available")
        create(api_client, namespace, service_claim("app"))
        wait_state(api_client, namespace, "db", "Claimed")

        target.down()
        found = wait_state(api_client, namespace, "db", "Unreachable")
        assert found["claimedBy"] == "app"  # the claim keeps its service through the outage
        claim = wait_for(
            lambda: (
                (s := status(api_client, namespace, "ServiceClaim", "app"))
                and condition(s, "Ready")["reason"] == "ServiceNotReady"
                and s
            ),
            10,
            "the claim to report its service down",
        )
        assert claim["state"] == "Resolved" and claim["registeredService"] == "db"

        target.up()
        wait_state(api_client, namespace, "db", "Claimed")
        wait_transitions(api_client, namespace, "db", {"Claimed -> Unreachable", "Unreachable -> Claimed"})

        target.down()
        wait_state(api_client, namespace, "db", "Unreachable")
        delete(api_client, namespace, "ServiceClaim", "app")
        wait_for(lambda: get(api_client, namespace, "ServiceClaim", "app") is None, 10, "the claim to go")
        assert status(api_client, namespace, RS, "db").get("claimedBy") is None  # released, still Unreachable
        assert state(api_client, namespace, "db") == "Unreachable"
        target.up()
        wait_state(api_client, namespace, "db", "Available")
        wait_transitions(api_client, namespace, "db", {"Unreachable -> Available"})


@pytest.mark.usefixtures("credentials")
def test_an_update_is_re_evaluated(api_client: client.ApiClient, namespace: str) -> None:
    create(api_client, namespace, registered_service("db", environments=["dev"]))
    wait_state(api_client, namespace, "db", "Available")
    wait_for(lambda: catalog_names(api_client, namespace, "dev") == ["db"], 10, "the dev catalog")

    patch_spec(api_client, namespace, RS, "db", {"constraints": {"environments": ["stage"]}})
    wait_for(lambda: catalog_names(api_client, namespace, "stage") == ["db"], 10, "the stage catalog")
    wait_for(lambda: catalog_names(api_client, namespace, "dev") is None, 10, "dev to lose its catalog")

    closed = TcpTarget()  # a port nobody listens on
    patch_spec(
        api_client,
        namespace,
        RS,
        "db",
        {"healthcheck": {"tcp": {"host": "127.0.0.1", "port": closed.port}, "periodSeconds": 1, "failureThreshold": 1}},
    )
    wait_state(api_client, namespace, "db", "Unreachable")
    wait_for(lambda: catalog_names(api_client, namespace, "stage") == [], 10, "an unreachable service to leave")


def test_an_invalid_spec_is_undetermined_with_the_reason(api_client: client.ApiClient, namespace: str) -> None:
    manifest = registered_service("broken", endpoints={"host": "h"})
    manifest["spec"]["serviceEndpointDefinition"][0]["valueFromSecret"] = {"name": "s", "key": "k"}
    create(api_client, namespace, manifest)
    found = wait_state(api_client, namespace, "broken", "Undetermined")
    assert condition(found, "Healthy")["reason"] == "SpecInvalid"
    assert "exactly one of value or valueFromSecret" in condition(found, "Healthy")["message"]


def _job(batch: client.BatchV1Api, namespace: str, name: str) -> Any:
    jobs = [j for j in batch.list_namespaced_job(namespace).items if j.metadata.name == name]
    return jobs[0] if jobs and not jobs[0].metadata.deletion_timestamp else None
