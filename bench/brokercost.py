"""The broker's own cost per OSB request: CPU and API requests per provision, last_operation, bind, GET binding.

The provisioning and bindings suites record the broker's CPU beside the controller's, but only for the PUTs and
over phases where the controller dominates the machine. Here each kind of request is a phase of its own, on
the bench stack (controller, broker, instant demo operator): N provision PUTs (then the instances settle),
N instance last_operation polls with the token of the 202, N bind PUTs (one per instance; they settle), N GET
binding and N binding last_operation polls. Per phase: the broker's CPU ms per request (its process's CPU
time over the phase — the namespace index's watch events the phase causes included), and the API requests the
broker made per OSB request, by verb (audit log).

Run it alone, under ``flock /tmp/bench.lock``: ``python -m bench.brokercost --requests N`` (one run, printed) or
``--compare GIT_REF --runs K`` (K runs of each side, alternating; ``bench/results/BROKERCOST.md`` and the JSON).
"""

from __future__ import annotations

import os
import statistics
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from bench.common import Bench, process_usage
from bench.provisioning import StateWatch

DEFAULT_REQUESTS = 500
PHASES = ("provision", "instance_last_operation", "bind", "fetch_binding", "binding_last_operation")


def _phase(bench: Bench, count: int, concurrency: int, send: Callable[[int], None]) -> dict[str, Any]:
    """Run ``send(i)`` for i < count on ``concurrency`` threads: the broker's CPU and API requests per request."""
    bench.audit.mark()
    before = process_usage(bench.process("broker"))["cpu_seconds"]
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(send, range(count)))
    seconds = time.perf_counter() - started
    after = process_usage(bench.process("broker"))["cpu_seconds"]
    counts, _ = bench.audit.counts()
    verbs = {f"{verb} {resource}": n for (who, verb, resource), n in sorted(counts.items()) if who == "broker"}
    return {
        "requests": count,
        "seconds": round(seconds, 2),
        "broker_cpu_ms_per_request": round(1000 * (after - before) / count, 2),
        "broker_api_requests_per_request": round(sum(verbs.values()) / count, 3),
        "broker_api_requests": verbs,
    }


def _expect(response: httpx.Response, status: int, what: str) -> httpx.Response:
    if response.status_code != status:
        raise RuntimeError(f"{what}: {response.status_code} {response.text[:200]}")
    return response


def measure(bench: Bench, namespace: str, count: int, concurrency: int = 32) -> dict[str, Any]:
    """The five phases over ``count`` instances and bindings (see the module's docstring)."""
    service_id, plan_id = bench.plan_ids()
    instances = [f"c-{uuid.uuid4().hex[:12]}" for _ in range(count)]
    bindings = [f"d-{uuid.uuid4().hex[:12]}" for _ in range(count)]
    tokens: dict[str, str] = {}
    binding_tokens: dict[str, str] = {}
    provision_body = {
        "service_id": service_id,
        "plan_id": plan_id,
        "organization_guid": "bench",
        "space_guid": "bench",
        "context": {"platform": "kubernetes", "namespace": namespace},
    }
    bind_body = {"service_id": service_id, "plan_id": plan_id}
    incomplete = {"accepts_incomplete": "true"}
    phases: dict[str, Any] = {}
    instance_states = StateWatch(bench.api, namespace, "sfserviceinstances")
    binding_states = StateWatch(bench.api, namespace, "sfservicebindings")
    instance_states.start()
    binding_states.start()
    time.sleep(0.5)
    with bench.osb(concurrency) as http:

        def provision(i: int) -> None:
            name = instances[i]
            answer = _expect(
                http.put(f"/v2/service_instances/{name}", params=incomplete, json=provision_body), 202, "provision"
            )
            tokens[name] = answer.json()["operation"]

        def instance_poll(i: int) -> None:
            name = instances[i]
            answer = _expect(
                http.get(f"/v2/service_instances/{name}/last_operation", params={"operation": tokens[name]}),
                200,
                "last_operation",
            )
            if answer.json()["state"] != "succeeded":
                raise RuntimeError(f"last_operation {name}: {answer.text[:200]}")

        def bind(i: int) -> None:
            path = f"/v2/service_instances/{instances[i]}/service_bindings/{bindings[i]}"
            answer = _expect(http.put(path, params=incomplete, json=bind_body), 202, "bind")
            binding_tokens[bindings[i]] = answer.json()["operation"]

        def fetch_binding(i: int) -> None:
            path = f"/v2/service_instances/{instances[i]}/service_bindings/{bindings[i]}"
            _expect(http.get(path), 200, "GET binding")

        def binding_poll(i: int) -> None:
            path = f"/v2/service_instances/{instances[i]}/service_bindings/{bindings[i]}/last_operation"
            answer = _expect(http.get(path, params={"operation": binding_tokens[bindings[i]]}), 200, "last_operation")
            if answer.json()["state"] != "succeeded":
                raise RuntimeError(f"binding last_operation {bindings[i]}: {answer.text[:200]}")

        phases["provision"] = _phase(bench, count, concurrency, provision)
        instance_states.wait(instances, timeout=max(120.0, count * 0.5))
        phases["instance_last_operation"] = _phase(bench, count, concurrency, instance_poll)
        phases["bind"] = _phase(bench, count, concurrency, bind)
        binding_states.wait(bindings, timeout=max(120.0, count * 0.5))
        phases["fetch_binding"] = _phase(bench, count, concurrency, fetch_binding)
        phases["binding_last_operation"] = _phase(bench, count, concurrency, binding_poll)
    instance_states.stop()
    binding_states.stop()
    return {
        "requests": count,
        "concurrency": concurrency,
        "failed": len(instance_states.failed) + len(binding_states.failed),
        "phases": phases,
        "broker_rss_mib": process_usage(bench.process("broker"))["rss_mib"],
    }


def run(count: int = DEFAULT_REQUESTS, concurrency: int = 32) -> dict[str, Any]:
    from bench.common import bench_stack

    with bench_stack(f"brokercost-{count}-{os.getpid()}") as bench:
        bench.make_operator_instant()
        return measure(bench, bench.namespace("bench"), count, concurrency)


def markdown(result: dict[str, Any]) -> list[str]:
    """The table of the ``broker`` suite in RESULTS.md."""
    lines = [
        f"### Broker cost per OSB request ({result['requests']} of each, {result['concurrency']} concurrent)",
        "",
        "| request | broker CPU ms/request | broker API requests/request | requests made |",
        "|---|---|---|---|",
    ]
    for phase in PHASES:
        measured = result["phases"][phase]
        verbs = ", ".join(f"{verb} {n}" for verb, n in sorted(measured["broker_api_requests"].items()))
        lines.append(
            f"| {phase} | {measured['broker_cpu_ms_per_request']} | "
            f"{measured['broker_api_requests_per_request']} | {verbs or '—'} |"
        )
    return lines


def run_compare(ref: str, count: int, runs: int) -> dict[str, Any]:
    """``runs`` runs of each side, ``ref``'s code and this tree's, alternating (A B B A A B ...), fresh stacks."""
    from bench import compare
    from bench.common import machine

    results: dict[str, Any] = {"machine": machine(), "requests": count, "runs": runs, "sides": {}}
    this = compare.this_tree()
    with compare.other_tree(ref) as other:
        sides = {"before": other, "after": this}
        for side, tree in sides.items():
            results["sides"][side] = {"ref": tree.ref, "commit": tree.commit, "imports": compare.imported_from(tree)}
            results["sides"][side]["runs"] = []
        order = [("before", "after") if i % 2 == 0 else ("after", "before") for i in range(runs)]
        for pair in order:
            for side in pair:
                with compare.using(sides[side]):
                    measured = run(count)
                measured["load_average"] = os.getloadavg()
                results["sides"][side]["runs"].append(measured)
                print(f"  [{side}]", *markdown(measured)[4:], sep="\n", flush=True)
    for side in results["sides"].values():
        side["median"] = {
            phase: {
                key: statistics.median(r["phases"][phase][key] for r in side["runs"])
                for key in ("broker_cpu_ms_per_request", "broker_api_requests_per_request")
            }
            for phase in PHASES
        }
    return results


def compare_markdown(results: dict[str, Any]) -> str:
    """BROKERCOST.md: the medians of both sides, per request kind, and each run's load."""
    before, after = results["sides"]["before"], results["sides"]["after"]
    lines = [
        "# Broker cost per OSB request, before and after (`python -m bench.brokercost --compare`)",
        "",
        f"{results['machine']['date']}, {results['machine']['cpus']} cores (shared), {results['requests']} requests "
        f"of each kind per run, 32 concurrent; median of {results['runs']} runs per side, sides alternating on fresh "
        f"stacks. Before: {before['ref']} ({before['commit'][:7]}); after: {after['commit'][:7]}. Load average "
        f"(1 min) at the end of each run: before {[round(r['load_average'][0], 1) for r in before['runs']]}, after "
        f"{[round(r['load_average'][0], 1) for r in after['runs']]}.",
        "",
        "| request | broker CPU ms/request before | after | API requests/request before | after |",
        "|---|---|---|---|---|",
    ]
    for phase in PHASES:
        b, a = before["median"][phase], after["median"][phase]
        cpu, calls = "broker_cpu_ms_per_request", "broker_api_requests_per_request"
        lines.append(
            f"| {phase} | {b[cpu]:.2f} | {a[cpu]:.2f} ({a[cpu] / b[cpu] - 1:+.0%}) | {b[calls]:.3f} | {a[calls]:.3f} |"
        )
    lines += ["", "API requests the broker made, by verb and resource (first run of each side):", ""]
    for name, side in (("before", before), ("after", after)):
        lines += [f"*{name}*", "", *markdown(side["runs"][0])[2:], ""]
    return "\n".join(lines)


def main() -> None:
    import argparse
    import json
    from pathlib import Path

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=DEFAULT_REQUESTS, help="requests of each kind per run")
    parser.add_argument("--compare", metavar="GIT_REF", help="measure GIT_REF's code and this tree's, alternating")
    parser.add_argument("--runs", type=int, default=3, help="runs per side with --compare")
    parser.add_argument("--no-record", action="store_true", help="print, do not write bench/results files")
    parser.add_argument("--report", metavar="JSON", help="write BROKERCOST.md again from a recorded compare")
    args = parser.parse_args()
    folder = Path(__file__).resolve().parent / "results"
    if args.report:
        (folder / "BROKERCOST.md").write_text(compare_markdown(json.loads(Path(args.report).read_text())) + "\n")
        return
    if not args.compare:
        print(json.dumps(run(args.requests), indent=2))
        return
    results = run_compare(args.compare, args.requests, args.runs)
    text = compare_markdown(results)
    print(text)
    if not args.no_record:
        stamp = results["machine"]["date"].replace(":", "")
        (folder / f"brokercost-{stamp}.json").write_text(json.dumps(results, indent=2) + "\n")
        (folder / "BROKERCOST.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
