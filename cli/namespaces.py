"""``opbroker namespace onboard`` and ``opbroker namespace offboard``: a consumer namespace made ready for opbroker
(or no longer), with the platform's rights, from the same objects the ``NamespaceOnboarding`` component and the
ControlPlane's ``tenant_namespaces`` create (:func:`opbroker.api.controllerinstall.onboarding_objects`).

Exit codes: 0 done; 1 refused (the namespace does not exist, a write refused); 2 usage.
"""

from __future__ import annotations

from typing import Annotated

import typer
from kubernetes.client.exceptions import ApiException

from opbroker.api.conventions import DEFAULT_NAMESPACE, DEFAULT_PLAN_SERVICE_ACCOUNT
from opbroker.cli.console import err, out
from opbroker.cli.options import ContextOption, KubeconfigOption, kube_for

app = typer.Typer(help="Onboard consumer namespaces: what opbroker needs to act there.", no_args_is_help=True)

NameArgument = Annotated[str, typer.Argument(help="The consumer namespace (it must exist).")]
ControlPlaneOption = Annotated[
    str, typer.Option("--control-plane", help="Namespace of the control plane whose plans act there.")
]
PlanAccountOption = Annotated[
    list[str] | None,
    typer.Option(
        "--plan-account",
        help="A plan account of the control plane to bind there (repeatable; default: opbroker-plans).",
        show_default=False,
    ),
]


@app.command("onboard")
def onboard(
    name: NameArgument,
    control_plane: ControlPlaneOption = DEFAULT_NAMESPACE,
    plan_account: PlanAccountOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Create the namespace's opbroker account bound to what opbroker writes there for no plan, and bind the
    control plane's plan accounts there (applied again, it changes nothing)."""
    from opbroker.controller import onboarding

    kube = kube_for(kubeconfig, context)
    wanted = onboarding.Onboarding(name, control_plane, tuple(plan_account or (DEFAULT_PLAN_SERVICE_ACCOUNT,)))
    try:
        onboarding.onboard(kube, wanted, progress=out.print)
    except onboarding.NotOnboardable as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None
    except ApiException as exc:
        err.print(f"[red]refused:[/red] {exc}")
        raise typer.Exit(1) from None
    out.print(f"[green]onboarded[/green] {name} for the control plane in {control_plane}")


@app.command("offboard")
def offboard(
    name: NameArgument,
    control_plane: ControlPlaneOption = DEFAULT_NAMESPACE,
    plan_account: PlanAccountOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Delete what onboard created in the namespace (what opbroker already wrote there stays; later writes are
    refused)."""
    from opbroker.controller import onboarding

    kube = kube_for(kubeconfig, context)
    wanted = onboarding.Onboarding(name, control_plane, tuple(plan_account or (DEFAULT_PLAN_SERVICE_ACCOUNT,)))
    try:
        deleted = onboarding.offboard(kube, wanted, progress=out.print)
    except ApiException as exc:
        err.print(f"[red]refused:[/red] {exc}")
        raise typer.Exit(1) from None
    out.print(f"[green]offboarded[/green] {name}" + ("" if deleted else " (it was not onboarded)"))
