"""What the broker answered, as values: the instance and binding answers and ``last_operation``.

Frozen so reconcilers can keep and compare them; credentials stay out of ``repr`` (they end up in logs
otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

#: ``last_operation`` states, OSB's spelling.
IN_PROGRESS: Final = "in progress"
SUCCEEDED: Final = "succeeded"
FAILED: Final = "failed"
STATES: Final = (IN_PROGRESS, SUCCEEDED, FAILED)


@dataclass(frozen=True)
class InstanceResult:
    """Answer to provision, update or deprovision: 200/201 done, 202 in progress (poll ``operation``), 410
    already gone (deprovision)."""

    status: int
    operation: str | None = None
    dashboard_url: str | None = None
    metadata: dict[str, Any] | None = None
    """OSB 2.16+ instance metadata (``labels``, ``attributes``), when the broker returned it."""
    warnings: tuple[str, ...] = ()
    """Optional fields of the answer that were dropped (wrong type), each naming the field."""

    @property
    def is_async(self) -> bool:
        return self.status == 202

    @property
    def gone(self) -> bool:
        return self.status == 410


@dataclass(frozen=True)
class BindingResult:
    """Answer to bind, unbind or a binding fetch."""

    status: int
    operation: str | None = None
    credentials: dict[str, Any] | None = field(default=None, repr=False)
    syslog_drain_url: str | None = None
    route_service_url: str | None = None
    volume_mounts: list[Any] | None = None
    endpoints: list[Any] | None = None
    parameters: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    """OSB 2.16+ binding metadata (``expires_at``, ``renew_before``), when the broker returned it."""
    warnings: tuple[str, ...] = ()
    """Optional fields of the answer that were dropped (wrong type), each naming the field (never a value of
    the credentials: their field is dropped whole)."""

    @property
    def is_async(self) -> bool:
        return self.status == 202

    @property
    def gone(self) -> bool:
        return self.status == 410


@dataclass(frozen=True)
class LastOperation:
    """Answer to a ``last_operation`` poll; ``gone`` when the broker said 410 (a finished delete).
    ``retry_after``: seconds the broker asked to wait before the next poll."""

    state: str
    description: str | None = None
    retry_after: float | None = None
    gone: bool = False
    warnings: tuple[str, ...] = ()

    @property
    def done(self) -> bool:
        return self.gone or self.state in (SUCCEEDED, FAILED)
