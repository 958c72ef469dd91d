"""What ``cluster up --node`` tells a user whose machine lacks a piece, and that the image the repository
describes for users (``Containerfile``) is the one the local build makes (``images.IMAGE``). Pure: the machine
is described through a ``Probe``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from opbroker.devcluster.images import IMAGE
from opbroker.devcluster.requirements import (
    CNI_PLUGINS,
    Missing,
    Probe,
    explain,
    image_requirements,
    node_requirements,
)

REPOSITORY = Path(__file__).resolve().parents[2]
COMMANDS = {"containerd", "containerd-shim-runc-v2", "ctr", "runc", "iptables", "ip", "mmdebstrap", "umoci"}
PATHS = {
    *(f"/usr/lib/cni/{plugin}" for plugin in CNI_PLUGINS),
    "/sys/fs/cgroup/cgroup.controllers",
    "/proc/sys/net/bridge/bridge-nf-call-iptables",
}


def machine(
    *,
    lacks_commands: set[str] = frozenset(),  # type: ignore[assignment]
    lacks_paths: set[str] = frozenset(),  # type: ignore[assignment]
    root: bool = True,
    filesystems: str = "nodev\toverlay\n\text4\n",
) -> Probe:
    commands = COMMANDS - lacks_commands
    paths = PATHS - lacks_paths
    return Probe(
        which=lambda name: f"/usr/bin/{name}" if name in commands else None,
        exists=lambda path: str(path) in paths,
        read_text=lambda path: filesystems if str(path) == "/proc/filesystems" else "",
        is_root=lambda: root,
    )


def test_a_complete_machine_lacks_nothing() -> None:
    assert node_requirements(machine()) == []
    assert image_requirements(machine()) == []


@pytest.mark.parametrize(
    ("probe", "what", "how"),
    [
        (machine(root=False), "root privileges", "run as root"),
        (machine(lacks_commands={"containerd"}), "`containerd` command", "apt-get install containerd runc"),
        (machine(lacks_commands={"runc"}), "`runc` command (Debian package runc)", "apt-get install"),
        (machine(lacks_commands={"iptables"}), "`iptables` command", "apt-get install"),
        (
            machine(lacks_paths={"/usr/lib/cni/portmap"}),
            "CNI plugins bridge, host-local, loopback, portmap",
            "containernetworking-plugins",
        ),
        (machine(filesystems="nodev\tproc\n"), "overlay filesystem", "modprobe overlay"),
        (machine(lacks_paths={"/sys/fs/cgroup/cgroup.controllers"}), "mounted cgroups", "mount -t cgroup2"),
        (
            machine(lacks_paths={"/proc/sys/net/bridge/bridge-nf-call-iptables"}),
            "bridge netfilter",
            "modprobe br_netfilter",
        ),
    ],
)
def test_each_missing_piece_is_named_with_how_to_get_it(probe: Probe, what: str, how: str) -> None:
    missing = node_requirements(probe)
    assert len(missing) == 1, missing
    assert what in missing[0].what
    assert how in missing[0].how
    message = explain(missing)
    assert message.startswith("this machine cannot run a node yet:")
    assert what in message and how in message


def test_every_missing_piece_is_reported_at_once() -> None:
    probe = machine(root=False, lacks_commands={"containerd", "ctr", "runc"}, filesystems="")
    whats = [m.what for m in node_requirements(probe)]
    assert whats[0] == "root privileges"
    for command in ("containerd", "ctr", "runc"):
        assert any(f"`{command}` command" in w for w in whats), whats
    assert any("overlay" in w for w in whats)


def test_image_tools_are_named() -> None:
    missing = image_requirements(machine(lacks_commands={"umoci"}))
    assert missing == [Missing("the `umoci` command", "apt-get install mmdebstrap umoci")]


def _containerfile_final_stage() -> list[str]:
    text = (REPOSITORY / "Containerfile").read_text()
    joined = re.sub(r"\\\n\s*", " ", text)
    lines = [line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    last_from = max(i for i, line in enumerate(lines) if line.startswith("FROM "))
    return lines[last_from:]


def test_containerfile_describes_the_locally_built_image() -> None:
    stage = _containerfile_final_stage()
    assert stage[0] == "FROM ${DEBIAN}"
    base = re.search(r"^ARG DEBIAN=(\S+)$", (REPOSITORY / "Containerfile").read_text(), re.MULTILINE)
    assert base is not None and base.group(1).startswith(f"docker.io/library/debian:{IMAGE.debian_suite}-slim")
    instructions = {line.split()[0]: line.split(None, 1)[1] for line in stage}
    assert instructions["USER"] == IMAGE.user
    assert instructions["ENTRYPOINT"] == '["' + '", "'.join(IMAGE.entrypoint) + '"]'
    assert instructions["EXPOSE"].split() == list(IMAGE.exposed_ports)
    env = dict(part.split("=", 1) for part in instructions["ENV"].split())
    assert env == dict(IMAGE.env)
    assert f"COPY --from=build {IMAGE.venv} {IMAGE.venv}" in stage
    assert f"COPY --from=gorender /out/gorender {IMAGE.gorender}" in stage
    install = instructions["RUN"]
    assert all(package in install for package in IMAGE.runtime_packages)
    assert "65532" in install and IMAGE.user.startswith("65532")


def test_image_runs_as_the_user_the_component_requires() -> None:
    from opbroker.components.controlplane import METRICS_PORT, PORT, RUN_AS_USER

    assert IMAGE.user == f"{RUN_AS_USER}:{RUN_AS_USER}"
    assert {f"{PORT}/tcp", f"{METRICS_PORT}/tcp"} == set(IMAGE.exposed_ports)
