"""Run the benchmark suites and record their results: ``scripts/bench.sh [--quick] [--suite NAME ...]``.

Results go to ``bench/results/bench-<date>.json`` (everything measured, with the machine) and the summary
table ``bench/results/RESULTS.md``. ``--quick`` runs tiny sizes (a smoke test of the harness, not figures).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from bench import (
    bindings,
    claims,
    cluster,
    compare,
    day_two,
    gotemplate,
    jinja_bombs,
    postgresql,
    provisioning,
    pulumi,
    renderer,
    restart,
    servicecatalog,
    unrelated,
)
from bench.common import machine

RESULTS = Path(__file__).resolve().parent / "results"
SUITES = (
    "renderer",
    "jinja-bombs",
    "gotemplate",
    "claims",
    "provisioning",
    "bindings",
    "restart",
    "servicecatalog",
    "secrets",
    "cluster",
    "pulumi",
    "postgresql",
    "day-two",
)
FULL = {
    "provisioning": (100, 1000, 5000),
    "bindings": (10_000, 1_000),
    "restart": (restart.DEFAULT_INSTANCES, restart.DEFAULT_BINDINGS),
    "claims": (10_000, 1_000),
    "servicecatalog": 1_000,
    "secrets": (unrelated.DEFAULT_SECRETS, unrelated.DEFAULT_INSTANCES),
    "renderer": 5.0,
    "jinja-bombs": None,
    "gotemplate": 5.0,
    "cluster": None,
    "pulumi": None,
    "postgresql": 3,
    "day-two": {
        "instances": day_two.DEFAULT_INSTANCES,
        "drift_instances": day_two.DEFAULT_DRIFT[0],
        "drifted": day_two.DEFAULT_DRIFT[1],
        "resync_default": day_two.RESYNC_DEFAULT,
        "resync_short": day_two.RESYNC_SHORT,
    },
}
QUICK = {
    "provisioning": (20, 40),
    "bindings": (40, 20),
    "restart": (20, 40),
    "claims": (1_000, 100),
    "servicecatalog": 20,
    "secrets": (200, 5),
    "renderer": 0.5,
    "jinja-bombs": None,
    "gotemplate": 0.5,
    "cluster": None,
    "pulumi": None,
    "postgresql": 1,
    # A resync period of seconds, so the windows that hold whole passes stay short.
    "day-two": {"instances": 20, "drift_instances": 10, "drifted": 5, "resync_default": 20.0, "resync_short": 10.0},
}

TARGETS = {"utilisation": 0.5, "write_amplification": 1.5, "scale_curve_ratio": 1.5}


def run_suites(
    suites: list[str],
    sizes: dict[str, Any],
    log: Any = print,
    record: Any = lambda _results: None,
    earlier: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run ``suites``; ``record`` is called with the results so far after each one (a long run that is cut
    short still leaves what it measured). ``earlier`` results are kept for the suites not run now."""
    results: dict[str, Any] = {**(earlier or {}), "machine": machine(), "sizes": sizes, "targets": TARGETS}
    dates = results.setdefault("suite_dates", {})
    for suite in suites:
        dates[suite] = results["machine"]["date"]
    if "renderer" in suites:
        log("renderer ...")
        results["renderer"] = renderer.run(sizes["renderer"])
        record(results)
    if "jinja-bombs" in suites:
        log("jinja-bombs ...")
        results["jinja-bombs"] = jinja_bombs.run()
        record(results)
    if "gotemplate" in suites:
        log("gotemplate ...")
        results["gotemplate"] = gotemplate.run(sizes["gotemplate"])
        record(results)
    if "claims" in suites:
        log("claims ...")
        results["claims"] = claims.run(*sizes["claims"])
        record(results)
    if "provisioning" in suites:
        results["provisioning"] = {}
        for count in sizes["provisioning"]:
            log(f"provisioning {count} instances ...")
            results["provisioning"][str(count)] = provisioning.run(count)
            record(results)
        runs = results["provisioning"]
        smallest, largest = runs[str(min(sizes["provisioning"]))], runs[str(max(sizes["provisioning"]))]
        results["scale_curve"] = scale_curve(smallest, largest)
    if "cluster" in suites:
        log("cluster (builds, start-up, memory, first pod, image) ...")
        results["cluster"] = cluster.run()
        record(results)
    if "pulumi" in suites:
        log("pulumi (preview, up, no-op preview and destroy of the Python root stack with the real engine) ...")
        results["pulumi"] = pulumi.run()
        record(results)
    if "postgresql" in suites:
        log("postgresql (the example plan on a node: provision → credentials, bind → login) ...")
        results["postgresql"] = postgresql.run(sizes["postgresql"])
        record(results)
    if "bindings" in suites:
        count, instances = sizes["bindings"]
        log(f"bindings: {count} over {instances} instances ...")
        results["bindings"] = bindings.run(count, instances)
        record(results)
    if "servicecatalog" in suites:
        log(f"servicecatalog: {sizes['servicecatalog']} Instances and as many Bindings through opbroker's broker ...")
        results["servicecatalog"] = servicecatalog.run(sizes["servicecatalog"])
        record(results)
    if "restart" in suites:
        count, bound = sizes["restart"]
        log(f"restart: a fresh controller over {count} settled instances and {bound} bindings ...")
        results["restart"] = restart.run(count, bound)
        record(results)
    if "day-two" in suites:
        log(
            "day-two: idle cost of {instances} settled instances, drift repair over {drift_instances} ...".format(
                **sizes["day-two"]
            )
        )
        results["day-two"] = day_two.run(**sizes["day-two"])
        record(results)
    if "secrets" in suites:
        count, instances = sizes["secrets"]
        log(f"secrets: {count} unrelated Secrets beside {instances} bound instances ...")
        results["secrets"] = unrelated.run(count, instances)
        record(results)
    return results


#: What ``--compare`` runs on both trees (provisioning at one size: N=1000); ``--suite`` picks others.
COMPARED = ("restart", "provisioning", "bindings")
COMPARED_PROVISIONING = 1000


def run_compare(
    ref: str,
    sizes: dict[str, Any],
    log: Any = print,
    record: Any = lambda _results: None,
    provisioning_size: int = COMPARED_PROVISIONING,
    suites: tuple[str, ...] = COMPARED,
) -> dict[str, Any]:
    """The ``suites`` (default: restart, provisioning N=1000, bindings) on ``ref``'s code and on this tree's, in
    the same run: suite by suite, ``ref`` first, so both meet the same machine (see bench/compare.py)."""
    sizes = {**sizes, "provisioning": (provisioning_size,)}
    results: dict[str, Any] = {"machine": machine(), "sizes": sizes, "targets": TARGETS, "suites": list(suites)}
    after = compare.this_tree()
    with compare.other_tree(ref) as before:
        trees = {"before": before, "after": after}
        found: dict[str, Any] = {
            name: {"ref": tree.ref, "commit": tree.commit, "imports": compare.imported_from(tree)}
            for name, tree in trees.items()
        }
        results["compare"] = found
        for suite in suites:
            if suite == "restart":
                # One cluster, restarts of both sides alternating (see restart.run_alternating).
                count, bound = sizes["restart"]
                log(f"restart: {count} instances, {bound} bindings; each side's controller restarted in turn ...")
                sides = {name: compare.environment(tree) for name, tree in trees.items()}
                for name, measured in restart.run_alternating(count, bound, sides).items():
                    found[name][suite] = measured
                record(results)
                continue
            for name, tree in trees.items():
                log(f"[{name}: {tree.ref} {tree.commit[:10]}]")
                with compare.using(tree):
                    measured = run_suites([suite], sizes, log=log)
                found[name][suite] = measured[suite]
                record(results)
    return results


def scale_curve(small: dict[str, Any], large: dict[str, Any]) -> dict[str, Any]:
    """Cost per instance at the smallest and largest N; the ratio should stay near 1 (a flat curve)."""

    def cost(run: dict[str, Any]) -> dict[str, float]:
        cpu = run["cpu_seconds_by_process"]
        per = run["instances"]
        return {
            "opbroker_writes_per_instance": run["opbroker_writes_per_instance"],
            "controller_cpu_ms_per_instance": round(1000 * cpu["controller"] / per, 2),
            "broker_cpu_ms_per_instance": round(1000 * cpu["broker"] / per, 2),
            "apiserver_cpu_ms_per_instance": round(1000 * cpu["kube-apiserver"] / per, 2),
            "wall_ms_per_instance": round(1000 * run["total_seconds"] / per, 2),
        }

    low, high = cost(small), cost(large)
    ratios = {k: round(high[k] / low[k], 3) if low[k] else None for k in low}
    controller_ratio = ratios["controller_cpu_ms_per_instance"] or 0.0
    return {
        "small": {"n": small["instances"], **low},
        "large": {"n": large["instances"], **high},
        "ratios": ratios,
        "flat": controller_ratio <= TARGETS["scale_curve_ratio"],
    }


def summary_markdown(results: dict[str, Any]) -> str:
    m = results["machine"]
    lines = [
        "# Benchmark results",
        "",
        f"Machine: {m['cpus']} cores, {m['memory_gib']} GiB, Python {m['python']}, kernel {m['kernel']}; "
        f"run {m['date']}. Reproduce: `scripts/bench.sh` (full) — details in `bench/README.md`; "
        "raw numbers in the JSON file beside this one.",
        "",
    ]
    dates = results.get("suite_dates") or {}
    if len(set(dates.values())) > 1:
        lines += ["Suites measured: " + ", ".join(f"{suite} {date}" for suite, date in sorted(dates.items())), ""]
    if "provisioning" in results:
        lines += [
            "## Provisioning through OSB (demo operator, concurrency 32)",
            "",
            "| N | total s | inst/s | OSB p50 / p99 s | reconcile p50 / p99 s | writes/inst | amplification | "
            "API writes/s | raw writes/s | utilisation | controller CPU ms/inst | controller RSS MiB |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for n, run in results["provisioning"].items():
            osb, rec = run["osb_provision_latency_s"], run["reconcile_latency_s"]
            lines.append(
                f"| {n} | {run['total_seconds']} | {run['instances_per_second']} | {osb['p50']} / {osb['p99']} | "
                f"{rec['p50']} / {rec['p99']} | {run['opbroker_writes_per_instance']} | {run['write_amplification']} | "
                f"{run['api_writes_per_second']} | {run['raw_write_rate']['writes_per_second']} | "
                f"{run['utilisation']} | "
                f"{run['controller_cpu_ms_per_instance']} | {run['controller']['rss_mib']} |"
            )
        curve = results.get("scale_curve")
        if curve is not None:
            lines += [
                "",
                f"Scale curve (cost per instance, N={curve['small']['n']} → N={curve['large']['n']}): "
                + ", ".join(f"{k} x{v}" for k, v in curve["ratios"].items())
                + f" — flat: {curve['flat']}.",
            ]
        lines.append("")
    if "bindings" in results:
        run = results["bindings"]
        osb, lat = run["osb_bind_latency_s"], run["bind_latency_s"]
        lines += [
            "## Bindings through OSB",
            "",
            f"{run['bindings']} bindings over {run['instances']} instances: {run['total_seconds']} s "
            f"({run['bindings_per_second']}/s), OSB p50/p99 {osb['p50']}/{osb['p99']} s, bind latency p50/p99 "
            f"{lat['p50']}/{lat['p99']} s, {run['opbroker_writes_per_binding']} writes/binding "
            f"(amplification {run['write_amplification']}), utilisation {run['utilisation']}, failed {run['failed']}.",
            "",
        ]
    if "servicecatalog" in results:
        lines += servicecatalog_markdown(results["servicecatalog"])
    if "restart" in results:
        lines += restart_markdown(results["restart"], results["machine"])
    if "secrets" in results:
        lines += secrets_markdown(results["secrets"])
    if "day-two" in results:
        lines += day_two.markdown(results["day-two"])
    if "renderer" in results:
        r = results["renderer"]
        lines += [
            "## Renderer",
            "",
            f"Renders/s of {r['template']}: "
            + ", ".join(f"{k} {v}" for k, v in r["renders_per_second"].items())
            + f" (opbroker ÷ jinja2+yaml = {r['ratio_to_jinja2_yaml']}).",
            "",
        ]
    if "jinja-bombs" in results:
        lines += jinja_bombs.markdown(results["jinja-bombs"])
    if "gotemplate" in results:
        g = results["gotemplate"]
        lines += [
            "## Go templates (gotemplate through the Go renderer vs jinja2 in-process)",
            "",
            f"Renders/s of {g['plan']}:",
            "",
            "| template | opbroker gotemplate | opbroker jinja2 | gotemplate ÷ jinja2 | bare text/template (Go) |",
            "|---|---|---|---|---|",
        ]
        for action, r in g["renders_per_second"].items():
            lines.append(
                f"| {action} | {r['opbroker_gotemplate']} | {r['opbroker_jinja2']} | "
                f"{g['ratio_gotemplate_to_jinja2'][action]} | {r.get('bare_text_template_go', 'n/a')} |"
            )
        lines += ["", f"Target (gotemplate path ≥ jinja2 path): {'met' if g['target_met'] else 'NOT met'}.", ""]
    if "claims" in results:
        c = results["claims"]
        lines += [
            "## Claims matching",
            "",
            f"{c['services']} services x {c['claims']} claims: {c['matching_seconds_total']} s "
            f"({c['claims_per_second']} claims/s, p50 {c['per_claim_seconds']['p50']} s, p99 "
            f"{c['per_claim_seconds']['p99']} s per claim incl. 50 verdicts); "
            f"index build {c['index_build_seconds']} s.",
            "",
        ]
    if "cluster" in results:
        lines += cluster_markdown(results["cluster"])
    if "pulumi" in results:
        lines += pulumi_markdown(results["pulumi"])
    if "postgresql" in results:
        lines += postgresql.markdown(results["postgresql"])
    return "\n".join(lines)


def servicecatalog_markdown(r: dict[str, Any]) -> list[str]:
    rows = []
    for label, phase in (("Instances", r["instances_phase"]), ("Bindings", r["bindings_phase"])):
        ready, cpu = phase["ready_latency_s"], phase["cpu_seconds_by_process"]
        broker_ms = round(1000 * cpu.get("broker", 0) / phase["objects"], 2)
        verbs = phase["requests_by_verb"]["controller"]
        gets = round(verbs.get("get", 0) / phase["objects"], 2)
        writes = round(sum(verbs.get(v, 0) for v in ("create", "update", "patch", "delete")) / phase["objects"], 2)
        rows.append(
            f"| {label} | {phase['objects']} | {phase['total_seconds']} | {phase['per_second']} | "
            f"{ready['p50']} / {ready['p99']} | {phase['controller_cpu_ms_per_object']} | "
            f"{phase['controller_memory_kib_per_object']} | {broker_ms} | "
            f"{round(1000 * cpu.get('kube-apiserver', 0) / phase['objects'], 2)} | {gets} / {writes} | "
            f"{phase['failed']} |"
        )
    return [
        "## Service Catalog path (Instances and Bindings through opbroker's own broker)",
        "",
        "Created as kubectl would (32 concurrent clients); a Broker points at opbroker's broker; each object is "
        "counted when Ready=True. Controller CPU and memory per object cover both halves of its work (the "
        "Service Catalog client and the broker-side reconcile through the demo plan), and so do its GETs and "
        "writes (events and Secrets included): the OSB provisioning and bindings suites need about 1 and 3 GETs "
        "of that half.",
        "",
        "| phase | N | total s | per s | create → Ready p50 / p99 s | controller CPU ms/obj | "
        "controller RSS growth KiB/obj | broker CPU ms/obj | API server CPU ms/obj | controller GETs / writes "
        "per obj | failed |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]


def restart_markdown(r: dict[str, Any], m: dict[str, Any]) -> list[str]:
    after, empty = r["restart"], r["empty"]
    reads = after["reads"]
    met = r["targets_met"]
    return [
        "## Controller restart over settled objects",
        "",
        f"{r['instances']} instances and {r['bindings']} bindings settled (demo plan through OSB, "
        f"{r['settle']['instances_seconds']} s + {r['settle'].get('bindings_seconds', 0)} s); the controller "
        "stopped with SIGTERM and a fresh one started with the same flags:",
        "",
        "| over | ready s | idle s | reconciles | CPU s to idle | writes | gets / lists / watches | RSS MiB |",
        "|---|---|---|---|---|---|---|---|",
        *(
            f"| {label} | {x['ready_seconds']} | {x['idle_seconds']} | {x['reconciles']} | "
            f"{x['cpu_seconds_to_idle']} | {x['writes']} | {x['reads']['get']} / {x['reads']['list']} / "
            f"{x['reads']['watch']} | {x['rss_mib']} |"
            for label, x in ((f"{r['objects']} settled objects", after), ("the empty cluster", empty))
        ),
        "",
        f"Writes after the restart: {after['writes']} (target {r['targets']['controller_writes']}: "
        f"{'met' if met['controller_writes'] else 'NOT met'}); reads {reads['get']} gets, {reads['list']} lists, "
        f"{reads['watch']} watches. Memory: {r['memory_per_object_kib']} KiB per settled object over the empty "
        f"cluster's controller (target ≤ {r['targets']['memory_per_object_kib']}: "
        f"{'met' if met['memory_per_object_kib'] else 'NOT met'}). Idle = every object seen, queue empty, no "
        f"reconcile for {r['quiet_seconds']} s. Machine: {m['cpus']} cores shared with other work (load average "
        f"{' / '.join(str(x) for x in r['load_average_before'])} before the run"
        + (f", {' / '.join(str(x) for x in r['load_average_after'])} after it" if "load_average_after" in r else "")
        + ")."
        + (f" {r['note']}" if r.get("note") else ""),
        "",
    ]


def secrets_markdown(r: dict[str, Any]) -> list[str]:
    watched, restarted = r["watched"], r["restart"]
    return [
        "## Unrelated Secrets in the cluster",
        "",
        f"{r['secrets']} Secrets of {r['payload_bytes']} bytes each that nothing of opbroker's uses, created beside "
        f"{r['instances']} instances and {r['bindings']} bindings ({r['create_seconds']} s):",
        "",
        "| controller | RSS MiB before | after | growth MiB | bytes per Secret | Secret bodies held |",
        "|---|---|---|---|---|---|",
        *(
            f"| {label} | {x['rss_mib_before']} | {x['rss_mib_after']} | {x['growth_mib']} | "
            f"{x['growth_bytes_per_secret']} | {_bodies(store)} |"
            for label, x, store in (
                ("running (Secrets arrive by its watch)", watched, watched["store_after"]),
                ("restarted (Secrets in its first listing)", restarted, restarted["store_after"]),
            )
        ),
        "",
        f"Restart reads (gets / lists / watches) before the Secrets: {_reads(restarted['reads_before'])}, after: "
        f"{_reads(restarted['reads_after'])}; writes after: {restarted['writes_after']}.",
        "",
    ]


def _catalog_rows(phase: str, what: str) -> list[tuple[str, Any]]:
    """The Service Catalog suite's figures per object of one phase: CPU of the controller (its SC reconcile and
    the OSB reconcile behind it), the broker and the API server, and the broker's GETs (its polls' reads)."""

    def per_object(process: str) -> Any:
        return lambda s: _ms_per(s["servicecatalog"][phase], process)

    def both(s: dict[str, Any]) -> float:
        p = s["servicecatalog"][phase]
        return round(_ms_per(p, "controller") + _ms_per(p, "broker"), 2)

    def broker_gets(s: dict[str, Any]) -> float:
        p = s["servicecatalog"][phase]
        return round(p["requests_by_verb"]["broker"].get("get", 0) / p["objects"], 2)

    return [
        (f"{what}s/s", lambda s: s["servicecatalog"][phase]["per_second"]),
        (f"controller CPU ms/{what}", per_object("controller")),
        (f"broker CPU ms/{what}", per_object("broker")),
        (f"controller + broker CPU ms/{what}", both),
        (f"API server CPU ms/{what}", per_object("kube-apiserver")),
        (f"broker GETs/{what}", broker_gets),
    ]


def _cost_rows(label: str, what: str, pick: Any, count: str) -> list[tuple[str, Any]]:
    """CPU per object of the broker and the API server beside the controller's, and issue 31's ratio
    ((controller + broker) / API server): ``pick`` finds the suite's result, ``count`` its number of objects."""

    def per_object(process: str) -> Any:
        return lambda s: round(pick(s)["cpu_seconds_by_process"][process] * 1000 / pick(s)[count], 2)

    def ratio(s: dict[str, Any]) -> float:
        cpu = pick(s)["cpu_seconds_by_process"]
        return round((cpu["controller"] + cpu["broker"]) / cpu["kube-apiserver"], 3)

    return [
        (f"{label}: broker CPU ms/{what}", per_object("broker")),
        (f"{label}: API server CPU ms/{what}", per_object("kube-apiserver")),
        (f"{label}: (controller + broker) / API server CPU", ratio),
    ]


def _ms_per(phase: dict[str, Any], process: str) -> float:
    return round(phase["cpu_seconds_by_process"][process] * 1000 / phase["objects"], 2)


def _bodies(store: dict[str, float] | None) -> str:
    """Secret bodies held of Secrets known, from the store metrics (a tree without them: n/a)."""
    if not store:
        return "n/a (no store metrics)"
    bodies, metadata = int(store.get("objects_body", 0)), int(store.get("objects_metadata", 0))
    return f"{bodies} of {bodies + metadata}"


def _reads(reads: dict[str, int]) -> str:
    return f"{reads['get']} / {reads['list']} / {reads['watch']}"


def pending_note(results: dict[str, Any]) -> list[str]:
    """A line naming the suites a compare has not measured on both sides: the results files are written after
    each suite, so a file taken while the run goes on (or after it was cut short) holds only part of it — the
    2026-11-25T05:48 compare was committed 21 minutes into its run, before its bindings suite, hence n/a."""
    c = results["compare"]
    asked = results.get("suites") or COMPARED
    missing = [suite for suite in asked if not all(suite in c[side] for side in ("before", "after"))]
    if not missing:
        return []
    return [f"**Partial run**: not measured on both sides (yet): {', '.join(missing)} (n/a below).", ""]


def compare_markdown(results: dict[str, Any]) -> str:
    """Before (the other ref) and after (this tree), side by side."""
    c, m = results["compare"], results["machine"]
    before, after = c["before"], c["after"]

    def row(label: str, pick: Any) -> str:
        values = []
        for side in (before, after):
            try:
                values.append(str(pick(side)))
            except (KeyError, TypeError):
                values.append("n/a")  # a suite not measured (yet): see ``pending`` below
        return f"| {label} | {values[0]} | {values[1]} |"

    prov = str(results["sizes"]["provisioning"][0])
    asked = results.get("suites") or COMPARED
    secrets = "secrets"
    rows = {
        "restart": [
            row("restart: controller writes", lambda s: s["restart"]["restart"]["writes"]),
            row("restart: access reviews (not writes)", lambda s: s["restart"]["restart"]["access_reviews"]),
            row(
                "restart: gets / lists / watches",
                lambda s: "{get} / {list} / {watch}".format(**s["restart"]["restart"]["reads"]),
            ),
            row("restart: ready s", lambda s: s["restart"]["restart"]["ready_seconds"]),
            row("restart: idle s", lambda s: s["restart"]["restart"]["idle_seconds"]),
            row("restart: CPU s to idle", lambda s: s["restart"]["restart"]["cpu_seconds_to_idle"]),
            row(
                "restart: CPU s to idle, each run",
                lambda s: " / ".join(map(str, s["restart"]["runs"]["cpu_seconds_to_idle"])),
            ),
            row("restart: idle s, each run", lambda s: " / ".join(map(str, s["restart"]["runs"]["idle_seconds"]))),
            row("restart: gets, each run", lambda s: " / ".join(map(str, s["restart"]["runs"]["gets"]))),
            row("restart: renders, each run", lambda s: " / ".join(map(str, s["restart"]["runs"]["renders"]))),
            row("restart: KiB per settled object", lambda s: s["restart"]["memory_per_object_kib"]),
            row("restart: controller threads at idle", lambda s: s["restart"]["restart"]["threads"]),
        ],
        "provisioning": [
            row(f"provisioning {prov}: inst/s", lambda s: s["provisioning"][prov]["instances_per_second"]),
            row(f"provisioning {prov}: writes/inst", lambda s: s["provisioning"][prov]["opbroker_writes_per_instance"]),
            row(
                f"provisioning {prov}: controller CPU ms/inst",
                lambda s: s["provisioning"][prov]["controller_cpu_ms_per_instance"],
            ),
            *(
                row(label, pick)
                for label, pick in _cost_rows(
                    f"provisioning {prov}", "inst", lambda s: s["provisioning"][prov], "instances"
                )
            ),
            row(f"provisioning {prov}: utilisation", lambda s: s["provisioning"][prov]["utilisation"]),
            row(f"provisioning {prov}: controller threads", lambda s: s["provisioning"][prov]["controller"]["threads"]),
            row(
                f"provisioning {prov}: access reviews",
                lambda s: s["provisioning"][prov]["controller_access_reviews"],
            ),
        ],
        "bindings": [
            row("bindings: bindings/s", lambda s: s["bindings"]["bindings_per_second"]),
            row("bindings: writes/binding", lambda s: s["bindings"]["opbroker_writes_per_binding"]),
            row(
                "bindings: controller gets/binding",
                lambda s: round(
                    s["bindings"]["requests_by_verb"]["controller"].get("get", 0) / s["bindings"]["bindings"], 3
                ),
            ),
            row("bindings: controller CPU ms/binding", lambda s: s["bindings"]["controller_cpu_ms_per_binding"]),
            *(
                row(label, pick)
                for label, pick in _cost_rows("bindings", "binding", lambda s: s["bindings"], "bindings")
            ),
            row("bindings: utilisation", lambda s: s["bindings"]["utilisation"]),
            row("bindings: access reviews", lambda s: s["bindings"]["controller_access_reviews"]),
        ],
        "servicecatalog": [
            *(
                row(f"servicecatalog: {label}", pick)
                for phase, what in (("instances_phase", "Instance"), ("bindings_phase", "Binding"))
                for label, pick in _catalog_rows(phase, what)
            ),
        ],
        secrets: [
            row(
                "secrets: unrelated Secrets (bytes of data each)",
                lambda s: f"{s[secrets]['secrets']} ({s[secrets]['payload_bytes']})",
            ),
            row(
                "secrets: running controller RSS MiB before → after",
                lambda s: f"{s[secrets]['watched']['rss_mib_before']} → {s[secrets]['watched']['rss_mib_after']}",
            ),
            row(
                "secrets: running controller growth bytes/Secret",
                lambda s: s[secrets]["watched"]["growth_bytes_per_secret"],
            ),
            row(
                "secrets: restarted controller RSS MiB before → after",
                lambda s: f"{s[secrets]['restart']['rss_mib_before']} → {s[secrets]['restart']['rss_mib_after']}",
            ),
            row(
                "secrets: restarted controller growth bytes/Secret",
                lambda s: s[secrets]["restart"]["growth_bytes_per_secret"],
            ),
            row("secrets: Secret bodies held (running)", lambda s: _bodies(s[secrets]["watched"]["store_after"])),
            row(
                "secrets: controller CPU s taking the Secrets in",
                lambda s: s[secrets]["watched"]["controller_cpu_seconds"],
            ),
            row(
                "secrets: restart gets / lists / watches (with them)",
                lambda s: _reads(s[secrets]["restart"]["reads_after"]),
            ),
            row(
                "secrets: restart CPU s to idle (with them)",
                lambda s: s[secrets]["restart"]["cpu_seconds_to_idle_after"],
            ),
        ],
    }
    return "\n".join(
        [
            "# Before and after, same run",
            "",
            f"Before: {before['ref']} ({before['commit'][:10]}); after: {after['ref']} ({after['commit'][:10]}). "
            f"Machine: {m['cpus']} cores (shared), {m['memory_gib']} GiB; run {m['date']}. The controller and the "
            "broker of each side import that side's code (checked: `imports` in the JSON file); the harness, the "
            "CRDs and the demo operator are this tree's. Reproduce: `python -m bench.run --compare <ref>`.",
            "",
            *(
                [
                    f"Restart: one cluster settled by this tree's controller; {after['restart']['note']} "
                    "The restart's row is the run of the median CPU; the CPU, idle and gets of every run follow.",
                    "",
                ]
                if "note" in after.get("restart", {})
                else []
            ),
            *pending_note(results),
            "| figure | before | after |",
            "|---|---|---|",
            *(line for suite in asked for line in rows.get(suite, [])),
            "",
        ]
    )


def pulumi_markdown(p: dict[str, Any]) -> list[str]:
    builds = "; ".join(f"{b['built']}: {b['seconds']} s ({b['go']}, {b['cpus']} cores)" for b in p["cold_build"] or [])
    s = p["seconds"]
    return [
        f"## Pulumi engine (pulumi {p['pulumi']}, pulumi-kubernetes {p['pulumi_kubernetes']})",
        "",
        f"Cold build: {builds or 'no record'}. The {p.get('program', 'root stack (Pulumi YAML translation)')}: "
        f"{p['resources']} resources on a control plane without a node: `pulumi preview` {s['preview']} s, "
        f"`pulumi up` {s['up']} s, a second preview (nothing to change) {s['preview_unchanged']} s, "
        f"`pulumi destroy` {s['destroy']} s.",
        "",
    ]


def cluster_markdown(c: dict[str, Any]) -> list[str]:
    builds = "; ".join(f"{b['built']}: {b['seconds']} s ({b['go']}, {b['cpus']} cores)" for b in c["cold_build"] or [])

    def weights(rss: dict[str, float | None]) -> str:
        return ", ".join(f"{k} {round(v) if v is not None else '?'}" for k, v in rss.items())

    start = c["start_seconds"]
    return [
        f"## Local cluster (Kubernetes {c['kubernetes']})",
        "",
        f"Cold builds: {builds or 'no record (binaries built before records were kept)'}. "
        f"opbroker image: {c['image']['build_seconds']} s to build, {c['image']['archive_mib']} MiB. "
        f"Start to ready: control plane {start['control_plane']} s, with a node {start['control_plane_and_node']} s. "
        f"A pod of the opbroker image Running {c['pod_running_seconds']['create_to_running']} s after its create, "
        f"{c['pod_running_seconds']['up_to_running']} s after `up` (image import included).",
        "",
        f"Resident memory (MiB), idle control plane: {weights(c['rss_mib']['control_plane'])}; with a node running "
        f"one pod: {weights(c['rss_mib']['with_node'])}.",
        "",
    ]


def latest_results() -> dict[str, Any] | None:
    """The most recent recorded results: a run of some suites updates those and keeps the others (the
    summary says when each suite was measured)."""
    recorded = sorted(RESULTS.glob("bench-*.json"))
    if not recorded:
        return None
    loaded: dict[str, Any] = json.loads(recorded[-1].read_text())
    return loaded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: check the harness, not the figures")
    parser.add_argument("--suite", action="append", choices=SUITES, help="run only these (repeatable)")
    parser.add_argument("--no-record", action="store_true", help="print, do not write results files")
    parser.add_argument(
        "--provisioning",
        nargs="+",
        type=int,
        metavar="N",
        help=f"provisioning suite sizes (default {' '.join(map(str, FULL['provisioning']))}; a compare: one N, "
        "default 1000)",
    )
    parser.add_argument(
        "--bindings",
        nargs=2,
        type=int,
        metavar=("BINDINGS", "INSTANCES"),
        help="bindings suite size (default 10000 1000)",
    )
    parser.add_argument(
        "--servicecatalog",
        type=int,
        metavar="N",
        help="servicecatalog suite size: N Instances and N Bindings (default 1000)",
    )
    parser.add_argument(
        "--restart",
        nargs=2,
        type=int,
        metavar=("INSTANCES", "BINDINGS"),
        help=f"restart suite size (default {restart.DEFAULT_INSTANCES} {restart.DEFAULT_BINDINGS})",
    )
    parser.add_argument(
        "--secrets",
        nargs=2,
        type=int,
        metavar=("SECRETS", "INSTANCES"),
        help=f"secrets suite size (default {unrelated.DEFAULT_SECRETS} {unrelated.DEFAULT_INSTANCES})",
    )
    parser.add_argument(
        "--day-two",
        nargs=3,
        type=int,
        metavar=("INSTANCES", "DRIFT_INSTANCES", "DRIFTED"),
        help=f"day-two suite size (default {day_two.DEFAULT_INSTANCES} {' '.join(map(str, day_two.DEFAULT_DRIFT))})",
    )
    parser.add_argument(
        "--day-two-resync",
        nargs=2,
        type=float,
        metavar=("DEFAULT", "SHORT"),
        help="day-two suite: the resync periods of its two phases (default 600 120)",
    )
    parser.add_argument(
        "--day-two-window",
        type=float,
        metavar="SECONDS",
        help="day-two suite: watch the default resync this long (default: until a whole pass has run)",
    )
    parser.add_argument(
        "--day-two-passes",
        type=int,
        metavar="N",
        help=f"day-two suite: short-resync passes watched, memory sampled after each (default {day_two.PASSES})",
    )
    parser.add_argument(
        "--compare",
        metavar="GIT_REF",
        help="run the restart, provisioning (N=1000) and bindings suites (or those named by --suite) on GIT_REF's "
        "code and this tree's, in this run (results: compare-<date>.json and COMPARE.md, or COMPARE-<suites>.md "
        "for other suites)",
    )
    args = parser.parse_args()
    sizes = dict(QUICK if args.quick else FULL)
    if args.provisioning:
        sizes["provisioning"] = tuple(args.provisioning)
    if args.bindings:
        sizes["bindings"] = tuple(args.bindings)
    if args.restart:
        sizes["restart"] = tuple(args.restart)
    if args.servicecatalog:
        sizes["servicecatalog"] = args.servicecatalog
    if args.secrets:
        sizes["secrets"] = tuple(args.secrets)
    if args.day_two:
        instances, drift_instances, drifted = args.day_two
        sizes["day-two"] = {
            **sizes["day-two"],
            "instances": instances,
            "drift_instances": drift_instances,
            "drifted": drifted,
        }
    if args.day_two_resync:
        sizes["day-two"] = {
            **sizes["day-two"],
            "resync_default": args.day_two_resync[0],
            "resync_short": args.day_two_resync[1],
        }
    if args.day_two_window:
        sizes["day-two"] = {**sizes["day-two"], "window": args.day_two_window}
    if args.day_two_passes:
        sizes["day-two"] = {**sizes["day-two"], "passes": args.day_two_passes}
    keep = not (args.no_record or args.quick)
    started = time.perf_counter()
    if args.compare:
        compared_suites = tuple(args.suite or COMPARED)
        # The default compare is COMPARE.md; one of other suites gets a file of its own beside it.
        summary_file = "COMPARE.md" if compared_suites == COMPARED else f"COMPARE-{'-'.join(compared_suites)}.md"

        def record_compare(results: dict[str, Any]) -> None:
            results["seconds"] = round(time.perf_counter() - started, 1)
            if keep:
                RESULTS.mkdir(exist_ok=True)
                stamp = results["machine"]["date"].replace(":", "")
                (RESULTS / f"compare-{stamp}.json").write_text(json.dumps(results, indent=2) + "\n")
                (RESULTS / summary_file).write_text(compare_markdown(results) + "\n")

        if args.provisioning and len(args.provisioning) > 1:
            parser.error("a compare runs the provisioning suite at one size: give --provisioning one N")
        if args.provisioning:
            provisioning_size = args.provisioning[0]
        else:
            provisioning_size = min(sizes["provisioning"]) if args.quick else COMPARED_PROVISIONING
        compared = run_compare(
            args.compare, sizes, record=record_compare, provisioning_size=provisioning_size, suites=compared_suites
        )
        record_compare(compared)
        print(compare_markdown(compared) if keep else json.dumps(compared, indent=2))
        return

    def record(results: dict[str, Any]) -> None:
        results["seconds"] = round(time.perf_counter() - started, 1)
        if keep:
            RESULTS.mkdir(exist_ok=True)
            stamp = results["machine"]["date"].replace(":", "")
            (RESULTS / f"bench-{stamp}.json").write_text(json.dumps(results, indent=2) + "\n")
            (RESULTS / "RESULTS.md").write_text(summary_markdown(results) + "\n")

    suites = args.suite or list(SUITES)
    earlier = latest_results() if keep and set(suites) != set(SUITES) else None
    if earlier is not None:
        sizes = {**earlier.get("sizes", {}), **{suite: sizes[suite] for suite in suites}}
    results = run_suites(suites, sizes, record=record, earlier=earlier)
    record(results)
    print(summary_markdown(results) if keep else json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
