"""Kubernetes-style conditions: read as :class:`ConditionView`, written as plain dicts. Pure (the clock is a
parameter)."""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Literal

from opbroker.controller.core.views import ConditionView, condition_wire, conditions_of
from opbroker.kubeclient.wire import JsonBody

ConditionStatus = Literal["True", "False", "Unknown"]


def stamp(moment: datetime.datetime) -> str:
    """A condition's ``lastTransitionTime`` for ``moment`` (UTC, seconds)."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def with_condition(
    previous: object,
    *,
    type_: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    generation: int | None,
    timestamp: str,
) -> list[JsonBody]:
    """``previous`` (as read) with the condition ``type_`` replaced; its transition time (``timestamp``, the
    caller's clock's) moves only when it flips. The list is written whole (a status patch replaces it), so the
    kept conditions are written too."""
    held = conditions_of(previous)
    old = find(held, type_)
    flipped = old is None or old.status != status
    condition: JsonBody = {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message[:1024],
        "lastTransitionTime": timestamp if flipped or old is None else old.last_transition_time,
        "observedGeneration": generation,
    }
    return [*(condition_wire(c) for c in held if c.type != type_), condition]


def find(conditions: Iterable[ConditionView], type_: str) -> ConditionView | None:
    return next((c for c in conditions if c.type == type_), None)


def same(first: object, second: object) -> bool:
    """Whether two condition lists (as read or as built) are equal ignoring order and transition times (so an
    unchanged status is never re-written)."""

    def canonical(listed: object) -> list[tuple[str, str, str, str, int]]:
        return sorted(
            (c.type, c.status, c.reason or "", c.message or "", _generation(c.observed_generation))
            for c in conditions_of(listed)
        )

    return canonical(first) == canonical(second)


def _generation(observed: int | None) -> int:
    """An observed generation, sortable (-1: none)."""
    return -1 if observed is None else observed
