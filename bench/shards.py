"""Shards (issue 46): provisioning N instances through the OSB API with the controller split into M shards, each a
process of its own (``--shards M --shard i``), the broker labelling what it creates.

Per shard: the instances it holds (counted by label), its CPU per instance it holds, its resident memory before and
after; in total: the controllers' and the broker's CPU per instance against the API server's (the issue's ratio,
target 0.25), API writes per instance. Run ``python -m bench.shards --instances 1000 --shards 1,3`` (each count its
own fresh control plane, one after the other); results go to ``bench/results/shards-<date>.json`` and
``bench/results/SHARDS.md``.

What it shows and what it does not: the machine has 2 cores shared by the API server, etcd, the operator, the
broker and every shard, so the run's wall time is the machine's; the per-shard CPU and RSS figures are what one
shard would need on a machine of its own.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import time
from pathlib import Path
from typing import Any

from kubernetes import client

from bench.bindings import bind_all
from bench.common import Bench, bench_stack, process_usage, writes, writes_by_resource
from bench.provisioning import provision_all
from bench.restart import QUIET_SECONDS, started_instead, wait_idle
from opbroker.devcluster.controlplane import free_ports

RESULTS = Path(__file__).parent / "results"
SHARD_LABEL = "opbroker.io/shard"
TAIL_QUIET_SECONDS = 12.0
"""Longer than the controller's ``--live-status-seconds`` (10 s): a write it defers by that much is in the tail."""


def held_by_shard(
    api: client.ApiClient, namespace: str, shards: int, plural: str = "sfserviceinstances"
) -> dict[str, int]:
    """The instances (or bindings: ``plural``) of ``namespace`` each shard holds (by label)."""
    custom = client.CustomObjectsApi(api)
    counts: dict[str, int] = {}
    for shard in range(shards):
        selector = f"{SHARD_LABEL}={shard}" if shards > 1 else ""
        listed = custom.list_namespaced_custom_object(
            "osb.servicefabrik.io", "v1alpha1", namespace, plural, label_selector=selector
        )
        counts[_name(shard, shards)] = len(listed["items"])
    return counts


def _name(shard: int, shards: int) -> str:
    return "controller" if shards == 1 else f"controller-shard-{shard}"


def run(
    count: int, shards: int, concurrency: int = 32, bindings_per_instance: int = 0, restart_each: bool = False
) -> dict[str, Any]:
    """One run: provisioning (and binding) over ``shards`` fresh shards, then the last shard restarted over its
    settled objects — or, ``restart_each``, every shard in turn (shard 0 holds the control plane's once-per-cluster
    duties besides its share, so its restart differs from the others')."""
    with bench_stack(f"shards-{shards}-{count}-{os.getpid()}", shards=shards) as bench:
        bench.make_operator_instant()
        before = {p.name: process_usage(p)["rss_mib"] for p in bench.controllers()}
        namespace = bench.namespace("bench")
        result = provision_all(bench, namespace, count, concurrency)
        tail = settle_tail(bench, count)
        after = {p.name: process_usage(p)["rss_mib"] for p in bench.controllers()}
        held = held_by_shard(bench.api, namespace, shards)
        bound = {name: 0 for name in held}
        if bindings_per_instance:  # the restart's objects as bench.restart makes them (after the provisioning figures)
            bind_all(bench, namespace, result["names"], bindings_per_instance, concurrency)
            bound = held_by_shard(bench.api, namespace, shards, "sfservicebindings")
        restarts = []
        for shard in range(shards) if restart_each else [shards - 1]:
            name = _name(shard, shards)
            restart = restart_shard(bench, name, expected=held[name] + bound[name], baseline_mib=before[name])
            restarts.append({**restart, "bindings": bound[name]})
    result.pop("names")
    cpu = result["cpu_seconds_by_process"]
    per_shard = {
        name: {
            "instances": held[name],
            "cpu_seconds": cpu[name],
            "cpu_ms_per_held_instance": round(1000 * cpu[name] / held[name], 2) if held[name] else None,
            "rss_mib": {"before": before[name], "after": after[name]},
        }
        for name in sorted(held)
    }
    controllers = sum(cpu[name] for name in held)
    apiserver = cpu["kube-apiserver"]
    return {
        "instances": count,
        "shards": shards,
        "failed": result["failed"],
        "total_seconds": result["total_seconds"],
        "per_shard": per_shard,
        "controllers_cpu_ms_per_instance": round(1000 * controllers / count, 2),
        "broker_cpu_ms_per_instance": round(1000 * cpu["broker"] / count, 2),
        "apiserver_cpu_ms_per_instance": round(1000 * apiserver / count, 2),
        "opbroker_to_apiserver": round((controllers + cpu["broker"]) / apiserver, 3),
        "opbroker_writes_per_instance": result["opbroker_writes_per_instance"],
        "reconcile_latency_s": result["reconcile_latency_s"],
        "tail": tail,
        "opbroker_to_apiserver_with_tail": round(
            (controllers + cpu["broker"] + tail["opbroker_cpu_seconds"])
            / (apiserver + tail["cpu_seconds_by_process"]["kube-apiserver"]),
            3,
        ),
        "restart": restarts[-1],
        "restarts": restarts,
    }


def settle_tail(bench: Bench, count: int, quiet: float = TAIL_QUIET_SECONDS, timeout: float = 600.0) -> dict[str, Any]:
    """What opbroker does after the last instance succeeded (where the ratio's window ends) until it writes nothing
    for ``quiet`` seconds: the first day-two checks (and any write deferred past the window, such as a debounced
    live-status change, ``--live-status-seconds``). Its writes per instance and every process's CPU, so deferred work
    is not hidden by the window; the API server's share includes ``quiet`` seconds of its idle."""
    bench.audit.mark()
    cpu_before = bench.cpu_seconds()
    started = last_change = time.monotonic()
    written = -1
    while time.monotonic() - last_change < quiet and time.monotonic() - started < timeout:
        counts, _ = bench.audit.counts()
        now = writes(counts, "controller", "broker")
        if now != written:
            written, last_change = now, time.monotonic()
        time.sleep(1.0)
    cpu_after = bench.cpu_seconds()
    counts, _ = bench.audit.counts()
    used = {k: round(cpu_after[k] - cpu_before.get(k, 0.0), 2) for k in cpu_after}
    opbroker = sum(v for k, v in used.items() if k == "broker" or k.startswith("controller"))
    return {
        "seconds": round(time.monotonic() - started, 1),
        "opbroker_writes_per_instance": round(writes(counts, "controller", "broker") / count, 3),
        "opbroker_writes_by_resource": writes_by_resource(counts, "controller", "broker"),
        "cpu_seconds_by_process": used,
        "opbroker_cpu_seconds": round(opbroker, 2),
    }


def restart_shard(bench: Bench, name: str, *, expected: int, baseline_mib: float) -> dict[str, Any]:
    """SIGTERM one shard's controller and start it again (with a metrics port) over its settled objects: its time
    and CPU to idle, and its memory per settled object over ``baseline_mib`` (its RSS on the empty cluster)."""
    old = bench.process(name)
    old.stop()
    (port,) = free_ports(1)
    fresh = started_instead(bench, old, [*old.command, "--metrics-port", str(port)], old.env)
    idle = wait_idle(fresh, port, expected=expected, quiet=QUIET_SECONDS, timeout=max(120.0, expected * 0.1))
    return {
        "shard": name,
        "objects": expected,
        "idle_seconds": idle["idle_seconds"],
        "cpu_seconds_to_idle": idle["cpu_seconds_to_idle"],
        "renders": idle["renders"],
        "rss_mib": idle["rss_mib"],
        "kib_per_settled_instance": round(1024 * (idle["rss_mib"] - baseline_mib) / expected, 2) if expected else None,
        # (per settled object: instances and bindings alike, as bench.restart counts them)
    }


def report(runs: list[dict[str, Any]], source: str) -> str:
    """The runs as Markdown: a row per run, then a row per shard."""
    lines = [
        f"# Shards: provisioning through M controller shards ({source})",
        "",
        "| code | instances | shards | s | controllers ms/inst | broker ms/inst | API server ms/inst | ratio | "
        "writes/inst | tail: s, writes/inst | ratio with the tail |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        tail = r.get("tail") or {}
        lines.append(
            f"| {r.get('code', '—')} | {r['instances']} | {r['shards']} | {r['total_seconds']} | "
            f"{r['controllers_cpu_ms_per_instance']} | "
            f"{r['broker_cpu_ms_per_instance']} | {r['apiserver_cpu_ms_per_instance']} | "
            f"{r['opbroker_to_apiserver']} | {r['opbroker_writes_per_instance']} | "
            f"{tail.get('seconds', '—')}, {tail.get('opbroker_writes_per_instance', '—')} | "
            f"{r.get('opbroker_to_apiserver_with_tail', '—')} |"
        )
    lines += [
        "",
        "The ratio's window ends when the last instance succeeded; the tail is what opbroker does after it until it "
        "writes nothing for 12 s (the first day-two checks and their records), the API server's idle over those "
        "seconds included.",
    ]
    lines += [
        "",
        "| code | instances | shards | shard | holds | CPU s | ms/held inst | RSS MiB before → after |",
        "|---|---:|---:|---|---:|---:|---:|---|",
    ]
    for r in runs:
        for name, shard in r["per_shard"].items():
            rss = shard["rss_mib"]
            lines.append(
                f"| {r.get('code', '—')} | {r['instances']} | {r['shards']} | {name} | {shard['instances']} | "
                f"{shard['cpu_seconds']} | "
                f"{shard['cpu_ms_per_held_instance']} | {rss['before']} → {rss['after']} |"
            )
    lines += [
        "",
        "| code | instances | shards | restarted | its objects (bindings) | s to idle | CPU s to idle | renders | "
        "RSS MiB | KiB/object |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        for x in r.get("restarts") or [r["restart"]]:
            lines.append(
                f"| {r.get('code', '—')} | {r['instances']} | {r['shards']} | {x['shard']} | {x['objects']} "
                f"({x.get('bindings', 0)}) | "
                f"{x['idle_seconds']} | "
                f"{x['cpu_seconds_to_idle']} | {x.get('renders') if x.get('renders') is not None else '—'} | "
                f"{x['rss_mib']} | {x['kib_per_settled_instance']} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=1000)
    parser.add_argument("--shards", default="1,3", help="shard counts, comma-separated (a run each)")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument(
        "--bindings-per-instance", type=int, default=0, help="bindings made after the provisioning, before the restart"
    )
    parser.add_argument(
        "--restart-each", action="store_true", help="restart every shard in turn at the end (default: the last only)"
    )
    parser.add_argument("--report", action="store_true", help="only write SHARDS.md from every shards-*.json")
    parser.add_argument(
        "--compare",
        metavar="REF",
        help="each shard count run twice, REF's controller and broker first, then this tree's",
    )
    args = parser.parse_args()
    if args.report:
        write_report()
        return
    counts = [int(n) for n in args.shards.split(",")]
    bindings = args.bindings_per_instance
    each = args.restart_each
    runs = compared(args.compare, args.instances, counts, args.concurrency, bindings, each) if args.compare else []
    for shards in [] if args.compare else counts:
        print(f"provisioning {args.instances} instances over {shards} shard(s) ...", flush=True)
        runs.append(run(args.instances, shards, args.concurrency, bindings, each))
        print(json.dumps(runs[-1], indent=2), flush=True)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H%M%SZ")
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"shards-{stamp}.json"
    path.write_text(json.dumps({"runs": runs}, indent=2) + "\n")
    write_report()
    print(f"written {path} and {RESULTS / 'SHARDS.md'}")


def compared(
    ref: str, count: int, counts: list[int], concurrency: int, bindings: int = 0, restart_each: bool = False
) -> list[dict[str, Any]]:
    """Before and after in one run: for each shard count, ``ref``'s code, then this tree's (fresh stacks each; the
    harness is this tree's — :mod:`bench.compare`). Each run records the commit it ran."""
    from bench import compare

    runs = []
    with compare.other_tree(ref) as before:
        for shards in counts:
            for tree in (before, compare.this_tree()):
                print(f"provisioning {count} instances over {shards} shard(s) with {tree.ref} ...", flush=True)
                with compare.using(tree):
                    measured = run(count, shards, concurrency, bindings, restart_each)
                runs.append({**measured, "code": tree.commit[:10], "ref": tree.ref})
                print(json.dumps(runs[-1], indent=2), flush=True)
    return runs


def write_report() -> None:
    """``SHARDS.md``: the runs of every ``shards-*.json``, oldest first."""
    files = sorted(RESULTS.glob("shards-*.json"))
    runs = [run for path in files for run in json.loads(path.read_text())["runs"]]
    (RESULTS / "SHARDS.md").write_text(report(runs, ", ".join(path.name for path in files)))


if __name__ == "__main__":
    main()
