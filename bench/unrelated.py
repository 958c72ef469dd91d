"""Unrelated Secrets: the controller's memory with N Secrets in the cluster that nothing of opbroker's uses.

On its own stack (the controller with ``--metrics-port``), a few instances and bindings are settled through
OSB (so the controller holds real registries, credentials Secrets and sources), and the controller is
restarted once over them (the baseline restart). Then N Secrets of ``payload`` bytes of data each are created
straight through the API (16 keep-alive connections, no client library) in a namespace of their own, and:

* **watched**: the running controller's resident memory once it has taken them in (its CPU time standing
  still for ``quiet`` seconds after the last create), against before the first create, and the CPU seconds
  it spent from the first create until then;
* **restart**: a fresh controller started with the same flags over the cluster with the N Secrets (they now
  arrive in its first listing), idle, against the baseline restart — and the API requests it made until idle
  (gets, lists, watches: the settled objects' restart must still read no Secret);
* what the store holds of Secrets, from ``opbroker_store_objects``/``opbroker_store_body_bytes`` (absent on
  a tree without them: ``None``).

Memory is VmRSS; Python's allocator rarely returns memory, so "after" includes whatever the burst left.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from bench.bindings import bind_all
from bench.common import BENCH_AGENT, Bench, bench_stack, pid_usage
from bench.provisioning import provision_all
from bench.restart import restart, vm_rss_kib, wait_idle
from opbroker.devcluster.controlplane import free_ports

DEFAULT_SECRETS, DEFAULT_INSTANCES = 10_000, 100
#: Bytes of data per unrelated Secret: a service-account token or a TLS key pair is 1 to 5 KiB; Helm's release
#: Secrets are tens of KiB and more.
DEFAULT_PAYLOAD = 4096
QUIET_SECONDS = 5.0


def run(
    secrets: int = DEFAULT_SECRETS,
    instances: int = DEFAULT_INSTANCES,
    *,
    payload: int = DEFAULT_PAYLOAD,
    concurrency: int = 16,
    quiet: float = QUIET_SECONDS,
) -> dict[str, Any]:
    """Settle ``instances`` instances with one binding each, then add ``secrets`` unrelated Secrets."""
    (port,) = free_ports(1)
    with bench_stack(f"secrets-{secrets}-{os.getpid()}", controller_args=("--metrics-port", str(port))) as bench:
        bench.make_operator_instant()
        wait_idle(bench.process("controller"), port, expected=0, quiet=quiet, timeout=120)
        namespace = bench.namespace("bench")
        provisioned = provision_all(bench, namespace, instances, 8)
        names = provisioned.pop("names")
        bound = bind_all(bench, namespace, names, 1, 8)
        objects = len(names) + bound["bindings"]
        baseline = restart(bench, port, expected=objects, quiet=quiet)
        controller = bench.process("controller")
        assert controller.popen is not None
        pid = controller.popen.pid
        before = {"rss_kib": vm_rss_kib(pid), "store": store_secrets(port)}

        other = bench.namespace("unrelated")
        cpu_before = pid_usage(pid)["cpu_seconds"]
        created = create_secrets(bench, other, secrets, payload, concurrency)
        wait_settled(pid, quiet)
        cpu_seconds = round(pid_usage(pid)["cpu_seconds"] - cpu_before, 2)
        watched = {"rss_kib": vm_rss_kib(pid), "store": store_secrets(port), "cpu_seconds_settling": cpu_seconds}

        relisted = restart(bench, port, expected=objects, quiet=quiet)
        relisted["store"] = store_secrets(port)
    kib = 1024
    return {
        "secrets": secrets,
        "payload_bytes": payload,
        "instances": len(names),
        "bindings": bound["bindings"],
        "create_seconds": created["seconds"],
        "binding_controller_requests": bound["requests_by_verb"]["controller"],
        "watched": {
            "rss_mib_before": round(before["rss_kib"] / kib, 1),
            "rss_mib_after": round(watched["rss_kib"] / kib, 1),
            "growth_mib": round((watched["rss_kib"] - before["rss_kib"]) / kib, 1),
            "growth_bytes_per_secret": round((watched["rss_kib"] - before["rss_kib"]) * kib / secrets),
            "controller_cpu_seconds": cpu_seconds,
            "store_before": before["store"],
            "store_after": watched["store"],
        },
        "restart": {
            "rss_mib_before": baseline["rss_mib"],
            "rss_mib_after": relisted["rss_mib"],
            "growth_mib": round((relisted["rss_kib"] - baseline["rss_kib"]) / kib, 1),
            "growth_bytes_per_secret": round((relisted["rss_kib"] - baseline["rss_kib"]) * kib / secrets),
            "reads_before": baseline["reads"],
            "reads_after": relisted["reads"],
            "requests_after": relisted["requests_by_resource"],
            "cpu_seconds_to_idle_before": baseline["cpu_seconds_to_idle"],
            "cpu_seconds_to_idle_after": relisted["cpu_seconds_to_idle"],
            "writes_after": relisted["writes"],
            "store_after": relisted["store"],
        },
    }


def create_secrets(bench: Bench, namespace: str, count: int, payload: int, concurrency: int) -> dict[str, float]:
    """``count`` Opaque Secrets of ``payload`` bytes (random: incompressible) in ``namespace``, straight to the
    API over keep-alive connections (as ``bench.raw`` writes its ConfigMaps)."""
    config = yaml.safe_load(bench.endpoint.kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    token = config["users"][0]["user"]["token"]
    with tempfile.NamedTemporaryFile("wb", suffix=".crt", delete=False) as ca:
        ca.write(base64.b64decode(cluster["certificate-authority-data"]))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    headers = {"Authorization": f"Bearer {token}", "User-Agent": BENCH_AGENT}
    url = f"{cluster['server']}/api/v1/namespaces/{namespace}/secrets"
    started = time.perf_counter()
    try:
        verify = ssl.create_default_context(cafile=ca.name)
        with httpx.Client(verify=verify, headers=headers, limits=limits, timeout=60) as http:

            def create(index: int) -> int:
                data = {"blob": base64.b64encode(os.urandom(payload)).decode()}
                return http.post(url, json={"metadata": {"name": f"unrelated-{index}"}, "data": data}).status_code

            with ThreadPoolExecutor(concurrency) as pool:
                codes = list(pool.map(create, range(count)))
    finally:
        Path(ca.name).unlink()
    failures = sum(1 for code in codes if code != 201)
    if failures:
        raise RuntimeError(f"{failures} of {count} Secret creates failed")
    return {"seconds": round(time.perf_counter() - started, 1)}


def wait_settled(pid: int, quiet: float, timeout: float = 600.0) -> None:
    """Wait until the process's CPU time moves by less than 0.05 s over ``quiet`` seconds (it has taken in
    what its watches delivered)."""
    deadline = time.monotonic() + timeout
    last = pid_usage(pid)["cpu_seconds"]
    while time.monotonic() < deadline:
        time.sleep(quiet)
        now = pid_usage(pid)["cpu_seconds"]
        if now - last < 0.05:
            return
        last = now
    raise TimeoutError(f"the controller kept busy for {timeout:.0f} s")


def store_secrets(port: int) -> dict[str, float] | None:
    """What the store holds of Secrets (bodies, metadata-only objects, body bytes); None without the metrics."""
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as http:
        response = http.get("/metrics")
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            if sample.name.startswith("opbroker_store_") and sample.labels.get("kind") == "Secret":
                name = sample.name.removeprefix("opbroker_store_")
                found["_".join(filter(None, (name, sample.labels.get("held"))))] = sample.value
    return found or None
