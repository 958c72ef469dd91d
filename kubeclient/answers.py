"""Typed views of the official client's answers.

The client annotates custom-object answers as ``object`` (they are the decoded JSON) and its ``watch`` module
has no annotations at all; the broker and the controller read both through these.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from kubernetes import watch

from opbroker.kubeclient import jsontext


def json_object(answer: object) -> dict[str, Any]:
    """A custom-object API answer as the JSON object it is."""
    if not isinstance(answer, dict):
        raise TypeError(f"the Kubernetes API answered a {type(answer).__name__}, not a JSON object")
    return answer


class _DecodedOnce(watch.Watch):
    """The client's watch, decoding each event line once.

    For a custom object the client decodes the line, encodes the object again and decodes that (its generic
    ``deserialize`` into the ``object`` type, which is the same dict): three passes over every event, for each
    of the broker's namespace-index watches, where one will do (issue 31). Same event otherwise: ``object`` and
    ``raw_object`` hold the object, and the resourceVersion to resume from is kept as the client keeps it.
    """

    def unmarshal_event(self, data: str, return_type: Any) -> dict[str, Any] | None:
        if not data or data.isspace():
            return None
        try:
            event: dict[str, Any] = jsontext.loads(data)
        except json.JSONDecodeError:
            return None
        event["raw_object"] = obj = event.get("object")
        if event.get("type") != "ERROR" and isinstance(obj, dict):
            version = (obj.get("metadata") or {}).get("resourceVersion")
            if version:
                self.resource_version = version
        return event


class Watch:
    """``kubernetes.watch.Watch``, typed: events are ``{"type": ..., "object": {...}}`` for custom objects (the
    only watches made through it: each event is decoded once, see :class:`_DecodedOnce`)."""

    def __init__(self) -> None:
        self._watch: Any = _DecodedOnce()  # type: ignore[no-untyped-call]

    def stream(self, list_call: Callable[..., object], *args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        events: Iterator[dict[str, Any]] = self._watch.stream(list_call, *args, **kwargs)
        return events

    def stop(self) -> None:
        self._watch.stop()
