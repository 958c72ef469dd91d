"""The controller's one table of timing policies (``controller.runtime.policies``).

Aspects: jitter stays within its share below the exact wait and never passes the cap; a seeded table draws the
same waits every run (and another seed others); the backoff doubles to its cap; a policy with a give-up
duration gives up on a fake clock, and one without goes on; the table is overridable from a flag's words and
reaches the controller through its settings; a caller that draws nothing (the Pulumi provider) gets the exact
waits of before.
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from typer.testing import CliRunner

from opbroker.controller.runtime.clock import FakeClock
from opbroker.controller.runtime.policies import DEFAULTS, INF, Policies, every, source
from opbroker.controller.settings import ControllerSettings
from opbroker.osbclient import Backoff, LastOperation, OperationTimeout, wait
from opbroker.osbclient.polling import delay_after


@pytest.mark.parametrize("name", Policies.names())
def test_every_jittered_wait_lies_between_its_share_below_and_the_exact_wait(name: str) -> None:
    policies = Policies(seed=1)
    policy: Backoff = getattr(policies, name)
    for attempt in (1, 2, 3, 10, 10**6):
        exact = policy.delay(attempt)
        for _ in range(200):
            wait_s = policies.delay(policy, attempt)
            assert (1 - policy.jitter) * exact <= wait_s <= exact <= policy.maximum


def test_a_draw_takes_up_to_the_jitter_off_and_no_draw_is_exact() -> None:
    policy = Backoff(base=1.0, maximum=8.0, max_duration=INF, jitter=0.5)
    assert policy.delay(3) == 4.0  # no draw: the exact doubling (what the Pulumi provider gets)
    assert policy.delay(3, 0.5) == 3.0
    assert policy.delay(3, 0.999) == pytest.approx(2.002)
    with pytest.raises(ValueError):
        policy.delay(1, 1.0)  # a draw is in [0, 1)
    with pytest.raises(ValueError):
        Backoff(base=1.0, maximum=2.0, jitter=1.0)  # jitter could make a wait zero: a busy loop


def test_a_seeded_table_draws_the_same_waits_and_another_seed_others() -> None:
    def waits(seed: int) -> list[float]:
        policies = Policies(seed=seed)
        return [policies.delay(policies.retries, n) for n in range(1, 20)]

    assert waits(3) == waits(3)
    assert waits(3) != waits(4)
    assert source(5)() == source(5)()


def test_an_unseeded_table_draws_apart_from_another() -> None:
    """Two replicas started together (no seed: os.urandom) do not draw in step."""
    first, second = Policies(), Policies()
    assert [first.draw() for _ in range(8)] != [second.draw() for _ in range(8)]


def test_the_backoff_doubles_to_its_cap_and_stays_there() -> None:
    policies = Policies().unjittered()
    assert [policies.delay(policies.conflicts, n) for n in range(1, 5)] == [0.05, 0.1, 0.2, 0.4]
    assert policies.delay(policies.conflicts, 10**9) == policies.conflicts.maximum == 5.0
    assert [policies.delay(policies.retries, n) for n in (1, 2, 3, 8, 10**6)] == [0.5, 1.0, 2.0, 60.0, 60.0]
    interval = every(10.0, jitter=0.25)
    assert interval.delay(1) == interval.delay(50) == 10.0  # a fixed interval does not grow


def test_a_policy_with_a_give_up_gives_up_on_a_fake_clock_and_one_without_goes_on() -> None:
    clock = FakeClock()
    polls = dataclasses.replace(DEFAULTS.broker_polls, max_duration=120.0)
    policies = Policies(seed=9, broker_polls=polls)
    asked: list[float] = []

    def poll() -> LastOperation:
        asked.append(clock.monotonic())
        return LastOperation(state="in progress")

    with pytest.raises(OperationTimeout):
        wait(
            poll,
            what="provision",
            backoff=policies.broker_polls,
            clock=clock.monotonic,
            sleep=clock.advance,
            draw=policies.draw,
        )
    started = asked[0]
    assert asked[-1] - started == pytest.approx(120.0)  # the last poll at the deadline, never past it
    gaps = [b - a for a, b in itertools.pairwise(asked)]
    assert all(gap <= polls.maximum for gap in gaps)
    # Never giving up: a conflict or a failed reconcile is retried however long it takes.
    for name in ("conflicts", "retries", "broker_retries"):
        policy = getattr(policies, name)
        assert policy.max_duration == INF
        assert not delay_after(10.0**9, 10**6, None, policy, policies.draw()).expired


def test_a_brokers_retry_after_is_not_jittered() -> None:
    assert delay_after(0.0, 3, 7.0, DEFAULTS.broker_polls, 0.9).delay == 7.0


def test_a_flag_overrides_one_policy_and_names_what_is_wrong() -> None:
    policies = Policies().overridden("registry-sweep=60")
    assert policies.registry_sweep == Backoff(base=60.0, maximum=60.0, max_duration=INF, jitter=0.1)
    assert policies.retries == DEFAULTS.retries  # the rest as documented
    changed = policies.overridden("retries=0.1:5:30:0")
    assert changed.retries == Backoff(base=0.1, maximum=5.0, max_duration=30.0, jitter=0.0)
    for bad in ("nothing=1", "retries", "retries=1:2:3:4:5", "retries=5:1", "retries=1:2:3:1.5"):
        with pytest.raises(ValueError):
            Policies().overridden(bad)


def test_the_settings_carry_the_table_and_the_cli_fills_it(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ControllerSettings().policies == DEFAULTS
    assert ControllerSettings(policies=Policies(seed=1).overridden("admin-poll=5")).policies.admin_poll.base == 5.0

    from opbroker.cli import controller as cli

    seen: list[ControllerSettings] = []
    monkeypatch.setattr("opbroker.controller.running.run", lambda settings, **_: seen.append(settings))
    result = CliRunner().invoke(cli.app, ["--policy", "conflicts=0.1:2", "--policy", "admin_poll=3"])
    assert result.exit_code == 0, result.output
    (settings,) = seen
    assert settings.policies.conflicts == Backoff(base=0.1, maximum=2.0, max_duration=INF, jitter=0.5)
    assert settings.policies.admin_poll.base == 3.0
    refused = CliRunner().invoke(cli.app, ["--policy", "unknown=1"])
    assert refused.exit_code != 0 and "--policy" in refused.output


def test_a_loop_in_place_pauses_on_the_policy_and_begins_no_attempt_past_its_give_up() -> None:
    """``attempts``: what a guarded write outside a reconcile retries on (``write_retries``), on a fake clock."""
    clock = FakeClock()
    policies = Policies(seed=2)
    policy = policies.write_retries
    begun: list[float] = []
    start = clock.monotonic()
    for attempt in policies.attempts(policy, clock=clock.monotonic, sleep=clock.advance):
        begun.append(clock.monotonic() - start)
        assert attempt == len(begun)
    assert begun[0] == 0.0  # the first at once
    assert begun[-1] <= policy.max_duration  # none begun past the give-up
    assert begun[-1] > policy.max_duration - policy.maximum  # ... and went on until the next pause would pass it
    gaps = [b - a for a, b in itertools.pairwise(begun)]
    assert all((1 - policy.jitter) * policy.delay(n) <= gap <= policy.delay(n) for n, gap in enumerate(gaps, start=1))
    # Stopping early is the caller's: a write that succeeds ends the loop at its first attempt.
    assert next(iter(policies.attempts(policy, clock=clock.monotonic, sleep=clock.advance))) == 1
