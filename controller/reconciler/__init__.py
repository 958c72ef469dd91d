"""The controller's one reconcile framework: keys, outcomes, the error table, per-key memory, the clock,
the runtime.

Every kind the controller reconciles plugs in here as an :class:`ObservePlanAct` reconciler; see
:mod:`.runtime` for what the framework owns and :mod:`.kinds` for what a kind supplies.
"""

from opbroker.controller.reconciler.clock import SYSTEM, Clock, FakeClock, SystemClock
from opbroker.controller.reconciler.failures import Failure, Handling, classify, namespace_terminating
from opbroker.controller.reconciler.keys import Key
from opbroker.controller.reconciler.kinds import ObservePlanAct, Reconciler
from opbroker.controller.reconciler.memory import Forgetful, Memories, PerKey
from opbroker.controller.reconciler.outcomes import DONE, Conflict, Outcome, TemporaryError, requeue
from opbroker.controller.reconciler.runtime import Runtime

__all__ = [
    "DONE",
    "SYSTEM",
    "Clock",
    "Conflict",
    "Failure",
    "FakeClock",
    "Forgetful",
    "Handling",
    "Key",
    "Memories",
    "ObservePlanAct",
    "Outcome",
    "PerKey",
    "Reconciler",
    "Runtime",
    "SystemClock",
    "TemporaryError",
    "classify",
    "namespace_terminating",
    "requeue",
]
