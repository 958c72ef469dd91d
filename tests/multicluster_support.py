"""Two real control planes for the multi-cluster tests: a master and a sister, each with opbroker's CRDs.

Session-scoped :func:`multicluster` starts both planes side by side, the demo operator against each, a
plain ``opbroker controller run`` on the sister (the provisioner there) and registers both clusters on the
master as SFClusters: ``"1"`` (the master itself: 1 CPU declared, label ``name=1``) and ``"sister"`` (4 CPU
declared, ``schedulingLimitPercentage: 50``, labels ``name=sister``, ``zone=b``). The master's controller
runs with ``--multicluster`` and whichever scheduler a test asks for (:meth:`MultiClusterEnv.use_scheduler`
restarts it when the choice changes). :func:`mc_namespace` gives a test a namespace on the master and,
afterwards, deletes its instances and waits until they are gone everywhere, so per-cluster counts start
from zero for the next test.
"""

from __future__ import annotations

import copy
import os
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from opbroker.api.conventions import DEFAULT_NAMESPACE
from opbroker.devcluster import ControlPlane
from opbroker.devcluster.admission import install_admission
from opbroker.devcluster.controlplane import free_ports
from opbroker.devcluster.crds import install_crds
from opbroker.devcluster.processes import Process
from tests.cluster_fixtures import onboard
from tests.controller_support import DEMO, OPBROKER, apply_yaml, broker_ready, controller_command, wait_for

GROUP, VERSION = "osb.servicefabrik.io", "v1alpha1"
CLUSTER_GROUP = "resource.servicefabrik.io"
SERVICE_ID = "6f4e7a0c-2f0a-4d5e-9b1a-0d6c1e0f5a11"
SMALL = "0b9bd3f2-8d55-4a0b-9c1e-55c9a4e3d7a2"
PLACED = "mc-placed"
BIG = "mc-big"
DB = ("demo.opbroker.io", "v1alpha1", "databases")
PROBE_SECONDS = "1"


@dataclass
class Cluster:
    """One local control plane with opbroker's CRDs, the demo operator's CRD and the catalog namespace."""

    plane: ControlPlane
    api: client.ApiClient
    processes: list[Process] = field(default_factory=list)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    def get(self, plural: str, namespace: str, name: str, group: str = GROUP) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self.custom.get_namespaced_custom_object(group, VERSION, namespace, plural, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return found

    def database(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.get(DB[2], namespace, name, group=DB[0])

    def start(self, name: str, command: list[str], log_dir: Path, env: dict[str, str] | None = None) -> Process:
        process = Process(f"{self.plane.name}-{name}", command, log_dir, env=env)
        process.start()
        self.processes.append(process)
        return process

    def stop_processes(self) -> None:
        for process in reversed(self.processes):
            process.stop()
        self.processes.clear()


def start_cluster(name: str, *, audit: bool = False) -> Cluster:
    """A control plane with opbroker's CRDs and admission, the demo CRD and the catalog namespace; ``audit``: its
    API server logs every request (``plane.audit_log``)."""
    plane = ControlPlane(name, audit=audit)
    plane.up(progress=lambda message: print(f"[{name}] {message}"))
    api = config.new_client_from_config(config_file=str(plane.kubeconfig))
    install_crds(api)
    install_admission(api)
    install_crds(api, [yaml.safe_load((DEMO / "crd.yaml").read_text())])
    try:
        client.CoreV1Api(api).create_namespace({"metadata": {"name": DEFAULT_NAMESPACE}})
    except ApiException as exc:
        if exc.status != 409:
            raise
    from opbroker.devcluster.grants import grant_plan_account
    from tests.controller_support import TEST_PLAN_RULES

    grant_plan_account(api, DEFAULT_NAMESPACE, TEST_PLAN_RULES)
    return Cluster(plane, api)


def start_provisioner(cluster: Cluster, log_dir: Path) -> None:
    """What every sister runs: the demo operator and an ordinary opbroker controller."""
    kubeconfig = str(cluster.plane.kubeconfig)
    cluster.start("demo-operator", [sys.executable, str(DEMO / "operator.py"), "--kubeconfig", kubeconfig], log_dir)
    cluster.start("controller", controller_command(cluster.plane), log_dir)


def register(
    master: Cluster, name: str, target: Cluster, *, labels: dict[str, str], capacity: dict[str, Any], limit: int | None
) -> None:
    """The SFCluster for ``target`` and its kubeconfig Secret, on the master."""
    secret = f"{name}-kubeconfig"
    body = {"metadata": {"name": secret}, "stringData": {"kubeconfig": target.plane.kubeconfig.read_text()}}
    try:
        master.core.create_namespaced_secret(DEFAULT_NAMESPACE, body)
    except ApiException as exc:
        if exc.status != 409:
            raise
    spec: dict[str, Any] = {"secretRef": secret, "totalCapacity": capacity}
    if limit is not None:
        spec["schedulingLimitPercentage"] = limit
    master.custom.create_namespaced_custom_object(
        CLUSTER_GROUP,
        VERSION,
        DEFAULT_NAMESPACE,
        "sfclusters",
        {
            "apiVersion": f"{CLUSTER_GROUP}/{VERSION}",
            "kind": "SFCluster",
            "metadata": {"name": name, "labels": labels},
            "spec": spec,
        },
    )


def catalog_file(directory: Path) -> Path:
    """The demo catalog plus two plans made for scheduling: one with a clusterSelector, one with requests."""
    service, small = list(yaml.safe_load_all((DEMO / "catalog.yaml").read_text()))
    placed = copy.deepcopy(small)
    placed["metadata"] = {"name": PLACED}
    placed["spec"].update(id=PLACED, name=PLACED, autoUpdateInstances=False)
    properties = placed["spec"]["schemas"]["service_instance"]["create"]["parameters"]["properties"]
    properties["cluster"] = {"type": "string"}
    placed["spec"]["templates"].append(
        {
            "action": "clusterSelector",
            "type": "jinja2",
            "content": '{% if parameter("/cluster") %}name={{ parameter("/cluster") }}{% endif %}\n',
        }
    )
    big = copy.deepcopy(small)
    big["metadata"] = {"name": BIG}
    big["spec"].update(id=BIG, name=BIG)
    big["spec"]["context"]["requests"] = {"cpu": "1500m"}
    path = directory / "catalog.yaml"
    path.write_text(yaml.safe_dump_all([service, small, placed, big]))
    return path


@dataclass
class MultiClusterEnv:
    master: Cluster
    sister: Cluster
    log_dir: Path
    controller: Process | None = None
    scheduler: str | None = None
    broker_url: str | None = None
    broker_auth: tuple[str, str] = ("admin", uuid.uuid4().hex)
    started: list[str] = field(default_factory=list)
    #: The master controller's ``/metrics`` port (kept across its restarts): what it has reconciled, and whether its
    #: queue is idle (``tests/controller_idle.py``).
    metrics_port: int = field(default_factory=lambda: free_ports(1)[0])

    def use_scheduler(self, scheduler: str) -> None:
        """Run the master's controller with ``--multicluster --scheduler SCHEDULER`` (restarted if needed),
        and wait until its start-up picture is complete (its log says so)."""
        if self.scheduler == scheduler and self.controller is not None and self.controller.running:
            return
        if self.controller is not None:
            self.controller.kill()  # crash-safe by design; a clean stop only costs time here
            self.master.processes.remove(self.controller)
        self.controller = self.master.start(
            f"controller-{len(self.started) + 1}-{scheduler}",  # a log of its own per start
            controller_command(
                self.master.plane,
                "--multicluster",
                "--scheduler",
                scheduler,
                "--cluster-probe-seconds",
                PROBE_SECONDS,
                "--metrics-port",
                str(self.metrics_port),
            ),
            self.log_dir,
        )
        self.scheduler = scheduler
        self.started.append(scheduler)
        controller = self.controller
        wait_for(
            lambda: "multi-cluster ready" in controller.log.read_text(errors="replace"),
            30,
            f"the {scheduler} controller to finish its start-up",
        )

    def cluster_of(self, namespace: str, name: str, timeout: float = 20) -> str:
        """Wait until the master instance is scheduled; its cluster."""

        def scheduled() -> str | None:
            found = self.master.get("sfserviceinstances", namespace, name)
            return ((found or {}).get("spec") or {}).get("clusterId")

        cluster: str = wait_for(scheduled, timeout, f"{namespace}/{name} to be scheduled")
        return cluster


def provision(
    where: Cluster,
    namespace: str,
    name: str,
    *,
    plan_id: str = SMALL,
    cluster_id: str | None = None,
    **parameters: Any,
) -> None:
    """What the broker records for a provision request (optionally pinned to a cluster by an admin)."""
    spec: dict[str, Any] = {"instanceId": name, "serviceId": SERVICE_ID, "planId": plan_id, "parameters": parameters}
    if cluster_id is not None:
        spec["clusterId"] = cluster_id
    where.custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        "sfserviceinstances",
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "SFServiceInstance", "metadata": {"name": name}, "spec": spec},
    )


def state_of(cluster: Cluster, plural: str, namespace: str, name: str) -> str | None:
    return ((cluster.get(plural, namespace, name) or {}).get("status") or {}).get("state")


def wait_state(
    cluster: Cluster, plural: str, namespace: str, name: str, state: str, timeout: float = 30
) -> dict[str, Any]:
    wait_for(lambda: state_of(cluster, plural, namespace, name) == state, timeout, f"{plural}/{name} to be {state!r}")
    found = cluster.get(plural, namespace, name)
    assert found is not None
    return found


@pytest.fixture(scope="session")
def multicluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MultiClusterEnv]:
    log_dir = tmp_path_factory.mktemp("multicluster-logs")
    started: dict[str, Cluster] = {}
    errors: list[BaseException] = []

    def start(role: str) -> None:
        try:
            started[role] = start_cluster(f"mc{role}-{os.getpid()}")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(role,)) for role in ("master", "sister")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    env: MultiClusterEnv | None = None
    try:
        if errors:
            raise errors[0]
        master, sister = started["master"], started["sister"]
        env = MultiClusterEnv(master, sister, log_dir)
        apply_yaml(master.api, catalog_file(log_dir), DEFAULT_NAMESPACE)
        master.start(
            "demo-operator",
            [sys.executable, str(DEMO / "operator.py"), "--kubeconfig", str(master.plane.kubeconfig)],
            log_dir,
        )
        start_provisioner(sister, log_dir)
        register(master, "1", master, labels={"name": "1"}, capacity={"cpu": 1}, limit=None)
        register(master, "sister", sister, labels={"name": "sister", "zone": "b"}, capacity={"cpu": 4}, limit=50)
        yield env
    finally:
        for cluster in started.values():
            cluster.stop_processes()
            cluster.plane.down(progress=lambda _message: None)


@pytest.fixture(scope="session")
def mc_broker(multicluster: MultiClusterEnv) -> Iterator[str]:
    """``opbroker broker serve`` against the master, as a process; its URL."""
    from opbroker.devcluster.controlplane import free_ports

    (port,) = free_ports(1)
    username, password = multicluster.broker_auth
    multicluster.master.start(
        "broker",
        [
            str(OPBROKER),
            "broker",
            "serve",
            "--kubeconfig",
            str(multicluster.master.plane.kubeconfig),
            "--port",
            str(port),
            "--log-level",
            "warning",
            "--allowed-namespace-selector",
            "opbroker.io/test=true",  # the test namespaces (mc_namespace)
        ],
        multicluster.log_dir,
        env={"OPBROKER_BROKER_USERNAME": username, "OPBROKER_BROKER_PASSWORD": password},
    )
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: broker_ready(url), 30, "the broker to answer")
    multicluster.broker_url = url
    return url


@pytest.fixture
def mc_namespace(multicluster: MultiClusterEnv) -> Iterator[str]:
    """A fresh namespace on the master; afterwards its bindings and instances are deleted everywhere."""
    name = f"mc-{uuid.uuid4().hex[:8]}"
    multicluster.master.core.create_namespace({"metadata": {"name": name, "labels": {"opbroker.io/test": "true"}}})
    onboard(multicluster.master.api, name)  # the master provisions too; sisters' namespaces the master onboards
    yield name
    master = multicluster.master
    for plural in ("sfservicebindings", "sfserviceinstances"):
        for item in master.custom.list_namespaced_custom_object(GROUP, VERSION, name, plural)["items"]:
            try:
                master.custom.delete_namespaced_custom_object(GROUP, VERSION, name, plural, item["metadata"]["name"])
            except ApiException as exc:
                if exc.status != 404:
                    raise

    def emptied() -> bool:
        return not any(
            master.custom.list_namespaced_custom_object(GROUP, VERSION, name, plural)["items"]
            for plural in ("sfservicebindings", "sfserviceinstances")
        )

    try:
        wait_for(emptied, 45, f"the instances of {name} to be deprovisioned")
    finally:
        master.core.delete_namespace(name)
