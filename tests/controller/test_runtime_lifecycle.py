"""The controller's process lifecycle (:mod:`opbroker.controller.runtime.lifecycle`): the loop runs the controller
until a stop is asked from any thread (a signal handler), stops it with the drain time, and says when it is done —
the leader releases its Lease only then. The process around it (signals, the Lease, exit codes) is tested on a real
API server in ``test_shutdown.py``."""

from __future__ import annotations

import asyncio
import threading

from opbroker.controller.runtime import health
from opbroker.controller.runtime.lifecycle import Shutdown, operate


class Recorded:
    """A controller that records what the loop does with it."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.started = threading.Event()

    async def start(self) -> None:
        self.calls.append("start")
        self.started.set()

    async def stop(self, drain: float) -> None:
        self.calls.append(f"stop {drain}")


def test_a_stop_asked_from_another_thread_stops_the_controller_with_the_drain_time() -> None:
    controller = Recorded()
    shutdown = Shutdown()
    state = health.Health()
    loop = asyncio.new_event_loop()
    runner = threading.Thread(
        target=loop.run_until_complete, args=(operate(controller, shutdown, state=state, drain=3.0),)
    )
    runner.start()
    try:
        assert controller.started.wait(10) and state.phase is health.Phase.RUNNING
        runner.join(0.2)
        assert runner.is_alive() and controller.calls == ["start"]  # runs until asked
        assert shutdown.request("received SIGTERM")
        assert not shutdown.request("received SIGTERM")  # asked once; a second signal is the caller's to handle
        runner.join(10)
        assert not runner.is_alive()
    finally:
        runner.join(10)
        loop.close()
    assert controller.calls == ["start", "stop 3.0"]
    assert state.liveness() == (False, "stopped: received SIGTERM")


def test_a_stop_asked_before_the_loop_runs_stops_it_right_after_the_start() -> None:
    controller = Recorded()
    shutdown = Shutdown()
    shutdown.request("received SIGINT")
    asyncio.run(operate(controller, shutdown, state=health.Health(), drain=0.0))
    assert controller.calls == ["start", "stop 0.0"]


def test_a_controller_that_fails_to_start_ends_the_loop_unasked() -> None:
    class Broken(Recorded):
        async def start(self) -> None:
            raise RuntimeError("no catalog")

    shutdown = Shutdown()
    state = health.Health()
    try:
        asyncio.run(operate(Broken(), shutdown, state=state, drain=1.0))
    except RuntimeError as exc:
        assert str(exc) == "no catalog"
    else:
        raise AssertionError("the failure must reach the process, which exits non-zero")
    assert not shutdown.requested
    assert state.liveness() == (False, "the controller's loop has ended")
