"""``opbroker provider``: where the installed Pulumi plugins are, for a program outside this repository.

A Pulumi program in any language names the opbroker component provider by its folder (``packages: {opbroker:
<folder>}`` in Pulumi.yaml) or installs its executable (``pulumi package add``, ``pulumi plugin install
--file``); the policy pack is an executable too (``pulumi preview --policy-pack``). Installed with pip, they
sit inside the package ``opbroker.provider``, wherever that environment keeps its packages: these commands
print the paths, nothing of the provider is imported (the ``pulumi`` extra is not needed to ask).
"""

from __future__ import annotations

import importlib.util
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
