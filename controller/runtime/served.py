"""Which kinds the API server serves, known without touching the shared discovery cache (issue 42).

Kinds reach the controller from templates and their records: a plan's ``sources`` may name any kind, and so may
what a template rendered. The official client's discovery (``DynamicClient``) reads every group again — and
empties the cache every door shares — each time it is asked for a kind it lacks: 200 made-up kinds in one
instance made as many rediscoveries (a dozen requests each) and broke other tenants' lookups meanwhile. This
index answers "is it served?" from the group version's own discovery document, read once per group version and
again for a missing kind at most every :data:`WINDOW_SECONDS`; a group version the API server does not serve is
remembered as such for as long. Bounded: at most :data:`MAX_GROUP_VERSIONS` documents, the oldest read forgotten.

It also answers what a request needs of a served kind — its plural and whether it is namespaced
(:meth:`ServedKinds.resource`) — so every get, apply and delete of a reconcile finds its path here, in a dict, under
one lock. The official discovery (``LazyDiscoverer``) is no place for that hot path: its search walks the whole
cache on every call, is not thread-safe (one worker's refresh empties the cache under the others, whose empty
answers then refresh and rewrite the cache file again: 9 % of the controller's CPU in the provisioning bench with 8
workers, py-spy, session 19). Only a watch (``controller.runtime.sources``) still asks it, once per kind.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from opbroker.controller.core.views import resources_of
from opbroker.controller.runtime.clock import SYSTEM

#: A group version is read again for a kind it lacked at most this often.
WINDOW_SECONDS = 30.0
#: Group versions whose documents are kept (a document is a few KiB).
MAX_GROUP_VERSIONS = 512

#: An apiVersion as the API server spells one: an optional group (a DNS subdomain) and a version; nothing else may
#: reach a discovery path.
_API_VERSION = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[a-z0-9]{1,63}$")
_KIND = re.compile(r"^[A-Za-z][A-Za-z0-9]{0,62}$")

#: Reads a discovery document by path (``/api/v1``, ``/apis/<group>/<version>``); None when not served (404).
Fetch = Callable[[str], object | None]


def discovery_path(api_version: str) -> str:
    """The discovery document's path of an apiVersion (``v1`` is the core group)."""
    return f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"


@dataclass(frozen=True)
class ServedResource:
    """What a request needs of a served kind: where its objects are (``group``, ``name``: the plural) and whether
    they live in a namespace."""

    group: str
    name: str
    kind: str
    namespaced: bool


@dataclass(frozen=True)
class _Document:
    read_at: float
    kinds: Mapping[str, ServedResource]
    """The kinds the group version serves (subresources left out), by kind; empty when not served at all."""


class ServedKinds:
    """Whether a kind is served, from bounded, rate-limited reads of discovery documents. Thread-safe."""

    def __init__(self, fetch: Fetch, *, clock: Callable[[], float] = SYSTEM.monotonic) -> None:
        self._fetch = fetch
        self._clock = clock
        self._lock = threading.Lock()
        self._documents: OrderedDict[str, _Document] = OrderedDict()

    def served(self, api_version: str, kind: str) -> bool:
        """Whether the API server serves ``kind`` in ``api_version``. A document that lacks the kind is read again
        only once its window has passed (a CRD installed since); every other answer comes from memory."""
        return self.resource(api_version, kind) is not None

    def resource(self, api_version: str, kind: str) -> ServedResource | None:
        """``kind`` in ``api_version`` as served (None: not served), read as :meth:`served` says."""
        if not _API_VERSION.match(api_version) or not _KIND.match(kind):
            return None
        path = discovery_path(api_version)
        with self._lock:
            known = self._documents.get(path)
        if known is not None and (kind in known.kinds or self._clock() - known.read_at < WINDOW_SECONDS):
            return known.kinds.get(kind)
        document = self._fetch(path)
        group = api_version.rpartition("/")[0]
        kinds = {
            r.kind: ServedResource(group, r.name, r.kind, r.namespaced)
            for r in (resources_of(document) if document else ())
            if not r.subresource
        }
        with self._lock:
            self._documents[path] = _Document(self._clock(), kinds)
            self._documents.move_to_end(path)
            while len(self._documents) > MAX_GROUP_VERSIONS:
                self._documents.popitem(last=False)
        return kinds.get(kind)
