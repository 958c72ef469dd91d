"""Provisioning N instances through the OSB API, with concurrency, on the local control plane.

Measures total time, OSB latency of the provision request, reconcile latency (202 answered → the
instance's state is ``succeeded``, seen through a watch), controller CPU and memory, every API request by
component and verb, and — in the same run, on the same API server — the raw write rate. From those:

* utilisation = API writes per second achieved while provisioning ÷ the raw write rate;
* write amplification = opbroker's writes per instance ÷ the minimum the plan needs (see bench/README.md).
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client, watch

from bench.common import Bench, api_writes, by_verb, end_watch, process_usage, reviews, summary, writes_by_resource
from bench.raw import raw_write_rate

#: The demo plan renders one object; the protocol needs the instance itself, the broker's ``in_queue``,
#: the controller's ``in progress`` and the final ``succeeded``: five writes per instance at the least.
MINIMUM_WRITES_PER_INSTANCE = 1 + 4


class StateWatch:
    """Records when each instance of a namespace is first seen in a state (a watch, in a thread)."""

    def __init__(self, api: client.ApiClient, namespace: str, plural: str, state: str = "succeeded") -> None:
        self.api, self.namespace, self.plural, self.state = api, namespace, plural, state
        self.seen: dict[str, float] = {}
        self.failed: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._stream: watch.Watch | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        end_watch(self._thread, lambda: self._stream)

    def _run(self) -> None:
        custom = client.CustomObjectsApi(self.api)
        version = ""
        while not self._stop.is_set():
            stream = self._stream = watch.Watch()
            try:
                for event in stream.stream(
                    custom.list_namespaced_custom_object,
                    "osb.servicefabrik.io",
                    "v1alpha1",
                    self.namespace,
                    self.plural,
                    resource_version=version,
                    timeout_seconds=30,
                ):
                    obj = event["object"]
                    version = obj["metadata"]["resourceVersion"]
                    state = (obj.get("status") or {}).get("state")
                    name = obj["metadata"]["name"]
                    if state == self.state and name not in self.seen:
                        self.seen[name] = time.perf_counter()
                    elif state == "failed":
                        self.failed[name] = (obj.get("status") or {}).get("error", "")
                    if self._stop.is_set():
                        break
            except Exception:
                version = ""

    def wait(self, names: list[str], timeout: float) -> None:
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            if all(name in self.seen or name in self.failed for name in names):
                return
            time.sleep(0.2)
        missing = [n for n in names if n not in self.seen and n not in self.failed]
        raise TimeoutError(f"{len(missing)} of {len(names)} did not finish within {timeout:.0f}s")


def provision_all(bench: Bench, namespace: str, count: int, concurrency: int) -> dict[str, Any]:
    service_id, plan_id = bench.plan_ids()
    names = [f"p-{uuid.uuid4().hex[:12]}" for _ in range(count)]
    accepted: dict[str, float] = {}
    latencies: list[float] = []
    states = StateWatch(bench.api, namespace, "sfserviceinstances")
    states.start()
    time.sleep(0.5)
    body = {
        "service_id": service_id,
        "plan_id": plan_id,
        "organization_guid": "bench",
        "space_guid": "bench",
        "context": {"platform": "kubernetes", "namespace": namespace},
    }
    with bench.osb(concurrency) as http:

        def provision(name: str) -> None:
            started = time.perf_counter()
            response = http.put(f"/v2/service_instances/{name}", params={"accepts_incomplete": "true"}, json=body)
            done = time.perf_counter()
            if response.status_code != 202:
                raise RuntimeError(f"provision {name}: {response.status_code} {response.text[:200]}")
            latencies.append(done - started)
            accepted[name] = done

        bench.audit.mark()
        cpu_before = bench.cpu_seconds()
        started = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(provision, names))
        requests_done = time.perf_counter()
        states.wait(names, timeout=max(120.0, count * 0.5))
        finished = time.perf_counter()
    states.stop()
    cpu_after = bench.cpu_seconds()
    counts, succeeded = bench.audit.counts()
    reconcile = [states.seen[n] - accepted[n] for n in names if n in states.seen]
    elapsed = finished - started
    written = api_writes(counts, succeeded)
    opbroker_writes, all_writes = written["opbroker"], written["all_succeeded"]
    return {
        "names": [n for n in names if n in states.seen],
        "instances": count,
        "concurrency": concurrency,
        "failed": len(states.failed),
        "total_seconds": round(elapsed, 2),
        "instances_per_second": round(count / elapsed, 2),
        "osb_requests_seconds": round(requests_done - started, 2),
        "osb_provision_latency_s": summary(latencies),
        "reconcile_latency_s": summary(reconcile),
        "api_writes": written,
        "controller_access_reviews": reviews(counts, "controller"),
        "api_writes_per_second": round(all_writes / elapsed, 1),
        "opbroker_writes_per_instance": round(opbroker_writes / count, 3),
        "opbroker_writes_by_resource": writes_by_resource(counts, "controller", "broker"),
        "requests_by_verb": {who: by_verb(counts, who) for who in ("controller", "broker", "operator", "bench")},
        "cpu_seconds_by_process": {k: round(cpu_after[k] - cpu_before.get(k, 0.0), 2) for k in cpu_after},
        "controller": process_usage(bench.controllers()[0]),  # the one (sharded: shard 0's; every shard below)
        "controllers": {p.name: process_usage(p) for p in bench.controllers()},
        "broker": process_usage(bench.process("broker")),
    }


def run(count: int, concurrency: int = 32) -> dict[str, Any]:
    from bench.common import bench_stack, process_usage

    with bench_stack(f"prov-{count}-{os.getpid()}") as bench:
        bench.make_operator_instant()
        raw = raw_write_rate(bench.endpoint.kubeconfig, bench.namespace("raw"))
        rss_before = process_usage(bench.process("controller"))["rss_mib"]
        result = provision_all(bench, bench.namespace("bench"), count, concurrency)
        rss_after = process_usage(bench.process("controller"))["rss_mib"]
    result.pop("names")
    # The controller's resident memory before the first instance and once every instance is ready (not a settled
    # restart's figure: it includes what the work of provisioning left allocated; the restart suite has that one).
    result["controller_rss_mib"] = {"before": rss_before, "after": rss_after}
    result["controller_memory_kib_per_instance"] = round(1024 * (rss_after - rss_before) / count, 2)
    result["raw_write_rate"] = raw
    result["utilisation"] = round(result["api_writes_per_second"] / raw["writes_per_second"], 3)
    result["write_amplification"] = round(result["opbroker_writes_per_instance"] / MINIMUM_WRITES_PER_INSTANCE, 3)
    cpu = result["cpu_seconds_by_process"]
    result["controller_cpu_ms_per_instance"] = round(1000 * cpu["controller"] / count, 2)
    result["apiserver_cpu_ms_per_instance"] = round(1000 * cpu["kube-apiserver"] / count, 2)
    return result
