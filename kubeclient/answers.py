"""Typed views of the official client's answers.

The client annotates custom-object answers as ``object`` (they are the decoded JSON) and its ``watch`` module
has no annotations at all; the broker and the controller read both through these.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from kubernetes import watch


def json_object(answer: object) -> dict[str, Any]:
    """A custom-object API answer as the JSON object it is."""
    if not isinstance(answer, dict):
        raise TypeError(f"the Kubernetes API answered a {type(answer).__name__}, not a JSON object")
    return answer


class Watch:
    """``kubernetes.watch.Watch``, typed: events are ``{"type": ..., "object": {...}}`` for custom objects."""

    def __init__(self) -> None:
        self._watch: Any = watch.Watch()

    def stream(self, list_call: Callable[..., object], *args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        events: Iterator[dict[str, Any]] = self._watch.stream(list_call, *args, **kwargs)
        return events

    def stop(self) -> None:
        self._watch.stop()
