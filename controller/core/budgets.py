"""Per-namespace budgets: what one namespace may make the controller hold and do at once (issue 42).

A tenant is admin of its namespace: it may create as many SFServiceInstances and SFServiceBindings as its quota
allows, each as large as the API server takes, directly or through a platform. Every operation in progress costs
the controller a status render per poll and the operator's work behind it; every object of a watched kind costs
the controller's memory. Unbounded, one namespace's flood sizes the controller for everyone. So each namespace has
a budget, and a request past it is not started: it waits, saying why in its Ready condition
(``NamespaceBudgetExceeded``), and starts once the namespace is within its budget again. What is already running
goes on; deprovisions and unbinds are never held back (they give resources back).

The budgets (``ControllerSettings.budgets``, the controller's ``--namespace-*`` options):

* ``operations``: OSB operations (provision, update, bind) in progress at once in a namespace;
* ``cached_bytes``: bytes of the namespace's objects the controller keeps in memory (``controller.store``: past
  it, bodies are read from the API server instead, and the namespace counts as over budget);
* the objects one render writes (``rendering.limits.Limits.max_objects``, a limit of every render) bound what one
  instance multiplies;
* the kinds watched come from plans, which only the platform writes, never from a tenant's fields
  (``controller.runtime.served``, ``controller.runtime.sources``).

The control plane's own namespaces are exempt: only the platform writes there. The decision is pure;
``controller.budgets`` keeps the counts it decides on.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NamespaceBudgets:
    """What one namespace may hold and run at once. 0 disables a budget (a cluster with one tenant, a benchmark)."""

    operations: int = 64
    """OSB operations (provision, update, bind) in progress at once in one namespace."""
    cached_bytes: int = 64 << 20
    """Bytes of one namespace's objects (as JSON text) the controller keeps in memory."""


@dataclass(frozen=True)
class NamespaceUsage:
    """What a namespace holds and runs, as the counts stood when a request was read."""

    namespace: str
    operations: int
    """Operations in progress in the namespace, the request's own excluded."""
    over_cache: bool = False
    """Its objects want more memory than its ``cached_bytes`` budget."""


def refusal(usage: NamespaceUsage, budgets: NamespaceBudgets) -> str | None:
    """Why a new operation in ``usage.namespace`` must wait (None: it may start). Said in the object's condition."""
    if budgets.operations and usage.operations >= budgets.operations:
        return (
            f"namespace {usage.namespace!r} has {usage.operations} operations in progress, its budget of "
            f"{budgets.operations}: this request starts when one of them ends"
        )
    if budgets.cached_bytes and usage.over_cache:
        return (
            f"namespace {usage.namespace!r} holds more than its budget of {budgets.cached_bytes} bytes of objects the "
            "controller watches: this request starts when the namespace holds less"
        )
    return None
