"""A scripted Kubernetes API for informers (a fake :class:`~opbroker.kubeclient.informer.Source`): listings and
watches answered in the order a test wrote them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

from opbroker.kubeclient.informer import Collection, Informer
from opbroker.osbclient import Backoff

NO_WAIT = Backoff(base=1e-6, maximum=1e-6, max_duration=float("inf"))
"""An informer's retry that does not wait (a scripted failure is retried at once)."""


def event(kind: str, obj: Mapping[str, Any]) -> bytes:
    """One line of a watch stream."""
    return json.dumps({"type": kind, "object": obj}).encode()


class ScriptedStream:
    """A watch's lines; ``finished``: read to its end (else left mid-stream), ``closed``: given back."""

    def __init__(self, lines: list[bytes], source: Scripted) -> None:
        self._lines, self._source = lines, source
        self.finished = self.closed = False

    async def lines(self, limit: int) -> AsyncIterator[bytes]:
        for line in self._lines:
            yield line
        self.finished = True
        self._source.after_watch(self)

    async def aclose(self) -> None:
        self.closed = True


class Scripted:
    """Listings and watches played in order; each item of ``script`` answers one request: a list of objects (a
    listing, paged by the collection), a list of event lines (a watch), or an exception raised. When the script
    ends, every informer in ``informers`` is stopped (a test sets it)."""

    def __init__(self, script: list[tuple[str, Any]]) -> None:
        self.script = script
        self.requests: list[tuple[str, Any]] = []
        self.informers: list[Informer] = []
        self.streams: list[ScriptedStream] = []
        self.collections: list[Collection] = []
        """The collection of each request, in order."""
        self._listing: list[dict[str, Any]] = []

    def _next(self, what: str) -> Any:
        if not self.script:
            for informer in self.informers:
                informer.stop()
            raise ConnectionError("the script is over")
        expected, answer = self.script.pop(0)
        assert expected == what, f"the informer asked for a {what}, the script has a {expected} next"
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def page(self, collection: Collection, token: str | None) -> Mapping[str, Any]:
        self.requests.append(("list", token))
        self.collections.append(collection)
        if token is None:
            self._listing = self._next("list")
        start = int(token or 0)
        items = self._listing[start : start + collection.page]
        meta: dict[str, Any] = {"resourceVersion": "100"}
        if start + collection.page < len(self._listing):
            meta["continue"] = str(start + collection.page)
        return {"kind": f"{collection.kind or 'Pod'}List", "items": items, "metadata": meta}

    async def watch(self, collection: Collection, since: str | None, seconds: int) -> ScriptedStream:
        self.requests.append(("watch", since))
        self.collections.append(collection)
        stream = ScriptedStream(self._next("watch"), self)
        self.streams.append(stream)
        return stream

    def after_watch(self, stream: ScriptedStream) -> None:
        """A watch the server ended: nothing to do (the informer watches again)."""
