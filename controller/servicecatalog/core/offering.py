"""What an Instance or Binding refers to, resolved (class, plan, broker), or why it could not be.

Values only; the reads that resolve them are ``servicecatalog.common.Resolver``'s.
"""

from __future__ import annotations

from dataclasses import dataclass

from opbroker import osbclient
from opbroker.controller.core.reasons import Reason
from opbroker.controller.servicecatalog.core.views import PlanEntry, ServiceClassView


class Unresolved(ValueError):
    """Something the object refers to is missing or unusable; ``reason`` names what, for its condition."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


#: Why an operation under way cannot go on when nothing else said why: its class (or the class's broker) cannot be
#: read. Polling and orphan mitigation wait for it to return.
NO_OFFERING = Unresolved(
    Reason.REFERENCES_NON_EXISTENT_CLASS,
    "an operation is under way but its ServiceClass (or that class's Broker) cannot be read: nothing can be sent "
    "to the broker until it is back",
)


@dataclass(frozen=True)
class Offering:
    """The class, plan and broker an Instance uses, resolved."""

    service_class: ServiceClassView
    plan: PlanEntry
    broker: osbclient.Broker

    @property
    def service_id(self) -> str:
        return self.service_class.external_id

    @property
    def plan_id(self) -> str:
        return self.plan.external_id
