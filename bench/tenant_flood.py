"""A tenant's flood, with and without the per-namespace budgets (issue 42): what it costs a victim namespace.

One tenant namespace receives ``--instances`` SFServiceInstances at once (8 writers), each with a ``--pad-kib``
parameter and of a plan whose operator never reports an outcome (every one stays in progress, polled), while the
platform provisions ``--victims`` instances one after the other through OSB into a victim namespace (the demo
operator, made instant). Two stacks, one after the other in the same run:

* ``unbounded``: every worker may serve the tenant, no operations budget, no cached-bytes budget
  (``bench.common.one_tenant_flags``) — what the controller did before the budgets;
* ``budgets``: the controller's defaults (2 reconciles of one namespace at once, namespaces served in turn, 64
  operations in progress, 64 MiB of objects held per namespace).

Per variant: each victim's provision latency (PUT → ``succeeded``), the controller's RSS and threads (before the
flood, their maxima sampled each second, at the end), its CPU seconds over the flood, and the tenant's instances
in progress and waiting (``NamespaceBudgetExceeded``) at the end.

Run: ``flock /tmp/bench.lock python -m bench.tenant_flood`` (``--instances 600 --pad-kib 128 --victims 10``).
Results: ``bench/results/tenant-flood-<date>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client

from bench.common import Bench, bench_stack, machine, pid_usage, summary
from bench.provisioning import StateWatch

RESULTS = Path(__file__).resolve().parent / "results"
GROUP, VERSION, PLURAL = "osb.servicefabrik.io", "v1alpha1", "sfserviceinstances"
STALLING = "flood-stalling"
#: How long one victim's provision is waited for (a slower one is counted at this bound).
VICTIM_TIMEOUT = 180.0


def stalling_plan(service_id: str) -> dict[str, Any]:
    """A plan whose operation never ends: one ConfigMap, a status template that always says in progress."""
    provision = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: '{{ instance.metadata.name }}-flood'}\n"
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SFPlan",
        "metadata": {"name": STALLING},
        "spec": {
            "name": STALLING,
            "id": STALLING,
            "serviceId": service_id,
            "description": "never reports an outcome",
            "templates": [
                {"action": "provision", "type": "jinja2", "content": provision},
                {"action": "status", "type": "jinja2", "content": "provision: {state: in progress}\n"},
            ],
        },
    }


class Sampler:
    """The controller's RSS and threads, sampled each second in a thread (maxima kept)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.rss_max = 0.0
        self.threads_max = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def now(self) -> dict[str, float]:
        threads = next(
            int(line.split()[1])
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines()
            if line.startswith("Threads:")
        )
        return {**pid_usage(self.pid), "threads": threads}

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            taken = self.now()
            self.rss_max = max(self.rss_max, taken["rss_mib"])
            self.threads_max = max(self.threads_max, int(taken["threads"]))

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def flood(bench: Bench, *, instances: int, pad_kib: int, victims: int) -> dict[str, Any]:
    service_id, plan_id = bench.plan_ids()
    custom = client.CustomObjectsApi(bench.api)
    custom.create_namespaced_custom_object(GROUP, VERSION, "opbroker", "sfplans", stalling_plan(service_id))
    tenant, victim = bench.namespace("flood"), bench.namespace("victim")
    controller = bench.process("controller")
    assert controller.popen is not None
    sampler = Sampler(controller.popen.pid)
    before = sampler.now()
    padded = {"pad": "x" * (pad_kib * 1024)}

    def create(index: int) -> None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "SFServiceInstance",
            "metadata": {"name": f"f{index}"},
            "spec": {"serviceId": service_id, "planId": STALLING, "instanceId": f"f{index}", "parameters": padded},
        }
        client.CustomObjectsApi(bench.api).create_namespaced_custom_object(GROUP, VERSION, tenant, PLURAL, body)

    states = StateWatch(bench.api, victim, PLURAL)
    states.start()
    latencies: list[float] = []
    timed_out = 0
    with sampler, bench.osb(4) as http:
        started = time.perf_counter()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(create, range(instances)))
        created = time.perf_counter()
        for _ in range(victims):
            name = f"v-{uuid.uuid4().hex[:10]}"
            asked = time.perf_counter()
            response = http.put(
                f"/v2/service_instances/{name}",
                params={"accepts_incomplete": "true"},
                json={
                    "service_id": service_id,
                    "plan_id": plan_id,
                    "organization_guid": "bench",
                    "space_guid": "bench",
                    "context": {"platform": "kubernetes", "namespace": victim},
                },
            )
            if response.status_code != 202:
                raise RuntimeError(f"victim provision: {response.status_code} {response.text[:200]}")
            try:
                states.wait([name], timeout=VICTIM_TIMEOUT)
            except TimeoutError:
                timed_out += 1  # counted at the bound: the figure is then a floor
            latencies.append(states.seen.get(name, time.perf_counter()) - asked)
        time.sleep(20)  # the flood's steady state: polls of what is in progress, waits re-checked
        finished = time.perf_counter()
        after = sampler.now()
    states.stop()
    listed = custom.list_namespaced_custom_object(GROUP, VERSION, tenant, PLURAL)["items"]
    reasons = [ready_reason(item) for item in listed]
    return {
        "instances": instances,
        "pad_kib": pad_kib,
        "create_seconds": round(created - started, 1),
        "victim_provision_latency_s": summary(latencies),
        "victim_failed": len(states.failed),
        "victim_timed_out": timed_out,
        "controller_before": before,
        "controller_after": after,
        "controller_rss_max_mib": sampler.rss_max,
        "controller_threads_max": sampler.threads_max,
        "controller_cpu_seconds": round(after["cpu_seconds"] - before["cpu_seconds"], 1),
        "wall_seconds": round(finished - started, 1),
        "tenant_in_progress": sum((i.get("status") or {}).get("state") == "in progress" for i in listed),
        "tenant_waiting_for_budget": sum(r == "NamespaceBudgetExceeded" for r in reasons),
    }


def ready_reason(obj: dict[str, Any]) -> str | None:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c.get("reason") for c in conditions if c.get("type") == "Ready"), None)


def run(*, instances: int, pad_kib: int, victims: int) -> dict[str, Any]:
    variants: dict[str, Any] = {}
    for variant, one_tenant in (("unbounded", True), ("budgets", False)):
        print(f"[flood] {variant}", flush=True)
        with bench_stack(f"flood-{variant}-{os.getpid()}", one_tenant=one_tenant) as bench:
            bench.make_operator_instant()
            variants[variant] = flood(bench, instances=instances, pad_kib=pad_kib, victims=victims)
        print(json.dumps(variants[variant], indent=1), flush=True)
    return {"suite": "tenant-flood", "machine": machine(), "variants": variants}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=600)
    parser.add_argument("--pad-kib", type=int, default=128)
    parser.add_argument("--victims", type=int, default=10)
    args = parser.parse_args()
    result = run(instances=args.instances, pad_kib=args.pad_kib, victims=args.victims)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"tenant-flood-{time.strftime('%Y-%m-%dT%H%M%SZ', time.gmtime())}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"[flood] recorded {path}")


if __name__ == "__main__":
    main()
