"""Running the real controller and the demo operator as processes, the way a user does.

Session-scoped fixtures: one demo operator and one controller serve every test (each test works in its
own namespace). The example catalog is applied to the control-plane namespace once.
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from opbroker.api.conventions import DEFAULT_NAMESPACE
from opbroker.devcluster import ControlPlane
from opbroker.devcluster.controlplane import free_ports
from opbroker.devcluster.crds import install_crds
from opbroker.devcluster.processes import Process
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "examples" / "demo_operator"
OPBROKER = Path(sys.executable).parent / "opbroker"
GROUP, VERSION = "osb.servicefabrik.io", "v1alpha1"


def apply_yaml(api: client.ApiClient, path: Path, namespace: str) -> list[dict[str, Any]]:
    """Create or replace every document of a file (custom objects and CRDs)."""
    custom = client.CustomObjectsApi(api)
    applied = []
    for doc in yaml.safe_load_all(path.read_text()):
        if not doc:
            continue
        if doc["kind"] == "CustomResourceDefinition":
            install_crds(api, [doc])
            continue
        group, version = doc["apiVersion"].split("/")
        plural = {"SFService": "sfservices", "SFPlan": "sfplans"}[doc["kind"]]
        doc["metadata"]["namespace"] = namespace
        try:
            custom.create_namespaced_custom_object(group, version, namespace, plural, doc)
        except ApiException as exc:
            if exc.status != 409:
                raise
            current = custom.get_namespaced_custom_object(group, version, namespace, plural, doc["metadata"]["name"])
            doc["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            custom.replace_namespaced_custom_object(group, version, namespace, plural, doc["metadata"]["name"], doc)
        applied.append(doc)
    return applied


OWNER_VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")
#: What the tests' platform grants the default plan account (``opbroker/opbroker-plans``): every operator kind
#: the tests' plans render. Tenancy tests give their plans narrower accounts of their own.
TEST_PLAN_RULES = [
    {"api_groups": ["demo.opbroker.io"], "resources": ["databases"], "verbs": list(OWNER_VERBS)},
    {"api_groups": ["acid.zalan.do"], "resources": ["postgresqls"], "verbs": list(OWNER_VERBS)},
    {"api_groups": ["databases.spotahome.com"], "resources": ["redisfailovers"], "verbs": list(OWNER_VERBS)},
    {"api_groups": ["tiny.example.com"], "resources": ["*"], "verbs": list(OWNER_VERBS)},
    {"api_groups": [""], "resources": ["services"], "verbs": list(OWNER_VERBS)},
    {"api_groups": ["apps"], "resources": ["deployments", "statefulsets"], "verbs": list(OWNER_VERBS)},
]


@pytest.fixture(scope="session")
def catalog_namespace(api_client: client.ApiClient) -> str:
    """The control plane's namespace, with the default plan account granted :data:`TEST_PLAN_RULES`."""
    from opbroker.devcluster.grants import grant_plan_account

    core = client.CoreV1Api(api_client)
    try:
        core.create_namespace({"metadata": {"name": DEFAULT_NAMESPACE}})
    except ApiException as exc:
        if exc.status != 409:
            raise
    grant_plan_account(api_client, DEFAULT_NAMESPACE, TEST_PLAN_RULES)
    return DEFAULT_NAMESPACE


@pytest.fixture(scope="session")
def demo_catalog(api_client: client.ApiClient, catalog_namespace: str) -> list[dict[str, Any]]:
    """The demo operator's CRD and the example catalog that drives it."""
    apply_yaml(api_client, DEMO / "crd.yaml", catalog_namespace)
    return apply_yaml(api_client, DEMO / "catalog.yaml", catalog_namespace)


@pytest.fixture(scope="session")
def demo_operator(
    control_plane: ControlPlane, demo_catalog: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Process]:
    process = Process(
        "demo-operator",
        [sys.executable, str(DEMO / "operator.py"), "--kubeconfig", str(control_plane.kubeconfig)],
        tmp_path_factory.mktemp("logs"),
    )
    process.start()
    yield process
    process.stop()


#: Copies of the seeds' manifests (unchanged; see tests/data/seeds/README.md).
SEEDS = REPO / "tests" / "data" / "seeds"


@pytest.fixture(scope="session")
def zalando_catalog(api_client: client.ApiClient, catalog_namespace: str) -> None:
    """The stand-in ``postgresql`` CRD and Service Fabrik's Zalando SFService and SFPlan (``gotemplate``),
    unchanged."""
    apply_yaml(api_client, REPO / "tests" / "data" / "zalando" / "postgresql-crd.yaml", catalog_namespace)
    apply_yaml(api_client, SEEDS / "sfservice-postgresql.yaml", catalog_namespace)
    apply_yaml(api_client, SEEDS / "sfplan-postgresql-zalando.yaml", catalog_namespace)


@pytest.fixture(scope="session")
def zalando_operator(
    control_plane: ControlPlane, zalando_catalog: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Process]:
    """The stand-in Zalando operator (``tests/zalando_standin.py``) for the seed's plan."""
    process = Process(
        "zalando-standin",
        [sys.executable, str(REPO / "tests" / "zalando_standin.py"), "--kubeconfig", str(control_plane.kubeconfig)],
        tmp_path_factory.mktemp("logs"),
    )
    process.start()
    yield process
    process.stop()


def controller_command(control_plane: ControlPlane, *extra: str) -> list[str]:
    return [
        str(OPBROKER),
        "controller",
        "run",
        "--kubeconfig",
        str(control_plane.kubeconfig),
        "--no-leader-election",
        "--poll-seconds",
        "2",
        "--error-threshold",
        "4",
        *extra,
    ]


@pytest.fixture(scope="session")
def controller_metrics_port() -> int:
    """The session controller's metrics port (``/metrics``: the work queue's depth, which the tenant fuzzer
    bounds)."""
    (port,) = free_ports(1)
    return port


@pytest.fixture(scope="session")
def controller(
    control_plane: ControlPlane,
    demo_operator: Process,
    controller_metrics_port: int,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Process]:
    command = controller_command(control_plane, "--metrics-port", str(controller_metrics_port))
    process = Process("controller", command, tmp_path_factory.mktemp("logs"))
    process.start()
    yield process
    process.stop()


def broker_ready(url: str) -> bool:
    """Whether the broker at ``url`` answers its readiness probe."""
    try:
        return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="session")
def osb_url(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """`opbroker broker serve` against the session's control plane; yields (url, password)."""
    (port,) = free_ports(1)
    password = secrets.token_urlsafe(12)
    process = Process(
        "broker",
        [
            sys.executable,
            "-m",
            "opbroker.cli.main",
            "broker",
            "serve",
            "--kubeconfig",
            str(control_plane.kubeconfig),
            "--port",
            str(port),
            "--namespace",
            "opbroker",
            "--retry-after",
            "1",
            "--allowed-namespace-selector",
            "opbroker.io/test=true",  # every test namespace (the default: only the broker's own)
        ],
        tmp_path_factory.mktemp("broker"),
        env={"OPBROKER_BROKER_USERNAME": "platform", "OPBROKER_BROKER_PASSWORD": password},
    )
    process.start()
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: broker_ready(url), 60, "the broker to be ready")
    yield url, password
    process.stop()


@pytest.fixture
def osb(osb_url: tuple[str, str]) -> Iterator[httpx.Client]:
    """An OSB v2.17 client of the session's broker (:func:`osb_url`), as a platform speaks to it."""
    url, password = osb_url
    headers = {"X-Broker-API-Version": "2.17"}
    with httpx.Client(base_url=url, auth=("platform", password), headers=headers, timeout=60) as http:
        yield http
