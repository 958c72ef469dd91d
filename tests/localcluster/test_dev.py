"""``opbroker dev --demo`` as a newcomer runs it: a subprocess that brings everything up, walks the OSB
lifecycle, stops everything it started and exits 0."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from opbroker.devcluster import ControlPlane
from opbroker.devcluster.controlplane import free_ports

pytestmark = pytest.mark.process  # runs another program (see tests/conftest.py)

OPBROKER = Path(sys.executable).parent / "opbroker"


def test_dev_demo_runs_the_whole_lifecycle_and_cleans_up() -> None:
    name = f"devtest-{os.getpid()}"
    (port,) = free_ports(1)
    result = subprocess.run(
        [str(OPBROKER), "dev", "--demo", "--name", name, "--port", str(port)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    for step in ("1. catalog", "2. provision", "3. bind", "4. credentials", "5. unbind", "6. deprovision"):
        assert step in output
    assert "password: " in output and "uri: postgres://" in output
    assert "demo complete" in output
    assert f"control plane '{name}' stopped" in output
    status = ControlPlane(name).status()
    assert not status.running and all(not c.running for c in status.components)


def test_dev_refuses_a_taken_port_clearly() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = subprocess.run(
            [str(OPBROKER), "dev", "--demo", "--name", f"devport-{os.getpid()}", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert result.returncode == 1
    assert f"port {port} on 127.0.0.1 is taken; choose another with --port" in result.stderr


def _cluster_snapshot(kubeconfig: Path) -> dict[str, set[str]]:
    """What a user would notice changed in their cluster: cluster-wide objects and the demo namespace's."""
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        rbac = client.RbacAuthorizationV1Api(api)
        core = client.CoreV1Api(api)
        admission = client.AdmissionregistrationV1Api(api)
        return {
            "crds": {c.metadata.name for c in client.ApiextensionsV1Api(api).list_custom_resource_definition().items},
            # Namespaces earlier tests of the session left terminating go meanwhile: not the stack's doing.
            "namespaces": {n.metadata.name for n in core.list_namespace().items if not n.metadata.deletion_timestamp},
            "clusterroles": {r.metadata.name for r in rbac.list_cluster_role().items},
            "clusterrolebindings": {r.metadata.name for r in rbac.list_cluster_role_binding().items},
            "policies": {p.metadata.name for p in admission.list_validating_admission_policy().items},
            "policy-bindings": {b.metadata.name for b in admission.list_validating_admission_policy_binding().items},
            "default-accounts": {a.metadata.name for a in core.list_namespaced_service_account("default").items},
            "default-bindings": {b.metadata.name for b in rbac.list_namespaced_role_binding("default").items},
        }
    finally:
        api.close()


def test_dev_demo_on_an_existing_cluster_builds_no_kubernetes_and_leaves_it_as_it_was(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    """``opbroker dev --demo --kubeconfig F``: the session's control plane stands in for the user's cluster. The
    cache is an empty folder (only the Go renderer linked in): building or starting Kubernetes would have to
    create ``clusters/`` there. Afterwards the cluster holds what it held before, nothing more."""
    cache = tmp_path / "cache"
    cache.mkdir()
    from opbroker import gorender

    renderer = gorender.cached_binary().parent
    (cache / renderer.name).symlink_to(renderer)
    before = _cluster_snapshot(control_plane.kubeconfig)
    (port,) = free_ports(1)
    result = subprocess.run(
        [str(OPBROKER), "dev", "--demo", "--port", str(port), "--kubeconfig", str(control_plane.kubeconfig)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "OPBROKER_CACHE": str(cache)},
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert f"using the cluster of {control_plane.kubeconfig}" in output and "building none" in output
    assert "onboarded the namespace default" in output
    for step in ("2. provision", "3. bind", "5. unbind", "6. deprovision"):
        assert step in output
    assert "demo complete" in output
    assert not (cache / "clusters").exists(), "a control plane was built or started"
    assert "still being deleted" not in output, output
    after = _cluster_snapshot(control_plane.kubeconfig)
    assert after == before
