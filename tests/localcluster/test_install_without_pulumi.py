"""opbroker installed without Pulumi, as a user without it would: ``helm install`` of the chart
``opbroker manifests --helm-chart`` writes, then ``kubectl apply -f`` of what ``opbroker manifests`` prints. Each
brings up the controller and the broker as pods (the locally built image) on a cluster with a node, an OSB
provision → bind → unbind → deprovision passes through the broker's Service, and the uninstall (``helm
uninstall``, ``kubectl delete -f``) leaves no object of opbroker's behind — only the CRDs after ``helm
uninstall``, which Helm never deletes (the chart's documented policy, the component's ``retain_crds``).

One node for both installs, one after the other (helm first, so kubectl's apply also shows that the CRDs a Helm
release left are taken over). Needs root, Debian's containerd, runc and CNI plugins, and helm
(``scripts/setup.sh`` builds it).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client, config

from opbroker.components.controlplane import PORT, Names
from opbroker.devcluster import ControlPlane, incluster
from opbroker.devcluster.binaries import find_binaries, helm_binary
from opbroker.devcluster.demo import HEADERS, run_demo
from opbroker.devcluster.devstack import DEMO_NAMESPACE, DEMO_OPERATOR, Endpoint
from opbroker.devcluster.images import opbroker_image
from opbroker.devcluster.processes import Process
from tests.controller_support import wait_for

pytestmark = pytest.mark.apiserver  # its own fixtures start a local control plane with a node

NAMESPACE = "opbroker"
NAMES = Names(NAMESPACE)
PART_OF = "app.kubernetes.io/part-of=opbroker"
PASSWORD = "install-test-password"  # the test's own: what a user passes at install
#: What the demo's catalog needs, given as a user gives it: the demo operator's kind, the demo's namespace.
RULES_FILE = {
    "tenant_namespaces": [DEMO_NAMESPACE],
    "broker": {"allowed_namespaces": [DEMO_NAMESPACE]},
    "controller": {"operator_rules": [incluster.DEMO_OPERATOR_RULE]},
}
#: One replica each: the demo needs no standby, and the node is shared by a 2-core machine.
REPLICAS = ["controller.replicas=1", "broker.replicas=1"]


def _say(message: str) -> None:
    print(f"[install without pulumi {time.strftime('%H:%M:%S')}] {message}")


@dataclass(frozen=True)
class Cluster:
    kubeconfig: Path
    image: str
    api: client.ApiClient
    work: Path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    assert helm_binary() is not None, "helm is not built: run scripts/build-helm.sh (scripts/setup.sh does)"
    plane = ControlPlane(f"nopulumi-{os.getpid()}")
    operator: Process | None = None
    try:
        plane.up(node=True, progress=_say)
        archive, image = opbroker_image(_say)
        plane.import_image(archive, image)
        api = config.new_client_from_config(config_file=str(plane.kubeconfig))
        cluster = Cluster(plane.kubeconfig, image.removeprefix("docker.io/library/"), api, tmp_path_factory.mktemp("w"))
        kubectl(cluster, "apply", "-f", str(DEMO_OPERATOR / "crd.yaml"))
        operator = Process(
            "demo-operator",
            [sys.executable, str(DEMO_OPERATOR / "operator.py"), "--kubeconfig", str(plane.kubeconfig)],
            plane.log_dir,
        )
        operator.start()
        yield cluster
        api.close()
    finally:
        if operator is not None:
            operator.stop()
        plane.down(progress=_say)


def run(command: list[str], *, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    started = time.monotonic()
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, check=False, env={**os.environ, **(env or {})}
    )
    assert result.returncode == 0, f"{' '.join(command)}: exit {result.returncode}\n{result.stderr}"
    words = [w for w in command[1:] if not w.startswith(("--kubeconfig", "--cache-dir", str(Path.home())))]
    _say(f"{Path(command[0]).name} {' '.join(words[:3])[:100]} ... took {time.monotonic() - started:.1f}s")
    return result.stdout


def kubectl(cluster: Cluster, *args: str, timeout: float = 300) -> str:
    binaries = find_binaries()
    assert binaries is not None
    return run([str(binaries.kubectl), f"--kubeconfig={cluster.kubeconfig}", *args], timeout=timeout)


def helm(cluster: Cluster, *args: str) -> str:
    helm_path = helm_binary()
    assert helm_path is not None
    return run([str(helm_path), f"--kubeconfig={cluster.kubeconfig}", *args])


def opbroker(*args: str, env: dict[str, str] | None = None) -> str:
    return run([sys.executable, "-m", "opbroker.cli.main", *args], env=env)


def rules_file(cluster: Cluster) -> Path:
    path = cluster.work / "opbroker-args.yaml"
    path.write_text(yaml.safe_dump(RULES_FILE))
    return path


# -- what every install must do ------------------------------------------------------------------------------


def serves_the_osb_walk(cluster: Cluster) -> None:
    """Controller and broker pods available; the demo catalog applied as a user would; the OSB walk passes."""
    incluster.wait_available(cluster.api, NAMESPACE, [NAMES.controller, NAMES.broker], 240, _say)
    core = client.CoreV1Api(cluster.api)
    for component in ("controller", "broker"):
        pods = core.list_namespaced_pod(NAMESPACE, label_selector=f"app.kubernetes.io/component={component}").items
        assert [p.status.phase for p in pods] == ["Running"], component
    kubectl(cluster, "apply", "-n", NAMESPACE, "-f", str(DEMO_OPERATOR / "catalog.yaml"))
    url = incluster.broker_service_url(cluster.api, NAMESPACE, NAMES.broker, PORT)
    endpoint = Endpoint(url, "opbroker", PASSWORD, cluster.kubeconfig)

    def serves_catalog() -> bool:
        """The Service routes (kube-proxy's rules may follow the pods' readiness by a moment) to a broker that
        lists the demo's service."""
        try:
            answer = httpx.get(f"{url}/v2/catalog", auth=("opbroker", PASSWORD), headers=HEADERS, timeout=5)
        except httpx.HTTPError:
            return False
        return answer.status_code == 200 and bool(answer.json().get("services"))

    wait_for(serves_catalog, 60, "the broker to serve the demo catalog", interval=1)
    said: list[str] = []
    run_demo(endpoint, say=said.append, namespace=DEMO_NAMESPACE)
    text = "\n".join(said)
    for step in ("1. catalog", "2. provision", "3. bind", "4. credentials", "5. unbind", "6. deprovision"):
        assert step in text
    assert "instance gone" in text
    # The catalog is the user's, not the install's: taken away before the uninstall, as a user would.
    kubectl(cluster, "delete", "-n", NAMESPACE, "--wait", "-f", str(DEMO_OPERATOR / "catalog.yaml"))


def resource_of(manifest: dict[str, Any]) -> str:
    """``kubectl get``'s name for a manifest's kind: ``Deployment.apps``, ``Namespace``."""
    group = manifest["apiVersion"].rpartition("/")[0]
    return f"{manifest['kind']}.{group}" if group else manifest["kind"]


def leftovers(cluster: Cluster, installed: list[dict[str, Any]]) -> dict[str, list[str]]:
    """What an uninstall left: objects labelled as opbroker's of any listable kind, the install's own objects by
    name (CRDs apart: their policy is each test's), the namespace, and Helm's release records. Every value must be
    empty. A fresh discovery cache each time: the kinds change when CRDs go."""
    cache = f"--cache-dir={cluster.work / f'discovery-{time.monotonic_ns()}'}"
    kinds = [
        kind
        for kind in kubectl(cluster, cache, "api-resources", "--verbs=list", "-o", "name").split()
        if kind not in ("events", "events.events.k8s.io", "customresourcedefinitions.apiextensions.k8s.io")
    ]
    labelled = kubectl(cluster, cache, "get", ",".join(kinds), "-A", "-l", PART_OF, "-o", "name")
    where: dict[str, list[str]] = {}  # namespace ("" for cluster-scoped) → the installed objects there
    for manifest in installed:
        if manifest["kind"] != "CustomResourceDefinition":
            metadata = manifest["metadata"]
            where.setdefault(metadata.get("namespace", ""), []).append(f"{resource_of(manifest)}/{metadata['name']}")
    by_name = []
    for namespace_of, objects in where.items():
        scope = ["-n", namespace_of] if namespace_of else []
        by_name += kubectl(cluster, "get", *objects, *scope, "--ignore-not-found", "-o=name").split()
    namespace = kubectl(cluster, "get", "namespace", NAMESPACE, "--ignore-not-found", "-o", "name")
    releases = kubectl(cluster, "get", "secrets", "-A", "-l", "owner=helm", "-o", "name")
    return {
        "labelled": labelled.split(),
        "by name": by_name,
        "namespace": namespace.split(),
        "helm releases": releases.split(),
    }


def crds(cluster: Cluster) -> list[str]:
    return kubectl(cluster, "get", "crd", "-l", PART_OF, "-o", "name").split()


def wait_gone(cluster: Cluster, installed: list[dict[str, Any]]) -> None:
    """The namespace's deletion finishes asynchronously (its pods terminate first)."""
    found: dict[str, list[str]] = {}

    def nothing_left() -> bool:
        found.clear()
        found.update({key: value for key, value in leftovers(cluster, installed).items() if value})
        return not found

    with contextlib.suppress(AssertionError):
        wait_for(nothing_left, 120, "the uninstall to leave nothing", interval=2)
    assert found == {}


# -- the two installs ------------------------------------------------------------------------------------------


def test_helm_install_serves_osb_and_helm_uninstall_leaves_only_the_crds(cluster: Cluster) -> None:
    chart = cluster.work / "chart"
    started = time.monotonic()
    opbroker("manifests", "--image", cluster.image, "--values", str(rules_file(cluster)), "--helm-chart", str(chart))
    helm(cluster, "lint", str(chart), "--set", f"broker.password={PASSWORD}")
    sets = [f"--set={value}" for value in (f"broker.password={PASSWORD}", *REPLICAS)]
    helm(cluster, "install", "opbroker", str(chart), "--namespace", "default", *sets)
    listed = helm(cluster, "list", "--namespace", "default", "-o", "yaml")
    assert [(r["name"], r["status"]) for r in yaml.safe_load(listed)] == [("opbroker", "deployed")]
    serves_the_osb_walk(cluster)
    installed = [d for d in yaml.safe_load_all(helm(cluster, "get", "manifest", "opbroker", "-n", "default")) if d]
    assert all(leftovers(cluster, installed).values()), "the check must see what the install made"
    helm(cluster, "uninstall", "opbroker", "--namespace", "default", "--wait", "--timeout", "3m")
    wait_gone(cluster, installed)
    # Helm never deletes what crds/ installed: every CRD of the component stays, so no catalog object is lost.
    assert len(crds(cluster)) == len(list((chart / "crds").glob("*.yaml")))
    _say(f"helm install → OSB walk → uninstall: {time.monotonic() - started:.0f}s")


def test_kubectl_apply_serves_osb_and_kubectl_delete_leaves_nothing(cluster: Cluster) -> None:
    started = time.monotonic()
    printed = opbroker(
        "manifests", "--image", cluster.image, "--values", str(rules_file(cluster)), *[f"--set={v}" for v in REPLICAS],
        env={"OPBROKER_BROKER_PASSWORD": PASSWORD},
    )  # fmt: skip
    manifests_file = cluster.work / "opbroker.yaml"
    manifests_file.write_text(printed)
    installed = [d for d in yaml.safe_load_all(printed) if d]
    assert PASSWORD in printed  # the user's own password, given through the environment
    # Server-side: the CRDs are too large for client-side apply's last-applied annotation; --force-conflicts takes
    # over the CRDs a Helm release left (Helm's field manager owns them).
    kubectl(cluster, "apply", "--server-side", "--force-conflicts", "-f", str(manifests_file))
    serves_the_osb_walk(cluster)
    present = leftovers(cluster, installed)
    assert present["labelled"] and present["by name"] and present["namespace"], "the check must see the install"
    kubectl(cluster, "delete", "--wait", "--timeout=180s", "-f", str(manifests_file), timeout=240)
    wait_gone(cluster, installed)
    assert crds(cluster) == []  # the manifests hold the CRDs: `kubectl delete -f` deletes them with the rest
    _say(f"kubectl apply → OSB walk → delete: {time.monotonic() - started:.0f}s")
