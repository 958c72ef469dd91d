"""What the claims reconcilers share: API access, the watch cache, settings, the prober, the queue."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

from opbroker.controller.catalog.catalog import Catalog
from opbroker.controller.claims.probes import Prober
from opbroker.controller.claims.settings import ClaimsSettings
from opbroker.controller.claims.store import Store
from opbroker.controller.runtime.clock import SYSTEM, Clock
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.kube import Kube
from opbroker.kubeclient.wire import JsonBody, mapping_of, text_of


@dataclass(frozen=True)
class Context:
    kube: Kube
    store: Store
    settings: ClaimsSettings
    prober: Prober
    enqueue: Callable[[Key], None]
    """Thread-safe: schedule a key for reconciling."""
    osb_catalog: Catalog
    """The controller's SFService/SFPlan catalog (read-only), for automatic registration."""
    writer: Callable[[str], Kube] | None = None
    """The door writes into a namespace go through (its ``opbroker`` account, ``controller.identities``);
    None: the controller's own (single-tenant)."""
    clock: Clock = SYSTEM
    """The runtime's clock: a check's schedule (monotonic) and a Job's deadline (wall) are read from it."""

    def door(self, namespace: str) -> Kube:
        """Where a write of Secrets, Jobs or workloads into ``namespace`` goes (reads stay the controller's)."""
        return self.kube if self.writer is None else self.writer(namespace)

    def write_secret(self, manifest: JsonBody, resource_version: str | None) -> None:
        """Write a Secret opbroker stamps as its requester's (``opbroker.io/owner-uid``), by server-side apply (so
        keys no longer rendered go): the stamped one that was read is rewritten guarded by its
        ``resource_version`` (changed or replaced meanwhile: a Conflict, read again); when none was read it is
        created — a Secret made by someone else in the instant between that read and this write is the one
        case this cannot see (as :func:`opbroker.controller.osb.core.instance_plan.guarded`)."""
        metadata = mapping_of(manifest.get("metadata"))
        if resource_version is not None:
            manifest = {**manifest, "metadata": {**metadata, "resourceVersion": resource_version}}
        self.door(text_of(metadata.get("namespace")) or "").apply_secret(manifest)


def key(kind: str, namespace: str, name: str) -> Hashable:
    return (kind, namespace, name)
