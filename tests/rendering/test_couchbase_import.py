"""``opbroker import couchbase``: a Couchbase broker configuration (catalog, templates, bindings) becomes
SFService and SFPlan manifests whose ``couchbase`` templates render what the Couchbase broker would."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from opbroker.api import SFPlan, TemplateAction
from opbroker.cli.main import app
from opbroker.rendering import Renderer, RenderInputs
from opbroker.rendering.couchbase_import import convert
from opbroker.rendering.errors import TemplateSourceError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "couchbase"
CONFIG = yaml.safe_load((EXAMPLE / "servicebrokerconfig.yaml").read_text())


def test_the_cli_prints_the_checked_in_example() -> None:
    result = CliRunner().invoke(
        app, ["import", "couchbase", str(EXAMPLE / "servicebrokerconfig.yaml"), "--namespace", "opbroker"]
    )
    assert result.exit_code == 0, result.output
    assert result.stdout == (EXAMPLE / "imported.yaml").read_text()


@pytest.mark.process
def test_the_imported_plan_renders_as_the_couchbase_broker_would() -> None:
    manifests = convert(CONFIG).manifests
    service, plan_manifest = manifests
    assert service["kind"] == "SFService" and service["metadata"]["name"] == service["spec"]["id"]
    plan = SFPlan.model_validate(plan_manifest)
    assert [(t.action.value, t.type.value) for t in plan.spec.templates] == [
        ("provision", "couchbase"),
        ("bind", "couchbase"),
    ]
    assert set(plan.spec.snippets or {}) == {"credentials"}
    renderer = Renderer()
    try:
        instance = {"metadata": {"name": "sfsi"}, "spec": {"instanceId": "camelot", "parameters": {}}}
        base: dict[str, Any] = {"instance": instance, "default_namespace": "team-a"}
        provisioned = renderer.render_objects(plan, TemplateAction.PROVISION, RenderInputs(**base))
        secret, role = provisioned.objects
        password = provisioned.registry["admin-password"]
        assert len(password) == 32
        assert secret.manifest == {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "camelot", "namespace": "team-a"},
            "stringData": {"mySecretName": "TopSecret!", "password": password},
        }
        assert role.singleton and role.manifest["metadata"] == {"name": "secret-store-reader"}
        binding = {"metadata": {"name": "b1"}, "spec": {"id": "b1", "parameters": {}}}
        bound = renderer.render_objects(
            plan, TemplateAction.BIND, RenderInputs(**base, registry=provisioned.registry, binding=binding)
        )
        assert bound.binding_registry is not None
        assert bound.binding_registry["credentials"] == {"username": "admin", "password": password}
    finally:
        renderer.go.close()


def test_what_cannot_be_converted_is_noted() -> None:
    config = copy.deepcopy(CONFIG)
    plans = config["spec"]["catalog"]["services"][0]["plans"]
    plans.append({**plans[0], "name": "unbound", "id": "unbound-id"})
    config["spec"]["bindings"][0]["serviceInstance"]["readinessChecks"] = [{"name": "x"}]
    notes = convert(config).notes
    assert any("secret-store/unbound" in note and "left out" in note for note in notes)
    assert any("readinessChecks" in note for note in notes)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c["spec"]["bindings"][0]["serviceInstance"]["templates"].append("nope"), "do not exist"),
        (lambda c: c["spec"]["templates"].pop(), "snippet 'credentials' names no"),
        (lambda c: c.pop("spec"), "catalog, templates and bindings"),
    ],
)
def test_a_broken_configuration_is_refused(change: Any, message: str) -> None:
    config = copy.deepcopy(CONFIG)
    change(config)
    with pytest.raises(TemplateSourceError, match=message):
        convert(config)
