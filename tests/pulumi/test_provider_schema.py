"""The component provider: its plugin manifest and entry point, the schema it infers from the components'
typed args (and that the checked-in ``provider/schema.json`` matches it), and ``construct`` — how other
Pulumi languages create the components — under Pulumi's mocks.
"""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import pulumi
import pytest
import yaml
from pulumi.provider.server import ComponentInitError
from pulumi.runtime.proto import provider_pb2, provider_pb2_grpc

from opbroker.components import COMPONENTS, testing
from opbroker.provider import host, schemagen

REPO = Path(__file__).resolve().parents[2]
PROVIDER = REPO / "provider"
TOKENS = [f"opbroker:index:{c.__name__}" for c in COMPONENTS]
OSB_TOKENS = ["opbroker:index:ServiceInstance", "opbroker:index:ServiceBinding"]


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return host.schema()


def test_the_plugin_manifest_declares_a_python_plugin() -> None:
    manifest = yaml.safe_load((PROVIDER / "PulumiPlugin.yaml").read_text())
    assert manifest["runtime"]["name"] == "python"
    # No virtualenv named: the folder is provider/ of a checkout or, installed, site-packages/opbroker/provider,
    # and a path relative to it fits only one of them. The executable beside it finds the interpreter itself.
    assert "virtualenv" not in manifest["runtime"].get("options", {})
    assert os.access(PROVIDER / "pulumi-resource-opbroker", os.X_OK)


@pytest.mark.process
def test_the_plugin_serves_every_component_under_the_opbroker_name() -> None:
    # Started the way the engine starts it (the executable beside PulumiPlugin.yaml, which the engine prefers to
    # the manifest's runtime; the entry point __main__.py): it prints its port and answers GetSchema over gRPC.
    plugin = subprocess.Popen(
        [str(PROVIDER / "pulumi-resource-opbroker"), "127.0.0.1:1"],
        stdout=subprocess.PIPE,
        env={**os.environ, "OPBROKER_PYTHON": sys.executable},
        text=True,
    )
    try:
        assert plugin.stdout is not None
        port = int(plugin.stdout.readline())
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = provider_pb2_grpc.ResourceProviderStub(channel)
            reply = stub.GetSchema(provider_pb2.GetSchemaRequest(), timeout=30)
        served = json.loads(reply.schema)
    finally:
        plugin.terminate()
        plugin.wait(10)
    assert served["name"] == host.PACKAGE == "opbroker"
    assert sorted(served["resources"]) == sorted(TOKENS + OSB_TOKENS)


def test_the_schema_has_every_component_with_documented_inputs(schema: dict[str, Any]) -> None:
    assert schema["name"] == "opbroker"
    assert sorted(schema["resources"]) == sorted(TOKENS + OSB_TOKENS)
    for token in TOKENS:  # the components (the OSB resources have a test of their own)
        resource = schema["resources"][token]
        assert resource["isComponent"] is True
        assert resource["description"]
        for name, prop in resource["inputProperties"].items():
            assert prop.get("description"), f"{token}.{name} has no description"
        for name, prop in resource["properties"].items():
            assert prop.get("description"), f"{token} output {name} has no description"


def test_the_schema_spells_inputs_in_camel_case_with_the_right_requirements(schema: dict[str, Any]) -> None:
    plan = schema["resources"]["opbroker:index:SFPlan"]
    assert sorted(plan["requiredInputs"]) == ["description", "id", "name", "serviceId", "templates"]
    assert plan["inputProperties"]["templates"]["items"]["$ref"] == "#/types/opbroker:index:TemplateArgs"
    assert plan["inputProperties"]["autoUpdateInstances"]["type"] == "boolean"
    assert plan["inputProperties"]["context"]["additionalProperties"]["$ref"] == "pulumi.json#/Any"
    assert set(plan["properties"]) == {"objectName", "namespace", "planId", "serviceId"}
    manager = schema["types"]["opbroker:index:ManagerArgs"]["properties"]
    assert set(manager) == {"async", "asyncBinding"}
    template = schema["types"]["opbroker:index:TemplateArgs"]
    assert template["required"] == ["action"]
    sources = {"content", "contentEncoded", "url", "file"}
    assert set(template["properties"]) == {
        "action",
        "type",
        *sources,
        "allowHttp",
        "digest",
        "singleton",
        "adopt",
        "deletionPolicy",
        "drift",
    }
    actions = [e["value"] for e in schema["types"]["opbroker:index:TemplateAction"]["enum"]]
    assert actions == ["provision", "bind", "unbind", "sources", "status", "clusterSelector"]
    control_plane = schema["resources"]["opbroker:index:ControlPlane"]
    assert control_plane["requiredInputs"] == ["image"]
    assert set(control_plane["properties"]) == {
        "namespace",
        "crdNames",
        "brokerUrl",
        "brokerUsername",
        "brokerPassword",
        "brokerCredentialsSecret",
    }
    broker = schema["types"]["opbroker:index:BrokerArgs"]["properties"]
    assert "plain" not in broker["password"]  # the one input that may be a (secret) Output
    cluster = schema["resources"]["opbroker:index:SFCluster"]["inputProperties"]
    assert "plain" not in cluster["kubeconfig"]
    assert cluster["clusterId"]["plain"] is True


def test_the_osb_resources_are_custom_resources_with_their_secrets_marked(schema: dict[str, Any]) -> None:
    instance, binding = (schema["resources"][token] for token in OSB_TOKENS)
    for resource in (instance, binding):
        assert not resource.get("isComponent")
        assert resource["inputProperties"]["brokerPassword"]["secret"] is True
        assert resource["properties"]["brokerPassword"]["secret"] is True
        assert {"brokerUrl", "brokerUsername", "brokerPassword", "serviceId", "planId"} <= set(
            resource["requiredInputs"]
        )
        for name, prop in resource["properties"].items():
            assert prop.get("description"), f"{name} has no description"
    assert binding["properties"]["credentials"]["secret"] is True
    assert "credentials" not in binding["inputProperties"]
    assert "instanceId" in binding["requiredInputs"] and "instanceId" not in instance["requiredInputs"]
    assert {"dashboardUrl", "state", "brokerApiVersion", "instanceId"} <= set(instance["properties"])
    assert instance["inputProperties"]["timeout"]["type"] == "number"
    assert instance["inputProperties"]["parameters"]["additionalProperties"]["$ref"] == "pulumi.json#/Any"


def test_the_checked_in_schema_is_current() -> None:
    checked_in = (PROVIDER / "schema.json").read_text()
    assert checked_in == schemagen.render(), "regenerate: python -m opbroker.provider.schemagen > provider/schema.json"
    assert json.loads(checked_in)["version"] == host.version()


def test_construct_maps_schema_names_and_builds_the_component() -> None:
    provider = host.provider()
    state: dict[str, Any] = {}

    def program() -> Any:
        result = provider.construct(
            "pg-small",
            "opbroker:index:SFPlan",
            {
                "id": "plan-1",
                "name": "small",
                "description": "d",
                "serviceId": "svc-1",
                "manager": {"async": True, "asyncBinding": True},
                "schemas": {"serviceInstance": {"create": {"parameters": {"type": "object"}}}},
                "templates": [{"action": "provision", "content": "kind: x"}],
            },
            pulumi.ResourceOptions(),
        )
        return pulumi.Output.all(result.urn, pulumi.Output.all(**result.state)).apply(
            lambda values: state.update(urn=values[0], outputs=values[1])
        )

    with testing.mocked() as mocks:
        pulumi.runtime.test(program)()

    assert mocks.summary() == [
        ("opbroker:index:SFPlan", "pg-small"),
        ("kubernetes:osb.servicefabrik.io/v1alpha1:SFPlan", "pg-small"),
    ]
    spec = mocks.registrations[1].plain_inputs()["spec"]
    assert spec["manager"] == {"async": True, "asyncBinding": True}
    assert spec["schemas"] == {"service_instance": {"create": {"parameters": {"type": "object"}}}}
    assert state["urn"].endswith("opbroker:index:SFPlan::pg-small")
    assert state["outputs"] == {
        "objectName": "plan-1",
        "namespace": "opbroker",
        "planId": "plan-1",
        "serviceId": "svc-1",
    }


def test_construct_builds_the_control_plane_with_integer_inputs() -> None:
    provider = host.provider()

    def program() -> Any:
        # Numbers arrive as floats over the wire; the provider turns schema integers back into ints.
        inputs = {"image": "i", "controller": {"replicas": 3.0}, "broker": {"autoscaling": {"maxReplicas": 4.0}}}
        return provider.construct("cp", "opbroker:index:ControlPlane", inputs, pulumi.ResourceOptions()).urn

    with testing.mocked() as mocks:
        pulumi.runtime.test(program)()
    controller = mocks.one("kubernetes:apps/v1:Deployment", "cp-controller").plain_inputs()
    assert controller["spec"]["replicas"] == 3
    hpa = mocks.one("kubernetes:autoscaling/v2:HorizontalPodAutoscaler", "cp-broker").plain_inputs()
    assert hpa["spec"]["maxReplicas"] == 4


def test_construct_builds_a_sharded_control_plane_from_the_wire_numbers() -> None:
    """``controller.shards`` over the wire (a float, as every number): a StatefulSet of shards * replicas pods and
    ``--shards 3``, not ``3.0``, on both commands."""
    provider = host.provider()

    def program() -> Any:
        inputs = {"image": "i", "controller": {"shards": 3.0, "replicas": 2.0}}
        return provider.construct("cp", "opbroker:index:ControlPlane", inputs, pulumi.ResourceOptions()).urn

    with testing.mocked() as mocks:
        pulumi.runtime.test(program)()
    controller = mocks.one("kubernetes:apps/v1:StatefulSet", "cp-controller").plain_inputs()
    assert controller["spec"]["replicas"] == 6
    broker = mocks.one("kubernetes:apps/v1:Deployment", "cp-broker").plain_inputs()
    for workload in (controller, broker):
        command = workload["spec"]["template"]["spec"]["containers"][0]["command"]
        assert command[command.index("--shards") + 1] == "3"


def test_construct_reports_a_bad_plan_naming_the_field() -> None:
    provider = host.provider()

    def program() -> Any:
        inputs = {"id": "p", "name": "n", "description": "d", "serviceId": "s", "templates": [{"action": "bind"}]}
        return provider.construct("bad", "opbroker:index:SFPlan", inputs, pulumi.ResourceOptions()).urn

    with testing.mocked() as mocks, pytest.raises(pulumi.InputPropertiesError) as raised:
        pulumi.runtime.test(program)()
    assert mocks.registrations == []
    assert "SFPlan 'bad' is invalid" in str(raised.value)
    assert "templates[0]: exactly one of content, contentEncoded or url is required" in str(raised.value)
    # A plain InputPropertiesError: the provider server reports its properties to the engine (a RunError or a
    # ComponentInitError comes out as "Unexpected <class ...>", the latter with a traceback: the real engine).
    assert not isinstance(raised.value, pulumi.RunError | ComponentInitError)
    assert raised.value.errors[0]["property_path"] == "templates[0]"


def test_construct_refuses_a_missing_required_input() -> None:
    provider = host.provider()
    with pytest.raises(pulumi.InputPropertyError) as raised:
        provider.construct("cp", "opbroker:index:ControlPlane", {}, pulumi.ResourceOptions())
    assert raised.value.property_path == "image"
