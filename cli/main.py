"""Entry point of the ``opbroker`` command: one Typer app, one sub-module per command group."""

from __future__ import annotations

import typer

from opbroker.cli import broker, cluster, controller, dev, gorender, importer, manifests, plan, render

app = typer.Typer(
    name="opbroker",
    help="Expose Kubernetes operators as managed services (OSB broker, controller, Pulumi components).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.command("validate")(manifests.validate)
app.command("crds")(manifests.crds)
app.add_typer(cluster.app, name="cluster")
app.add_typer(gorender.app, name="gorender")
app.add_typer(broker.app, name="broker")
app.command("render")(render.render)
app.add_typer(controller.app, name="controller")
app.add_typer(plan.app, name="plan")
app.command("dev")(dev.dev)
app.add_typer(importer.app, name="import")


if __name__ == "__main__":
    app()
