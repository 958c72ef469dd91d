"""The manual runs as written: every walkthrough in docs/ and the README, block by block, against its own
``opbroker dev`` (started by the page itself, as a reader would in another terminal).

A page is a walkthrough when it has a block that runs (see ``tests/docs/pages.py`` for how a page marks its
blocks). Each walkthrough runs in a fresh folder that looks like the checkout (its top-level entries linked,
``.venv`` too, so that ``source .venv/bin/activate`` works), with the built ``kubectl`` and the installed
``opbroker`` on PATH, no KUBECONFIG, and its own dev control plane name and broker port (``OPBROKER_DEV_NAME``,
``OPBROKER_DEV_PORT``), so pages never meet each other or a developer's ``opbroker dev``. A block that breaks
fails the page, naming the line.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from opbroker.devcluster import ControlPlane
from opbroker.devcluster.binaries import cache_dir, kube_bin_dir
from opbroker.devcluster.controlplane import free_ports
from tests.docs.pages import Block, Role, read, runnable
from tests.docs.session import BlockFailed, Terminal, check_output

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted([*(REPO / "docs").glob("*.md"), REPO / "README.md"])
#: Per walkthrough page: how many blocks of each role it went through (printed at the end of the session).
RAN: dict[str, dict[str, int]] = {}


def _walkthroughs() -> list[Path]:
    return [page for page in PAGES if runnable(read(page, REPO))]


def test_every_page_reads_and_every_block_has_a_role() -> None:
    """Every page's doc-test comments parse; output blocks follow the block they show; files are named
    inside the page's folder. (Counts per role are printed by the walkthrough runs.)"""
    for page in PAGES:
        for block in read(page, REPO):
            if block.role is Role.FILE:
                assert block.file and not block.file.startswith(("/", "..")), block.where
            if block.role is Role.ILLUSTRATION:
                assert block.why, f"{block.where}: an illustration says why it is not run"


def _environment(page: Path) -> dict[str, str]:
    (port,) = free_ports(1)
    keep = (
        "HOME",
        "LANG",
        "LC_ALL",
        "OPBROKER_CACHE",
        "GOPATH",
        "GOMODCACHE",
        "GOFLAGS",
        "GOTOOLCHAIN",
        "TMPDIR",
        "PYTHONPATH",
    )  # a worktree runs its own code (its package tree first)
    return {
        **{key: os.environ[key] for key in keep if key in os.environ},
        "PATH": os.pathsep.join(
            [str(Path(sys.executable).parent), str(kube_bin_dir()), "/usr/local/bin", "/usr/bin", "/bin"]
        ),
        "OPBROKER_DEV_NAME": f"doc-{page.stem.lower()}-{os.getpid()}",
        "OPBROKER_DEV_PORT": str(port),
        "TERM": "dumb",
        "NO_COLOR": "1",
    }


def _checkout_like(folder: Path) -> Path:
    folder.mkdir()
    for entry in REPO.iterdir():
        if entry.name in (".venv",) or not entry.name.startswith("."):  # `source .venv/bin/activate` works
            (folder / entry.name).symlink_to(entry)
    return folder


def _stop_left_planes(dev_name: str) -> list[str]:
    """Stop the control planes a page started beside its ``opbroker dev`` (named ``<dev name>-...``, as
    ``docs/multicluster.md``'s sister) that it left running — only when it broke before its own last block."""
    left: list[str] = []
    for folder in sorted((cache_dir() / "clusters").glob(f"{dev_name}-*")):
        plane = ControlPlane(folder.name)
        if plane.status().running:
            plane.down(progress=lambda _: None)
            left.append(f"the page left the control plane {folder.name!r} running (stopped)")
    return left


@pytest.mark.apiserver  # the page starts its own `opbroker dev` (a local control plane)
@pytest.mark.parametrize("page", _walkthroughs(), ids=lambda page: page.name)
def test_walkthrough_runs_as_written(page: Path, tmp_path: Path) -> None:
    terminal = Terminal(_checkout_like(tmp_path / "work"), _environment(page))
    counts = {role.value: 0 for role in Role}
    started = time.monotonic()
    last: tuple[Block, str] | None = None
    problems: list[str] = []
    try:
        for index, block in enumerate(read(page, REPO)):
            counts[block.role.value] += 1
            if block.role is Role.FILE:
                assert block.file is not None
                target = Path((terminal.state / "cwd").read_text().strip()) / block.file
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(block.text)
            elif block.role is Role.RUN:
                last = (block, terminal.run(block))
            elif block.role is Role.OUTPUT:
                assert last is not None
                check_output(last[0], block, last[1])
            elif block.role is Role.BACKGROUND:
                terminal.start(block, index)
    finally:
        problems = terminal.stop()
        problems += _stop_left_planes(terminal.environment["OPBROKER_DEV_NAME"])
        counts["seconds"] = round(time.monotonic() - started)
        RAN[str(page.relative_to(REPO))] = counts
    if problems:
        raise BlockFailed("; ".join(problems))
