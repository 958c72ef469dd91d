"""Running the tenant fuzzer: one seed's actions on a fresh namespace pair, every invariant after every step, the
figures of a run, and — on a violation — delta debugging down to a short action list that still fails.

A failure is reported with its seed, the family and invariant, and the shrunk actions, plus the command that runs
that seed again (``OPBROKER_FUZZ_SEED=<seed> OPBROKER_FUZZ_STEPS=<n> pytest tests/tenancy/test_fuzz.py``).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from opbroker.api.conventions import DEFAULT_NAMESPACE
from tests.tenancy.fuzz.executor import Pair, PlatformFailed, Stack, make_pair, release
from tests.tenancy.fuzz.generator import Action, ddmin, generate
from tests.tenancy.fuzz.invariants import (
    ControllerFigures,
    Violation,
    Watcher,
    brokers_asked_only_for_own_ids,
    controller_bounded,
    controller_figures,
    nothing_outside_changed,
    settled_snapshots,
    snapshot_unchanged,
    victim_keeps_state_and_credentials,
)


@dataclass
class Options:
    steps: int = 60
    platform_every: int = 20
    check_every: int = 10
    """Invariant 3 (the victim's objects, read by the admin and through the broker) and the work queue: every
    this many steps; invariants 1, 2 and the controller's threads and RSS: every step."""
    settle_seconds: float = 4.0
    """After the last action: how long the controller gets to act on what the tenant left, before the final
    checks."""
    shrink_seconds: float = 240.0
    keep_going: bool = False
    """After a violation, record it and go on with the next seed (long runs); else stop at the first."""
    disabled: dict[str, str] | None = None
    only: frozenset[str] | None = None


@dataclass
class Failure:
    seed: int
    invariant: str
    message: str
    step: int
    family: str
    action: str
    shrunk: list[str] = field(default_factory=list)
    families: list[str] = field(default_factory=list)
    """The tenant families left in the shrunk list: the ones to suspect."""
    shrink_trials: int = 0
    shrink_seconds: float = 0.0

    def report(self, steps: int) -> str:
        lines = [
            f"seed {self.seed}: invariant {self.invariant} broken at step {self.step} (family {self.family})",
            f"  {self.message}",
            f"  last action: {self.action}",
            f"  families in the shrunk list: {', '.join(self.families) or 'none (the platform alone)'}",
            f"  shrunk to {len(self.shrunk)} action(s) ({self.shrink_trials} trials, {self.shrink_seconds:.0f} s):",
            *(f"    {i}. {a}" for i, a in enumerate(self.shrunk, 1)),
            f"  rerun: OPBROKER_FUZZ_SEED={self.seed} OPBROKER_FUZZ_STEPS={steps} "
            ".venv/bin/pytest tests/tenancy/test_fuzz.py",
        ]
        return "\n".join(lines)


@dataclass
class Figures:
    """What a run records (bench/results/tenancy-fuzz-*.json)."""

    seeds: list[int] = field(default_factory=list)
    steps: int = 0
    platform_steps: int = 0
    invariants_checked: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    """Each tenant action's outcome: ``ok`` or the API server's refusal by status and reason."""
    families: Counter[str] = field(default_factory=Counter)
    longest_run: int = 0
    """The most steps one seed ran without a violation."""
    threads_max: int = 0
    rss_max_mib: float = 0.0
    queue_max: float = 0.0
    seconds: float = 0.0
    enabled: list[str] = field(default_factory=list)
    disabled: dict[str, str] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)  # asdict rebuilds a Counter from its items (counting them): take the counts as they are
        for name in ("invariants_checked", "outcomes", "families"):
            data[name] = dict(getattr(self, name))
        data["refusals"] = {k: v for k, v in self.outcomes.items() if k != "ok"}
        return data


@dataclass
class RunResult:
    steps_done: int
    violation: Violation | None = None
    index: int = -1


class Fuzzer:
    """Runs action lists against one stack; its watches live as long as the fuzzer."""

    def __init__(self, stack: Stack, options: Options, log: Callable[[str], None] = print) -> None:
        self.stack, self.options, self.log = stack, options, log
        self.watcher = Watcher(stack.admin)
        self.watcher.start()
        self.baseline: ControllerFigures | None = None
        """The controller's figures before the first run: bounds hold across every seed (a leak adds up)."""

    def close(self) -> None:
        self.watcher.stop()

    def fuzz(self, seeds: Sequence[int]) -> Figures:
        figures = Figures()
        started = time.monotonic()
        for seed in seeds:
            plan = generate(
                seed,
                self.options.steps,
                platform_every=self.options.platform_every,
                disabled=self.options.disabled,
                only=self.options.only,
            )
            figures.enabled, figures.disabled = list(plan.enabled), dict(plan.disabled)
            figures.seeds.append(seed)
            result = self.run(plan.actions, figures)
            figures.longest_run = max(figures.longest_run, result.steps_done)
            self.log(f"seed {seed}: {result.steps_done} steps, {result.violation or 'no violation'}")
            if result.violation is not None:
                failure = self.shrink(seed, plan.actions, result)
                figures.failures.append(failure)
                self.log(failure.report(self.options.steps))
                if not self.options.keep_going:
                    break
        figures.seconds = time.monotonic() - started
        return figures

    def run(self, actions: Sequence[Action], figures: Figures | None = None) -> RunResult:
        """``actions`` on a fresh pair; stops at the first violation."""
        pair = make_pair(self.stack)
        watcher = self.watcher
        with watcher.lock:
            watcher.namespaces = {pair.victim_ns, DEFAULT_NAMESPACE}
        tally = figures if figures is not None else Figures()
        try:
            with watcher.platform(pair.victim_ns):
                pair.setup_victim()
            self._broker_requests(pair, explained=True)
            watcher.drain()
            if self.baseline is None:
                self.baseline = controller_figures(self.stack.controller_pid, self.stack.metrics_url)
            start = self.baseline
            baseline = settled_snapshots(pair)
            done = 0
            for index, act in enumerate(actions):
                platform = act.verb == "platform"
                if platform:
                    try:
                        with watcher.platform(pair.victim_ns):
                            pair.platform_step()
                    except PlatformFailed as exc:
                        return RunResult(done, Violation("victim_provisions_within_bound", str(exc)), index)
                    tally.platform_steps += 1
                else:
                    tally.outcomes[pair.perform(act)] += 1
                    tally.families[act.family] += 1
                tally.steps += 1
                full = index % self.options.check_every == self.options.check_every - 1
                violations = self.check(pair, start, tally, explained=platform, full=full)
                if platform:
                    baseline = settled_snapshots(pair)
                if violations:
                    return RunResult(done, violations[0], index)
                done += 1
            time.sleep(self.options.settle_seconds)
            violations = self.check(pair, start, tally, explained=False, full=True)
            tally.invariants_checked["nothing_outside_changed (snapshot)"] += 1
            violations += snapshot_unchanged(baseline, settled_snapshots(pair))
            if violations:
                return RunResult(done, violations[0], len(actions) - 1)
            return RunResult(done)
        finally:
            with watcher.lock:
                watcher.namespaces = set()
            release(self.stack, pair)

    def _broker_requests(self, pair: Pair, *, explained: bool) -> list[dict[str, Any]]:
        broker = self.stack.second_broker
        taken = broker.requests()
        if taken:
            broker.clear_requests()
        return [r | {"explained": explained} for r in taken]

    def check(
        self, pair: Pair, start: ControllerFigures, tally: Figures, *, explained: bool, full: bool
    ) -> list[Violation]:
        """Every invariant due after a step (see ``invariants``)."""
        found = nothing_outside_changed(pair, self.watcher.drain())
        found += brokers_asked_only_for_own_ids(pair, self._broker_requests(pair, explained=explained))
        now = controller_figures(self.stack.controller_pid, self.stack.metrics_url if full else None)
        found += controller_bounded(start, now)
        tally.threads_max = max(tally.threads_max, now.threads)
        tally.rss_max_mib = max(tally.rss_max_mib, now.rss_mib)
        tally.queue_max = max(tally.queue_max, now.queue or 0.0)
        names = ["nothing_outside_changed", "brokers_asked_only_for_own_ids", "controller_bounded"]
        if full:
            found += victim_keeps_state_and_credentials(pair, through_broker=True)
            names.append("victim_keeps_state_and_credentials")
        tally.invariants_checked.update(names)
        return found

    def shrink(self, seed: int, actions: Sequence[Action], result: RunResult) -> Failure:
        """Delta debugging over the actions up to the failing step: each trial a fresh pair; bounded in time."""
        assert result.violation is not None
        failing = actions[result.index]
        failure = Failure(
            seed,
            result.violation.invariant,
            result.violation.message,
            result.index,
            failing.family,
            str(failing),
        )
        wanted = result.violation.invariant
        deadline = time.monotonic() + self.options.shrink_seconds
        started = time.monotonic()
        trials = 0

        def fails(candidate: list[Action]) -> bool:
            nonlocal trials
            trials += 1
            outcome = self.run(candidate)
            self.log(f"  shrink trial {trials}: {len(candidate)} action(s) → {outcome.violation or 'passes'}")
            return outcome.violation is not None and outcome.violation.invariant == wanted

        shrunk = ddmin(list(actions[: result.index + 1]), fails, lambda: time.monotonic() < deadline)
        failure.shrunk = [str(a) for a in shrunk]
        failure.families = sorted({a.family for a in shrunk} - {"platform"})
        failure.shrink_trials, failure.shrink_seconds = trials, time.monotonic() - started
        return failure


def dump(figures: Figures) -> str:
    return json.dumps(figures.as_json(), indent=2, sort_keys=True, default=str)
