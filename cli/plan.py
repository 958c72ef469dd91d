"""``opbroker plan``: roll a plan change out to the instances that already exist.

* ``opbroker plan diff NEW_PLAN.yaml`` previews it: for each instance of the plan, the ``provision``
  objects rendered with the plan in the cluster and with NEW_PLAN.yaml, as a unified diff, then a summary.
  Nothing is written. Exit 0: every instance renders with the new plan; exit 1: at least one does not (or
  the preview could not run — the reason is on stderr).
* ``opbroker plan update-instances PLAN`` is the admin API of the mass update: it marks the plan's
  instances for re-render (``status.state: update``, as an OSB update does), page by page and paced, for
  plans without ``autoUpdateInstances``. Exit 0 when done; 1 if the plan is unknown or (with ``--wait``) an
  instance did not settle in time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from opbroker.api.conventions import DEFAULT_NAMESPACE
from opbroker.cli import render as render_cli
from opbroker.cli.console import err, out
from opbroker.cli.options import KubeconfigOption, kube_for

app = typer.Typer(help="Preview and roll out plan changes to existing instances.", no_args_is_help=True)

NamespaceOption = Annotated[str, typer.Option(help="Control-plane namespace: the catalog and the SFClusters.")]
InstanceNamespaceOption = Annotated[
    str | None, typer.Option(help="Only the instances of this namespace (default: every namespace).")
]


@app.command()
def diff(
    new_plan: Annotated[Path, typer.Argument(help="The changed SFPlan (may carry its SFService too).")],
    kubeconfig: KubeconfigOption = None,
    namespace: NamespaceOption = DEFAULT_NAMESPACE,
    instance_namespace: InstanceNamespaceOption = None,
    registry_namespace: Annotated[
        str | None,
        typer.Option(help="Where the controller keeps registries (its --registry-namespace; default: --namespace)."),
    ] = None,
    context: Annotated[int, typer.Option(help="Lines of context around each change.", min=0)] = 3,
    show_unchanged: Annotated[bool, typer.Option(help="Also list the instances that do not change.")] = False,
) -> None:
    """Show, per instance, how the objects of the plan's instances would change with NEW_PLAN (writes nothing)."""
    from opbroker.controller import rollouts
    from opbroker.rendering import Renderer

    try:
        proposed, proposed_service = render_cli._plan_and_service(new_plan)
    except render_cli._InputError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(1) from None
    kube = kube_for(kubeconfig)
    plan_id = proposed.spec.id
    current = rollouts.find_plan(kube, namespace, plan_id)
    if current is None:
        err.print(f"[red]error:[/red] plan {plan_id!r} is not in namespace {namespace!r}: nothing to compare with")
        raise typer.Exit(1)
    diffs = []
    for found in rollouts.previews(
        kube,
        Renderer(),
        namespace=namespace,
        registry_namespace=registry_namespace or namespace,
        current_body=current.wire,
        proposed=proposed,
        proposed_service=proposed_service,
        instance_namespace=instance_namespace,
        acting=None,  # the CLI's user reads with its own rights
        context=context,
    ):
        diffs.append(found)
        where = f"{found.namespace}/{found.name}"
        if found.change is rollouts.Change.CHANGED:
            out.print(f"[yellow]~ {where}[/yellow]")
            out.print(escape(found.diff), end="")
        elif found.change is rollouts.Change.FAILING:
            out.print(f"[red]! {where}: fails to render with the new plan: {escape(found.error or '')}[/red]")
        elif show_unchanged:
            out.print(f"= {where}")
        if found.note:
            out.print(f"  [dim]note: {escape(found.note)}[/dim]")
    summary = rollouts.summarize(diffs)
    out.print(f"plan {proposed.spec.name!r} ({plan_id}): {summary}")
    raise typer.Exit(1 if summary.failing else 0)


@app.command("update-instances")
def update_instances(
    plan: Annotated[str, typer.Argument(help="The plan: its SFPlan name, OSB id or OSB name.")],
    kubeconfig: KubeconfigOption = None,
    namespace: NamespaceOption = DEFAULT_NAMESPACE,
    instance_namespace: InstanceNamespaceOption = None,
    batch_size: Annotated[int, typer.Option(help="Instances read (and at most marked) per page.", min=1)] = 50,
    rate: Annotated[float, typer.Option(help="Instances marked per second, at most.", min=0.01)] = 5.0,
    only_outdated: Annotated[
        bool, typer.Option(help="Skip instances already rendered from the plan's current spec.")
    ] = False,
    wait: Annotated[
        float | None, typer.Option(help="Seconds to wait for each page's instances to finish before the next.")
    ] = None,
    dry_run: Annotated[bool, typer.Option(help="List what would be marked; write nothing.")] = False,
) -> None:
    """Mark every instance of PLAN for re-render with the plan's current templates (the mass update)."""
    from opbroker.controller import rollouts
    from opbroker.controller.catalog import spec_hash

    kube = kube_for(kubeconfig)
    found = rollouts.find_plan(kube, namespace, plan)
    if found is None:
        err.print(f"[red]error:[/red] no plan {plan!r} in namespace {namespace!r}")
        raise typer.Exit(1)
    result = rollouts.update_instances(
        kube,
        plan_id=found.plan_id,
        plan_hash=spec_hash(dict(found.spec)),
        namespace=instance_namespace,
        batch_size=batch_size,
        pacer=rollouts.Pacer(rate),
        only_outdated=only_outdated,
        dry_run=dry_run,
        wait=wait,
        report=lambda line: out.print(escape(line)),
    )
    skipped = ", ".join(f"{count} {reason.value}" for reason, count in sorted(result.skipped.items()))
    verb = "would mark" if dry_run else "marked"
    out.print(
        f"plan {found.osb_name!r}: {verb} {len(result.marked)} instance(s) for update in {result.pages} page(s)"
        + (f"; skipped {skipped}" if skipped else "")
    )
    if result.unsettled:
        names = ", ".join(f"{ns}/{name}" for ns, name in result.unsettled)
        err.print(f"[red]error:[/red] still busy after {wait:.0f}s: {escape(names)}")
        raise typer.Exit(1)
