"""SFCluster (with and without the kubeconfig Secret it points to), RegisteredService and ServiceClaim under
Pulumi's mocks: registered resources, parents, inputs, secrecy of the kubeconfig, and named failures.
"""

from typing import Any

import pulumi
import pytest

from opbroker.components import InvalidArgsError, RegisteredService, ServiceClaim, SFCluster, testing

CLUSTER_CR = "kubernetes:resource.servicefabrik.io/v1alpha1:SFCluster"
REGISTERED_CR = "kubernetes:primaza.io/v1alpha1:RegisteredService"
CLAIM_CR = "kubernetes:primaza.io/v1alpha1:ServiceClaim"
SECRET = "kubernetes:core/v1:Secret"


def run(program: Any, **mocked: Any) -> testing.RecordingMocks:
    with testing.mocked(**mocked) as mocks:
        pulumi.runtime.test(program)()
    return mocks


def test_sfcluster_with_a_kubeconfig_creates_the_secret_it_points_to_first() -> None:
    def program() -> Any:
        cluster = SFCluster(
            "eu-2",
            {
                "cluster_id": "2",
                "kubeconfig": pulumi.Output.secret("apiVersion: v1\nkind: Config\n"),
                "total_capacity": {"cpu": "64", "memory": "256Gi"},
                "scheduling_limit_percentage": 80,
                "labels": {"region": "eu"},
            },
        )
        return pulumi.Output.all(cluster.object_name, cluster.secret_name)

    mocks = run(program)

    assert mocks.summary() == [("opbroker:index:SFCluster", "eu-2"), (SECRET, "eu-2-kubeconfig"), (CLUSTER_CR, "eu-2")]
    component, secret, cr = mocks.registrations
    assert secret.parent == component.urn and cr.parent == component.urn
    assert secret.urn in cr.dependencies
    assert testing.is_secret(secret.inputs["stringData"])
    assert secret.plain_inputs() == {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": "2-kubeconfig",
            "namespace": "opbroker",
            "labels": {"opbroker.io/pulumi-component": "SFCluster"},
        },
        "stringData": {"kubeconfig": "apiVersion: v1\nkind: Config\n"},
    }
    assert cr.plain_inputs() == {
        "apiVersion": "resource.servicefabrik.io/v1alpha1",
        "kind": "SFCluster",
        "metadata": {
            "name": "2",
            "namespace": "opbroker",
            "labels": {"opbroker.io/pulumi-component": "SFCluster", "region": "eu"},
            "annotations": {"pulumi.com/patchForce": "true"},
        },
        "spec": {
            "secretRef": "2-kubeconfig",
            "totalCapacity": {"cpu": "64", "memory": "256Gi"},
            "schedulingLimitPercentage": 80,
        },
    }


def test_sfcluster_without_a_kubeconfig_points_at_an_existing_secret() -> None:
    seen: dict[str, Any] = {}

    def program() -> Any:
        cluster = SFCluster("master", {"cluster_id": "1", "secret_ref": "master-kubeconfig", "namespace": "sf"})
        return cluster.secret_name.apply(lambda name: seen.update(secret=name))

    mocks = run(program)

    assert mocks.summary() == [("opbroker:index:SFCluster", "master"), (CLUSTER_CR, "master")]
    assert mocks.one(CLUSTER_CR, "master").plain_inputs()["spec"] == {"secretRef": "master-kubeconfig"}
    assert seen["secret"] == "master-kubeconfig"


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"cluster_id": "1", "scheduling_limit_percentage": 120}, "scheduling_limit_percentage"),
        ({"cluster_id": "Cluster_1"}, "cluster_id"),
        ({"cluster_id": ""}, "cluster_id"),
    ],
)
def test_a_bad_cluster_names_its_field_and_registers_nothing(args: dict[str, Any], field: str) -> None:
    with testing.mocked() as mocks, pytest.raises(InvalidArgsError) as raised:
        pulumi.runtime.test(lambda: SFCluster("c", args))()
    assert mocks.registrations == []
    assert [path for path, _ in raised.value.problems] == [field]


REGISTERED = {
    "service_class_identity": [{"name": "type", "value": "postgresql"}, {"name": "version", "value": "14"}],
    "service_endpoint_definition": [
        {"name": "host", "value": "orders-db.example.internal"},
        {"name": "password", "value_from_secret": {"name": "orders-db-credentials", "key": "password"}},
    ],
    "constraints": {"environments": ["!prod"]},
    "healthcheck": {"tcp": {"host": "orders-db.example.internal", "port": 5432}},
    "sla": "L3",
    "namespace": "primaza-system",
}


def test_registered_service_registers_the_model_in_wire_spelling() -> None:
    mocks = run(lambda: RegisteredService("orders-db", REGISTERED).object_name)

    component, cr = mocks.registrations
    assert (component.type, cr.type, cr.name, cr.parent) == (
        "opbroker:index:RegisteredService",
        REGISTERED_CR,
        "orders-db",
        component.urn,
    )
    assert cr.plain_inputs()["metadata"]["name"] == "orders-db"
    assert cr.plain_inputs()["metadata"]["namespace"] == "primaza-system"
    assert cr.plain_inputs()["spec"] == {
        "serviceClassIdentity": [{"name": "type", "value": "postgresql"}, {"name": "version", "value": "14"}],
        "serviceEndpointDefinition": [
            {"name": "host", "value": "orders-db.example.internal"},
            {"name": "password", "valueFromSecret": {"name": "orders-db-credentials", "key": "password"}},
        ],
        "constraints": {"environments": ["!prod"]},
        "healthcheck": {
            "tcp": {"host": "orders-db.example.internal", "port": 5432},
            "periodSeconds": 60,
            "failureThreshold": 3,
        },
        "sla": "L3",
    }


def test_service_claim_registers_the_model_and_waits_for_its_service() -> None:
    def program() -> Any:
        service = RegisteredService("orders-db", REGISTERED)
        claim = ServiceClaim(
            "orders-app-db",
            {
                "service_class_identity": [{"name": "type", "value": "postgresql"}],
                "service_endpoint_definition_keys": ["host", "password"],
                "environment_tag": "dev",
                "application": {"selector": {"match_labels": {"app": "orders"}}},
                "object_name": "orders-db-claim",
            },
            pulumi.ResourceOptions(depends_on=[service]),
        )
        return claim.object_name

    mocks = run(program)

    claim = mocks.one(CLAIM_CR, "orders-app-db")
    assert claim.parent == mocks.one("opbroker:index:ServiceClaim", "orders-app-db").urn
    assert mocks.one(REGISTERED_CR, "orders-db").urn in claim.dependencies
    assert claim.plain_inputs()["metadata"]["name"] == "orders-db-claim"
    assert claim.plain_inputs()["spec"] == {
        "serviceClassIdentity": [{"name": "type", "value": "postgresql"}],
        "serviceEndpointDefinitionKeys": ["host", "password"],
        "environmentTag": "dev",
        "application": {"apiVersion": "apps/v1", "kind": "Deployment", "selector": {"matchLabels": {"app": "orders"}}},
    }


def test_a_registered_service_with_two_health_checks_is_refused() -> None:
    args = {**REGISTERED, "healthcheck": {"tcp": {"host": "h", "port": 1}, "http": {"url": "http://h/"}}}
    with pytest.raises(InvalidArgsError) as raised:
        pulumi.runtime.test(lambda: RegisteredService("orders-db", args))()
    assert raised.value.problems == (("healthcheck", "healthcheck: exactly one of container, tcp or http is required"),)


def test_a_claim_naming_both_a_workload_and_a_selector_is_refused() -> None:
    args = {
        "service_class_identity": [{"name": "type", "value": "postgresql"}],
        "service_endpoint_definition_keys": ["host"],
        "environment_tag": "dev",
        "application": {"name": "orders", "selector": {"match_labels": {"app": "orders"}}},
    }
    with pytest.raises(InvalidArgsError) as raised:
        pulumi.runtime.test(lambda: ServiceClaim("claim", args))()
    assert [path for path, _ in raised.value.problems] == ["application"]
