"""The policy pack's checks, called directly (the PolicyPack itself is only built in the pack's entry point).

Inputs are recorded from real programs under Pulumi's mocks — the ControlPlane's roles, a component's
SFPlan, and a hand-written ``CustomResource`` carrying Service Fabrik's seed plan (gotemplate) — then
mutated to show each violation.
"""

import ast
import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import pulumi
import pulumi_kubernetes as k8s
import pytest
import yaml
from google.protobuf import empty_pb2, struct_pb2
from pulumi.runtime.proto import analyzer_pb2, analyzer_pb2_grpc
from pulumi_policy import EnforcementLevel, PolicyResourceOptions, ResourceValidationArgs
from pulumi_policy.proxy import unknown_checking_proxy

from opbroker.components import ControlPlane, SFPlan, testing
from opbroker.provider import policies

REPO = Path(__file__).resolve().parents[2]
SEED_PLAN = REPO / "tests" / "data" / "seeds" / "sfplan-postgresql-zalando.yaml"
PLAN_CR = policies.SFPLAN_TYPE
CLUSTER_ROLE = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole"
ROLE = "kubernetes:rbac.authorization.k8s.io/v1:Role"

GOOD_PLAN = {
    "id": "plan-small",
    "name": "small",
    "description": "d",
    "service_id": "svc",
    "schemas": {
        "service_instance": {
            "create": {"parameters": {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}}
        },
        "service_binding": {
            "create": {"parameters": {"type": "object", "properties": {"role": {"enum": ["ro", "rw"]}}}}
        },
    },
    "templates": [{"action": "provision", "content": "kind: postgresql"}],
}


@pytest.fixture(scope="module")
def recorded() -> dict[tuple[str, str], dict[str, Any]]:
    """Inputs as the engine sees them, from one program: control plane, a component plan, a raw seed plan."""
    seed = yaml.safe_load(SEED_PLAN.read_text())

    def program() -> Any:
        cp = ControlPlane("cp", {"image": "i"})
        plan = SFPlan("small", GOOD_PLAN, pulumi.ResourceOptions(depends_on=[cp]))
        raw = k8s.apiextensions.CustomResource(
            "seed", api_version=seed["apiVersion"], kind=seed["kind"], metadata={"name": "seed"}, spec=seed["spec"]
        )
        return pulumi.Output.all(plan.plan_id, raw.id)

    with testing.mocked() as mocks:
        pulumi.runtime.test(program)()
    return {(r.type, r.name): r.plain_inputs() for r in mocks.registrations}


def check(policy: Any, resource_type: str, props: dict[str, Any], name: str = "r") -> list[str]:
    """Run a policy's validate the way the analyzer does, collecting violations: the props wrapped in the
    read-only proxies the analyzer hands over (the real engine showed jsonschema refusing those as schemas)."""
    violations: list[str] = []
    args = ResourceValidationArgs(
        resource_type=resource_type,
        props=unknown_checking_proxy(props),
        urn=f"urn:pulumi:test::opbroker::{resource_type}::{name}",
        name=name,
        opts=PolicyResourceOptions(
            protect=False,
            ignore_changes=[],
            delete_before_replace=None,
            aliases=[],
            additional_secret_outputs=[],
            custom_timeouts=None,
            parent=None,
        ),
        provider=None,
    )
    policy.validate(args, lambda message, urn=None: violations.append(message))
    return violations


def test_every_policy_is_mandatory_and_the_pack_is_built_only_in_its_entry_point() -> None:
    assert [p.name for p in policies.POLICIES] == [
        "opbroker-plan-valid",
        "opbroker-parameter-schemas-valid",
        "opbroker-no-wildcard-rbac",
    ]
    assert {p.enforcement_level for p in policies.POLICIES} == {EnforcementLevel.MANDATORY}
    module = ast.parse((REPO / "provider" / "policies.py").read_text())
    assert "PolicyPack" not in {getattr(n.func, "id", "") for n in ast.walk(module) if isinstance(n, ast.Call)}
    pack = REPO / "provider" / "policypack"
    assert "PolicyPack(" in (pack / "__main__.py").read_text()
    assert yaml.safe_load((pack / "PulumiPolicy.yaml").read_text())["runtime"]["name"] == "python"


@pytest.mark.process
def test_the_pack_is_an_executable_analyzer_serving_the_policy_protocol(tmp_path: Path) -> None:
    # Started the way the engine (v3.255+) starts an executable `--policy-pack`: in the program's folder (not the
    # pack's), the engine's address as its argument, the analyzer's port read from the first line of stdout.
    executable = REPO / "provider" / "policypack" / "pulumi-analyzer-opbroker"
    assert os.access(executable, os.X_OK)
    pack = subprocess.Popen(
        [str(executable), "127.0.0.1:1"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        env={**os.environ, "OPBROKER_PYTHON": sys.executable},
        text=True,
    )
    try:
        assert pack.stdout is not None
        port = int(pack.stdout.readline())
        rules = [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]
        properties = struct_pb2.Struct()
        properties.update({"metadata": {"name": "everything"}, "rules": rules})
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = analyzer_pb2_grpc.AnalyzerStub(channel)
            info = stub.GetAnalyzerInfo(empty_pb2.Empty(), timeout=30)
            reply = stub.Analyze(
                analyzer_pb2.AnalyzeRequest(
                    type=CLUSTER_ROLE,
                    properties=properties,
                    urn=f"urn:pulumi:dev::p::{CLUSTER_ROLE}::everything",
                    name="everything",
                ),
                timeout=30,
            )
    finally:
        pack.terminate()
        pack.wait(10)
    assert info.name == "opbroker"
    assert [p.name for p in info.policies] == [p.name for p in policies.POLICIES]
    assert [(d.policyName, d.enforcementLevel) for d in reply.diagnostics] == [
        ("opbroker-no-wildcard-rbac", analyzer_pb2.MANDATORY)
    ]
    assert "grants '*' verbs on '*' resources" in reply.diagnostics[0].message


def test_the_control_plane_rbac_passes(recorded: dict[tuple[str, str], dict[str, Any]]) -> None:
    roles = [(t, props) for (t, _), props in recorded.items() if t in policies.RBAC_TYPES]
    # controller, broker, plan account, leader election, webhook, broker's namespace, registries, namespace writer
    assert len(roles) == 8
    for resource_type, props in roles:
        assert check(policies.NO_WILDCARD_RBAC, resource_type, props) == []


@pytest.mark.parametrize("resource_type", [CLUSTER_ROLE, ROLE])
def test_a_role_granting_everything_is_rejected(
    recorded: dict[tuple[str, str], dict[str, Any]], resource_type: str
) -> None:
    props = copy.deepcopy(recorded[(CLUSTER_ROLE, "cp-controller")])
    index = len(props["rules"])
    props["rules"].append({"apiGroups": ["acid.zalan.do"], "resources": ["*"], "verbs": ["*"]})
    violations = check(policies.NO_WILDCARD_RBAC, resource_type, props, name="too-wide")
    assert violations == [f"too-wide: rules[{index}]: grants '*' verbs on '*' resources (apiGroups ['acid.zalan.do'])"]


def test_wildcards_short_of_everything_are_left_to_review(recorded: dict[tuple[str, str], dict[str, Any]]) -> None:
    props = {"rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list"]}]}
    assert check(policies.NO_WILDCARD_RBAC, CLUSTER_ROLE, props) == []


def test_a_component_plan_passes_both_plan_policies(recorded: dict[tuple[str, str], dict[str, Any]]) -> None:
    props = recorded[(PLAN_CR, "small")]
    assert check(policies.PLAN_VALID, PLAN_CR, props) == []
    assert check(policies.PARAMETER_SCHEMAS_VALID, PLAN_CR, props) == []


def test_the_seed_gotemplate_plan_passes(
    recorded: dict[tuple[str, str], dict[str, Any]],
) -> None:
    assert check(policies.PLAN_VALID, PLAN_CR, recorded[(PLAN_CR, "seed")], name="seed") == []
    # Its parameter schema (draft-06) is valid JSON Schema.
    assert check(policies.PARAMETER_SCHEMAS_VALID, PLAN_CR, recorded[(PLAN_CR, "seed")]) == []


def test_a_helm_chart_for_status_and_an_unknown_type_are_rejected() -> None:
    spec = {
        "name": "p",
        "id": "p",
        "serviceId": "s",
        "description": "d",
        "templates": [
            {"action": "status", "type": "helm", "url": "https://charts.example.com/pg.tgz"},
            {"action": "provision", "type": "helm", "url": "https://charts.example.com/pg.tgz", "content": "a: b"},
        ],
    }
    assert policies.plan_problems({"spec": spec}) == [
        "spec.templates[0]: a helm chart renders objects (provision, bind, unbind), not 'status'"
    ]
    spec["templates"] = [{"action": "provision", "type": "mustache", "content": "a"}]
    assert policies.plan_problems({"spec": spec}) == [
        "spec.templates[0].type: Input should be 'jinja2', 'gotemplate', 'helm' or 'couchbase'"
    ]


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda spec: spec["templates"][0].update(action="provison"), "spec.templates[0].action: Input should be"),
        (lambda spec: spec.pop("serviceId"), "spec.serviceId: Field required"),
        (lambda spec: spec.update(planUpdateable=True), "spec.planUpdateable: Extra inputs are not permitted"),
        (lambda spec: spec["templates"][0].pop("content"), "spec.templates[0]: exactly one of content"),
    ],
)
def test_a_plan_that_does_not_fit_the_model_is_rejected_naming_the_field(
    recorded: dict[tuple[str, str], dict[str, Any]], mutate: Any, expected: str
) -> None:
    props = copy.deepcopy(recorded[(PLAN_CR, "small")])
    mutate(props["spec"])
    (violation,) = check(policies.PLAN_VALID, PLAN_CR, props, name="small")
    assert violation.startswith(f"small: {expected}")


@pytest.mark.parametrize(
    ("group", "operation", "schema", "expected"),
    [
        ("service_instance", "create", {"type": "objekt"}, "spec.schemas.service_instance.create.parameters['type']"),
        (
            "service_instance",
            "update",
            {"required": "name"},
            "spec.schemas.service_instance.update.parameters['required']",
        ),
        (
            "service_binding",
            "create",
            {"properties": {"x": {"minimum": "zero"}}},
            "spec.schemas.service_binding.create.parameters",
        ),
    ],
)
def test_an_invalid_parameter_schema_is_rejected(
    recorded: dict[tuple[str, str], dict[str, Any]], group: str, operation: str, schema: Any, expected: str
) -> None:
    props = copy.deepcopy(recorded[(PLAN_CR, "small")])
    props["spec"]["schemas"].setdefault(group, {})[operation] = {"parameters": schema}
    (violation,) = check(policies.PARAMETER_SCHEMAS_VALID, PLAN_CR, props, name="small")
    assert violation.startswith(f"small: {expected}")
    assert "not a valid JSON Schema" in violation


def test_policies_ignore_other_resource_types(recorded: dict[tuple[str, str], dict[str, Any]]) -> None:
    deployment = recorded[("kubernetes:apps/v1:Deployment", "cp-broker")]
    for policy in policies.POLICIES:
        assert check(policy, "kubernetes:apps/v1:Deployment", deployment) == []
    assert check(policies.PLAN_VALID, "kubernetes:osb.servicefabrik.io/v1alpha1:SFService", {"spec": {}}) == []
