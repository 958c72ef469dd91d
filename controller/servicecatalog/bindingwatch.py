"""Keeping :class:`~opbroker.controller.servicecatalog.bindingrefs.BindingRefs` current: an informer of Bindings,
cluster-wide (:mod:`opbroker.kubeclient.informer`: paged listing, bookmarks, the watchdog, relisting with the
deletions a broken stream missed).

Every replica runs it, leader or standby (a standby runs no controller loop, yet the webhook Service sends it
reviews).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from kubernetes import client

from opbroker.controller.servicecatalog.bindingrefs import BindingRef, BindingRefs
from opbroker.controller.servicecatalog.resources import BINDINGS, GROUP, VERSION
from opbroker.kubeclient.informer import Body, Collection, Informer, LeanSource, stop_all
from opbroker.kubeclient.lean import LeanApi

#: Bindings per list request: bounds each answer's size whatever the cluster holds.
PAGE = 500


class BindingWatch:
    """Lists, then watches, Bindings into ``refs`` until :meth:`stop`: a task on the controller's loop."""

    def __init__(self, api_client: client.ApiClient, refs: BindingRefs) -> None:
        self.refs = refs
        self._source = LeanSource(LeanApi(api_client))
        self.informer = Informer(
            self._source,
            Collection(f"{GROUP}/{VERSION}", BINDINGS, page=PAGE),
            self._told,
            on_page=self._page,
            on_listed=self._listed,
            list_events=False,  # a listing replaces the index whole (and marks it synced)
            tombstones=False,
            name="webhook-bindings",
        )
        self._listing: list[BindingRef] = []

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Follow the Bindings on ``loop`` (callable from any thread)."""
        self.informer.start(loop)

    def stop(self) -> None:
        stop_all([self.informer], self._source)

    def _page(self, objects: Sequence[Body]) -> None:
        self._listing.extend(BindingRef.of(obj) for obj in objects)

    def _listed(self, _listed: frozenset[tuple[str, str]]) -> None:
        listing, self._listing = self._listing, []
        self.refs.replace(listing)

    def _told(self, event_type: str, obj: Body) -> None:
        ref = BindingRef.of(obj)
        if event_type == "DELETED":
            self.refs.remove(ref.namespace, ref.name)
        else:
            self.refs.put(ref)
