"""The OSB resources ``opbroker:index:ServiceInstance`` and ``ServiceBinding`` through the real Pulumi engine and
the opbroker provider plugin (provider/pulumi-resource-opbroker, found through ``packages:``; no Python language
host, nothing on PATH), against the OSB broker of tests/osb_fake_broker.py served on 127.0.0.1.

Covers, from Pulumi YAML (the proof for every language): provision → bind → outputs with the credentials secret →
a no-op preview → unbind → deprovision on destroy; ``pulumi refresh`` after the instance was deleted at the broker
out of band reports it and drops it from the state; a failed provision is the ``up``'s error, after orphan
mitigation (the broker saw the DELETE); an instance dropped from the state is adopted again by its id; ``pulumi
import`` by id alone is refused. From Python: an inline Automation API program (``opbroker.stacks``) using the
typed classes of ``opbroker.provider.osb_resources``. No Kubernetes cluster is involved.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from opbroker import stacks
from opbroker.devcluster.pulumi_engine import BIN, PACKAGES, PROVIDER, Engine, Project, new_project
from opbroker.provider.osb_resources import ServiceBinding, ServiceInstance
from tests.osb_fake_broker import PLAN_ASYNC, SERVICE_ID, FakeBroker, serve

pytestmark = pytest.mark.process  # runs another program (see tests/conftest.py)

INSTANCE = "opbroker:index:ServiceInstance"
BINDING = "opbroker:index:ServiceBinding"
PASSWORD = "fake-broker-password-7c1e"
CREDENTIAL = "s3cr3t"  # the fake broker's credentials' password
SECRET_SIG = "4dabf18193072939515e22adb298388d"


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    for binary in ("pulumi", "pulumi-language-yaml"):
        assert (BIN / binary).is_file(), f"{BIN / binary} is missing: run scripts/setup.sh (scripts/build-pulumi.sh)"
    root = tmp_path_factory.mktemp("pulumi-osb")
    (root / "home").mkdir()
    (root / "state").mkdir()
    return Engine(root / "home", root / "state", root / "no-cluster")


@pytest.fixture
def broker() -> Iterator[tuple[FakeBroker, str]]:
    fake = FakeBroker(username="opbroker", password=PASSWORD, polls=1)
    with serve(fake) as url:
        yield fake, url


def osb_program(url: str, name: str = "opbroker-osb", **instance_extra: Any) -> dict[str, Any]:
    connection = {"brokerUrl": url, "brokerUsername": "opbroker", "brokerPassword": "${brokerPassword}"}
    return {
        "name": name,
        "runtime": "yaml",
        "packages": PACKAGES,
        "config": {"brokerPassword": {"type": "string", "secret": True}},
        "resources": {
            "db": {
                "type": INSTANCE,
                "properties": {
                    **connection,
                    "serviceId": SERVICE_ID,
                    "planId": PLAN_ASYNC,
                    "parameters": {"size": "s"},
                    "pollInterval": 0.2,
                    **instance_extra,
                },
            },
            "app": {
                "type": BINDING,
                "properties": {
                    **connection,
                    "instanceId": "${db.instanceId}",
                    "serviceId": SERVICE_ID,
                    "planId": PLAN_ASYNC,
                },
            },
        },
        "outputs": {"instanceId": "${db.instanceId}", "state": "${db.state}", "credentials": "${app.credentials}"},
    }


def project_for(engine: Engine, folder: Path, program: dict[str, Any]) -> Project:
    for binary in ("pulumi-language-python", "pulumi-resource-opbroker"):
        assert shutil.which(binary, path=engine.env()["PATH"]) is None, f"{binary} is on the engine's PATH"
    project = new_project(engine, folder, program)
    project.set_config("brokerPassword", PASSWORD, secret=True)
    return project


def secret(value: Any) -> bool:
    """Whether a state value is a secret (Pulumi's secret signature)."""
    return isinstance(value, dict) and value.get(SECRET_SIG) == "1b47061264138c4ac30d75fd1eb44270"


def of_type(project: Project, type_: str) -> list[dict[str, Any]]:
    return [r for r in project.resources() if r["type"] == type_]


def test_yaml_provisions_binds_and_destroy_unbinds_then_deprovisions(
    engine: Engine, broker: tuple[FakeBroker, str], tmp_path: Path
) -> None:
    fake, url = broker
    project = project_for(engine, tmp_path / "osb", osb_program(url))
    planned = json.loads(project.run("preview", "--json").stdout)
    creates = {s["urn"].rsplit("::", 1)[-1] for s in planned["steps"] if s["op"] == "create"}
    assert {"db", "app"} <= creates
    assert fake.requests == []  # a preview asks the broker nothing

    project.up()
    outputs = project.outputs()
    instance_id = outputs["instanceId"]
    assert outputs["state"] == "succeeded"
    (binding_id,) = fake.bindings
    assert outputs["credentials"] == {
        "username": f"u-{binding_id[:8]}",
        "password": CREDENTIAL,
        "host": "db.fake",
        "port": 5432,
    }
    (put,) = fake.calls("PUT", f"/service_instances/{instance_id}")
    body = json.loads(put.body)
    assert body["context"] == {"platform": "pulumi", "project": "opbroker-osb", "stack": "test"}
    assert (body["organization_guid"], body["space_guid"]) == ("opbroker-osb", "opbroker-osb-test")
    assert body["parameters"] == {"size": "s"}
    assert len(fake.calls("PUT", f"/service_instances/{instance_id}/service_bindings/{binding_id}")) == 1
    exported = project.run("stack", "export").stdout
    assert CREDENTIAL not in exported and PASSWORD not in exported  # secrets in the state
    (app,) = of_type(project, BINDING)
    assert secret(app["outputs"]["credentials"]) and secret(app["outputs"]["brokerPassword"])

    assert not [s for s in json.loads(project.run("preview", "--json").stdout)["steps"] if s["op"] != "same"]

    before = len(fake.requests)
    project.run("destroy", "--yes", "--skip-preview")
    deletes = [r.path for r in fake.requests[before:] if r.method == "DELETE"]
    assert len(deletes) == 2
    assert "/service_bindings/" in deletes[0] and deletes[1] == f"/v2/service_instances/{instance_id}"
    assert fake.bindings == {} and fake.instances[instance_id].deleted
    assert of_type(project, INSTANCE) == []


def test_refresh_reports_an_instance_deleted_at_the_broker_out_of_band(
    engine: Engine, broker: tuple[FakeBroker, str], tmp_path: Path
) -> None:
    fake, url = broker
    program = osb_program(url, "opbroker-osb-refresh")
    del program["resources"]["app"]
    program["outputs"] = {"instanceId": "${db.instanceId}"}
    project = project_for(engine, tmp_path / "refresh", program)
    project.up()
    instance_id = project.outputs()["instanceId"]
    kept = project.run("refresh", "--yes", "--skip-preview")
    assert len(of_type(project, INSTANCE)) == 1  # there at the broker: kept
    # This broker serves no GET of an instance (OSB's instances_retrievable): the provider says why it kept it.
    assert "does not serve the instance fetch" in kept.output and f"refresh kept instance {instance_id}" in kept.output

    fake.instances[instance_id].deleted = True  # deprovisioned behind Pulumi's back
    fake.gone_after_delete = True
    refreshed = project.run("refresh", "--yes", "--skip-preview", "--diff")
    assert "deleted" in refreshed.output and "db" in refreshed.output
    assert of_type(project, INSTANCE) == []
    planned = json.loads(project.run("preview", "--json").stdout)
    assert [s["op"] for s in planned["steps"] if s["urn"].endswith("::db")] == ["create"]
    # `pulumi import` by id alone: refused with what to do instead (an id does not name the broker).
    imported = project.run("import", INSTANCE, "other", instance_id, "--yes", "--skip-preview", expect_failure=True)
    assert "an id alone does not say which broker holds it" in imported.output
    project.run("destroy", "--yes", "--skip-preview")


def test_a_failed_provision_is_an_error_after_orphan_mitigation(
    engine: Engine, broker: tuple[FakeBroker, str], tmp_path: Path
) -> None:
    fake, url = broker
    program = osb_program(url, "opbroker-osb-failed", parameters={"fail": "quota exceeded"}, instanceId="doomed")
    project = project_for(engine, tmp_path / "failed", program)
    failed = project.up(expect_failure=True)
    assert "provision of instance doomed failed: quota exceeded" in failed.output
    assert "orphan mitigation: deprovision requested (broker answered 202)" in failed.output
    (delete,) = fake.calls("DELETE")
    assert delete.path == "/v2/service_instances/doomed"
    assert of_type(project, INSTANCE) == [] and of_type(project, BINDING) == []
    assert "Traceback" not in failed.output


def test_a_python_inline_program_uses_the_typed_classes_through_the_plugin(
    engine: Engine, broker: tuple[FakeBroker, str], tmp_path: Path
) -> None:
    fake, url = broker

    def program() -> None:
        connection = {"broker_url": url, "broker_username": "opbroker", "broker_password": PASSWORD}
        db = ServiceInstance(
            "db", **connection, service_id=SERVICE_ID, plan_id=PLAN_ASYNC, parameters={"size": "m"}, poll_interval=0.2
        )
        app = ServiceBinding("app", **connection, instance_id=db.instance_id, service_id=SERVICE_ID, plan_id=PLAN_ASYNC)
        pulumi.export("instanceId", db.instance_id)
        pulumi.export("dashboard", db.dashboard_url)
        pulumi.export("version", db.broker_api_version)
        pulumi.export("credentials", app.credentials)

    settings = engine.settings(tmp_path / "work")
    assert settings.packages == {"opbroker": PACKAGES["opbroker"]}
    stack = stacks.select_stack("opbroker-osb-python", "test", program, settings)
    planned = stacks.preview(stack)
    assert {(c.op, c.type, c.name) for c in planned.changes} >= {("create", INSTANCE, "db"), ("create", BINDING, "app")}

    stacks.up(stack)
    outputs = stack.outputs()
    assert outputs["credentials"].secret and outputs["credentials"].value["password"] == CREDENTIAL
    instance_id = outputs["instanceId"].value
    assert outputs["dashboard"].value == f"https://dashboard.example/{instance_id}"
    assert outputs["version"].value == "2.17"
    assert fake.instances[instance_id].body["parameters"] == {"size": "m"}
    # The Automation API's export shows secrets decrypted ("plaintext"), each still marked as a secret.
    resources = {r["type"]: r for r in stack.export_stack().deployment["resources"]}
    assert secret(resources[BINDING]["outputs"]["credentials"])
    for type_ in (INSTANCE, BINDING):
        assert secret(resources[type_]["outputs"]["brokerPassword"])
        assert secret(resources[type_]["inputs"]["brokerPassword"])
    assert secret(resources["pulumi:pulumi:Stack"]["outputs"]["credentials"])
    assert not stacks.preview(stack).changes

    stacks.destroy(stack)
    assert fake.bindings == {} and fake.instances[instance_id].deleted


def test_an_instance_dropped_from_the_state_is_adopted_again_by_its_id(
    engine: Engine, broker: tuple[FakeBroker, str], tmp_path: Path
) -> None:
    """docs/pulumi.md's way from the dynamic-provider version's state: drop the old resource from the state without
    touching the broker, declare the new one with the same id and attributes; `up` adopts the broker's instance
    (OSB: a repeated provision with the same attributes is a 200) instead of provisioning a second one."""
    fake, url = broker
    program = osb_program(url, "opbroker-osb-adopt", instanceId="kept")
    del program["resources"]["app"]
    program["outputs"] = {"instanceId": "${db.instanceId}"}
    project = project_for(engine, tmp_path / "adopt", program)
    project.up()
    (urn,) = [r["urn"] for r in of_type(project, INSTANCE)]
    project.run("state", "delete", urn, "--yes", "--force")
    assert of_type(project, INSTANCE) == []

    before = len(fake.requests)
    project.up()
    (put,) = [r for r in fake.requests[before:] if r.method == "PUT"]
    assert put.path == "/v2/service_instances/kept"
    assert [r for r in fake.requests[before:] if r.path.endswith("/last_operation")] == []  # answered 200: no poll
    assert len(of_type(project, INSTANCE)) == 1 and not fake.instances["kept"].deleted
    project.run("destroy", "--yes", "--skip-preview")
    assert fake.instances["kept"].deleted


def test_package_add_of_the_provider_executable_then_its_plugin_install_provisions_without_a_python_host(
    broker: tuple[FakeBroker, str], tmp_path: Path
) -> None:
    """docs/pulumi.md's `pulumi package add` path, as a user runs it, with a home of its own (the plugin it installs
    must not serve the module's other tests). The folder form (`package add ./provider`) runs a
    `PulumiPlugin.yaml` plugin through the Python language host, which this engine lacks; the executable form
    reads the schema from the provider itself, writes the package's SDK (for YAML: a package declaration) and
    links it as `opbroker@<version>`, a version the engine then takes from its plugin cache."""
    fake, url = broker
    for folder in ("home", "state"):
        (tmp_path / folder).mkdir()
    own = Engine(tmp_path / "home", tmp_path / "state", tmp_path / "no-cluster")
    program = osb_program(url, name="opbroker-package-add")
    del program["packages"]
    project = project_for(own, tmp_path / "project", program)
    executable = PROVIDER / "pulumi-resource-opbroker"

    own.run(project.dir, "package", "add", str(executable))
    linked = yaml.safe_load((project.dir / "Pulumi.yaml").read_text())["packages"]["opbroker"]
    name, _, version = linked.partition("@")
    assert name == "opbroker" and version, linked
    declaration = yaml.safe_load((project.dir / "sdks" / "opbroker" / f"opbroker-{version}.yaml").read_text())
    assert declaration["name"] == "opbroker" and declaration["version"] == version
    # Linked by version, not by path: until the plugin is installed the engine has nowhere to find it.
    missing = project.preview(expect_failure=True)
    assert "no resource plugin 'pulumi-resource-opbroker' found" in missing.output, missing.output
    assert f"v{version}" in missing.output

    own.run(project.dir, "plugin", "install", "resource", "opbroker", version, "--file", str(executable))
    project.up()
    instance_id = project.outputs()["instanceId"]
    assert instance_id in fake.instances and fake.instances[instance_id].body["plan_id"] == PLAN_ASYNC
    project.run("destroy", "--yes", "--skip-preview")
    assert fake.instances[instance_id].deleted
