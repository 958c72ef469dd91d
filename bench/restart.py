"""Restart: a fresh controller over settled objects.

Settles N instances and M bindings the way the provisioning and bindings suites make them (through the
OSB API, the demo plan, the demo operator answering at once), waits until the controller is idle, stops it
with SIGTERM and starts a fresh one with the same flags. Measured on the fresh controller:

* **API requests** it issues from its start until it is idle, from the audit log (User-Agent
  ``opbroker-controller``; ``kopf`` too before issue 45): writes (create/update/patch/delete — the target is 0: nothing
  about a settled object needs writing), and reads: gets, lists and watches (a watch counted when it
  starts);
* **ready**: seconds from the start of the process until its ``/readyz`` answers 200;
* **idle**: seconds until the controller has seen every object (``opbroker_objects``), its work queue has
  nothing due (``opbroker_workqueue_due`` — or, without that gauge, ``_depth`` — and ``_in_flight`` 0; keys
  waiting for their resync do not count) and its reconcile count
  (``opbroker_reconcile_seconds_count``) no longer moves — the moment of the last change, confirmed by
  ``quiet`` seconds without one. A controller without the queue gauges (an older commit, see
  ``run.py --compare``) is judged on the other two;
* **CPU seconds** of the process from its start until idle;
* **memory per settled object**: its resident memory once idle, minus that of a controller started the
  same way (same flags, same control plane) over the empty cluster before any object was made, divided
  by the number of objects (target ≤ 10 KiB).
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.bindings import bind_all
from bench.common import (
    REVIEW_RESOURCES,
    Bench,
    bench_stack,
    component_of,
    context_switches,
    is_write,
    pid_usage,
    threads_of,
)
from bench.provisioning import provision_all
from opbroker.devcluster.controlplane import free_ports
from opbroker.devcluster.processes import Process

DEFAULT_INSTANCES, DEFAULT_BINDINGS = 5_000, 10_000
#: How long the reconcile count must stand still (queue empty, every object seen) to call the controller idle.
QUIET_SECONDS = 5.0
POLL_SECONDS = 0.2
TARGETS = {"controller_writes": 0, "memory_per_object_kib": 10.0}
READ_VERBS = ("get", "list", "watch")


def run(
    instances: int = DEFAULT_INSTANCES,
    bindings: int = DEFAULT_BINDINGS,
    *,
    concurrency: int = 32,
    quiet: float = QUIET_SECONDS,
) -> dict[str, Any]:
    """Settle ``instances`` instances and ``bindings`` bindings (spread evenly over the instances), then
    restart the controller over them once: :func:`run_alternating` with this tree as its one side (one code
    path for both, so the compare's smoke test covers this one too)."""
    (answer,) = run_alternating(
        instances, bindings, {"this tree": {}}, rounds=1, concurrency=concurrency, quiet=quiet
    ).values()
    return answer


def summary(
    sizes: tuple[int, int],
    quiet: float,
    loads: tuple[tuple[float, ...], tuple[float, ...]],
    settle: dict[str, Any],
    empty: dict[str, Any],
    settled: dict[str, Any],
    *,
    writes: int,
) -> dict[str, Any]:
    """A restart suite's answer: the restart measured over the settled objects beside the empty cluster's, the
    memory per object between them, and the targets (``writes``: the most any restart counted)."""
    instances, bindings = sizes
    objects = instances + bindings
    per_object = (settled["rss_kib"] - empty["rss_kib"]) / objects if objects else float("nan")
    return {
        "instances": instances,
        "bindings": bindings,
        "objects": objects,
        "quiet_seconds": quiet,
        "load_average_before": [round(x, 2) for x in loads[0]],
        "load_average_after": [round(x, 2) for x in loads[1]],
        "settle": settle,
        "empty": empty,
        "restart": settled,
        "controller_writes": writes,
        "memory_per_object_kib": round(per_object, 2),
        "targets": TARGETS,
        "targets_met": {
            "controller_writes": writes <= TARGETS["controller_writes"],
            "memory_per_object_kib": per_object <= TARGETS["memory_per_object_kib"],
        },
    }


def settle_objects(
    bench: Bench, port: int, instances: int, bindings: int, concurrency: int, quiet: float
) -> tuple[list[str], int, dict[str, Any]]:
    """Provision ``instances`` and bind ``bindings`` (spread evenly over them) through the OSB API, then wait for
    the controller to go idle: the instances' names, the bindings made, and how long it took."""
    namespace = bench.namespace("bench")
    provisioned = provision_all(bench, namespace, instances, concurrency)
    names: list[str] = provisioned.pop("names")
    settle: dict[str, Any] = {
        "instances_seconds": provisioned["total_seconds"],
        "instances_failed": provisioned["failed"],
    }
    if bindings:
        per_instance = max(1, bindings // len(names))
        targets = names if bindings >= len(names) else names[:bindings]
        bound = bind_all(bench, namespace, targets, per_instance, concurrency)
        settle |= {"bindings_seconds": bound["total_seconds"], "bindings_failed": bound["failed"]}
        bindings = bound["bindings"]
    settle["controller_idle"] = wait_idle(
        bench.process("controller"), port, expected=len(names) + bindings, quiet=quiet
    )
    return names, bindings, settle


def run_alternating(
    instances: int,
    bindings: int,
    sides: dict[str, dict[str, str]],
    *,
    rounds: int = 3,
    concurrency: int = 32,
    quiet: float = QUIET_SECONDS,
) -> dict[str, dict[str, Any]]:
    """Before and after on one cluster (or one side alone): settle the objects once (with this tree's controller),
    then restart the controller ``rounds`` times with each side's code, alternating (A B B A A B …), so whatever
    drifts on the machine meanwhile (the API server's caches and memory, the audit log's size, other work on shared
    cores) meets both sides alike. ``sides``: name → environment of its controller (``PYTHONPATH`` of its tree).

    Measured so because two restart suites run one after the other, each on its own cluster, differed by a
    third for the same commit (CPU to idle 9.5 and 14.7 s over 1 000 instances + 2 000 bindings): more than
    the change they were to show. Each side's answer is :func:`summary`'s, with the run of the median CPU as its
    ``restart`` and every run's figures beside it (``runs``)."""
    (port,) = free_ports(1)
    names = list(sides)
    order = [name for r in range(rounds) for name in (names if r % 2 == 0 else names[::-1])]
    load = os.getloadavg()
    with bench_stack(f"restart-ab-{instances}-{os.getpid()}", controller_args=("--metrics-port", str(port))) as bench:
        bench.make_operator_instant()
        base_env = dict(bench.process("controller").env or {})
        wait_idle(bench.process("controller"), port, expected=0, quiet=quiet, timeout=120)
        empty = {name: restart(bench, port, expected=0, quiet=quiet, env={**base_env, **sides[name]}) for name in names}
        made, bindings, settle = settle_objects(bench, port, instances, bindings, concurrency, quiet)
        objects = len(made) + bindings
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
        for name in order:
            env = {**base_env, **sides[name]}
            runs[name].append(restart(bench, port, expected=objects, quiet=quiet, env=env))
        load_after = os.getloadavg()
    answers: dict[str, dict[str, Any]] = {}
    for name in names:
        by_cpu = sorted(runs[name], key=lambda run: run["cpu_seconds_to_idle"])
        median = by_cpu[len(by_cpu) // 2]
        writes = max(run["writes"] for run in runs[name])
        answers[name] = {
            **summary((len(made), bindings), quiet, (load, load_after), settle, empty[name], median, writes=writes),
            "order": order,
            "runs": {
                "cpu_seconds_to_idle": [run["cpu_seconds_to_idle"] for run in runs[name]],
                "system_seconds_to_idle": [run["system_seconds_to_idle"] for run in runs[name]],
                "context_switches_to_idle": [run["context_switches_to_idle"] for run in runs[name]],
                "idle_seconds": [run["idle_seconds"] for run in runs[name]],
                "ready_seconds": [run["ready_seconds"] for run in runs[name]],
                "gets": [run["reads"]["get"] for run in runs[name]],
                "renders": [run["renders"] for run in runs[name]],
                "writes": [run["writes"] for run in runs[name]],
                "rss_kib": [run["rss_kib"] for run in runs[name]],
            },
            "note": f"Median of {rounds} restarts per side on one cluster, sides alternating: {' '.join(order)}.",
        }
    return answers


def started_instead(bench: Bench, old: Process, command: list[str], env: dict[str, str] | None) -> Process:
    """A fresh process in the stopped ``old``'s place in the stack (its name and log folder), started."""
    fresh = Process(old.name, command, old.log.parent, env)
    bench.stack.processes[bench.stack.processes.index(old)] = fresh
    fresh.start()
    return fresh


def restart(
    bench: Bench,
    port: int,
    *,
    expected: int,
    quiet: float,
    timeout: float | None = None,
    env: dict[str, str] | None = None,
    command: list[str] | None = None,
) -> dict[str, Any]:
    """SIGTERM the controller, start a fresh one with the same command (or ``command``, and ``env``, if given,
    instead of the old one's environment), measure it until idle."""
    old = bench.process("controller")
    stopping = time.perf_counter()
    old.stop()
    stop_seconds = time.perf_counter() - stopping
    assert old.popen is not None
    exit_code = old.popen.returncode
    time.sleep(1.0)  # the API server logs the end of the old controller's watches
    bench.audit.mark()
    fresh = started_instead(bench, old, command or old.command, old.env if env is None else env)
    assert fresh.popen is not None
    watched = wait_idle(fresh, port, expected=expected, quiet=quiet, timeout=timeout or max(120.0, expected * 0.1))
    # Read once it serves: Popen returns when the exec pipe closes, and /proc/<pid>/environ can still show the
    # parent's environment then (the clean-clone run on a loaded machine read no PYTHONPATH of the side's tree).
    pythonpath = environment_of(fresh.popen.pid).get("PYTHONPATH")
    requests = audit_requests(bench.audit.path, bench.audit.offset)
    controller = Counter({(verb, resource): n for (who, verb, resource), n in requests.items() if who == "controller"})
    verbs: Counter[str] = Counter()
    for (verb, _), n in controller.items():
        verbs[verb] += n
    return {
        "old_controller": {"stop_seconds": round(stop_seconds, 2), "exit_code": exit_code},
        "pythonpath": pythonpath,
        **watched,
        "writes": sum(n for (verb, resource), n in controller.items() if is_write(verb, resource)),
        "access_reviews": sum(n for (_, resource), n in controller.items() if resource in REVIEW_RESOURCES),
        "reads": {verb: verbs.get(verb, 0) for verb in READ_VERBS},
        "requests_by_verb": dict(sorted(verbs.items())),
        "requests_by_resource": {f"{verb} {resource}": n for (verb, resource), n in controller.most_common()},
        "writes_by_component": {
            who: sum(n for (c, verb, resource), n in requests.items() if c == who and is_write(verb, resource))
            for who in ("controller", "broker", "operator")
        },
    }


def wait_idle(process: Process, port: int, *, expected: int, quiet: float, timeout: float = 600.0) -> dict[str, Any]:
    """Poll the controller's /readyz and /metrics until it is idle (see the module's docstring); timings are
    from ``process``'s start (as near as the harness knows it: when this is called on a fresh process)."""
    assert process.popen is not None
    pid = process.popen.pid
    started = time.perf_counter()
    deadline = started + timeout
    ready_at: float | None = None
    last: tuple[Any, ...] | None = None
    changed_at, cpu_at_change = started, 0.0
    usage_at_change: dict[str, float] = {}
    switches_at_change = 0
    metrics: dict[str, float] = {}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as http:
        while True:
            now = time.perf_counter()
            if not process.running:
                raise RuntimeError(f"the controller exited; last lines:\n{process.tail()}")
            if now > deadline:
                raise TimeoutError(f"the controller was not idle within {timeout:.0f} s: {metrics}")
            if ready_at is None and probe(http, "/readyz"):
                ready_at = now
            scraped = scrape(http)
            if scraped is not None:
                metrics = scraped
                usage = pid_usage(pid)
                cpu = usage["cpu_seconds"]
                state = (
                    metrics.get("opbroker_reconcile_seconds_count", 0.0),
                    metrics.get("opbroker_objects"),
                    # Keys due now: since day two every provisioned instance waits in the queue for its resync, so
                    # the depth (due + delayed) never drains; a tree without the gauge has no resync either.
                    metrics.get("opbroker_workqueue_due", metrics.get("opbroker_workqueue_depth")),
                    metrics.get("opbroker_workqueue_in_flight"),
                )
                if state != last:
                    last, changed_at, cpu_at_change = state, now, cpu
                    usage_at_change, switches_at_change = usage, context_switches(pid)
                _, seen, depth, in_flight = state
                settled = (seen is None or seen >= expected) and not depth and not in_flight
                if ready_at is not None and settled and now - changed_at >= quiet:
                    break
            time.sleep(POLL_SECONDS)
    idle_at = max(changed_at, ready_at)
    rss_kib = vm_rss_kib(pid)
    threads = threads_of(pid)
    return {
        "ready_seconds": round(ready_at - started, 2),
        "idle_seconds": round(idle_at - started, 2),
        "cpu_seconds_to_idle": round(cpu_at_change, 2),
        "user_seconds_to_idle": usage_at_change.get("user_seconds"),
        "system_seconds_to_idle": usage_at_change.get("system_seconds"),
        "context_switches_to_idle": switches_at_change,
        "reconciles": int(metrics.get("opbroker_reconcile_seconds_count", 0)),
        # Objects rendered to idle (instances' provision, bindings' bind): what records did not answer (None: a
        # tree without the counter; its family is listed before its first sample).
        "renders": int(metrics.get("opbroker_renders_total", 0)) if "opbroker_renders" in metrics else None,
        "objects_seen": None if metrics.get("opbroker_objects") is None else int(metrics["opbroker_objects"]),
        "queue_gauges": "opbroker_workqueue_depth" in metrics,
        "rss_kib": rss_kib,
        "rss_mib": round(rss_kib / 1024, 1),
        "threads": threads,
    }


def probe(http: httpx.Client, path: str) -> bool:
    try:
        return http.get(path).status_code == 200
    except httpx.HTTPError:
        return False


def scrape(http: httpx.Client) -> dict[str, float] | None:
    """Every sample of the controller's /metrics summed over its labels, by sample name (and every family
    by its name); None when the endpoint does not answer (yet)."""
    try:
        response = http.get("/metrics")
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(response.text):
        totals.setdefault(family.name, 0.0)  # a family without samples yet (no object seen) counts 0
        for sample in family.samples:
            totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return totals


def environment_of(pid: int) -> dict[str, str]:
    """The environment a process was started with (where a compare's controller imports its code from)."""
    pairs = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(pair.decode(errors="replace").partition("=")[::2] for pair in pairs if b"=" in pair)


def vm_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def audit_requests(path: Path, offset: int) -> Counter[tuple[str, str, str]]:
    """Requests logged since ``offset`` by (component, verb, resource): a watch when it starts (it may never
    complete while we look), everything else when answered."""
    found: Counter[tuple[str, str, str]] = Counter()
    with path.open("rb") as handle:
        handle.seek(offset)
        for line in handle:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line still being written
            verb = event.get("verb", "?")
            if event.get("stage") != ("ResponseStarted" if verb == "watch" else "ResponseComplete"):
                continue
            ref = event.get("objectRef") or {}
            resource = ref.get("resource", "-") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
            found[(component_of(event.get("userAgent", "")), verb, resource)] += 1
    return found
