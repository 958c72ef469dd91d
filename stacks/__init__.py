"""Programmatic stacks in Python: the control plane and a catalog deployed from a Python script through the
Pulumi Automation API, with the preview's diff first and ``up`` after.

Thin over ``pulumi.automation``: :func:`select_stack` is ``create_or_select_stack`` with an inline program and
the settings spelled out (:class:`Settings`: backend, secrets passphrase, engine, Pulumi home — no global state),
and it hands back the Automation API's own ``Stack``. :func:`preview` returns the change summary and every planned
change with the properties it touches; :func:`deploy` previews, asks, then runs ``up``; :func:`refresh`,
:func:`destroy` and :func:`outputs` are the Automation API's, each engine command under a deadline.

Inline programs run in this process and the engine talks to this process's own language server: no Python
language host (``pulumi-language-python``) is needed. :mod:`opbroker.stacks.programs` holds the programs:
the control plane with a catalog, and any Pulumi Python project folder run inline.
"""

from opbroker.stacks.automation import (
    COMMAND_DEADLINE,
    Change,
    Deployment,
    EngineDeadlineError,
    Preview,
    Settings,
    deploy,
    destroy,
    outputs,
    preview,
    refresh,
    select_stack,
    up,
)
from opbroker.stacks.programs import CatalogEntry, Deployed, control_plane_with_catalog, python_program

__all__ = [
    "COMMAND_DEADLINE",
    "CatalogEntry",
    "Change",
    "Deployed",
    "Deployment",
    "EngineDeadlineError",
    "Preview",
    "Settings",
    "control_plane_with_catalog",
    "deploy",
    "destroy",
    "outputs",
    "preview",
    "python_program",
    "refresh",
    "select_stack",
    "up",
]
