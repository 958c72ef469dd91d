"""``opbroker provider``: where the installed Pulumi plugins are, for a program outside this repository.

A Pulumi program in any language names the opbroker component provider by its folder (``packages: {opbroker:
<folder>}`` in Pulumi.yaml) or installs its executable (``pulumi package add``, ``pulumi plugin install
--file``); the policy pack is an executable too (``pulumi preview --policy-pack``). Installed with pip, they
sit inside the package ``opbroker.provider``, wherever that environment keeps its packages: these commands
print the paths, nothing of the provider is imported (the ``pulumi`` extra is not needed to ask).

``opbroker provider install`` puts the plugin into Pulumi's plugin cache for programs that name it by version
(``opbroker@<version>``, what ``pulumi package add`` writes): the cache holds a copy of one file, away from the
environment, so the copy installed is a launcher naming this interpreter.
"""

from __future__ import annotations

import importlib.util
import shlex
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

import typer

app = typer.Typer(
    help="Where the installed Pulumi plugins (component provider, policy pack) are.", no_args_is_help=True
)

EXECUTABLE = "pulumi-resource-opbroker"
POLICY_PACK = Path("policypack") / "pulumi-analyzer-opbroker"


def provider_folder() -> Path:
    """The folder of the package ``opbroker.provider``: PulumiPlugin.yaml and the executable the engine starts."""
    spec = importlib.util.find_spec("opbroker.provider")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the opbroker.provider package is not installed")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


@app.command()
def path(
    executable: bool = typer.Option(
        False,
        "--executable",
        help=f"The plugin executable ({EXECUTABLE}): for `pulumi package add` and `pulumi plugin install --file`.",
    ),
    policy_pack: bool = typer.Option(
        False, "--policy-pack", help="The policy pack's executable analyzer: for `pulumi preview --policy-pack`."
    ),
) -> None:
    """Print the component provider's plugin folder: what `packages: {opbroker: <it>}` in Pulumi.yaml takes."""
    folder = provider_folder()
    if executable and policy_pack:
        raise typer.BadParameter("--executable and --policy-pack are two different paths: ask for one")
    typer.echo(str(folder / EXECUTABLE if executable else folder / POLICY_PACK if policy_pack else folder))


#: How long ``pulumi plugin install`` may take (it copies one small file).
INSTALL_TIMEOUT = 120


def launcher(python: str) -> str:
    """A plugin executable that runs the provider with ``python``, wherever it is copied."""
    return "\n".join(
        [
            "#!/bin/sh",
            "# The opbroker component provider, written by `opbroker provider install`.",
            f'exec {shlex.quote(python)} -m opbroker.provider "$@"',
            "",
        ]
    )


@app.command()
def install(
    pulumi: str = typer.Option("pulumi", help="The Pulumi CLI to install with (a name on PATH or a path)."),
) -> None:
    """Install the provider into Pulumi's plugin cache as resource plugin opbroker at this version, running with
    this environment's Python: for programs that name it `opbroker@<version>` (`pulumi package add` writes that)."""
    command = shutil.which(pulumi)
    if command is None:
        raise typer.BadParameter(f"no Pulumi CLI at {pulumi!r}", param_hint="--pulumi")
    try:
        version = metadata.version("opbroker")
    except metadata.PackageNotFoundError:
        raise typer.BadParameter("opbroker is not installed as a distribution: no version to install") from None
    with tempfile.TemporaryDirectory(prefix="opbroker-plugin-") as folder:
        executable = Path(folder) / EXECUTABLE
        executable.write_text(launcher(sys.executable))
        executable.chmod(0o755)
        done = subprocess.run(
            [command, "plugin", "install", "resource", "opbroker", version, "--file", str(executable)],
            timeout=INSTALL_TIMEOUT,
            check=False,
        )
    if done.returncode != 0:
        raise typer.Exit(done.returncode)
    typer.echo(f"resource plugin opbroker {version} installed: it runs {sys.executable}")
