"""End to end with a node: the real Pulumi engine deploys opbroker onto a local cluster whose node runs the
controller and broker pods from the locally built image, and OSB requests go through the stack's broker Service.

1. The Python root stack (``examples/stack`` as an inline Automation API program, ``opbroker.stacks``): ``up``
   waits for the Deployments, the pods run the local image on the node, the OSB walk provision → bind → unbind →
   deprovision (``opbroker.devcluster.demo.run_demo``) passes through the broker Service's cluster IP, then
   ``destroy`` (``retainCrds`` false: it removes the CRDs too, leaving the cluster clean for part 2).
2. The Pulumi YAML example (``examples/pulumi-yaml``, the proof for every other language): ``up`` of its control
   plane and catalog, then — with ``osbBrokerUrl`` set to the broker Service as this machine reaches it, as its
   comment tells users — ``up`` of its OSB ``ServiceInstance`` and ``ServiceBinding`` declared in YAML; ``destroy``
   unbinds and deprovisions through the broker before the control plane goes.

Which service: the demo operator's (``examples/demo_operator``), which the root stack's catalog already carries
besides PostgreSQL, with the controller allowed its ``Database`` kind (``declarations.OPERATOR_RULES``). The test
installs the operator's CRD and runs the operator as a local process (as ``opbroker dev --in-cluster`` does: it
stands in for an operator a platform team installs apart from opbroker). The root stack's other service, PostgreSQL,
would instead need the Zalando postgres-operator running in the cluster (its CRD ``postgresqls.acid.zalan.do``,
its pods pulling Spilo images and a storage class for the volumes) — nothing this repository ships. The YAML
example's own catalog is PostgreSQL only, so the test adds the demo service and plan to its copy (as YAML
resources, from ``examples/demo_operator/catalog.yaml``) and points the example's OSB resources at them.

One node per machine: both parts share the module's cluster and run in file order. Each phase's time is printed
(``-s`` shows it); none is asserted. Needs root, Debian's containerd, runc and CNI plugins
(tests/localcluster/test_node.py) and the engine scripts/build-pulumi.sh builds.
"""

from __future__ import annotations

import copy
import json
import os
import secrets
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from pulumi import automation as auto

from opbroker import stacks
from opbroker.components.controlplane import PORT, Names
from opbroker.devcluster import ControlPlane
from opbroker.devcluster import node as node_setup
from opbroker.devcluster.crds import install_crds
from opbroker.devcluster.demo import run_demo
from opbroker.devcluster.devstack import DEMO_OPERATOR, Endpoint
from opbroker.devcluster.images import opbroker_image
from opbroker.devcluster.incluster import DEMO_OPERATOR_RULE, broker_service_url
from opbroker.devcluster.processes import Process
from opbroker.devcluster.pulumi_engine import PACKAGES, REPO, Engine, escape, new_project, root_stack
from tests.waiting import wait_for

pytestmark = pytest.mark.apiserver  # its own fixtures start a local control plane (tests/conftest.py)

pytest_plugins = ["tests.pulumi_engine_support"]

PASSWORD = secrets.token_urlsafe(16)
DEMO_PLAN_ID = "0b9bd3f2-8d55-4a0b-9c1e-55c9a4e3d7a2"  # examples/demo_operator/catalog.yaml
DATABASES = ("demo.opbroker.io", "v1alpha1", "databases")
TIMINGS: dict[str, float] = {}


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Time one phase and print it (recorded, never asserted)."""
    start = time.monotonic()
    try:
        yield
    finally:
        TIMINGS[name] = time.monotonic() - start
        print(f"[pulumi node] {name}: {TIMINGS[name]:.1f} s")


def _say(message: str) -> None:
    print(f"[pulumi node] {message}")


# -- fixtures: a cluster with a node, the image in it, the demo operator -------------------------------------


@pytest.fixture(scope="module", autouse=True)
def print_phases() -> Iterator[None]:
    """Every phase's time again at the module's end, together, for the note."""
    yield
    for name, seconds in TIMINGS.items():
        print(f"[pulumi node] {name}: {seconds:.1f} s")


@pytest.fixture(scope="module")
def node_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = ControlPlane(f"pulumi-node-{os.getpid()}")
    try:
        with phase("cluster with a node up"):
            plane.up(node=True, progress=_say)
        yield plane
    finally:
        with phase("cluster down"):
            plane.down(progress=_say)


@pytest.fixture(scope="module")
def engine_cluster(node_plane: ControlPlane) -> Path:
    """The engine fixtures' cluster (tests.pulumi_engine_support): here the one with a node."""
    return node_plane.kubeconfig


@pytest.fixture(scope="module")
def image(node_plane: ControlPlane) -> str:
    """The locally built opbroker image, imported into the node; the name the ControlPlane's ``image`` takes."""
    with phase("image built (or cached) and imported"):
        archive, name = opbroker_image(_say)
        node_plane.import_image(archive, name)
    return name.removeprefix("docker.io/library/")


@pytest.fixture(scope="module")
def api(node_plane: ControlPlane) -> Iterator[client.ApiClient]:
    api_client = config.new_client_from_config(config_file=str(node_plane.kubeconfig))
    yield api_client
    api_client.close()


@pytest.fixture(scope="module")
def demo_operator(node_plane: ControlPlane, api: client.ApiClient) -> Iterator[Process]:
    """The demo operator's CRD and the operator, as a process on this machine watching every namespace."""
    install_crds(api, [yaml.safe_load((DEMO_OPERATOR / "crd.yaml").read_text())])
    operator = Process(
        "demo-operator",
        [sys.executable, str(DEMO_OPERATOR / "operator.py"), "--kubeconfig", str(node_plane.kubeconfig)],
        node_plane.log_dir,
    )
    operator.start()
    try:
        yield operator
    finally:
        operator.stop()


# -- helpers -----------------------------------------------------------------------------------------------


def assert_pods_run_the_local_image(api: client.ApiClient, namespace: str, image: str) -> None:
    """Every controller and broker pod is Running and ready on the node, from the local image."""
    core = client.CoreV1Api(api)
    for component in ("controller", "broker"):
        selector = f"app.kubernetes.io/component={component}"
        pods = core.list_namespaced_pod(namespace, label_selector=selector).items
        running = [p for p in pods if p.status.phase == "Running"]
        assert running, f"no {component} pod runs in {namespace}: {[p.status.phase for p in pods]}"
        for pod in running:
            assert pod.spec.node_name == node_setup.NODE_NAME
            assert [c.image for c in pod.spec.containers] == [image]
            assert all(s.ready for s in pod.status.container_statuses or [])
            # What the node ran: the imported image (containerd names it in full).
            assert all(s.image.endswith(f"/{image}") for s in pod.status.container_statuses)


def broker_endpoint(api: client.ApiClient, namespace: str, kubeconfig: Path) -> Endpoint:
    """The broker Service's cluster IP URL (kube-proxy routes it from this machine), once it answers ready."""
    url = broker_service_url(api, namespace, Names(namespace).broker, PORT)
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return Endpoint(url, "opbroker", PASSWORD, kubeconfig)
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"the broker Service {url} did not answer ready within 60 s"
        time.sleep(0.5)


def databases(api: client.ApiClient, namespace: str) -> list[dict[str, Any]]:
    group, version, plural = DATABASES
    listed = client.CustomObjectsApi(api).list_namespaced_custom_object(group, version, namespace, plural)
    return list(listed["items"])


def namespace_gone(api: client.ApiClient, namespace: str) -> bool:
    try:
        client.CoreV1Api(api).read_namespace(namespace)
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


# -- 1. the Python root stack --------------------------------------------------------------------------------

ROOT_NAMESPACE = "opbroker"


def test_the_python_root_stack_runs_on_the_node_and_serves_an_osb_walk_through_its_service(
    engine: Engine, api: client.ApiClient, image: str, demo_operator: Process, tmp_path: Path
) -> None:
    stack = root_stack(engine, tmp_path / "root-stack", PASSWORD, node=True, image=image)
    # destroy removes the CRDs as well: part 2's control plane then starts from a cluster without opbroker.
    stack.set_config("retainCrds", auto.ConfigValue("false"))
    try:
        with phase("python root stack: preview"):
            preview = stacks.preview(stack)
        assert preview.summary.get("create", 0) > 30
        with phase("python root stack: up (awaits the Deployments)"):
            stacks.up(stack)
        assert_pods_run_the_local_image(api, ROOT_NAMESPACE, image)
        outputs = stacks.outputs(stack)
        assert outputs["brokerUrl"] == f"http://opbroker-broker.{ROOT_NAMESPACE}.svc:{PORT}"
        endpoint = broker_endpoint(api, ROOT_NAMESPACE, engine.kubeconfig)
        assert endpoint.password == outputs["brokerPassword"]
        said: list[str] = []
        with phase("python root stack: OSB provision, bind, unbind, deprovision"):
            run_demo(endpoint, said.append, namespace=ROOT_NAMESPACE)
        text = "\n".join(said)
        for step in ("2. provision", "3. bind", "4. credentials", "5. unbind", "6. deprovision", "instance gone"):
            assert step in text, text
        assert databases(api, ROOT_NAMESPACE) == []  # the deprovision removed what the provision made
        with phase("python root stack: no-op preview"):
            assert not stacks.preview(stack).has_changes
    finally:
        with phase("python root stack: destroy"):
            stacks.destroy(stack)
    wait_for(lambda: namespace_gone(api, ROOT_NAMESPACE), 120, f"namespace {ROOT_NAMESPACE} gone after destroy")


# -- 2. the Pulumi YAML example with its OSB resources ---------------------------------------------------------

YAML_NAMESPACE = "opbroker-yaml"
#: The example's OSB resources and what reads them: left out of the first ``up`` (the broker's address from this
#: machine is known once its Service exists).
OSB_RESOURCES = ("ordersDb", "ordersApp")
OSB_OUTPUTS = ("ordersDbInstanceId", "ordersDbCredentials")


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part.title() for part in rest)


def demo_catalog_resources() -> dict[str, dict[str, Any]]:
    """``examples/demo_operator/catalog.yaml`` as the component provider's SFService and SFPlan in YAML: the CRD
    spec's keys are the properties, in camelCase (``maintenance_info``, ``schemas.service_instance``)."""
    resources: dict[str, dict[str, Any]] = {}
    for document in yaml.safe_load_all((DEMO_OPERATOR / "catalog.yaml").read_text()):
        spec = {_camel(k): v for k, v in document["spec"].items()}
        if "schemas" in spec:
            spec["schemas"] = {_camel(k): v for k, v in spec["schemas"].items()}
        properties = {
            **escape(spec),
            "namespace": "${controlPlane.namespace}",
            "objectName": document["metadata"]["name"],
        }
        resource_type = f"opbroker:index:{document['kind']}"
        resources[_camel(document["metadata"]["name"].replace("-", "_"))] = {
            "type": resource_type,
            "properties": properties,
        }
    return resources


def yaml_example(*, with_osb_resources: bool) -> dict[str, Any]:
    """The YAML example, with the demo service and plan added and its OSB resources pointed at them."""
    program = copy.deepcopy(yaml.safe_load((REPO / "examples" / "pulumi-yaml" / "Pulumi.yaml").read_text()))
    program["packages"] = PACKAGES
    program["resources"]["controlPlane"]["properties"]["controller"]["operatorRules"].append(
        {_camel(k): v for k, v in DEMO_OPERATOR_RULE.items()}
    )
    program["resources"].update(demo_catalog_resources())
    for name in OSB_RESOURCES:
        properties = program["resources"][name]["properties"]
        properties["serviceId"] = "${demoDb.serviceId}"
        properties["planId"] = "${demoDbSmall.planId}"
    if not with_osb_resources:
        for name in OSB_RESOURCES:
            del program["resources"][name]
        for name in OSB_OUTPUTS:
            del program["outputs"][name]
    return program


def test_the_yaml_example_runs_on_the_node_and_its_osb_resources_provision_and_bind_through_the_service(
    engine: Engine, api: client.ApiClient, image: str, demo_operator: Process, tmp_path: Path
) -> None:
    project = new_project(engine, tmp_path / "yaml-example", yaml_example(with_osb_resources=False))
    project.set_config("brokerPassword", PASSWORD, secret=True)
    project.set_config("namespace", YAML_NAMESPACE)
    project.set_config("image", image)
    try:
        with phase("yaml example: up of the control plane and the catalog"):
            project.up()
        assert_pods_run_the_local_image(api, YAML_NAMESPACE, image)
        endpoint = broker_endpoint(api, YAML_NAMESPACE, engine.kubeconfig)
        project.set_config("osbBrokerUrl", endpoint.url)
        project.write(yaml_example(with_osb_resources=True))
        with phase("yaml example: up of the ServiceInstance and ServiceBinding (provision, bind)"):
            project.up()
        outputs = project.outputs()
        instance_id = outputs["ordersDbInstanceId"]
        credentials = outputs["ordersDbCredentials"]
        assert credentials["username"] and credentials["password"]
        assert credentials["uri"].startswith(f"postgres://{credentials['username']}:")
        # What the provision and the bind made in the cluster: the instance's Database, with the binding's user.
        recorded = client.CustomObjectsApi(api).list_namespaced_custom_object(
            "osb.servicefabrik.io", "v1alpha1", YAML_NAMESPACE, "sfserviceinstances"
        )["items"]
        assert [(i["spec"]["instanceId"], i["spec"]["planId"]) for i in recorded] == [(instance_id, DEMO_PLAN_ID)]
        [database] = databases(api, YAML_NAMESPACE)
        assert credentials["username"] in database["spec"]["users"]
        with phase("yaml example: no-op preview"):
            planned = json.loads(project.run("preview", "--json").stdout)
        assert [s for s in planned.get("steps") or [] if s.get("op") != "same"] == []
    finally:
        with phase("yaml example: destroy (unbind, deprovision, then the control plane)"):
            project.run("destroy", "--yes", "--skip-preview")
    wait_for(lambda: namespace_gone(api, YAML_NAMESPACE), 120, f"namespace {YAML_NAMESPACE} gone after destroy")
