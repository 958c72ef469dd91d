"""``opbroker instance abandon`` against the real control plane and the session's controller (issue 43, "a way out").

An instance whose deprovision can never finish — its plan's status template never says deprovisioned, its binding's
unbind never says unbound, and the binding's object carries someone else's finalizer — is abandoned through the CLI,
run as a user runs it (a subprocess, no terminal): refused while its binding lives, refused without ``--yes``, then
abandoned with ``--with-bindings --yes``. The pure decisions are tabled in ``test_abandon_plan.py``.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from opbroker.api.conventions import (
    ANNOTATION_OWNER_UID,
    DEFAULT_NAMESPACE,
    FINALIZER,
    LABEL_MANAGED_BY,
)
from opbroker.devcluster import ControlPlane
from tests.controller.test_lifecycle import bind, custom, gone, provision, wait_state
from tests.controller_support import apply_yaml, wait_for

pytestmark = pytest.mark.usefixtures("controller")

GROUP, VERSION = "osb.servicefabrik.io", "v1alpha1"
HOLD = "example.com/hold"
PASSWORD = "s3cret-abandon-pw"

STUCK_PLAN = """
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFPlan
metadata: {{name: {name}}}
spec:
  name: {name}
  id: {name}
  serviceId: 6f4e7a0c-2f0a-4d5e-9b1a-0d6c1e0f5a11
  description: provisions and binds, but never says deprovisioned or unbound
  templates:
  - action: provision
    type: jinja2
    deletionPolicy: orphan
    content: |
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: {{{{ instance.metadata.name }}}}-keep
      data: {{size: small}}
  - action: bind
    type: jinja2
    content: |
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: {{{{ binding.metadata.name }}}}-grant
      data: {{user: "{{{{ binding.metadata.name }}}}"}}
  - action: status
    type: jinja2
    content: |
      provision:
        state: succeeded
      bind:
        state: succeeded
        response:
          credentials: {{user: "{{{{ binding.metadata.name if binding else '' }}}}", password: {PASSWORD}}}
      unbind:
        state: in progress
      deprovision:
        state: in progress
"""


def opbroker(control_plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it, without a terminal (stdin closed)."""
    command = [sys.executable, "-m", "opbroker.cli.main", *args, "--kubeconfig", str(control_plane.kubeconfig)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def configmap(core: client.CoreV1Api, namespace: str, name: str) -> Any:
    try:
        return core.read_namespaced_config_map(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def secret_exists(core: client.CoreV1Api, namespace: str, name: str) -> bool:
    try:
        core.read_namespaced_secret(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def test_a_stuck_deprovision_is_abandoned_with_its_binding(
    api_client: client.ApiClient, namespace: str, catalog_namespace: str, control_plane: ControlPlane, tmp_path: Any
) -> None:
    core = client.CoreV1Api(api_client)
    plan_name = f"stuck-{namespace}"
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(STUCK_PLAN.format(name=plan_name, PASSWORD=PASSWORD))
    apply_yaml(api_client, plan_file, catalog_namespace)
    provision(api_client, namespace, "ab1", plan_id=plan_name)
    instance = wait_state(api_client, namespace, "sfserviceinstances", "ab1", "succeeded")
    uid = instance["metadata"]["uid"]
    assert instance["status"]["resources"] == [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "ab1-keep", "namespace": namespace,
         "deletionPolicy": "orphan"}
    ]  # fmt: skip
    bind(api_client, namespace, "ab1b", "ab1", plan_id=plan_name)
    binding = wait_state(api_client, namespace, "sfservicebindings", "ab1b", "succeeded")
    assert secret_exists(core, namespace, "ab1b-credentials")
    assert secret_exists(core, DEFAULT_NAMESPACE, f"opbroker-instance-registry-{uid}")
    # Someone else's finalizer on the binding's object: its deletion never completes while it is there.
    core.patch_namespaced_config_map("ab1b-grant", namespace, {"metadata": {"finalizers": [HOLD]}})

    custom(api_client).delete_namespaced_custom_object(GROUP, VERSION, namespace, "sfserviceinstances", "ab1")
    stuck = wait_state(api_client, namespace, "sfserviceinstances", "ab1", "failed")  # its binding lives
    assert FINALIZER in stuck["metadata"]["finalizers"] and stuck["metadata"]["deletionTimestamp"]

    base = ["instance", "abandon", "ab1", "-n", namespace]
    bound = opbroker(control_plane, *base, "--reason", "the operator was retired", "--yes")
    assert bound.returncode == 1, bound.stderr
    assert "still has 1 binding(s): ab1b" in bound.stderr and "--with-bindings" in bound.stderr

    unasked = opbroker(control_plane, *base, "--with-bindings", "--reason", "the operator was retired")
    assert unasked.returncode == 1, unasked.stderr
    assert "pass --yes" in unasked.stderr
    assert f"ConfigMap {namespace}/ab1-keep (recorded: orphan): orphan" in unasked.stdout  # shown, then refused
    assert f"Secret {namespace}/ab1b-credentials (recorded: delete): delete" in unasked.stdout
    assert not gone(api_client, namespace, "sfservicebindings", "ab1b"), "nothing is done without a confirmation"

    done = opbroker(control_plane, *base, "--with-bindings", "--yes", "--reason", "the operator was retired")
    assert done.returncode == 0, done.stdout + done.stderr
    assert PASSWORD not in done.stdout + done.stderr + unasked.stdout
    assert "done: 2 abandoned" in done.stdout

    wait_for(lambda: gone(api_client, namespace, "sfserviceinstances", "ab1"), 30, "the instance to go")
    wait_for(lambda: gone(api_client, namespace, "sfservicebindings", "ab1b"), 30, "the binding to go")
    # The delete-policy objects: deleted (the grant waits for its foreign finalizer; nothing waited for it).
    assert not secret_exists(core, namespace, "ab1b-credentials")
    grant = configmap(core, namespace, "ab1b-grant")
    assert grant is not None and grant.metadata.deletion_timestamp is not None
    assert not secret_exists(core, DEFAULT_NAMESPACE, f"opbroker-instance-registry-{uid}")
    assert not secret_exists(core, DEFAULT_NAMESPACE, f"opbroker-binding-registry-{binding['metadata']['uid']}")
    # The orphan-policy object survives its instance, nobody's of opbroker's any more.
    kept = configmap(core, namespace, "ab1-keep")
    assert kept is not None and kept.metadata.deletion_timestamp is None
    assert not any(o.uid == uid for o in kept.metadata.owner_references or [])
    assert ANNOTATION_OWNER_UID not in (kept.metadata.annotations or {})
    assert LABEL_MANAGED_BY not in (kept.metadata.labels or {})
    assert kept.data == {"size": "small"}

    events = core.list_namespaced_event(namespace).items
    abandoned = {e.involved_object.name: e for e in events if e.reason == "Abandoned"}
    assert set(abandoned) == {"ab1", "ab1b"}
    assert abandoned["ab1"].type == "Warning" and abandoned["ab1"].involved_object.uid == uid
    assert "the operator was retired" in abandoned["ab1"].message
    assert abandoned["ab1"].message.startswith("abandoned by ") and "unknown user" not in abandoned["ab1"].message
    assert PASSWORD not in " ".join(e.message or "" for e in events)

    core.patch_namespaced_config_map("ab1b-grant", namespace, {"metadata": {"finalizers": None}})
    wait_for(lambda: configmap(core, namespace, "ab1b-grant") is None, 30, "the held object to go once released")
