"""``opbroker render``: the offline dry run of a plan's templates, for plan authors before a rollout.

It renders exactly as the controller does (same :class:`opbroker.rendering.Renderer`) from files instead of a
cluster. The live objects the templates read come from ``--sources DIR``: one YAML file per entry of the plan's
``sources`` template, named after the entry (``DIR/postgresql.yaml`` for the entry ``postgresql``); an entry
without a file is treated as not existing yet. ``--registry FILE`` is the instance registry (a YAML/JSON map
of key to value); without it, generated passwords differ on every run, and ``--save-registry`` writes the
updated registry back so the next run renders the same secrets.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from pydantic import ValidationError
from rich.markup import escape

from opbroker.api.catalog import SFPlan, SFService, TemplateAction
from opbroker.api.errors import field_errors
from opbroker.api.meta import ResourceRef
from opbroker.cli.console import err, out
from opbroker.rendering import Renderer, RenderError, RenderInputs, StatusResult

_SINGLETON = "# singleton: shared by all instances of the plan (tolerates 'already exists')\n"


class _InputError(Exception):
    """A file the command was given cannot be used; the message names it."""


def _documents(path: Path) -> list[Any]:
    try:
        return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc is not None]
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise _InputError(f"{path}: cannot read YAML: {exc}") from None


def _object(path: Path) -> dict[str, Any]:
    documents = _documents(path)
    if len(documents) != 1 or not isinstance(documents[0], dict):
        raise _InputError(f"{path}: expected exactly one YAML mapping (a Kubernetes object)")
    return documents[0]


def _plan_and_service(path: Path) -> tuple[SFPlan, dict[str, Any] | None]:
    """The one SFPlan in the file, and an SFService if the file carries one too."""
    plans = [d for d in _documents(path) if isinstance(d, dict) and d.get("kind") == SFPlan.KIND]
    services = [d for d in _documents(path) if isinstance(d, dict) and d.get("kind") == SFService.KIND]
    if len(plans) != 1:
        raise _InputError(f"{path}: expected exactly one SFPlan document, found {len(plans)}")
    try:
        plan = SFPlan.model_validate(plans[0])
    except ValidationError as exc:
        problems = "\n".join(f"  {line}" for line in field_errors(exc))
        raise _InputError(f"{path}: the SFPlan is not valid:\n{problems}") from None
    return plan, services[0] if len(services) == 1 else None


def _live_sources(refs: dict[str, ResourceRef], directory: Path | None) -> dict[str, dict[str, Any] | None]:
    """Each sources entry's live object from ``DIR/<name>.yaml`` (or ``.yml``), None when there is no file."""
    live: dict[str, dict[str, Any] | None] = {}
    for name, ref in refs.items():
        files = [directory / f"{name}{ext}" for ext in (".yaml", ".yml")] if directory else []
        found = next((f for f in files if f.is_file()), None)
        live[name] = _object(found) if found else None
        obj = live[name]
        if found and obj is not None:
            seen = (obj.get("kind"), (obj.get("metadata") or {}).get("name"))
            if seen != (ref.kind, ref.name):
                err.print(
                    f"[yellow]![/yellow] {escape(str(found))} holds {seen[0]} {seen[1]!r}, "
                    f"but the sources template names {ref.kind} {ref.name!r}",
                    highlight=False,
                )
    if directory:
        for extra in sorted({p.stem for p in directory.glob("*.y*ml")} - set(refs)):
            err.print(f"[yellow]![/yellow] {escape(str(directory))}: {extra} is not a sources entry; ignored")
    return live


def _load_inputs(
    plan_file: Path,
    instance: Path,
    binding: Path | None,
    service: Path | None,
    registry: Path | None,
    namespace: str | None,
) -> tuple[SFPlan, RenderInputs]:
    """The plan and what the controller would pass: namespaces as it derives them, the stored registry."""
    plan, bundled_service = _plan_and_service(plan_file)
    instance_obj = _object(instance)
    stored: dict[str, Any] = {}
    if registry is not None and registry.exists():
        loaded = _documents(registry)
        if len(loaded) > 1 or (loaded and not isinstance(loaded[0], dict)):
            raise _InputError(f"{registry}: expected one YAML/JSON mapping of registry keys")
        stored = loaded[0] if loaded else {}
    spec = instance_obj.get("spec")
    context = spec.get("context") if isinstance(spec, dict) else None
    context_namespace = context.get("namespace") if isinstance(context, dict) else None
    metadata = instance_obj.get("metadata")
    own_namespace = metadata.get("namespace") if isinstance(metadata, dict) else None
    return plan, RenderInputs(
        instance=instance_obj,
        binding=_object(binding) if binding else None,
        service=_object(service) if service else bundled_service,
        registry=stored,
        default_namespace=namespace or own_namespace or "default",
        context_namespace=context_namespace if isinstance(context_namespace, str) else None,
    )


def _status_document(result: StatusResult) -> dict[str, Any]:
    wire = {
        "dashboard_url": "dashboardUrl",
        "instance_usable": "instanceUsable",
        "update_repeatable": "updateRepeatable",
    }
    document: dict[str, Any] = {}
    for section in dataclasses.fields(result):
        value = getattr(result, section.name)
        if value is not None:
            fields = dataclasses.asdict(value)
            fields["state"] = value.state.value
            document[section.name] = {wire.get(k, k): v for k, v in fields.items() if v is not None}
    return document


def _print_yaml(documents: list[Any], comments: list[str] | None = None) -> None:
    parts = []
    for index, document in enumerate(documents):
        comment = comments[index] if comments and comments[index] else ""
        parts.append(comment + yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
    out.print("---\n".join(parts), markup=False, emoji=False, highlight=False, end="")


def render(
    plan_file: Annotated[
        Path, typer.Argument(metavar="PLAN.yaml", help="File holding the SFPlan (and optionally its SFService).")
    ],
    action: Annotated[TemplateAction, typer.Option(help="The template to render.")],
    instance: Annotated[Path, typer.Option(metavar="INSTANCE.yaml", help="The SFServiceInstance.")],
    binding: Annotated[
        Path | None, typer.Option(metavar="BINDING.yaml", help="The SFServiceBinding (bind/unbind).")
    ] = None,
    service: Annotated[Path | None, typer.Option(metavar="SERVICE.yaml", help="The SFService.")] = None,
    sources: Annotated[
        Path | None,
        typer.Option(metavar="DIR", help="Live objects, one <sources-entry-name>.yaml per entry.", file_okay=False),
    ] = None,
    registry: Annotated[
        Path | None, typer.Option(metavar="FILE", help="The instance registry (YAML/JSON map), if any.")
    ] = None,
    save_registry: Annotated[
        bool, typer.Option("--save-registry", help="Write the updated registry back to --registry.")
    ] = False,
    namespace: Annotated[
        str | None,
        typer.Option(help="The controller's default namespace (default: the instance's namespace, else 'default')."),
    ] = None,
) -> None:
    """Render one of a plan's templates offline and print what the controller would apply or report.

    provision/bind/unbind print the objects (YAML documents), sources the references, status the section
    states, clusterSelector the selector. Exit 1 naming the plan, action and template on any error.
    """
    try:
        if save_registry and registry is None:
            raise _InputError("--save-registry needs --registry FILE")
        if sources is not None and not sources.is_dir():
            raise _InputError(f"{sources}: not a directory")
        plan, inputs = _load_inputs(plan_file, instance, binding, service, registry, namespace)
        renderer = Renderer()
        refs = renderer.render_sources(plan, inputs)
        if action is TemplateAction.SOURCES:
            _print_yaml([{n: r.model_dump(by_alias=True, exclude_none=True) for n, r in refs.items()}])
            return
        inputs = dataclasses.replace(inputs, sources=_live_sources(refs, sources))
        if action is TemplateAction.STATUS:
            _print_yaml([_status_document(renderer.render_status(plan, inputs))])
        elif action is TemplateAction.CLUSTER_SELECTOR:
            selector = renderer.render_cluster_selector(plan, inputs)
            out.print(selector if selector is not None else "", markup=False, emoji=False, highlight=False)
        else:
            rendered = renderer.render_objects(plan, action, inputs)
            if not rendered.objects:
                err.print(f"plan {escape(str(plan.metadata.name))!r} renders no objects for {action.value}")
            _print_yaml(
                [o.manifest for o in rendered.objects], [_SINGLETON if o.singleton else "" for o in rendered.objects]
            )
            if save_registry and registry is not None:
                registry.write_text(yaml.safe_dump(rendered.registry, sort_keys=True), encoding="utf-8")
                err.print(f"registry written to {escape(str(registry))}")
    except (RenderError, _InputError) as exc:
        err.print(f"[red]✗[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(1) from None
