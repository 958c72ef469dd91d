"""Configuration of the claims subsystem: one frozen value, read from the environment.

The controller's CLI sets these variables from its flags (``--sla-order``, ``--catalog-environment``), and
a Deployment can set them directly:

``OPBROKER_CLAIMS_SLA_ORDER``        SLA names best first, comma-separated (default ``L1,L2,L3``)
``OPBROKER_CLAIMS_ENVIRONMENTS``     environments that always get a catalog, comma-separated (default none)
``OPBROKER_CLAIMS_BINDING_ROOT``     ``SERVICE_BINDING_ROOT`` for workloads that set none (default ``/bindings``)
``OPBROKER_CLAIMS_PROBE_TIMEOUT``    upper bound of one TCP/HTTP probe in seconds (default 5)
``OPBROKER_CLAIMS_WORKERS``          concurrent claims reconciles (default 4)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from opbroker.controller.claims.matching import DEFAULT_SLA_ORDER, SlaOrder
from opbroker.controller.claims.workloads import DEFAULT_BINDING_ROOT

ENV_SLA_ORDER = "OPBROKER_CLAIMS_SLA_ORDER"
ENV_ENVIRONMENTS = "OPBROKER_CLAIMS_ENVIRONMENTS"
ENV_BINDING_ROOT = "OPBROKER_CLAIMS_BINDING_ROOT"
ENV_PROBE_TIMEOUT = "OPBROKER_CLAIMS_PROBE_TIMEOUT"
ENV_WORKERS = "OPBROKER_CLAIMS_WORKERS"


DEFAULT_ORDER = SlaOrder(DEFAULT_SLA_ORDER)


def _names(raw: str | None) -> tuple[str, ...]:
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
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> ClaimsSettings:
        env = os.environ if environ is None else environ
        order = _names(env.get(ENV_SLA_ORDER)) or DEFAULT_SLA_ORDER
        return cls(
            sla_order=SlaOrder(order),
            environments=_names(env.get(ENV_ENVIRONMENTS)),
            binding_root=env.get(ENV_BINDING_ROOT) or DEFAULT_BINDING_ROOT,
            probe_timeout=float(env.get(ENV_PROBE_TIMEOUT) or 5.0),
            workers=int(env.get(ENV_WORKERS) or 4),
        )


def export(*, sla_order: str | None, environments: list[str] | None) -> None:
    """Hand CLI flags to :meth:`ClaimsSettings.from_environ` (the controller reads them at start)."""
    if sla_order:
        os.environ[ENV_SLA_ORDER] = sla_order
    if environments:
        os.environ[ENV_ENVIRONMENTS] = ",".join(environments)
