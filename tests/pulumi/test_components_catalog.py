"""SFService and SFPlan under Pulumi's mocks: what they register (type, name, parent, inputs), how they wait
for the control plane, how templates load from files, and how a bad catalog fails before registering
anything, naming the field.
"""

from pathlib import Path
from typing import Any

import pulumi
import pytest

from opbroker.api.conventions import resource_name
from opbroker.components import ControlPlane, InvalidArgsError, SFPlan, SFService, testing

SERVICE_CR = "kubernetes:osb.servicefabrik.io/v1alpha1:SFService"
PLAN_CR = "kubernetes:osb.servicefabrik.io/v1alpha1:SFPlan"


PROVISION_TEMPLATE = {"action": "provision", "type": "jinja2", "content": "kind: postgresql"}
STATUS_TEMPLATE = {"action": "status", "type": "jinja2", "content": "provision: {state: succeeded}"}


def service_args(**overrides: Any) -> dict[str, Any]:
    return {
        "id": "svc-postgres",
        "name": "postgresql",
        "description": "PostgreSQL",
        "bindable": True,
        "tags": ["postgresql"],
        "metadata": {"displayName": "PostgreSQL"},
        **overrides,
    }


def plan_args(**overrides: Any) -> dict[str, Any]:
    return {
        "id": "plan-small",
        "name": "small",
        "description": "A small one",
        "service_id": "svc-postgres",
        "manager": {"async_": True, "async_binding": False},
        "schemas": {"service_instance": {"create": {"parameters": {"type": "object"}}}},
        "context": {"diskGB": 10},
        "templates": [
            {"action": "provision", "content": "kind: postgresql"},
            {"action": "status", "type": "jinja2", "content": "provision: {state: succeeded}"},
        ],
        **overrides,
    }


def run(program: Any, **mocked: Any) -> testing.RecordingMocks:
    with testing.mocked(**mocked) as mocks:
        pulumi.runtime.test(program)()
    return mocks


def test_sfservice_registers_one_custom_resource_parented_to_the_component() -> None:
    def program() -> Any:
        service = SFService("pg", service_args())
        return pulumi.Output.all(service.object_name, service.namespace, service.service_id)

    mocks = run(program)

    assert mocks.summary() == [("opbroker:index:SFService", "pg"), (SERVICE_CR, "pg")]
    component, cr = mocks.registrations
    assert not component.custom
    assert cr.parent == component.urn
    assert cr.plain_inputs() == {
        "apiVersion": "osb.servicefabrik.io/v1alpha1",
        "kind": "SFService",
        "metadata": {
            "name": "svc-postgres",
            "namespace": "opbroker",
            "labels": {"opbroker.io/pulumi-component": "SFService"},
            # The stack owns the object: `up` takes back fields a kubectl edit changed (server-side apply force).
            "annotations": {"pulumi.com/patchForce": "true"},
        },
        "spec": {
            "id": "svc-postgres",
            "name": "postgresql",
            "description": "PostgreSQL",
            "bindable": True,
            "tags": ["postgresql"],
            "metadata": {"displayName": "PostgreSQL"},
            "instancesRetrievable": False,
            "bindingsRetrievable": False,
            "allowContextUpdates": False,
            "planUpdatable": False,
        },
    }


def test_sfservice_outputs_come_from_the_child() -> None:
    seen: dict[str, Any] = {}

    def program() -> Any:
        service = SFService("pg", service_args(namespace="catalog", object_name="postgres"))
        return pulumi.Output.all(service.object_name, service.namespace, service.service_id).apply(
            lambda values: seen.update(values=values)
        )

    run(program)
    assert seen["values"] == ["postgres", "catalog", "svc-postgres"]


def test_sfplan_registers_the_validated_plan_in_wire_spelling() -> None:
    def program() -> Any:
        return SFPlan("pg-small", plan_args()).plan_id

    mocks = run(program)

    assert mocks.summary() == [("opbroker:index:SFPlan", "pg-small"), (PLAN_CR, "pg-small")]
    component, cr = mocks.registrations
    assert cr.parent == component.urn
    inputs = cr.plain_inputs()
    assert inputs["metadata"] == {
        "name": "plan-small",
        "namespace": "opbroker",
        "labels": {"opbroker.io/pulumi-component": "SFPlan"},
        "annotations": {"pulumi.com/patchForce": "true"},
    }
    assert inputs["spec"] == {
        "id": "plan-small",
        "name": "small",
        "description": "A small one",
        "serviceId": "svc-postgres",
        "free": True,
        "autoUpdateInstances": False,
        "manager": {"async": True, "asyncBinding": False},
        "schemas": {"service_instance": {"create": {"parameters": {"type": "object"}}}},
        "context": {"diskGB": 10},
        "templates": [
            {**PROVISION_TEMPLATE, "allowHttp": False, "singleton": False, "adopt": False},
            {**STATUS_TEMPLATE, "allowHttp": False, "singleton": False, "adopt": False},
        ],
    }


@pytest.mark.process
@pytest.mark.parametrize("preview", [False, True])
def test_sfplan_takes_the_seeds_gotemplate_templates_unchanged(preview: bool) -> None:
    import yaml

    seed = yaml.safe_load((Path(__file__).parents[1] / "data" / "seeds" / "sfplan-postgresql-zalando.yaml").read_text())
    templates = [{"action": t["action"], "type": t["type"], "content": t["content"]} for t in seed["spec"]["templates"]]

    mocks = run(lambda: SFPlan("zalando", plan_args(templates=templates)).plan_id, preview=preview)

    _, cr = mocks.registrations
    assert [t["type"] for t in cr.plain_inputs()["spec"]["templates"]] == ["gotemplate"] * 5


def test_sfplan_reads_templates_from_files(tmp_path: Path) -> None:
    (tmp_path / "provision.yaml.j2").write_text("kind: postgresql\nname: {{ instance.metadata.name }}\n")
    args = plan_args(
        base_dir=str(tmp_path),
        templates=[{"action": "provision", "file": "provision.yaml.j2"}, {"action": "bind", "content": "x: 1"}],
    )

    mocks = run(lambda: SFPlan("pg-small", args).plan_id)

    templates = mocks.one(PLAN_CR, "pg-small").plain_inputs()["spec"]["templates"]
    assert templates[0] == {
        "action": "provision",
        "type": "jinja2",
        "content": "kind: postgresql\nname: {{ instance.metadata.name }}\n",
        "allowHttp": False,
        "singleton": False,
        "adopt": False,
    }
    assert templates[1]["content"] == "x: 1"


def test_sfplan_passes_a_url_templates_digest_and_http_opt_in() -> None:
    digest = "sha256:" + "ab" * 32
    template = {"action": "provision", "url": "http://templates.internal/p.yaml", "allow_http": True, "digest": digest}

    mocks = run(lambda: SFPlan("pg-small", plan_args(templates=[template])).plan_id)

    (sent,) = mocks.one(PLAN_CR, "pg-small").plain_inputs()["spec"]["templates"]
    assert (sent["url"], sent["allowHttp"], sent["digest"]) == (template["url"], True, digest)


def test_children_wait_for_what_the_component_waits_for() -> None:
    def program() -> Any:
        service = SFService("pg", service_args())
        plan = SFPlan("pg-small", plan_args(), pulumi.ResourceOptions(depends_on=[service]))
        return plan.plan_id

    mocks = run(program)

    service_cr = mocks.one(SERVICE_CR, "pg")
    assert service_cr.urn in mocks.one(PLAN_CR, "pg-small").dependencies


def test_wait_for_ready_annotates_the_object_for_pulumi_kubernetes() -> None:
    mocks = run(lambda: SFPlan("pg-small", plan_args(wait_for_ready=True, annotations={"team": "data"})).plan_id)
    annotations = mocks.one(PLAN_CR, "pg-small").plain_inputs()["metadata"]["annotations"]
    assert annotations == {"team": "data", "pulumi.com/waitFor": "condition=Ready", "pulumi.com/patchForce": "true"}


def test_object_name_defaults_to_the_id_or_its_hash_when_the_id_is_not_a_name() -> None:
    mocks = run(lambda: SFService("odd", service_args(id="Not A Name")).object_name)
    name = mocks.one(SERVICE_CR, "odd").plain_inputs()["metadata"]["name"]
    assert name == resource_name("Not A Name")
    assert len(name) == 56


# -- failures: named fields, nothing registered --------------------------------------------------------------

BAD_PLANS = [
    pytest.param({"templates": [{"action": "provison", "content": "x"}]}, "templates[0].action", id="action"),
    pytest.param({"service_id": ""}, "service_id", id="empty-service-id"),
    pytest.param({"plan_updateable": True}, "plan_updateable", id="typo-rejected"),
    pytest.param({"templates": []}, "templates", id="no-templates"),
    pytest.param(
        {"templates": [{"action": "bind", "content": "a"}, {"action": "bind", "content": "b"}]},
        "args",
        id="duplicate-action",
    ),
    pytest.param({"templates": [{"action": "bind"}]}, "templates[0]", id="no-source"),
    pytest.param({"templates": [{"action": "bind", "url": "http://t.example/b"}]}, "templates[0]", id="plain-http"),
    pytest.param(
        {"templates": [{"action": "bind", "url": "https://t.example/b", "digest": "sha256:00"}]},
        "templates[0].digest",
        id="digest",
    ),
    pytest.param({"maximum_polling_duration": 0}, "maximum_polling_duration", id="polling"),
    pytest.param({"object_name": "Bad_Name"}, "object_name", id="object-name"),
    # Rendered offline at preview: a template that cannot work fails before rollout.
    pytest.param({"templates": [{"action": "provision", "content": "a: {{ x "}]}, "templates[0]", id="syntax"),
    pytest.param(
        {"templates": [{"action": "provision", "content": "a: {{ ''.__class__ }}"}]}, "templates[0]", id="sandbox"
    ),
    pytest.param(
        {"templates": [{"action": "provision", "type": "gotemplate", "content": "a: {{ nosuchfunction }}"}]},
        "templates[0]",
        id="gotemplate",
    ),
]


@pytest.mark.process
@pytest.mark.parametrize(("overrides", "field"), BAD_PLANS)
@pytest.mark.parametrize("preview", [False, True])
def test_a_bad_plan_fails_before_anything_is_registered(overrides: dict[str, Any], field: str, preview: bool) -> None:
    with testing.mocked(preview=preview) as mocks, pytest.raises(InvalidArgsError) as raised:
        pulumi.runtime.test(lambda: SFPlan("pg-small", plan_args(**overrides)).plan_id)()

    assert mocks.registrations == []
    assert field in [path for path, _ in raised.value.problems]
    assert str(raised.value).startswith("SFPlan 'pg-small' is invalid:")
    assert isinstance(raised.value, pulumi.RunError)


def test_an_unreadable_template_file_is_named(tmp_path: Path) -> None:
    args = plan_args(base_dir=str(tmp_path), templates=[{"action": "provision", "file": "missing.j2"}])
    with pytest.raises(InvalidArgsError) as raised:
        pulumi.runtime.test(lambda: SFPlan("pg-small", args).plan_id)()
    ((field, reason),) = raised.value.problems
    assert field == "templates[0].file"
    assert "missing.j2" in reason


def test_a_template_with_a_file_and_content_is_refused(tmp_path: Path) -> None:
    (tmp_path / "t.j2").write_text("x")
    args = plan_args(base_dir=str(tmp_path), templates=[{"action": "provision", "file": "t.j2", "content": "y"}])
    with pytest.raises(InvalidArgsError) as raised:
        pulumi.runtime.test(lambda: SFPlan("pg-small", args).plan_id)()
    assert raised.value.problems == (("templates[0]", "exactly one of file, content is allowed"),)


def test_outputs_are_refused_where_the_catalog_must_be_known() -> None:
    with testing.mocked() as mocks, pytest.raises(InvalidArgsError) as raised:
        pulumi.runtime.test(lambda: SFService("pg", service_args(description=pulumi.Output.from_input("x"))))()
    assert mocks.registrations == []
    assert raised.value.problems[0][0] == "description"
    assert "plain value" in raised.value.problems[0][1]


def test_a_bad_service_names_its_field() -> None:
    with pytest.raises(InvalidArgsError) as raised:
        pulumi.runtime.test(lambda: SFService("pg", service_args(requires=["root"])))()
    assert raised.value.problems == (
        (
            "args",
            "requires: unknown permission(s) ['root']; allowed: ['route_forwarding', 'syslog_drain', 'volume_mount']",
        ),
    )


def test_given_the_control_planes_namespace_a_plan_waits_for_the_crds_and_namespace_not_the_pods() -> None:
    # The way other languages (the component provider) wait for what a catalog object needs: `namespace:
    # ${controlPlane.namespace}` in Pulumi YAML. `dependsOn: [controlPlane]` would wait for the Deployments.
    def program() -> Any:
        control_plane = ControlPlane("cp", {"image": "opbroker:1", "broker": {"password": "p"}})
        plan = SFPlan("pg-small", plan_args(namespace=control_plane.namespace))
        return plan.namespace

    mocks = run(program)
    cr = mocks.one(PLAN_CR, "pg-small")
    crds = {r.urn for r in mocks.of_type("kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition")}
    namespace = mocks.one("kubernetes:core/v1:Namespace", "cp-namespace").urn
    deployments = {r.urn for r in mocks.of_type("kubernetes:apps/v1:Deployment")}
    assert crds and crds <= set(cr.dependencies) and namespace in cr.dependencies
    assert not deployments & set(cr.dependencies)
    assert cr.plain_inputs()["metadata"]["namespace"] == "opbroker"
