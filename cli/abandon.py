"""``opbroker instance abandon``, ``opbroker binding abandon``: a way out of a teardown that cannot finish (issue 43).

For an SFServiceInstance (or SFServiceBinding) being deleted whose deprovision (unbind) never completes: show what
will become of each object its status records (deleted, orphaned, or left alone when it is not opbroker's), ask, then
let go of them without waiting, record why (the ``opbroker.io/abandoned-reason`` annotation and a Warning Event
``Abandoned``) and remove opbroker's finalizer. The decisions are :mod:`opbroker.controller.osb.core.abandon`'s, the I/O
:mod:`opbroker.controller.osb.abandoning`'s; this module parses, prints and asks.

Exit codes: 0 done; 1 refused (not being deleted, bindings left, no confirmation, a write refused); 2 usage.
No Secret value is ever read into the output: Secrets are named, and read by their metadata alone.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from opbroker.api.conventions import DEFAULT_NAMESPACE, FINALIZER
from opbroker.cli.console import err, out
from opbroker.cli.options import ContextOption, KubeconfigOption, kube_for

if TYPE_CHECKING:
    from opbroker.controller.osb.abandoning import Outcome
    from opbroker.controller.osb.core.abandon import AbandonPlan

instance_app = typer.Typer(help="Day-two operations on SFServiceInstances.", no_args_is_help=True)
binding_app = typer.Typer(help="Day-two operations on SFServiceBindings.", no_args_is_help=True)

NamespaceOption = Annotated[
    str | None,
    typer.Option("--namespace", "-n", help="The object's namespace (default: the context's, else 'default')."),
]
ReasonOption = Annotated[
    str, typer.Option(help="Why (required): recorded on the object and in the Abandoned event.", show_default=False)
]
YesOption = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask: go on after showing what will be done.")]
RegistryNamespaceOption = Annotated[
    str, typer.Option(help="Where the controller keeps registries (its --registry-namespace).")
]


@instance_app.command("abandon")
def abandon_instance(
    name: Annotated[str, typer.Argument(help="The SFServiceInstance (its name).")],
    reason: ReasonOption,
    namespace: NamespaceOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    with_bindings: Annotated[
        bool, typer.Option(help="Abandon its bindings too, each first (a binding not being deleted is deleted).")
    ] = False,
    yes: YesOption = False,
    registry_namespace: RegistryNamespaceOption = DEFAULT_NAMESPACE,
) -> None:
    """Let go of an instance whose deprovision cannot finish: its recorded objects deleted or orphaned per their
    recorded deletionPolicy (never what is not opbroker's), without waiting; then opbroker's finalizer removed."""
    from opbroker.controller.osb import abandoning

    why = _reason(reason)
    kube = kube_for(kubeconfig, context)
    where = namespace or _default_namespace(kubeconfig, context)
    _run(
        kube,
        lambda: abandoning.read_instance(kube, where, name, with_bindings=with_bindings),
        reason=why,
        yes=yes,
        registry_namespace=registry_namespace,
    )


@binding_app.command("abandon")
def abandon_binding(
    name: Annotated[str, typer.Argument(help="The SFServiceBinding (its name).")],
    reason: ReasonOption,
    namespace: NamespaceOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    yes: YesOption = False,
    registry_namespace: RegistryNamespaceOption = DEFAULT_NAMESPACE,
) -> None:
    """Let go of a binding whose unbind cannot finish: its recorded objects and its credentials Secret deleted or
    orphaned per their recorded deletionPolicy (never what is not opbroker's), without waiting; then opbroker's
    finalizer removed."""
    from opbroker.controller.osb import abandoning

    why = _reason(reason)
    kube = kube_for(kubeconfig, context)
    where = namespace or _default_namespace(kubeconfig, context)
    _run(
        kube,
        lambda: abandoning.read_binding(kube, where, name),
        reason=why,
        yes=yes,
        registry_namespace=registry_namespace,
    )


def _reason(reason: str) -> str:
    text = " ".join(reason.split())
    if not text:
        raise typer.BadParameter(
            "say why: the reason is recorded on the object and in its event", param_hint="--reason"
        )
    return text


def _default_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The kubeconfig context's namespace, as kubectl takes it; ``default`` when it names none (or in a pod)."""
    from kubernetes import config

    try:
        contexts, current = config.list_kube_config_contexts(config_file=kubeconfig)
    except (config.ConfigException, OSError, TypeError):
        return "default"
    chosen = next((c for c in contexts or [] if c.get("name") == context), None) if context else current
    found = ((chosen or {}).get("context") or {}).get("namespace")
    return found if isinstance(found, str) and found else "default"


def _run(kube: Any, read: Callable[[], AbandonPlan], *, reason: str, yes: bool, registry_namespace: str) -> None:
    from opbroker.controller.osb import abandoning

    plan: AbandonPlan = read()
    if plan.refusal is not None:
        err.print(f"[red]refused:[/red] {escape(plan.refusal)}")
        raise typer.Exit(1)
    _preview(plan, registry_namespace)
    if not yes:
        if not sys.stdin.isatty():
            err.print("[red]refused:[/red] no terminal to confirm on: pass --yes to abandon without asking")
            raise typer.Exit(1)
        if not typer.confirm(f"Abandon {len(plan.all)} object(s) as shown?", default=False):
            err.print("nothing done")
            raise typer.Exit(1)
    by = abandoning.who_am_i(kube)
    try:
        done = abandoning.perform(
            kube, plan, reason=reason, by=by, registry_namespace=registry_namespace, report=_reported
        )
    except abandoning.Stopped as exc:
        err.print(f"[red]stopped:[/red] {escape(str(exc))}; opbroker's finalizer is still on that object")
        raise typer.Exit(1) from None
    _summary(done)


def _preview(plan: AbandonPlan, registry_namespace: str) -> None:
    from opbroker.controller.osb.core.abandon import WORDS

    for target in plan.all:
        out.print(f"[bold]{escape(target.named)}[/bold]")
        if target.delete_first:
            out.print("  deleted first (it is not being deleted yet)")
        for step in target.objects:
            policy = step.policy.value
            out.print(f"  {escape(step.named)} (recorded: {policy}): {escape(WORDS[step.fate][0])}")
        out.print(f"  its registry in {escape(registry_namespace)} (if any): delete")
        others = [f for f in target.meta.finalizers if f != FINALIZER]
        kept = f"; kept: {', '.join(others)}" if others else ""
        out.print(f"  finalizer {FINALIZER}: remove{escape(kept)} — nothing waits for the deletions")


def _reported(outcome: Outcome) -> None:
    from opbroker.controller.osb.core.abandon import WORDS

    target = outcome.target
    out.print(f"abandoned {escape(target.named)}: finalizer {escape(outcome.finalizer)}")
    for step in outcome.objects:
        out.print(f"  {escape(WORDS[step.fate][1])}: {escape(step.named)}")


def _summary(done: list[Outcome]) -> None:
    from opbroker.controller.osb.core.abandon import Fate

    steps = [step for outcome in done for step in outcome.objects]
    count = {fate: sum(1 for s in steps if s.fate is fate) for fate in Fate}
    out.print(
        f"done: {len(done)} abandoned; objects deleted {count[Fate.DELETE]}, released (shared) {count[Fate.UNOWN]}, "
        f"orphaned {count[Fate.ORPHAN] + count[Fate.ORPHANED]}, left (not ours) {count[Fate.LEAVE]}, already "
        f"going or gone {count[Fate.DELETING] + count[Fate.GONE]}"
    )
