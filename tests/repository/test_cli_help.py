"""Help is never cut (issue 47): ``opbroker ... --help`` piped (not a terminal) is laid out wide enough for every
option of every command whole; Typer's default, 80 columns, cut ``--allowed-namespace`` to ``--allowed-namesp…``."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.process  # runs the CLI in a fresh interpreter, its stdout a pipe

#: Prints the help of every command and subcommand, each after a ``=== <path>`` line, its stdout the pipe it was
#: given; then each command's option names (``##`` lines), to look for whole in the help.
PROBE = """
import sys
import typer.main
from opbroker.cli.main import COMMANDS, app, load_command

def walk(path, command):
    yield path, command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from walk([*path, name], sub)

for name, target in COMMANDS.items():
    for path, command in walk([name], load_command(name, target)):
        print("=== " + " ".join(path), flush=True)
        try:
            app([*path, "--help"], prog_name="opbroker")
        except SystemExit:
            pass
        sys.stdout.flush()
        for param in command.params:
            for option in param.opts:
                if option.startswith("--"):
                    print("## " + " ".join(path) + " " + option, flush=True)
"""


def _run(*args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("TERMINAL_WIDTH", "COLUMNS")}
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120, check=True, env=env)
    return done.stdout


def test_piped_help_keeps_a_long_option_whole() -> None:
    text = _run("-m", "opbroker.cli.main", "controller", "run", "--help")
    for option in ("--catalog-namespace", "--registry-namespace", "--namespace-operations"):
        assert f"{option} " in text, text
    assert "…" not in text, text


def test_every_commands_piped_help_is_whole() -> None:
    out = _run("-c", PROBE)
    helps: dict[str, list[str]] = {}
    options: list[tuple[str, str]] = []
    current = ""
    for line in out.splitlines():
        if line.startswith("=== "):
            current = line[4:]
            helps[current] = []
        elif line.startswith("## "):
            path, _, option = line[3:].rpartition(" ")
            options.append((path, option))
        else:
            helps[current].append(line)
    assert len(helps) > 20 and "controller run" in helps and "dev" in helps, sorted(helps)
    cut = {path: [line for line in lines if "…" in line] for path, lines in helps.items()}
    assert not {path: lines for path, lines in cut.items() if lines}, cut
    missing = [(path, option) for path, option in options if not any(option in line for line in helps[path])]
    assert not missing, missing
