"""``opbroker dev --demo`` as a newcomer runs it: a subprocess that brings everything up, walks the OSB
lifecycle, stops everything it started and exits 0."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from opbroker.devcluster import ControlPlane
from opbroker.devcluster.controlplane import free_ports

pytestmark = pytest.mark.process  # runs another program (see tests/conftest.py)

OPBROKER = Path(sys.executable).parent / "opbroker"


def test_dev_demo_runs_the_whole_lifecycle_and_cleans_up() -> None:
    name = f"devtest-{os.getpid()}"
    (port,) = free_ports(1)
    result = subprocess.run(
        [str(OPBROKER), "dev", "--demo", "--name", name, "--port", str(port)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    for step in ("1. catalog", "2. provision", "3. bind", "4. credentials", "5. unbind", "6. deprovision"):
        assert step in output
    assert "password: " in output and "uri: postgres://" in output
    assert "demo complete" in output
    assert f"control plane '{name}' stopped" in output
    status = ControlPlane(name).status()
    assert not status.running and all(not c.running for c in status.components)


def test_dev_refuses_a_taken_port_clearly() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = subprocess.run(
            [str(OPBROKER), "dev", "--demo", "--name", f"devport-{os.getpid()}", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert result.returncode == 1
    assert f"port {port} on 127.0.0.1 is taken; choose another with --port" in result.stderr
