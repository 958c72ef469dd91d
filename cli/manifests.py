"""``opbroker validate`` and ``opbroker crds``: the resource model from the command line."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from opbroker.api.catalog import SFPlan
from opbroker.api.crd import all_crds, crd_file_name, to_yaml
from opbroker.api.errors import ManifestError
from opbroker.api.manifests import check_file
from opbroker.cli.console import err, out
from opbroker.rendering import Renderer
from opbroker.rendering.checking import check_plan


def validate(
    files: Annotated[
        list[Path], typer.Argument(help="Manifest files (multi-document YAML).", exists=True, dir_okay=False)
    ],
    templates: Annotated[
        bool,
        typer.Option(
            "--templates/--no-templates",
            help="Also render each SFPlan's templates offline (as `pulumi preview` does); template errors fail.",
        ),
    ] = False,
) -> None:
    """Check manifests against the opbroker models; exit 1 naming the file, document and field at fault.

    Documents of kinds opbroker does not own (a Secret, say) are reported as skipped.
    """
    failures = 0
    renderer = Renderer()  # one for every plan: gotemplate and helm plans share one Go renderer process
    for path in files:
        try:
            checked = check_file(path)
        except ManifestError as exc:
            failures += 1
            err.print(f"[red]✗[/red] {exc}")
            continue
        for item in checked:
            where = f"{path}: document {item.document}"
            if not item.ok:
                failures += 1
                err.print(f"[red]✗[/red] {item.error()}")
            elif item.skipped_reason:
                out.print(f"[yellow]-[/yellow] {where} skipped ({item.skipped_reason})")
            else:
                name = item.resource.metadata.name if item.resource else ""
                out.print(f"[green]✓[/green] {where} {item.kind} {name}")
                if templates and isinstance(item.resource, SFPlan):
                    verdict = check_plan(item.resource, renderer)
                    for finding in verdict.errors:
                        failures += 1
                        err.print(f"[red]✗[/red] {where} {item.kind} {name}: spec.{finding}")
                    for finding in verdict.warnings:
                        out.print(f"[yellow]![/yellow] {where} {item.kind} {name}: spec.{finding}")
    if failures:
        err.print(f"{failures} document(s) failed validation")
        raise typer.Exit(1)


def crds(
    write: Annotated[
        Path | None, typer.Option(help="Write one file per CRD into this folder instead of printing.")
    ] = None,
) -> None:
    """Print the CustomResourceDefinitions generated from the models (apiextensions.k8s.io/v1)."""
    documents = all_crds()
    if write is None:
        typer.echo(to_yaml(documents), nl=False)
        return
    write.mkdir(parents=True, exist_ok=True)
    for crd in documents:
        (write / crd_file_name(crd)).write_text(to_yaml([crd]))
    out.print(f"wrote {len(documents)} CRDs to {write}")
