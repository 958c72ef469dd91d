"""What every benchmark shares: a fresh audited stack, an OSB client, API-call accounting, statistics.

API calls are counted from the API server's audit log (one line per request), attributed by User-Agent:
``opbroker-controller`` (the controller; ``kopf`` too, for the trees before issue 45 a compare run measures),
``opbroker-broker`` (the broker), ``demo-operator`` (the operator opbroker drives), ``opbroker-bench`` (this
harness), everything else is the control plane.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml
from kubernetes import client, config

from opbroker.devcluster.controlplane import free_ports
from opbroker.devcluster.devstack import DEMO_OPERATOR, DevStack, Endpoint
from opbroker.devcluster.grants import onboard_namespace
from opbroker.devcluster.processes import Process

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
#: Resources whose ``create`` asks a question and stores nothing (the controller's SubjectAccessReviews, issue
#: 24): counted apart, never as writes.
REVIEW_RESOURCES = frozenset({"subjectaccessreviews", "selfsubjectaccessreviews", "tokenreviews"})


def is_write(verb: str, resource: str) -> bool:
    """Whether a request changed stored state (an access review does not)."""
    return verb in WRITE_VERBS and resource not in REVIEW_RESOURCES


def reviews(counts: Counter[tuple[str, str, str]], *components: str) -> int:
    """Access reviews the components asked (what reading the watch cache for a plan's account costs)."""
    return sum(n for (who, _, resource), n in counts.items() if resource in REVIEW_RESOURCES and who in components)


#: Every client a run's requests are attributed to (see ``component_of``).
COMPONENTS = ("controller", "broker", "operator", "control-plane", "bench")
BENCH_AGENT = "opbroker-bench"
HEADERS = {"X-Broker-API-Version": "2.17"}


def component_of(user_agent: str) -> str:
    for prefix, component in (
        ("opbroker-controller", "controller"),
        ("kopf", "controller"),
        ("opbroker-broker", "broker"),
        ("demo-operator", "operator"),
        (BENCH_AGENT, "bench"),
    ):
        if user_agent.startswith(prefix):
            return component
    return "control-plane"


@dataclass
class AuditCounter:
    """Counts audit-log requests by (component, verb, resource) from a mark onwards."""

    path: Path
    offset: int = 0

    def mark(self) -> None:
        self.offset = self.path.stat().st_size if self.path.exists() else 0

    def counts(self) -> tuple[Counter[tuple[str, str, str]], Counter[tuple[str, str, str]]]:
        """Requests since the mark, in one read of the log: all of them, and those the API server answered
        with a 2xx (what was achieved — a create refused with AlreadyExists or a write refused with Conflict
        cost, but did not write)."""
        found: Counter[tuple[str, str, str]] = Counter()
        succeeded: Counter[tuple[str, str, str]] = Counter()
        with self.path.open("rb") as handle:
            handle.seek(self.offset)
            for line in handle:
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line still being written
                if event.get("stage") != "ResponseComplete":
                    continue
                resource = (event.get("objectRef") or {}).get("resource", "-")
                subresource = (event.get("objectRef") or {}).get("subresource")
                if subresource:
                    resource = f"{resource}/{subresource}"
                key = (component_of(event.get("userAgent", "")), event.get("verb", "?"), resource)
                found[key] += 1
                if 200 <= (event.get("responseStatus") or {}).get("code", 0) < 300:
                    succeeded[key] += 1
        return found, succeeded


def writes(counts: Counter[tuple[str, str, str]], *components: str) -> int:
    return sum(
        n for (component, verb, resource), n in counts.items() if is_write(verb, resource) and component in components
    )


def api_writes(counts: Counter[tuple[str, str, str]], succeeded: Counter[tuple[str, str, str]]) -> dict[str, int]:
    """The writes of a run. Utilisation uses ``all_succeeded`` (refused writes cost, but wrote nothing);
    amplification uses ``opbroker``, every attempt of the controller and the broker (refused ones cost too)."""
    return {
        "all_succeeded": writes(succeeded, *COMPONENTS),
        "all_attempted": writes(counts, *COMPONENTS),
        "opbroker": writes(counts, "controller", "broker"),
        "operator": writes(counts, "operator"),
    }


def by_verb(counts: Counter[tuple[str, str, str]], component: str) -> dict[str, int]:
    verbs: Counter[str] = Counter()
    for (who, verb, _), n in counts.items():
        if who == component:
            verbs[verb] += n
    return dict(sorted(verbs.items()))


def writes_by_resource(counts: Counter[tuple[str, str, str]], *components: str) -> dict[str, int]:
    found: Counter[str] = Counter()
    for (who, verb, resource), n in counts.items():
        if who in components and is_write(verb, resource):
            found[f"{verb} {resource}"] += n
    return dict(found.most_common())


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def summary(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(percentile(values, 0.50), 4),
        "p99": round(percentile(values, 0.99), 4),
        "mean": round(statistics.fmean(values), 4) if values else float("nan"),
        "max": round(max(values), 4) if values else float("nan"),
    }


def process_usage(process: Process) -> dict[str, float]:
    """CPU seconds and resident memory of a child process (from /proc)."""
    assert process.popen is not None
    return pid_usage(process.popen.pid)


def pid_usage(pid: int) -> dict[str, float]:
    """The process's CPU seconds (user + system, and each: the restart's extra CPU after issue 45 was found outside
    the GIL, so whether it is the kernel's tells where to look) and resident memory."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    user, system = int(fields[11]) / ticks, int(fields[12]) / ticks
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {
        "cpu_seconds": round(user + system, 2),
        "user_seconds": round(user, 2),
        "system_seconds": round(system, 2),
        "rss_mib": round(int(status["VmRSS"].split()[0]) / 1024, 1),
        "threads": int(status["Threads"]),
    }


def threads_of(pid: int) -> int:
    """The process's threads now (issue 45: the runtime's one pool and the loop, against kopf's and the
    informers' threads before)."""
    return int(pid_usage(pid)["threads"])


def context_switches(pid: int) -> int:
    """Context switches of every thread of the process so far (voluntary and not): threads handing the GIL and
    the CPU to each other cost system time the GIL-sampling profiler does not see."""
    switches = 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        try:
            lines = status.read_text().splitlines()
        except OSError:  # the thread ended meanwhile
            continue
        switches += sum(int(line.split()[1]) for line in lines if "ctxt_switches:" in line)
    return switches


def machine() -> dict[str, Any]:
    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
    }


def end_watch(thread: threading.Thread, current: Callable[[], Any], timeout: float = 10.0) -> None:
    """End a watching thread whose stop flag is set, closing its open watch (``current()``: the thread's
    ``kubernetes.watch.Watch``, or None) rather than waiting for the watch's ``timeout_seconds``: an API server
    asked to stop while a client still reads a watch waits for it (the stack's ``down`` took 10 s more, until
    the server was killed). Repeated until the thread ends: a stop that came before the watch's request
    opened finds nothing to close the first time."""
    deadline = time.monotonic() + timeout
    while thread.is_alive() and time.monotonic() < deadline:
        stream = current()
        if stream is not None:
            stream.stop()  # shuts the watch's socket down: its blocked read returns at once
        thread.join(0.2)


@dataclass
class Bench:
    stack: DevStack
    endpoint: Endpoint
    api: client.ApiClient
    audit: AuditCounter

    def osb(self, connections: int = 64) -> httpx.Client:
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        return httpx.Client(
            base_url=self.endpoint.url,
            auth=(self.endpoint.username, self.endpoint.password),
            headers=HEADERS,
            timeout=120,
            limits=limits,
        )

    def process(self, name: str) -> Process:
        return next(p for p in self.stack.processes if p.name == name)

    def controllers(self) -> list[Process]:
        """The controller's processes: one (``controller``), or one per shard (``controller-shard-<i>``)."""
        return [p for p in self.stack.processes if p.name == "controller" or p.name.startswith("controller-shard-")]

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds used so far by every process of the stack (control plane included)."""
        usage = {p.name: process_usage(p)["cpu_seconds"] for p in self.stack.processes}
        for component in self.stack.plane.status().components:
            if component.pid:
                usage[component.name] = pid_usage(component.pid)["cpu_seconds"]
        return usage

    def namespace(self, name: str) -> str:
        """A consumer namespace the bench's broker allows (:data:`BENCH_NAMESPACE_LABEL`)."""
        key, _, value = BENCH_NAMESPACE_LABEL.partition("=")
        client.CoreV1Api(self.api).create_namespace({"metadata": {"name": name, "labels": {key: value}}})
        onboard_namespace(self.api, name)  # its opbroker account, for what opbroker writes there for no plan
        return name

    def plan_ids(self) -> tuple[str, str]:
        catalog = yaml.safe_load_all((DEMO_OPERATOR / "catalog.yaml").read_text())
        plan = next(doc for doc in catalog if doc["kind"] == "SFPlan")
        return plan["spec"]["serviceId"], plan["spec"]["id"]

    def make_operator_instant(self) -> None:
        """The demo operator's 1 s delay would dominate every latency: make it ready at once."""
        custom = client.CustomObjectsApi(self.api)
        plan = next(
            doc for doc in yaml.safe_load_all((DEMO_OPERATOR / "catalog.yaml").read_text()) if doc["kind"] == "SFPlan"
        )
        custom.patch_namespaced_custom_object(
            "osb.servicefabrik.io",
            "v1alpha1",
            "opbroker",
            "sfplans",
            plan["metadata"]["name"],
            {"spec": {"context": {"readyAfterSeconds": 0}}},
        )


#: The label of the bench's consumer namespaces, which its broker allows in a request's context.
BENCH_NAMESPACE_LABEL = "opbroker.io/bench=true"


def one_tenant_flags(workers: int) -> tuple[str, ...]:
    """The controller's flags for a bench whose whole load is one namespace's: every worker may serve it and no
    per-namespace budget holds it back (issue 42's budgets bound a tenant among others; a bench measures the
    controller's own cost, as every result before them did)."""
    return (
        "--workers", str(workers), "--namespace-workers", str(workers),
        "--namespace-operations", "0", "--namespace-cache-mib", "0",
    )  # fmt: skip


@contextmanager
def bench_stack(
    name: str, *, workers: int = 8, controller_args: tuple[str, ...] = (), one_tenant: bool = True, shards: int = 1
) -> Iterator[Bench]:
    """A fresh control plane with audit logging, the controller, the broker and the demo operator.
    ``controller_args`` are added to the controller's flags (e.g. ``--metrics-port``); ``one_tenant`` False keeps
    the controller's per-namespace budgets (:func:`one_tenant_flags` lifts them)."""
    (port,) = free_ports(1)
    stack = DevStack(
        f"bench-{name}",
        broker_port=port,
        audit=True,
        controller_args=(
            *(one_tenant_flags(workers) if one_tenant else ("--workers", str(workers))),
            *controller_args,
        ),
        allowed_namespace_selector=BENCH_NAMESPACE_LABEL,
        shards=shards,
    )
    stack.plane.down(progress=lambda _message: None)  # a fresh control plane, even after an interrupted run
    endpoint = stack.up(progress=lambda message: print(f"  [stack] {message}", flush=True))
    api = config.new_client_from_config(config_file=str(endpoint.kubeconfig))
    api.user_agent = BENCH_AGENT
    try:
        yield Bench(stack, endpoint, api, AuditCounter(stack.plane.audit_log))
    finally:
        stack.down(progress=lambda message: None)
        # Runs are named per process: their audit logs (hundreds of MB at full size) must not pile up.
        stack.plane.audit_log.unlink(missing_ok=True)
