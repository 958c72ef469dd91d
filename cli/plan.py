"""``opbroker plan``: roll a plan change out to the instances that already exist.

* ``opbroker plan diff NEW_PLAN.yaml`` previews it: for each instance of the plan, the ``provision``
  objects rendered with the plan in the cluster and with NEW_PLAN.yaml, as a unified diff, then a summary.
  Nothing is written. Exit 0: every instance renders with the new plan; exit 1: at least one does not (or
  the preview could not run — the reason is on stderr). ``--as-plan-account`` reads the templates' live sources
  as the plan's ServiceAccount, as the controller does; ``--output json`` answers in the admin API's preview
  shape (bounded), what the SFPlan component shows under ``pulumi preview``.
* ``opbroker plan update-instances PLAN`` is the admin API of the mass update: it marks the plan's
  instances for re-render (``status.state: update``, as an OSB update does), page by page and paced, for
  plans without ``autoUpdateInstances``. Exit 0 when done; 1 if the plan is unknown or (with ``--wait``) an
  instance did not settle in time.
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.markup import escape

from opbroker.api.conventions import DEFAULT_NAMESPACE
from opbroker.cli import render as render_cli
from opbroker.cli.console import err, out
from opbroker.cli.options import ContextOption, KubeconfigOption, kube_for

app = typer.Typer(help="Preview and roll out plan changes to existing instances.", no_args_is_help=True)

NamespaceOption = Annotated[str, typer.Option(help="Control-plane namespace: the catalog and the SFClusters.")]
InstanceNamespaceOption = Annotated[
    str | None, typer.Option(help="Only the instances of this namespace (default: every namespace).")
]


class Output(StrEnum):
    TEXT = "text"
    JSON = "json"


@app.command()
def diff(
    new_plan: Annotated[Path, typer.Argument(help="The changed SFPlan (may carry its SFService too).")],
    kubeconfig: KubeconfigOption = None,
    kube_context: ContextOption = None,
    namespace: NamespaceOption = DEFAULT_NAMESPACE,
    instance_namespace: InstanceNamespaceOption = None,
    registry_namespace: Annotated[
        str | None,
        typer.Option(help="Where the controller keeps registries (its --registry-namespace; default: --namespace)."),
    ] = None,
    context: Annotated[int, typer.Option(help="Lines of context around each change.", min=0, max=10)] = 3,
    show_unchanged: Annotated[bool, typer.Option(help="Also list the instances that do not change.")] = False,
    as_plan_account: Annotated[
        bool,
        typer.Option(
            help="Read the templates' live sources as the plan's ServiceAccount, as the controller does (your "
            "user must be allowed to impersonate it); default: with your own rights."
        ),
    ] = False,
    output: Annotated[
        Output,
        typer.Option(
            help="text, or json: one answer in the admin API's preview shape (every count; the first --limit "
            "changed or failing instances, each diff cut at 3 KiB; a problem as phase Failed and its message)."
        ),
    ] = Output.TEXT,
    limit: Annotated[
        int, typer.Option(help="--output json: how many changed or failing instances to carry.", min=0, max=100)
    ] = 20,
) -> None:
    """Show, per instance, how the objects of the plan's instances would change with NEW_PLAN (writes nothing)."""
    from opbroker.api import adminrequests as wire

    try:
        proposed, proposed_service = render_cli._plan_and_service(new_plan)
    except render_cli._InputError as exc:
        _fail(output, str(exc))
    if output is Output.JSON:
        try:
            answer = _answer(
                proposed,
                proposed_service,
                kubeconfig=kubeconfig,
                kube_context=kube_context,
                namespace=namespace,
                instance_namespace=instance_namespace,
                registry_namespace=registry_namespace or namespace,
                context=context,
                as_plan_account=as_plan_account,
                limit=limit,
            )
        except PermissionError as exc:
            answer = wire.PreviewAnswer(phase=wire.Phase.FAILED, message=str(exc))
        except Exception as exc:  # the cluster did not answer, or refused: the answer says so, in one line
            answer = wire.PreviewAnswer(phase=wire.Phase.FAILED, message=_one_line(exc))
        print(answer.to_json())
        raise typer.Exit(0 if answer.phase is wire.Phase.SUCCEEDED and not answer.failing else 1)
    _print_diffs(
        proposed,
        proposed_service,
        kubeconfig=kubeconfig,
        kube_context=kube_context,
        namespace=namespace,
        instance_namespace=instance_namespace,
        registry_namespace=registry_namespace or namespace,
        context=context,
        as_plan_account=as_plan_account,
        show_unchanged=show_unchanged,
    )


def _fail(output: Output, message: str) -> NoReturn:
    if output is Output.JSON:
        from opbroker.api import adminrequests as wire

        print(wire.PreviewAnswer(phase=wire.Phase.FAILED, message=message).to_json())
    else:
        err.print(f"[red]error:[/red] {escape(message)}")
    raise typer.Exit(1)


def _one_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:2048]


def _acting(kube: Any, current: Any, namespace: str, as_plan_account: bool) -> str | None:
    """The plan's account when asked for and the user may impersonate it (else PermissionError, saying so)."""
    from opbroker.controller.catalog import rollouts
    from opbroker.controller.osb import identities

    if not as_plan_account:
        return None  # the CLI's user reads with its own rights
    user = identities.plan_account(current.wire, namespace=namespace)
    if not rollouts.may_impersonate(kube, user):
        raise PermissionError(
            f"your user may not impersonate {user}: the preview reads as the plan's account (grant 'impersonate' "
            f"on that ServiceAccount, or preview without --as-plan-account)"
        )
    return user


def _diffs(
    proposed: Any,
    proposed_service: Any,
    *,
    kubeconfig: str | None,
    kube_context: str | None,
    namespace: str,
    instance_namespace: str | None,
    registry_namespace: str,
    context: int,
    as_plan_account: bool,
) -> tuple[Any, str | None, Iterator[Any]]:
    """The plan in the cluster (None: there is none), whom sources are read as, and the per-instance diffs."""
    from opbroker.controller.catalog import rollouts
    from opbroker.rendering import Renderer

    kube = kube_for(kubeconfig, kube_context)
    current = rollouts.find_plan(kube, namespace, proposed.spec.id)
    if current is None:
        return None, None, iter(())
    acting = _acting(kube, current, namespace, as_plan_account)
    found = rollouts.previews(
        kube,
        Renderer(),
        namespace=namespace,
        registry_namespace=registry_namespace,
        current_body=current.wire,
        proposed=proposed,
        proposed_service=proposed_service,
        instance_namespace=instance_namespace,
        acting=acting,
        context=context,
    )
    return current, acting, found


def _answer(proposed: Any, proposed_service: Any, *, limit: int, **where: Any) -> Any:
    """``--output json``: every count, the first ``limit`` changed or failing instances (each diff cut)."""
    from opbroker.api import adminrequests as wire
    from opbroker.controller.catalog import rollouts

    current, acting, found = _diffs(proposed, proposed_service, **where)
    if current is None:
        return wire.PreviewAnswer(
            phase=wire.Phase.SUCCEEDED,
            message=f"plan {proposed.spec.id!r} is not in namespace {where['namespace']!r} yet: no instance to change",
        )
    seen = []
    shown: list[wire.InstancePreview] = []
    for diff in found:
        seen.append(diff)
        if diff.change is rollouts.Change.UNCHANGED or len(shown) >= limit:
            continue
        shown.append(diff.to_wire())
    summary = rollouts.summarize(seen)
    return wire.PreviewAnswer(
        phase=wire.Phase.SUCCEEDED,
        instances=shown,
        changed=summary.changed,
        unchanged=summary.unchanged,
        failing=summary.failing,
        acting_as=acting,
    )


def _print_diffs(proposed: Any, proposed_service: Any, *, show_unchanged: bool, **where: Any) -> None:
    from opbroker.controller.catalog import rollouts

    try:
        current, _, found = _diffs(proposed, proposed_service, **where)
    except PermissionError as exc:
        _fail(Output.TEXT, str(exc))
    plan_id = proposed.spec.id
    if current is None:
        _fail(Output.TEXT, f"plan {plan_id!r} is not in namespace {where['namespace']!r}: nothing to compare with")
    diffs = []
    for found_one in found:
        diffs.append(found_one)
        where_ = f"{found_one.namespace}/{found_one.name}"
        if found_one.change is rollouts.Change.CHANGED:
            out.print(f"[yellow]~ {where_}[/yellow]")
            out.print(escape(found_one.diff), end="")
        elif found_one.change is rollouts.Change.FAILING:
            out.print(f"[red]! {where_}: fails to render with the new plan: {escape(found_one.error or '')}[/red]")
        elif show_unchanged:
            out.print(f"= {where_}")
        if found_one.note:
            out.print(f"  [dim]note: {escape(found_one.note)}[/dim]")
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
    from opbroker.controller.catalog import rollouts
    from opbroker.controller.catalog.catalog import spec_hash

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
