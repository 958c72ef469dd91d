"""``opbroker manifests``: the ControlPlane component's objects as plain YAML (for ``kubectl apply -f``) or as a
Helm chart, for clusters installed without Pulumi. The objects come from the component itself
(:mod:`opbroker.components.objects`), so every way of installing opbroker installs the same thing."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from opbroker.cli.console import err, out

ARGS_HELP = "the ControlPlane component's args (docs/install-without-pulumi.md lists them)"


class ArgsError(ValueError):
    """An args file or a ``--set`` that cannot be read."""


def parse_set(assignment: str) -> tuple[list[str], Any]:
    """``controller.replicas=3`` → ``(["controller", "replicas"], 3)``; the value is read as YAML (so lists and
    mappings go in flow style: ``tenant_namespaces=[team-a,team-b]``)."""
    path, separator, raw = assignment.partition("=")
    keys = path.strip().split(".")
    if not separator or not all(keys):
        raise ArgsError(f"--set {assignment!r}: expected KEY=VALUE, KEY a dotted path such as broker.replicas")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ArgsError(f"--set {assignment!r}: the value is not YAML: {exc}") from None
    return keys, value


def merge_set(args: dict[str, Any], keys: list[str], value: Any) -> None:
    """Put ``value`` at the dotted path ``keys`` of ``args``, making the mappings on the way."""
    node = args
    for key in keys[:-1]:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ArgsError(f"--set {'.'.join(keys)}: {key} is not a mapping")
        node = child
    node[keys[-1]] = value


def load_args(files: list[Path], assignments: list[str]) -> dict[str, Any]:
    """The args from the files (YAML or JSON mappings, later ones over earlier ones, key by key at the top and
    in ``controller`` and ``broker``), then each ``--set``."""
    args: dict[str, Any] = {}
    for path in files:
        try:
            loaded = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise ArgsError(f"{path}: {exc}") from None
        if not isinstance(loaded, dict):
            raise ArgsError(f"{path}: expected a mapping of ControlPlane args")
        for key, value in loaded.items():
            if key in ("controller", "broker") and isinstance(value, dict) and isinstance(args.get(key), dict):
                args[key] = {**args[key], **value}
            else:
                args[key] = value
    for assignment in assignments:
        merge_set(args, *parse_set(assignment))
    return args


def _version() -> str:
    from opbroker.cli.main import installed_version

    found = installed_version()
    return found if found[:1].isdigit() else "0.0.0"


def manifests(
    image: Annotated[
        str | None, typer.Option(help="The opbroker image controller and broker run (args: image).")
    ] = None,
    namespace: Annotated[
        str | None, typer.Option(help="Namespace of the control plane (args: namespace; default opbroker).")
    ] = None,
    tenant_namespace: Annotated[
        list[str] | None,
        typer.Option(help="A consumer namespace to onboard; repeat for more (args: tenant_namespaces)."),
    ] = None,
    values: Annotated[
        list[Path] | None,
        typer.Option("--values", "-f", help=f"A YAML or JSON file of {ARGS_HELP}; repeatable.", dir_okay=False),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="KEY=VALUE, KEY a dotted path of the args (broker.replicas=3); repeatable."),
    ] = None,
    broker_password_file: Annotated[
        Path | None,
        typer.Option(
            help="A file holding the broker's basic-auth password (or set OPBROKER_BROKER_PASSWORD).",
            dir_okay=False,
            exists=True,
        ),
    ] = None,
    broker_secret: Annotated[
        str | None,
        typer.Option(
            help="A Secret of yours in the namespace (keys username and password) the broker reads its "
            "credentials from; the manifests then hold no password."
        ),
    ] = None,
    helm_chart: Annotated[
        Path | None,
        typer.Option(
            help="Write a Helm chart of these objects into this folder instead of printing them "
            "(image, namespace, replicas and credentials become values; the password is given at install).",
            file_okay=False,
        ),
    ] = None,
) -> None:
    """Print the ControlPlane component's Kubernetes objects as YAML, for `kubectl apply -f` (or write a Helm chart).

    The objects are the component's own (what `pulumi up` of a ControlPlane creates), rendered without a cluster.

    No password is generated: pass --broker-password-file, OPBROKER_BROKER_PASSWORD or --broker-secret.

    See docs/install-without-pulumi.md.
    """
    try:
        args = load_args(values or [], set_ or [])
    except ArgsError as exc:
        err.print(f"[red]✗[/red] {exc}")
        raise typer.Exit(2) from None
    if image is not None:
        args["image"] = image
    if namespace is not None:
        args["namespace"] = namespace
    if tenant_namespace:
        args["tenant_namespaces"] = [*args.get("tenant_namespaces", []), *tenant_namespace]
    if "image" not in args:
        err.print("[red]✗[/red] no image: pass --image (or image in --values/--set)")
        raise typer.Exit(2)

    from opbroker.components.resources import InvalidArgsError

    try:
        if helm_chart is not None:
            _write_chart(helm_chart, args, broker_secret)
            return
        _print_manifests(args, broker_password_file, broker_secret)
    except InvalidArgsError as exc:
        err.print(f"[red]✗[/red] {exc}")
        raise typer.Exit(1) from None


def _print_manifests(args: dict[str, Any], password_file: Path | None, secret: str | None) -> None:
    from opbroker.api.conventions import DEFAULT_NAMESPACE
    from opbroker.components.objects import control_plane_manifests, relabel_managed_by, use_credentials_secret

    broker = dict(args.get("broker") or {})
    given = [
        source
        for source, present in (
            ("--broker-password-file", password_file is not None),
            ("OPBROKER_BROKER_PASSWORD", bool(os.environ.get("OPBROKER_BROKER_PASSWORD"))),
            ("--broker-secret", secret is not None),
            ("broker.password", "password" in broker),
        )
        if present
    ]
    if len(given) != 1:
        which = f"got {', '.join(given)}" if given else "got none"
        err.print(
            "[red]✗[/red] the broker's credentials: give exactly one of --broker-password-file, "
            f"OPBROKER_BROKER_PASSWORD, --broker-secret or broker.password ({which}); none is generated here"
        )
        raise typer.Exit(2)
    if password_file is not None:
        broker["password"] = password_file.read_text().strip()
    elif "OPBROKER_BROKER_PASSWORD" in given:
        broker["password"] = os.environ["OPBROKER_BROKER_PASSWORD"]
    elif secret is not None:
        broker["password"] = "unused: the broker reads --broker-secret"
    if not broker.get("password"):
        err.print("[red]✗[/red] the broker's password is empty")
        raise typer.Exit(2)
    documents = relabel_managed_by(control_plane_manifests({**args, "broker": broker}), "kubectl")
    if secret is not None:
        documents = use_credentials_secret(documents, args.get("namespace", DEFAULT_NAMESPACE), secret)
    typer.echo(yaml.safe_dump_all(documents, sort_keys=False, width=1000), nl=False)


def _write_chart(folder: Path, args: dict[str, Any], secret: str | None) -> None:
    from opbroker.components.helmchart import ChartError, chart_files

    try:
        files = chart_files(args, _version(), secret or "")
    except ChartError as exc:
        err.print(f"[red]✗[/red] {exc}")
        raise typer.Exit(2) from None
    for relative, text in files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    out.print(f"wrote the Helm chart {folder} ({len(files)} files); install: helm install opbroker {folder}")
