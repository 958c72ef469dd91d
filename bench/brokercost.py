"""The broker's own cost per OSB request: CPU and API requests per provision, last_operation, bind, GET binding.

The provisioning and bindings suites record the broker's CPU beside the controller's, but only for the PUTs and
over phases where the controller dominates the machine. Here each kind of request is a phase of its own, on
the bench stack (controller, broker, instant demo operator): N provision PUTs (then the instances settle),
N instance last_operation polls with the token of the 202, N bind PUTs (one per instance; they settle), N GET
binding and N binding last_operation polls. Per phase: the broker's CPU ms per request (its process's CPU
time over the phase — the namespace index's watch events the phase causes included), and the API requests the
broker made per OSB request, by verb (audit log).

Run it alone (``python -m bench.brokercost N``, under ``flock /tmp/bench.lock``) or as the ``broker`` suite.
"""

from __future__ import annotations

import os
import sys
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


if __name__ == "__main__":
    import json

    print(json.dumps(run(int(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_REQUESTS), indent=2))
