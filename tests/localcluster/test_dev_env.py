"""``opbroker dev env``: another terminal (or a walkthrough) takes the running dev stack's endpoint from it."""

from __future__ import annotations

import json
import shlex
import stat
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from opbroker.cli.main import app
from opbroker.devcluster.devstack import Endpoint, environment_file

ENDPOINT = Endpoint("http://127.0.0.1:8123", "admin", "p'a ss", Path("/k/kubeconfig"), "operator", "adm$n")


def test_the_environment_names_what_the_broker_and_kubectl_read() -> None:
    assert ENDPOINT.environment() == {
        "KUBECONFIG": "/k/kubeconfig",
        "OPBROKER_BROKER_URL": "http://127.0.0.1:8123",
        "OPBROKER_BROKER_USERNAME": "admin",
        "OPBROKER_BROKER_PASSWORD": "p'a ss",
        "OPBROKER_ADMIN_USERNAME": "operator",
        "OPBROKER_ADMIN_PASSWORD": "adm$n",
    }
    without_admin = Endpoint("http://x", "u", "p", Path("/k"))
    assert "OPBROKER_ADMIN_PASSWORD" not in without_admin.environment()


def test_dev_env_prints_export_lines_a_shell_evaluates_back_to_the_same_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPBROKER_CACHE", str(tmp_path))
    path = environment_file("walk")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(ENDPOINT.environment()))
    printed = CliRunner().invoke(app, ["dev", "env", "--name", "walk"])
    assert printed.exit_code == 0, printed.output
    lines = printed.output.splitlines()
    assert lines[0] == "export KUBECONFIG=/k/kubeconfig"
    assert f"export OPBROKER_BROKER_PASSWORD={shlex.quote(ENDPOINT.password)}" in lines


@pytest.mark.process  # a shell evaluates what it printed
def test_a_shell_reads_back_every_value_unchanged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPBROKER_CACHE", str(tmp_path))
    path = environment_file("walk")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(ENDPOINT.environment()))
    printed = CliRunner().invoke(app, ["dev", "env", "--name", "walk"]).output
    shown = subprocess.run(
        ["bash", "-c", printed + 'printf "%s|%s" "$OPBROKER_BROKER_PASSWORD" "$OPBROKER_ADMIN_PASSWORD"'],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert shown == "p'a ss|adm$n"


def test_dev_env_without_a_running_stack_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPBROKER_CACHE", str(tmp_path))
    printed = CliRunner().invoke(app, ["dev", "env", "--name", "nothing"])
    assert printed.exit_code == 1
    assert "no `opbroker dev --name nothing` is running here" in printed.output


def test_the_stack_leaves_its_environment_readable_by_its_user_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opbroker.devcluster.devstack import DevStack

    monkeypatch.setenv("OPBROKER_CACHE", str(tmp_path))
    stack = DevStack("walk")
    stack._write_environment(ENDPOINT)
    path = environment_file("walk")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text())["OPBROKER_ADMIN_PASSWORD"] == "adm$n"
