"""What a rendered template becomes: objects, references, status sections, a selector — or a clear error.

Aspects covered: null pruning at every depth (including adjacent nulls, Couchbase's early-stopping loop);
namespace precedence (template, request context, controller default) and cluster-scoped kinds; singleton
marking; multi-document output and empty documents; object validation naming the document and field; the
status template's typed result and its errors; the sources map; the cluster selector and its injection guard;
refused template types; absent templates; error messages naming plan, action, template and line.
"""

from __future__ import annotations

from typing import Any

import pytest

from opbroker.api import OperationState, ResourceRef, SFPlan, TemplateAction
from opbroker.rendering import (
    Renderer,
    RenderError,
    RenderInputs,
    SectionStatus,
    StatusResult,
    TemplateSourceError,
)

RENDERER = Renderer()
INSTANCE = {
    "metadata": {"name": "inst-1"},
    "spec": {"instanceId": "inst-1", "planId": "plan-id", "parameters": {"ns": "explicit", "env": "prod"}},
}


def make_plan(
    *templates: tuple[str, str], kind: str = "jinja2", singleton: bool = False, namespaces: list[str] | None = None
) -> SFPlan:
    return SFPlan.model_validate(
        {
            "metadata": {"name": "output"},
            "spec": {
                "name": "p",
                "id": "plan-id",
                "description": "d",
                "serviceId": "s",
                "templates": [{"action": a, "type": kind, "content": c, "singleton": singleton} for a, c in templates],
                "namespaces": namespaces,
            },
        }
    )


def inputs(**overrides: Any) -> RenderInputs:
    return RenderInputs(**({"instance": INSTANCE, "default_namespace": "controller-ns"} | overrides))


def objects(content: str, *, namespaces: list[str] | None = None, **overrides: Any) -> list[dict[str, Any]]:
    plan = make_plan(("provision", content), namespaces=namespaces)
    rendered = RENDERER.render_objects(plan, TemplateAction.PROVISION, inputs(**overrides))
    return [o.manifest for o in rendered.objects]


CM = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n"


def test_nulls_are_pruned_at_every_depth_including_neighbours() -> None:
    (manifest,) = objects(
        CM
        + """\
  labels:
    a: {{ none }}
    b: {{ parameter('/missing') }}
    c: kept
    d: null
    e: ~
data:
  x: {{ undefined_var }}
  y: ""
  z: 0
  nested:
    deeper:
      gone: {{ none }}
      also-gone:
      kept: [1, null, 2, {{ none }}, {a: null, b: 1}]
"""
    )
    assert manifest["metadata"] == {"name": "cm", "labels": {"c": "kept"}, "namespace": "controller-ns"}
    assert manifest["data"] == {"y": "", "z": 0, "nested": {"deeper": {"kept": [1, 2, {"b": 1}]}}}


def test_many_adjacent_nulls_are_all_removed() -> None:
    """Couchbase's removal loop deleted while iterating and skipped the neighbour of each removed entry."""
    body = "".join(f"  k{i}: {{{{ none }}}}\n" for i in range(50))
    (manifest,) = objects(CM + "data:\n" + body + "  last: x\n")
    assert manifest["data"] == {"last": "x"}


@pytest.mark.parametrize(
    ("reason", "metadata_ns", "context_ns", "want"),
    [
        ("the template wins", "  namespace: {{ parameter('/ns') }}\n", "ctx", "explicit"),
        ("then the request context", "", "ctx", "ctx"),
        ("then the controller's default", "", None, "controller-ns"),
        ("a template namespace that renders null falls back", "  namespace: {{ none }}\n", "ctx", "ctx"),
    ],
)
def test_namespace_precedence(reason: str, metadata_ns: str, context_ns: str | None, want: str) -> None:
    (manifest,) = objects(CM + metadata_ns, context_namespace=context_ns, namespaces=["explicit"])
    assert manifest["metadata"]["namespace"] == want, reason


@pytest.mark.parametrize("action", ["provision", "bind", "unbind"])
@pytest.mark.parametrize(
    ("written", "context_ns"),
    [
        ("  namespace: {{ parameter('/ns') }}\n", None),  # a tenant's parameter names the namespace
        ("  namespace: {{ instance.spec.context.namespace }}\n", None),  # the refused context, read directly
        ("  namespace: other-team\n", "ctx"),  # a fixed namespace the plan does not declare
    ],
)
def test_an_object_outside_the_instance_namespace_and_the_plans_is_refused(
    action: str, written: str, context_ns: str | None
) -> None:
    """Confinement in one place (issue 42): whatever renders objects, an object may go only into the namespace the
    instance's objects go to and the namespaces its plan declares."""
    instance = {**INSTANCE, "spec": {"parameters": {"ns": "other-team"}, "context": {"namespace": "other-team"}}}
    binding = {"metadata": {"name": "b"}, "spec": {"parameters": {"ns": "other-team"}}}
    plan = make_plan((action, CM + written), namespaces=["shared-infra"])
    with pytest.raises(RenderError, match="would go into namespace 'other-team'"):
        RENDERER.render_objects(
            plan,
            TemplateAction(action),
            inputs(instance=instance, binding=binding, context_namespace=context_ns, binding_registry={}),
        )
    declared = make_plan((action, CM + "  namespace: shared-infra\n"), namespaces=["shared-infra"])
    rendered = RENDERER.render_objects(
        declared, TemplateAction(action), inputs(instance=instance, binding=binding, binding_registry={})
    )
    assert [o.manifest["metadata"]["namespace"] for o in rendered.objects] == ["shared-infra"]


def test_cluster_scoped_kinds_get_no_namespace() -> None:
    (manifest,) = objects("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: r\n")
    assert "namespace" not in manifest["metadata"]


def test_several_documents_and_empty_ones() -> None:
    manifests = objects(
        CM
        + "---\n{% if false %}\napiVersion: v1\n{% endif %}\n---\n"
        + "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n---\n"
    )
    assert [m["kind"] for m in manifests] == ["ConfigMap", "Secret"]


def test_singleton_templates_mark_every_object() -> None:
    plan = make_plan(("provision", CM + "---\n" + CM.replace("cm", "cm2")), singleton=True)
    rendered = RENDERER.render_objects(plan, TemplateAction.PROVISION, inputs())
    assert [o.singleton for o in rendered.objects] == [True, True]
    assert rendered.objects[1].ref == ResourceRef(
        api_version="v1", kind="ConfigMap", name="cm2", namespace="controller-ns"
    )
    assert repr(rendered.objects[0]) == "RenderedObject(v1 ConfigMap controller-ns/cm, singleton=True)"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("kind: ConfigMap\nmetadata:\n  name: x\n", "document 1 (ConfigMap): missing apiVersion"),
        (CM + "---\napiVersion: v1\nkind: Secret\n", "document 2 (Secret): missing metadata.name"),
        (
            CM + "---\napiVersion: v1\nmetadata:\n  name: {{ none }}\n",
            "document 2 (object): missing kind, metadata.name",
        ),
        ("- a\n- b\n", "document 1 is a list, not a Kubernetes object"),
        ("just text", "document 1 is a str"),
        (CM + "data:\n  a: 1\n  a: 2\n", "duplicate key 'a'"),
        (CM + "data:\n  {{ 'a' }}: 1\n  a: 2\n", "duplicate key 'a'"),
        (CM + "data: [unclosed\n", "the rendered text is not valid YAML"),
        (CM + "data:\n  {{ {'a': 1} }}: 1\n", "a key must be a string"),
    ],
)
def test_output_that_is_not_kubernetes_objects_is_refused(content: str, message: str) -> None:
    with pytest.raises(RenderError) as caught:
        objects(content)
    assert message in str(caught.value)
    assert str(caught.value).startswith("plan 'output', action 'provision', template provision")


def test_yaml_errors_show_interpolations_not_markers() -> None:
    with pytest.raises(RenderError) as caught:
        objects(CM + "data:\n  a: {{ 'x' }}: {{ 'y' }}\n")
    assert "{{...}}: {{...}}" in str(caught.value)
    assert "opbrk" not in str(caught.value)


# -- status ------------------------------------------------------------------------------------------------------


def status(content: str, **overrides: Any) -> StatusResult:
    return RENDERER.render_status(make_plan(("status", content)), inputs(**overrides))


def test_status_sections_become_typed_results() -> None:
    result = status(
        """\
provision:
  state: succeeded
  description: ready
  dashboardUrl: https://dash/{{ instance.metadata.name }}
  instanceUsable: true
  updateRepeatable: false
bind:
  state: succeeded
  response: '{{ {"credentials": {"user": "u"}, "endpoints": []} | toJson }}'
unbind:
  state: in progress
  error: ""
deprovision:
  state: failed
  error: stuck
"""
    )
    assert result == StatusResult(
        provision=SectionStatus(
            state=OperationState.SUCCEEDED,
            description="ready",
            dashboard_url="https://dash/inst-1",
            instance_usable=True,
            update_repeatable=False,
        ),
        bind=SectionStatus(state=OperationState.SUCCEEDED, response={"credentials": {"user": "u"}, "endpoints": []}),
        unbind=SectionStatus(state=OperationState.IN_PROGRESS),
        deprovision=SectionStatus(state=OperationState.FAILED, error="stuck"),
    )


def test_a_bind_response_may_be_a_mapping() -> None:
    result = status("bind:\n  state: succeeded\n  response:\n    credentials:\n      port: {{ 5432 }}\n")
    assert result.bind is not None and result.bind.response == {"credentials": {"port": 5432}}


def test_sections_not_rendered_are_none() -> None:
    assert status("provision:\n  state: in progress\n") == StatusResult(
        provision=SectionStatus(state=OperationState.IN_PROGRESS)
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("provision:\n  state: done\n", "status section 'provision': state 'done' is not one of 'in progress'"),
        ("bind:\n  state: in_progress\n", "status section 'bind': state 'in_progress'"),
        ("unbind:\n  error: x\n", "status section 'unbind': state None"),
        ("deprovision: succeeded\n", "status section 'deprovision' must be a mapping"),
        ("update:\n  state: succeeded\n", "unknown section(s) ['update']"),
        ("provision:\n  state: succeeded\n  dashboardURL: x\n", "unknown field(s) ['dashboardURL']"),
        ("unbind:\n  state: succeeded\n  response: {credentials: {}}\n", "unknown field(s) ['response']"),
        ("bind:\n  state: succeeded\n  response: '{nope'\n", "response is a string but not JSON"),
        ("bind:\n  state: succeeded\n  response: {user: u}\n", "response must be a mapping holding a credentials"),
        ("provision:\n  state: succeeded\n  instanceUsable: 'yes'\n", "instanceUsable must be true or false"),
        ("- provision\n", "must render a mapping of sections"),
        ("provision:\n  state: succeeded\n---\nbind:\n  state: succeeded\n", "must render one YAML document"),
    ],
)
def test_status_errors_name_the_section(content: str, message: str) -> None:
    with pytest.raises(RenderError) as caught:
        status(content)
    assert message in str(caught.value)
    assert "action 'status', template status" in str(caught.value)


# -- sources -----------------------------------------------------------------------------------------------------


def test_sources_become_references_with_namespaces_defaulted() -> None:
    plan = make_plan(
        (
            "sources",
            """\
db:
  apiVersion: v1
  kind: Service
  name: {{ instance.metadata.name }}
own:
  apiVersion: v1
  kind: Secret
  name: s
  namespace: elsewhere
crd:
  apiVersion: apiextensions.k8s.io/v1
  kind: CustomResourceDefinition
  name: things.example.com
""",
        )
    )
    assert RENDERER.render_sources(plan, inputs(context_namespace="ctx")) == {
        "db": ResourceRef(api_version="v1", kind="Service", name="inst-1", namespace="ctx"),
        "own": ResourceRef(api_version="v1", kind="Secret", name="s", namespace="elsewhere"),
        "crd": ResourceRef(
            api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition", name="things.example.com"
        ),
    }


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("db: {apiVersion: v1, kind: Service}", "sources entry 'db': missing name"),
        ("db: {apiVersion: v1, kind: Service, name: x, labels: {}}", "unknown field(s) labels"),
        ("db: x", "sources entry 'db': expected a mapping"),
        ("plan: {apiVersion: v1, kind: Service, name: x}", "would hide template variables or functions"),
        ("registry: {apiVersion: v1, kind: Service, name: x}", "would hide template variables or functions"),
        ("[a]", "must render a mapping of name to reference"),
    ],
)
def test_bad_sources_are_refused(content: str, message: str) -> None:
    with pytest.raises(RenderError, match="action 'sources'") as caught:
        RENDERER.render_sources(make_plan(("sources", content)), inputs())
    assert message in str(caught.value)


def test_live_sources_are_variables_and_missing_ones_are_absent() -> None:
    plan = make_plan(("provision", CM + "data:\n  ip: {{ svc.spec.clusterIP }}\n  gone: {{ secret.data.x }}\n"))
    rendered = RENDERER.render_objects(
        plan,
        TemplateAction.PROVISION,
        inputs(sources={"svc": {"spec": {"clusterIP": "10.0.0.1"}}, "secret": None}),
    )
    assert rendered.objects[0].manifest["data"] == {"ip": "10.0.0.1"}


def test_a_live_source_may_not_hide_an_input() -> None:
    with pytest.raises(RenderError, match=r"sources \['instance'\] would hide"):
        objects(CM, sources={"instance": {"evil": True}})


# -- cluster selector ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "want"),
    [
        ("{%- set plan_id = instance.spec.planId %}\nplan={{ plan_id }}\n", "plan=plan-id"),
        (
            "plan={{ instance.spec.planId }}\nenv in ({{ parameter('/env') }}, staging)\n",
            "plan=plan-id,env in (prod, staging)",
        ),
        ("# no selector\n", None),
        ("", None),
    ],
)
def test_cluster_selector(content: str, want: str | None) -> None:
    assert RENDERER.render_cluster_selector(make_plan(("clusterSelector", content)), inputs()) == want


@pytest.mark.parametrize("value", ["prod,tier!=gold", "a b", "x)", "v=1"])
def test_values_cannot_add_requirements_to_a_selector(value: str) -> None:
    instance = {**INSTANCE, "spec": {**INSTANCE["spec"], "parameters": {"env": value}}}
    with pytest.raises(RenderError, match="cluster selector holds characters a label value cannot"):
        RENDERER.render_cluster_selector(
            make_plan(("clusterSelector", "env={{ parameter('/env') }}")), inputs(instance=instance)
        )


# -- template types and absent templates ---------------------------------------------------------------------------


@pytest.mark.process
def test_gotemplate_output_goes_through_the_same_post_processing() -> None:
    # Null removal and the namespace default apply to Go's output exactly as to jinja2's.
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .instance.metadata.name }}\ndata:\n  a: null\n"
    plan = make_plan(("provision", text), kind="gotemplate")
    (obj,) = RENDERER.render_objects(plan, TemplateAction.PROVISION, inputs()).objects
    assert obj.manifest["metadata"]["namespace"] == inputs().namespace
    assert obj.manifest["data"] == {}


@pytest.mark.process
def test_a_helm_chart_for_status_is_refused_clearly() -> None:
    plan = make_plan(("status", "a: b"), kind="gotemplate")
    document = plan.to_manifest()
    document["spec"]["templates"] = [{"action": "status", "type": "helm", "contentEncoded": "H4sI"}]
    plan = type(plan).model_validate(document)
    with pytest.raises(TemplateSourceError) as caught:
        RENDERER.render_status(plan, inputs())
    assert "a helm chart renders objects (provision, bind, unbind), not status" in str(caught.value)
    assert "plan 'output', action 'status'" in str(caught.value)


def test_absent_templates_render_nothing() -> None:
    plan = make_plan(("provision", CM))
    assert (
        RENDERER.render_objects(plan, TemplateAction.UNBIND, inputs(binding={"metadata": {"name": "b"}})).objects == ()
    )
    assert RENDERER.render_sources(plan, inputs()) == {}
    assert RENDERER.render_status(plan, inputs()) == StatusResult()
    assert RENDERER.render_cluster_selector(plan, inputs()) is None


def test_bind_without_a_binding_and_non_object_actions_are_refused() -> None:
    plan = make_plan(("bind", CM))
    with pytest.raises(RenderError, match="the bind template needs a binding"):
        RENDERER.render_objects(plan, TemplateAction.BIND, inputs())
    with pytest.raises(RenderError, match="not 'status'"):
        RENDERER.render_objects(plan, TemplateAction.STATUS, inputs())


def test_syntax_errors_name_the_line() -> None:
    with pytest.raises(RenderError, match=r"template provision line 3: syntax error: .*'endfor'"):
        objects("a: 1\nb: 2\n{% for x in y %}\n")
