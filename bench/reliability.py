"""The reliability suite: robustness as a measured fact. ``scripts/reliability.sh`` runs it.

Five scenarios, each on a fresh local stack (control plane, demo operator, controller, broker; all on
127.0.0.1), each bounded in time:

1. ``kills`` — the controller SIGKILLed at random moments (and restarted at once) during a provisioning run;
2. ``apiserver`` — kube-apiserver restarted in place 2 to 3 times during a provisioning run;
3. ``cuts`` — every controller ↔ API server connection cut every few seconds (a TCP proxy in between);
4. ``conflicts`` — concurrent identical and conflicting OSB requests for the same ids, answers checked
   against OSB and the final state against the answers; plus two probes of what the storm found: a bind
   racing a deprovision, and an id deprovisioned and provisioned again before the garbage collector ran;
5. ``fuzz`` — schemathesis against the broker's /openapi.json, hypothesis against the template renderer.

Scenarios 1 to 3 end with the convergence check of bench/invariants.py: every instance converged, nothing
lost, nothing duplicated, nothing orphaned. Results: ``bench/results/reliability-<date>.json`` (everything)
and ``bench/results/RELIABILITY.md`` (the summary). ``--quick`` runs small versions (a few minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import conflicts, fuzzing, scenarios
from bench.common import bench_stack, machine
from bench.report import markdown

RESULTS = Path(__file__).resolve().parent / "results"
SCENARIOS = ("kills", "apiserver", "cuts", "conflicts", "fuzz")


def sizes(quick: bool) -> dict[str, dict[str, Any]]:
    """The parameters of each scenario: full (the recorded run) or quick (a smoke run)."""
    if quick:
        return {
            "kills": {"count": 20, "kills": 5, "delay": (1.0, 3.0)},
            "apiserver": {"count": 20, "windows": [(3.0, 5.0), (20.0, 24.0)]},
            "cuts": {"count": 20, "cuts": 6, "interval": (1.5, 3.0)},
            "conflicts": {"ids": 6, "race_trials": 6, "recreate_trials": 1},
            "fuzz": {"broker_seconds": 30.0, "renderer_seconds": 30.0},
        }
    return {
        "kills": {"count": 100, "kills": 20, "delay": (1.5, 5.0)},
        "apiserver": {"count": 60, "windows": [(4.0, 8.0), (28.0, 34.0), (52.0, 58.0)]},
        "cuts": {"count": 60, "cuts": 20, "interval": (2.0, 4.0)},
        "conflicts": {"ids": 24, "race_trials": 16, "recreate_trials": 3},
        "fuzz": {"broker_seconds": 120.0, "renderer_seconds": 120.0},
    }


def conflict_scenario(*, ids: int, race_trials: int, recreate_trials: int, seed: int = 4) -> dict[str, Any]:
    with bench_stack(f"rel-conflicts-{os.getpid()}") as bench:
        result = conflicts.run(bench, bench.namespace("conflicts"), ids=ids, seed=seed)
        race = conflicts.race_probe(bench, bench.namespace("race"), trials=race_trials, seed=seed)
        again = conflicts.recreate_probe(bench, bench.namespace("recreate"), trials=recreate_trials, seed=seed)
    result["bind_deprovision_race"] = race
    result["recreate_probe"] = again
    result["violations"] += race["violations"] + again["violations"]
    return result


RUNNERS: dict[str, Callable[..., dict[str, Any]]] = {
    "kills": scenarios.controller_kills,
    "apiserver": scenarios.apiserver_restarts,
    "cuts": scenarios.connection_cuts,
    "conflicts": conflict_scenario,
    "fuzz": fuzzing.run,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small versions of every scenario (a few minutes)")
    parser.add_argument("--only", action="append", choices=SCENARIOS, help="run only this scenario (repeatable)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the JSON and RELIABILITY.md")
    args = parser.parse_args()
    chosen = args.only or list(SCENARIOS)
    parameters = sizes(args.quick)
    report: dict[str, Any] = {"machine": machine(), "quick": args.quick, "scenarios": {}}
    started = time.monotonic()
    for name in chosen:
        print(f"[reliability] {name}: {parameters[name]}", flush=True)
        began = time.monotonic()
        try:
            outcome = RUNNERS[name](**parameters[name])
        except (Exception, BaseExceptionGroup) as exc:  # one scenario's error must not lose the others' results
            outcome = {"harness_error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-4000:]}
        outcome["parameters"] = {k: list(v) if isinstance(v, tuple) else v for k, v in parameters[name].items()}
        outcome["scenario_seconds"] = round(time.monotonic() - began, 1)
        report["scenarios"][name] = outcome
        print(f"[reliability] {name}: done in {outcome['scenario_seconds']}s", flush=True)
    report["total_seconds"] = round(time.monotonic() - started, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = report["machine"]["date"][:10]
    suffix = "-quick" if args.quick else ""
    (args.out / f"reliability-{stamp}{suffix}.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    summary = markdown(report, json_name=f"reliability-{stamp}{suffix}.json")
    (args.out / f"RELIABILITY{suffix.upper().replace('-', '_')}.md").write_text(summary)
    print(summary)


if __name__ == "__main__":
    main()
