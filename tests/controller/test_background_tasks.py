"""The controller's timers are asyncio tasks on its loop, their blocking calls in the loop's pool (issue 45): the
admin requests' pass and its rollouts, namespace onboarding, the webhook's start and refresh. Each runs on a
:class:`FakeClock` (no wall-clock pause decides anything here), and each ends with its owner's stop; and the pool has
a thread for each of them beyond the reconciles'.

The blocking calls run in real pool threads, so a test waits for them with :func:`settled` (bounded by a real
deadline, never decided by one)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from opbroker.api import adminrequests as wire
from opbroker.controller.catalog.admin_requests import AdminRequests
from opbroker.controller.catalog.core.rollout_views import AdminRequestView
from opbroker.controller.onboarding import NamespaceOnboarder
from opbroker.controller.runtime.clock import FakeClock
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.outcomes import DONE, Outcome
from opbroker.controller.runtime.policies import DEFAULTS
from opbroker.controller.runtime.runner import BACKGROUND_THREADS, ROLLOUTS_AT_ONCE, Runtime
from opbroker.controller.servicecatalog import webhook
from opbroker.controller.servicecatalog.handlers import ServiceCatalog
from opbroker.controller.settings import ControllerSettings
from tests.fake_kube import FakeKube
from tests.loop_support import settled
from tests.servicecatalog.test_parameters import _Runtime

pytestmark = pytest.mark.unit

NAMESPACE = "opbroker"


# -- admin requests -------------------------------------------------------------------------------------


class _ConfigMaps:
    """What the admin requests' pass lists: the request ConfigMaps, counted."""

    def __init__(self, bodies: list[dict[str, Any]]) -> None:
        self.bodies = bodies
        self.lists = 0

    def list_objects(self, _api_version: str, _kind: str, _namespace: str) -> list[dict[str, Any]]:
        self.lists += 1
        return list(self.bodies)


def _rollout(plan: str) -> dict[str, Any]:
    request = wire.RolloutRequest(plan=plan, requested_at="2026-01-01T00:00:00Z")
    return wire.configmap(wire.Kind.ROLLOUT, NAMESPACE, request)


def test_admin_requests_poll_on_the_clock_run_a_bounded_number_of_rollouts_and_stop_with_the_stop() -> None:
    clock = FakeClock()
    plans = [f"plan-{index}" for index in range(ROLLOUTS_AT_ONCE + 1)]
    kube = _ConfigMaps([_rollout(plan) for plan in plans])
    admin = AdminRequests(
        kube,  # type: ignore[arg-type]
        namespace=NAMESPACE,
        registry_namespace="registries",
        plan_user=lambda _plan: None,
        clock=clock,
    )
    started: list[str] = []
    release = {plan: threading.Event() for plan in plans}

    def roll_out(_obj: AdminRequestView, request: wire.RolloutRequest, _resumed: bool = False) -> None:
        """A rollout holding its pool thread until the test lets it end."""
        started.append(request.plan)
        assert release[request.plan].wait(10)

    admin.roll_out = roll_out  # type: ignore[method-assign]
    poll = DEFAULTS.admin_poll.base  # the longest a jittered poll waits

    async def next_pass(passes: int) -> None:
        clock.advance(poll)
        await settled(f"pass {passes}", lambda: kube.lists == passes and clock.waiting == 1)

    async def scenario() -> None:
        admin.start()
        await settled("the first wait", lambda: clock.waiting == 1)
        assert kube.lists == 0  # the first pass comes after a poll, as before
        await next_pass(1)
        await settled("the rollouts' start", lambda: len(started) == ROLLOUTS_AT_ONCE)
        await next_pass(2)
        assert sorted(started) == plans[:ROLLOUTS_AT_ONCE]  # one runner per name; the bound holds the last back
        release[plans[0]].set()
        kube.bodies.pop(0)  # answered: a later pass leaves it alone
        await settled("the first rollout's end", lambda: len(admin._running) == ROLLOUTS_AT_ONCE - 1)
        await next_pass(3)
        await settled("the waiting rollout's start", lambda: plans[-1] in started)
        assert len(started) == len(plans)

        running = list(admin._running.values())
        admin.stop()
        await settled("the stop", lambda: clock.waiting == 0 and all(task.done() for task in running))
        clock.advance(10 * poll)
        await asyncio.sleep(0.01)
        assert kube.lists == 3  # no pass after the stop
        for event in release.values():  # the rollouts' threads end as they always did: by themselves
            event.set()

    asyncio.run(scenario())


# -- namespace onboarding -------------------------------------------------------------------------------


def _namespace(name: str, tenant: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {"tenant": tenant}}}


def test_the_onboarder_drains_on_the_loop_retries_on_the_clock_and_stops_with_the_stop() -> None:
    clock = FakeClock()
    onboarder = NamespaceOnboarder(FakeKube(), NAMESPACE, "tenant=yes", retry_seconds=5.0, clock=clock)  # type: ignore[arg-type]
    synced: list[str] = []
    refusals = [ApiException(status=403)]

    def sync(name: str) -> None:
        """The first sync is refused (an RBAC grant not there yet), the rest succeed."""
        synced.append(name)
        if refusals:
            raise refusals.pop()

    onboarder.sync = sync  # type: ignore[method-assign]

    async def scenario() -> None:
        onboarder.start()
        # The watch's thread hands the name over.
        watch = threading.Thread(target=onboarder.on_namespace, args=("ADDED", _namespace("team-a", "yes")))
        watch.start()
        watch.join(10)
        await settled("the refused sync and its retry's wait", lambda: synced == ["team-a"] and clock.waiting == 1)
        clock.advance(4.0)
        await asyncio.sleep(0.01)
        assert synced == ["team-a"]  # not before retry_seconds
        clock.advance(1.0)
        await settled("the retry", lambda: synced == ["team-a", "team-a"])

        refusals.append(ApiException(status=403))
        onboarder.on_namespace("MODIFIED", _namespace("team-a", "no"))
        await settled("the next retry's wait", lambda: len(synced) == 3 and clock.waiting == 1)
        tasks = set(onboarder._tasks)
        assert len(tasks) == 2  # the draining task and the waiting retry
        onboarder.stop()
        await settled("the stop", lambda: all(task.done() for task in tasks) and clock.waiting == 0)
        clock.advance(60.0)
        onboarder.on_namespace("MODIFIED", _namespace("team-a", "yes"))
        await asyncio.sleep(0.01)
        assert len(synced) == 3  # nothing synced after the stop

    asyncio.run(scenario())


# -- the webhook ----------------------------------------------------------------------------------------


class _Server:
    """What ``keep_webhook`` uses of a started webhook: its start, and its refreshes until cancelled."""

    def __init__(self) -> None:
        self.started = False
        self.refreshing = False

    def start(self, _loop: asyncio.AbstractEventLoop) -> None:
        self.started = True

    async def refresh_forever(self) -> None:
        self.refreshing = True
        await asyncio.Event().wait()


def test_the_webhook_start_is_retried_on_the_clock_in_a_task_the_stop_cancels(monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = _Runtime()
    clock = runtime.clock
    catalog = ServiceCatalog(FakeKube(), runtime, control_plane=NAMESPACE, max_operation_seconds=60)  # type: ignore[arg-type]
    catalog.api.kube.api_client = None  # type: ignore[attr-defined]
    server = _Server()
    attempts: list[int] = []

    def made(*_args: object, **_kwargs: object) -> _Server:
        attempts.append(1)
        if len(attempts) == 1:
            raise ApiException(status=403)  # no grant on the certificate's Secret yet
        return server

    monkeypatch.setattr(webhook, "Webhook", made)
    settings = ControllerSettings(namespace=NAMESPACE, webhook_port=8443)

    async def scenario() -> None:
        catalog.serve_webhook(settings)  # on the loop: a task
        await settled("the retry's wait", lambda: len(attempts) == 1 and clock.waiting == 1)
        clock.advance(DEFAULTS.webhook_start.base)
        await settled("the start", lambda: server.refreshing)
        assert server.started and catalog.webhook is server
        task = catalog._webhook_task
        assert task is not None
        catalog.stop_webhook()
        await settled("the stop", task.done)
        assert task.cancelled()

    asyncio.run(scenario())


def test_a_failed_webhook_start_stops_retrying_with_the_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = _Runtime()
    catalog = ServiceCatalog(FakeKube(), runtime, control_plane=NAMESPACE, max_operation_seconds=60)  # type: ignore[arg-type]
    catalog.api.kube.api_client = None  # type: ignore[attr-defined]
    attempts: list[int] = []

    def refused(*_args: object, **_kwargs: object) -> _Server:
        attempts.append(1)
        raise ApiException(status=403)

    monkeypatch.setattr(webhook, "Webhook", refused)

    async def scenario() -> None:
        catalog.serve_webhook(ControllerSettings(namespace=NAMESPACE, webhook_port=8443))
        await settled("the retry's wait", lambda: runtime.clock.waiting == 1)
        catalog.stop_webhook()
        await settled("the stop", lambda: runtime.clock.waiting == 0)
        runtime.clock.advance(10 * DEFAULTS.webhook_start.base)
        await asyncio.sleep(0.01)
        assert len(attempts) == 1

    asyncio.run(scenario())


def test_the_webhook_refreshes_on_the_clock_until_cancelled() -> None:
    clock = FakeClock()
    hook = object.__new__(webhook.Webhook)  # what the refreshes use of it: no certificate, server or watch here
    hook._clock, hook._policies, hook._registered = clock, DEFAULTS, True
    refreshed: list[int] = []
    hook.refresh = lambda: refreshed.append(1)  # type: ignore[method-assign]

    async def scenario() -> None:
        task = asyncio.get_running_loop().create_task(hook.refresh_forever())
        await settled("the first wait", lambda: clock.waiting == 1)
        clock.advance(DEFAULTS.webhook_refresh.base)
        await settled("a refresh", lambda: refreshed == [1] and clock.waiting == 1)
        task.cancel()
        await settled("the stop", task.done)
        clock.advance(10 * DEFAULTS.webhook_refresh.base)
        await asyncio.sleep(0.01)
        assert refreshed == [1]

    asyncio.run(scenario())


# -- the one pool ---------------------------------------------------------------------------------------


class _Recording:
    """A reconciler that records the keys it reconciled."""

    kind = "thing"

    def __init__(self) -> None:
        self.reconciled: list[Key] = []

    def reconcile(self, key: Key) -> Outcome:
        self.reconciled.append(key)
        return DONE

    def reread(self, key: Key) -> None:
        pass


def test_a_reconcile_gets_a_thread_while_every_timer_and_rollout_holds_one() -> None:
    """The pool is the workers' threads plus BACKGROUND_THREADS: with every rollout and timer in a blocking call at
    once, the one worker's reconcile still runs (with a pool of ``workers`` threads it would wait for them)."""
    reconciler = _Recording()
    runtime = Runtime(workers=1, clock=FakeClock())
    runtime.register(reconciler)
    key = Key("thing", NAMESPACE, "a")
    release = threading.Event()

    async def scenario() -> None:
        runtime.start()
        holding = [asyncio.create_task(asyncio.to_thread(release.wait, 10)) for _ in range(BACKGROUND_THREADS)]
        try:
            await asyncio.sleep(0.01)
            runtime.enqueue(key)
            await settled("the reconcile", lambda: reconciler.reconciled == [key])
        finally:
            release.set()
            await asyncio.gather(*holding)
            await runtime.stop()

    asyncio.run(scenario())
