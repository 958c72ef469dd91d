"""Conditions: the one place a condition is built and a conditions list is written back.

A status patch replaces the whole ``conditions`` list, so every writer of one condition writes the others back as
read; and a condition's ``lastTransitionTime`` moves only when its status flips. Ready (operations, catalog
entries, Service Catalog objects), Paused and Synced are all written through :func:`with_conditions`.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.views import ConditionView, Meta, condition_wire
from opbroker.kubeclient.wire import JsonBody

MESSAGE_LIMIT = 1024
"""A condition's message is cut here: an operator's error can be long, and the object has a size limit."""


def stamp(at: datetime.datetime) -> str:
    """``at`` as Kubernetes writes a time (the caller's clock read it: a pure core reads none)."""
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Condition:
    """A condition to show: type, status, reason, message."""

    type: str
    ok: bool
    reason: Reason
    message: str


def condition(change: Condition, old: ConditionView | None, generation: int | None, at: datetime.datetime) -> JsonBody:
    """``change`` as written, replacing ``old`` (None: none yet): its transition time moves only on a flip."""
    value = "True" if change.ok else "False"
    moved = old is None or old.status != value
    return {
        "type": change.type,
        "status": value,
        "reason": change.reason.value,
        "message": change.message[:MESSAGE_LIMIT],
        "lastTransitionTime": stamp(at) if moved or old is None else old.last_transition_time,
        "observedGeneration": generation,
    }


def with_conditions(
    previous: Sequence[ConditionView],
    changes: Sequence[Condition],
    generation: int | None,
    at: datetime.datetime,
) -> list[JsonBody]:
    """The conditions list with ``changes`` set (at the end) and every other condition written back as read."""
    types = {c.type for c in changes}
    kept = [condition_wire(c) for c in previous if c.type not in types]
    olds = {c.type: c for c in reversed(previous)}  # the first of a type wins, as ``condition(type)`` reads it
    return [*kept, *(condition(c, olds.get(c.type), generation, at) for c in changes)]


class _HeldConditions(Protocol):
    @property
    def conditions(self) -> tuple[ConditionView, ...]: ...

    def condition(self, type_: str) -> ConditionView | None: ...


class Conditioned(Protocol):
    """What :func:`shows` and :func:`conditions_patch` read of an object: its metadata and its conditions (an
    SFServiceInstance's, an SFServiceBinding's, a Service Catalog Instance's)."""

    @property
    def meta(self) -> Meta: ...

    @property
    def status(self) -> _HeldConditions: ...


SYNCED_CONDITION = "Synced"


def shows(view: Conditioned, wanted: Condition) -> bool:
    """Whether the status shows ``wanted`` already. An absent Synced is as good as a True one: an instance that has
    never drifted is not written to say so (20 000 settled instances cost no write)."""
    found = view.status.condition(wanted.type)
    if found is None:
        return wanted.ok and wanted.type == SYNCED_CONDITION
    if wanted.ok:
        return found.status == "True"
    said = found.reason == wanted.reason.value and found.message == wanted.message[:MESSAGE_LIMIT]
    return found.status == "False" and said


def conditions_patch(view: Conditioned, changes: Sequence[Condition], at: datetime.datetime) -> JsonBody:
    """The status patch that sets ``changes`` and writes every other condition back as read."""
    return {"conditions": with_conditions(view.status.conditions, changes, view.meta.generation, at)}
