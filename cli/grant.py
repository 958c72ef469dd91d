"""``opbroker grant plan-account``: the rights a plan account needs, computed from what its plans render, printed
as the RBAC objects the platform applies (or applied with ``--apply``) — what the ControlPlane component's
``controller.operator_rules``/``cluster_operator_rules`` grant under Pulumi, without Python.

Plans come from files (SFPlan documents; an SFService beside them is used as ``service``) or, without files, from
the cluster: every SFPlan of ``--namespace`` that acts as ``--account``. Each is rendered for a new instance and
binding (:mod:`opbroker.rendering.samples`); the rights follow (:mod:`opbroker.api.planrights`).

``--apply`` adds to what the account holds, never removes: the live ClusterRoles' rules are kept beside the new
ones (other plans' rights stay), so it can be run once per plan. Exit codes: 0 done; 1 a plan does not render, a
file cannot be read, the cluster refused; 2 usage.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError
from rich.markup import escape

from opbroker.api.catalog import SFPlan, SFService
from opbroker.api.conventions import DEFAULT_NAMESPACE, DEFAULT_PLAN_SERVICE_ACCOUNT
from opbroker.api.errors import field_errors
from opbroker.api.planrights import account_manifests, well_known
from opbroker.cli.console import err, out
from opbroker.cli.options import ContextOption, KubeconfigOption, kube_for

app = typer.Typer(help="What the platform grants opbroker's accounts, as RBAC objects (printed or applied).")

#: The field manager of what ``--apply`` writes.
FIELD_MANAGER = "opbroker-grant"


class _Refused(Exception):
    """Something the user must fix; the message says what."""


def _plans_in_files(files: list[Path]) -> list[tuple[SFPlan, Mapping[str, Any] | None]]:
    found: list[tuple[SFPlan, Mapping[str, Any] | None]] = []
    for path in files:
        try:
            documents = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if isinstance(d, dict)]
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise _Refused(f"{path}: cannot read YAML: {exc}") from None
        services = {str((d.get("spec") or {}).get("id")): d for d in documents if d.get("kind") == SFService.KIND}
        for document in (d for d in documents if d.get("kind") == SFPlan.KIND):
            try:
                plan = SFPlan.model_validate(document)
            except ValidationError as exc:
                raise _Refused(f"{path}: an SFPlan is not valid: {'; '.join(field_errors(exc))}") from None
            found.append((plan, services.get(plan.spec.service_id)))
        if not any(d.get("kind") == SFPlan.KIND for d in documents):
            raise _Refused(f"{path}: no SFPlan document in it")
    return found


@app.command("plan-account")
def plan_account(
    plans: Annotated[
        list[Path] | None,
        typer.Argument(
            metavar="[PLAN.yaml]...",
            help="Files with SFPlans (and their SFService). None: the SFPlans in --namespace acting as --account.",
            show_default=False,
        ),
    ] = None,
    namespace: Annotated[str, typer.Option(help="The control-plane namespace (the account's).")] = DEFAULT_NAMESPACE,
    account: Annotated[
        str, typer.Option(help="The plan account (an SFPlan's serviceAccountName; default opbroker-plans).")
    ] = DEFAULT_PLAN_SERVICE_ACCOUNT,
    parameters: Annotated[
        str, typer.Option(help="Request parameters (JSON) the sample instance is rendered with.")
    ] = "{}",
    apply: Annotated[
        bool,
        typer.Option("--apply", help="Apply to the cluster, keeping the rules the account's roles already hold."),
    ] = False,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Print (or --apply) the RBAC objects that let a plan account write what its plans render: its ClusterRole,
    bound by a RoleBinding in the control-plane namespace (onboarded namespaces bind it too), and for
    cluster-scoped kinds a second ClusterRole bound cluster-wide, with what a rendered role grants itself."""
    try:
        values = json.loads(parameters)
        if not isinstance(values, dict):
            raise ValueError("not a JSON object")
    except ValueError as exc:
        raise typer.BadParameter(f"{exc}", param_hint="--parameters") from None
    from opbroker.controller.osb import planaccounts

    try:
        kube: Any = kube_for(kubeconfig, context) if apply or not plans else None
        if plans:
            chosen = _plans_in_files(plans)
        else:
            chosen = planaccounts.plans_in_cluster(kube, namespace, account, lambda say: err.print(f"! {say}"))
            if not chosen:
                raise _Refused(f"no SFPlan in the namespace {namespace} acts as {account}")
        resolve = planaccounts.discovering(kube) if kube is not None else well_known
        needed = planaccounts.rights_of(chosen, namespace, values, resolve)
        for guessed in needed.guesses:
            err.print(
                f"[yellow]![/yellow] {escape(guessed)}: check it, or give --apply/--kubeconfig a cluster serving it"
            )
        if not apply:
            names = ", ".join(p.metadata.name or "?" for p, _ in chosen)
            typer.echo(f"# the plan account {namespace}/{account}, for: {names}")
            typer.echo("# kubectl apply replaces these roles' rules; --apply keeps what they hold already")
            typer.echo(yaml.safe_dump_all(account_manifests(namespace, account, needed), sort_keys=False), nl=False)
            return
        for ref in planaccounts.grant(kube, namespace, account, needed, field_manager=FIELD_MANAGER):
            out.print(f"applied {ref.kind} {(ref.namespace + '/') if ref.namespace else ''}{ref.name}")
    except (_Refused, planaccounts.NoPlans) as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(1) from None
    except ApiException as exc:  # the controller's Refused among them: it names the object, group and verb
        err.print(f"[red]refused:[/red] {escape(str(exc))}")
        raise typer.Exit(1) from None
