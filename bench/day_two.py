"""Day two (issue 43): what keeping settled instances as declared costs, and how fast drift is set back.

**Idle** (``idle``): on its own stack (the controller with ``--metrics-port``), INSTANCES instances of the demo plan
are settled as the restart suite settles them (:func:`bench.restart.settle_objects`; no bindings), by a controller
started with ``--resync-seconds 0`` — settling is not what is measured, and a controller whose reconcile count
never stands still (a resync trickling in while thousands still provision) never looks idle. Then:

* **default resync**: the controller is restarted with ``--resync-seconds DEFAULT`` (600) and measured until idle as
  the restart suite does (its restart pass checks every instance once: with nothing remembered, each renders).
  From idle, a window long enough for a whole resync pass (the pass falls 0.9 to 1.1 periods after each
  instance's check) is watched: the controller's CPU (% of one core) over the window and over its first part
  (before the first resync is due: the cost of doing nothing), its VmRSS at the window's start and end, minus that
  of a controller started the same way over the empty cluster, per instance;
* **short resync**: restarted again with ``--resync-seconds SHORT`` (120) and watched for ``passes`` periods after
  its restart pass: reconciles (= checks) and CPU seconds over those periods, less the quiet rate measured above,
  give CPU seconds per check and per resync pass (times INSTANCES). If ``py-spy`` is found (``.venv/bin/py-spy``,
  ``$PY_SPY`` or on ``PATH``), a profile of one more period is recorded (collapsed stacks in ``bench/results/``;
  the top frames by own and total samples in the result).

**Drift** (``drift``): on a fresh stack, INSTANCES instances (default 200) are settled with the default resync.
A watch on the namespace's Databases records each event's time. Then, for K instances each (different ones, so no
correction's backoff meets the next): their Database is deleted, one after the other with no wait (the time
taken from each DELETE's answer to a Database of that name with another uid in the watch), and their
``spec.version`` patched to another value (from the PATCH's answer to the version back as rendered). p50/p99 of
each, with the controller's CPU and writes over each phase.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from kubernetes import client, watch

from bench.common import Bench, bench_stack, end_watch, pid_usage, summary
from bench.restart import audit_requests, restart, scrape, settle_objects, vm_rss_kib, wait_idle
from opbroker.devcluster.controlplane import free_ports
from opbroker.devcluster.processes import Process

DEFAULT_INSTANCES = 20_000
DEFAULT_DRIFT = (200, 100)
RESYNC_DEFAULT, RESYNC_SHORT = 600.0, 120.0
#: Periods of the short resync measured after its restart pass (and one more profiled, when py-spy is there).
PASSES = 2
TARGETS = {"idle_cpu_percent_default_resync": 1.0}
SAMPLE_SECONDS = 1.0
RESULTS = Path(__file__).resolve().parent / "results"
DATABASES = ("demo.opbroker.io", "v1alpha1", "databases")


def run(
    instances: int = DEFAULT_INSTANCES,
    drift_instances: int = DEFAULT_DRIFT[0],
    drifted: int = DEFAULT_DRIFT[1],
    *,
    resync_default: float = RESYNC_DEFAULT,
    resync_short: float = RESYNC_SHORT,
    passes: int = PASSES,
    concurrency: int = 32,
    quiet: float = 5.0,
    profile: bool = True,
    window: float | None = None,
) -> dict[str, Any]:
    return {
        "idle": idle(
            instances,
            window=window,
            resync_default=resync_default,
            resync_short=resync_short,
            passes=passes,
            concurrency=concurrency,
            quiet=quiet,
            profile=profile,
        ),
        "drift": drift(drift_instances, drifted, concurrency=concurrency, quiet=quiet),
    }


# -- idle ------------------------------------------------------------------------------------------------


def with_flag(command: list[str], flag: str, value: str) -> list[str]:
    """``command`` with ``flag`` set to ``value`` (an earlier one dropped)."""
    out: list[str] = []
    skip = False
    for part in command:
        if skip:
            skip = False
            continue
        if part == flag:
            skip = True
            continue
        out.append(part)
    return [*out, flag, value]


def idle(
    instances: int,
    *,
    resync_default: float,
    resync_short: float,
    passes: int,
    concurrency: int,
    quiet: float,
    profile: bool,
    window: float | None = None,
) -> dict[str, Any]:
    """``window``: seconds watched with the default resync (None: until a whole resync pass has run)."""
    (port,) = free_ports(1)
    load = os.getloadavg()
    args = ("--metrics-port", str(port), "--resync-seconds", "0")
    with bench_stack(f"day-two-{instances}-{os.getpid()}", controller_args=args) as bench:
        bench.make_operator_instant()
        wait_idle(bench.process("controller"), port, expected=0, quiet=quiet, timeout=120)

        def flags(seconds: float) -> list[str]:
            return with_flag(bench.process("controller").command, "--resync-seconds", f"{seconds:g}")

        # The baseline: the controller over the empty cluster (its flags but the resync's, which changes nothing
        # there); it then settles the objects, without resync.
        empty = restart(bench, port, expected=0, quiet=quiet)
        names, _, settle = settle_objects(bench, port, instances, 0, concurrency, quiet)
        count = len(names)

        # Default resync: restart, idle, then a window covering a whole resync pass.
        restarted_at = time.perf_counter()
        default = restart(bench, port, expected=count, quiet=quiet, command=flags(resync_default))
        pid = _pid(bench)
        whole_pass = restarted_at + default["idle_seconds"] + 1.1 * resync_default + 15
        window_end = whole_pass if window is None else time.perf_counter() + window
        watched = observe(pid, port, until=window_end)
        first_due = restarted_at + 0.9 * resync_default  # no resync is due before (the earliest check + 0.9 period)
        quiet_part = _between(watched["samples"], watched["samples"][0]["t"], first_due - 2)
        default_result = {
            "restart": _restart_brief(default),
            "window": _window(watched, count, empty["rss_kib"]),
            "before_first_resync": quiet_part,
        }

        # Short resync: restart, its restart pass, then ``passes`` periods.
        restarted_at = time.perf_counter()
        short_restart = _restart_unmeasured(bench, flags(resync_short))
        pid = _pid(bench)
        pass_done = _wait_reconciles(pid, port, count, timeout=max(300.0, count * 0.05))
        watched_short = observe(pid, port, until=pass_done + (passes + 0.1) * resync_short)
        start = pass_done + 0.1 * resync_short  # the first resyncs are due 0.9 period after the first checks
        steady = _between(watched_short["samples"], start, start + passes * resync_short)
        rate = quiet_part["cpu_percent"] / 100 if quiet_part else 0.0
        checks = steady["reconciles"]
        extra_cpu = steady["cpu_seconds"] - rate * steady["seconds"]
        per_check = extra_cpu / checks if checks else None  # a sweep that finds nothing moved checks nothing
        per_pass = extra_cpu / passes
        short_result = {
            "restart_pass": {
                "seconds": round(pass_done - short_restart["started"], 1),
                "cpu_seconds": round(_cpu_at(watched_short["samples"], pass_done) - short_restart["cpu_start"], 2),
                "note": "the restart's own pass: every instance checked once with nothing remembered (renders)",
            },
            "steady": steady,
            "resync_seconds": resync_short,
            "checks_per_second": round(checks / steady["seconds"], 2) if steady["seconds"] else None,
            "cpu_ms_per_check": round(1000 * per_check, 3) if per_check is not None else None,
            "cpu_seconds_per_pass": round(per_pass, 2),
            "cpu_seconds_per_pass_gross": round(steady["cpu_seconds"] / passes, 2),
            "quiet_cpu_percent_subtracted": quiet_part["cpu_percent"] if quiet_part else None,
            "memory_by_pass": _memory_by_pass(
                watched_short["samples"], pass_done, resync_short, passes, count, empty["rss_kib"]
            ),
        }
        if profile:
            short_result["profile"] = take_profile(pid, resync_short, f"{instances}")
        load_after = os.getloadavg()
    window_result = default_result["window"]
    # What the default resync costs at this size if the window held no whole pass: the quiet rate plus the checks
    # measured with the short resync, one per instance per period.
    quiet_percent = quiet_part.get("cpu_percent") or 0.0
    estimate = quiet_percent + 100 * per_pass / resync_default
    return {
        "instances": count,
        "load_average_before": [round(x, 2) for x in load],
        "load_average_after": [round(x, 2) for x in load_after],
        "settle": settle,
        "empty": _restart_brief(empty),
        "default_resync": {"resync_seconds": resync_default, **default_result},
        "short_resync": short_result,
        "window_holds_whole_pass": window is None,
        "estimated_cpu_percent_default_resync": round(estimate, 3) if estimate is not None else None,
        "targets": TARGETS,
        "targets_met": {
            "idle_cpu_percent_default_resync": (window_result["cpu_percent"] if window is None else (estimate or 0.0))
            <= TARGETS["idle_cpu_percent_default_resync"]
        },
    }


def _pid(bench: Bench) -> int:
    popen = bench.process("controller").popen
    assert popen is not None
    return popen.pid


def _restart_brief(measured: dict[str, Any]) -> dict[str, Any]:
    keep = ("ready_seconds", "idle_seconds", "cpu_seconds_to_idle", "reconciles", "objects_seen", "rss_mib", "rss_kib")
    return {k: measured[k] for k in keep if k in measured} | {
        "writes": measured.get("writes"),
        "reads": measured.get("reads"),
    }


def _restart_unmeasured(bench: Bench, command: list[str]) -> dict[str, float]:
    """Restart the controller with ``command`` without waiting for idle (with a short resync it never stands
    still): when it started and its CPU then."""
    old = bench.process("controller")
    old.stop()
    time.sleep(1.0)
    fresh = Process(old.name, command, old.log.parent, old.env)
    bench.stack.processes[bench.stack.processes.index(old)] = fresh
    fresh.start()
    assert fresh.popen is not None
    return {"started": time.perf_counter(), "cpu_start": 0.0}


def _wait_reconciles(pid: int, port: int, count: int, *, timeout: float) -> float:
    """Until the fresh controller has seen ``count`` objects and reconciled each once with nothing due: the end of
    its restart pass (a time)."""
    deadline = time.perf_counter() + timeout
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as http:
        while time.perf_counter() < deadline:
            metrics = scrape(http)
            if metrics is not None:
                done = metrics.get("opbroker_reconcile_seconds_count", 0.0) >= count
                seen = (metrics.get("opbroker_objects") or 0) >= count
                idle_now = not metrics.get("opbroker_workqueue_due") and not metrics.get("opbroker_workqueue_in_flight")
                if done and seen and idle_now:
                    return time.perf_counter()
            pid_usage(pid)  # raises if the controller is gone
            time.sleep(0.2)
    raise TimeoutError(f"the controller's restart pass over {count} instances took over {timeout:.0f} s")


def observe(pid: int, port: int, *, until: float) -> dict[str, Any]:
    """Sample the controller every second until ``until``: CPU seconds, VmRSS, reconcile count, queue gauges."""
    samples: list[dict[str, float]] = []
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as http:
        while True:
            now = time.perf_counter()
            metrics = scrape(http) or {}
            samples.append(
                {
                    "t": now,
                    "cpu": pid_usage(pid)["cpu_seconds"],
                    "rss_kib": vm_rss_kib(pid),
                    "reconciles": metrics.get("opbroker_reconcile_seconds_count", 0.0),
                    "due": metrics.get("opbroker_workqueue_due", float("nan")),
                    "delayed": metrics.get("opbroker_workqueue_delayed", float("nan")),
                    "depth": metrics.get("opbroker_workqueue_depth", float("nan")),
                }
            )
            if now >= until:
                break
            time.sleep(max(0.0, min(SAMPLE_SECONDS, until - time.perf_counter())))
    return {"samples": samples}


def _cpu_at(samples: list[dict[str, float]], at: float) -> float:
    return next((s["cpu"] for s in samples if s["t"] >= at), samples[-1]["cpu"])


def _between(samples: list[dict[str, float]], start: float, end: float) -> dict[str, Any]:
    """CPU, reconciles and seconds between the samples nearest ``start`` and ``end``."""
    inside = [s for s in samples if start <= s["t"] <= end]
    if len(inside) < 2:
        return {}
    first, last = inside[0], inside[-1]
    seconds = last["t"] - first["t"]
    cpu = last["cpu"] - first["cpu"]
    return {
        "seconds": round(seconds, 1),
        "cpu_seconds": round(cpu, 2),
        "cpu_percent": round(100 * cpu / seconds, 3) if seconds else None,
        "reconciles": int(last["reconciles"] - first["reconciles"]),
    }


def _memory_by_pass(
    samples: list[dict[str, float]], start: float, period: float, passes: int, count: int, empty_rss_kib: int
) -> list[dict[str, Any]]:
    """VmRSS at the end of the restart pass and at the end of each resync period after it (the sample nearest
    each), and per instance over the empty controller: memory that every pass left behind would climb here."""
    out = []
    for done in range(passes + 1):
        nearest = min(samples, key=lambda s, t=start + done * period: abs(s["t"] - t))
        out.append(
            {
                "passes": done,
                "rss_mib": round(nearest["rss_kib"] / 1024, 1),
                "kib_per_instance": round((nearest["rss_kib"] - empty_rss_kib) / count, 2) if count else None,
            }
        )
    return out


def _window(watched: dict[str, Any], count: int, empty_rss_kib: int) -> dict[str, Any]:
    samples = watched["samples"]
    first, last = samples[0], samples[-1]
    seconds = last["t"] - first["t"]
    cpu = last["cpu"] - first["cpu"]
    per_object = [round((s["rss_kib"] - empty_rss_kib) / count, 2) if count else None for s in (first, last)]
    step = max(1, len(samples) // 60)
    return {
        "seconds": round(seconds, 1),
        "cpu_seconds": round(cpu, 2),
        "cpu_percent": round(100 * cpu / seconds, 3) if seconds else None,
        "reconciles": int(last["reconciles"] - first["reconciles"]),
        "rss_mib_start": round(first["rss_kib"] / 1024, 1),
        "rss_mib_end": round(last["rss_kib"] / 1024, 1),
        "rss_mib_max": round(max(s["rss_kib"] for s in samples) / 1024, 1),
        "kib_per_object_start": per_object[0],
        "kib_per_object_end": per_object[1],
        "queue_delayed_start_end": [first["delayed"], last["delayed"]],
        "timeline": [
            {
                "s": round(s["t"] - first["t"]),
                "cpu": round(s["cpu"] - first["cpu"], 2),
                "rss_mib": round(s["rss_kib"] / 1024, 1),
                "reconciles": int(s["reconciles"] - first["reconciles"]),
                "delayed": s["delayed"],
            }
            for s in samples[::step]
        ],
    }


def py_spy() -> str | None:
    for candidate in (
        os.environ.get("PY_SPY"),
        str(Path(__file__).resolve().parent.parent / ".venv" / "bin" / "py-spy"),
        shutil.which("py-spy"),
    ):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def take_profile(pid: int, seconds: float, label: str) -> dict[str, Any]:
    """``py-spy record`` of the controller for ``seconds`` (its native threads not included); the collapsed
    stacks go to ``bench/results/day-two-profile-<label>-<date>.txt``, the top frames into the result."""
    tool = py_spy()
    if tool is None:
        return {"skipped": "py-spy not found (.venv/bin/py-spy, $PY_SPY or PATH)"}
    stamp = time.strftime("%Y-%m-%dT%H%M%SZ", time.gmtime())
    out = RESULTS / f"day-two-profile-{label}-{stamp}.txt"
    RESULTS.mkdir(exist_ok=True)
    command = [tool, "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", "50"]
    command += ["--format", "raw", "--output", str(out), "--nonblocking"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 60)
    if done.returncode != 0 or not out.exists():
        return {"failed": (done.stderr or done.stdout)[-500:], "command": command}
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = 0
    for line in out.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        frames = stack.split(";")
        samples += int(n)
        own[frames[-1]] += int(n)
        for frame in set(frames):
            total[frame] += int(n)
    return {
        "file": out.name,
        "seconds": seconds,
        "samples": samples,
        "top_own": [[frame, n] for frame, n in own.most_common(25)],
        "top_total": [[frame, n] for frame, n in total.most_common(40)],
    }


# -- drift -------------------------------------------------------------------------------------------------


class DatabaseWatch:
    """Every Database event of a namespace with its time (a watch, in a thread)."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api, self.namespace = api, namespace
        self.events: list[tuple[float, str, str, str, str | None, int]] = []  # t, type, name, uid, version, rv
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._stream: watch.Watch | None = None
        self.version = ""

    def start(self) -> None:
        custom = client.CustomObjectsApi(self.api)
        listing = custom.list_namespaced_custom_object(*DATABASES[:2], self.namespace, DATABASES[2])
        self.version = listing["metadata"]["resourceVersion"]
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        end_watch(self._thread, lambda: self._stream)

    def _run(self) -> None:
        custom = client.CustomObjectsApi(self.api)
        while not self._stop.is_set():
            stream = self._stream = watch.Watch()
            try:
                for event in stream.stream(
                    custom.list_namespaced_custom_object,
                    *DATABASES[:2],
                    self.namespace,
                    DATABASES[2],
                    resource_version=self.version,
                    timeout_seconds=30,
                ):
                    now = time.perf_counter()
                    obj = event["object"]
                    meta = obj["metadata"]
                    self.version = meta["resourceVersion"]
                    spec_version = (obj.get("spec") or {}).get("version")
                    with self._lock:
                        self.events.append(
                            (now, event["type"], meta["name"], meta["uid"], spec_version, int(meta["resourceVersion"]))
                        )
                    if self._stop.is_set():
                        break
            except Exception:
                time.sleep(0.2)

    def first(self, predicate: Any) -> float | None:
        with self._lock:
            return next((e[0] for e in self.events if predicate(e)), None)


def drift(instances: int, drifted: int, *, concurrency: int, quiet: float) -> dict[str, Any]:
    (port,) = free_ports(1)
    args = ("--metrics-port", str(port))
    with bench_stack(f"day-two-drift-{instances}-{os.getpid()}", controller_args=args) as bench:
        bench.make_operator_instant()
        wait_idle(bench.process("controller"), port, expected=0, quiet=quiet, timeout=120)
        names, _, settle = settle_objects(bench, port, instances, 0, concurrency, quiet)
        namespace = "bench"
        custom = client.CustomObjectsApi(bench.api)
        databases = {
            db["metadata"]["name"]: db
            for db in custom.list_namespaced_custom_object(*DATABASES[:2], namespace, DATABASES[2])["items"]
        }
        k = min(drifted, len(names) // 2)
        deleted, patched = names[:k], names[k : 2 * k]
        dbwatch = DatabaseWatch(bench.api, namespace)
        dbwatch.start()
        pid = _pid(bench)
        results: dict[str, Any] = {"instances": len(names), "settle": settle}

        def phase(label: str, act: Any, back: Any, targets: list[str]) -> None:
            before = scrape_once(port)
            cpu = pid_usage(pid)["cpu_seconds"]
            bench.audit.mark()
            answered: dict[str, float] = {}
            for name in targets:
                answered[name] = act(name)
            latencies: dict[str, float] = {}
            deadline = time.perf_counter() + 120
            while len(latencies) < len(targets) and time.perf_counter() < deadline:
                for name in targets:
                    if name not in latencies:
                        seen = dbwatch.first(back(name, answered[name]))
                        if seen is not None:
                            latencies[name] = seen - answered[name]
                time.sleep(0.1)
            time.sleep(2.0)
            after = scrape_once(port)
            requests = audit_requests(bench.audit.path, bench.audit.offset)
            controller = Counter({(v, r): n for (who, v, r), n in requests.items() if who == "controller"})
            results[label] = {
                "objects": len(targets),
                "repaired": len(latencies),
                "not_repaired_within_120_s": len(targets) - len(latencies),
                "latency_s": summary(list(latencies.values())),
                "controller_cpu_seconds": round(pid_usage(pid)["cpu_seconds"] - cpu, 2),
                "controller_requests": {f"{v} {r}": n for (v, r), n in controller.most_common()},
                "queue_delayed_before_after": [
                    before.get("opbroker_workqueue_delayed"),
                    after.get("opbroker_workqueue_delayed"),
                ],
            }

        def delete(name: str) -> float:
            custom.delete_namespaced_custom_object(*DATABASES[:2], namespace, DATABASES[2], name)
            return time.perf_counter()

        def recreated(name: str, at: float) -> Any:
            uid = databases[name]["metadata"]["uid"]
            return lambda e: e[0] >= at and e[1] == "ADDED" and e[2] == name and e[3] != uid

        phase("delete", delete, recreated, deleted)
        settled: dict[str, int] = {}

        def change(name: str) -> float:
            declared = databases[name]["spec"]["version"]
            other = "15" if declared != "15" else "14"
            body = custom.patch_namespaced_custom_object(
                *DATABASES[:2], namespace, DATABASES[2], name, {"spec": {"version": other}}
            )
            settled[name] = int(body["metadata"]["resourceVersion"])
            return time.perf_counter()

        def set_back(name: str, at: float) -> Any:
            declared = databases[name]["spec"]["version"]
            return lambda e: e[2] == name and e[5] > settled[name] and e[4] == declared

        phase("field_change", change, set_back, patched)
        dbwatch.stop()
        results["queue"] = {
            k: scrape_once(port).get(f"opbroker_workqueue_{k}") for k in ("due", "delayed", "depth", "in_flight")
        }
    return results


def scrape_once(port: int) -> dict[str, float]:
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as http:
        return scrape(http) or {}


# -- reporting ---------------------------------------------------------------------------------------------


def markdown(r: dict[str, Any]) -> list[str]:
    lines = ["## Day two (issue 43): idle cost and drift repair", ""]
    i = r.get("idle")
    if i:
        d, s = i["default_resync"], i["short_resync"]
        w = d["window"]
        quiet_part = d.get("before_first_resync") or {}
        lines += [
            f"{i['instances']} settled instances (demo plan, no bindings). Default resync ({d['resync_seconds']:g} s): "
            f"restart to idle {d['restart']['idle_seconds']} s, {d['restart']['cpu_seconds_to_idle']} CPU s "
            f"({d['restart']['writes']} writes); then a {w['seconds']} s window "
            f"{'holding a whole resync pass' if i.get('window_holds_whole_pass', True) else 'short of a pass'}: "
            f"**{w['cpu_percent']} % of a core** ({w['cpu_seconds']} CPU s, {w['reconciles']} checks), "
            f"{quiet_part.get('cpu_percent', 'n/a')} % before the first resync was due; VmRSS {w['rss_mib_start']} → "
            f"{w['rss_mib_end']} MiB, **{w['kib_per_object_start']} → {w['kib_per_object_end']} KiB per instance** "
            f"over the empty controller ({i['empty']['rss_mib']} MiB). Target idle < "
            f"{i['targets']['idle_cpu_percent_default_resync']} %: "
            f"{'met' if i['targets_met']['idle_cpu_percent_default_resync'] else 'NOT met'}.",
            "",
            f"Short resync ({s['resync_seconds']:g} s): the restart pass {s['restart_pass']['seconds']} s, "
            f"{s['restart_pass']['cpu_seconds']} CPU s; then {s['steady']['seconds']} s: "
            f"{s['steady']['reconciles']} checks ({s['checks_per_second']}/s), {s['steady']['cpu_seconds']} CPU s "
            f"({s['steady']['cpu_percent']} %): "
            f"**{s['cpu_seconds_per_pass']} CPU s per resync pass** over {i['instances']} "
            f"({s['cpu_ms_per_check'] if s['cpu_ms_per_check'] is not None else 'no check: nothing had moved'}"
            f"{' ms per check' if s['cpu_ms_per_check'] is not None else ''}, the quiet rate subtracted); "
            f"with the default resync that is "
            f"an estimated {i.get('estimated_cpu_percent_default_resync')} % of a core at this size.",
            "",
        ]
        by_pass = s.get("memory_by_pass") or []
        if by_pass:
            shown = ", ".join(f"{m['kib_per_instance']}" for m in by_pass)
            lines += [
                f"Memory after the restart pass and after each of {len(by_pass) - 1} resync passes (KiB per instance "
                f"over the empty controller): {shown}; VmRSS {by_pass[0]['rss_mib']} → {by_pass[-1]['rss_mib']} MiB.",
                "",
            ]
    dr = r.get("drift")
    if dr:
        for label, what in (("delete", "Database deleted → recreated"), ("field_change", "spec.version → set back")):
            p = dr[label]
            lat = p["latency_s"]
            lines.append(
                f"* {what}, {p['objects']} of {dr['instances']} settled instances one after the other: "
                f"p50 {lat['p50']} s, "
                f"p99 {lat['p99']} s, max {lat['max']} s ({p['repaired']} repaired; controller "
                f"{p['controller_cpu_seconds']} CPU s)."
            )
        lines.append("")
    return lines
