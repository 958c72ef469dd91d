"""The seed's Zalando plan, unchanged (gotemplate), rendered through the Go renderer with the inputs the jinja2
port gets — and the two agree.

Aspects covered: sources with and without a binding; provision; status for every operation (credentials from
the live Secret and Service, the operator's failure, deprovision waiting for the cluster to go); bind and
unbind editing the live cluster's users; the variables Service Fabrik gives (a missing binding or source is
absent, integers stay integers for ``printf "%d"``); one renderer process serves every render and thread.
"""

from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from opbroker.api import OperationState, SFPlan, TemplateAction
from opbroker.rendering import Renderer, RenderError, RenderInputs

pytestmark = pytest.mark.process  # runs another program (see tests/conftest.py)

REPO = Path(__file__).resolve().parents[2]
INPUTS = REPO / "examples" / "catalog" / "render-inputs"
SEED = SFPlan.model_validate(yaml.safe_load((REPO / "tests/data/seeds/sfplan-postgresql-zalando.yaml").read_text()))
PORT = SFPlan.model_validate(yaml.safe_load((REPO / "examples/catalog/postgresql-zalando-plan.yaml").read_text()))
INSTANCE = yaml.safe_load((INPUTS / "instance.yaml").read_text())
BINDING = yaml.safe_load((INPUTS / "binding.yaml").read_text())
LIVE = {
    name: yaml.safe_load((INPUTS / "sources" / f"{name}.yaml").read_text()) for name in ("postgresql", "secret", "svc")
}
BINDING_ID = BINDING["metadata"]["name"]


@pytest.fixture(scope="module")
def renderer() -> Any:
    renderer = Renderer()
    yield renderer
    renderer.go.close()


def inputs(**overrides: Any) -> RenderInputs:
    base: dict[str, Any] = {
        "instance": INSTANCE,
        "default_namespace": "opbroker",
        "context_namespace": "team-a",
        "sources": LIVE,
    }
    return RenderInputs(**(base | overrides))


def test_the_seed_plan_is_gotemplate_and_the_port_jinja2() -> None:
    assert {t.type.value for t in SEED.spec.templates} == {"gotemplate"}
    assert {t.type.value for t in PORT.spec.templates} == {"jinja2"}


@pytest.mark.parametrize("binding", [None, BINDING], ids=["instance", "binding"])
def test_sources_agree_with_the_jinja2_port(renderer: Renderer, binding: Any) -> None:
    go = renderer.render_sources(SEED, inputs(binding=binding, sources={}))
    assert go == renderer.render_sources(PORT, inputs(binding=binding, sources={}))
    assert set(go) == ({"postgresql", "secret", "svc"} if binding else {"postgresql"})


def test_provision_agrees_with_the_jinja2_port(renderer: Renderer) -> None:
    go = renderer.render_objects(SEED, TemplateAction.PROVISION, inputs(sources={}))
    jinja = renderer.render_objects(PORT, TemplateAction.PROVISION, inputs(sources={}))
    assert [o.manifest for o in go.objects] == [o.manifest for o in jinja.objects]
    manifest = go.objects[0].manifest
    assert manifest["metadata"]["namespace"] == "team-a"
    assert manifest["spec"]["volume"] == {"size": "20Gi"}
    assert manifest["spec"]["resources"]["limits"] == {"cpu": "1", "memory": "2Gi"}
    assert go.registry == jinja.registry


def test_provision_with_load_balancers_lists_the_ranges(renderer: Renderer) -> None:
    document = SEED.to_manifest()
    document["spec"]["context"].update(enableLoadBalancers=True, allowedSourceRanges=["10.0.0.0/8"])
    spec = renderer.render_objects(SFPlan.model_validate(document), TemplateAction.PROVISION, inputs())
    rendered = spec.objects[0].manifest["spec"]
    assert rendered["enableMasterLoadBalancer"] is True
    assert rendered["allowedSourceRanges"] == ["10.0.0.0/8"]


@pytest.mark.parametrize(
    ("cluster_status", "want"),
    [
        ("Running", OperationState.SUCCEEDED),
        ("CreateFailed", OperationState.FAILED),
        ("UpdateFailed", OperationState.FAILED),
        ("Creating", OperationState.IN_PROGRESS),
        (None, OperationState.IN_PROGRESS),
    ],
)
def test_status_provision_follows_the_cluster(renderer: Renderer, cluster_status: str | None, want: Any) -> None:
    live = copy.deepcopy(LIVE)
    if cluster_status is None:
        del live["postgresql"]["status"]
    else:
        live["postgresql"]["status"]["PostgresClusterStatus"] = cluster_status
    go = renderer.render_status(SEED, inputs(sources=live))
    assert go.provision is not None and go.provision.state is want
    assert renderer.render_status(PORT, inputs(sources=live)).provision == go.provision


def test_status_bind_builds_the_credentials_from_the_live_secret(renderer: Renderer) -> None:
    go = renderer.render_status(SEED, inputs(binding=BINDING))
    assert go.bind is not None and go.bind.state is OperationState.SUCCEEDED
    assert go.bind.response == {
        "credentials": {
            "uri": f"postgres://{BINDING_ID}:s3cr3t-password@10.96.12.34:5432/main?sslmode=require",
            "username": BINDING_ID,
            "password": "s3cr3t-password",
            "hostname": "10.96.12.34",
            "port": "5432",
            "dbname": "main",
        }
    }
    jinja = renderer.render_status(PORT, inputs(binding=BINDING))
    assert jinja.bind is not None and jinja.bind.response == go.bind.response
    assert "s3cr3t" not in repr(go)


def test_status_bind_waits_for_the_secret(renderer: Renderer) -> None:
    live = copy.deepcopy(LIVE)
    live["secret"] = None
    go = renderer.render_status(SEED, inputs(binding=BINDING, sources=live))
    assert go.bind is not None and go.bind.state is OperationState.IN_PROGRESS and go.bind.response is None


def test_status_deprovision_waits_for_the_cluster_to_go(renderer: Renderer) -> None:
    present = renderer.render_status(SEED, inputs())
    gone = renderer.render_status(SEED, inputs(sources={"postgresql": None}))
    assert present.deprovision is not None and present.deprovision.state is OperationState.IN_PROGRESS
    assert gone.deprovision is not None and gone.deprovision.state is OperationState.SUCCEEDED
    assert present.unbind is not None and present.unbind.state is OperationState.SUCCEEDED


def test_bind_and_unbind_edit_the_live_clusters_users(renderer: Renderer) -> None:
    bound = renderer.render_objects(SEED, TemplateAction.BIND, inputs(binding=BINDING))
    (obj,) = bound.objects
    assert obj.manifest["spec"]["users"] == {"main": ["superuser", "createdb"], BINDING_ID: ["superuser"]}
    assert LIVE["postgresql"]["spec"]["users"] == {"main": ["superuser", "createdb"]}, "the input was mutated"
    assert bound.binding_registry is not None and bound.binding_registry["binding-id"] == BINDING_ID
    live = copy.deepcopy(LIVE)
    live["postgresql"]["spec"]["users"][BINDING_ID] = ["superuser"]
    unbound = renderer.render_objects(SEED, TemplateAction.UNBIND, inputs(binding=BINDING, sources=live))
    assert unbound.objects[0].manifest["spec"]["users"] == {"main": ["superuser", "createdb"]}


def test_bind_before_the_cluster_exists_names_plan_action_and_line(renderer: Renderer) -> None:
    with pytest.raises(RenderError) as caught:
        renderer.render_objects(SEED, TemplateAction.BIND, inputs(binding=BINDING, sources={"postgresql": None}))
    message = str(caught.value)
    assert "plan '39d7d4c8-6fe2-4c2a-a5ca-b826937d5a88', action 'bind', template bind line 5 column" in message
    # Go's own words: `get $postgresql "spec"` on a missing object gives "", which `get` then refuses.
    assert "at <$spec>: wrong type for value; expected map[string]interface {}; got string" in message


def test_one_process_serves_every_render_and_thread(renderer: Renderer) -> None:
    renderer.render_sources(SEED, inputs())
    pid, starts = renderer.go.pid, renderer.go.starts

    def one(index: int) -> tuple[int, str]:
        instance = copy.deepcopy(INSTANCE)
        instance["metadata"]["name"] = f"inst-{index}"
        rendered = renderer.render_objects(SEED, TemplateAction.PROVISION, inputs(instance=instance))
        return index, rendered.objects[0].manifest["metadata"]["name"]

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(one, range(200)))
    assert all(name == f"sapcp-inst-{index}" for index, name in results)
    assert (renderer.go.pid, renderer.go.starts) == (pid, starts)


def test_a_credential_that_breaks_the_yaml_never_reaches_the_error(renderer: Renderer) -> None:
    # sprig's squote does not escape quotes: a password holding one makes the status text invalid YAML.
    # The error names the line, but must not quote it (it holds the credentials).
    import base64

    live = copy.deepcopy(LIVE)
    live["secret"]["data"]["password"] = base64.b64encode(b"it's-s3cr3t").decode()
    with pytest.raises(RenderError) as caught:
        renderer.render_status(SEED, inputs(binding=BINDING, sources=live))
    message = str(caught.value)
    assert "the rendered text is not valid YAML" in message and "of the rendered text" in message
    assert "s3cr3t" not in message and "it's" not in message
