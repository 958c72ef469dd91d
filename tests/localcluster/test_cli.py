"""The ``opbroker`` command as a user runs it: a subprocess, exit codes, messages."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.process  # runs another program (see tests/conftest.py)

REPO = Path(__file__).resolve().parents[2]
OPBROKER = shutil.which("opbroker", path=str(Path(sys.executable).parent)) or "opbroker"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([OPBROKER, *args], capture_output=True, text=True, cwd=REPO, timeout=60, check=False)


def test_validate_passes_on_the_seeds(seed_manifests: list[Path]) -> None:
    result = run("validate", *map(str, seed_manifests))
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("✓") == 5
    assert "document 2 skipped (v1 Secret is not an opbroker kind)" in result.stdout


def test_validate_names_file_document_and_field() -> None:
    bad = REPO / "tests" / "data" / "invalid"
    result = run("validate", str(bad / "missing-and-wrong-type.yaml"), str(bad / "unknown-action.yaml"))
    assert result.returncode == 1
    assert "missing-and-wrong-type.yaml: document 2 (SFService)" in result.stderr
    assert "spec.id: Field required" in result.stderr
    assert "spec.bindable: Input should be a valid boolean" in result.stderr
    assert "unknown-action.yaml: document 1 (SFPlan)" in result.stderr
    assert "spec.templates[0].action: Input should be 'provision'" in result.stderr
    # The valid-but-foreign document before the bad one is still reported.
    assert "missing-and-wrong-type.yaml: document 1 skipped" in result.stdout


def test_validate_rejects_a_missing_file() -> None:
    result = run("validate", "does-not-exist.yaml")
    assert result.returncode == 2
    assert "does-not-exist.yaml" in result.stderr


def test_crds_prints_every_crd() -> None:
    result = run("crds")
    assert result.returncode == 0, result.stderr
    kinds = [doc["spec"]["names"]["kind"] for doc in yaml.safe_load_all(result.stdout)]
    assert kinds == [
        "SFService",
        "SFPlan",
        "SFServiceInstance",
        "SFServiceBinding",
        "SFCluster",
        "RegisteredService",
        "ServiceClaim",
        "ServiceCatalog",
        "Broker",
        "ServiceClass",
        "Instance",
        "Binding",
    ]


def test_import_without_pulumi_from_any_directory(tmp_path: Path) -> None:
    """api and controller must not pull in pulumi (the controller image does not ship it)."""
    code = (
        "import sys, opbroker.api, opbroker.controller, opbroker.devcluster; "
        "assert not any(m.startswith('pulumi') for m in sys.modules), 'pulumi imported'"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_validate_templates_renders_plans_offline(seed_manifests: list[Path]) -> None:
    seed_plan = next(p for p in seed_manifests if p.name == "sfplan-postgresql-zalando.yaml")
    ours = REPO / "examples" / "catalog" / "postgresql-zalando-plan.yaml"
    assert run("validate", str(seed_plan)).returncode == 0, "without --templates the seed's gotemplate plan loads"
    result = run("validate", "--templates", str(ours), str(seed_plan))
    assert result.returncode == 0, result.stderr  # the seed's gotemplate plan renders through the Go renderer
    assert "trial render of bind with a made-up request failed" in result.stdout  # a warning, not a failure
    assert f"{ours}: document 1 SFPlan" not in result.stderr


def test_gorender_build_and_path_find_the_cached_renderer() -> None:
    built = run("gorender", "build")
    assert built.returncode == 0, built.stderr
    assert "renderer up to date" in built.stdout or "renderer ready" in built.stdout
    found = run("gorender", "path")
    assert found.returncode == 0, found.stderr
    path = Path(found.stdout.strip())
    assert path.is_file() and path.parent.name.startswith("gorender-") and REPO not in path.parents
    missing = subprocess.run(
        [OPBROKER, "gorender", "path"],
        capture_output=True,
        text=True,
        env={**os.environ, "OPBROKER_GORENDER": "/nonexistent/gorender"},
        check=False,
    )
    assert missing.returncode == 1
    assert "OPBROKER_GORENDER points at /nonexistent/gorender, which does not exist" in missing.stderr
