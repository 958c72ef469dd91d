"""The sister's kubeconfig as the master's Secret gets it (``opbroker sister prepare``): one context, data only,
every file it names read into data; a command refused before anything is written."""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

from opbroker.cli.main import app
from opbroker.controller.multicluster.core import kubeconfigs


def test_a_kubeconfig_naming_a_command_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    loaded = {
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1", "certificate-authority-data": "Q0E="}}],
        "users": [{"name": "u", "user": {"exec": {"command": "get-token", "apiVersion": "v1"}}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(loaded))
    result = CliRunner().invoke(app, ["sister", "prepare", "x", "--sister-kubeconfig", str(path)])
    assert result.exit_code == 1 and "user.exec" in result.output and "token" in result.output


def test_file_references_are_read_into_data(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_bytes(b"CA")
    (tmp_path / "token").write_text("secret-token\n")
    kubeconfig = {
        "clusters": [
            {"name": "c", "cluster": {"server": "https://a:6443", "certificate-authority": str(tmp_path / "ca.crt")}}
        ],
        "users": [
            {"name": "u", "user": {"tokenFile": str(tmp_path / "token")}},
            {"name": "other", "user": {"token": "x"}},
        ],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
    }  # fmt: skip
    data = kubeconfigs.data_only(kubeconfig, lambda p: Path(p).read_bytes(), server="https://b:6443")
    assert kubeconfigs.problems(data) == []
    assert data["clusters"][0]["cluster"] == {"server": "https://b:6443", "certificate-authority-data": "Q0E="}
    assert data["users"] == [{"name": "ctx", "user": {"token": "secret-token"}}]
