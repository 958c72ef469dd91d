"""``opbroker gorender``: the Go template renderer for gotemplate and helm plans (build once, cached)."""

from __future__ import annotations

import typer

from opbroker import gorender
from opbroker.cli.console import err, out
from opbroker.gorender.builds import estimate

app = typer.Typer(
    help="The Go renderer of Service Fabrik's gotemplate and helm templates (built once, cached outside the repo).",
    no_args_is_help=True,
)


@app.command()
def build() -> None:
    """Build the renderer with the installed Go if the cached binary is missing or its sources changed."""
    try:
        installed = gorender.installed_binary()
        if installed is not None:
            out.print(f"renderer installed: {installed}")
            return
        cached = gorender.cached_binary()
        if cached.is_file():
            out.print(f"renderer up to date: {cached}")
            return
        seconds = estimate("gorender").seconds
        out.print(f"building the Go template renderer into {cached.parent} (a cold build takes about {seconds} s)")
        out.print(f"renderer ready: {gorender.build(cached, say=lambda line: typer.echo(f'[gorender] {line}'))}")
    except gorender.BuildError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None


@app.command()
def path() -> None:
    """Print the path of the renderer binary opbroker uses (without building it)."""
    try:
        out.print(str(gorender.renderer_binary(build_if_missing=False)))
    except gorender.BuildError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None
