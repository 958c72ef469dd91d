"""``opbroker controller run``: the controller process."""

from __future__ import annotations

from typing import Annotated

import typer

from opbroker.api.conventions import DEFAULT_NAMESPACE
from opbroker.controller.settings import ControllerSettings

app = typer.Typer(
    help="The controller: reconciles instances and bindings into operator resources.", no_args_is_help=True
)


@app.command()
def run(
    kubeconfig: Annotated[
        str | None, typer.Option(help="Kubeconfig file (default: in-cluster, then ~/.kube/config).")
    ] = None,
    namespace: Annotated[
        str, typer.Option(help="Control-plane namespace (catalog, leader lease).")
    ] = DEFAULT_NAMESPACE,
    workers: Annotated[int, typer.Option(help="Concurrent reconciles.")] = 4,
    error_threshold: Annotated[int, typer.Option(help="Consecutive errors before an operation is failed.")] = 8,
    poll_seconds: Annotated[float, typer.Option(help="Re-check interval for in-progress operations.")] = 10.0,
    leader_election: Annotated[bool, typer.Option(help="Campaign for a Lease (active-passive replicas).")] = True,
    metrics_port: Annotated[int | None, typer.Option(help="Serve Prometheus metrics on this port.")] = None,
    lease_seconds: Annotated[
        int, typer.Option(help="Leader lease duration in seconds (the longest failover).", min=3)
    ] = 15,
) -> None:
    """Run the controller until interrupted."""
    from opbroker.controller.running import run as run_controller

    settings = ControllerSettings(
        namespace=namespace,
        workers=workers,
        error_threshold=error_threshold,
        status_poll_seconds=poll_seconds,
        leader_election=leader_election,
        metrics_port=metrics_port,
        lease_seconds=lease_seconds,
    )
    run_controller(settings, kubeconfig=kubeconfig)
