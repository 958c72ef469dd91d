"""Kubernetes-style conditions on plain status dicts. Pure (the clock is a parameter)."""

from __future__ import annotations

import datetime
from typing import Any, Literal

ConditionStatus = Literal["True", "False", "Unknown"]


def now() -> str:
    return stamp(datetime.datetime.now(datetime.UTC))


def stamp(moment: datetime.datetime) -> str:
    """A condition's ``lastTransitionTime`` for ``moment`` (UTC, seconds)."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def with_condition(
    previous: list[dict[str, Any]] | None,
    *,
    type_: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    generation: int | None,
    timestamp: str | None = None,
) -> list[dict[str, Any]]:
    """``previous`` with the condition ``type_`` replaced; its transition time moves only when it flips."""
    old = next((c for c in previous or [] if c.get("type") == type_), None)
    flipped = old is None or old.get("status") != status
    condition = {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message[:1024],
        "lastTransitionTime": (timestamp or now()) if flipped or old is None else old.get("lastTransitionTime"),
        "observedGeneration": generation,
    }
    return [*(c for c in previous or [] if c.get("type") != type_), condition]


def find(conditions: list[dict[str, Any]] | None, type_: str) -> dict[str, Any] | None:
    return next((c for c in conditions or [] if c.get("type") == type_), None)


def same(first: list[dict[str, Any]] | None, second: list[dict[str, Any]] | None) -> bool:
    """Equal ignoring order and transition times (so an unchanged status is never re-written)."""

    def canonical(conditions: list[dict[str, Any]] | None) -> list[tuple[Any, ...]]:
        return sorted(
            (c.get("type"), c.get("status"), c.get("reason"), c.get("message"), c.get("observedGeneration"))
            for c in conditions or []
        )

    return canonical(first) == canonical(second)
