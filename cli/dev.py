"""``opbroker dev``: the whole product on this machine, serving OSB or running the scripted demo; ``opbroker dev
env`` hands another terminal (or a walkthrough) its endpoint."""

from __future__ import annotations

import json
import shlex
import signal
import threading
from pathlib import Path
from typing import Annotated

import typer

from opbroker.cli.console import err, out
from opbroker.controller.multicluster.core.scheduling import SchedulerName
from opbroker.devcluster.binaries import BuildError

NameOption = Annotated[
    str, typer.Option(help="Name of the local control plane (or OPBROKER_DEV_NAME).", envvar="OPBROKER_DEV_NAME")
]

app = typer.Typer(
    invoke_without_command=True,
    help="Start the control plane (or use --kubeconfig's), CRDs, demo operator, controller, broker with its admin "
    "API and the example catalog; `opbroker dev env` prints their endpoint for a shell.",
)


@app.callback()
def dev(
    ctx: typer.Context,
    demo: Annotated[
        bool, typer.Option("--demo", help="Run provision → bind → unbind → deprovision, then exit.")
    ] = False,
    name: NameOption = "dev",
    port: Annotated[
        int, typer.Option(help="Broker port on 127.0.0.1 (or OPBROKER_DEV_PORT).", envvar="OPBROKER_DEV_PORT")
    ] = 8080,
    allowed_namespace: Annotated[
        list[str] | None,
        typer.Option(
            help="A namespace OSB requests may name in context.namespace besides 'default' (repeatable): the "
            "broker's --allowed-namespace. Onboard it too (`opbroker namespace onboard NS`) for bindings there.",
        ),
    ] = None,
    multicluster: Annotated[
        bool,
        typer.Option(
            "--multicluster",
            help="Run the controller as a multi-cluster master: instances go to registered SFClusters "
            "(docs/multicluster.md; a sister is prepared with `opbroker sister prepare`).",
        ),
    ] = False,
    scheduler: Annotated[
        SchedulerName | None,
        typer.Option(help="Which scheduler places instances (with --multicluster; default the controller's)."),
    ] = None,
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
    if ctx.invoked_subcommand is not None:
        return
    from opbroker.devcluster.demo import DemoFailed, run_demo
    from opbroker.devcluster.devstack import DevStack, DevStackError

    if scheduler is not None and not multicluster:
        raise typer.BadParameter("a scheduler places instances only with --multicluster", param_hint="--scheduler")
    controller_args: tuple[str, ...] = ("--multicluster",) if multicluster else ()
    controller_args += ("--scheduler", scheduler.value) if scheduler is not None else ()
    stack = DevStack(
        name,
        controller_args=controller_args,
        broker_port=port,
        in_cluster=in_cluster,
        kubeconfig=kubeconfig,
        allowed_namespaces=tuple(allowed_namespace or ()),
    )
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
        if endpoint.admin_username:
            out.print(
                f"admin API: {endpoint.url}/admin  (user {endpoint.admin_username}, password {endpoint.admin_password})"
            )
        out.print(f"kubeconfig: {endpoint.kubeconfig}")
        out.print("in another terminal:")
        env = f" --name {shlex.quote(name)}" if name != "dev" else ""
        out.print(f'  eval "$(opbroker dev env{env})"', markup=False)
        out.print(
            '  curl -s -u "$OPBROKER_BROKER_USERNAME:$OPBROKER_BROKER_PASSWORD" '
            '-H "X-Broker-API-Version: 2.17" "$OPBROKER_BROKER_URL/v2/catalog"',
            markup=False,
        )
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


@app.command("env")
def env(name: NameOption = "dev") -> None:
    """Print `export` lines for the running `opbroker dev`: KUBECONFIG, OPBROKER_BROKER_URL/_USERNAME/_PASSWORD and
    OPBROKER_ADMIN_USERNAME/_PASSWORD. Use as: eval "$(opbroker dev env)"."""
    from opbroker.devcluster.devstack import environment_file

    path = environment_file(name)
    try:
        values = json.loads(path.read_text())
    except FileNotFoundError:
        err.print(f"[red]error:[/red] no `opbroker dev --name {name}` is running here (no {path}); start one first")
        raise typer.Exit(1) from None
    for key, value in values.items():
        typer.echo(f"export {key}={shlex.quote(str(value))}")
