"""``opbroker plan diff`` and ``opbroker plan update-instances`` against a real control plane.

The session's plain controller and the demo operator provision three instances of a plan made for the
test. Covers: the preview of a change that alters one instance, leaves one alone and breaks one (exit 1,
a diff for the changed one, the template's error for the broken one, a generated password equal on both
sides because it comes from the registry); a change that breaks nothing (exit 0) and writes nothing; then
the mass update of a plan without ``autoUpdateInstances``, page by page, and ``--only-outdated``
finding nothing left to do.
"""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import pytest
from kubernetes import client

from tests.controller.test_lifecycle import DB, get, provision, wait_state
from tests.controller_support import OPBROKER, apply_yaml, wait_for

pytestmark = pytest.mark.usefixtures("controller")

PLAN = """
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFPlan
metadata:
  name: {name}
spec:
  name: {name}
  id: {name}
  serviceId: 6f4e7a0c-2f0a-4d5e-9b1a-0d6c1e0f5a11
  description: a plan whose instances a rollout is previewed for
  autoUpdateInstances: false
  templates:
  - action: provision
    type: jinja2
    content: |
      apiVersion: demo.opbroker.io/v1alpha1
      kind: Database
      metadata:
        name: {{{{ instance.metadata.name }}}}
      spec:
        engine: postgresql
        version: "{{{{ parameter('/version', '16') }}}}"
        storageGB: {storage}
        readyAfterSeconds: 0
      ---
      apiVersion: v1
      kind: Secret
      metadata:
        name: {{{{ instance.metadata.name }}}}-admin
      stringData:
        password: {{{{ generatePassword('admin', 20) }}}}
        owner: {owner}
"""
ONE_GB = {"storage": "1", "owner": "ops"}
# Version 14 grows to 5 GB; version 15 now needs an owner parameter that its instance does not have.
BREAKING = {
    "storage": "{{ 5 if parameter('/version') == '14' else 1 }}",
    "owner": "{{ required(parameter('/owner') if parameter('/version') == '15' else 'ops', 'an owner parameter') }}",
}
GROWING = {"storage": "{{ 5 if parameter('/version') == '14' else 1 }}", "owner": "ops"}


def write(path: Path, name: str, fields: dict[str, str]) -> Path:
    path.write_text(PLAN.format(name=name, **fields))
    return path


def opbroker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(OPBROKER), "plan", *args], capture_output=True, text=True, timeout=120, check=False)


def test_preview_then_mass_update(
    api_client: client.ApiClient,
    namespace: str,
    catalog_namespace: str,
    control_plane: object,
    tmp_path: Path,
) -> None:
    kubeconfig = str(control_plane.kubeconfig)  # type: ignore[attr-defined]
    plan = f"rollout-{namespace}"
    apply_yaml(api_client, write(tmp_path / "v1.yaml", plan, ONE_GB), catalog_namespace)
    for name, version in (("a14", "14"), ("b16", "16"), ("c15", "15")):
        provision(api_client, namespace, name, plan_id=plan, parameters={"version": version})
    for name in ("a14", "b16", "c15"):
        wait_state(api_client, namespace, "sfserviceinstances", name, "succeeded")
    core = client.CoreV1Api(api_client)
    password = base64.b64decode(core.read_namespaced_secret("a14-admin", namespace).data["password"]).decode()
    common = ["--kubeconfig", kubeconfig, "--namespace", catalog_namespace, "--instance-namespace", namespace]

    preview = opbroker("diff", str(write(tmp_path / "v2.yaml", plan, BREAKING)), *common)
    assert preview.returncode == 1, preview.stdout + preview.stderr
    out = preview.stdout
    assert f"~ {namespace}/a14\n" in out
    assert f"--- {namespace}/a14 (current plan)\n+++ {namespace}/a14 (new plan)\n" in out
    assert "-  storageGB: 1\n+  storageGB: 5\n" in out
    assert f"! {namespace}/c15: fails to render with the new plan:" in out and "an owner parameter is missing" in out
    assert f"{namespace}/b16" not in out, "an unchanged instance is only counted"
    assert password not in out, "the password is the registry's on both sides, so it is never a changed line"
    assert f"plan '{plan}' ({plan}): 3 instance(s): 1 changed, 1 unchanged, 1 failing to render" in out

    safe = opbroker("diff", str(write(tmp_path / "v3.yaml", plan, GROWING)), *common, "--show-unchanged")
    assert safe.returncode == 0, safe.stdout + safe.stderr
    assert f"= {namespace}/b16\n" in safe.stdout and f"= {namespace}/c15\n" in safe.stdout
    assert "3 instance(s): 1 changed, 2 unchanged, 0 failing to render" in safe.stdout
    assert get(api_client, namespace, "databases", "a14", *DB[:2])["spec"]["storageGB"] == 1, "a preview writes nothing"  # type: ignore[index]

    # Roll v3 out: the plan does not auto-update, so nothing changes until the mass update marks the instances.
    apply_yaml(api_client, tmp_path / "v3.yaml", catalog_namespace)
    rollout = opbroker(
        "update-instances", plan, *common, "--batch-size", "1", "--rate", "20", "--wait", "30", "--only-outdated"
    )
    assert rollout.returncode == 0, rollout.stdout + rollout.stderr
    assert f"plan '{plan}': marked 3 instance(s) for update in " in rollout.stdout
    assert f"page 1: marked 1: {namespace}/a14" in rollout.stdout, "one instance per page, in name order"

    def grown() -> bool:
        database = get(api_client, namespace, "databases", "a14", *DB[:2])
        return bool(database and database["spec"]["storageGB"] == 5)

    wait_for(grown, 30, "a14 to be re-rendered with the new plan")
    for name in ("a14", "b16", "c15"):
        instance = wait_state(api_client, namespace, "sfserviceinstances", name, "succeeded")
        assert instance["status"].get("appliedPlanHash")
    assert base64.b64decode(core.read_namespaced_secret("a14-admin", namespace).data["password"]).decode() == password

    again = opbroker("update-instances", plan, *common, "--only-outdated")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "marked 0 instance(s)" in again.stdout and "skipped 3 already rendered from the current plan" in again.stdout

    unknown = opbroker("update-instances", "no-such-plan", *common)
    assert unknown.returncode == 1 and "no plan 'no-such-plan'" in unknown.stderr
