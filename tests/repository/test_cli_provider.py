"""``opbroker provider``: the plugin paths a Pulumi program outside the repository names, and the launcher
``opbroker provider install`` puts into Pulumi's plugin cache. Installed from a wheel in
tests/repository/test_wheel.py; here in-process, against this tree."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from typer.testing import CliRunner

from opbroker.cli import provider
from opbroker.cli.main import app


def printed(*args: str) -> Path:
    result = CliRunner().invoke(app, ["provider", "path", *args])
    assert result.exit_code == 0, result.output
    return Path(result.output.strip())


def test_the_paths_are_the_plugin_folder_its_executable_and_the_policy_pack() -> None:
    folder = printed()
    assert (folder / "PulumiPlugin.yaml").is_file() and (folder / "python.sh").is_file()
    assert printed("--executable") == folder / "pulumi-resource-opbroker"
    assert printed("--policy-pack") == folder / "policypack" / "pulumi-analyzer-opbroker"
    for executable in (printed("--executable"), printed("--policy-pack")):
        assert os.access(executable, os.X_OK)


def test_asking_for_both_executables_at_once_is_refused() -> None:
    result = CliRunner().invoke(app, ["provider", "path", "--executable", "--policy-pack"])
    assert result.exit_code != 0


def test_the_installed_launcher_names_its_interpreter_quoted() -> None:
    script = provider.launcher("/opt/my envs/bin/python")
    assert script.startswith("#!/bin/sh\n")
    assert f"exec {shlex.quote('/opt/my envs/bin/python')} -m opbroker.provider " in script
