"""``opbroker render`` as a plan author runs it: a subprocess, files in, YAML out, exit codes.

Aspects covered: each action of the example Zalando plan from the sample inputs (provision objects, sources
references, status with credentials from a sources directory, bind, clusterSelector absent); a registry file
makes re-runs identical (``--save-registry``); errors exit 1 naming plan, action and template; bad input
files are named; the examples validate with ``opbroker validate``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.process  # runs another program (see tests/conftest.py)

REPO = Path(__file__).resolve().parents[2]
OPBROKER = str(Path(sys.executable).parent / "opbroker")
CATALOG = REPO / "examples" / "catalog"
PLAN = str(CATALOG / "postgresql-zalando-plan.yaml")
INPUTS = CATALOG / "render-inputs"
INSTANCE = str(INPUTS / "instance.yaml")
BINDING = str(INPUTS / "binding.yaml")
SOURCES = str(INPUTS / "sources")
DATA = REPO / "tests" / "data" / "rendering"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([OPBROKER, *args], capture_output=True, text=True, cwd=REPO, timeout=60, check=False)


def test_provision_prints_the_objects_to_apply() -> None:
    result = run("render", PLAN, "--action", "provision", "--instance", INSTANCE)
    assert result.returncode == 0, result.stderr
    (document,) = list(yaml.safe_load_all(result.stdout))
    assert document["kind"] == "postgresql"
    assert document["metadata"]["name"] == "sapcp-0304b210-fcfd-11e8-a31b-b6001f10c97f"
    assert document["metadata"]["namespace"] == "team-a"
    assert document["spec"]["users"] == {"main": ["superuser", "createdb"]}


def test_sources_prints_the_references() -> None:
    result = run("render", PLAN, "--action", "sources", "--instance", INSTANCE, "--binding", BINDING)
    assert result.returncode == 0, result.stderr
    refs = yaml.safe_load(result.stdout)
    assert set(refs) == {"postgresql", "secret", "svc"}
    assert refs["svc"] == {
        "apiVersion": "v1",
        "kind": "Service",
        "name": "sapcp-0304b210-fcfd-11e8-a31b-b6001f10c97f",
        "namespace": "team-a",
    }


def test_status_reads_the_live_objects_from_the_sources_directory() -> None:
    result = run(
        "render", PLAN, "--action", "status", "--instance", INSTANCE, "--binding", BINDING, "--sources", SOURCES
    )
    assert result.returncode == 0, result.stderr
    status = yaml.safe_load(result.stdout)
    assert status["provision"] == {"state": "succeeded"}
    assert status["deprovision"] == {"state": "in progress"}
    assert status["bind"]["state"] == "succeeded"
    assert status["bind"]["response"]["credentials"] == {
        "uri": "postgres://de3dd272-fcfc-11e8-a31b-b6001f10c97f:s3cr3t-password@10.96.12.34:5432/main?sslmode=require",
        "username": "de3dd272-fcfc-11e8-a31b-b6001f10c97f",
        "password": "s3cr3t-password",
        "hostname": "10.96.12.34",
        "port": "5432",
        "dbname": "main",
    }


def test_status_without_sources_is_in_progress() -> None:
    result = run("render", PLAN, "--action", "status", "--instance", INSTANCE, "--binding", BINDING)
    assert result.returncode == 0, result.stderr
    status = yaml.safe_load(result.stdout)
    assert status["bind"] == {"state": "in progress"}
    assert status["deprovision"] == {"state": "succeeded"}


def test_bind_adds_the_user_to_the_live_cluster() -> None:
    result = run("render", PLAN, "--action", "bind", "--instance", INSTANCE, "--binding", BINDING, "--sources", SOURCES)
    assert result.returncode == 0, result.stderr
    document = yaml.safe_load(result.stdout)
    assert document["spec"]["users"]["de3dd272-fcfc-11e8-a31b-b6001f10c97f"] == ["superuser"]


def test_a_plan_without_a_cluster_selector_prints_nothing() -> None:
    result = run("render", PLAN, "--action", "clusterSelector", "--instance", INSTANCE)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


def test_a_render_error_exits_1_naming_plan_action_and_template() -> None:
    result = run("render", PLAN, "--action", "bind", "--instance", INSTANCE, "--binding", BINDING)
    assert result.returncode == 1
    assert "plan '39d7d4c8-6fe2-4c2a-a5ca-b826937d5a88', action 'bind', template bind line 1" in result.stderr
    assert "the live postgresql object (source 'postgresql') is missing" in result.stderr
    assert result.stdout == ""


def test_the_registry_file_makes_generated_secrets_stable(tmp_path: Path) -> None:
    registry = tmp_path / "registry.yaml"
    args = ("render", str(DATA / "secrets-plan.yaml"), "--action", "provision", "--instance", INSTANCE)
    first = run(*args, "--registry", str(registry), "--save-registry")
    assert first.returncode == 0, first.stderr
    stored = yaml.safe_load(registry.read_text())
    assert stored["instance-id"] == "0304b210-fcfd-11e8-a31b-b6001f10c97f"
    assert len(stored["admin-password"]) == 32
    second = run(*args, "--registry", str(registry))
    assert second.returncode == 0, second.stderr
    assert second.stdout == first.stdout
    assert stored["admin-password"] in first.stdout
    assert run(*args).stdout != first.stdout, "without the registry, secrets are generated afresh"


def test_singleton_objects_are_marked() -> None:
    plan = str(DATA / "secrets-plan.yaml")
    result = run("render", plan, "--action", "bind", "--instance", INSTANCE, "--binding", BINDING)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("# singleton: shared by all instances of the plan")
    assert yaml.safe_load(result.stdout)["metadata"] == {"name": "secrets-reader"}


def test_bad_input_files_are_named() -> None:
    result = run("render", PLAN, "--action", "provision", "--instance", str(CATALOG / "postgresql-service.yaml") + "x")
    assert result.returncode == 1
    assert "postgresql-service.yamlx: cannot read YAML" in result.stderr
    result = run("render", str(CATALOG / "postgresql-service.yaml"), "--action", "provision", "--instance", INSTANCE)
    assert result.returncode == 1
    assert "expected exactly one SFPlan document, found 0" in result.stderr


def test_the_examples_validate() -> None:
    files = [PLAN, str(CATALOG / "postgresql-service.yaml"), INSTANCE, BINDING, str(DATA / "secrets-plan.yaml")]
    result = run("validate", *files)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("✓") == 5


def test_the_rendering_package_is_pure(tmp_path: Path) -> None:
    """The controller imports it; it must not drag in pulumi or a Kubernetes client."""
    code = (
        "import sys, opbroker.rendering; "
        "bad = sorted({m.split('.')[0] for m in sys.modules} & {'pulumi', 'pulumi_kubernetes', 'kubernetes', 'kopf'}); "
        "assert not bad, bad"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_the_seeds_gotemplate_plan_renders_offline_through_go() -> None:
    seed = str(REPO / "tests" / "data" / "seeds" / "sfplan-postgresql-zalando.yaml")
    result = run(
        "render", seed, "--action", "status", "--instance", INSTANCE, "--binding", BINDING, "--sources", SOURCES
    )
    assert result.returncode == 0, result.stderr
    status = yaml.safe_load(result.stdout)
    assert status["bind"]["state"] == "succeeded"
    assert status["bind"]["response"]["credentials"]["port"] == "5432"
    broken = run("render", seed, "--action", "bind", "--instance", INSTANCE, "--binding", BINDING)
    assert broken.returncode == 1
    assert "action 'bind', template bind line 5 column 18" in broken.stderr
