"""Which kinds the API server serves, known without touching the shared discovery cache (issue 42).

Kinds reach the controller from templates and their records: a plan's ``sources`` may name any kind, and so may
what a template rendered. The official client's discovery (``DynamicClient``) reads every group again — and
empties the cache every door shares — each time it is asked for a kind it lacks: 200 made-up kinds in one
instance made as many rediscoveries (a dozen requests each) and broke other tenants' lookups meanwhile. This
index answers "is it served?" from the group version's own discovery document, read once per group version and
again for a missing kind at most every :data:`WINDOW_SECONDS`; a group version the API server does not serve is
remembered as such for as long. Bounded: at most :data:`MAX_GROUP_VERSIONS` documents, the oldest read forgotten.

Only a kind this index says is served is looked up in the official discovery (a CRD installed since that
discovery was read then refreshes it once, as before) or watched.
"""

from __future__ import annotations

import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from opbroker.controller.core.views import resources_of

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
class _Document:
    read_at: float
    kinds: frozenset[str]
    """The kinds the group version serves (subresources left out); empty when not served at all."""


class ServedKinds:
    """Whether a kind is served, from bounded, rate-limited reads of discovery documents. Thread-safe."""

    def __init__(self, fetch: Fetch, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._fetch = fetch
        self._clock = clock
        self._lock = threading.Lock()
        self._documents: OrderedDict[str, _Document] = OrderedDict()

    def served(self, api_version: str, kind: str) -> bool:
        """Whether the API server serves ``kind`` in ``api_version``. A document that lacks the kind is read again
        only once its window has passed (a CRD installed since); every other answer comes from memory."""
        if not _API_VERSION.match(api_version) or not _KIND.match(kind):
            return False
        path = discovery_path(api_version)
        with self._lock:
            known = self._documents.get(path)
        if known is not None and (kind in known.kinds or self._clock() - known.read_at < WINDOW_SECONDS):
            return kind in known.kinds
        document = self._fetch(path)
        kinds = frozenset(r.kind for r in resources_of(document) if not r.subresource) if document else frozenset()
        with self._lock:
            self._documents[path] = _Document(self._clock(), kinds)
            self._documents.move_to_end(path)
            while len(self._documents) > MAX_GROUP_VERSIONS:
                self._documents.popitem(last=False)
        return kind in kinds
