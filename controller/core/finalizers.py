"""The controller's finalizers — each with its one owner — and the writes that cannot lose another controller's.

**One owner per finalizer** (issue 45). :data:`OWNERS` names every finalizer the controller writes, on which
kind, and the one reconciler (its queue key kind) that adds and removes it there. A finalizer write is always an
:class:`~.actions.EnsureFinalizer` a plan returns, on the object it reconciles; the executor takes the finalizer's
name from this table and refuses (:class:`NotOwner`) the action of a reconciler that owns none on that kind. So no
object has two writers of one finalizer racing each other (an SFPlan's was added by the instance reconciler and
removed by the plan's before), and a new kind's finalizer is one row here. ``opbroker ... abandon`` ends a teardown
on an administrator's word (issue 43): it removes the owner's finalizer as the owner's executor would, where the row
allows it (:attr:`Held.abandonable`). The broker creates an instance or binding with the finalizer already on
(a creation replaces nothing); only the owner writes it after that.

A merge patch of ``metadata.finalizers`` replaces the whole list. Written from a stale read, it drops a finalizer
another controller added meanwhile (or puts back one it removed). So every finalizer write here carries the
``resourceVersion`` the list was read at: the API server refuses it with 409 when the object moved on, and the
reconcile runs again on a fresh read (the runtime's conflict handling). Pure: patches are values.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from opbroker.api import servicecatalog
from opbroker.api.catalog import SFPlan, SFService
from opbroker.api.cluster import SFCluster
from opbroker.api.conventions import DOMAIN, FINALIZER
from opbroker.api.meta import KubeResource
from opbroker.api.osb import SFServiceBinding, SFServiceInstance
from opbroker.api.primaza import ServiceClaim
from opbroker.kubeclient.wire import JsonBody, JsonObject, strings_of

CLUSTER_PROTECTION = f"{DOMAIN}/cluster-protection"
"""Held on an SFCluster while instances are placed on it: removal waits until none remain."""
CLAIM_RELEASE = f"claims.{DOMAIN}/release"
"""On a ServiceClaim: released (service freed, projection removed) before the claim goes."""
SERVICE_CATALOG = "servicecatalog.k8s.io/opbroker"
"""On a Service Catalog Instance or Binding: deprovisioned or unbound at its broker before it goes."""


@dataclass(frozen=True)
class Held:
    """One finalizer the controller writes on one kind, and its one owner."""

    finalizer: str
    group: str
    plural: str
    owner: str
    """The queue key kind of the one reconciler that adds and removes it (:attr:`ObservePlanAct.kind`)."""
    why: str
    abandonable: bool = False
    """``opbroker ... abandon`` may remove it, in its owner's name, to end a teardown that cannot finish."""


class NotOwner(Exception):
    """A finalizer action of a reconciler that owns no finalizer on the kind it reconciles: a bug, never retried
    into success (the runtime logs it with its traceback)."""


class Owners:
    """The table: at most one finalizer, with one owner, per kind."""

    def __init__(self, rows: Iterable[Held]) -> None:
        self.rows = tuple(rows)
        self._by_kind: dict[tuple[str, str], Held] = {}
        for row in self.rows:
            if (row.group, row.plural) in self._by_kind:
                raise ValueError(f"two finalizers for {row.plural}.{row.group}: one owner per kind")
            self._by_kind[(row.group, row.plural)] = row

    def on(self, group: str, plural: str) -> Held | None:
        """The row of the finalizer the controller writes on this kind; None if it writes none."""
        return self._by_kind.get((group, plural))

    def owned(self, group: str, plural: str, reconciler: str) -> Held:
        """The finalizer ``reconciler`` may add and remove on this kind; :class:`NotOwner` if it owns none."""
        row = self.on(group, plural)
        if row is None:
            raise NotOwner(f"{reconciler}: opbroker writes no finalizer on {plural}.{group}")
        if row.owner != reconciler:
            raise NotOwner(f"{reconciler}: {row.finalizer} on {plural}.{group} is {row.owner}'s to write")
        return row

    def adding(self, *rows: Held) -> Owners:
        """This table with ``rows`` added (a kind defined outside the controller, such as a test's)."""
        return Owners((*self.rows, *rows))


def _on(model: type[KubeResource]) -> tuple[str, str]:
    return model.GROUP, model.PLURAL


OWNERS = Owners(
    [
        Held(FINALIZER, *_on(SFServiceInstance), "instance", "deprovisioned (its objects deleted) first", True),
        Held(FINALIZER, *_on(SFServiceBinding), "binding", "unbound (its credentials deleted) first", True),
        Held(FINALIZER, *_on(SFPlan), "plan", "kept while instances use it"),
        Held(FINALIZER, *_on(SFService), "service", "kept while plans or instances use it"),
        Held(CLUSTER_PROTECTION, *_on(SFCluster), "cluster", "kept while instances are placed on it"),
        Held(CLAIM_RELEASE, *_on(ServiceClaim), "claim", "released (service freed, projection removed) first"),
        Held(SERVICE_CATALOG, *_on(servicecatalog.Instance), "scinstance", "deprovisioned at its broker first"),
        Held(SERVICE_CATALOG, *_on(servicecatalog.Binding), "scbinding", "unbound at its broker first"),
    ]
)
"""Every finalizer the controller writes, with its one owner (``docs/controller.md`` shows it)."""


def adding(metadata: JsonObject, finalizer: str) -> JsonBody | None:
    """The guarded patch that adds ``finalizer`` to the list read in ``metadata``; None if it is there."""
    present = strings_of(metadata.get("finalizers"))
    if finalizer in present:
        return None
    return replacing(metadata, [*present, finalizer])


def removing(metadata: JsonObject, finalizer: str) -> JsonBody | None:
    """The guarded patch that removes ``finalizer`` from the list read in ``metadata``; None if it is absent."""
    present = strings_of(metadata.get("finalizers"))
    if finalizer not in present:
        return None
    return replacing(metadata, [f for f in present if f != finalizer])


def replacing(metadata: JsonObject, finalizers: Sequence[str]) -> JsonBody:
    """The guarded patch that makes the list read in ``metadata`` ``finalizers`` (an empty list removes it)."""
    version = metadata.get("resourceVersion")
    if not version:
        raise ValueError("a finalizer write needs the resourceVersion the list was read at")
    return {"metadata": {"finalizers": list(finalizers) or None, "resourceVersion": version}}
