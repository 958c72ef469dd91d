"""The ``opbroker`` command imports only the group it runs: the controller and the broker start often, and the
other groups' modules (the local cluster's builders and PKI, the broker's web stack) are CPU at every start."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.process  # runs the CLI in a fresh interpreter (see tests/conftest.py)

PROBE = """
import json, sys
from opbroker.cli.main import app
try:
    app(sys.argv[1:], prog_name="opbroker")
except SystemExit:
    pass
print(json.dumps(sorted(m for m in sys.modules if m.startswith(("opbroker.", "fastapi", "uvicorn")))))
"""


def loaded_by(*args: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120, check=True)
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def test_the_controller_command_imports_no_other_group() -> None:
    modules = loaded_by("controller", "run", "--help")
    assert "opbroker.cli.controller" in modules
    for other in ("opbroker.cli.cluster", "opbroker.cli.broker", "opbroker.devcluster", "fastapi", "uvicorn"):
        assert other not in modules, f"{other} imported by 'opbroker controller run'"


def test_help_still_lists_every_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "opbroker.cli.main", "--help"], capture_output=True, text=True, timeout=120, check=True
    )
    for command in (
        "validate",
        "crds",
        "cluster",
        "gorender",
        "broker",
        "render",
        "controller",
        "plan",
        "dev",
        "import",
        "instance",
        "binding",
        "provider",
    ):
        assert command in done.stdout


def test_version_prints_the_installed_distributions_version_and_loads_no_group() -> None:
    from importlib.metadata import version

    done = subprocess.run(
        [sys.executable, "-m", "opbroker.cli.main", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout.strip() == f"opbroker {version('opbroker')}"
    modules = loaded_by("--version")
    assert not [m for m in modules if m.startswith("opbroker.cli.") and m != "opbroker.cli.main"], modules
