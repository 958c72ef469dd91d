"""Profile the restart on two trees (not part of ``bench.run``): settle N instances + M bindings once (this tree's
controller), then restart the controller with each side's code in turn (before after after before: REF's, this
tree's), each fresh controller followed until idle as the restart suite does (``restart.wait_idle``: CPU user and
system, context switches) and, unless ``NOSPY`` is set, recorded by py-spy (``SPY``: 100 Hz, ``--gil`` unless
``SPY_GIL=0`` — then every thread on a CPU, the GIL held or not —, raw;
``--native`` cannot run ``--nonblocking``). Each restart's audit-log slice is kept beside its profile, to count
what it asked the API server (``requestURI``, selectors and page sizes included).

Usage: python -m bench.restart_profile N M REF OUTDIR   (repo root, under flock /tmp/cluster.lock; py-spy from
PyPI in a virtual environment of its own, its path in ``SPY``). Findings: bench/results/RESTART-PROFILE.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench import compare, restart
from bench.common import bench_stack
from opbroker.devcluster.controlplane import free_ports
from opbroker.devcluster.processes import Process

SPY = os.environ.get("SPY", "/tmp/spyenv/bin/py-spy")


def main() -> None:
    instances, bindings, ref, outdir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
    outdir.mkdir(parents=True, exist_ok=True)
    (port,) = free_ports(1)
    with compare.other_tree(ref) as before:
        trees = {"before": compare.environment(before), "after": compare.environment(compare.this_tree())}
        with bench_stack(f"prof-{os.getpid()}", controller_args=("--metrics-port", str(port))) as bench:
            bench.make_operator_instant()
            base_env = dict(bench.process("controller").env or {})
            restart.wait_idle(bench.process("controller"), port, expected=0, quiet=5, timeout=120)
            made, bound, settle = restart.settle_objects(bench, port, instances, bindings, 32, 5)
            print("settled", len(made), bound, json.dumps(settle)[:300], flush=True)
            objects = len(made) + bound
            for i, side in enumerate(["before", "after", "after", "before"]):
                old = bench.process("controller")
                old.stop()
                time.sleep(1.0)
                bench.audit.mark()
                fresh = Process(old.name, old.command, old.log.parent, {**base_env, **trees[side]})
                bench.stack.processes[bench.stack.processes.index(old)] = fresh
                fresh.start()
                assert fresh.popen is not None
                out = outdir / f"{i}-{side}.txt"
                spy = (
                    None
                    if os.environ.get("NOSPY")
                    else subprocess.Popen(
                        [
                            SPY,
                            "record",
                            "--pid",
                            str(fresh.popen.pid),
                            "--rate",
                            "100",
                            *(["--gil"] if os.environ.get("SPY_GIL", "1") == "1" else []),
                            "--format",
                            "raw",
                            "--nonblocking",
                            "--output",
                            str(out),
                        ],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
                watched = restart.wait_idle(fresh, port, expected=objects, quiet=5, timeout=600)
                if spy is not None:
                    spy.send_signal(2)
                    spy.wait(30)
                with bench.audit.path.open("rb") as audit:
                    audit.seek(bench.audit.offset)
                    (outdir / f"{i}-{side}.audit").write_bytes(audit.read())
                requests = restart.audit_requests(bench.audit.path, bench.audit.offset)
                mine = {f"{v} {r}": n for (who, v, r), n in requests.items() if who == "controller"}
                print(
                    side,
                    json.dumps(
                        {
                            k: watched.get(k)
                            for k in (
                                "cpu_seconds_to_idle",
                                "user_seconds_to_idle",
                                "system_seconds_to_idle",
                                "context_switches_to_idle",
                                "idle_seconds",
                            )
                        }
                    ),
                    json.dumps(dict(sorted(mine.items(), key=lambda kv: -kv[1])[:12])),
                    flush=True,
                )


if __name__ == "__main__":
    main()
