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

Its informers are tasks on the broker's loop (uvicorn's: the app's lifespan starts and stops them); what they tell
runs there, and the request threads read the index under its lock.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections.abc import Iterable

from kubernetes import client

from opbroker.api import conventions
from opbroker.api.catalog import OSB_GROUP
from opbroker.broker.records import Kind
from opbroker.kubeclient.informer import Body, Collection, Identity, Informer, LeanSource, stop_all
from opbroker.kubeclient.lean import METADATA_PAGE, LeanApi
from opbroker.kubeclient.wire import mapping_of, text_of

log = logging.getLogger(__name__)
VERSION = "v1alpha1"
#: The label selector of the objects the broker recorded: the only ones that answer for an OSB id.
RECORDED = f"{conventions.LABEL_RECORDED_BY}={conventions.RECORDED_BY_BROKER}"


class NamespaceIndex:
    """name → namespaces for each kind, kept by one informer per kind.

    Only objects the broker recorded (``repository.RECORDED``, a label no tenant may write) are listed and
    watched: a tenant's same-named object in its own namespace never becomes a hint. A name recorded in two
    namespaces is held with both, so :meth:`get` gives no hint and the caller's list reports the duplicate.
    """

    def __init__(self, api_client: client.ApiClient, kinds: Iterable[Kind], *, watch_seconds: int = 60) -> None:
        self._kinds = tuple(kinds)
        self._lock = threading.Lock()
        self._names: dict[Kind, dict[str, set[str]]] = {kind: {} for kind in self._kinds}
        self._source = source = LeanSource(LeanApi(api_client))
        self._informers = {
            kind: Informer(
                source,
                Collection(
                    f"{OSB_GROUP}/{VERSION}",
                    kind.plural,
                    kind.model.KIND,
                    label_selector=RECORDED,
                    metadata_only=True,
                    page=METADATA_PAGE,
                ),
                functools.partial(self._changed, kind),
                on_listed=functools.partial(self._listed, kind),
                list_events=False,  # the listing's identities replace the kind's index whole
                tombstones=False,
                watch_seconds=watch_seconds,
                name=f"opbroker-index-{kind.value}",
            )
            for kind in self._kinds
        }
        self.synced = {kind: informer.listed for kind, informer in self._informers.items()}

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

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Follow the kinds as tasks on ``loop`` (by default the running one: the app's lifespan)."""
        for informer in self._informers.values():
            informer.start(loop)

    def stop(self) -> None:
        """End the streams now (from any thread); their connections are closed on the loop."""
        stop_all(self._informers.values(), self._source)

    async def wait(self) -> None:
        """Until every stream has ended (after :meth:`stop`; on the loop), their connections then closed."""
        for informer in self._informers.values():
            await informer.wait()
        await self._source.aclose()

    def _listed(self, kind: Kind, listed: frozenset[Identity]) -> None:
        names: dict[str, set[str]] = {}
        for namespace, name in listed:
            if namespace and name:
                names.setdefault(name, set()).add(namespace)
        with self._lock:
            self._names[kind] = names

    def _changed(self, kind: Kind, event_type: str, obj: Body) -> None:
        meta = mapping_of(obj.get("metadata"))
        name = text_of(meta.get("name"))
        namespace = text_of(meta.get("namespace"))
        if not name or not namespace:
            return
        with self._lock:
            if event_type == "DELETED":
                left = self._names[kind].get(name, set()) - {namespace}
                if left:
                    self._names[kind][name] = left
                else:
                    self._names[kind].pop(name, None)
            else:
                self._names[kind].setdefault(name, set()).add(namespace)
