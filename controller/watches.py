"""The controller's watches, declared: each subsystem lists the resources it watches and where their events go.

A :class:`Watch` says which resource (API version and plural), which method takes its events, and whether that
method needs the whole object or only its identity (``metadata_only``: the workloads claims project into are
watched for their labels, never their specs). :func:`register` turns the lists into kopf event handlers, the
same way for every subsystem — the only place that knows kopf's handler signature, and the one place a
new kind's watch is added (a line in its subsystem's ``watches()``).

Each handler gets the event type (``ADDED``, ``MODIFIED``, ``DELETED``) and a plain copy of the body that is
its own (kopf reuses its bodies); it enqueues the keys the event concerns (the object's own, and those of the
objects that depend on it) and keeps the subsystem's indexes current.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import kopf

from opbroker.controller.kopfparts import copy_json, plain_body
from opbroker.controller.kube import Kind

Handler = Callable[[str, dict[str, Any]], None]
"""Takes one watch event: its type and the body (a copy of its own)."""


@dataclass(frozen=True)
class Watch:
    """One watched resource and where its events go."""

    api_version: str
    """``group/version``, or ``v1`` for the core group."""
    plural: str
    handler: Handler
    id: str
    """Unique among all watches: kopf keys its handlers by id, and a resource may be watched by several
    subsystems (SFServiceBindings: the controller and the claims)."""
    metadata_only: bool = False
    """The handler gets ``apiVersion``, ``kind`` and ``metadata`` only (no copy of spec or status is made)."""

    @classmethod
    def of(cls, kind: Kind, handler: Handler, *, id: str, metadata_only: bool = False) -> Watch:
        """The watch of one of the controller's :class:`~.kube.Kind` resources."""
        return cls(f"{kind.group}/{kind.version}", kind.plural, handler, id, metadata_only)

    @property
    def group_version(self) -> tuple[str, str]:
        group, _, version = self.api_version.rpartition("/")
        return group, version


def register(registry: kopf.OperatorRegistry, watches: Iterable[Watch]) -> None:
    """Add one kopf event handler per watch; ids must be unique (a repeat would silently replace a handler)."""
    seen: set[str] = set()
    for watch in watches:
        if watch.id in seen:
            raise ValueError(f"two watches are declared with the id {watch.id!r}")
        seen.add(watch.id)
        group, version = watch.group_version
        kopf.on.event(group, version, watch.plural, registry=registry, id=watch.id)(_handler(watch))


def body_for(watch: Watch, body: Any) -> dict[str, Any]:
    """What ``watch``'s handler gets of a kopf body: a plain copy, whole or its identity only."""
    if not watch.metadata_only:
        return plain_body(body)
    metadata: dict[str, Any] = copy_json(dict(body.get("metadata") or {}))
    return {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"), "metadata": metadata}


def _handler(watch: Watch) -> Callable[..., Any]:
    async def on_event(event: dict[str, Any], body: Any, **_: Any) -> None:
        watch.handler(str(event.get("type")), body_for(watch, body))

    return on_event
