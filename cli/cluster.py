"""``opbroker cluster``: the local control plane (build, up, down, status)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from opbroker.cli.console import err, out
from opbroker.devcluster import BuildError, ControlPlane, ControlPlaneError, ensure_binaries
from opbroker.devcluster.binaries import KUBE_VERSION, ensure_node_binaries
from opbroker.devcluster.images import ImageBuildError, opbroker_image

app = typer.Typer(
    help=f"A real local Kubernetes {KUBE_VERSION} cluster on this machine, optionally with a node (no Docker needed).",
    no_args_is_help=True,
)

NameOption = Annotated[str, typer.Option("--name", "-n", help="Which control plane; several can run side by side.")]


def _fail(message: str) -> None:
    err.print(f"[red]error:[/red] {message}")
    raise typer.Exit(1)


NodeOption = Annotated[
    bool,
    typer.Option(
        "--node",
        help="Also run a real node here: containerd, runc, CNI bridge, kubelet, kube-proxy (needs root).",
    ),
]


@app.command()
def build(node: NodeOption = False) -> None:
    """Build etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl from their Go modules
    once (cached outside the repository); with --node also kubelet, kube-proxy and pause."""
    try:
        binaries = ensure_binaries()
        if node:
            ensure_node_binaries()
    except BuildError as exc:
        _fail(str(exc))
    out.print(f"binaries ready: {binaries.kube_apiserver.parent}")


@app.command()
def up(
    name: NameOption = "default",
    port: Annotated[int | None, typer.Option(help="kube-apiserver port (default: a free one).")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for readiness.")] = 120.0,
    node: NodeOption = False,
) -> None:
    """Start etcd, kube-apiserver, kube-controller-manager and kube-scheduler (and the node); write a
    kubeconfig; wait until ready."""
    try:
        status = ControlPlane(name).up(apiserver_port=port, timeout=timeout, node=node, progress=out.print)
    except (ControlPlaneError, BuildError, ImageBuildError) as exc:
        _fail(str(exc))
    out.print(f"export KUBECONFIG={status.kubeconfig}")


@app.command()
def image(
    name: NameOption = "default",
    load: Annotated[bool, typer.Option(help="Import it into the cluster's node.")] = True,
) -> None:
    """Build the opbroker image from Debian's packages and this checkout's wheel (mmdebstrap + umoci, no
    Docker, no registry) and import it into the node's containerd as ``opbroker:<version>``."""
    try:
        archive, image_name = opbroker_image(progress=out.print)
        if load:
            ControlPlane(name).import_image(archive, image_name)
    except (ControlPlaneError, ImageBuildError) as exc:
        _fail(str(exc))
    out.print(f"{image_name}: {archive}" + (f" (imported into {name!r})" if load else ""))


@app.command()
def down(name: NameOption = "default") -> None:
    """Stop the processes ``up`` started (by pid) and wipe the cluster's data."""
    ControlPlane(name).down(progress=out.print)


@app.command()
def kubeconfig(name: NameOption = "default") -> None:
    """Print the path of the control plane's kubeconfig, alone on a line (for a shell:
    ``export KUBECONFIG=$(opbroker cluster kubeconfig -n NAME)``); exit 3 when it is not running."""
    current = ControlPlane(name).status()
    if not current.running:
        err.print(f"[red]error:[/red] control plane {name!r} is not running (opbroker cluster up -n {name})")
        raise typer.Exit(3)
    typer.echo(str(current.kubeconfig))


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
