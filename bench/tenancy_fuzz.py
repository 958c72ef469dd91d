"""The tenant fuzzer's long run (issue 42): many steps over several seeds, with the figures recorded.

It runs the very test the README's test command runs (``tests/tenancy/test_fuzz.py``: its fixtures start
the control plane, the controller, opbroker's broker and the second broker, as every tenancy test does), with the
long run's settings passed through the environment, and records what the test wrote: steps, seeds, invariants
checked, the tenant actions' outcomes (refusals by status and reason), the longest run without a violation, the
controller's threads / RSS / work-queue maxima, the families enabled and disabled (with why), and each violation
with its seed and shrunk action list. Violations are recorded, not fatal: every seed runs (``KEEP_GOING``).

Run: ``flock /tmp/bench.lock python -m bench.tenancy_fuzz --steps 50000 --seeds 1,2,3,4`` (``--all-families``
ignores ``DISABLED``; ``--json PATH``). Results: ``bench/results/tenancy-fuzz-<date>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import machine

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
TEST = "tests/tenancy/test_fuzz.py"


def run(steps: int, seeds: list[int], *, platform_every: int, check_every: int, all_families: bool) -> dict[str, Any]:
    per_seed = max(1, steps // len(seeds))
    with tempfile.TemporaryDirectory(prefix="tenancy-fuzz-") as scratch:
        report = Path(scratch) / "figures.json"
        env = os.environ | {
            "OPBROKER_FUZZ_SEEDS": ",".join(map(str, seeds)),
            "OPBROKER_FUZZ_STEPS": str(per_seed),
            "OPBROKER_FUZZ_PLATFORM_EVERY": str(platform_every),
            "OPBROKER_FUZZ_CHECK_EVERY": str(check_every),
            "OPBROKER_FUZZ_KEEP_GOING": "1",
            "OPBROKER_FUZZ_REPORT": str(report),
            "OPBROKER_FUZZ_ALL_FAMILIES": "1" if all_families else "0",
        }
        started = time.monotonic()
        command = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", TEST]
        finished = subprocess.run(command, cwd=REPO, env=env, check=False)
        figures: dict[str, Any] = json.loads(report.read_text()) if report.exists() else {}
    return {
        "suite": "tenancy-fuzz",
        "steps_requested": steps,
        "steps_per_seed": per_seed,
        "platform_every": platform_every,
        "check_every": check_every,
        "all_families": all_families,
        "pytest_exit": finished.returncode,
        "wall_seconds": round(time.monotonic() - started, 1),
        "machine": machine(),
        "figures": figures,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50_000, help="tenant and platform steps over all seeds")
    parser.add_argument("--seeds", default="1,2,3,4")
    parser.add_argument("--platform-every", type=int, default=200)
    parser.add_argument("--check-every", type=int, default=50)
    parser.add_argument("--all-families", action="store_true", help="ignore generator.DISABLED")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",") if s]
    result = run(
        args.steps,
        seeds,
        platform_every=args.platform_every,
        check_every=args.check_every,
        all_families=args.all_families,
    )
    path = args.json or RESULTS / f"tenancy-fuzz-{time.strftime('%Y-%m-%dT%H%M%SZ', time.gmtime())}.json"
    path.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(f"recorded {path}")


if __name__ == "__main__":
    main()
