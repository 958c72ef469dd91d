"""Entry point of the ``opbroker`` command: one Typer app, one sub-module per command group.

Each command's module is imported only when that command runs (:class:`LazyGroup`): ``opbroker controller run``
and ``opbroker broker run`` start often (every pod, every test stack, every bench run), and importing every
group's module — the local cluster's PKI and builders, the broker's web stack — cost about 0.6 s of CPU at each
start for code the process never uses. ``--help`` still lists every command (it imports them all, once).

Help is never cut: piped (into ``grep``, ``less``, a file, a test), it is laid out :data:`PIPED_HELP_WIDTH` wide, where
Typer's help would otherwise take 80 columns and cut long option names (``--allowed-namesp…``).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping

import typer
import typer._click as click  # Typer 0.29 vendors click: its groups take and give its own click's types
import typer.core
import typer.main

COMMANDS: Mapping[str, str] = {
    "validate": "opbroker.cli.manifests:validate",
    "crds": "opbroker.cli.manifests:crds",
    "manifests": "opbroker.cli.install:manifests",
    "cluster": "opbroker.cli.cluster:app",
    "gorender": "opbroker.cli.gorender:app",
    "broker": "opbroker.cli.broker:app",
    "render": "opbroker.cli.render:render",
    "controller": "opbroker.cli.controller:app",
    "plan": "opbroker.cli.plan:app",
    "dev": "opbroker.cli.dev:app",
    "import": "opbroker.cli.importer:app",
    "namespace": "opbroker.cli.namespaces:app",
    "grant": "opbroker.cli.grant:app",
    "sister": "opbroker.cli.sister:app",
    "instance": "opbroker.cli.abandon:instance_app",
    "binding": "opbroker.cli.abandon:binding_app",
    "provider": "opbroker.cli.provider:app",
}
"""Each command's name → ``module:attribute``: a Typer group, or a function that is one command."""


def load_command(name: str, target: str) -> click.Command:
    """The click command behind ``target``, its module imported now."""
    module_name, attribute = target.split(":")
    loaded = getattr(importlib.import_module(module_name), attribute)
    if isinstance(loaded, typer.Typer):
        group = typer.main.get_group(loaded)
        group.name = name
        return group
    single = typer.Typer()
    single.command(name)(loaded)
    return typer.main.get_command(single)


class LazyGroup(typer.core.TyperGroup):
    """The top-level group: knows its commands by name, imports one when it is asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        if cmd_name not in self.commands:
            self.commands[cmd_name] = load_command(cmd_name, target)
        return self.commands[cmd_name]


PIPED_HELP_WIDTH = 160
"""Columns of help and usage errors written to anything but a terminal (a terminal's own width is used there).
Wide enough for every option of every command whole (``tests/repository/test_cli_help.py`` checks each)."""


def full_width_when_piped() -> None:
    """Lay Typer's help out :data:`PIPED_HELP_WIDTH` wide when stdout is not a terminal (and the user set no width:
    ``TERMINAL_WIDTH`` or ``COLUMNS``). Typer reads ``TERMINAL_WIDTH`` when its help module is first imported (only
    when help or a usage error is printed: importing it at every start would cost each command's start 80 ms)."""
    if sys.stdout.isatty() or os.environ.get("TERMINAL_WIDTH") or os.environ.get("COLUMNS"):
        return
    loaded = sys.modules.get("typer.rich_utils")
    if loaded is not None:
        setattr(loaded, "MAX_WIDTH", PIPED_HELP_WIDTH)  # noqa: B010 (a module global Typer reads at each help)
    else:
        os.environ["TERMINAL_WIDTH"] = str(PIPED_HELP_WIDTH)


full_width_when_piped()

app = typer.Typer(
    name="opbroker",
    cls=LazyGroup,
    help="Expose Kubernetes operators as managed services (OSB broker, controller, Pulumi components).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def installed_version() -> str:
    """The installed distribution's version (what ``pip install opbroker`` put there), as its metadata says."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("opbroker")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _print_version(asked: bool) -> None:
    if asked:
        typer.echo(f"opbroker {installed_version()}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(
        False, "--version", help="Print the installed version and exit.", callback=_print_version, is_eager=True
    ),
) -> None:
    """Expose Kubernetes operators as managed services (OSB broker, controller, Pulumi components)."""


if __name__ == "__main__":
    app()
