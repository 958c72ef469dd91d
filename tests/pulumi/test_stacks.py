"""``opbroker.stacks`` without a cluster: the control plane and catalog program under Pulumi's mocks (the catalog
waits for the CRDs and namespace only; unknown components refused), a Python project folder as an inline
program, the settings the Automation API gets (the passphrase kept out of ``repr``), and the deadline that
interrupts an engine command (a stand-in ``pulumi`` that never finishes a preview). The real engine runs them
in tests/pulumi/test_engine.py.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pulumi
import pytest

from opbroker import stacks
from opbroker.components import testing

PLAN_CR = "kubernetes:osb.servicefabrik.io/v1alpha1:SFPlan"
SERVICE_ID = "6d4c3b8e-3e4f-4d8e-9c55-0a8f5c1d2b10"
CATALOG: list[stacks.CatalogEntry] = [
    ("SFService", "db", {"id": SERVICE_ID, "name": "db", "description": "a database", "bindable": True}),
    (
        "SFPlan",
        "db-small",
        {
            "id": "b7f3a3f2-5a1c-4a52-a39f-2c4e3d9a7e21",
            "name": "small",
            "description": "small",
            "service_id": SERVICE_ID,
            "templates": [{"action": "status", "type": "jinja2", "content": "provision: {state: succeeded}"}],
        },
    ),
]


def test_the_catalog_depends_on_the_crds_namespace_and_controller_not_the_broker() -> None:
    """The controller's Deployment too: destroy then deletes the catalog while the controller runs to release
    its finalizers (tests/pulumi/test_node.py); the broker's is left out."""
    with testing.mocked() as mocks:
        pulumi.runtime.test(lambda: stacks.control_plane_with_catalog({"image": "opbroker:1"}, CATALOG))()
    plan = mocks.one(PLAN_CR, "db-small")
    crds = {r.urn for r in mocks.of_type("kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition")}
    deployments = {r.name: r.urn for r in mocks.of_type("kubernetes:apps/v1:Deployment")}
    assert crds and crds <= set(plan.dependencies)
    assert mocks.one("kubernetes:core/v1:Namespace", "opbroker-namespace").urn in plan.dependencies
    assert deployments["opbroker-controller"] in plan.dependencies
    assert deployments["opbroker-broker"] not in plan.dependencies


def test_a_catalog_component_other_than_sfservice_or_sfplan_is_refused_before_anything_registers() -> None:
    with testing.mocked() as mocks, pytest.raises(ValueError, match=r"\['SFCluster'\] are not one of"):
        stacks.control_plane_with_catalog({"image": "opbroker:1"}, [("SFCluster", "c", {})])
    assert mocks.registrations == []


def test_a_python_program_needs_the_folders_main(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"__main__\.py"):
        stacks.python_program(tmp_path)
    (tmp_path / "helper.py").write_text("VALUE = 7\n")
    main = "import helper\nimport pulumi\npulumi.ComponentResource('test:index:Thing', f'thing-{helper.VALUE}')\n"
    (tmp_path / "__main__.py").write_text(main)
    with testing.mocked() as mocks:
        pulumi.runtime.test(stacks.python_program(tmp_path))()  # its sibling module imports
    assert mocks.one("test:index:Thing", "thing-7")


def test_settings_give_the_engine_the_passphrase_but_never_show_it(tmp_path: Path) -> None:
    settings = stacks.Settings("file:///state", passphrase="hush-7f3a", env={"KUBECONFIG": "/k"})
    assert "hush-7f3a" not in repr(settings)
    assert settings.environment() == {
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "KUBECONFIG": "/k",
        "PULUMI_CONFIG_PASSPHRASE": "hush-7f3a",
    }
    options = settings.workspace_options("opbroker")
    assert options.project_settings is not None and options.project_settings.backend is not None
    assert options.project_settings.backend.url == "file:///state"
    assert options.secrets_provider == "passphrase"


def test_settings_name_the_opbroker_provider_folder_as_a_package_of_the_project() -> None:
    # The engine finds the plugin serving ServiceInstance/ServiceBinding through the Pulumi.yaml the workspace
    # writes: `packages: {opbroker: <folder with pulumi-resource-opbroker>}` (nothing on PATH, nothing installed).
    written = stacks.Settings("file:///state").workspace_options("p").project_settings
    assert written is not None
    packages = written.to_dict()["packages"]
    assert packages == {"opbroker": str(Path(__file__).resolve().parents[2] / "provider")}
    assert (Path(packages["opbroker"]) / "pulumi-resource-opbroker").is_file()
    other = stacks.Settings("file:///state", packages={}).workspace_options("p").project_settings
    assert other is not None and "packages" not in other.to_dict()


#: A ``pulumi`` that answers every command at once, except a preview, which it never finishes.
STAND_IN = """#!/bin/sh
case "$*" in
  *version*) echo v3.260.0 ;;
  *preview*) exec sleep 600 ;;
esac
exit 0
"""


@pytest.mark.process
def test_an_engine_command_past_its_deadline_is_interrupted_and_named(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "pulumi"
    fake.write_text(STAND_IN)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    settings = stacks.Settings("file:///state", passphrase="p", engine=tmp_path, work_dir=tmp_path / "work")
    stack = stacks.select_stack("opbroker", "dev", lambda: None, settings)
    with pytest.raises(stacks.EngineDeadlineError, match="deadline of 1 s"):
        stacks.preview(stack, deadline=1)
