"""``opbroker manifests`` and its Helm chart are the ControlPlane component's own objects: what `kubectl apply -f`
and `helm install` create is what `pulumi up` creates, with the values a user sets at install in their place.

The chart's test renders it with the real helm binary (``scripts/build-helm.sh``) and compares every object with
the component's, so a change of the component that the chart's generator would get wrong fails here."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from opbroker.cli.install import ArgsError, load_args, parse_set
from opbroker.cli.main import app
from opbroker.components.helmchart import ChartError, chart_files
from opbroker.components.objects import control_plane_manifests, relabel_managed_by, use_credentials_secret
from opbroker.devcluster.binaries import helm_binary

RULE = {"api_groups": ["demo.opbroker.io"], "resources": ["databases"], "verbs": ["get", "list", "watch"]}
ARGS: dict[str, Any] = {
    "image": "registry.example/opbroker:1.2.3",
    "tenant_namespaces": ["team-a"],
    "controller": {"operator_rules": [RULE]},
    "broker": {"allowed_namespaces": ["team-a"]},
}


def keyed(documents: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d for d in documents}


def component_objects(args: dict[str, Any], manager: str) -> list[dict[str, Any]]:
    return relabel_managed_by(control_plane_manifests(copy.deepcopy(args)), manager)


# -- args from the command line ---------------------------------------------------------------------------------


def test_set_reads_dotted_paths_and_yaml_values(tmp_path: Path) -> None:
    assert parse_set("controller.replicas=3") == (["controller", "replicas"], 3)
    assert parse_set("tenant_namespaces=[a, b]") == (["tenant_namespaces"], ["a", "b"])
    with pytest.raises(ArgsError, match="KEY=VALUE"):
        parse_set("controller.replicas")
    values = tmp_path / "args.yaml"
    values.write_text(yaml.safe_dump({"namespace": "ops", "broker": {"replicas": 3, "username": "platform"}}))
    args = load_args([values], ["broker.replicas=4", "controller.workers=8"])
    assert args == {"namespace": "ops", "broker": {"replicas": 4, "username": "platform"}, "controller": {"workers": 8}}


def test_manifests_need_a_password_or_a_secret_and_never_generate_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPBROKER_BROKER_PASSWORD", raising=False)
    refused = CliRunner().invoke(app, ["manifests", "--image", "img:1"])
    assert refused.exit_code == 2
    assert "none is generated here" in refused.output
    assert "mock-generated-password" not in refused.output

    monkeypatch.setenv("OPBROKER_BROKER_PASSWORD", "s3cret-from-env")
    printed = CliRunner().invoke(app, ["manifests", "--image", "img:1", "--namespace", "ops"])
    assert printed.exit_code == 0, printed.output
    documents = list(yaml.safe_load_all(printed.stdout))
    secret = keyed(documents)[("Secret", "ops", "opbroker-broker-credentials")]
    assert secret["stringData"]["password"] == "s3cret-from-env"
    managers = {d["metadata"].get("labels", {}).get("app.kubernetes.io/managed-by") for d in documents}
    assert managers - {None} == {"kubectl"}


def test_an_existing_secret_leaves_the_password_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPBROKER_BROKER_PASSWORD", raising=False)
    printed = CliRunner().invoke(app, ["manifests", "--image", "img:1", "--broker-secret", "my-broker-login"])
    assert printed.exit_code == 0, printed.output
    documents = keyed(list(yaml.safe_load_all(printed.stdout)))
    assert not [key for key in documents if key[0] == "Secret"]
    broker = documents[("Deployment", "opbroker", "opbroker-broker")]
    references = {
        variable["valueFrom"]["secretKeyRef"]["name"]
        for variable in broker["spec"]["template"]["spec"]["containers"][0]["env"]
        if "secretKeyRef" in variable.get("valueFrom", {})
    }
    assert references == {"my-broker-login"}


def test_invalid_args_are_named_by_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPBROKER_BROKER_PASSWORD", "x")
    refused = CliRunner().invoke(app, ["manifests", "--image", "img:1", "--set", "controller.replicas=0"])
    assert refused.exit_code == 1
    assert "controller.replicas" in refused.output


def test_a_chart_never_holds_a_password() -> None:
    with pytest.raises(ChartError, match="not written into a chart"):
        chart_files({**ARGS, "broker": {"password": "x"}}, "0.1.0")
    files = chart_files(ARGS, "0.1.0")
    assert "zz-helm" not in "".join(files.values()), "a sentinel or token was left in the chart"
    assert yaml.safe_load(files["values.yaml"])["broker"]["password"] == ""


# -- the chart, rendered by helm --------------------------------------------------------------------------------


def helm_template(chart: Path, *values: str) -> list[dict[str, Any]]:
    helm = helm_binary()
    assert helm is not None, "helm is not built: run scripts/build-helm.sh (scripts/setup.sh does)"
    command = [str(helm), "template", "opbroker", str(chart)]
    for value in values:
        command += ["--set", value]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


@pytest.fixture(scope="module")
def chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("chart")
    for relative, text in chart_files(ARGS, "0.1.0").items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_text(text)
    return folder


@pytest.mark.process
def test_the_chart_renders_the_components_objects_for_any_values(chart: Path) -> None:
    """Defaults, then every value changed: helm's objects are the component's for the same args."""
    for values, args in (
        (["broker.password=pw"], {**ARGS, "broker": {**ARGS["broker"], "password": "pw"}}),
        (
            [
                "namespace=ops",
                "image=other.example/opbroker:9",
                "imagePullPolicy=Always",
                "controller.replicas=3",
                "broker.replicas=4",
                "broker.username=platform",
                "broker.password=pw:with 'quotes'",
            ],
            {
                **ARGS,
                "namespace": "ops",
                "image": "other.example/opbroker:9",
                "image_pull_policy": "Always",
                "controller": {**ARGS["controller"], "replicas": 3},
                "broker": {**ARGS["broker"], "replicas": 4, "username": "platform", "password": "pw:with 'quotes'"},
            },
        ),
    ):
        rendered = keyed(helm_template(chart, *values))
        expected = keyed([d for d in component_objects(args, "Helm") if d["kind"] != "CustomResourceDefinition"])
        assert sorted(rendered) == sorted(expected)
        for key, document in expected.items():
            assert rendered[key] == document, key


@pytest.mark.process
def test_the_chart_uses_an_existing_secret_and_installs_the_crds_once(chart: Path) -> None:
    rendered = keyed(helm_template(chart, "broker.existingSecret=my-broker-login", "createNamespace=false"))
    args = {**ARGS, "broker": {**ARGS["broker"], "password": "unused"}}
    expected = use_credentials_secret(component_objects(args, "Helm"), "opbroker", "my-broker-login")
    expected_keyed = keyed([d for d in expected if d["kind"] not in ("CustomResourceDefinition", "Namespace")])
    assert rendered == expected_keyed
    crds = {path.name: yaml.safe_load(path.read_text()) for path in (chart / "crds").glob("*.yaml")}
    component_crds = [d for d in component_objects(args, "Helm") if d["kind"] == "CustomResourceDefinition"]
    assert crds == {f"{d['metadata']['name']}.yaml": d for d in component_crds}


# -- shards (issue 46) -------------------------------------------------------------------------------------------

SHARDED: dict[str, Any] = {**ARGS, "controller": {**ARGS["controller"], "shards": 3}}


def test_manifests_of_a_sharded_control_plane_and_a_shard_count_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPBROKER_BROKER_PASSWORD", "x")
    printed = CliRunner().invoke(app, ["manifests", "--image", "img:1", "--set", "controller.shards=3"])
    assert printed.exit_code == 0, printed.output
    documents = keyed(list(yaml.safe_load_all(printed.stdout)))
    assert ("Deployment", "opbroker", "opbroker-controller") not in documents
    workload = documents[("StatefulSet", "opbroker", "opbroker-controller")]
    assert workload["spec"]["replicas"] == 6
    assert workload["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "kubectl"
    assert documents[("Service", "opbroker", "opbroker-controller")]["spec"]["clusterIP"] == "None"
    refused = CliRunner().invoke(app, ["manifests", "--image", "img:1", "--set", "controller.shards=65"])
    assert refused.exit_code == 1
    assert "controller.shards" in refused.output and "64" in refused.output


def test_a_sharded_chart_has_the_shard_count_as_a_value_and_an_unsharded_one_has_none() -> None:
    values = yaml.safe_load(chart_files(SHARDED, "0.1.0")["values.yaml"])
    assert values["controller"] == {"replicas": 2, "shards": 3}
    schema = json.loads(chart_files(SHARDED, "0.1.0")["values.schema.json"])
    assert schema["properties"]["controller"]["properties"]["shards"] == {
        "type": "integer",
        "minimum": 2,
        "maximum": 64,
    }
    unsharded = chart_files({**ARGS, "controller": {**ARGS["controller"], "shards": 1}}, "0.1.0")
    default = chart_files(ARGS, "0.1.0")
    # The same files; the templates' documents compared as a set (the mocks register some in either order).
    assert {**unsharded, "templates/opbroker.yaml": ""} == {**default, "templates/opbroker.yaml": ""}
    documents = [sorted(files["templates/opbroker.yaml"].split("\n---\n")) for files in (unsharded, default)]
    assert documents[0] == documents[1]
    assert "shards" not in yaml.safe_load(unsharded["values.yaml"])["controller"]
    assert "zz-helm" not in "".join(chart_files(SHARDED, "0.1.0").values()), "a sentinel or token was left in the chart"


@pytest.mark.process
def test_a_sharded_chart_renders_the_components_objects_for_any_shard_count(tmp_path: Path) -> None:
    """The StatefulSet's replicas, both commands' ``--shards`` and the Role's Lease names follow
    ``controller.shards``; going back to one shard (a Deployment) needs a chart generated again, and helm says so."""
    for relative, text in chart_files(SHARDED, "0.1.0").items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text)
    for values, controller in (
        ([], {"shards": 3}),
        (["controller.shards=5", "controller.replicas=3"], {"shards": 5, "replicas": 3}),
    ):
        rendered = keyed(helm_template(tmp_path, "broker.password=pw", *values))
        args = {
            **SHARDED,
            "controller": {**SHARDED["controller"], **controller},
            "broker": {**ARGS["broker"], "password": "pw"},
        }
        expected = keyed([d for d in component_objects(args, "Helm") if d["kind"] != "CustomResourceDefinition"])
        assert sorted(rendered) == sorted(expected)
        for key, document in expected.items():
            assert rendered[key] == document, key
    helm = helm_binary()
    assert helm is not None
    refused = subprocess.run(
        [
            str(helm),
            "template",
            "opbroker",
            str(tmp_path),
            "--set",
            "broker.password=pw",
            "--set",
            "controller.shards=1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode != 0 and "/controller/shards" in refused.stderr
