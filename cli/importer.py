"""``opbroker import``: bring another broker's configuration over as opbroker manifests."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
import yaml

from opbroker.cli.console import err
from opbroker.rendering.couchbase_import import convert
from opbroker.rendering.errors import TemplateSourceError

app = typer.Typer(help="Import another broker's configuration as SFService and SFPlan manifests.", no_args_is_help=True)


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the templates' content) as literal blocks, so the output reads like the input."""


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _string)

#: A configuration larger than this is refused before it is parsed (a real one is a few hundred KiB at most).
MAX_CONFIG_BYTES = 8 << 20


@app.command()
def couchbase(
    config: Annotated[
        Path, typer.Argument(help="A Couchbase ServiceBrokerConfig (YAML or JSON).", exists=True, dir_okay=False)
    ],
    namespace: Annotated[
        str | None, typer.Option(help="Namespace for the SFService and SFPlan objects (default: none set).")
    ] = None,
) -> None:
    """Print a Couchbase service broker configuration as SFService and SFPlan manifests (multi-document YAML).

    Each plan's configuration binding becomes its provision and bind templates (``type: couchbase``), with the
    configuration templates unchanged; what cannot be converted is listed on stderr.
    """
    size = config.stat().st_size
    if size > MAX_CONFIG_BYTES:
        err.print(f"[red]✗[/red] {config} is {size} bytes, over the limit of {MAX_CONFIG_BYTES}")
        raise typer.Exit(1)
    try:
        document = yaml.safe_load(config.read_text())
        imported = convert(document, namespace=namespace)
    except (yaml.YAMLError, TemplateSourceError, ValueError) as exc:
        err.print(f"[red]✗[/red] {config}: {exc}")
        raise typer.Exit(1) from None
    for note in imported.notes:
        err.print(f"[yellow]![/yellow] {note}")
    typer.echo(yaml.dump_all(list(imported.manifests), Dumper=_Dumper, sort_keys=False), nl=False)
