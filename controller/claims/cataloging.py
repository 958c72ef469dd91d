"""Reconciling the ServiceCatalogs of one namespace from the watch cache (see :mod:`catalogs`).

observe reads the namespace's services and claims (watch cache) and the catalogs that exist;
:func:`.core.catalog_plan.plan` (pure) says what to apply and what to delete; act hands that to the one
executor (a delete is its generic action, applying a catalog the one effect here).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import ClassVar

from kubernetes.client.exceptions import ApiException

from opbroker.controller.claims.context import Context
from opbroker.controller.claims.core import catalog_plan, names
from opbroker.controller.claims.core.catalog_plan import CatalogAction, CatalogFacts
from opbroker.controller.claims.core.views import ListedCatalog
from opbroker.controller.claims.kinds import CATALOGS
from opbroker.controller.runtime.executor import Executor, Run, Target
from opbroker.controller.runtime.failures import namespace_terminating
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.kinds import ObservePlanAct
from opbroker.controller.runtime.outcomes import Outcome

logger = logging.getLogger(__name__)


class CatalogReconciler(ObservePlanAct[CatalogFacts, CatalogAction]):
    kind: ClassVar[str] = "catalog"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.executor = executor(ctx)

    def observe(self, key: Key) -> CatalogFacts:
        store, namespace = self.ctx.store, key.namespace
        claims = store.claims(namespace)
        listed = self.ctx.kube.list_custom(CATALOGS, namespace, label_selector=f"{names.LABEL_CATALOG}=true")
        existing = {catalog.meta.name: catalog.services for catalog in map(ListedCatalog.of, listed)}
        return CatalogFacts(
            namespace=namespace,
            services=tuple(store.services(namespace)),
            claim_environments=tuple(c.environment for c in claims),
            configured=tuple(self.ctx.settings.environments),
            existing=existing,
            any_claims=bool(claims),
            shared=tuple(store.shared_with(namespace)),
        )

    @staticmethod
    def plan(facts: CatalogFacts) -> Sequence[CatalogAction]:
        return catalog_plan.plan(facts)

    def act(self, facts: CatalogFacts, actions: Sequence[CatalogAction]) -> Outcome:
        # The key is the namespace's; no action writes to a reconciled object of its own.
        return self.executor.run(Key(self.kind, facts.namespace, ""), {"metadata": {}}, actions)


def executor(ctx: Context) -> Executor:
    """The one executor, for a namespace's catalogs."""

    def apply(run: Run, action: catalog_plan.ApplyCatalog) -> None:
        try:
            ctx.kube.apply(dict(action.manifest))
        except ApiException as exc:
            if not namespace_terminating(exc):
                raise
            # the namespace is going away with its catalogs: nothing to write

    return Executor(Target(ctx.kube, CATALOGS, CatalogReconciler.kind), {catalog_plan.ApplyCatalog: apply})
