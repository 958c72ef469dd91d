"""Bindings: M bindings over K instances through the OSB API (the demo plan binds asynchronously).

Same measures as provisioning, per binding: OSB bind latency, bind latency (202 answered → the binding
``succeeded`` with its credentials Secret), writes per binding, controller CPU, raw write rate, utilisation.
"""

from __future__ import annotations

import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.common import Bench, api_writes, bench_stack, by_verb, process_usage, reviews, summary, writes_by_resource
from bench.provisioning import StateWatch, provision_all
from bench.raw import raw_write_rate

#: Per binding: the binding itself, the broker's ``in_queue``, ``in progress``, ``succeeded``, the object the
#: bind template changes (the instance's Database gains a user) and the credentials Secret.
MINIMUM_WRITES_PER_BINDING = 6


def bind_all(bench: Bench, namespace: str, instances: list[str], per_instance: int, concurrency: int) -> dict[str, Any]:
    service_id, plan_id = bench.plan_ids()
    pairs = [(instance, f"b-{uuid.uuid4().hex[:12]}") for instance in instances for _ in range(per_instance)]
    accepted: dict[str, float] = {}
    latencies: list[float] = []
    states = StateWatch(bench.api, namespace, "sfservicebindings")
    states.start()
    time.sleep(0.5)
    body = {"service_id": service_id, "plan_id": plan_id}
    with bench.osb(concurrency) as http:

        def bind(pair: tuple[str, str]) -> None:
            instance, binding = pair
            started = time.perf_counter()
            response = http.put(
                f"/v2/service_instances/{instance}/service_bindings/{binding}",
                params={"accepts_incomplete": "true"},
                json=body,
            )
            done = time.perf_counter()
            if response.status_code != 202:
                raise RuntimeError(f"bind {binding}: {response.status_code} {response.text[:200]}")
            latencies.append(done - started)
            accepted[binding] = done

        bench.audit.mark()
        cpu_before = bench.cpu_seconds()
        started = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(bind, pairs))
        requests_done = time.perf_counter()
        names = [binding for _, binding in pairs]
        states.wait(names, timeout=max(180.0, len(pairs) * 0.5))
        finished = time.perf_counter()
    states.stop()
    cpu_after = bench.cpu_seconds()
    counts, succeeded = bench.audit.counts()
    count = len(pairs)
    elapsed = finished - started
    written = api_writes(counts, succeeded)
    opbroker_writes, all_writes = written["opbroker"], written["all_succeeded"]
    return {
        "bindings": count,
        "instances": len(instances),
        "concurrency": concurrency,
        "failed": len(states.failed),
        "total_seconds": round(elapsed, 2),
        "bindings_per_second": round(count / elapsed, 2),
        "osb_requests_seconds": round(requests_done - started, 2),
        "osb_bind_latency_s": summary(latencies),
        "bind_latency_s": summary([states.seen[n] - accepted[n] for n in names if n in states.seen]),
        "api_writes": written,
        "controller_access_reviews": reviews(counts, "controller"),
        "api_writes_per_second": round(all_writes / elapsed, 1),
        "opbroker_writes_per_binding": round(opbroker_writes / count, 3),
        "opbroker_writes_by_resource": writes_by_resource(counts, "controller", "broker"),
        "requests_by_verb": {who: by_verb(counts, who) for who in ("controller", "broker", "operator")},
        "cpu_seconds_by_process": {k: round(cpu_after[k] - cpu_before.get(k, 0.0), 2) for k in cpu_after},
        "controller": process_usage(bench.controllers()[0]),  # the one (sharded: shard 0's)
    }


def run(bindings: int, instances: int, concurrency: int = 32) -> dict[str, Any]:
    with bench_stack(f"bind-{bindings}-{os.getpid()}") as bench:
        bench.make_operator_instant()
        raw = raw_write_rate(bench.endpoint.kubeconfig, bench.namespace("raw"))
        namespace = bench.namespace("bench")
        provisioned = provision_all(bench, namespace, instances, concurrency)
        names = provisioned.pop("names")
        result = bind_all(bench, namespace, names, bindings // instances, concurrency)
    result["provisioning_first"] = {k: provisioned[k] for k in ("instances", "total_seconds", "instances_per_second")}
    result["raw_write_rate"] = raw
    result["utilisation"] = round(result["api_writes_per_second"] / raw["writes_per_second"], 3)
    result["write_amplification"] = round(result["opbroker_writes_per_binding"] / MINIMUM_WRITES_PER_BINDING, 3)
    result["controller_cpu_ms_per_binding"] = round(
        1000 * result["cpu_seconds_by_process"]["controller"] / result["bindings"], 2
    )
    return result
