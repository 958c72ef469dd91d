"""The election of our own (issue 45): client-go's rules as a pure core, and the campaign and the renewals as
coroutines on the runtime's clock — a failing or hanging renewal ends leading at the renew deadline, another
holder ends it at once. On a fake clock; the lock's attempts are scripted (the lock itself is tested against a
stand-in API server in test_lean_calls)."""

from __future__ import annotations

import asyncio
import datetime

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from opbroker.controller.runtime import leadership
from opbroker.controller.runtime.clock import FakeClock
from opbroker.controller.runtime.leadership import Ended, LeaseRecord, Outcome, Seen
from opbroker.kubeclient import deadlines
from opbroker.kubeclient.astreams import AsyncTransport
from opbroker.kubeclient.transport import transport_of
from tests.loop_support import settled

pytestmark = pytest.mark.unit

HANG = "hang"


def record(holder: str, renewed: str = "t1", duration: int = 15, transitions: int = 0) -> LeaseRecord:
    return LeaseRecord(holder, duration, "t0", renewed, transitions)


def test_another_holder_holds_for_its_duration_from_when_its_record_was_first_seen() -> None:
    seen = leadership.observe(None, record("a"), 100.0)
    assert leadership.observe(seen, record("a"), 110.0) is seen  # unchanged: the first sight stays
    assert leadership.held_by_another(seen, "me", 114.9, 15)
    assert not leadership.held_by_another(seen, "me", 115.0, 15)  # not renewed for a whole lease
    renewed = leadership.observe(seen, record("a", renewed="t2"), 110.0)
    assert renewed == Seen(record("a", renewed="t2"), 110.0) and leadership.held_by_another(renewed, "me", 124, 15)
    assert not leadership.held_by_another(leadership.observe(None, record("me"), 100), "me", 100, 15)  # mine
    assert not leadership.held_by_another(leadership.observe(None, record(""), 100), "me", 100, 15)  # released
    short = leadership.observe(None, record("a", duration=5), 100)
    assert not leadership.held_by_another(short, "me", 105, 15)  # the record's own duration counts
    no_duration = leadership.observe(None, record("a", duration=0), 100)
    assert leadership.held_by_another(no_duration, "me", 105, 15)  # none written: the candidate's


def test_a_renewal_keeps_the_acquisition_and_a_takeover_counts_a_transition() -> None:
    assert leadership.taken(None, "me", 15, "s") == LeaseRecord("me", 15, "s", "s", 0)
    mine = LeaseRecord("me", 10, "a", "r", 2)
    assert leadership.taken(mine, "me", 15, "s") == LeaseRecord("me", 15, "a", "s", 2)
    assert leadership.taken(record("other", transitions=2), "me", 15, "s") == LeaseRecord("me", 15, "s", "s", 3)
    assert leadership.taken(record("", transitions=2), "me", 15, "s").transitions == 3


def test_times_go_on_the_wire_as_micro_time() -> None:
    utc = datetime.UTC
    assert leadership.micro_time(datetime.datetime(2026, 12, 3, 10, 0, 0, 250000, utc)) == "2026-12-03T10:00:00.250000Z"
    assert leadership.micro_time(datetime.datetime(2026, 12, 3, 10, 0, 0, tzinfo=utc)) == "2026-12-03T10:00:00.000000Z"
    two_hours_east = datetime.timezone(datetime.timedelta(hours=2))
    assert leadership.micro_time(datetime.datetime(2026, 12, 3, 12, 0, tzinfo=two_hours_east)).startswith(
        "2026-12-03T10"
    )


def test_a_lease_answer_that_is_no_lease_reads_as_an_empty_record() -> None:
    read = LeaseRecord.of({"spec": {"holderIdentity": 7, "leaseDurationSeconds": "15", "renewTime": None}})
    assert read == LeaseRecord("", 0, None, None, 0)
    assert read.spec() == {"leaseDurationSeconds": 0, "leaseTransitions": 0}  # no holder written


# -- the campaign and the renewals on the loop -------------------------------------------------------------------


class Scripted(leadership.LeaseLock):
    """A lock whose attempts answer from a script (``HANG``: wait until cancelled, counted in :attr:`cancelled`)."""

    def __init__(self, script: list[Outcome | str], clock: FakeClock) -> None:
        never_called = AsyncTransport(transport_of(deadlines.bounded(client.Configuration(host="http://127.0.0.1:9"))))
        super().__init__(never_called, "ns", "lead", "me", lease_seconds=15, clock=clock)
        self.script = script
        self.calls = 0
        self.cancelled = 0
        """Attempts cancelled while hanging."""

    async def attempt(self) -> Outcome:
        self.calls += 1
        step = self.script.pop(0)
        if step == HANG:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        assert isinstance(step, Outcome)
        if step is Outcome.HELD:
            self.holder = "other"
        return step


async def resting(clock: FakeClock) -> None:
    """Until the election only waits out its retry period (an attempt's deadline, if any, disarmed)."""
    await settled("only the retry period armed", lambda: clock.due == [clock.monotonic() + 2])


def election(script: list[Outcome | str], clock: FakeClock) -> leadership.Leadership:
    return leadership.Leadership(Scripted(script, clock), renew_deadline=10, retry_period=2, clock=clock)


def calls(elected: leadership.Leadership) -> int:
    lock = elected.lock
    assert isinstance(lock, Scripted)
    return lock.calls


def test_a_candidate_tries_every_retry_period_until_it_holds_the_lease() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        elected = election([Outcome.HELD, Outcome.FAILED, Outcome.LEADING], clock)
        campaign = asyncio.ensure_future(elected.campaign())
        await settled("the first attempt", lambda: calls(elected) == 1)
        await resting(clock)
        clock.advance(1.9)
        await asyncio.sleep(0.01)
        assert calls(elected) == 1 and not campaign.done()  # not before the retry period
        clock.advance(0.1)
        await settled("the second attempt", lambda: calls(elected) == 2)
        await resting(clock)
        clock.advance(2)
        await settled("the campaign to end", campaign.done)
        assert elected.renewed_at == 1004.0  # when the successful attempt started
        await elected.close()

    asyncio.run(scenario())


def test_a_standby_taking_over_holds_the_first_lease_found_free_its_own_tried_first_each_round() -> None:
    """``--shard-takeover``: every shard's Lease is tried in turn each round, the standby's own first; the first
    found free is held (its position returned, its renewal time set), none after it is tried."""

    async def scenario() -> None:
        clock = FakeClock()
        own = election([Outcome.HELD, Outcome.HELD, Outcome.HELD], clock)
        second = election([Outcome.HELD, Outcome.FAILED], clock)
        third = election([Outcome.HELD, Outcome.LEADING], clock)
        fourth = election([Outcome.HELD], clock)
        campaign = asyncio.ensure_future(
            leadership.campaign_any([own, second, third, fourth], retry_period=2, clock=clock)
        )
        await settled("the first round", lambda: calls(fourth) == 1)
        await resting(clock)
        assert [calls(e) for e in (own, second, third, fourth)] == [1, 1, 1, 1] and not campaign.done()
        clock.advance(2)
        await settled("the second round to take the third", campaign.done)
        assert campaign.result() == 2 and third.renewed_at == 1002.0
        assert [calls(e) for e in (own, second, third, fourth)] == [2, 2, 2, 1]  # the fourth not tried again
        await own.close()

    asyncio.run(scenario())


def test_a_standby_taking_over_prefers_its_own_lease_when_both_are_free() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        own, other = election([Outcome.LEADING], clock), election([Outcome.LEADING], clock)
        assert await leadership.campaign_any([own, other], retry_period=2, clock=clock) == 0
        assert calls(other) == 0
        await own.close()

    asyncio.run(scenario())


def test_a_leader_whose_renewals_fail_stops_at_the_renew_deadline() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        elected = election([Outcome.LEADING, Outcome.LEADING] + [Outcome.FAILED] * 4, clock)
        await elected.campaign()
        holding = asyncio.ensure_future(elected.hold())
        for attempt in range(2, 7):  # renewed at 1002, then four failures (1004 ... 1010)
            await resting(clock)
            clock.advance(2)
            await settled("the attempt", lambda a=attempt: calls(elected) == a)  # type: ignore[misc]
        await resting(clock)
        assert not holding.done()  # at 1010: 8 s since the last renewal
        clock.advance(2)
        await settled("leading to end", holding.done)
        assert holding.result() == Ended(None, 10.0) and calls(elected) == 6  # no attempt past the deadline
        await elected.close()

    asyncio.run(scenario())


def test_a_leader_that_finds_another_holder_stops_at_once() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        elected = election([Outcome.LEADING, Outcome.HELD], clock)
        await elected.campaign()
        holding = asyncio.ensure_future(elected.hold())
        await resting(clock)
        clock.advance(2)
        await settled("leading to end", holding.done)
        assert holding.result() == Ended("other", 2.0)
        await elected.close()

    asyncio.run(scenario())


def test_a_hanging_renewal_ends_leading_at_the_renew_deadline_not_when_it_returns() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        elected = election([Outcome.LEADING, HANG], clock)
        await elected.campaign()
        holding = asyncio.ensure_future(elected.hold())
        await resting(clock)
        clock.advance(2)
        await settled("the hanging attempt, its deadline armed", lambda: calls(elected) == 2 and clock.due == [1010.0])
        clock.advance(7.9)  # 1009.9: renewed at 1000, the deadline is 1010
        await asyncio.sleep(0.01)
        assert not holding.done()
        clock.advance(0.1)
        await settled("leading to end", holding.done)
        assert holding.result() == Ended(None, 10.0)
        lock = elected.lock
        assert isinstance(lock, Scripted)
        await settled("the hanging attempt cancelled", lambda: lock.cancelled == 1)
        await elected.close()

    asyncio.run(scenario())


class Watched(Scripted):
    """Another layout's Lease, read only: ``held`` answers from a script (an exception: the read failed)."""

    def __init__(self, answers: list[bool | Exception], clock: FakeClock) -> None:
        super().__init__([], clock)
        self.answers = answers
        self.reads = 0

    async def held(self) -> bool:
        self.reads += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        self.holder = "old-leader" if answer else ""
        return answer


def test_a_shard_acts_only_once_the_unsharded_lease_is_free_a_failed_read_counting_as_held() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        elected = election([], clock)
        other = Watched([True, TimeoutError(), False], clock)
        waiting = asyncio.ensure_future(elected.wait_until_free([other]))
        await settled("the first read", lambda: other.reads == 1)
        await resting(clock)
        assert not waiting.done()  # held by the old leader
        clock.advance(2)
        await settled("the second read", lambda: other.reads == 2)
        await resting(clock)
        assert not waiting.done()  # not known to be free
        clock.advance(2)
        await settled("free at the third read", waiting.done)
        assert other.reads == 3 and other.calls == 0  # read only: never an attempt to take it
        await elected.close()

    asyncio.run(scenario())


def refused(status: int) -> ApiException:
    return ApiException(status=status, reason="Forbidden" if status == 403 else "Unavailable")


def test_the_unsharded_controller_acts_once_every_shards_lease_is_free_each_read_until_found_free() -> None:
    """Going back from shards to one controller: it waits for each shard's Lease (how many shards ran is not known);
    one found free is not read again, one held is read every retry period until free."""

    async def scenario() -> None:
        clock = FakeClock()
        elected = election([], clock)
        free, held_twice, gone = Watched([False], clock), Watched([True, True, False], clock), Watched([False], clock)
        waiting = asyncio.ensure_future(elected.wait_until_free([free, held_twice, gone], forbidden_is_free=True))
        await settled("the first reads", lambda: (free.reads, held_twice.reads, gone.reads) == (1, 1, 1))
        await resting(clock)
        clock.advance(2)
        await settled("the held one read again", lambda: held_twice.reads == 2)
        await resting(clock)
        assert not waiting.done() and (free.reads, gone.reads) == (1, 1)
        clock.advance(2)
        await settled("free at its third read", waiting.done)
        assert (free.reads, held_twice.reads, gone.reads) == (1, 3, 1)
        await elected.close()

    asyncio.run(scenario())


@pytest.mark.parametrize(("forbidden_is_free", "acts_at_once"), [(True, True), (False, False)])
def test_a_lease_the_role_may_not_read_is_free_only_where_asked(forbidden_is_free: bool, acts_at_once: bool) -> None:
    """An unsharded controller whose Role predates reading the shards' Leases acts as it did (403: not waited for);
    a shard, and any read that does not answer, waits."""

    async def scenario() -> None:
        clock = FakeClock()
        elected = election([], clock)
        other, unanswered = Watched([refused(403), False], clock), Watched([refused(503), False], clock)
        waiting = asyncio.ensure_future(elected.wait_until_free([other], forbidden_is_free=forbidden_is_free))
        await settled("the first read", lambda: other.reads == 1)
        if acts_at_once:
            await settled("acting", waiting.done)
        else:
            await resting(clock)
            assert not waiting.done()
            clock.advance(2)
            await settled("free at the second read", waiting.done)
        blocked = asyncio.ensure_future(elected.wait_until_free([unanswered], forbidden_is_free=True))
        await settled("the unanswered read", lambda: unanswered.reads == 1)
        await resting(clock)
        assert not blocked.done()  # a 503 is not known to be free
        clock.advance(2)
        await settled("free at its second read", blocked.done)
        await elected.close()

    asyncio.run(scenario())
