"""The real Pulumi engine against a local control plane (no node): `pulumi preview`, `up`, `refresh` and `destroy`
of the Python root stack (examples/stack) and the Python example (examples/pulumi-python) as inline Automation API
programs (``opbroker.stacks``: the program runs in this process, no Python language host), preview diffs of one
plan field, errors naming the field, the policy pack through the policy protocol, the Pulumi YAML example through
the component provider (the proof for every other language), the OSB ServiceInstance/ServiceBinding of both
examples against an OSB broker the test serves (provision, bind, secret credentials, unbind then deprovision on
destroy; tests/pulumi/test_osb_resources.py has refresh and failures), and the Service Catalog components
(Broker, Instance, Binding) against the CRDs with no controller running.

Tests in this module share one stack and run in order.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import runpy
import secrets
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from pulumi import automation as auto

from opbroker import stacks
from opbroker.api import SFPlan as SFPlanModel
from opbroker.api import SFService as SFServiceModel
from opbroker.api.crd import all_crds
from opbroker.components import testing
from opbroker.devcluster.processes import Process
from opbroker.devcluster.pulumi_engine import (
    BIN,
    PACKAGES,
    POLICY_PACK,
    PROVIDER,
    PULUMI_KUBERNETES_VERSION,
    PULUMI_VERSION,
    REPO,
    ROOT_STACK,
    ROOT_STACK_IMAGE,
    ROOT_STACK_NAMESPACE,
    Engine,
    Project,
    declarations,
    escape,
    new_project,
    root_stack,
)
from tests.osb_fake_broker import FakeBroker, serve

pytestmark = pytest.mark.apiserver  # its own fixtures start a local control plane (tests/conftest.py)

pytest_plugins = ["tests.pulumi_engine_support"]

NAMESPACE = ROOT_STACK_NAMESPACE
IMAGE = ROOT_STACK_IMAGE
PASSWORD = secrets.token_urlsafe(16)
CRD_TYPE = "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"
PLAN_CR = "kubernetes:osb.servicefabrik.io/v1alpha1:SFPlan"
SERVICE_CR = "kubernetes:osb.servicefabrik.io/v1alpha1:SFService"


def root_stack_with(plan_changes: dict[str, dict[str, Any]]) -> Callable[[], None]:
    """The root stack's own program with some plans' args changed: ``__main__.py`` runs as it is, importing a
    ``declarations`` whose catalog carries the changes."""
    main = stacks.python_program(ROOT_STACK)

    def program() -> None:
        changed = declarations()
        original = changed.catalog
        changed.catalog = lambda namespace: [  # type: ignore[attr-defined]
            (kind, name, {**args, **plan_changes.get(name, {})}) for kind, name, args in original(namespace)
        ]
        saved = sys.modules.get("declarations")
        sys.modules["declarations"] = changed
        try:
            main()
        finally:
            if saved is None:
                sys.modules.pop("declarations", None)
            else:
                sys.modules["declarations"] = saved

    return program


def python_root_stack_registrations() -> set[tuple[str, str]]:
    """(type, name) of every resource the Python root stack registers, under Pulumi's mocks."""
    config_ = {
        "opbroker:image": IMAGE,
        "opbroker:namespace": NAMESPACE,
        "opbroker:awaitDeployments": "false",
        "opbroker:brokerPassword": PASSWORD,
    }

    def program() -> None:
        runpy.run_path(str(REPO / "examples" / "stack"), run_name="__main__")

    with testing.mocked(project="opbroker", config=config_) as mocks:
        pulumi.runtime.test(program)()
    return {(r.type, r.name) for r in mocks.registrations}


SECRET_SIG = "4dabf18193072939515e22adb298388d"
INSTANCE_TYPE = "opbroker:index:ServiceInstance"
BINDING_TYPE = "opbroker:index:ServiceBinding"


def assert_unbound_then_deprovisioned(broker: FakeBroker, since: int, instance_id: str) -> None:
    """What a destroy of an instance with one binding sent the OSB broker: the unbind, then the deprovision."""
    deletes = [r.path for r in broker.requests[since:] if r.method == "DELETE"]
    assert len(deletes) == 2, deletes
    assert deletes[0].startswith(f"/v2/service_instances/{instance_id}/service_bindings/")
    assert deletes[1] == f"/v2/service_instances/{instance_id}"
    assert broker.bindings == {} and broker.instances[instance_id].deleted


def urn_type_and_name(urn: str) -> tuple[str, str]:
    *_, qualified_type, name = urn.split("::")
    return qualified_type.rsplit("$", 1)[-1], name


@pytest.fixture(scope="module")
def api(engine: Engine) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(engine.kubeconfig))


@pytest.fixture(scope="module")
def stack(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> auto.Stack:
    return root_stack(engine, tmp_path_factory.mktemp("root-stack"), PASSWORD)


def assert_no_python_host_or_plugin_folder_on_path(engine: Engine) -> None:
    """What the engine could otherwise have used to start the provider or the pack: a Python language host, or
    an opbroker plugin found on PATH ("ambient")."""
    path = engine.env()["PATH"]
    for binary in ("pulumi-language-python", "pulumi-resource-opbroker", "pulumi-analyzer-policy-python"):
        assert shutil.which(binary, path=path) is None, f"{binary} is on the engine's PATH"


def steps(preview_json: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in preview_json.get("steps") or [] if s.get("op") != "same"]


def changes(preview: stacks.Preview) -> list[tuple[str, tuple[str, str]]]:
    return [(c.op, urn_type_and_name(c.urn)) for c in preview.changes]


def state_resources(stack: auto.Stack) -> list[dict[str, Any]]:
    return list(stack.export_stack().deployment.get("resources") or [])


# -- 1. the root stack: preview lists every resource, up creates them --------------------------------------------


def test_engine_binaries_report_the_versions_the_sdks_are_pinned_to(engine: Engine, tmp_path: Path) -> None:
    assert engine.run(tmp_path, "version").stdout.strip() == f"v{PULUMI_VERSION}"
    from importlib.metadata import version

    assert version("pulumi") == PULUMI_VERSION
    assert version("pulumi-kubernetes") == PULUMI_KUBERNETES_VERSION
    assert (BIN / "pulumi-resource-kubernetes").is_file()


def test_preview_of_the_root_stack_lists_every_resource_the_python_program_registers(stack: auto.Stack) -> None:
    preview = stacks.preview(stack)
    planned = {name for op, name in changes(preview) if op == "create"}
    expected = {(t, n) for t, n in python_root_stack_registrations() if not t.startswith("pulumi:")}
    assert expected - planned == set(), f"the engine's plan misses {sorted(expected - planned)}"
    engine_own = {("pulumi:pulumi:Stack", "opbroker-test"), ("pulumi:providers:kubernetes", "default_4_25_0")}
    assert planned - expected - engine_own == set()
    assert preview.summary == {"create": len(planned) - 1}  # the summary leaves out the default provider
    assert sum(1 for t, _ in planned if t == CRD_TYPE) == len(all_crds())


def test_up_creates_the_control_plane_and_the_catalog_dev_applies(stack: auto.Stack, api: client.ApiClient) -> None:
    stacks.up(stack)

    crds = {c.metadata.name for c in client.ApiextensionsV1Api(api).list_custom_resource_definition().items}
    assert {c["metadata"]["name"] for c in all_crds()} <= crds
    apps = client.AppsV1Api(api)
    assert {d.metadata.name for d in apps.list_namespaced_deployment(NAMESPACE).items} == {
        "opbroker-controller",
        "opbroker-broker",
    }
    assert client.CoreV1Api(api).read_namespaced_service("opbroker-broker", NAMESPACE).spec.ports[0].port == 8080
    budgets = client.PolicyV1Api(api).list_namespaced_pod_disruption_budget(NAMESPACE).items
    assert {b.metadata.name for b in budgets} == {"opbroker-controller", "opbroker-broker"}
    # The objects in the cluster are the ones `opbroker dev` applies (examples/demo_operator/catalog.yaml).
    custom = client.CustomObjectsApi(api)
    documents = list(yaml.safe_load_all((REPO / "examples" / "demo_operator" / "catalog.yaml").read_text()))
    for document, plural, model in zip(
        documents, ("sfservices", "sfplans"), (SFServiceModel, SFPlanModel), strict=True
    ):
        live = custom.get_namespaced_custom_object(
            "osb.servicefabrik.io", "v1alpha1", NAMESPACE, plural, document["metadata"]["name"]
        )
        assert model.model_validate({**document, "spec": live["spec"]}).spec == model.model_validate(document).spec

    outputs = stacks.outputs(stack)
    assert stack.outputs()["brokerPassword"].secret
    assert outputs["brokerUrl"] == "http://opbroker-broker.opbroker.svc:8080"
    assert outputs["brokerUsername"] == "opbroker"
    assert outputs["brokerPassword"] == PASSWORD
    assert outputs["namespace"] == NAMESPACE
    assert sorted(outputs["crds"]) == sorted(c["metadata"]["name"] for c in all_crds())
    assert outputs["plan"] == declarations().PLAN_ID


def test_a_second_up_changes_nothing(stack: auto.Stack) -> None:
    preview = stacks.preview(stack)
    assert changes(preview) == []
    assert stacks.deploy(stack).up is None  # nothing to do: no up


def test_wait_for_ready_completes_once_the_controller_reports_the_catalog_ready(
    engine: Engine, stack: auto.Stack, api: client.ApiClient, tmp_path: Path
) -> None:
    controller = Process(
        "controller",
        [
            str(Path(sys.executable).parent / "opbroker"),
            "controller",
            "run",
            "--kubeconfig",
            str(engine.kubeconfig),
            "--no-leader-election",
            "--namespace",
            NAMESPACE,
        ],
        tmp_path,
    )
    controller.start()
    try:
        waiting = {"wait_for_ready": True}
        started = time.monotonic()
        stacks.up(stack, program=root_stack_with({"demo-db": waiting, "demo-db-small": waiting}))
        seconds = time.monotonic() - started
    finally:
        controller.stop()
    assert seconds < 120
    custom = client.CustomObjectsApi(api)
    for plural, name in (("sfservices", "demo-db"), ("sfplans", "demo-db-small")):
        live = custom.get_namespaced_custom_object("osb.servicefabrik.io", "v1alpha1", NAMESPACE, plural, name)
        assert live["metadata"]["annotations"]["pulumi.com/waitFor"] == "condition=Ready"
        ready = next(c for c in live["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True"
    release_guards_of_a_controller_gone_for_good(custom)
    stacks.up(stack)


def release_guards_of_a_controller_gone_for_good(custom: client.CustomObjectsApi) -> None:
    """The controller ran for the test above only; the module's later tests run without one.

    It guarded the catalog with its teardown finalizer (a service and a plan in use are kept until released), so
    the later deletions (refresh after an out-of-band delete, destroy) would wait for a controller that never comes
    back. Removed as an operator does after uninstalling a controller for good.
    """
    for plural in ("sfservices", "sfplans"):
        for item in custom.list_namespaced_custom_object("osb.servicefabrik.io", "v1alpha1", NAMESPACE, plural)[
            "items"
        ]:
            if item["metadata"].get("finalizers"):
                patch = {"metadata": {"finalizers": None, "resourceVersion": item["metadata"]["resourceVersion"]}}
                custom.patch_namespaced_custom_object(
                    "osb.servicefabrik.io", "v1alpha1", NAMESPACE, plural, item["metadata"]["name"], patch
                )


# -- 2. preview diffs before rollout -----------------------------------------------------------------------------


def test_a_changed_plan_field_previews_as_exactly_that_change_and_up_applies_it(
    stack: auto.Stack, api: client.ApiClient
) -> None:
    new_description = "1 GB demo database, now described differently"
    program = root_stack_with({"demo-db-small": {"description": new_description}})
    preview = stacks.preview(stack, program=program)
    assert changes(preview) == [("update", (PLAN_CR, "demo-db-small"))]
    (change,) = preview.changes
    assert change.properties == {"spec.description": "update"}
    assert new_description in preview.text and "1 GB demo database, ready after about a second" in preview.text

    deployed = stacks.deploy(stack, approve=lambda planned: planned.changes == preview.changes, program=program)
    assert deployed.preview.changes == preview.changes
    assert deployed.up is not None and deployed.up.summary.resource_changes is not None
    assert deployed.up.summary.resource_changes["update"] == 1
    assert set(deployed.up.summary.resource_changes) == {"update", "same"}
    live = client.CustomObjectsApi(api).get_namespaced_custom_object(
        "osb.servicefabrik.io", "v1alpha1", NAMESPACE, "sfplans", "demo-db-small"
    )
    assert live["spec"]["description"] == new_description
    stacks.up(stack)  # the root stack as it is again


def test_an_invalid_plan_fails_preview_naming_the_field(stack: auto.Stack) -> None:
    program = root_stack_with(
        {"demo-db-small": {"templates": [{"action": "provison", "type": "jinja2", "content": "{}"}]}}
    )
    with pytest.raises(auto.CommandError) as failed:
        stacks.preview(stack, program=program)
    # The component refuses the args before it registers anything, naming the component, the field and the values.
    assert "SFPlan 'demo-db-small' is invalid:\n  templates[0].action: Input should be 'provision'" in str(failed.value)


def test_a_template_that_does_not_compile_fails_preview_naming_the_template(stack: auto.Stack) -> None:
    broken = {"action": "provision", "type": "jinja2", "content": "kind: {{ plan.spec.context.storageGB "}
    status = {"action": "status", "type": "jinja2", "content": "provision: {state: succeeded}"}
    with pytest.raises(auto.CommandError) as failed:
        stacks.preview(stack, program=root_stack_with({"demo-db-small": {"templates": [broken, status]}}))
    assert "SFPlan 'demo-db-small' is invalid:\n  templates[0]: plan 'demo-db-small', action 'provision', " in str(
        failed.value
    )
    assert "template provision line 1: syntax error" in str(failed.value)


# -- policies through the policy protocol -----------------------------------------------------------------------

BAD_PLAN = {
    "apiVersion": "osb.servicefabrik.io/v1alpha1",
    "kind": "SFPlan",
    "metadata": {"name": "hand-written", "namespace": NAMESPACE},
    "spec": {
        "id": "hand-written",
        "name": "hand-written",
        "description": "written by hand, outside the components",
        "serviceId": "6f4e7a0c-2f0a-4d5e-9b1a-0d6c1e0f5a11",
        "manager": {"async": True},
        "templates": [{"action": "provision", "type": "helm", "content": "apiVersion: v1"}],
        "schemas": {"service_instance": {"create": {"parameters": {"type": 12}}}},
    },
}


def test_the_policy_pack_passes_the_root_stack_and_rejects_what_its_policies_name(
    engine: Engine, stack: auto.Stack, tmp_path: Path
) -> None:
    # The pack is an executable analyzer the engine starts itself: no language host, nothing on PATH.
    assert_no_python_host_or_plugin_folder_on_path(engine)
    policy_pack = str(POLICY_PACK)
    passed = stacks.preview(stack, policy_packs=[policy_pack])
    assert not passed.changes
    # The preview lists the packs it ran as name|local|path (a long path shortened in the middle), version.
    ran = re.search(r"^ +opbroker\|local\|\S*/pulumi-analyzer-opbroker +0\.0\.1$", passed.text, re.MULTILINE)
    assert ran, passed.text

    program = {
        "name": "opbroker-policies",
        "runtime": "yaml",
        "resources": {
            "everything": {
                "type": "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole",
                "properties": {
                    "metadata": {"name": "opbroker-test-everything"},
                    "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}],
                },
            },
            "hand-written": {
                "type": "kubernetes:yaml/v2:ConfigGroup",
                "properties": {"yaml": escape(yaml.safe_dump(BAD_PLAN))},
            },
        },
    }
    project = new_project(engine, tmp_path / "policies", program)
    result = project.preview("--policy-pack", policy_pack, expect_failure=True)
    assert "opbroker-no-wildcard-rbac" in result.output
    assert "grants '*' verbs on '*' resources" in result.output
    assert "opbroker-plan-valid" in result.output
    # A helm template must name its chart (since gotemplate and helm plans render): this one names none.
    assert "a helm template needs its chart archive in exactly one of url or contentEncoded" in result.output
    assert "opbroker-parameter-schemas-valid" in result.output
    assert "spec.schemas.service_instance.create.parameters" in result.output


# -- the Python example (examples/pulumi-python) against the root stack's control plane ---------------------------

EXAMPLE = REPO / "examples" / "pulumi-python"
EXAMPLE_PROJECT = "opbroker-example-python"
OSB_GROUP = "osb.servicefabrik.io"


def test_the_python_example_previews_deploys_and_destroys_as_an_inline_program(
    engine: Engine, stack: auto.Stack, api: client.ApiClient, tmp_path: Path
) -> None:
    # With brokerUrl: its OSB ServiceInstance/ServiceBinding (the provider's custom resources, through the plugin
    # the stack's `packages:` names) provision and bind at an OSB broker this test serves.
    kubeconfig = engine.kubeconfig.read_text()
    broker = FakeBroker(username="opbroker", password=PASSWORD, polls=1)
    with serve(broker) as broker_url:
        example = stacks.select_stack(
            EXAMPLE_PROJECT,
            "test",
            stacks.python_program(EXAMPLE),
            engine.settings(tmp_path),
            config={
                "namespace": NAMESPACE,
                "cluster2Kubeconfig": auto.ConfigValue(kubeconfig, secret=True),
                "brokerUrl": broker_url,
                "brokerPassword": auto.ConfigValue(PASSWORD, secret=True),
            },
        )
        deploy_and_destroy_the_python_example(example, api, broker, kubeconfig)
    assert changes(stacks.preview(stack)) == []  # the root stack's own objects are untouched


def deploy_and_destroy_the_python_example(
    example: auto.Stack, api: client.ApiClient, broker: FakeBroker, kubeconfig: str
) -> None:
    preview = stacks.preview(example)
    planned = {name for op, name in changes(preview) if op == "create"}
    objects = {
        ("SFService", "redis"),
        ("SFPlan", "redis-small"),
        ("SFCluster", "cluster-2"),
        ("RegisteredService", "orders-db"),
        ("ServiceClaim", "orders-app-db"),
    }
    for kind, name in objects:
        assert (f"opbroker:index:{kind}", name) in planned
        assert any(t.startswith("kubernetes:") and t.endswith(f":{kind}") and n == name for t, n in planned), name
    assert ("kubernetes:core/v1:Secret", "cluster-2-kubeconfig") in planned
    assert {(INSTANCE_TYPE, "orders-cache"), (BINDING_TYPE, "orders-cache-app")} <= planned

    stacks.up(example)
    custom = client.CustomObjectsApi(api)
    plan = custom.get_namespaced_custom_object(
        OSB_GROUP, "v1alpha1", NAMESPACE, "sfplans", stacks.outputs(example)["plan"]
    )
    assert plan["spec"]["templates"][0]["content"] == (EXAMPLE / "templates" / "provision.yaml.j2").read_text()
    secret = client.CoreV1Api(api).read_namespaced_secret("2-kubeconfig", NAMESPACE)
    assert base64.b64decode(secret.data["kubeconfig"]).decode() == kubeconfig
    assert kubeconfig not in json.dumps(example.export_stack().deployment)  # a secret in the state
    outputs = example.outputs()
    instance_id = outputs["cacheInstance"].value
    assert broker.instances[instance_id].body["plan_id"] == "0a4e4f5c-8d2b-4b8e-9f0e-6c7d8e9fa102"
    assert outputs["cacheCredentials"].secret and outputs["cacheCredentials"].value["password"] == "s3cr3t"
    assert changes(stacks.preview(example)) == []

    before = len(broker.requests)
    stacks.destroy(example)
    assert_unbound_then_deprovisioned(broker, before, instance_id)
    with pytest.raises(ApiException) as gone:
        custom.get_namespaced_custom_object(OSB_GROUP, "v1alpha1", NAMESPACE, "sfplans", plan["metadata"]["name"])
    assert gone.value.status == 404


# -- 5. refresh reports drift; destroy keeps retained CRDs -----------------------------------------------------


def test_refresh_reports_an_object_deleted_and_one_changed_out_of_band(
    stack: auto.Stack, api: client.ApiClient
) -> None:
    custom = client.CustomObjectsApi(api)
    custom.delete_namespaced_custom_object("osb.servicefabrik.io", "v1alpha1", NAMESPACE, "sfservices", "demo-db")
    custom.patch_namespaced_custom_object(
        "osb.servicefabrik.io",
        "v1alpha1",
        NAMESPACE,
        "sfplans",
        declarations().PLAN_ID,  # the object's name: the plan id (Service Fabrik's convention)
        {"spec": {"description": "edited with kubectl"}},
    )
    refreshed = stacks.refresh(stack)
    assert "demo-db" in refreshed.stdout and "deleted" in refreshed.stdout
    assert "edited with kubectl" in refreshed.stdout
    # The drift is in the state now: the next preview puts back what the program declares.
    ops = {name: op for op, name in changes(stacks.preview(stack))}
    assert ops[(SERVICE_CR, "demo-db")] == "create"
    assert ops[(PLAN_CR, "postgresql-small")] == "update"
    stacks.up(stack)
    live = custom.get_namespaced_custom_object(
        "osb.servicefabrik.io", "v1alpha1", NAMESPACE, "sfplans", declarations().PLAN_ID
    )
    assert live["spec"]["description"] == "One PostgreSQL 16 instance with 10 GiB of storage"


def crd_names(api: client.ApiClient) -> set[str]:
    return {c.metadata.name for c in client.ApiextensionsV1Api(api).list_custom_resource_definition().items}


def test_destroy_keeps_the_retained_crds(stack: auto.Stack, api: client.ApiClient) -> None:
    stacks.destroy(stack)
    ours = {c["metadata"]["name"] for c in all_crds()}
    assert ours <= crd_names(api)
    with pytest.raises(ApiException) as gone:
        client.AppsV1Api(api).read_namespaced_deployment("opbroker-broker", NAMESPACE)
    assert gone.value.status == 404
    assert state_resources(stack) == []


def test_with_retain_crds_false_destroy_removes_them(engine: Engine, api: client.ApiClient, tmp_path: Path) -> None:
    # The retained CRDs are in the cluster: a new stack adopts them (the Kubernetes provider's upsert).
    not_retained = root_stack(engine, tmp_path, PASSWORD, stack="crds-not-retained")
    not_retained.set_config("retainCrds", auto.ConfigValue("false"))
    stacks.up(not_retained)
    ours = {c["metadata"]["name"] for c in all_crds()}
    assert ours <= crd_names(api)
    stacks.destroy(not_retained)
    assert not ours & crd_names(api)


# -- 3. the component provider from another language: examples/pulumi-yaml ------------------------------------


def test_the_pulumi_yaml_example_previews_and_deploys_through_the_component_provider(
    engine: Engine, api: client.ApiClient, tmp_path: Path
) -> None:
    example = yaml.safe_load((REPO / "examples" / "pulumi-yaml" / "Pulumi.yaml").read_text())
    program = copy.deepcopy(example)
    # The example's own `packages:` path, relative to its folder, made absolute for the copy: the engine runs
    # the executable beside the provider's PulumiPlugin.yaml, with no Python language host and nothing on PATH.
    assert (REPO / "examples" / "pulumi-yaml" / program["packages"]["opbroker"]).resolve() == PROVIDER
    program["packages"] = PACKAGES
    assert_no_python_host_or_plugin_folder_on_path(engine)
    project = new_project(engine, tmp_path / "yaml-example", program)
    project.set_config("brokerPassword", PASSWORD, secret=True)
    project.set_config("namespace", "opbroker-yaml")
    project.set_config("awaitDeployments", "false")  # no node: the pods never start
    # The example's ServiceInstance/ServiceBinding provision and bind at an OSB broker this test serves.
    broker = FakeBroker(username="opbroker", password=PASSWORD, polls=1)
    with serve(broker) as broker_url:
        project.set_config("osbBrokerUrl", broker_url)
        deploy_and_destroy_the_yaml_example(project, broker)


def deploy_and_destroy_the_yaml_example(project: Project, broker: FakeBroker) -> None:
    preview = json.loads(project.run("preview", "--json").stdout)
    planned = {urn_type_and_name(s["urn"]) for s in steps(preview)}
    assert ("opbroker:index:SFPlan", "small") in planned
    assert ("kubernetes:autoscaling/v2:HorizontalPodAutoscaler", "controlPlane-broker") in planned
    assert {(INSTANCE_TYPE, "ordersDb"), (BINDING_TYPE, "ordersApp")} <= planned
    project.up()
    # Through the component provider the engine records the ControlPlane component as what the plan needs (the
    # `namespace` output's own dependencies, its CRDs and namespace, stay inside the provider), and the output
    # is known only when the ControlPlane's construct returns, i.e. after all its children were registered:
    # from another language the catalog waits for the Deployments when they are awaited (docs/pulumi.md).
    state = project.resources()
    plan = next(r for r in state if r["type"] == PLAN_CR)
    needs = set(plan.get("dependencies") or [])
    needs |= {u for us in (plan.get("propertyDependencies") or {}).values() for u in us}
    control_plane = next(r["urn"] for r in state if r["type"] == "opbroker:index:ControlPlane")
    assert control_plane in needs
    assert plan["outputs"]["metadata"]["namespace"] == "opbroker-yaml"
    outputs = project.outputs()
    assert outputs["brokerUrl"] == "http://opbroker-broker.opbroker-yaml.svc:8080"
    assert outputs["brokerPassword"] == PASSWORD
    assert outputs["plan"] == "b7f3a3f2-5a1c-4a52-a39f-2c4e3d9a7e21"
    instance_id = outputs["ordersDbInstanceId"]
    put = json.loads(broker.calls("PUT", f"/service_instances/{instance_id}")[0].body)
    assert (put["service_id"], put["plan_id"]) == ("6d4c3b8e-3e4f-4d8e-9c55-0a8f5c1d2b10", outputs["plan"])
    assert outputs["ordersDbCredentials"]["password"] == "s3cr3t"
    binding = next(r for r in state if r["type"] == BINDING_TYPE)
    assert binding["outputs"]["credentials"][SECRET_SIG] and binding["outputs"]["brokerPassword"][SECRET_SIG]
    before = len(broker.requests)
    project.run("destroy", "--yes", "--skip-preview")
    assert_unbound_then_deprovisioned(broker, before, instance_id)


# -- 4. the Service Catalog components: Broker, Instance, Binding (CRDs installed, no controller) ---------------

SVCAT_GROUP, SVCAT_VERSION = "servicecatalog.k8s.io", "v1alpha1"
SVCAT_NAMESPACE = "svcat-apps"


def install_service_catalog_crds(api: client.ApiClient) -> None:
    """The Service Catalog CRDs, as the ControlPlane installs them (here without one), Established."""
    from opbroker.api.crd import crd_for
    from opbroker.api.servicecatalog import SERVICE_CATALOG_KINDS

    extensions = client.ApiextensionsV1Api(api)
    names = []
    for model in SERVICE_CATALOG_KINDS:
        crd = crd_for(model)
        names.append(crd["metadata"]["name"])
        try:
            extensions.create_custom_resource_definition(crd)
        except ApiException as exc:
            if exc.status != 409:  # already installed (by an earlier stack's ControlPlane): the same CRD
                raise
    deadline = time.monotonic() + 60
    while True:
        conditions = [extensions.read_custom_resource_definition(n).status.conditions or [] for n in names]
        if all(any(c.type == "Established" and c.status == "True" for c in cs) for cs in conditions):
            return
        assert time.monotonic() < deadline, f"the Service Catalog CRDs are not Established: {conditions}"
        time.sleep(0.5)


def test_service_catalog_components_create_broker_instance_and_binding_without_a_controller(
    engine: Engine, api: client.ApiClient, tmp_path: Path
) -> None:
    install_service_catalog_crds(api)
    broker_password = secrets.token_urlsafe(16)
    admin_password = secrets.token_urlsafe(16)
    program = {
        "name": "opbroker-servicecatalog",
        "runtime": "yaml",
        "packages": PACKAGES,
        "resources": {
            "apps": {"type": "kubernetes:core/v1:Namespace", "properties": {"metadata": {"name": SVCAT_NAMESPACE}}},
            "best-db": {
                "type": "opbroker:index:Broker",
                "properties": {
                    "url": "http://best-db.brokers.svc:8080",
                    "basicAuth": {"username": "admin", "password": {"fn::secret": broker_password}},
                    "credentialsNamespace": "${apps.metadata.name}",
                    "relistDuration": "5m",
                    "waitForReady": False,  # no controller: nothing would ever report Ready
                },
            },
            "orders-db": {
                "type": "opbroker:index:Instance",
                "properties": {
                    "namespace": "${apps.metadata.name}",
                    "serviceClassName": "smalldb",
                    "planName": "small",
                    "parameters": {"storageGB": 1},
                    "secretParameters": {"fn::secret": {"adminPassword": admin_password}},
                },
                "options": {"dependsOn": ["${best-db}"]},
            },
            "orders-app": {
                "type": "opbroker:index:Binding",
                "properties": {
                    "namespace": "${apps.metadata.name}",
                    "instanceName": "${orders-db.objectName}",
                    "secretName": "orders-db-credentials",
                    "application": {"name": "orders"},
                },
            },
        },
        "outputs": {"secretName": "${orders-app.secretName}"},
    }
    project = new_project(engine, tmp_path / "servicecatalog", program)

    preview = json.loads(project.run("preview", "--json").stdout)
    planned = {urn_type_and_name(s["urn"]) for s in steps(preview) if s["op"] == "create"}
    cr = f"kubernetes:{SVCAT_GROUP}/{SVCAT_VERSION}"
    assert {(f"{cr}:Broker", "best-db"), (f"{cr}:Instance", "orders-db"), (f"{cr}:Binding", "orders-app")} <= planned
    assert {
        ("kubernetes:core/v1:Secret", "best-db-auth"),
        ("kubernetes:core/v1:Secret", "orders-db-parameters"),
    } <= planned

    project.up()

    custom = client.CustomObjectsApi(api)
    broker = custom.get_cluster_custom_object(SVCAT_GROUP, SVCAT_VERSION, "brokers", "best-db")
    assert broker["spec"] == {
        "url": "http://best-db.brokers.svc:8080",
        "authInfo": {"basic": {"secretRef": {"namespace": SVCAT_NAMESPACE, "name": "best-db-auth"}}},
        "insecureSkipTLSVerify": False,
        "relistBehavior": "Duration",
        "relistDuration": "5m",
        "relistRequests": 0,
        "brokerAPIVersion": "2.17",  # the model's default
    }
    assert "pulumi.com/waitFor" not in broker["metadata"]["annotations"]
    instance = custom.get_namespaced_custom_object(
        SVCAT_GROUP, SVCAT_VERSION, SVCAT_NAMESPACE, "instances", "orders-db"
    )
    assert instance["spec"] == {
        "serviceClassName": "smalldb",
        "planName": "small",
        "parameters": {"storageGB": 1},
        "parametersFrom": [{"secretKeyRef": {"name": "orders-db-parameters", "key": "parameters"}}],
        "updateRequests": 0,
    }
    binding = custom.get_namespaced_custom_object(SVCAT_GROUP, SVCAT_VERSION, SVCAT_NAMESPACE, "bindings", "orders-app")
    assert binding["spec"] == {
        "instanceRef": {"name": "orders-db"},
        "secretName": "orders-db-credentials",
        "application": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "orders"},
    }
    assert "status" not in binding  # no controller ran
    core = client.CoreV1Api(api)
    auth = core.read_namespaced_secret("best-db-auth", SVCAT_NAMESPACE)
    assert auth.type == "kubernetes.io/basic-auth"
    assert base64.b64decode(auth.data["password"]).decode() == broker_password
    parameters = core.read_namespaced_secret("orders-db-parameters", SVCAT_NAMESPACE)
    assert json.loads(base64.b64decode(parameters.data["parameters"])) == {"adminPassword": admin_password}

    assert project.outputs()["secretName"] == "orders-db-credentials"
    # The Binding waits for the Instance (through its objectName output; through the component provider the
    # engine records the Instance component, whose children it waits for) and the credentials are secrets in state.
    state = project.resources()
    binding_state = next(r for r in state if r["type"] == f"{cr}:Binding")
    instance_urn = next(r["urn"] for r in state if r["type"] == "opbroker:index:Instance")
    needs = set(binding_state.get("dependencies") or [])
    needs |= {u for us in (binding_state.get("propertyDependencies") or {}).values() for u in us}
    assert instance_urn in needs
    exported = project.run("stack", "export").stdout
    assert broker_password not in exported and admin_password not in exported

    project.run("destroy", "--yes", "--skip-preview")
    assert custom.list_cluster_custom_object(SVCAT_GROUP, SVCAT_VERSION, "brokers")["items"] == []
