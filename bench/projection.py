"""Projecting 1 000 000 instances over M controller shards from the measured per-object costs (issue 46).

Nothing here is measured: a projection multiplies figures recorded by the benchmarks (``bench/results/``) by a
count of objects and divides what divides by M. Its worth is in the assumptions, which are written down as the
fields of :class:`Assumptions`, each with why, so a reader can disagree with one and rerun it with another value
(each has a flag). The core (:func:`project`, :func:`smallest_shards`) is pure; the loader and the CLI are the edge.

**The measured figures** (:class:`Measured`), read from one results file — a compare run's ``compare.after`` side
(this tree's), or the top level of a ``bench-<date>.json`` (``<root>`` below is whichever):

=================================  ===============================================================================
figure                             key path (``N``: the largest size the ``provisioning`` suite recorded there)
=================================  ===============================================================================
instances provisioned (N)          ``<root>.provisioning.<N>.instances``
controller CPU ms per instance     ``<root>.provisioning.<N>.cpu_seconds_by_process.controller`` * 1000 ÷ N
broker CPU ms per instance         ``<root>.provisioning.<N>.cpu_seconds_by_process.broker`` * 1000 ÷ N
API server CPU ms per instance     ``<root>.provisioning.<N>.cpu_seconds_by_process.kube-apiserver`` * 1000 ÷ N
opbroker writes per instance       ``<root>.provisioning.<N>.opbroker_writes_per_instance``
bindings made (B)                  ``<root>.bindings.bindings``
controller/broker/API server CPU   ``<root>.bindings.cpu_seconds_by_process.{controller,broker,kube-apiserver}``
ms per binding                     * 1000 ÷ B
opbroker writes per binding        ``<root>.bindings.opbroker_writes_per_binding``
restart: settled objects           ``<root>.restart.objects`` (instances + bindings)
restart: KiB per settled object    ``<root>.restart.memory_per_object_kib`` (the restarted controller's VmRSS once
                                   idle, less the empty controller's, ÷ objects)
restart: CPU s and s to idle       ``<root>.restart.restart.cpu_seconds_to_idle``, ``….restart.idle_seconds``
empty controller: RSS, CPU s, s    ``<root>.restart.empty.rss_mib``, ``….empty.cpu_seconds_to_idle``,
                                   ``….empty.idle_seconds`` (the same controller restarted over no objects)
=================================  ===============================================================================

The figures are this machine's (2 cores shared by the API server, etcd, the operator and opbroker): the seconds
scale with the CPU a shard's pod is given, the CPU seconds and the KiB much less. The CPU figures are those the
compare report divides (``bench/run.py``: each process's CPU over the phase, by
``/proc``), so (controller + broker) ÷ API server at M = 1 is the report's ratio. The default input is the newest
``compare-*.json`` or ``bench-*.json`` under ``bench/results/`` holding every figure above.

**What the model is** (per shard, M shards, I instances, b bindings each, so O = I * (1 + b) objects):

* a shard holds and reconciles its own instances and bindings (O ÷ M), and *every* shard also watches what is not
  sharded — the catalog, every Secret's metadata, the registries' Secrets with their bodies, and the kinds the plans
  render (the source watches, e.g. the demo plan's ``Database``: listed cluster-wide). The part of each per-object
  cost that comes from those is paid by each shard in full: ``share(f, M) = f ÷ M + (1 - f)`` for a divisible
  fraction ``f`` (:class:`Assumptions`);
* per-shard RSS = the empty controller's RSS + KiB per settled object * O * share(memory) — never below the empty
  controller's;
* per-shard restart (CPU and seconds to idle) = the empty controller's + the measured restart's cost per object
  beyond it * O * share(restart): a restarted shard lists and reconciles its own objects, and lists the unsharded
  kinds whole;
* steady CPU at a churn of c operations per object per day: each instance operation costs what a provision cost
  the controller, each binding operation what a bind cost; per shard * share(cpu), plus the resync sweep of its
  own instances and the process's quiet rate;
* the broker is one deployment whatever M is (not sharded): its CPU is per request, as measured;
* the API server is one for all shards: its CPU per operation does not divide by M. What M adds to it — each
  unsharded kind's events sent to M watches instead of one, M listings of them at each restart — is **not
  modelled**: the API server figures are a lower bound that holds for M = 1 only.

Run: ``python -m bench.projection [--results FILE] [--instances 1000000] [--shards 1,2,4,8,16,32]
[--memory-limit-mib 512] [--restart-limit-seconds 60] [--json]`` (no cluster: it reads a file).
``bench/results/PROJECTION.md`` is its output for the defaults.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from opbroker.kubeclient.wire import JsonObject, mapping_of, path_of

RESULTS = Path(__file__).resolve().parent / "results"
SECONDS_PER_DAY = 86_400.0


@dataclass(frozen=True)
class Figure:
    """One measured figure and where it came from: the results file and the key path(s) it was read from."""

    value: float
    source: str

    @classmethod
    def given(cls, value: float) -> Figure:
        """A figure written by hand (a test's, a what-if's): its source says so."""
        return cls(value, "given")


@dataclass(frozen=True)
class Measured:
    """The per-object costs one benchmark run recorded (see the module's table for each one's key path)."""

    run: str
    """The results file the figures were read from (the projection's header names it)."""
    provisioned: Figure
    controller_ms_per_instance: Figure
    broker_ms_per_instance: Figure
    apiserver_ms_per_instance: Figure
    writes_per_instance: Figure
    controller_ms_per_binding: Figure
    broker_ms_per_binding: Figure
    apiserver_ms_per_binding: Figure
    writes_per_binding: Figure
    restart_objects: Figure
    kib_per_object: Figure
    restart_cpu_seconds: Figure
    restart_idle_seconds: Figure
    empty_rss_mib: Figure
    empty_cpu_seconds: Figure
    empty_idle_seconds: Figure

    def figures(self) -> dict[str, Figure]:
        """Every figure by name, for the header and ``--json``."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "run"}


@dataclass(frozen=True)
class Assumptions:
    """What the projection takes for granted beyond the measured figures, each with why. None is measured as such;
    every one is a flag of the CLI, so a different belief is one rerun away."""

    bindings_per_instance: float = 1.0
    """Objects per instance are the instance and its bindings: 1 + this. One binding each is the common case of an
    application bound to its database; the restart suite settles two per instance (its KiB per object is taken to
    hold for either kind)."""

    churn_per_object_per_day: float = 1.0
    """Operations per instance and per binding per day (update, rotation, re-bind, or a deprovision replaced by a
    provision), each costing what the provisioning (bindings) suite measured per instance (binding). A guess: a
    platform's real rate scales the steady CPU and API-server figures linearly, nothing else."""

    cpu_divisible: float = 0.76
    """Fraction of the controller's CPU per operation that divides by M. **Measured** (``bench/shards.py --compare``,
    ``bench/results/SHARDS.md``): with M shards the controllers' CPU per instance is ``x + M·y`` against ``x + y``
    unsharded — N = 1 000, M = 3: 11.94 → 18.38 ms (x/(x+y) = 0.73); N = 5 000, M = 4: 12.23 → 20.08 ms (0.79)
    (``shards-2026-12-05T222507Z.json``, ``shards-2026-12-05T224428Z.json``, after the source watches by shard; it
    was 0.71 to 0.75 before them). What every shard still pays is not the watches (each shard's source store holds its
    own objects), nor idling (0.1 to 0.3 % of a core), nor reads (one GET per new instance); on this machine the shards
    share 2 cores with the API server, so part of it may be the co-located processes' contention, which separate
    nodes would not have — not shown."""

    memory_divisible: float = 0.95
    """Fraction of the KiB per settled object that divides by M. **Measured** (same runs): a restarted shard holds
    18.27 KiB per instance it holds (N = 5 000, M = 4) against 17.61 for one controller over all 5 000 — since the
    shards watch the plans' kinds and the Secrets by shard, what every shard holds of the others' objects is the
    catalog and shard 0's whole Secret metadata (claims and the Service Catalog read any Secret). Before it, 0.85 (the
    Databases' bodies, the registries' and every Secret's metadata held by every shard: ~2 KiB of ~14)."""

    restart_divisible: float = 0.7
    """Fraction of the restart's CPU and time to idle per object that divides by M. **Measured** (same runs): a
    restarted shard over its 1 205 of 5 000 instances spent 4.15 CPU s to idle against 8.67 for one controller over
    all 5 000 (x/(x+y) = 0.70). Its *time* to idle did not divide at all on this machine (12.46 s against 11.91 s):
    it waits more than it works — suspected, not profiled: the API server filtering every object of a kind for each
    label-selected list, on 2 cores it saturates. Taken for both, so the projected times are optimistic."""

    rss_baseline_mib: float | None = None
    """Each process's fixed RSS, what it holds before any object (interpreter, modules, the catalog, the pools).
    None: the empty controller's as measured by the same restart run."""

    resync_ms_per_instance_per_pass: float = 0.0326
    """The day-two sweep's CPU per settled instance per pass, when nothing moved (it divides by M: a shard sweeps
    its own): ``bench-2026-12-02T160531Z.json`` ``day-two.idle.short_resync.steady`` — 6.07 CPU s over 719.3 s, less
    the 0.3 % quiet rate, over 6 passes of 20 000 instances. Not in the compare runs, hence an assumption."""

    resync_seconds: float = 600.0
    """The resync period (the controller's default ``--resync-seconds``)."""

    quiet_cores_per_process: float = 0.003
    """What an idle controller costs with nothing due (0.3 % of a core: ``day-two.idle.default_resync.
    before_first_resync.cpu_percent`` of the same file), paid by every shard."""


def share(divisible: float, shards: int) -> float:
    """The part of a whole-cluster cost one of ``shards`` shards pays: its M-th of what divides, all of the rest."""
    return divisible / shards + (1.0 - divisible)


@dataclass(frozen=True)
class Projection:
    """One M's projection. CPU in cores (CPU seconds per second); the controller's per shard, the others whole."""

    instances: int
    shards: int
    objects: float
    """Instances and bindings, all shards together."""
    objects_per_shard: float
    rss_mib_per_shard: float
    controller_cores_per_shard: float
    controller_cores_total: float
    broker_cores: float
    apiserver_cores: float
    """A lower bound for M > 1 (what the shards' extra watches add is not modelled)."""
    writes_per_second: float
    """opbroker's API writes (controller and broker) at the churn rate; M does not change what an operation writes."""
    restart_cpu_seconds_per_shard: float
    restart_idle_seconds_per_shard: float
    ratio: float
    """(controller, all shards + broker) ÷ API server CPU spent on operations (issue 31's ratio; target 0.25): the
    resync and the quiet rate are left out, as the measured ratio leaves them out, so M = 1 gives the measured mix of
    provisions and binds. It grows with M: each shard pays the unsharded part of every operation."""


def project(measured: Measured, assumptions: Assumptions, instances: int, shards: int) -> Projection:
    """The projection of ``instances`` instances over ``shards`` shards (see the module's docstring)."""
    if shards < 1 or instances < 0:
        raise ValueError(f"shards must be ≥ 1 and instances ≥ 0 (got {shards}, {instances})")
    a = assumptions
    bindings = instances * a.bindings_per_instance
    objects = instances + bindings
    instance_ops = instances * a.churn_per_object_per_day / SECONDS_PER_DAY  # per second
    binding_ops = bindings * a.churn_per_object_per_day / SECONDS_PER_DAY

    def cores(per_instance: Figure, per_binding: Figure) -> float:
        return (instance_ops * per_instance.value + binding_ops * per_binding.value) / 1000.0

    controller_whole = cores(measured.controller_ms_per_instance, measured.controller_ms_per_binding)
    resync_per_shard = instances / shards * a.resync_ms_per_instance_per_pass / 1000.0 / a.resync_seconds
    controller_per_shard = (
        controller_whole * share(a.cpu_divisible, shards) + resync_per_shard + a.quiet_cores_per_process
    )
    broker = cores(measured.broker_ms_per_instance, measured.broker_ms_per_binding)
    apiserver = cores(measured.apiserver_ms_per_instance, measured.apiserver_ms_per_binding)

    rss = _baseline(measured, a) + _held_mib(measured, objects * share(a.memory_divisible, shards))
    restarted = objects * share(a.restart_divisible, shards)  # objects' worth of restart work one shard does
    operations_all_shards = controller_whole * share(a.cpu_divisible, shards) * shards
    return Projection(
        instances=instances,
        shards=shards,
        objects=objects,
        objects_per_shard=objects / shards,
        rss_mib_per_shard=rss,
        controller_cores_per_shard=controller_per_shard,
        controller_cores_total=controller_per_shard * shards,
        broker_cores=broker,
        apiserver_cores=apiserver,
        writes_per_second=instance_ops * measured.writes_per_instance.value
        + binding_ops * measured.writes_per_binding.value,
        restart_cpu_seconds_per_shard=measured.empty_cpu_seconds.value + _cpu_per_object(measured) * restarted,
        restart_idle_seconds_per_shard=measured.empty_idle_seconds.value + _idle_per_object(measured) * restarted,
        ratio=(operations_all_shards + broker) / apiserver if apiserver > 0 else float("inf"),
    )


def smallest_shards(
    measured: Measured,
    assumptions: Assumptions,
    instances: int,
    *,
    memory_limit_mib: float,
    restart_limit_seconds: float,
    most: int = 1024,
) -> int | None:
    """The fewest shards whose every shard stays within ``memory_limit_mib`` of RSS and is idle again within
    ``restart_limit_seconds`` of a restart — the sizing docs/controller.md quotes. None when no M up to ``most``
    does: what every shard holds of the unsharded kinds alone is past a limit, and more shards cannot help.

    Both figures fall as M grows (``share`` does), so the first M that fits is the answer."""
    for shards in range(1, most + 1):
        p = project(measured, assumptions, instances, shards)
        if p.rss_mib_per_shard <= memory_limit_mib and p.restart_idle_seconds_per_shard <= restart_limit_seconds:
            return shards
    return None


def floor(measured: Measured, assumptions: Assumptions, instances: int) -> tuple[float, float]:
    """Per-shard RSS (MiB) and restart-to-idle (s) as M grows without bound: what the unsharded kinds cost every
    shard. A limit below either is met by no M."""
    objects = instances * (1 + assumptions.bindings_per_instance)
    rss = _baseline(measured, assumptions) + _held_mib(measured, objects * (1 - assumptions.memory_divisible))
    idle = measured.empty_idle_seconds.value + _idle_per_object(measured) * objects * (
        1 - assumptions.restart_divisible
    )
    return rss, idle


def _baseline(measured: Measured, assumptions: Assumptions) -> float:
    return measured.empty_rss_mib.value if assumptions.rss_baseline_mib is None else assumptions.rss_baseline_mib


def _held_mib(measured: Measured, objects: float) -> float:
    return measured.kib_per_object.value * objects / 1024.0


def _idle_per_object(measured: Measured) -> float:
    """Seconds to idle a restart spends per settled object, beyond the empty controller's."""
    return (measured.restart_idle_seconds.value - measured.empty_idle_seconds.value) / measured.restart_objects.value


def _cpu_per_object(measured: Measured) -> float:
    """CPU seconds a restart spends per settled object, beyond the empty controller's."""
    return (measured.restart_cpu_seconds.value - measured.empty_cpu_seconds.value) / measured.restart_objects.value


# --- the edge: reading a results file -------------------------------------------------------------------------------


class MissingFigure(Exception):
    """A results file lacks a figure the projection needs (the message names the file and the key path)."""


def _number(root: JsonObject, run: str, prefix: str, *keys: str) -> Figure:
    value = path_of(root, *keys)
    where = ".".join((prefix, *keys)) if prefix else ".".join(keys)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MissingFigure(f"{run}: no number at {where}")
    return Figure(float(value), f"{run}: {where}")


def _per(total: Figure, count: Figure, scale: float) -> Figure:
    if count.value <= 0:
        raise MissingFigure(f"{count.source} is {count.value}: nothing to divide by")
    return Figure(total.value * scale / count.value, f"{total.source} * {scale:g} ÷ {count.source.split(': ')[-1]}")


def measured_from(results: JsonObject, run: str) -> Measured:
    """The figures of one results file's decoded JSON (``run``: its name, for the sources and the errors)."""
    compare = mapping_of(path_of(results, "compare", "after"))
    root, prefix = (compare, "compare.after") if compare else (results, "")
    sizes = [int(k) for k in mapping_of(root.get("provisioning")) if k.isdigit()]
    if not sizes:
        raise MissingFigure(f"{run}: no provisioning run at {'.'.join(filter(None, (prefix, 'provisioning')))}.<N>")
    n = str(max(sizes))

    def number(*keys: str) -> Figure:
        return _number(root, run, prefix, *keys)

    provisioned = number("provisioning", n, "instances")
    bound = number("bindings", "bindings")
    return Measured(
        run=run,
        provisioned=provisioned,
        controller_ms_per_instance=_per(
            number("provisioning", n, "cpu_seconds_by_process", "controller"), provisioned, 1000
        ),
        broker_ms_per_instance=_per(number("provisioning", n, "cpu_seconds_by_process", "broker"), provisioned, 1000),
        apiserver_ms_per_instance=_per(
            number("provisioning", n, "cpu_seconds_by_process", "kube-apiserver"), provisioned, 1000
        ),
        writes_per_instance=number("provisioning", n, "opbroker_writes_per_instance"),
        controller_ms_per_binding=_per(number("bindings", "cpu_seconds_by_process", "controller"), bound, 1000),
        broker_ms_per_binding=_per(number("bindings", "cpu_seconds_by_process", "broker"), bound, 1000),
        apiserver_ms_per_binding=_per(number("bindings", "cpu_seconds_by_process", "kube-apiserver"), bound, 1000),
        writes_per_binding=number("bindings", "opbroker_writes_per_binding"),
        restart_objects=number("restart", "objects"),
        kib_per_object=number("restart", "memory_per_object_kib"),
        restart_cpu_seconds=number("restart", "restart", "cpu_seconds_to_idle"),
        restart_idle_seconds=number("restart", "restart", "idle_seconds"),
        empty_rss_mib=number("restart", "empty", "rss_mib"),
        empty_cpu_seconds=number("restart", "empty", "cpu_seconds_to_idle"),
        empty_idle_seconds=number("restart", "empty", "idle_seconds"),
    )


def load(path: Path) -> Measured:
    """The figures of the results file at ``path``."""
    return measured_from(mapping_of(json.loads(path.read_text())), path.name)


_STAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d{4,6}Z)")


def newest(results: Path = RESULTS) -> tuple[Path, Measured]:
    """The newest compare or bench results file (by the date in its name) that holds every figure."""
    candidates = [p for p in (*results.glob("compare-*.json"), *results.glob("bench-*.json")) if _STAMP.search(p.name)]
    reasons: list[str] = []
    for path in sorted(candidates, key=lambda p: _stamp(p), reverse=True):
        try:
            return path, load(path)
        except MissingFigure as missing:
            reasons.append(str(missing))
    raise MissingFigure(f"no results file under {results} holds every figure: " + "; ".join(reasons[:5]))


def _stamp(path: Path) -> str:
    found = _STAMP.search(path.name)
    return found.group(1).ljust(17, "0") if found else ""


def _n(value: float) -> str:
    """A whole number with its thousands spaced (the project's documents write 15 000)."""
    return f"{value:,.0f}".replace(",", " ")


# --- the edge: output -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    """What one shard must stay within: its RSS (the pod's memory limit, less headroom) and its time to idle after
    a restart (how long its tenants may wait on a shard's takeover or upgrade)."""

    memory_mib: float = 512.0
    restart_seconds: float = 60.0


def sizing(
    measured: Measured, assumptions: Assumptions, counts: Sequence[int], limits: Limits
) -> list[tuple[int, int | None]]:
    """The smallest M for each instance count (None: none fits) — the table docs/controller.md quotes."""
    return [
        (n, smallest_shards(measured, assumptions, n, memory_limit_mib=limits.memory_mib,
                            restart_limit_seconds=limits.restart_seconds))
        for n in counts
    ]  # fmt: skip


def markdown(
    measured: Measured,
    assumptions: Assumptions,
    rows: Sequence[Projection],
    limits: Limits,
    sized: Sequence[tuple[int, int | None]],
) -> str:
    """The projection as Markdown: the input, the assumptions, one row per M, the floor, the sizing."""
    instances = rows[0].instances if rows else 0
    floors = floor(measured, assumptions, instances)
    within = f"under {limits.memory_mib:g} MiB RSS and idle within {limits.restart_seconds:g} s of a restart"
    lines = [
        f"# Projection: {_n(instances)} instances over M controller shards",
        "",
        f"Input: `bench/results/{measured.run}` (`python -m bench.projection`; the model and its assumptions are "
        "in `bench/projection.py`). Nothing here is measured at this size.",
        "",
        "| measured figure | value | from |",
        "|---|---|---|",
        *(f"| {name} | {fig.value:.4g} | `{fig.source}` |" for name, fig in measured.figures().items()),
        "",
        "| assumption | value |",
        "|---|---|",
        *(f"| {f.name} | {getattr(assumptions, f.name)} |" for f in dataclasses.fields(assumptions)),
        "",
        "| M | objects per shard | RSS MiB per shard | controller cores per shard | controller cores, all "
        "| broker cores | API server cores (≥) | writes/s | restart CPU s per shard | restart to idle s per shard "
        "| (controller + broker) / API server |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *(
            f"| {p.shards} | {_n(p.objects_per_shard)} | {_n(p.rss_mib_per_shard)} | "
            f"{p.controller_cores_per_shard:.3f} | {p.controller_cores_total:.3f} | {p.broker_cores:.3f} | "
            f"{p.apiserver_cores:.3f} | {p.writes_per_second:.1f} | {_n(p.restart_cpu_seconds_per_shard)} | "
            f"{_n(p.restart_idle_seconds_per_shard)} | {p.ratio:.3f} |"
            for p in rows
        ),
        "",
        f"Every shard, however many: at least {_n(floors[0])} MiB and {_n(floors[1])} s to idle after a restart "
        "(the empty controller and what the unsharded kinds cost each).",
        "",
        f"**Sizing**: the fewest shards keeping each {within} (none: what every shard holds and lists of the "
        "unsharded kinds is past a limit, whatever M):",
        "",
        "| instances | M |",
        "|---|---|",
        *(f"| {_n(n)} | {'none' if m is None else m} |" for n, m in sized),
        "",
    ]
    return "\n".join(lines)


def as_json(
    measured: Measured,
    assumptions: Assumptions,
    rows: Sequence[Projection],
    limits: Limits,
    sized: Sequence[tuple[int, int | None]],
) -> dict[str, object]:
    return {
        "input": measured.run,
        "measured": {name: dataclasses.asdict(fig) for name, fig in measured.figures().items()},
        "assumptions": dataclasses.asdict(assumptions),
        "projections": [dataclasses.asdict(p) for p in rows],
        "limits": dataclasses.asdict(limits),
        "smallest_shards": [{"instances": n, "shards": m} for n, m in sized],
    }


def _counts(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    defaults, limits = Assumptions(), Limits()
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--results", type=Path, help="a compare-*.json or bench-*.json (default: the newest with all)")
    parser.add_argument("--instances", type=int, default=1_000_000)
    parser.add_argument("--shards", type=_counts, default="1,2,4,8,16,32", help="comma-separated M to project")
    parser.add_argument("--memory-limit-mib", type=float, default=limits.memory_mib)
    parser.add_argument("--restart-limit-seconds", type=float, default=limits.restart_seconds)
    parser.add_argument(
        "--sizing",
        type=_counts,
        default="10000,20000,50000,100000,200000,1000000",
        help="instance counts to size M for (comma-separated; --instances is added)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    for field in dataclasses.fields(Assumptions):
        flag = "--" + field.name.replace("_", "-")
        parser.add_argument(flag, type=float, default=getattr(defaults, field.name), help="(default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        measured = load(args.results) if args.results else newest()[1]
    except MissingFigure as missing:
        print(f"bench.projection: {missing}", file=sys.stderr)
        return 2
    assumptions = Assumptions(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Assumptions)})
    limits = Limits(args.memory_limit_mib, args.restart_limit_seconds)
    rows = [project(measured, assumptions, args.instances, m) for m in args.shards]
    sized = sizing(measured, assumptions, sorted({*args.sizing, args.instances}), limits)
    if args.json:
        print(json.dumps(as_json(measured, assumptions, rows, limits, sized), indent=1, ensure_ascii=False))
    else:
        print(markdown(measured, assumptions, rows, limits, sized))
    return 0


if __name__ == "__main__":
    sys.exit(main())
