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

from opbroker.api import conventions
from opbroker.api.catalog import OSB_GROUP
from opbroker.broker.records import Kind
from opbroker.kubeclient import answers
from opbroker.kubeclient.lean import METADATA_PAGE, METADATA_WATCH, LeanCustomObjects

log = logging.getLogger(__name__)
VERSION = "v1alpha1"
#: The label selector of the objects the broker recorded: the only ones that answer for an OSB id.
RECORDED = f"{conventions.LABEL_RECORDED_BY}={conventions.RECORDED_BY_BROKER}"


class NamespaceIndex:
    """name → namespaces for each kind, kept by one list+watch thread per kind.

    Only objects the broker recorded (``repository.RECORDED``, a label no tenant may write) are listed and
    watched: a tenant's same-named object in its own namespace never becomes a hint. A name recorded in two
    namespaces is held with both, so :meth:`get` gives no hint and the caller's list reports the duplicate.
    """

    def __init__(self, api_client: client.ApiClient, kinds: Iterable[Kind], *, watch_seconds: int = 60) -> None:
        self._custom = LeanCustomObjects(api_client)
        self._kinds = tuple(kinds)
        self._watch_seconds = watch_seconds
        self._lock = threading.Lock()
        self._names: dict[Kind, dict[str, set[str]]] = {kind: {} for kind in self._kinds}
        self._stopped = threading.Event()
        self._watches: list[answers.Watch] = []
        self._threads: list[threading.Thread] = []
        self.synced = {kind: threading.Event() for kind in self._kinds}

    def get(self, kind: Kind, name: str) -> str | None:
        """The one namespace ``name`` was recorded in; None when none or several (the caller looks further)."""
        with self._lock:
            namespaces = self._names[kind].get(name)
            return next(iter(namespaces)) if namespaces is not None and len(namespaces) == 1 else None

    def seen(self, kind: Kind, name: str) -> bool:
        """Whether ``name`` was recorded in any namespace."""
        with self._lock:
            return bool(self._names[kind].get(name))

    def note(self, kind: Kind, name: str, namespace: str) -> None:
        """Remember a location learnt from a request (the watch confirms or corrects it shortly)."""
        with self._lock:
            self._names[kind].setdefault(name, set()).add(namespace)

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
        names: dict[str, set[str]] = {}
        listed: dict[str, Any] = {}
        for page in self._custom.cluster_metadata_pages(
            OSB_GROUP, VERSION, kind.plural, limit=METADATA_PAGE, label_selector=RECORDED
        ):
            for item in page.get("items") or []:
                meta = item.get("metadata") or {}
                if meta.get("name") and meta.get("namespace"):
                    names.setdefault(meta["name"], set()).add(meta["namespace"])
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
                label_selector=RECORDED,
                timeout_seconds=self._watch_seconds,
                _headers={"Accept": METADATA_WATCH},
            ):
                if self._stopped.is_set() or event["type"] == "ERROR":
                    return None
                meta: dict[str, Any] = event["object"].get("metadata") or {}
                version = meta.get("resourceVersion") or version
                name: str | None = meta.get("name")
                namespace: str | None = meta.get("namespace")
                if not name or not namespace:
                    continue
                with self._lock:
                    if event["type"] == "DELETED":
                        left = self._names[kind].get(name, set()) - {namespace}
                        if left:
                            self._names[kind][name] = left
                        else:
                            self._names[kind].pop(name, None)
                    else:
                        self._names[kind].setdefault(name, set()).add(namespace)
        except ApiException as exc:
            if exc.status != 410:  # 410: resourceVersion too old, relist
                raise
            return None
        finally:
            stream.stop()
            self._watches.remove(stream)
        return version
