"""The kopf settings that fit a controller whose handlers are all ``kopf.on.event``.

kopf computes, for every watch event of every watched kind, the "essence" of the object (a deep copy of
it, then pruned) and diffs it against the last handled one — the base of ``on.create``/``on.update``
handlers. This controller registers none: every handler is an event handler that enqueues a key, and
reconciles compare what they need themselves. Measured while provisioning, the essence alone was 7% of
the controller's CPU. ``EventsOnlyDiffBase`` makes it empty; it must be replaced by kopf's own storage if
a changing handler (``on.create``, ``on.update``, ``on.field``, ``on.resume``, ``on.delete``) is ever added —
``events_only`` checks exactly that at startup.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import kopf


class EventsOnlyDiffBase(kopf.DiffBaseStorage):
    """No essences, no diff bases: nothing reads them when all handlers are event handlers."""

    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


def events_only(registry: kopf.OperatorRegistry) -> bool:
    """True if no resource has a changing handler (the only users of the diff base)."""
    return not any(registry._changing.get_all_handlers())


def plain_body(body: Any) -> dict[str, Any]:
    """A kopf Body as a plain, mutable dict of our own (kopf reuses its bodies)."""
    plain: dict[str, Any] = copy_json(dict(body))
    return plain


def copy_json(value: Any) -> Any:
    """A deep copy of JSON-shaped data (dicts, lists, scalars): a few times faster than ``copy.deepcopy``,
    which keeps a memo for shared and cyclic references that objects from the API never have."""
    if isinstance(value, dict):
        return {key: copy_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [copy_json(item) for item in value]
    return value
