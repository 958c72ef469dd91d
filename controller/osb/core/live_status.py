"""Live status (issue 43): what the plan's status template says of a settled instance, shown without rewriting
OSB history.

Once an operation has succeeded, ``state`` and ``lastOperation`` keep describing that operation: an OSB platform
asked for it and was answered. What the operator reports afterwards — a database down, then up again — is the
instance's *health*: the ``Ready`` condition says it (True; False with the operator's words), an Event marks every
change of it, and the ``opbroker_instance_health`` metric counts instances by it.

Pure, and debounced: an operator that flaps between healthy and failing would otherwise turn every flap into a
status write and an Event. At most one change is written per ``min_seconds`` per instance (the time of the last
one comes from the reconciler's memory); a change that comes sooner waits, and what is written then is the verdict
of that moment, so a flap that ends inside the interval writes nothing at all.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from enum import StrEnum

from opbroker.api.osb import OperationState
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.views import ConditionView
from opbroker.rendering.status import SectionStatus


class Health(StrEnum):
    """The instance's health, as the metric counts it."""

    READY = "ready"
    UNREADY = "unready"
    UNKNOWN = "unknown"
    """The plan has no status template, or it said nothing of a settled instance: only drift is looked after."""


@dataclass(frozen=True)
class Verdict:
    """What the status template says of a settled instance now, as the Ready condition would say it."""

    health: Health
    reason: Reason
    message: str

    @property
    def ready(self) -> bool:
        return self.health is Health.READY


def verdict_of(section: SectionStatus | None) -> Verdict | None:
    """The ``provision`` section's verdict on a settled instance (None: it says nothing — no section)."""
    if section is None:
        return None
    if section.state == OperationState.SUCCEEDED:
        return Verdict(Health.READY, Reason.HEALTHY_AGAIN, section.description or "the operator reports it ready")
    if section.state == OperationState.FAILED:
        message = section.error or section.description or "the operator reports a failure"
        return Verdict(Health.UNREADY, Reason.UNHEALTHY, message)
    message = section.description or "the operator reports it in progress"
    return Verdict(Health.UNREADY, Reason.PROGRESSING, message)


def shown(ready: ConditionView | None, verdict: Verdict) -> bool:
    """Whether the Ready condition says ``verdict`` already: same status, and — while not ready — the same reason
    and message (a healthy instance's Ready keeps whatever reason its operation gave it)."""
    if ready is None:
        return False
    if verdict.ready:
        return ready.status == "True"
    return ready.status == "False" and ready.reason == verdict.reason.value and ready.message == verdict.message[:1024]


@dataclass(frozen=True)
class Change:
    """What to do about the verdict: write it (``write``), or look again after ``wait`` seconds (debounced)."""

    write: bool
    wait: float = 0.0


def change(
    ready: ConditionView | None,
    verdict: Verdict,
    *,
    last_write: datetime.datetime | None,
    now: datetime.datetime,
    min_seconds: float,
) -> Change | None:
    """None when Ready shows the verdict already; else write it now, or wait for the rest of ``min_seconds`` since
    the last live-status write (``last_write``)."""
    if shown(ready, verdict):
        return None
    if last_write is not None:
        since = (now - last_write).total_seconds()
        if 0 <= since < min_seconds:
            return Change(write=False, wait=min_seconds - since)
    return Change(write=True)
