"""The runnable programs: the root stack (``Pulumi.yaml`` → ``examples/stack/``) and the Python example run
under Pulumi's mocks and register what they promise; the Pulumi YAML example only uses types, properties
and enum values the component provider's schema defines.
"""

import runpy
from pathlib import Path
from typing import Any

import pulumi
import yaml

from opbroker.api import SFPlan as SFPlanModel
from opbroker.api import SFService as SFServiceModel
from opbroker.api.crd import all_crds
from opbroker.components import testing
from opbroker.provider import host

REPO = Path(__file__).resolve().parents[2]
PLAN_CR = "kubernetes:osb.servicefabrik.io/v1alpha1:SFPlan"
SERVICE_CR = "kubernetes:osb.servicefabrik.io/v1alpha1:SFService"
CRD = "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"


def run_program(folder: Path, project: str, config: dict[str, str] | None = None) -> testing.RecordingMocks:
    def program() -> None:
        runpy.run_path(str(folder), run_name="__main__")

    with testing.mocked(project=project, config=config) as mocks:
        pulumi.runtime.test(program)()
    return mocks


def test_the_root_project_points_at_the_stack_program() -> None:
    project = yaml.safe_load((REPO / "Pulumi.yaml").read_text())
    assert project["name"] == "opbroker"
    assert project["runtime"]["name"] == "python"
    assert project["main"] == "examples/stack/"
    assert (REPO / project["main"] / "__main__.py").is_file()


def test_the_root_stack_deploys_the_control_plane_and_a_catalog_after_the_crds() -> None:
    mocks = run_program(REPO / "examples" / "stack", "opbroker", {"opbroker:image": "registry.example/opbroker:7"})

    assert len(mocks.of_type("opbroker:index:ControlPlane")) == 1
    assert len(mocks.of_type(CRD)) == len(all_crds())
    image = mocks.one("kubernetes:apps/v1:Deployment", "opbroker-broker").plain_inputs()
    assert image["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/opbroker:7"
    crd_urns = {r.urn for r in mocks.of_type(CRD)}
    plan = mocks.one(PLAN_CR, "postgresql-small")
    service = mocks.one(SERVICE_CR, "postgresql")
    assert crd_urns <= set(plan.dependencies) and crd_urns <= set(service.dependencies)
    # ... and the namespace and the controller's Deployment (destroy deletes the catalog while the controller
    # still runs to release its teardown finalizers), not the broker's.
    namespace_urn = mocks.one("kubernetes:core/v1:Namespace", "opbroker-namespace").urn
    controller_urn = mocks.one("kubernetes:apps/v1:Deployment", "opbroker-controller").urn
    broker_urn = mocks.one("kubernetes:apps/v1:Deployment", "opbroker-broker").urn
    assert {namespace_urn, controller_urn} <= set(plan.dependencies) and broker_urn not in plan.dependencies
    spec = plan.plain_inputs()["spec"]
    assert [t["action"] for t in spec["templates"]] == ["provision", "sources", "status"]
    assert {t["type"] for t in spec["templates"]} == {"jinja2"}
    assert spec["serviceId"] == service.plain_inputs()["spec"]["id"]
    rules = mocks.one("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole", "opbroker-controller").plain_inputs()
    # The example plans' operator kinds, last, in the order declarations.OPERATOR_RULES gives them.
    operator_rules = [(r["apiGroups"], r["resources"]) for r in rules["rules"][-6:]]
    assert operator_rules == [
        (["acid.zalan.do"], ["postgresqls"]),
        (["demo.opbroker.io"], ["databases"]),
        (["cert-manager.io"], ["issuers", "certificates"]),
        (["apps"], ["statefulsets"]),
        ([""], ["services"]),
        (["batch"], ["jobs"]),
    ]


def test_the_root_stack_declares_the_same_demo_catalog_opbroker_dev_applies() -> None:
    mocks = run_program(REPO / "examples" / "stack", "opbroker")
    documents = list(yaml.safe_load_all((REPO / "examples" / "demo_operator" / "catalog.yaml").read_text()))
    for document, cr_type, model in zip(documents, (SERVICE_CR, PLAN_CR), (SFServiceModel, SFPlanModel), strict=True):
        declared = mocks.one(cr_type, document["metadata"]["name"]).plain_inputs()
        assert declared["metadata"]["name"] == document["metadata"]["name"]
        # The same spec, field for field, as the models read them.
        assert model.model_validate({**document, "spec": declared["spec"]}).spec == model.model_validate(document).spec


def test_the_root_stack_declares_the_certificates_catalog_of_examples() -> None:
    mocks = run_program(REPO / "examples" / "stack", "opbroker")
    documents = list(yaml.safe_load_all((REPO / "examples" / "certificates" / "catalog.yaml").read_text()))
    for document, cr_type, model in zip(documents, (SERVICE_CR, PLAN_CR), (SFServiceModel, SFPlanModel), strict=True):
        declared = mocks.one(cr_type, document["metadata"]["name"]).plain_inputs()
        assert model.model_validate({**document, "spec": declared["spec"]}).spec == model.model_validate(document).spec


def test_child_names_start_with_their_components_name_so_renames_carry_over_by_alias() -> None:
    # Pulumi derives a child's alias from its parent's when the child's name is prefixed by the parent's:
    # renaming a component with opts.aliases=[Alias(name=old)] then moves its children instead of replacing.
    mocks = run_program(REPO / "examples" / "stack", "opbroker")
    components = [r for r in mocks.registrations if r.type.startswith("opbroker:index:")]
    assert {r.type for r in components} == {
        "opbroker:index:ControlPlane",
        "opbroker:index:SFService",
        "opbroker:index:SFPlan",
    }
    for component in components:
        children = mocks.children_of(component.urn)
        assert children
        assert all(child.name.startswith(component.name) for child in children), component.name


def test_the_python_example_runs_with_and_without_a_broker(tmp_path: Path) -> None:
    folder = REPO / "examples" / "pulumi-python"
    project = "opbroker-example-python"
    without = run_program(folder, project)
    assert not any(r.type.startswith("opbroker:index:Service") and "Claim" not in r.type for r in without.registrations)
    plan = without.one(PLAN_CR, "redis-small").plain_inputs()["spec"]
    assert plan["templates"][0]["content"] == (folder / "templates" / "provision.yaml.j2").read_text()

    with_broker = run_program(
        folder,
        project,
        {
            f"{project}:brokerUrl": "http://127.0.0.1:9",
            f"{project}:brokerPassword": "pw",
            f"{project}:cluster2Kubeconfig": "apiVersion: v1",
        },
    )
    # The provider's custom resources (no dynamic provider): the wire's camelCase names, the secrets marked.
    instance = with_broker.one("opbroker:index:ServiceInstance", "orders-cache")
    binding = with_broker.one("opbroker:index:ServiceBinding", "orders-cache-app")
    assert instance.plain_inputs()["planId"] == binding.plain_inputs()["planId"]
    assert testing.is_secret(instance.inputs["brokerPassword"])
    assert set(binding.additional_secret_outputs) == {"credentials", "brokerPassword"}
    assert with_broker.one("kubernetes:core/v1:Secret", "cluster-2-kubeconfig")


def check_value(value: Any, prop: dict[str, Any], schema: dict[str, Any], path: str) -> list[str]:
    """Problems of one YAML value against a schema property (types, nested property names, enums)."""
    if isinstance(value, str) and value.startswith("${"):
        return []  # an interpolation, typed by the engine
    ref = prop.get("$ref", "")
    if ref.startswith("#/types/"):
        type_def = schema["types"][ref.removeprefix("#/types/")]
        if "enum" in type_def:
            allowed = [e["value"] for e in type_def["enum"]]
            return [] if value in allowed else [f"{path}: {value!r} not in {allowed}"]
        return check_object(value, type_def.get("properties", {}), type_def.get("required", []), schema, path)
    if prop.get("type") == "array":
        if not isinstance(value, list):
            return [f"{path}: expected a list"]
        return [p for i, item in enumerate(value) for p in check_value(item, prop["items"], schema, f"{path}[{i}]")]
    return []


def check_object(
    value: Any, properties: dict[str, Any], required: list[str], schema: dict[str, Any], path: str
) -> list[str]:
    if not isinstance(value, dict):
        return [f"{path}: expected an object"]
    problems = [f"{path}.{key}: not in the schema" for key in value if key not in properties]
    problems += [f"{path}.{key}: required" for key in required if key not in value]
    for key, item in value.items():
        if key in properties:
            problems += check_value(item, properties[key], schema, f"{path}.{key}")
    return problems


def test_the_yaml_example_fits_the_provider_schema() -> None:
    program = yaml.safe_load((REPO / "examples" / "pulumi-yaml" / "Pulumi.yaml").read_text())
    schema = host.schema()
    assert program["runtime"] == "yaml"
    assert (REPO / "examples" / "pulumi-yaml" / program["packages"]["opbroker"] / "PulumiPlugin.yaml").is_file()
    used = set()
    problems = []
    for name, resource in program["resources"].items():
        definition = schema["resources"].get(resource["type"])
        assert definition is not None, f"{name}: unknown type {resource['type']}"
        used.add(resource["type"])
        problems += check_object(
            resource["properties"],
            definition["inputProperties"],
            definition.get("requiredInputs", []),
            schema,
            name,
        )
    assert problems == []
    assert used >= {"opbroker:index:ControlPlane", "opbroker:index:SFService", "opbroker:index:SFPlan"}
    for output in program["outputs"].values():
        resource, _, prop = output.strip("${}").partition(".")
        assert prop in schema["resources"][program["resources"][resource]["type"]]["properties"]


def test_the_yaml_checker_catches_a_misspelt_property() -> None:
    schema = host.schema()
    plan = schema["resources"]["opbroker:index:SFPlan"]
    bad = {"id": "p", "name": "n", "description": "d", "serviceId": "s", "templates": [{"action": "provison"}]}
    problems = check_object(bad, plan["inputProperties"], plan["requiredInputs"], schema, "plan")
    assert problems == [
        "plan.templates[0].action: 'provison' not in "
        + str([a["value"] for a in schema["types"]["opbroker:index:TemplateAction"]["enum"]])
    ]
