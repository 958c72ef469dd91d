"""The example Zalando PostgreSQL plan (jinja2 port of Service Fabrik's gotemplate plan) renders as the seed does.

Aspects covered: sources with and without a binding; provision sized from ``plan.spec.context`` (and the
load-balancer branch); bind adds the binding's superuser to the live cluster and unbind removes it, without
server-populated fields; status follows PostgresClusterStatus, builds the bind credentials (uri, username,
password, hostname, port, dbname) from the live Secret and Service, and reports deprovision; re-rendering is
byte-identical; concurrent renders on threads do not interfere.
"""

from __future__ import annotations

import base64
import copy
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from opbroker.api import OperationState, ResourceRef, SFPlan, TemplateAction
from opbroker.rendering import Renderer, RenderError, RenderInputs

REPO = Path(__file__).resolve().parents[2]
CATALOG = REPO / "examples" / "catalog"
INPUTS = CATALOG / "render-inputs"
CLUSTER = "sapcp-0304b210-fcfd-11e8-a31b-b6001f10c97f"
BINDING_ID = "de3dd272-fcfc-11e8-a31b-b6001f10c97f"


def load(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(path.read_text())
    return document


PLAN_DOC = load(CATALOG / "postgresql-zalando-plan.yaml")
PLAN = SFPlan.model_validate(PLAN_DOC)
INSTANCE = load(INPUTS / "instance.yaml")
BINDING = load(INPUTS / "binding.yaml")
LIVE = {name: load(INPUTS / "sources" / f"{name}.yaml") for name in ("postgresql", "secret", "svc")}
RENDERER = Renderer()


def inputs(**overrides: Any) -> RenderInputs:
    base: dict[str, Any] = {
        "instance": INSTANCE,
        "default_namespace": "opbroker",
        "context_namespace": "team-a",
        "sources": LIVE,
    }
    return RenderInputs(**(base | overrides))


def plan_with_context(**context: Any) -> SFPlan:
    document = copy.deepcopy(PLAN_DOC)
    document["spec"]["context"].update(context)
    return SFPlan.model_validate(document)


def test_sources_without_a_binding_name_only_the_cluster() -> None:
    refs = RENDERER.render_sources(PLAN, inputs(sources={}))
    assert refs == {
        "postgresql": ResourceRef(api_version="acid.zalan.do/v1", kind="postgresql", name=CLUSTER, namespace="team-a")
    }


def test_sources_with_a_binding_add_the_users_secret_and_the_service() -> None:
    refs = RENDERER.render_sources(PLAN, inputs(binding=BINDING, sources={}))
    assert set(refs) == {"postgresql", "secret", "svc"}
    assert refs["secret"] == ResourceRef(
        api_version="v1",
        kind="Secret",
        name=f"{BINDING_ID}.{CLUSTER}.credentials.postgresql.acid.zalan.do",
        namespace="team-a",
    )
    assert refs["svc"] == ResourceRef(api_version="v1", kind="Service", name=CLUSTER, namespace="team-a")


def test_provision_renders_the_cluster_sized_from_the_plan_context() -> None:
    rendered = RENDERER.render_objects(PLAN, TemplateAction.PROVISION, inputs(sources={}))
    assert len(rendered.objects) == 1
    assert not rendered.objects[0].singleton
    assert rendered.objects[0].manifest == {
        "apiVersion": "acid.zalan.do/v1",
        "kind": "postgresql",
        "metadata": {
            "name": CLUSTER,
            "annotations": {
                "operator-broker/service-id": "24731fb8-7b84-5f57-914f-c3d55d793dd4",
                "operator-broker/plan-id": "39d7d4c8-6fe2-4c2a-a5ca-b826937d5a88",
            },
            "namespace": "team-a",
        },
        "spec": {
            "teamId": "sapcp",
            "postgresql": {"version": "9.6", "parameters": {"max_connections": "100"}},
            "numberOfInstances": 2,
            "databases": {"main": "main"},
            "users": {"main": ["superuser", "createdb"]},
            "resources": {
                "requests": {"cpu": "500m", "memory": "256Mi"},
                "limits": {"cpu": "1", "memory": "2Gi"},
            },
            "volume": {"size": "20Gi"},
        },
    }
    assert rendered.registry["instance-id"] == "0304b210-fcfd-11e8-a31b-b6001f10c97f"
    assert rendered.registry["namespace"] == "team-a"
    assert rendered.binding_registry is None


def test_provision_with_load_balancers_opens_them_with_the_allowed_ranges() -> None:
    plan = plan_with_context(enableLoadBalancers=True, allowedSourceRanges=["10.0.0.0/8", "192.168.0.0/16"])
    spec = RENDERER.render_objects(plan, TemplateAction.PROVISION, inputs()).objects[0].manifest["spec"]
    assert spec["enableMasterLoadBalancer"] is True
    assert spec["enableReplicaLoadBalancer"] is True
    assert spec["allowedSourceRanges"] == ["10.0.0.0/8", "192.168.0.0/16"]


def test_provision_without_load_balancers_leaves_them_out() -> None:
    spec = RENDERER.render_objects(PLAN, TemplateAction.PROVISION, inputs()).objects[0].manifest["spec"]
    assert not {"enableMasterLoadBalancer", "enableReplicaLoadBalancer", "allowedSourceRanges"} & set(spec)


def test_bind_adds_a_superuser_named_after_the_binding_to_the_live_cluster() -> None:
    rendered = RENDERER.render_objects(PLAN, TemplateAction.BIND, inputs(binding=BINDING))
    (obj,) = rendered.objects
    assert obj.manifest["spec"]["users"] == {"main": ["superuser", "createdb"], BINDING_ID: ["superuser"]}
    assert obj.manifest["spec"]["volume"] == LIVE["postgresql"]["spec"]["volume"]
    assert "status" not in obj.manifest
    assert set(obj.manifest["metadata"]) == {"name", "namespace", "annotations"}  # no uid/resourceVersion
    assert LIVE["postgresql"]["spec"]["users"] == {"main": ["superuser", "createdb"]}, "the input was mutated"
    assert rendered.binding_registry is not None
    assert rendered.binding_registry["binding-id"] == BINDING_ID
    assert rendered.binding_registry["instance-id"] == rendered.registry["instance-id"]


def test_unbind_removes_the_bindings_user_and_keeps_the_others() -> None:
    live = copy.deepcopy(LIVE)
    live["postgresql"]["spec"]["users"][BINDING_ID] = ["superuser"]
    rendered = RENDERER.render_objects(PLAN, TemplateAction.UNBIND, inputs(binding=BINDING, sources=live))
    assert rendered.objects[0].manifest["spec"]["users"] == {"main": ["superuser", "createdb"]}


def test_bind_before_the_cluster_exists_says_which_source_is_missing() -> None:
    with pytest.raises(RenderError) as caught:
        RENDERER.render_objects(PLAN, TemplateAction.BIND, inputs(binding=BINDING, sources={"postgresql": None}))
    message = str(caught.value)
    assert "plan '39d7d4c8-6fe2-4c2a-a5ca-b826937d5a88', action 'bind', template bind line 1" in message
    assert "required: the live postgresql object (source 'postgresql') is missing" in message


def _with_status(cluster_status: str | None) -> dict[str, Any]:
    live = copy.deepcopy(LIVE)
    if cluster_status is None:
        del live["postgresql"]["status"]
    else:
        live["postgresql"]["status"]["PostgresClusterStatus"] = cluster_status
    return live


@pytest.mark.parametrize(
    ("cluster_status", "want"),
    [
        ("Running", OperationState.SUCCEEDED),
        ("CreateFailed", OperationState.FAILED),
        ("UpdateFailed", OperationState.FAILED),
        ("Creating", OperationState.IN_PROGRESS),
        ("Updating", OperationState.IN_PROGRESS),
        (None, OperationState.IN_PROGRESS),
    ],
)
def test_status_provision_follows_the_cluster_status(cluster_status: str | None, want: OperationState) -> None:
    result = RENDERER.render_status(PLAN, inputs(sources=_with_status(cluster_status)))
    assert result.provision is not None
    assert result.provision.state is want


def test_status_bind_answers_the_credentials_from_the_live_secret_and_service() -> None:
    result = RENDERER.render_status(PLAN, inputs(binding=BINDING))
    assert result.bind is not None
    assert result.bind.state is OperationState.SUCCEEDED
    assert result.bind.response == {
        "credentials": {
            "uri": f"postgres://{BINDING_ID}:s3cr3t-password@10.96.12.34:5432/main?sslmode=require",
            "username": BINDING_ID,
            "password": "s3cr3t-password",
            "hostname": "10.96.12.34",
            "port": "5432",
            "dbname": "main",
        }
    }
    assert "s3cr3t" not in repr(result), "credentials must not reach a log line through repr"


@pytest.mark.parametrize(
    ("reason", "drop"),
    [
        ("no Secret yet", "secret"),
        ("no Service yet", "svc"),
    ],
)
def test_status_bind_is_in_progress_until_secret_and_service_exist(reason: str, drop: str) -> None:
    live = copy.deepcopy(LIVE)
    live[drop] = None
    result = RENDERER.render_status(PLAN, inputs(binding=BINDING, sources=live))
    assert result.bind is not None
    assert result.bind.state is OperationState.IN_PROGRESS, reason
    assert result.bind.response is None


def test_status_bind_with_load_balancers_uses_the_ingress_address() -> None:
    live = copy.deepcopy(LIVE)
    live["svc"]["status"] = {"loadBalancer": {"ingress": [{"hostname": "pg.example.com"}]}}
    plan = plan_with_context(enableLoadBalancers=True)
    result = RENDERER.render_status(plan, inputs(binding=BINDING, sources=live))
    assert result.bind is not None and result.bind.response is not None
    assert result.bind.response["credentials"]["hostname"] == "pg.example.com"
    assert "@pg.example.com:5432/" in result.bind.response["credentials"]["uri"]


def test_status_unbind_succeeds_and_deprovision_waits_for_the_cluster_to_go() -> None:
    present = RENDERER.render_status(PLAN, inputs())
    gone = RENDERER.render_status(PLAN, inputs(sources={"postgresql": None}))
    assert present.unbind is not None and present.unbind.state is OperationState.SUCCEEDED
    assert present.deprovision is not None and present.deprovision.state is OperationState.IN_PROGRESS
    assert gone.deprovision is not None and gone.deprovision.state is OperationState.SUCCEEDED


def test_status_reports_the_operators_reason_as_description() -> None:
    live = _with_status("CreateFailed")
    live["postgresql"]["status"]["reason"] = "volume quota exceeded"
    result = RENDERER.render_status(PLAN, inputs(sources=live))
    assert result.provision is not None
    assert result.provision.description == "volume quota exceeded"


def test_re_rendering_the_same_instance_is_byte_identical() -> None:
    first = RENDERER.render_objects(PLAN, TemplateAction.PROVISION, inputs())
    again = Renderer().render_objects(PLAN, TemplateAction.PROVISION, inputs(registry=first.registry))
    dump = [yaml.safe_dump(o.manifest, sort_keys=False) for o in first.objects]
    assert dump == [yaml.safe_dump(o.manifest, sort_keys=False) for o in again.objects]
    assert again.registry == first.registry


def test_secret_data_is_read_as_base64() -> None:
    live = copy.deepcopy(LIVE)
    live["secret"]["data"]["password"] = base64.b64encode(b"p@ss:w/rd").decode()
    result = RENDERER.render_status(PLAN, inputs(binding=BINDING, sources=live))
    assert result.bind is not None and result.bind.response is not None
    assert result.bind.response["credentials"]["password"] == "p@ss:w/rd"


def test_concurrent_renders_on_threads_do_not_interfere() -> None:
    def one(index: int) -> tuple[int, str]:
        instance = copy.deepcopy(INSTANCE)
        instance["metadata"]["name"] = f"inst-{index}"
        rendered = RENDERER.render_objects(PLAN, TemplateAction.PROVISION, inputs(instance=instance))
        return index, rendered.objects[0].manifest["metadata"]["name"]

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(one, range(200)))
    assert all(name == f"sapcp-inst-{index}" for index, name in results)
