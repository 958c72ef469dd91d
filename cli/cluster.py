"""``opbroker cluster``: the local control plane (build, up, down, status)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from opbroker.cli.console import err, out
from opbroker.devcluster import BuildError, ControlPlane, ControlPlaneError, ensure_binaries

app = typer.Typer(help="A real local Kubernetes control plane on 127.0.0.1 (no Docker needed).", no_args_is_help=True)

NameOption = Annotated[str, typer.Option("--name", "-n", help="Which control plane; several can run side by side.")]


def _fail(message: str) -> None:
    err.print(f"[red]error:[/red] {message}")
    raise typer.Exit(1)


@app.command()
def build() -> None:
    """Build kube-apiserver, kube-controller-manager and kubectl once (cached outside the repository)."""
    try:
        binaries = ensure_binaries()
    except BuildError as exc:
        _fail(str(exc))
    out.print(f"binaries ready: {binaries.kube_apiserver.parent}")


@app.command()
def up(
    name: NameOption = "default",
    port: Annotated[int | None, typer.Option(help="kube-apiserver port (default: a free one).")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for readiness.")] = 90.0,
) -> None:
    """Start etcd, kube-apiserver and kube-controller-manager; write a kubeconfig; wait until ready."""
    try:
        status = ControlPlane(name).up(apiserver_port=port, timeout=timeout, progress=out.print)
    except (ControlPlaneError, BuildError) as exc:
        _fail(str(exc))
    out.print(f"export KUBECONFIG={status.kubeconfig}")


@app.command()
def down(name: NameOption = "default") -> None:
    """Stop the processes ``up`` started (by pid) and wipe the cluster's data."""
    ControlPlane(name).down(progress=out.print)


@app.command()
def status(name: NameOption = "default") -> None:
    """Show whether the control plane runs, its server URL, kubeconfig and memory use."""
    current = ControlPlane(name).status()
    table = Table(title=f"control plane {name!r}", show_header=True)
    table.add_column("component")
    table.add_column("pid")
    table.add_column("running")
    table.add_column("RSS MiB", justify="right")
    for component in current.components:
        rss = f"{component.rss_mib:.0f}" if component.rss_mib is not None else "-"
        table.add_row(component.name, str(component.pid or "-"), "yes" if component.running else "no", rss)
    out.print(table)
    out.print(f"server: {current.server or '-'}  ready: {'yes' if current.ready else 'no'}")
    out.print(f"kubeconfig: {current.kubeconfig}")
    if not current.running:
        raise typer.Exit(3)
