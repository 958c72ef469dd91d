"""Inline programs for :func:`opbroker.stacks.select_stack`: the control plane with a catalog, and any Pulumi
Python project folder run in this process.

A program is a plain function that registers resources when the engine calls it; nothing here runs an engine.
"""

from __future__ import annotations

import runpy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pulumi

from opbroker.components import ControlPlane, ControlPlaneArgs, SFPlan, SFService

#: A catalog object as ``(component, resource name, args)``: component "SFService" or "SFPlan", args as the
#: component takes them (``SFServiceArgs``/``SFPlanArgs`` fields, or a mapping of them).
CatalogEntry = tuple[str, str, Mapping[str, Any]]

CATALOG_COMPONENTS: Mapping[str, type[SFService] | type[SFPlan]] = {"SFService": SFService, "SFPlan": SFPlan}


@dataclass(frozen=True)
class Deployed:
    """What :func:`control_plane_with_catalog` registered: the ControlPlane and the catalog by resource name."""

    control_plane: ControlPlane
    catalog: Mapping[str, SFService | SFPlan]


def control_plane_with_catalog(
    control_plane: ControlPlaneArgs | Mapping[str, Any],
    catalog: Iterable[CatalogEntry] = (),
    *,
    name: str = "opbroker",
    export: bool = True,
) -> Deployed:
    """Register the ControlPlane and the catalog; call it inside a Pulumi program.

    Each catalog object depends on the control plane's CRDs and namespace (``catalog_prerequisites``) and on the
    controller's Deployment: ``destroy`` deletes the catalog while the controller still runs, which must release
    its finalizer on every plan an instance ever used (``opbroker.controller.catalog.catalog_entries``) and on the
    services (with the controller deleted alongside, the plans and the CRDs wait forever; seen on a node in
    tests/pulumi/test_node.py). The price: with ``await_deployments`` the catalog is created once the
    controller's rollout is done, not before. With ``export`` the stack exports ``namespace``, ``crds``,
    ``brokerUrl``, ``brokerUsername`` and ``brokerPassword`` (a secret), as the root stack does.
    """
    entries = list(catalog)
    unknown = sorted({kind for kind, _, _ in entries} - set(CATALOG_COMPONENTS))
    if unknown:
        raise ValueError(f"catalog components {unknown} are not one of {sorted(CATALOG_COMPONENTS)}")
    plane = ControlPlane(name, cast(ControlPlaneArgs, dict(control_plane)))
    after_crds = pulumi.ResourceOptions(depends_on=[*plane.catalog_prerequisites, plane.controller])
    declared = {
        resource: CATALOG_COMPONENTS[kind](resource, dict(args), after_crds)  # type: ignore[arg-type]
        for kind, resource, args in entries
    }
    if export:
        pulumi.export("namespace", plane.namespace)
        pulumi.export("crds", plane.crd_names)
        pulumi.export("brokerUrl", plane.broker_url)
        pulumi.export("brokerUsername", plane.broker_username)
        pulumi.export("brokerPassword", plane.broker_password)
    return Deployed(plane, declared)


def python_program(folder: Path) -> Callable[[], None]:
    """A Pulumi Python project folder's ``__main__.py`` as an inline program, run in this process.

    The folder is on ``sys.path`` while it runs (``runpy.run_path``), so the program imports its sibling
    modules as it does under ``pulumi up``; those stay in ``sys.modules`` afterwards, as in any process that
    imports them. Configuration comes from the stack (``pulumi.Config()`` reads the project's name).
    """
    main = folder / "__main__.py"
    if not main.is_file():
        raise FileNotFoundError(f"{main} does not exist: a Pulumi Python project folder holds a __main__.py")

    def program() -> None:
        runpy.run_path(str(folder), run_name="__main__")

    return program
