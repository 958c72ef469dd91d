"""The effects of the Service Catalog kinds' own actions (:mod:`.core.calls`), for the one executor.

Each performs its action and decides nothing: a :class:`~.core.calls.Call` sends its request through the shared
``osbclient`` client of its broker and hands the answer (or the error it raised) to the call's pure
continuation, performing the actions that returns; a :class:`~.core.calls.KeepPacing` stores the key's pacing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opbroker import osbclient
from opbroker.controller.runtime.executor import Effect, Run
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.memory import Memories, PerKey
from opbroker.controller.servicecatalog.common import Clients
from opbroker.controller.servicecatalog.core.calls import Call, KeepPacing, Pacing
from opbroker.controller.servicecatalog.core.live import KeepLook


class Looks:
    """When each Instance was last looked at at its broker (day two, :mod:`.core.live`), monotonic seconds; lost on
    a restart (the first look then comes one resync period on)."""

    def __init__(self, memories: Memories) -> None:
        self._looks: PerKey[float] = memories.keep(PerKey())

    def of(self, key: Key) -> float | None:
        return self._looks.get(key)

    def keep(self, key: Key, at: float) -> None:
        self._looks.put(key, at)


class Paces:
    """Each key's :class:`Pacing`, between reconciles (forgotten with the key)."""

    def __init__(self, memories: Memories) -> None:
        self._paces: PerKey[Pacing] = memories.keep(PerKey())

    def of(self, key: Key) -> Pacing:
        return self._paces.get(key) or Pacing()

    def keep(self, key: Key, pacing: Pacing) -> None:
        self._paces.put(key, pacing)


#: The client method each :attr:`Call.method` names: an explicit table, so a call the client has no method for (a
#: typo in a plan) fails loudly instead of reaching any attribute of the client.
METHODS: dict[str, Callable[[osbclient.Client], Callable[..., Any]]] = {
    "provision": lambda client: client.provision,
    "update": lambda client: client.update,
    "deprovision": lambda client: client.deprovision,
    "last_operation": lambda client: client.last_operation,
    "get_instance": lambda client: client.get_instance,
    "bind": lambda client: client.bind,
    "get_binding": lambda client: client.get_binding,
    "binding_last_operation": lambda client: client.binding_last_operation,
    "unbind": lambda client: client.unbind,
}


def effects(
    clients: Clients, transport: Callable[[], Any], paces: Paces, looks: Looks | None = None
) -> dict[type, Effect]:
    """The effects of the calls, the pacing and the looks (``looks``: an Instance's, :mod:`.core.live`);
    ``transport``: the HTTP transport (tests pass one in)."""

    def call(run: Run, action: Call) -> None:
        method = METHODS[action.method](clients.get(action.broker, transport()))
        answer: Any
        try:
            answer = method(*action.args, **action.kwargs)
        except osbclient.BrokerError as exc:
            answer = exc
        if action.then is not None:
            for follow in action.then(answer, run.body):
                run.perform(follow)

    def keep(run: Run, action: KeepPacing) -> None:
        paces.keep(run.key, action.pacing)

    def keep_look(run: Run, action: KeepLook) -> None:
        if looks is not None:
            looks.keep(run.key, action.at)

    return {Call: call, KeepPacing: keep, KeepLook: keep_look}
