"""The controller's watches, declared: each subsystem lists the resources it watches and where their events go.

A :class:`Watch` says which resource (API version and plural), which method takes its events, and whether that
method needs the whole object or only its identity (``metadata_only``: the workloads claims project into are
watched for their labels, never their specs). :mod:`opbroker.controller.runtime.informers` runs them, the same way for
every subsystem; a new kind's watch is a line in its subsystem's ``watches()``.

Each handler gets the event type (``ADDED``, ``MODIFIED``, ``DELETED``) and a body that is its own; it enqueues
the keys the event concerns (the object's own, and those of the objects that depend on it) and keeps the
subsystem's indexes current.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from opbroker.controller.runtime.kube import Kind
from opbroker.kubeclient.wire import JsonBody

Handler = Callable[[str, JsonBody], None]
"""Takes one watch event: its type and the body (a copy of its own)."""


@dataclass(frozen=True)
class Watch:
    """One watched resource and where its events go."""

    api_version: str
    """``group/version``, or ``v1`` for the core group."""
    plural: str
    handler: Handler
    id: str
    """Unique among all watches (named in logs): a resource may be watched by several subsystems
    (SFServiceBindings: the controller and the claims), one stream feeding each."""
    metadata_only: bool = False
    """The handler gets ``apiVersion``, ``kind`` and ``metadata`` only (no copy of spec or status is made)."""
    kind: str | None = None
    """The resource's kind: required of a metadata-only watch (the API server's partial objects do not say it)."""
    label_selector: str | None = None
    """Only the objects whose labels match (a shard's instances and bindings, issue 46); None: every object. Watches
    of one resource with different selectors are streams of their own."""

    @classmethod
    def of(
        cls, kind: Kind, handler: Handler, *, id: str, metadata_only: bool = False, label_selector: str | None = None
    ) -> Watch:
        """The watch of one of the controller's :class:`~.kube.Kind` resources."""
        return cls(
            f"{kind.group}/{kind.version}", kind.plural, handler, id, metadata_only, label_selector=label_selector
        )

    @property
    def group_version(self) -> tuple[str, str]:
        group, _, version = self.api_version.rpartition("/")
        return group, version
