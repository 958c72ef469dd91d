"""The provisioning run the fault scenarios disturb, and the wait for convergence afterwards.

``count`` instances are provisioned through OSB in waves of ten, the waves spread over ``release_seconds``;
each then follows a script, as a platform would drive it (polling ``last_operation`` between steps):

* 70 %: provision, and keep it;
* 15 %: provision, then deprovision *at once*, while the controller is still working on it (the Service
  Catalog's orphan mitigation does exactly this);
* 15 %: provision, then deprovision once it succeeded;
* of the kept ones, one in ten is also bound; half of those are unbound again.

The run records what the platform was told (:class:`invariants.Expected`), every answer by operation and
code, retries, and every step that did not go as OSB promises (a refused request, a failed operation, no
answer at all). :func:`converge` then polls the invariants until they hold or time runs out.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from bench import invariants
from bench.common import Bench
from bench.osb import Gave, Ids, Platform


@dataclass(frozen=True)
class Script:
    instance: str
    start: float
    deprovision: str = "none"  # none | early | late
    binding: str | None = None
    unbind: bool = False


@dataclass
class WorkloadResult:
    expected: invariants.Expected = field(default_factory=invariants.Expected)
    problems: list[str] = field(default_factory=list)
    answers: dict[str, int] = field(default_factory=dict)
    retries: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    steps: dict[str, int] = field(default_factory=dict)


def scripts(count: int, release_seconds: float, seed: int, *, wave: int = 10) -> list[Script]:
    """The run's scripts: provisions arrive in waves of ``wave`` (a platform's burst), spread over
    ``release_seconds``, so that a fault often meets several operations in flight."""
    rng = random.Random(seed)
    waves = max(1, (count + wave - 1) // wave)
    at = [rng.uniform(0, release_seconds) for _ in range(waves)]
    tag = f"{seed:x}"[-4:]
    names = [f"r{tag}-{index:03d}" for index in range(count)]
    order = list(range(count))
    rng.shuffle(order)
    early, late = set(order[: count * 15 // 100]), set(order[count * 15 // 100 : count * 30 // 100])
    kept = order[count * 30 // 100 :]
    bound = set(kept[: max(1, count // 10)])
    unbound = set(kept[: max(1, count // 10) // 2])
    result = []
    for index, name in enumerate(names):
        deprovision = "early" if index in early else "late" if index in late else "none"
        result.append(
            Script(
                instance=name,
                start=at[order.index(index) // wave] + rng.uniform(0.0, 0.5),
                deprovision=deprovision,
                binding=f"{name}-b" if index in bound else None,
                unbind=index in unbound,
            )
        )
    return result


def run(bench: Bench, namespace: str, plan: list[Script], *, deadline_seconds: float) -> WorkloadResult:
    """Drive every script to its end (or the deadline); what the platform learnt, and what went wrong."""
    service_id, plan_id = bench.plan_ids()
    result = WorkloadResult()
    lock = threading.Lock()
    steps: dict[str, int] = {}
    started = time.monotonic()
    deadline = started + deadline_seconds

    def step(name: str) -> None:
        with lock:
            steps[name] = steps.get(name, 0) + 1

    def problem(script: Script, message: str) -> None:
        with lock:
            result.problems.append(f"{script.instance}: {message}")

    with bench.osb(len(plan) + 8) as http:
        platform = Platform(http, Ids(service_id, plan_id), namespace)

        def expect(script: Script, response: Any, codes: tuple[int, ...], what: str) -> str | None:
            if response.status_code not in codes:
                problem(script, f"{what} answered {response.status_code} {response.text[:200]}")
                return None
            body: dict[str, Any] = response.json() if response.content else {}
            return str(body.get("operation", ""))

        def finish(script: Script, path: str, operation: str | None, what: str) -> bool:
            state = platform.last_operation(path, operation, deadline=deadline)
            if state != "succeeded":
                problem(script, f"{what}: last_operation says {state!r}")
                return False
            step(f"{what} succeeded")
            return True

        def drive(script: Script) -> None:
            path = f"/v2/service_instances/{script.instance}"
            time.sleep(max(0.0, started + script.start - time.monotonic()))
            try:
                operation = expect(script, platform.provision(script.instance, deadline=deadline), (202,), "provision")
                if operation is None:
                    result.expected.unknown.add(script.instance)
                    return
                step("provision accepted")
                if script.deprovision == "early":
                    time.sleep(random.uniform(0.0, 1.0))
                    remove(script, path)
                    return
                if not finish(script, path, operation, "provision"):
                    result.expected.unknown.add(script.instance)
                    return
                if script.binding:
                    bind(script, path)
                if script.deprovision == "late":
                    remove(script, path)
                    return
                result.expected.live_instances.add(script.instance)
            except Gave as exc:
                problem(script, f"no answer: {exc}")
                result.expected.unknown.add(script.instance)

        def remove(script: Script, path: str) -> None:
            operation = expect(script, platform.deprovision(script.instance, deadline=deadline), (202,), "deprovision")
            if operation is None:
                result.expected.unknown.add(script.instance)
                return
            step("deprovision accepted")
            result.expected.gone_instances.add(script.instance)
            finish(script, path, operation, "deprovision")

        def bind(script: Script, path: str) -> None:
            assert script.binding is not None
            binding_path = f"{path}/service_bindings/{script.binding}"
            response = platform.bind(script.instance, script.binding, deadline=deadline)
            operation = expect(script, response, (202,), "bind")
            if operation is None:
                return
            step("bind accepted")
            result.expected.live_bindings[script.binding] = script.instance
            if not finish(script, binding_path, operation, "bind") or not script.unbind:
                return
            response = platform.unbind(script.instance, script.binding, deadline=deadline)
            operation = expect(script, response, (202,), "unbind")
            if operation is None:
                return
            step("unbind accepted")
            del result.expected.live_bindings[script.binding]
            result.expected.gone_bindings.add(script.binding)
            finish(script, binding_path, operation, "unbind")

        with ThreadPoolExecutor(len(plan)) as pool:
            for future in [pool.submit(drive, script) for script in plan]:
                future.result()
        result.answers = dict(sorted(platform.answers.items()))
        result.retries = dict(sorted(platform.retries.items()))
    result.seconds = round(time.monotonic() - started, 1)
    result.steps = dict(sorted(steps.items()))
    return result


def converge(bench: Bench, namespace: str, expected: invariants.Expected, *, timeout: float) -> dict[str, Any]:
    """Poll the invariants until they hold; how long that took, or what still differs at the timeout."""
    started = time.monotonic()
    checks = 0
    found: list[str] = []
    while True:
        checks += 1
        try:
            found = invariants.violations(expected, invariants.snapshot(bench.api, namespace), namespace)
        except Exception as exc:
            found = [f"could not read the namespace: {type(exc).__name__}: {exc}"]
        if not found:
            return {"converged": True, "seconds": round(time.monotonic() - started, 2), "checks": checks}
        if time.monotonic() - started > timeout:
            return {
                "converged": False,
                "seconds": round(time.monotonic() - started, 2),
                "checks": checks,
                "violations": found[:50],
                "violation_count": len(found),
            }
        time.sleep(1.0)
