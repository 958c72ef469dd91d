"""``opbroker dev``: the whole product on this machine, serving OSB or running the scripted demo."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Annotated

import typer

from opbroker.cli.console import err, out
from opbroker.devcluster.binaries import BuildError


def dev(
    demo: Annotated[
        bool, typer.Option("--demo", help="Run provision → bind → unbind → deprovision, then exit.")
    ] = False,
    name: Annotated[str, typer.Option(help="Name of the local control plane.")] = "dev",
    port: Annotated[int, typer.Option(help="Broker port on 127.0.0.1.")] = 8080,
    in_cluster: Annotated[
        bool,
        typer.Option(
            "--in-cluster",
            help="Run the controller and the broker as pods on a local node (needs root), from the locally "
            "built image and exactly the ControlPlane component's objects.",
        ),
    ] = False,
    kubeconfig: Annotated[
        Path | None,
        typer.Option(
            help="Use the cluster you have (kind, k3d, any kubeconfig) instead of building and starting one: "
            "opbroker's CRDs, the demo operator's CRD, the catalog and the demo namespace's onboarding go there, "
            "controller and broker run here; on exit everything it created there is deleted, what it found stays.",
            dir_okay=False,
        ),
    ] = None,
) -> None:
    """Start the control plane (or use --kubeconfig's), CRDs, demo operator, controller, broker and example catalog."""
    from opbroker.devcluster.demo import DemoFailed, run_demo
    from opbroker.devcluster.devstack import DevStack, DevStackError

    stack = DevStack(name, broker_port=port, in_cluster=in_cluster, kubeconfig=kubeconfig)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    failed = False
    try:
        out.rule("[bold]opbroker dev")
        endpoint = stack.up(progress=lambda message: out.print(f"[dim]•[/dim] {message}"))
        out.print(f"[green]ready[/green]: OSB broker at {endpoint.url}  (user {endpoint.username})")
        if demo:
            out.rule("[bold]OSB demo")
            run_demo(endpoint, say=out.print)
            out.print("[green bold]demo complete[/green bold]: provision → bind → unbind → deprovision all succeeded")
            return
        out.print(f"password: {endpoint.password}")
        out.print(f"kubeconfig: {endpoint.kubeconfig}")
        out.print("try:")
        version = "-H 'X-Broker-API-Version: 2.17'"
        out.print(f"  curl -s -u {endpoint.username}:{endpoint.password} {version} {endpoint.url}/v2/catalog")
        out.print("Ctrl-C stops everything.")
        while not stopping.wait(1.0):
            pass
    except KeyboardInterrupt:
        out.print("interrupted")
    except (DevStackError, BuildError, DemoFailed) as exc:
        failed = True
        err.print(f"[red]error:[/red] {exc}")
    finally:
        out.rule("[bold]stopping")
        stack.down(progress=lambda message: out.print(f"[dim]•[/dim] {message}"))
    if failed:
        raise typer.Exit(1)
