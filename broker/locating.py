"""A watch-fed index from object name to namespace: where to look first for an instance or binding.

Later OSB requests (DELETE, GET, bind) carry only the OSB id, not the namespace the object was
recorded in. The index turns "which namespace?" into one GET instead of a cluster-wide list. It is a
hint, never the truth: a hit is confirmed by a GET, and a miss falls back to an authoritative list, so
two replicas whose indexes differ by a few milliseconds still give the same answer.

A name and a namespace are all it keeps, so it lists and watches metadata only (``PartialObjectMetadata``, in
pages of :data:`~opbroker.kubeclient.lean.METADATA_PAGE`): the controller patches each instance's status about
four times per operation, and a full watch made the broker receive and decode every one of those bodies (the
top of its profile once its requests were answered, issue 31) and listed every instance of the cluster in one
answer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from opbroker.api.catalog import OSB_GROUP
from opbroker.broker.records import Kind
from opbroker.kubeclient import answers
from opbroker.kubeclient.lean import METADATA_PAGE, METADATA_WATCH, LeanCustomObjects

log = logging.getLogger(__name__)
VERSION = "v1alpha1"


class NamespaceIndex:
    """name → namespace for each kind, kept by one list+watch thread per kind."""

    def __init__(self, api_client: client.ApiClient, kinds: Iterable[Kind], *, watch_seconds: int = 60) -> None:
        self._custom = LeanCustomObjects(api_client)
        self._kinds = tuple(kinds)
        self._watch_seconds = watch_seconds
        self._lock = threading.Lock()
        self._names: dict[Kind, dict[str, str]] = {kind: {} for kind in self._kinds}
        self._stopped = threading.Event()
        self._watches: list[answers.Watch] = []
        self._threads: list[threading.Thread] = []
        self.synced = {kind: threading.Event() for kind in self._kinds}

    def get(self, kind: Kind, name: str) -> str | None:
        with self._lock:
            return self._names[kind].get(name)

    def note(self, kind: Kind, name: str, namespace: str) -> None:
        """Remember a location learnt from a request (the watch confirms or corrects it shortly)."""
        with self._lock:
            self._names[kind][name] = namespace

    def start(self) -> None:
        for kind in self._kinds:
            thread = threading.Thread(target=self._run, args=(kind,), name=f"opbroker-index-{kind.value}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stopped.set()
        for stream in list(self._watches):
            stream.stop()

    def _run(self, kind: Kind) -> None:
        while not self._stopped.is_set():
            try:
                version: str | None = self._relist(kind)
                self.synced[kind].set()
                while version is not None and not self._stopped.is_set():
                    version = self._follow(kind, version)
            except Exception as exc:  # the index is a hint: log, back off, relist
                if self._stopped.is_set():
                    return
                log.warning("namespace index for %s: %s; relisting", kind.plural, type(exc).__name__)
                self._stopped.wait(1.0)

    def _relist(self, kind: Kind) -> str:
        names: dict[str, str] = {}
        listed: dict[str, Any] = {}
        for page in self._custom.cluster_metadata_pages(OSB_GROUP, VERSION, kind.plural, limit=METADATA_PAGE):
            for item in page.get("items") or []:
                meta = item.get("metadata") or {}
                if meta.get("name") and meta.get("namespace"):
                    names[meta["name"]] = meta["namespace"]
            listed = page.get("metadata") or {}
        with self._lock:
            self._names[kind] = names
        return str(listed["resourceVersion"])

    def _follow(self, kind: Kind, version: str) -> str | None:
        """Apply watch events from ``version``; the version to resume from, or ``None`` to relist."""
        stream = answers.Watch()
        self._watches.append(stream)
        try:
            for event in stream.stream(
                self._custom.list_cluster_custom_object,
                OSB_GROUP,
                VERSION,
                kind.plural,
                resource_version=version,
                timeout_seconds=self._watch_seconds,
                _headers={"Accept": METADATA_WATCH},
            ):
                if self._stopped.is_set() or event["type"] == "ERROR":
                    return None
                meta: dict[str, Any] = event["object"].get("metadata") or {}
                version = meta.get("resourceVersion") or version
                name: str | None = meta.get("name")
                namespace: str | None = meta.get("namespace")
                if not name:
                    continue
                with self._lock:
                    if event["type"] == "DELETED":
                        self._names[kind].pop(name, None)
                    elif namespace:
                        self._names[kind][name] = namespace
        except ApiException as exc:
            if exc.status != 410:  # 410: resourceVersion too old, relist
                raise
            return None
        finally:
            stream.stop()
            self._watches.remove(stream)
        return version
