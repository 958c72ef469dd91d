"""``opbroker grant plan-account``: the rights computed from what plans render (pure), and the command's YAML."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from opbroker.api.planrights import RBAC_GROUP, beyond, guess, merged, rights, well_known
from opbroker.api.policyrules import Rule
from opbroker.api.rbac import OWNER_VERBS, plan_account_rules
from opbroker.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
IMPORTED = ROOT / "examples" / "couchbase" / "imported.yaml"
DEMO = ROOT / "examples" / "demo_operator" / "catalog.yaml"


def _obj(api_version: str, kind: str, **extra: Any) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}, **extra}


def test_each_kind_gets_the_controllers_verbs_where_its_scope_says() -> None:
    found = rights(
        [_obj("v1", "Secret"), _obj("apps/v1", "StatefulSet"), _obj("storage.k8s.io/v1", "StorageClass")], well_known
    )
    assert found.namespaced == (
        Rule(("",), ("secrets",), OWNER_VERBS),
        Rule(("apps",), ("statefulsets",), OWNER_VERBS),
    )
    assert found.cluster == (Rule(("storage.k8s.io",), ("storageclasses",), OWNER_VERBS),)
    assert found.guesses == ()


def test_a_rendered_role_adds_what_it_grants_and_a_binding_adds_bind_on_its_role() -> None:
    reader = {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}
    lister = {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list"]}
    found = rights(
        [
            _obj(f"{RBAC_GROUP}/v1", "ClusterRole", rules=[reader]),
            _obj(f"{RBAC_GROUP}/v1", "Role", rules=[lister]),
            _obj(f"{RBAC_GROUP}/v1", "RoleBinding", roleRef={"kind": "ClusterRole", "name": "viewer"}),
        ],
        well_known,
    )
    # RBAC's escalation check: the ClusterRole's rule cluster-wide, the Role's where the account writes.
    assert Rule(("",), ("secrets",), ("get",)) in found.cluster
    assert Rule((RBAC_GROUP,), ("clusterroles",), OWNER_VERBS) in found.cluster
    assert Rule((RBAC_GROUP,), ("clusterroles",), ("bind",), ("viewer",)) in found.cluster
    assert Rule(("apps",), ("deployments",), ("list",)) in found.namespaced
    assert Rule((RBAC_GROUP,), ("roles",), OWNER_VERBS) in found.namespaced
    assert Rule((RBAC_GROUP,), ("rolebindings",), OWNER_VERBS) in found.namespaced


def test_unknown_kinds_are_guessed_and_said_or_resolved_by_the_resolver() -> None:
    assert guess("Database") == "databases" and guess("Policy") == "policies" and guess("Gateway") == "gateways"
    guessed = rights([_obj("demo.opbroker.io/v1alpha1", "Database")], well_known)
    assert guessed.namespaced == (Rule(("demo.opbroker.io",), ("databases",), OWNER_VERBS),)
    assert guessed.guesses and "guessed" in guessed.guesses[0]
    resolved = rights([_obj("acme.io/v1", "Bucket")], lambda _v, _k: ("bucketz", False))
    assert resolved.cluster == (Rule(("acme.io",), ("bucketz",), OWNER_VERBS),) and resolved.guesses == ()


def test_rules_are_joined_per_resource_and_what_every_account_holds_is_not_repeated() -> None:
    joined = merged([Rule(("",), ("secrets", "configmaps"), ("get",)), Rule(("",), ("secrets",), ("delete", "get"))])
    assert joined == (Rule(("",), ("configmaps",), ("get",)), Rule(("",), ("secrets",), ("get", "delete")))
    assert beyond([Rule(("",), ("secrets",), OWNER_VERBS), Rule(("x",), ("y",), ("get",))], plan_account_rules()) == (
        Rule(("x",), ("y",), ("get",)),
    )


def _documents(text: str) -> dict[str, dict[str, Any]]:
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in yaml.safe_load_all(text) if d}


@pytest.mark.process  # the couchbase templates render in the Go renderer's process
def test_the_imported_couchbase_plan_needs_clusterroles_and_what_its_role_grants_cluster_wide() -> None:
    result = CliRunner().invoke(app, ["grant", "plan-account", str(IMPORTED)])
    assert result.exit_code == 0, result.output
    documents = _documents(result.stdout)
    cluster = documents["ClusterRole/opbroker:opbroker:opbroker-plans:cluster"]["rules"]
    assert {"apiGroups": [RBAC_GROUP], "resources": ["clusterroles"], "verbs": list(OWNER_VERBS)} in cluster
    assert {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]} in cluster
    binding = documents["ClusterRoleBinding/opbroker:opbroker:opbroker-plans:cluster"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "opbroker-plans", "namespace": "opbroker"}]
    assert documents["RoleBinding/opbroker:opbroker:opbroker-plans"]["metadata"]["namespace"] == "opbroker"


def test_the_demo_plan_needs_its_operators_kind_in_the_namespaced_role() -> None:
    result = CliRunner().invoke(app, ["grant", "plan-account", str(DEMO), "--namespace", "cp"])
    assert result.exit_code == 0, result.output
    role = _documents(result.stdout)["ClusterRole/opbroker:cp:opbroker-plans"]["rules"]
    assert {"apiGroups": ["demo.opbroker.io"], "resources": ["databases"], "verbs": list(OWNER_VERBS)} in role
    assert "ClusterRole/opbroker:cp:opbroker-plans:cluster" not in _documents(result.stdout)


def test_a_file_without_a_plan_or_a_bad_parameter_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("kind: ConfigMap\nmetadata: {name: x}\n")
    result = CliRunner().invoke(app, ["grant", "plan-account", str(empty)])
    assert result.exit_code == 1 and "no SFPlan document" in result.output
    result = CliRunner().invoke(app, ["grant", "plan-account", str(DEMO), "--parameters", "[1]"])
    assert result.exit_code == 2
