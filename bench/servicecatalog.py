"""The Service Catalog path: N Instances, then one Binding each, created as kubectl would, through a Broker that
points at opbroker's own broker.

On a fresh stack (the controller, the broker and the demo operator answering at once), a Secret with the
broker's credentials and a ``Broker`` (servicecatalog.k8s.io) naming the broker's URL are created; once the
``demo-db`` ServiceClass is listed, N ``Instance`` objects of its ``small`` plan are created by 32 concurrent
clients (one POST each, what ``kubectl create`` sends), then one ``Binding`` per instance. A watch records
when each reaches ``Ready=True`` (Provisioned, InjectedBindResult). Each Instance makes the controller
provision through OSB (opbroker's broker answers 202), which records an SFServiceInstance that the same
controller reconciles through the demo plan, while the Service Catalog side polls ``last_operation``
(honouring the broker's ``Retry-After``); a Binding does the same with an asynchronous bind, then fetches
the credentials into a Secret.

Measured per phase: objects per second (first create → last Ready), create → Ready latency, controller CPU
per object (both halves of the controller's work: the Service Catalog client side and the broker-side
reconcile), the controller's resident memory growth per object, every process's CPU, and the API requests
by component (audit log).
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client, config, watch

from bench.common import BENCH_AGENT, Bench, api_writes, bench_stack, by_verb, end_watch, process_usage, summary
from opbroker.api.conventions import DEFAULT_NAMESPACE

GROUP, VERSION = "servicecatalog.k8s.io", "v1alpha1"
#: What a settled object's Ready condition says.
DONE_REASON = {"instances": "Provisioned", "bindings": "InjectedBindResult"}


class ReadyWatch:
    """Records when each object of a namespace is first seen Ready=True (or Failed=True), from a watch."""

    def __init__(self, api: client.ApiClient, namespace: str, plural: str) -> None:
        self.api, self.namespace, self.plural = api, namespace, plural
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
            self._stream = watch.Watch()
            try:
                for event in self._stream.stream(
                    custom.list_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    self.namespace,
                    self.plural,
                    resource_version=version,
                    timeout_seconds=30,
                ):
                    obj = event["object"]
                    version = obj["metadata"]["resourceVersion"]
                    self._note(obj)
                    if self._stop.is_set():
                        break
            except Exception:
                version = ""

    def _note(self, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        for condition in (obj.get("status") or {}).get("conditions") or []:
            settled = condition.get("reason") == DONE_REASON[self.plural] and name not in self.seen
            if condition.get("type") == "Ready" and condition.get("status") == "True" and settled:
                self.seen[name] = time.perf_counter()
            if condition.get("type") == "Failed" and condition.get("status") == "True":
                self.failed[name] = str(condition.get("message", ""))[:200]

    def wait(self, names: list[str], timeout: float) -> None:
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            if all(name in self.seen or name in self.failed for name in names):
                return
            time.sleep(0.2)
        missing = [n for n in names if n not in self.seen and n not in self.failed]
        raise TimeoutError(f"{len(missing)} of {len(names)} {self.plural} not Ready within {timeout:.0f}s")


def register_broker(bench: Bench) -> str:
    """The Secret with opbroker's broker credentials and a Broker pointing at it; returns the Broker's name
    once its catalog is listed."""
    core = client.CoreV1Api(bench.api)
    core.create_namespaced_secret(
        DEFAULT_NAMESPACE,  # the controller reads a Broker's credentials only from the control plane's namespace
        {
            "metadata": {"name": "opbroker-auth"},
            "stringData": {"username": bench.endpoint.username, "password": bench.endpoint.password},
        },
    )
    name = "opbroker"
    custom = client.CustomObjectsApi(bench.api)
    custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        "brokers",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Broker",
            "metadata": {"name": name},
            "spec": {
                "url": bench.endpoint.url,
                "authInfo": {"basic": {"secretRef": {"namespace": DEFAULT_NAMESPACE, "name": "opbroker-auth"}}},
            },
        },
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            custom.get_cluster_custom_object(GROUP, VERSION, "serviceclasses", "demo-db")
            return name
        except client.ApiException as exc:
            if exc.status != 404:
                raise
        time.sleep(0.5)
    raise TimeoutError("the Broker's catalog was not listed (no ServiceClass demo-db) within 120 s")


def create_all(
    bench: Bench,
    namespace: str,
    plural: str,
    names: list[str],
    spec_of: Callable[[str], dict[str, Any]],
    concurrency: int,
) -> dict[str, Any]:
    """Create one object per name (``concurrency`` clients, each with its own connection pool, as separate
    kubectl invocations would) and wait until every one is Ready; the phase's figures."""
    kind = {"instances": "Instance", "bindings": "Binding"}[plural]
    created: dict[str, float] = {}
    latencies: list[float] = []
    local = threading.local()
    clients: list[client.ApiClient] = []

    def custom() -> client.CustomObjectsApi:
        if not hasattr(local, "api"):
            local.api = config.new_client_from_config(config_file=str(bench.endpoint.kubeconfig))
            local.api.user_agent = BENCH_AGENT
            clients.append(local.api)
        return client.CustomObjectsApi(local.api)

    def create(name: str) -> None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": kind,
            "metadata": {"name": name},
            "spec": spec_of(name),
        }
        started = time.perf_counter()
        custom().create_namespaced_custom_object(GROUP, VERSION, namespace, plural, body)
        done = time.perf_counter()
        latencies.append(done - started)
        created[name] = done

    ready = ReadyWatch(bench.api, namespace, plural)
    ready.start()
    time.sleep(0.5)
    controller = bench.process("controller")
    rss_before = process_usage(controller)["rss_mib"]
    bench.audit.mark()
    cpu_before = bench.cpu_seconds()
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(create, names))
    creates_done = time.perf_counter()
    ready.wait(names, timeout=max(300.0, len(names) * 1.0))
    finished = time.perf_counter()
    ready.stop()
    cpu_after = bench.cpu_seconds()
    usage = process_usage(controller)
    counts, succeeded = bench.audit.counts()
    for api in clients:
        api.close()
    count = len(names)
    elapsed = finished - started
    cpu = {k: round(cpu_after[k] - cpu_before.get(k, 0.0), 2) for k in cpu_after}
    return {
        "objects": count,
        "concurrency": concurrency,
        "failed": len(ready.failed),
        "failures": dict(list(ready.failed.items())[:5]),
        "total_seconds": round(elapsed, 2),
        "per_second": round(count / elapsed, 2),
        "create_requests_seconds": round(creates_done - started, 2),
        "create_latency_s": summary(latencies),
        "ready_latency_s": summary([ready.seen[n] - created[n] for n in names if n in ready.seen]),
        "api_writes": api_writes(counts, succeeded),
        "requests_by_verb": {who: by_verb(counts, who) for who in ("controller", "broker", "operator", "bench")},
        "cpu_seconds_by_process": cpu,
        "controller_cpu_ms_per_object": round(1000 * cpu["controller"] / count, 2),
        "controller_rss_mib": {"before": rss_before, "after": usage["rss_mib"]},
        "controller_memory_kib_per_object": round(1024 * (usage["rss_mib"] - rss_before) / count, 2),
    }


def run(count: int, concurrency: int = 32) -> dict[str, Any]:
    with bench_stack(f"sc-{count}-{os.getpid()}") as bench:
        bench.make_operator_instant()
        namespace = bench.namespace("sc")
        broker = register_broker(bench)
        instances = [f"i-{uuid.uuid4().hex[:12]}" for _ in range(count)]
        provisioned = create_all(
            bench,
            namespace,
            "instances",
            instances,
            lambda _name: {"serviceClassName": "demo-db", "planName": "small"},
            concurrency,
        )
        bindings = [f"b-{name[2:]}" for name in instances]
        bound = create_all(
            bench,
            namespace,
            "bindings",
            bindings,
            lambda name: {"instanceRef": {"name": f"i-{name[2:]}"}},
            concurrency,
        )
        controller = process_usage(bench.process("controller"))
    return {
        "instances": count,
        "bindings": count,
        "broker": broker,
        "instances_phase": provisioned,
        "bindings_phase": bound,
        "instances_per_second": provisioned["per_second"],
        "bindings_per_second": bound["per_second"],
        "controller_cpu_ms_per_instance": provisioned["controller_cpu_ms_per_object"],
        "controller_cpu_ms_per_binding": bound["controller_cpu_ms_per_object"],
        "controller_memory_kib_per_instance": provisioned["controller_memory_kib_per_object"],
        "controller_memory_kib_per_binding": bound["controller_memory_kib_per_object"],
        "controller_at_end": controller,
    }
