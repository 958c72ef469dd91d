"""The Couchbase service broker's configuration templates as a template type (``type: couchbase``).

The seed's examples (tests/data/seeds/couchbase, verbatim) render exactly as the seed shows; dynamic
attributes keep their type and a null removes the attribute; generated values are kept in the registry so a
re-render never changes them; a binding's registry entries and snippets work; singletons are marked; the
renderer's byte bounds apply; bad content gets a clear error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from opbroker.api import SFPlan, TemplateAction
from opbroker.rendering import Renderer, RenderError, RenderInputs
from opbroker.rendering.limits import Limits

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "data" / "seeds" / "couchbase"
BASE = yaml.safe_load((REPO / "tests/data/seeds/sfplan-postgresql-zalando.yaml").read_text())


def plan(
    *templates: dict[str, Any], snippets: dict[str, str] | None = None, namespaces: list[str] | None = None
) -> SFPlan:
    document = {**BASE, "spec": {**BASE["spec"], "templates": list(templates)}}
    if snippets is not None:
        document["spec"]["snippets"] = snippets
    if namespaces is not None:
        document["spec"]["namespaces"] = namespaces
    return SFPlan.model_validate(document)


def couchbase(action: str, content: str) -> dict[str, Any]:
    return {"action": action, "type": "couchbase", "content": content}


def instance(parameters: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "sfsi-camelot", "namespace": "team-a"},
        "spec": {"instanceId": "camelot", "serviceId": "svc", "planId": "plan", "parameters": parameters or {}},
    }


def inputs(**overrides: Any) -> RenderInputs:
    return RenderInputs(**({"instance": instance(), "default_namespace": "opbroker"} | overrides))


@pytest.fixture(scope="module")
def renderer() -> Any:
    renderer = Renderer()
    yield renderer
    renderer.go.close()


@pytest.mark.process
@pytest.mark.parametrize("example", ["my-secret", "optional-namespace"])
def test_the_seed_examples_render_as_the_seed_shows(renderer: Renderer, example: str) -> None:
    template = (FIXTURES / f"{example}.template.yaml").read_text()
    expected = yaml.safe_load((FIXTURES / f"{example}.rendered.yaml").read_text())
    rendered = renderer.render_objects(plan(couchbase("provision", template)), TemplateAction.PROVISION, inputs())
    manifest = rendered.objects[0].manifest
    # The seed leaves the namespace to the request context (here none: the controller's namespace).
    assert manifest["metadata"].pop("namespace") == "opbroker"
    assert manifest == expected


@pytest.mark.process
def test_a_given_optional_parameter_is_used_by_its_plain_name(renderer: Renderer) -> None:
    """The seed's parameter names the namespace; a plan writes there only when it declares it (issue 42:
    ``spec.namespaces``), else the render is refused naming it."""
    template = (FIXTURES / "optional-namespace.template.yaml").read_text()
    rendered = renderer.render_objects(
        plan(couchbase("provision", template), namespaces=["avalon"]),
        TemplateAction.PROVISION,
        inputs(instance=instance({"my-namespace": "avalon"})),
    )
    assert rendered.objects[0].manifest["metadata"] == {"name": "my-secret", "namespace": "avalon"}
    with pytest.raises(RenderError, match="would go into namespace 'avalon'"):
        renderer.render_objects(
            plan(couchbase("provision", template)),
            TemplateAction.PROVISION,
            inputs(instance=instance({"my-namespace": "avalon"})),
        )


GENERATED = """
registry:
- name: admin-password
  value: '{{ generatePassword 32 nil }}'
templates:
- name: ca
  template:
    apiVersion: v1
    kind: Secret
    metadata:
      name: '{{ printf "%s-ca" (registry "instance-id") }}'
    stringData:
      tls.key: '{{ generatePrivateKey "EllipticP256" "PKCS#8" nil }}'
      password: '{{ registry "admin-password" }}'
      size: '{{ parameter "/size" | default 3 }}'
- name: role
  singleton: true
  template:
    apiVersion: rbac.authorization.k8s.io/v1
    kind: ClusterRole
    metadata:
      name: couchbase-operator
    rules: []
"""


@pytest.mark.process
def test_generated_values_are_kept_so_a_re_render_never_changes_them(renderer: Renderer) -> None:
    the_plan = plan(couchbase("provision", GENERATED))
    first = renderer.render_objects(the_plan, TemplateAction.PROVISION, inputs())
    secret, role = first.objects
    data = secret.manifest["stringData"]
    assert len(data["password"]) == 32 and data["password"] == first.registry["admin-password"]
    assert data["tls.key"].startswith("-----BEGIN PRIVATE KEY-----")
    assert data["size"] == 3
    assert first.registry["generated.ca.stringData.tls.key.0"] == data["tls.key"]
    assert role.singleton and not secret.singleton
    assert "namespace" not in role.manifest["metadata"]  # cluster-scoped
    again = renderer.render_objects(the_plan, TemplateAction.PROVISION, inputs(registry=first.registry))
    assert [o.manifest for o in again.objects] == [o.manifest for o in first.objects]
    assert again.registry == first.registry
    fresh = renderer.render_objects(the_plan, TemplateAction.PROVISION, inputs())
    assert fresh.registry["admin-password"] != first.registry["admin-password"]


@pytest.mark.process
def test_a_binding_inherits_the_instance_registry_and_sets_credentials(renderer: Renderer) -> None:
    bind = """
registry:
- name: credentials
  value: '{{ snippet "credentials" }}'
templates: []
"""
    snippets = {
        "credentials": 'username: \'{{ parameter "/user" | default "admin" }}\'\n'
        "password: '{{ registry \"admin-password\" }}'\n"
    }
    the_plan = plan(couchbase("provision", GENERATED), couchbase("bind", bind), snippets=snippets)
    provisioned = renderer.render_objects(the_plan, TemplateAction.PROVISION, inputs())
    binding = {"metadata": {"name": "b1"}, "spec": {"id": "b1", "parameters": {"user": "arthur"}}}
    bound = renderer.render_objects(
        the_plan, TemplateAction.BIND, inputs(registry=provisioned.registry, binding=binding)
    )
    assert bound.objects == ()
    assert bound.binding_registry is not None
    assert bound.binding_registry["credentials"] == {
        "username": "arthur",
        "password": provisioned.registry["admin-password"],
    }


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("name: x\ntemplate: [1, 2]\n", "must be specified and be an object"),
        ("name: x\ntemplate:\n  kind: Secret\n  v: '{{ registry \"a\" } }'\n", "malformed"),
        ("name: x\ntemplate:\n  v: '{{ parameter \"/p\" | required }}'\n", "required value is nil"),
        ("name: x\ntemplate:\n  apiVersion: v1\n  kind: Secret\n", "missing metadata.name"),
        ("registry:\n- name: namespace\n  value: '{{ registry \"instance-id\" }}'\n", "read-only"),
        ("registry:\n- name: my key\n  value: x\n", "cannot be a registry key"),
    ],
)
def test_bad_content_gets_a_clear_error(renderer: Renderer, content: str, message: str) -> None:
    with pytest.raises(RenderError, match=message):
        renderer.render_objects(plan(couchbase("provision", content)), TemplateAction.PROVISION, inputs())


SECRET = "name: x\ntemplate:\n  apiVersion: v1\n  kind: Secret\n  metadata: {name: x}\n"


@pytest.mark.process
def test_reserved_registry_keys_never_reach_a_template(renderer: Renderer) -> None:
    content = SECRET + "  p: '{{ registry \"parameters\" }}'\n"
    rendered = renderer.render_objects(
        plan(couchbase("provision", content)), TemplateAction.PROVISION, inputs(instance=instance({"secret": "s"}))
    )
    assert "p" not in rendered.objects[0].manifest


def test_the_output_limit_applies() -> None:
    small = Renderer(limits=Limits(max_output_bytes=4096))
    try:
        content = SECRET + "  p: '{{ list (generatePassword 3000 nil) (generatePassword 3000 nil) }}'\n"
        with pytest.raises(RenderError, match="limit"):
            small.render_objects(plan(couchbase("provision", content)), TemplateAction.PROVISION, inputs())
    finally:
        small.go.close()


def test_couchbase_templates_render_objects_only() -> None:
    with pytest.raises(ValueError, match="renders objects"):
        plan(couchbase("status", "name: x\ntemplate: {}\n"))


@pytest.mark.process
def test_compile_finds_a_syntax_error(renderer: Renderer) -> None:
    the_plan = plan(couchbase("provision", "name: x\ntemplate:\n  v: '{{ registry \"a\" }'\n"))
    with pytest.raises(RenderError, match=r"malformed|unexpected"):
        renderer.compile(the_plan, the_plan.spec.templates[0])
