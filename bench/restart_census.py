"""Where a restarted controller's memory goes (not part of ``bench.run``): settle N instances + M bindings once
(this tree's controller), then restart the controller over the empty cluster and over the settled objects, each
fresh controller followed until idle (``restart.wait_idle``), and write per restart, once idle:

* ``<out>/<name>-tracemalloc.txt`` — Python's allocations still alive, by file and by line (``tracemalloc``, started
  before the controller's first import; ``--frames`` deep). The settled restart's lines minus the empty one's are
  what the objects hold; the difference is written as ``<out>/growth.txt``.
* ``<out>/<name>-plain-pymalloc.txt`` — from a second restart without tracemalloc (its allocator hooks hide them):
  ``sys._debugmallocstats()``, pymalloc's arenas, pools and blocks. Memory in arenas that holds no live block (free
  blocks in used pools, empty pools in arenas kept by another pool) is fragmentation: allocated, freed, not given
  back.
* ``<out>/census.json`` — VmRSS of each restart, the store's census by kind (``opbroker_store_*`` from /metrics),
  and the KiB per settled object over the empty restart, both without tracemalloc.

How: the restarted controller runs with a ``sitecustomize`` module on its ``PYTHONPATH`` (written into ``<out>``)
that starts tracemalloc and answers SIGUSR2 by writing both files from a thread of its own (the snapshot is taken
while the controller goes on). Nothing of this is in the product.

Usage: python -m bench.restart_census N M OUTDIR [--frames K]   (repo root, under flock /tmp/cluster.lock).
Findings: bench/README.md (restart memory) and issue 46's notes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import httpx

from bench import restart
from bench.common import Bench, bench_stack
from opbroker.devcluster.controlplane import free_ports

HOOK = '''"""bench.restart_census: SIGUSR2 writes the census files (see that module); CENSUS_FRAMES > 0: tracemalloc
from the start (its allocator hooks hide pymalloc's statistics, so those come from a restart without it)."""
import os, signal, sys, threading, tracemalloc

FRAMES = int(os.environ["CENSUS_FRAMES"])
if FRAMES:
    tracemalloc.start(FRAMES)


def _write(prefix):
    if FRAMES:
        _allocations(prefix)
    else:
        _pymalloc(prefix)
    open(prefix + ".done", "w").close()


def _allocations(prefix):
    snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
    with open(prefix + "-tracemalloc.txt", "w") as out:
        for group in ("filename", "lineno"):
            out.write(f"# by {group}\\n")
            for stat in snapshot.statistics(group)[:120]:
                frame = stat.traceback[0]
                where = frame.filename if group == "filename" else f"{frame.filename}:{frame.lineno}"
                out.write(f"{stat.size} {stat.count} {where}\\n")


def _pymalloc(prefix):
    # sys._debugmallocstats writes to the C stderr: file descriptor 2 points at the file meanwhile (another
    # thread's log line written then lands there too).
    sys.stderr.flush()
    saved, target = os.dup(2), os.open(prefix + "-pymalloc.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        os.dup2(target, 2)
        sys._debugmallocstats()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(target)


def _on_signal(signum, frame):
    threading.Thread(target=_write, args=(os.environ["CENSUS_PREFIX"],), daemon=True).start()


signal.signal(signal.SIGUSR2, _on_signal)
'''

STORE_SAMPLE = re.compile(r"^(opbroker_store_\w+)\{(.*)\} ([0-9.e+]+)$")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("instances", type=int)
    parser.add_argument("bindings", type=int)
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--frames", type=int, default=1, help="tracemalloc's traceback depth (at least 1)")
    args = parser.parse_args()
    if args.frames < 1:
        parser.error("--frames: at least 1 (the plain restarts are the ones without tracemalloc)")
    out: Path = args.outdir.resolve()
    out.mkdir(parents=True, exist_ok=True)
    hook = out / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(HOOK)
    (port,) = free_ports(1)
    census: dict[str, Any] = {"instances": args.instances, "bindings": args.bindings, "frames": args.frames}
    with bench_stack(f"census-{os.getpid()}", controller_args=("--metrics-port", str(port))) as bench:
        bench.make_operator_instant()
        base = dict(bench.process("controller").env or {})
        pythonpath = os.pathsep.join(p for p in (str(hook), base.get("PYTHONPATH", os.environ.get("PYTHONPATH"))) if p)
        restart.wait_idle(bench.process("controller"), port, expected=0, quiet=5, timeout=120)

        def measured(name: str, expected: int, frames: int) -> dict[str, Any]:
            env = {**base, "PYTHONPATH": pythonpath, "CENSUS_FRAMES": str(frames), "CENSUS_PREFIX": str(out / name)}
            answer = restart.restart(bench, port, expected=expected, quiet=5, env=env)
            return {
                "rss_kib": answer["rss_kib"],
                "idle_seconds": answer["idle_seconds"],
                **written(bench, port, out, name),
            }

        for name, expected in (("empty", 0), ("settled", -1)):
            if expected < 0:
                made, bound, census["settle"] = restart.settle_objects(
                    bench, port, args.instances, args.bindings, 32, 5
                )
                expected = objects = len(made) + bound
            census[name] = measured(name, expected, args.frames)
            census[f"{name}-plain"] = measured(f"{name}-plain", expected, 0)
    census["objects"] = objects
    census["kib_per_object"] = round(
        (census["settled-plain"]["rss_kib"] - census["empty-plain"]["rss_kib"]) / max(objects, 1), 2
    )
    (out / "growth.txt").write_text(growth(out / "empty-tracemalloc.txt", out / "settled-tracemalloc.txt"))
    (out / "census.json").write_text(json.dumps(census, indent=2) + "\n")
    print(json.dumps(census, indent=2))


def written(bench: Bench, port: int, out: Path, name: str) -> dict[str, Any]:
    """Ask the idle controller for its census files (SIGUSR2) and read its store census from /metrics."""
    process = bench.process("controller")
    assert process.popen is not None
    store = store_census(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text)
    done = out / f"{name}.done"
    done.unlink(missing_ok=True)
    os.kill(process.popen.pid, signal.SIGUSR2)
    deadline = time.monotonic() + 300
    while not done.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the controller wrote no census for {name} within 300 s")
        time.sleep(0.5)
    return {"store": store}


def store_census(metrics: str) -> dict[str, float]:
    """The store's samples (``opbroker_store_objects`` / ``_body_bytes``) by their labels."""
    found = {}
    for line in metrics.splitlines():
        match = STORE_SAMPLE.match(line)
        if match:
            found[f"{match.group(1)}{{{match.group(2)}}}"] = float(match.group(3))
    return found


def growth(empty: Path, settled: Path) -> str:
    """The settled restart's live allocations minus the empty one's, by file and by line, largest first."""

    def read(path: Path) -> dict[str, dict[str, tuple[int, int]]]:
        groups: dict[str, dict[str, tuple[int, int]]] = {}
        current = ""
        for line in path.read_text().splitlines():
            if line.startswith("# by "):
                current = line[5:]
                groups[current] = {}
            elif line:
                size, count, where = line.split(" ", 2)
                groups[current][where] = (int(size), int(count))
        return groups

    before, after = read(empty), read(settled)
    lines = []
    for group, rows in after.items():
        lines.append(f"# by {group}: KiB, allocations, where")
        deltas = sorted(
            ((size - before.get(group, {}).get(where, (0, 0))[0], count - before.get(group, {}).get(where, (0, 0))[1],
              where) for where, (size, count) in rows.items()),
            reverse=True,
        )  # fmt: skip
        lines += [f"{size / 1024:9.0f} {count:8d} {where}" for size, count, where in deltas[:40]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
