"""``opbroker sister prepare``: a sister cluster made ready for the master in one idempotent command (what the
multi-cluster page once listed as steps by hand): opbroker's CRDs, the control-plane namespace, the plan account's
rights for the master's plans, namespaces onboarded there — and on the master the kubeconfig Secret the SFCluster
points at. :mod:`opbroker.controller.multicluster.preparation` says what exactly.

Exit codes: 0 done; 1 refused (a kubeconfig that cannot be used, a write refused, a plan that does not render);
2 usage.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
import yaml
from kubernetes.client.exceptions import ApiException
from rich.markup import escape

from opbroker.api.conventions import DEFAULT_NAMESPACE, DEFAULT_PLAN_SERVICE_ACCOUNT
from opbroker.cli.console import err, out
from opbroker.cli.options import ContextOption, KubeconfigOption, kube_for

app = typer.Typer(help="Sister clusters of a multi-cluster master: make one ready.", no_args_is_help=True)


def _fail(message: str) -> NoReturn:
    err.print(f"[red]error:[/red] {escape(message)}")
    raise typer.Exit(1)


def _crds(files: list[Path]) -> list[dict[str, Any]]:
    found = []
    for path in files:
        try:
            documents = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if isinstance(d, dict)]
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            _fail(f"{path}: cannot read YAML: {exc}")
        crds = [d for d in documents if d.get("kind") == "CustomResourceDefinition"]
        if not crds:
            _fail(f"{path}: no CustomResourceDefinition in it")
        found += crds
    return found


@app.command()
def prepare(
    name: Annotated[str, typer.Argument(help="The SFCluster's name (its Secret is NAME-kubeconfig).")],
    sister_kubeconfig: Annotated[
        Path, typer.Option(help="Kubeconfig of the sister, with rights to create CRDs and RBAC there.", dir_okay=False)
    ],
    sister_context: Annotated[str | None, typer.Option(help="Its context (default: its current one).")] = None,
    server: Annotated[
        str | None,
        typer.Option(help="The sister's API server as the master's controller reaches it (default: the kubeconfig's)."),
    ] = None,
    namespace: Annotated[
        str, typer.Option(help="The control-plane namespace (the master's, and the sister's).")
    ] = DEFAULT_NAMESPACE,
    crd: Annotated[
        list[Path] | None,
        typer.Option(help="A file of further CRDs to install there (an operator's the plans render; repeatable)."),
    ] = None,
    onboard: Annotated[
        list[str] | None,
        typer.Option(help="A namespace of the sister to onboard for the plans (created if missing; repeatable)."),
    ] = None,
    account: Annotated[str, typer.Option(help="The plan account to grant there.")] = DEFAULT_PLAN_SERVICE_ACCOUNT,
    parameters: Annotated[str, typer.Option(help="Request parameters (JSON) the plans are rendered with.")] = "{}",
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Prepare a sister cluster and register its kubeconfig on the master (--kubeconfig: the master's); run again,
    it changes nothing. Then apply the SFCluster naming the Secret."""
    from opbroker.controller.multicluster import preparation
    from opbroker.controller.multicluster.core import kubeconfigs
    from opbroker.controller.osb import planaccounts

    try:
        values = json.loads(parameters)
        if not isinstance(values, dict):
            raise ValueError("not a JSON object")
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--parameters") from None
    try:
        loaded = yaml.safe_load(sister_kubeconfig.read_text(encoding="utf-8"))
        data = kubeconfigs.data_only(
            loaded, lambda path: Path(path).expanduser().read_bytes(), context=sister_context, server=server
        )
    except (OSError, yaml.YAMLError, ValueError) as exc:
        _fail(f"{sister_kubeconfig}: {exc}")
    wanted = preparation.Preparation(
        cluster=name,
        namespace=namespace,
        kubeconfig=preparation.kubeconfig_text(data),
        crds=tuple(_crds(crd or [])),
        onboard=tuple(onboard or ()),
        account=account,
        parameters=values,
    )
    from opbroker.controller.running import api_client_for
    from opbroker.controller.runtime.kube import Kube

    sister = Kube(api_client_for(str(sister_kubeconfig), context=sister_context))
    master = kube_for(kubeconfig, context)
    try:
        preparation.prepare(master, sister, wanted, progress=lambda message: out.print(escape(message)))
    except planaccounts.NoPlans as exc:
        _fail(str(exc))
    except ApiException as exc:  # the controller's Refused names the object, the group and the verb
        err.print(f"[red]refused:[/red] {escape(str(exc))}")
        raise typer.Exit(1) from None
    out.print(f"[green]prepared[/green] {escape(name)}; register it with an SFCluster:", highlight=False)
    typer.echo(yaml.safe_dump(wanted.sfcluster(), sort_keys=False), nl=False)
