"""The work queue is fair across namespaces (issue 42): tenants served in turn, a cap per tenant, no bookkeeping
left for a namespace once its keys have run.

Each reconcile holds until the test lets one finish (:meth:`Floor.finish`), so the order in which keys *start* is
exact; time is a :class:`FakeClock` and nothing sleeps. Every assertion on order here fails with the single FIFO
the queue had before (noted per test).
"""

from __future__ import annotations

import asyncio
from collections import Counter, deque
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager

import pytest
from typer.testing import CliRunner

from opbroker.controller.runtime.clock import FakeClock
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.outcomes import DONE, Outcome
from opbroker.controller.runtime.queue import Tenant, WorkQueue, namespace_of
from opbroker.controller.settings import ControllerSettings
from tests.controller.test_workqueue import run, settle


def keys(namespace: str, count: int) -> list[Key]:
    return [Key("instance", namespace, f"o{i}") for i in range(count)]


class Floor:
    """A queue whose reconciles record their start and then hold until :meth:`finish` lets them go (the oldest
    first, one at a time). At each start it counts the tenant's reconciles running, so a broken cap cannot hide
    between two assertions."""

    def __init__(
        self, *, workers: int, per_tenant: int | None, tenant: Tenant = namespace_of, uncapped: tuple[str, ...] = ()
    ) -> None:
        self.clock = FakeClock()
        self.tenant = tenant
        self.started: list[Hashable] = []
        self.running: Counter[str] = Counter()
        self.most_of_one_tenant = 0
        """The most reconciles of one tenant running at once, seen at each start."""
        self.most_in_flight = 0
        self._holds: deque[asyncio.Future[None]] = deque()
        """One per running reconcile, oldest first: set to let it finish."""
        self.queue = WorkQueue(
            self._reconcile, workers=workers, per_tenant=per_tenant, tenant=tenant, uncapped=uncapped, clock=self.clock
        )

    async def _reconcile(self, key: Hashable) -> Outcome:
        tenant = self.tenant(key)
        self.started.append(key)
        self.running[tenant] += 1
        self.most_of_one_tenant = max(self.most_of_one_tenant, self.running[tenant])
        self.most_in_flight = max(self.most_in_flight, self.queue.in_flight)
        hold = asyncio.get_running_loop().create_future()
        self._holds.append(hold)
        try:
            await hold
        finally:
            self.running[tenant] -= 1
        return DONE

    def add(self, *added: Hashable) -> None:
        for key in added:
            self.queue.add(key)

    async def finish(self, count: int = 1) -> None:
        """Let the oldest running reconcile finish and the workers take what comes next, ``count`` times."""
        for _ in range(count):
            self._holds.popleft().set_result(None)
            await settle()

    async def drain(self) -> None:
        """Finish reconciles one at a time until nothing is ready or running."""
        await settle()
        while self.queue.in_flight:
            await self.finish()


@asynccontextmanager
async def floor(
    *, workers: int, per_tenant: int | None, tenant: Tenant = namespace_of, uncapped: tuple[str, ...] = ()
) -> AsyncIterator[Floor]:
    made = Floor(workers=workers, per_tenant=per_tenant, tenant=tenant, uncapped=uncapped)
    made.queue.start()
    try:
        yield made
    finally:
        await made.queue.stop()


def test_tenants_are_served_in_turn_each_in_the_order_its_keys_came() -> None:
    async def scenario() -> None:
        a, b, c = keys("a", 3), keys("b", 2), keys("c", 1)
        async with floor(workers=1, per_tenant=1) as f:
            f.add(*a, *b, *c)  # before any worker runs: all six are ready at once
            await f.drain()
            # The FIFO ran a0 a1 a2 b0 b1 c0.
            assert f.started == [a[0], b[0], c[0], a[1], b[1], a[2]]

    run(scenario())


def test_a_flood_in_one_namespace_does_not_delay_another() -> None:
    async def scenario() -> None:
        flood, quiet = keys("flood", 1000), Key("instance", "quiet", "one")
        async with floor(workers=2, per_tenant=1) as f:
            f.add(*flood)
            await settle()
            assert f.started == [flood[0]]  # the flood holds one worker; the other finds only a capped tenant
            assert (f.queue.in_flight, f.queue.ready, f.queue.held) == (1, 0, 999)
            f.add(quiet)
            await settle()
            assert f.started == [flood[0], quiet]  # at once, on the idle worker (the FIFO: after 999 more)
            await f.drain()
            assert f.started.index(quiet) < f.started.index(flood[2])
            assert f.started == [flood[0], quiet, *flood[1:]]
            assert f.most_of_one_tenant == 1

    run(scenario())


def test_a_quiet_namespace_waits_for_at_most_one_key_of_each_other_namespace_with_work() -> None:
    async def scenario() -> None:
        floods = [keys(namespace, 100) for namespace in ("a", "b", "c", "d")]
        quiet = Key("binding", "quiet", "one")
        # No help from the cap: one namespace may take every worker.
        async with floor(workers=2, per_tenant=2) as f:
            for flood in floods:
                f.add(*flood)
            await settle()
            assert f.started == [floods[0][0], floods[1][0]]
            f.add(quiet)
            before = len(f.started)
            while quiet not in f.started:
                await f.finish()
            # With T = 5 namespaces holding ready keys, at most T - 1 = 4 other keys start first (the FIFO: 398).
            assert f.started[before:] == [floods[2][0], floods[3][0], floods[0][1], floods[1][1], quiet]
            await f.drain()
            assert len(f.started) == 401

    run(scenario())


def test_no_tenant_runs_more_than_its_cap_and_the_workers_stay_busy() -> None:
    async def scenario() -> None:
        async with floor(workers=4, per_tenant=2) as f:
            f.add(*keys("a", 50), *keys("b", 50), *keys("c", 3))
            await settle()
            assert f.queue.in_flight == 4  # two namespaces at their cap fill the workers
            await f.drain()
            assert len(f.started) == 103
            assert f.most_of_one_tenant == 2  # checked at every start
            assert f.most_in_flight == 4

    run(scenario())


def test_the_cap_defaults_to_half_the_workers() -> None:
    async def scenario() -> None:
        async with floor(workers=5, per_tenant=None) as f:
            f.add(*keys("a", 10))
            await settle()
            assert (f.queue.in_flight, f.queue.held) == (2, 8)
            await f.drain()
        async with floor(workers=1, per_tenant=None) as f:
            f.add(*keys("a", 3))
            await f.drain()
            assert len(f.started) == 3  # never below one

    run(scenario())


def test_a_worker_finding_only_capped_tenants_waits_then_resumes() -> None:
    async def scenario() -> None:
        a, b = keys("a", 3), keys("b", 1)
        async with floor(workers=2, per_tenant=1) as f:
            looks = 0
            take = f.queue._take

            def counted() -> tuple[Hashable, str] | None:
                nonlocal looks
                looks += 1
                return take()

            f.queue._take = counted  # type: ignore[method-assign]  # count how often a worker looks for work
            f.add(*a)
            await settle()
            assert f.started == [a[0]]
            idle_looks = looks
            await settle()
            assert looks == idle_looks  # the idle worker waits: it does not look again until something changes
            f.add(b[0])  # a key added wakes it
            await settle()
            assert f.started == [a[0], b[0]]
            await f.finish()  # a0 finishes: its tenant is below the cap again
            assert f.started == [a[0], b[0], a[1]]
            await f.finish()  # b0 finishes: only "a" has keys, and it is at its cap
            assert f.started == [a[0], b[0], a[1]] and f.queue.held == 1
            await f.finish()
            assert f.started == [a[0], b[0], a[1], a[2]]
            await f.drain()

    run(scenario())


def test_nothing_is_kept_for_a_namespace_once_its_keys_have_run() -> None:
    async def scenario() -> None:
        async with floor(workers=3, per_tenant=1) as f:
            for n in range(200):
                f.add(*keys(f"ns-{n}", 2))
            await settle()
            assert f.queue.tenants == 200
            await f.drain()
            assert len(f.started) == 400
            assert f.queue.tenants == 0
            assert (f.queue.depth, f.queue.ready, f.queue.held, f.queue.in_flight) == (0, 0, 0, 0)
            f.add(Key("instance", "ns-7", "again"))  # a namespace seen before comes back as a new one
            await f.drain()
            assert f.started[-1] == Key("instance", "ns-7", "again") and f.queue.tenants == 0

    run(scenario())


def test_a_key_added_while_it_runs_goes_back_in_its_tenant_line() -> None:
    async def scenario() -> None:
        a, b = keys("a", 2), keys("b", 1)
        async with floor(workers=1, per_tenant=1) as f:
            f.add(a[0])
            await settle()
            f.add(a[0], a[1], b[0])  # a0 is running: dirty, back in line after it (behind a1)
            await f.drain()
            assert f.started == [a[0], a[1], b[0], a[0]]
            assert f.queue.tenants == 0

    run(scenario())


def test_held_keys_do_not_make_the_workers_look_stuck_while_others_progress() -> None:
    async def scenario() -> None:
        async with floor(workers=2, per_tenant=1) as f:
            f.add(*keys("a", 10), *keys("b", 10))
            await settle()
            for _ in range(8):  # every reconcile takes 40 s (the bound is 60): both workers move
                f.clock.advance(40.0)
                assert f.queue.held > 0
                assert f.queue.stuck(bound=60) is None
                await f.finish(2)
            await f.drain()
        async with floor(workers=2, per_tenant=1) as f:
            f.add(*keys("a", 3))
            await settle()
            assert (f.queue.ready, f.queue.held) == (0, 2)  # held back by the cap, not waiting for a worker
            f.clock.advance(61.0)
            # Nothing moved because a's own reconcile runs too long: that is what is reported.
            assert f.queue.stuck(bound=60) == "a reconcile has been running for 61 s (bound 60 s)"
            await f.drain()

    run(scenario())


def test_the_tenant_of_a_key() -> None:
    assert namespace_of(Key("instance", "team-a", "db")) == "team-a"
    assert namespace_of(Key("cluster", "", "east")) == ""  # cluster-scoped keys share one tenant
    assert namespace_of("instance/team-a/db") == ""  # not a Key: one tenant for all

    def prefix(key: Hashable) -> str:
        assert isinstance(key, str)
        return key.split("/")[0]

    async def scenario() -> None:
        async with floor(workers=1, per_tenant=1, tenant=prefix) as f:
            f.add("x/1", "x/2", "y/1")
            await f.drain()
            assert f.started == ["x/1", "y/1", "x/2"]

    run(scenario())


def test_a_queue_needs_a_worker_and_one_reconcile_per_tenant() -> None:
    async def reconcile(key: Hashable) -> Outcome:
        return DONE

    with pytest.raises(ValueError, match="at least one"):
        WorkQueue(reconcile, workers=2, per_tenant=0)
    with pytest.raises(ValueError, match="at least one"):
        WorkQueue(reconcile, workers=0)


def namespace_workers_from(monkeypatch: pytest.MonkeyPatch, *flags: str) -> tuple[int, list[int]]:
    """``opbroker controller run`` with ``flags`` (the controller itself not run): the exit code and the
    ``namespace_workers`` of the settings it would have run with."""
    from opbroker.cli.main import app
    from opbroker.controller import running

    seen: list[int] = []
    monkeypatch.setattr(running, "run", lambda settings, **_: seen.append(settings.namespace_workers))
    result = CliRunner().invoke(app, ["controller", "run", *flags])
    return result.exit_code, seen


def test_the_namespace_workers_flag_reaches_the_settings_and_refuses_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    assert namespace_workers_from(monkeypatch) == (0, [ControllerSettings().namespace_workers])
    assert namespace_workers_from(monkeypatch, "--namespace-workers", "3") == (0, [3])
    assert namespace_workers_from(monkeypatch, "--namespace-workers", "0") == (2, [])  # typer's usage error


def test_the_platforms_own_namespace_may_use_every_worker_still_in_turn() -> None:
    """The control plane's namespace holds every instance of a platform that sends no ``context.namespace``: a cap
    of half the workers there would halve such a platform's throughput. It is uncapped, and still takes its turn."""

    async def scenario() -> None:
        platform, tenant = keys("opbroker", 10), keys("team", 10)
        async with floor(workers=4, per_tenant=1, uncapped=("opbroker",)) as f:
            f.add(*platform)
            await settle()
            assert f.queue.in_flight == 4 and f.most_of_one_tenant == 4  # every worker on the platform's keys
            f.add(*tenant)
            await f.finish(2)
            assert tenant[0] in f.started[-2:]  # of the next two keys started, one is the tenant's: its turn
            await f.drain()
            assert Counter(namespace_of(k) for k in f.started) == {"opbroker": 10, "team": 10}
            assert f.queue.tenants == 0

    run(scenario())
