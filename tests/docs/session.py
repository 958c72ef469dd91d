"""One page's terminal: runs its blocks in order, as a reader would type them, and says where one breaks.

Each run block is its own ``bash`` (``set -eo pipefail``: the first failing command fails the block, as a reader
would stop there), started from the variables and working folder the previous block left (everything assigned is
exported, and saved when the block ends) — so ``eval "$(opbroker dev env)"`` in one block serves the next ones,
as in one terminal. Background blocks are started in their own process group and stopped with SIGTERM when the
page ends; the page fails if one cannot be stopped within its grace time.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests.docs.pages import Block

#: How much of a block's output a failure message shows (its end: where it broke).
SHOWN_OUTPUT = 4000
#: A stopped background block (``opbroker dev`` tears down its control plane) gets this long to exit.
STOP_GRACE = 120.0


class BlockFailed(AssertionError):
    """A block did not do what its page says: names the page and line, the block and what it printed."""


def _prelude(state: Path) -> str:
    return (
        "set -a\n"
        f'[ -f "{state}/env" ] && . "{state}/env"\n'
        f'[ -f "{state}/cwd" ] && cd "$(cat "{state}/cwd")"\n'
        f'trap \'export -p > "{state}/env"; pwd > "{state}/cwd"\' EXIT\n'
        "set -eo pipefail\n"
    )


def _failure(block: Block, why: str, output: str) -> BlockFailed:
    shown = output[-SHOWN_OUTPUT:]
    return BlockFailed(f"{block.where}: {why}\n--- block ---\n{block.text}--- output (end) ---\n{shown}")


def _expected_line(line: str) -> re.Pattern[str]:
    parts = [r"\s+".join(map(re.escape, piece.split())) for piece in line.strip().split("...")]
    return re.compile(".*".join(parts))


def check_output(block: Block, expected: Block, output: str) -> None:
    """Each non-empty line of ``expected`` matches a line of ``output``, in order (``...`` in a line matches
    anything; a line that is only ``...`` stands for lines left out, which in-order matching skips anyway)."""
    lines = output.splitlines()
    at = 0
    for wanted in (w for w in expected.text.splitlines() if w.strip() and w.strip() != "..."):
        pattern = _expected_line(wanted)
        while at < len(lines) and not pattern.search(lines[at]):
            at += 1
        if at == len(lines):
            raise _failure(block, f"the output shown at {expected.where} has {wanted.strip()!r}; it did not", output)
        at += 1


@dataclass
class Background:
    block: Block
    process: subprocess.Popen[bytes]
    log: Path


@dataclass
class Terminal:
    """The page's shell: its folder, its environment at the start, its background blocks."""

    folder: Path
    environment: Mapping[str, str]
    state: Path = field(init=False)
    running: list[Background] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.state = self.folder.parent / f"{self.folder.name}.state"
        self.state.mkdir(parents=True, exist_ok=True)
        (self.state / "cwd").write_text(str(self.folder))

    def run(self, block: Block) -> str:
        """Run ``block`` to its end; its output (stdout and stderr, interleaved). Raises BlockFailed."""
        try:
            done = subprocess.run(
                ["bash", "-c", _prelude(self.state) + block.text],
                cwd=self.folder,
                env=dict(self.environment),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=block.timeout,
                start_new_session=True,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            output = (exc.output or b"").decode(errors="replace")
            raise _failure(block, f"did not finish within {block.timeout:.0f} s", output) from None
        output = done.stdout.decode(errors="replace")
        if block.fails and done.returncode == 0:
            raise _failure(block, "the page says this fails; it exited 0", output)
        if not block.fails and done.returncode != 0:
            raise _failure(block, f"exited {done.returncode}", output)
        return output

    def start(self, block: Block, index: int) -> None:
        """Start ``block`` as another terminal would, and wait until its output shows ``ready when``."""
        log = self.state / f"background-{index}.log"
        with log.open("wb") as sink:
            process = subprocess.Popen(
                ["bash", "-c", _prelude(self.state).replace("trap ", ": ") + block.text],
                cwd=self.folder,
                env=dict(self.environment),
                stdout=sink,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.running.append(Background(block, process, log))
        deadline = time.monotonic() + block.timeout
        assert block.ready_when is not None
        while time.monotonic() < deadline:
            output = log.read_text(errors="replace")
            if block.ready_when in output:
                return
            if process.poll() is not None:
                raise _failure(block, f"exited {process.returncode} before printing {block.ready_when!r}", output)
            time.sleep(0.5)
        raise _failure(block, f"did not print {block.ready_when!r} within {block.timeout:.0f} s", log.read_text())

    def stop(self) -> list[str]:
        """Stop every background block (SIGTERM to its process group, as Ctrl-C would end it); the ones that
        would not stop (then killed), as messages."""
        problems: list[str] = []
        for background in reversed(self.running):
            group = background.process.pid
            try:
                os.killpg(group, signal.SIGTERM)
            except ProcessLookupError:
                continue
            deadline = time.monotonic() + STOP_GRACE
            # poll() reaps the block's shell: a zombie still counts as a member of its group.
            while time.monotonic() < deadline and (background.process.poll() is None or _group_alive(group)):
                time.sleep(0.5)
            if _group_alive(group):
                os.killpg(group, signal.SIGKILL)
                problems.append(f"{background.block.where}: did not stop within {STOP_GRACE:.0f} s of SIGTERM")
            background.process.wait(timeout=10)
        self.running.clear()
        return problems


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True
