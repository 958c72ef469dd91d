"""The resource model: the seeds load unchanged, bad input is refused naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from opbroker.api import (
    DeletionPolicy,
    RegisteredService,
    SFPlan,
    SFService,
    SFServiceInstance,
    TemplateAction,
    TemplateType,
)
from opbroker.api.errors import ManifestError
from opbroker.api.manifests import check_file, check_text, load_documents, load_resources

REPO = Path(__file__).resolve().parents[2]


def kept(original: Any, dumped: Any, path: str = "") -> list[str]:
    """Where ``dumped`` lost or changed a value ``original`` set (fields the model adds with defaults are fine, and
    so is a field the seed sets to null, which Kubernetes treats as absent)."""
    if isinstance(original, dict):
        if not isinstance(dumped, dict):
            return [f"{path or '.'}: a {type(dumped).__name__}, not an object"]
        return [
            problem
            for key, value in original.items()
            for problem in (
                kept(value, dumped[key], f"{path}.{key}")
                if key in dumped
                else ([] if value is None else [f"{path}.{key}: dropped"])
            )
        ]
    if isinstance(original, list):
        if not isinstance(dumped, list) or len(dumped) != len(original):
            return [f"{path}: {original!r} became {dumped!r}"]
        return [
            problem
            for i, (a, b) in enumerate(zip(original, dumped, strict=True))
            for problem in kept(a, b, f"{path}[{i}]")
        ]
    return [] if original == dumped else [f"{path}: {original!r} became {dumped!r}"]


def test_every_seed_manifest_loads_unchanged(seed_manifests: list[Path]) -> None:
    kinds = []
    for path in seed_manifests:
        documents = dict(load_documents(path.read_text(), str(path)))
        for checked in check_file(path):
            assert checked.ok, checked.error()
            if checked.resource is not None:
                kinds.append(checked.kind)
                # Loading then dumping keeps every field the seed set, with its value (nothing silently dropped).
                original = documents[checked.document]
                assert kept(original["spec"], checked.resource.to_manifest()["spec"]) == [], path.name
    assert sorted(kinds) == ["SFCluster", "SFPlan", "SFService", "SFServiceBinding", "SFServiceInstance"]


def test_the_seed_check_sees_a_dropped_or_changed_field() -> None:
    assert kept({"a": {"b": 1, "c": [1, 2]}}, {"a": {"b": 1, "c": [1, 2]}, "d": 0}) == []
    assert kept({"a": {"b": 1}}, {"a": {}}) == [".a.b: dropped"]
    assert kept({"a": [1, 2]}, {"a": [1]}) == [".a: [1, 2] became [1]"]
    assert kept({"a": "x"}, {"a": "y"}) == [".a: 'x' became 'y'"]
    assert kept({"a": None, "b": 1}, {"b": 1}) == []


def test_seed_secret_is_reported_as_skipped(seed_manifests: list[Path]) -> None:
    cluster_file = next(p for p in seed_manifests if p.name == "sfcluster.yaml")
    verdicts = check_file(cluster_file)
    assert [v.kind for v in verdicts] == ["SFCluster", "Secret"]
    assert verdicts[1].skipped_reason == "v1 Secret is not an opbroker kind"


def test_zalando_plan_keeps_gotemplate_templates(seed_manifests: list[Path]) -> None:
    path = next(p for p in seed_manifests if p.name == "sfplan-postgresql-zalando.yaml")
    (plan,) = load_resources(path.read_text(), str(path))
    assert isinstance(plan, SFPlan)
    assert {t.action for t in plan.spec.templates} == {
        TemplateAction.SOURCES,
        TemplateAction.STATUS,
        TemplateAction.PROVISION,
        TemplateAction.BIND,
        TemplateAction.UNBIND,
    }
    assert all(t.type is TemplateType.GOTEMPLATE for t in plan.spec.templates)
    assert plan.spec.manager is not None and plan.spec.manager.async_ is True
    assert plan.spec.context is not None and plan.spec.context["requests"] == {"cpu": 1, "memory": "512Mi"}
    schema = plan.spec.schemas.service_instance.create.parameters  # type: ignore[union-attr]
    assert schema is not None and schema["required"] == ["foo"]
    assert plan.spec.template(TemplateAction.BIND) is not None


def test_seed_instance_with_null_fields_loads(seed_manifests: list[Path]) -> None:
    path = next(p for p in seed_manifests if p.name == "sfserviceinstance.yaml")
    (instance,) = load_resources(path.read_text())
    assert isinstance(instance, SFServiceInstance)
    assert instance.spec.parameters is None
    assert instance.status is not None and instance.status.state is None


def test_registered_service_from_the_seed_fields_loads() -> None:
    path = REPO / "examples" / "primaza" / "registeredservice-postgresql.yaml"
    registered, claim = load_resources(path.read_text())
    assert isinstance(registered, RegisteredService)
    assert [i.name for i in registered.spec.service_class_identity] == ["type", "provider", "version"]
    password = registered.spec.service_endpoint_definition[3]
    assert password.value_from_secret is not None and password.value_from_secret.key == "password"
    assert registered.spec.constraints is not None and registered.spec.constraints.environments == ["!prod"]
    assert registered.spec.sla == "L3"
    assert claim.kind == "ServiceClaim"


def _problems(text: str) -> tuple[str, ...]:
    (verdict,) = check_text(text)
    assert not verdict.ok
    return verdict.problems


PLAN_HEAD = """
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFPlan
metadata: {name: p1}
spec:
  name: small
  id: p1
  description: d
  serviceId: s1
"""


def test_unknown_template_action_names_the_field() -> None:
    problems = _problems(PLAN_HEAD + "  templates: [{action: backup, type: jinja2, content: x}]\n")
    assert problems == (
        "spec.templates[0].action: Input should be 'provision', 'bind', 'unbind', 'sources', 'status' or "
        "'clusterSelector'",
    )


def test_missing_required_field_names_the_field() -> None:
    problems = _problems(
        PLAN_HEAD.replace("  serviceId: s1\n", "") + "  templates: [{action: provision, type: jinja2, content: x}]\n"
    )
    assert problems == ("spec.serviceId: Field required",)


def test_wrong_type_names_the_field() -> None:
    problems = _problems(
        PLAN_HEAD + "  bindable: maybe\n  templates: [{action: provision, type: jinja2, content: x}]\n"
    )
    assert problems[0].startswith("spec.bindable: Input should be a valid boolean")


def test_misspelt_field_is_refused_not_dropped() -> None:
    problems = _problems(
        PLAN_HEAD + "  planUpdateable: true\n  templates: [{action: provision, type: jinja2, content: x}]\n"
    )
    assert problems == ("spec.planUpdateable: Extra inputs are not permitted",)


def test_template_needs_exactly_one_source() -> None:
    problems = _problems(
        PLAN_HEAD + "  templates: [{action: provision, type: jinja2, content: x, url: 'https://e/x'}]\n"
    )
    assert problems == (
        "spec.templates[0]: exactly one of content, contentEncoded or url is required (got content, url)",
    )


def test_deletion_policy_defaults_to_delete_and_orphans_only_recorded_objects() -> None:
    """``deletionPolicy: orphan`` applies to the templates whose objects are recorded (provision, bind); elsewhere
    it would promise what no teardown does, so it is refused, naming the template."""
    templates = (
        "  templates: [{action: provision, type: jinja2, content: x, deletionPolicy: orphan},"
        " {action: bind, type: jinja2, content: y}]\n"
    )
    (plan,) = load_resources(PLAN_HEAD + templates)
    assert isinstance(plan, SFPlan)
    provision, bind = plan.spec.templates
    assert (provision.deletion, bind.deletion) == (DeletionPolicy.ORPHAN, DeletionPolicy.DELETE)
    assert "deletionPolicy" not in plan.to_manifest()["spec"]["templates"][1]  # the default is not written
    status = "  templates: [{action: status, type: jinja2, content: x, deletionPolicy: orphan}]\n"
    assert _problems(PLAN_HEAD + status) == (
        "spec.templates[0]: deletionPolicy: orphan applies to provision and bind templates (whose objects opbroker "
        "records and later lets go of), not to status",
    )
    assert _problems(PLAN_HEAD + "  templates: [{action: provision, type: jinja2, content: x, deletionPolicy: keep}]\n")


def test_a_recorded_resource_keeps_its_deletion_policy_and_reads_without_one() -> None:
    status = {
        "resources": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "a", "deletionPolicy": "orphan"},
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "b"},
        ]
    }
    instance = SFServiceInstance.model_validate(
        {"metadata": {"name": "i"}, "spec": {"serviceId": "s", "planId": "p"}, "status": status}
    )
    assert instance.status is not None and instance.status.resources is not None
    assert [r.deletion_policy for r in instance.status.resources] == [DeletionPolicy.ORPHAN, None]
    assert instance.to_manifest()["status"] == status


def test_duplicate_template_action_is_refused() -> None:
    templates = "  templates: [{action: bind, type: jinja2, content: x}, {action: bind, type: jinja2, content: y}]\n"
    assert _problems(PLAN_HEAD + templates) == ("spec: templates: action 'bind' is defined more than once",)


def test_wrong_api_version_is_reported() -> None:
    text = PLAN_HEAD.replace("osb.servicefabrik.io/v1alpha1", "osb.servicefabrik.io/v2") + "  templates: []\n"
    assert _problems(text) == (
        "apiVersion: must be 'osb.servicefabrik.io/v1alpha1', got 'osb.servicefabrik.io/v2'",
        "spec.templates: List should have at least 1 item after validation, not 0",
    )


def test_registered_service_endpoint_needs_a_value() -> None:
    text = """
apiVersion: primaza.io/v1alpha1
kind: RegisteredService
metadata: {name: r}
spec:
  serviceClassIdentity: [{name: type, value: redis}]
  serviceEndpointDefinition: [{name: host}]
"""
    assert _problems(text) == (
        "spec.serviceEndpointDefinition[0]: endpoint 'host': exactly one of value or valueFromSecret is required",
    )


def test_yaml_that_does_not_parse_is_a_file_error() -> None:
    with pytest.raises(ManifestError, match="not valid YAML"):
        check_text("a: [unclosed", "broken.yaml")


def test_models_are_immutable_and_round_trip() -> None:
    service = SFService.model_validate(
        {"metadata": {"name": "s1"}, "spec": {"name": "redis", "id": "s1", "description": "d", "bindable": True}}
    )
    with pytest.raises(Exception, match="frozen"):
        service.spec.bindable = False  # type: ignore[misc]
    manifest = service.to_manifest()
    assert manifest["apiVersion"] == "osb.servicefabrik.io/v1alpha1"
    assert manifest["spec"] == {
        "name": "redis",
        "id": "s1",
        "description": "d",
        "bindable": True,
        "instancesRetrievable": False,
        "bindingsRetrievable": False,
        "allowContextUpdates": False,
        "planUpdatable": False,
    }
    assert SFService.model_validate(manifest) == service
