"""Broker, Instance and Binding (the Service Catalog kinds) under Pulumi's mocks: the manifests they register
(apiVersion, kind, camelCase spec), the Secrets holding credentials and secret parameters (Pulumi secrets, named
by the custom resource, never in it), waiting for Ready, the Binding waiting for its Instance, and bad args
refused before anything is registered, naming the arg.
"""

import base64
import json
from typing import Any

import pulumi
import pytest

from opbroker.components import Binding, Broker, InvalidArgsError, testing
from opbroker.components import Instance as InstanceComponent
from opbroker.provider import host

GROUP_VERSION = "servicecatalog.k8s.io/v1alpha1"
BROKER_CR = f"kubernetes:{GROUP_VERSION}:Broker"
INSTANCE_CR = f"kubernetes:{GROUP_VERSION}:Instance"
BINDING_CR = f"kubernetes:{GROUP_VERSION}:Binding"
SECRET = "kubernetes:core/v1:Secret"
PASSWORD = "s3cr3t-broker-password"
PEM = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"


def run(program: Any, **mocked: Any) -> testing.RecordingMocks:
    with testing.mocked(**mocked) as mocks:
        pulumi.runtime.test(program)()
    return mocks


def refused(program: Any) -> InvalidArgsError:
    with testing.mocked() as mocks, pytest.raises(InvalidArgsError) as raised:
        pulumi.runtime.test(program)()
    assert mocks.registrations == [], "nothing may be registered for invalid args"
    return raised.value


def secret_anywhere(value: Any, needle: str) -> bool:
    """Whether ``needle`` appears in ``value`` outside a secret wrapper."""
    if testing.is_secret(value):
        return False
    if isinstance(value, dict):
        return any(secret_anywhere(v, needle) for v in value.values())
    if isinstance(value, list):
        return any(secret_anywhere(v, needle) for v in value)
    return isinstance(value, str) and needle in value


# -- Broker -------------------------------------------------------------------------------------------------------


def test_broker_with_basic_auth_creates_a_secret_it_names_and_never_holds_the_password() -> None:
    seen: dict[str, Any] = {}

    def program() -> Any:
        broker = Broker(
            "best-db",
            {
                "url": "https://broker.example.com:8443/osb",
                "basic_auth": {"username": "admin", "password": pulumi.Output.secret(PASSWORD)},
                "credentials_namespace": "brokers",
                "ca_bundle": PEM,
                "relist_behavior": "Manual",
                "labels": {"team": "data"},
            },
        )
        return pulumi.Output.all(broker.object_name, broker.credentials_secret_name).apply(
            lambda values: seen.update(outputs=values)
        )

    mocks = run(program)

    assert mocks.summary() == [("opbroker:index:Broker", "best-db"), (SECRET, "best-db-auth"), (BROKER_CR, "best-db")]
    component, secret, cr = mocks.registrations
    assert secret.parent == component.urn and cr.parent == component.urn
    assert secret.urn in cr.dependencies  # the Secret exists before the controller reads it
    assert testing.is_secret(secret.inputs["stringData"])
    assert set(secret.additional_secret_outputs) == {"data", "stringData"}
    assert secret.plain_inputs() == {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/basic-auth",
        "metadata": {
            "name": "best-db-auth",
            "namespace": "brokers",
            "labels": {"opbroker.io/pulumi-component": "Broker"},
        },
        "stringData": {"username": "admin", "password": PASSWORD},
    }
    assert not secret_anywhere(secret.inputs, PASSWORD)
    assert cr.plain_inputs() == {
        "apiVersion": GROUP_VERSION,
        "kind": "Broker",
        "metadata": {
            "name": "best-db",  # cluster-scoped: no namespace
            "labels": {"opbroker.io/pulumi-component": "Broker", "team": "data"},
            "annotations": {"pulumi.com/patchForce": "true"},
        },
        "spec": {
            "url": "https://broker.example.com:8443/osb",
            "authInfo": {"basic": {"secretRef": {"namespace": "brokers", "name": "best-db-auth"}}},
            "caBundle": base64.b64encode(PEM.encode()).decode(),
            "insecureSkipTLSVerify": False,
            "relistBehavior": "Manual",
            "relistDuration": "15m",
            "relistRequests": 0,
            "brokerAPIVersion": "2.17",  # the model's default
        },
    }
    assert PASSWORD not in json.dumps(cr.plain_inputs())
    assert seen["outputs"] == ["best-db", "best-db-auth"]


def test_broker_with_a_bearer_token_and_wait_for_ready() -> None:
    def program() -> Any:
        return Broker(
            "tokens",
            {
                "url": "http://broker.brokers.svc:8080",
                "bearer_token": pulumi.Output.secret("t0ken"),
                "credentials_secret_name": "osb-token",
                "relist_duration": "1h30m",
                "wait_for_ready": True,
            },
        ).object_name

    mocks = run(program)

    secret = mocks.one(SECRET, "tokens-auth").plain_inputs()
    assert (secret["type"], secret["metadata"]["namespace"], secret["stringData"]) == (
        "Opaque",
        "opbroker",  # the control plane's namespace by default
        {"token": "t0ken"},
    )
    cr = mocks.one(BROKER_CR, "tokens").plain_inputs()
    assert cr["spec"]["authInfo"] == {"bearer": {"secretRef": {"namespace": "opbroker", "name": "osb-token"}}}
    assert cr["spec"]["relistDuration"] == "1h30m"
    assert cr["metadata"]["annotations"]["pulumi.com/waitFor"] == "condition=Ready"


def test_broker_without_credentials_registers_no_secret_and_does_not_wait_by_default() -> None:
    mocks = run(lambda: Broker("open", {"url": "http://open-broker:8080"}).object_name)

    assert mocks.summary() == [("opbroker:index:Broker", "open"), (BROKER_CR, "open")]
    cr = mocks.one(BROKER_CR, "open").plain_inputs()
    assert "authInfo" not in cr["spec"]
    assert "pulumi.com/waitFor" not in cr["metadata"]["annotations"]


def test_a_credentials_namespace_output_goes_to_the_secret_and_the_secret_ref() -> None:
    def program() -> Any:
        namespace = pulumi.Output.from_input("from-output")
        return Broker(
            "b",
            {"url": "http://b:8080", "bearer_token": "x", "credentials_namespace": namespace},
        ).object_name

    mocks = run(program)
    assert mocks.one(SECRET, "b-auth").plain_inputs()["metadata"]["namespace"] == "from-output"
    cr = mocks.one(BROKER_CR, "b").plain_inputs()
    assert cr["spec"]["authInfo"]["bearer"]["secretRef"]["namespace"] == "from-output"


@pytest.mark.parametrize(
    ("args", "field", "message"),
    [
        ({"url": "ftp://broker"}, "url", "is not an http:// or https:// URL with a host"),
        ({}, "url", "is required"),
        ({"url": "http://b", "relist_duration": "0s"}, "relist_duration", "greater than zero"),
        ({"url": "http://b", "relist_duration": "fortnightly"}, "relist_duration", "is not a duration"),
        ({"url": "http://b", "relist_behavior": "Sometimes"}, "relist_behavior", "Duration"),
        ({"url": "http://b", "ca_bundle": "not a pem"}, "ca_bundle", "PEM bundle"),
        ({"url": "http://b", "object_name": "Best_DB"}, "object_name", "not a valid Kubernetes name"),
        (
            {"url": "http://b", "bearer_token": "t", "basic_auth": {"username": "u", "password": "p"}},
            "bearer_token",
            "not both",
        ),
        ({"url": "http://b", "basic_auth": {"username": "u"}}, "basic_auth.password", "is required"),
        (
            {"url": "http://b", "bearer_token": "t", "credentials_namespace": "Brokers"},
            "credentials_namespace",
            "namespace",
        ),
        ({"url": "http://b", "bearer_token": "t", "credentials_secret_name": "a_b"}, "credentials_secret_name", "name"),
        ({"url": pulumi.Output.from_input("http://b")}, "url", "must be a plain value"),
    ],
)
def test_a_bad_broker_is_refused_naming_the_arg(args: dict[str, Any], field: str, message: str) -> None:
    error = refused(lambda: Broker("b", args))
    assert [path for path, _ in error.problems] == [field]
    assert message in error.problems[0][1]
    assert str(error).startswith("Broker 'b' is invalid:")


def test_the_broker_password_never_appears_in_a_refusal() -> None:
    error = refused(lambda: Broker("b", {"url": "ftp://b", "basic_auth": {"username": "u", "password": PASSWORD}}))
    assert PASSWORD not in str(error)


# -- Instance -----------------------------------------------------------------------------------------------------


def test_instance_registers_the_spec_in_wire_spelling_with_its_secret_parameters_in_a_secret() -> None:
    def program() -> Any:
        instance = InstanceComponent(
            "orders-db",
            {
                "namespace": "orders",
                "service_class_name": "smalldb",
                "plan_name": "small",
                "parameters": {"storageGB": 10, "tags": ["a"]},
                "secret_parameters": {"adminPassword": pulumi.Output.secret("pw"), "region": "eu"},
                "parameters_from": [{"secret_key_ref": {"name": "shared", "key": "defaults"}}],
                "external_id": "7d2a",
                "share_with": ["orders-apps"],
            },
        )
        return pulumi.Output.all(instance.object_name, instance.namespace)

    mocks = run(program)

    assert mocks.summary() == [
        ("opbroker:index:Instance", "orders-db"),
        (SECRET, "orders-db-parameters"),
        (INSTANCE_CR, "orders-db"),
    ]
    _, secret, cr = mocks.registrations
    assert secret.urn in cr.dependencies
    assert not secret_anywhere(secret.inputs, "pw")
    assert secret.plain_inputs()["metadata"]["namespace"] == "orders"
    assert json.loads(secret.plain_inputs()["stringData"]["parameters"]) == {"adminPassword": "pw", "region": "eu"}
    assert cr.plain_inputs() == {
        "apiVersion": GROUP_VERSION,
        "kind": "Instance",
        "metadata": {
            "name": "orders-db",
            "namespace": "orders",
            "labels": {"opbroker.io/pulumi-component": "Instance"},
            "annotations": {"pulumi.com/patchForce": "true"},
        },
        "spec": {
            "serviceClassName": "smalldb",
            "planName": "small",
            "parameters": {"storageGB": 10, "tags": ["a"]},
            "parametersFrom": [
                {"secretKeyRef": {"name": "shared", "key": "defaults"}},
                {"secretKeyRef": {"name": "orders-db-parameters", "key": "parameters"}},
            ],
            "externalID": "7d2a",
            "shareWith": ["orders-apps"],
            "updateRequests": 0,
        },
    }


def test_instance_secret_parameters_may_be_one_output() -> None:
    def program() -> Any:
        parameters = pulumi.Output.secret({"password": "pw"})
        return InstanceComponent(
            "db", {"namespace": "apps", "service_class_name": "db", "secret_parameters": parameters}
        ).object_name

    mocks = run(program)
    secret = mocks.one(SECRET, "db-parameters")
    assert json.loads(secret.plain_inputs()["stringData"]["parameters"]) == {"password": "pw"}
    assert not secret_anywhere(secret.inputs, "pw")


@pytest.mark.parametrize(
    ("args", "field", "message"),
    [
        ({"service_class_name": "db"}, "namespace", "is required"),
        ({"namespace": "apps"}, "service_class_name", "is required"),
        ({"namespace": "apps", "service_class_name": "has space"}, "service_class_name", "pattern"),
        ({"namespace": "Apps", "service_class_name": "db"}, "namespace", "not a valid namespace name"),
        ({"namespace": "apps", "service_class_name": "db", "update_requests": -1}, "update_requests", "0"),
        ({"namespace": "apps", "service_class_name": "db", "share_with": ["Apps"]}, "share_with[0]", "namespace"),
        (
            {"namespace": "apps", "service_class_name": "db", "parameters": {"a": 1}, "secret_parameters": {"a": 2}},
            "secret_parameters",
            "'a' also in parameters",
        ),
        ({"namespace": "apps", "service_class_name": "db", "secret_parameters": "pw"}, "secret_parameters", "object"),
        (
            {"namespace": "apps", "service_class_name": "db", "secret_parameters": {}, "parameters_secret_name": "A"},
            "parameters_secret_name",
            "not a valid Kubernetes name",
        ),
        (
            {"namespace": "apps", "service_class_name": "db", "parameters_from": [{"secret_key_ref": {"name": "s"}}]},
            "parameters_from[0].secret_key_ref.key",
            "required",
        ),
    ],
)
def test_a_bad_instance_is_refused_naming_the_arg(args: dict[str, Any], field: str, message: str) -> None:
    error = refused(lambda: InstanceComponent("db", args))
    assert [path for path, _ in error.problems] == [field]
    assert message in error.problems[0][1]


# -- Binding ------------------------------------------------------------------------------------------------------


def test_binding_waits_for_its_instance_and_exposes_the_credentials_secret_name() -> None:
    seen: dict[str, Any] = {}

    def program() -> Any:
        instance = InstanceComponent("orders-db", {"namespace": "data", "service_class_name": "smalldb"})
        binding = Binding(
            "orders-app",
            {
                "namespace": "orders",
                "instance_name": instance.object_name,
                "instance_namespace": instance.namespace,
                "secret_name": "orders-db-credentials",
                "application": {"selector": {"match_labels": {"app": "orders"}}},
                "parameters": {"role": "rw"},
                "wait_for_ready": True,
            },
        )
        return pulumi.Output.all(binding.secret_name, binding.object_name, binding.namespace).apply(
            lambda values: seen.update(outputs=values)
        )

    mocks = run(program)

    binding = mocks.one(BINDING_CR, "orders-app")
    assert binding.parent == mocks.one("opbroker:index:Binding", "orders-app").urn
    assert mocks.one(INSTANCE_CR, "orders-db").urn in binding.dependencies
    assert binding.plain_inputs() == {
        "apiVersion": GROUP_VERSION,
        "kind": "Binding",
        "metadata": {
            "name": "orders-app",
            "namespace": "orders",
            "labels": {"opbroker.io/pulumi-component": "Binding"},
            "annotations": {"pulumi.com/patchForce": "true", "pulumi.com/waitFor": "condition=Ready"},
        },
        "spec": {
            "instanceRef": {"name": "orders-db", "namespace": "data"},
            "secretName": "orders-db-credentials",
            "parameters": {"role": "rw"},
            "application": {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "selector": {"matchLabels": {"app": "orders"}},
            },
        },
    }
    assert seen["outputs"] == ["orders-db-credentials", "orders-app", "orders"]


def test_binding_secret_name_defaults_to_its_name_and_depends_on_passes_down() -> None:
    seen: dict[str, Any] = {}

    def program() -> Any:
        instance = InstanceComponent("db", {"namespace": "apps", "service_class_name": "db"})
        binding = Binding(
            "db-binding",
            {"namespace": "apps", "instance_name": "db", "secret_parameters": {"token": pulumi.Output.secret("x")}},
            pulumi.ResourceOptions(depends_on=[instance]),
        )
        return binding.secret_name.apply(lambda name: seen.update(secret=name))

    mocks = run(program)

    cr = mocks.one(BINDING_CR, "db-binding")
    assert mocks.one(INSTANCE_CR, "db").urn in cr.dependencies  # depends_on reaches the custom resource
    assert cr.plain_inputs()["spec"] == {
        "instanceRef": {"name": "db"},
        "parametersFrom": [{"secretKeyRef": {"name": "db-binding-binding-parameters", "key": "parameters"}}],
    }
    assert mocks.one(SECRET, "db-binding-parameters").urn in cr.dependencies
    assert seen["secret"] == "db-binding"


@pytest.mark.parametrize(
    ("args", "field", "message"),
    [
        ({"namespace": "apps"}, "instance_name", "is required"),
        ({"namespace": "my_apps", "instance_name": "db"}, "namespace", "not a valid namespace name"),
        ({"namespace": "apps", "instance_name": "Orders_DB"}, "instance_name", "try 'orders-db'"),
        ({"namespace": "apps", "instance_name": "db", "instance_namespace": "-x"}, "instance_namespace", "namespace"),
        ({"namespace": "apps", "instance_name": "db", "secret_name": "a/b"}, "secret_name", "Kubernetes name"),
        (
            {"namespace": "apps", "instance_name": "db", "application": {"name": "a", "selector": {}}},
            "application",
            "exactly one of name or selector",
        ),
        (
            {"namespace": "apps", "instance_name": "db", "application": pulumi.Output.from_input({})},
            "application",
            "plain",
        ),
    ],
)
def test_a_bad_binding_is_refused_naming_the_arg(args: dict[str, Any], field: str, message: str) -> None:
    error = refused(lambda: Binding("b", args))
    assert [path for path, _ in error.problems] == [field]
    assert message in error.problems[0][1]


# -- through the component provider (how Pulumi YAML and other languages create them) ---------------------------


def test_the_provider_builds_a_broker_from_camel_case_inputs_keeping_the_password_secret() -> None:
    provider = host.provider()

    def program() -> Any:
        inputs = {
            "url": "http://b:8080",
            "basicAuth": {"username": "u", "password": pulumi.Output.secret(PASSWORD)},
            "insecureSkipTlsVerify": True,
        }
        return provider.construct("b", "opbroker:index:Broker", inputs, pulumi.ResourceOptions()).urn

    mocks = run(program)
    secret = mocks.one(SECRET, "b-auth")
    assert not secret_anywhere(secret.inputs, PASSWORD)
    assert secret.plain_inputs()["stringData"] == {"username": "u", "password": PASSWORD}
    assert mocks.one(BROKER_CR, "b").plain_inputs()["spec"]["insecureSkipTLSVerify"] is True
