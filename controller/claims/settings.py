"""Configuration of the claims subsystem: one frozen value, part of the controller's settings.

The controller's CLI builds it from its flags (``--sla-order``, ``--catalog-environment``) into
:attr:`opbroker.controller.settings.ControllerSettings.claims`; nothing is read from the environment.
"""

from __future__ import annotations

from dataclasses import dataclass

from opbroker.controller.claims.core.matching import DEFAULT_SLA_ORDER, SlaOrder
from opbroker.controller.claims.workloads import DEFAULT_BINDING_ROOT

DEFAULT_ORDER = SlaOrder(DEFAULT_SLA_ORDER)


def names(raw: str | None) -> tuple[str, ...]:
    """Comma-separated names, trimmed, empty ones and repeats dropped, first occurrence kept."""
    return tuple(dict.fromkeys(part.strip() for part in (raw or "").split(",") if part.strip()))


@dataclass(frozen=True)
class ClaimsSettings:
    sla_order: SlaOrder = DEFAULT_ORDER
    environments: tuple[str, ...] = ()
    binding_root: str = DEFAULT_BINDING_ROOT
    probe_timeout: float = 5.0
    workers: int = 4
    candidates_shown: int = 50
    """At most this many entries in a claim's ``status.candidates`` (accepted first)."""

    @classmethod
    def from_flags(cls, *, sla_order: str | None, environments: list[str] | None) -> ClaimsSettings:
        """The settings the controller's ``--sla-order`` and ``--catalog-environment`` flags ask for."""
        return cls(
            sla_order=SlaOrder(names(sla_order) or DEFAULT_SLA_ORDER),
            environments=names(",".join(environments or ())),
        )
