"""Keeping :class:`~opbroker.controller.servicecatalog.bindingrefs.BindingRefs` current: a list-and-watch of
Bindings, cluster-wide, in a thread of its own.

Every replica runs it, leader or standby (a standby runs no controller loop, yet the webhook Service sends it reviews).
The listing is paged (``PAGE`` items a request); each watch ends server-side after ``WATCH_SECONDS`` and the
client gives up on a connection silent for ``READ_SECONDS`` longer, so a dead connection costs at most that
much staleness before the watch resumes (or relists, when its resourceVersion is too old). Every call has a
client-side deadline.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from opbroker.controller.servicecatalog.bindingrefs import BindingRef, BindingRefs
from opbroker.controller.servicecatalog.resources import BINDINGS, GROUP, VERSION
from opbroker.kubeclient.lean import LeanCustomObjects

logger = logging.getLogger(__name__)

#: Bindings per list request: bounds each answer's size whatever the cluster holds.
PAGE = 500
#: How long the API server keeps one watch open before ending it (the watch then resumes).
WATCH_SECONDS = 60
#: (connect, read) deadlines of a list page; a watch's read deadline is ``WATCH_SECONDS`` plus the read one.
CONNECT_SECONDS, READ_SECONDS = 5.0, 15.0
#: Pause after a failed list or watch before the next attempt.
RETRY_SECONDS = 2.0


class BindingWatch:
    """Lists, then watches, Bindings into ``refs`` until :meth:`stop`."""

    def __init__(self, api_client: client.ApiClient, refs: BindingRefs) -> None:
        self._custom = LeanCustomObjects(api_client)
        self.refs = refs
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="webhook-bindings", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        resource_version: str | None = None
        while not self._stop.is_set():
            try:
                if resource_version is None:
                    resource_version = self._relist()
                resource_version = self._follow(resource_version)
            except ApiException as exc:
                if exc.status == 410:  # too old to resume from: list again
                    resource_version = None
                    continue
                logger.warning("the webhook's watch of Bindings failed (HTTP %s); retrying", exc.status)
                self._stop.wait(RETRY_SECONDS)
            except Exception as exc:  # a dropped connection, a deadline: resume from where it was
                logger.warning("the webhook's watch of Bindings failed (%s); retrying", type(exc).__name__)
                self._stop.wait(RETRY_SECONDS)

    def _relist(self) -> str:
        """Every Binding, page by page, into the index; the listing's resourceVersion."""
        refs: list[BindingRef] = []
        token: str | None = None
        while True:
            page: Any = self._custom.list_cluster_custom_object(
                GROUP,
                VERSION,
                BINDINGS,
                limit=PAGE,
                _continue=token,
                _request_timeout=(CONNECT_SECONDS, READ_SECONDS),
            )
            refs.extend(BindingRef.of(item) for item in page.get("items") or [])
            meta = page.get("metadata") or {}
            token = meta.get("continue") or None
            if token is None:
                self.refs.replace(refs)
                return str(meta.get("resourceVersion") or "")

    def _follow(self, resource_version: str) -> str | None:
        """One watch from ``resource_version``; where the next should resume (None: relist)."""
        watcher = watch.Watch()
        stream = watcher.stream(
            self._custom.list_cluster_custom_object,
            GROUP,
            VERSION,
            BINDINGS,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=WATCH_SECONDS,
            _request_timeout=(CONNECT_SECONDS, WATCH_SECONDS + READ_SECONDS),
        )
        for event in stream:
            if self._stop.is_set():
                watcher.stop()
                return resource_version
            raw: dict[str, Any] = event.get("raw_object") or event.get("object") or {}
            kind = event.get("type")
            if kind == "ERROR":
                return None if raw.get("code") == 410 else resource_version
            resource_version = str((raw.get("metadata") or {}).get("resourceVersion") or resource_version)
            if kind == "DELETED":
                ref = BindingRef.of(raw)
                self.refs.remove(ref.namespace, ref.name)
            elif kind in ("ADDED", "MODIFIED"):
                self.refs.put(BindingRef.of(raw))
        return resource_version
