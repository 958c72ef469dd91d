"""The fault scenarios: the provisioning workload (bench/workload.py) under one kind of fault each.

Each scenario starts a fresh stack, starts its injector and the workload together, waits for both (both
are bounded), and then polls the invariants (bench/invariants.py) until they hold or ``converge_timeout``
passes. Reported: the faults as they happened, what the platform saw (answers, retries, refused or failed
operations), and how long after the last fault the namespace was converged — or what still differed.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kubernetes import config

from bench import faults, invariants, workload
from bench.common import BENCH_AGENT, BENCH_NAMESPACE_LABEL, AuditCounter, Bench, bench_stack, one_tenant_flags
from opbroker.devcluster.controlplane import free_ports
from opbroker.devcluster.devstack import DevStack


@contextmanager
def proxied_stack(name: str, *, workers: int = 8) -> Iterator[tuple[Bench, faults.TcpProxy]]:
    """``bench_stack`` with the controller talking to the API server through a :class:`faults.TcpProxy`."""
    broker_port, proxy_port = free_ports(2)
    stack: DevStack | None = None
    upstream: list[tuple[str, int]] = []

    def target() -> tuple[str, int]:
        if not upstream:
            assert stack is not None
            state = stack.plane.state()
            assert state is not None
            upstream.append(("127.0.0.1", state.ports.apiserver))
        return upstream[0]

    proxy = faults.TcpProxy(proxy_port, target)
    proxy.start()
    stack = DevStack(
        f"bench-{name}",
        broker_port=broker_port,
        audit=True,
        controller_args=one_tenant_flags(workers),
        controller_server=proxy.url,
        allowed_namespace_selector=BENCH_NAMESPACE_LABEL,
    )
    stack.plane.down(progress=lambda _message: None)  # a fresh control plane, even after an interrupted run
    try:
        endpoint = stack.up(progress=lambda message: print(f"  [stack] {message}", flush=True))
        api = config.new_client_from_config(config_file=str(endpoint.kubeconfig))
        api.user_agent = BENCH_AGENT
        yield Bench(stack, endpoint, api, AuditCounter(stack.plane.audit_log)), proxy
    finally:
        stack.down(progress=lambda message: None)
        proxy.close()


def _log_findings(bench: Bench, name: str) -> dict[str, int]:
    """Error lines and tracebacks in a component's log (what the operators of the service would see)."""
    text = bench.process(name).log.read_text(errors="replace")
    unresolved = [line for line in text.splitlines() if "Unresolved resources cannot be served" in line]
    return {
        "error_lines": text.count(" ERROR "),
        "warning_lines": text.count(" WARNING "),
        "tracebacks": text.count("Traceback"),
        # started without our resources: a controller that watches nothing of opbroker's
        "started_without_our_resources": sum(1 for line in unresolved if "sfserviceinstances" in line),
    }


def _disturbed(
    bench: Bench,
    namespace: str,
    injector: faults.Injector,
    *,
    supervisor: faults.Supervisor,
    count: int,
    release_seconds: float,
    seed: int,
    deadline_seconds: float,
    converge_timeout: float,
) -> dict[str, Any]:
    plan = workload.scripts(count, release_seconds, seed)
    nurse = faults.OperatorNurse(bench.api, namespace)
    nurse.start()
    if not supervisor.started:
        supervisor.start()
    injector.start()
    result = workload.run(bench, namespace, plan, deadline_seconds=deadline_seconds)
    injector.join(timeout=max(0.0, deadline_seconds - result.seconds) + 60)
    injector.stop()
    last_fault = max([injector.started, *(injector.started + e["t"] for e in injector.events)])
    convergence = workload.converge(bench, namespace, result.expected, timeout=converge_timeout)
    convergence["seconds_after_last_fault"] = round(time.monotonic() - last_fault, 2)
    recovery = None
    if not convergence["converged"]:
        convergence.pop("seconds_after_last_fault")
        # What an operator on call would do: restart the controller. Does everything converge then?
        with supervisor.lock:
            bench.process("controller").kill()
            bench.process("controller").start()
        recovery = workload.converge(bench, namespace, result.expected, timeout=converge_timeout)
    nurse.stop()
    expected = result.expected
    return {
        "instances": count,
        "release_seconds": release_seconds,
        "seed": seed,
        "workload": {
            "seconds": result.seconds,
            "steps": result.steps,
            "answers": result.answers,
            "retries": result.retries,
            "problems": result.problems[:50],
            "problem_count": len(result.problems),
        },
        "expected_final": {
            "live_instances": len(expected.live_instances),
            "deprovisioned_instances": len(expected.gone_instances),
            "live_bindings": len(expected.live_bindings),
            "unbound_bindings": len(expected.gone_bindings),
            "unknown": sorted(expected.unknown),
        },
        "faults": injector.events,
        "injector_errors": injector.errors,
        "demo_operator_repairs": nurse.events,
        "process_exits": list(supervisor.events),
        "convergence": convergence,
        "after_a_manual_controller_restart": recovery,
        "violations": (0 if convergence["converged"] else convergence["violation_count"])
        + len(result.problems)
        + len(supervisor.events),
    }


def controller_kills(
    *,
    count: int = 100,
    kills: int = 20,
    delay: tuple[float, float] = (1.5, 5.0),
    seed: int = 1,
    deadline_seconds: float = 180.0,
    converge_timeout: float = 90.0,
) -> dict[str, Any]:
    """Scenario 1 on a fresh stack: SIGKILL the controller ``kills`` times (restarted at once) mid-run."""
    with bench_stack(f"rel-kill-{os.getpid()}") as bench:
        return kills_on(
            bench,
            bench.namespace("kills"),
            count=count,
            kills=kills,
            delay=delay,
            seed=seed,
            deadline_seconds=deadline_seconds,
            converge_timeout=converge_timeout,
        )


def kills_on(
    bench: Bench,
    namespace: str,
    *,
    count: int,
    kills: int,
    delay: tuple[float, float],
    seed: int,
    deadline_seconds: float,
    converge_timeout: float,
) -> dict[str, Any]:
    """Scenario 1 on a given stack and namespace (the smoke test shares one stack between scenarios)."""
    supervisor = faults.Supervisor(bench.stack.processes, lock=threading.Lock())
    killer = faults.ControllerKiller(
        bench.process("controller"), kills=kills, delay=delay, seed=seed, lock=supervisor.lock
    )
    killer.probe = lambda: invariants.pending_work(bench.api, namespace)
    result = _disturbed(
        bench,
        namespace,
        killer,
        supervisor=supervisor,
        count=count,
        release_seconds=max(10.0, kills * sum(delay) / 2 * 0.9),  # provisions arrive while kills go on
        seed=seed,
        deadline_seconds=deadline_seconds,
        converge_timeout=converge_timeout,
    )
    supervisor.stop()
    result["kills"] = killer.done_kills
    result["kill_delay_s"] = list(delay)
    pending = [sum(e["pending"].values()) for e in killer.events if e.get("pending") is not None]
    result["kills_with_work_pending"] = sum(1 for n in pending if n)
    result["work_pending_at_kill"] = {
        "max": max(pending, default=0),
        "mean": round(sum(pending) / max(1, len(pending)), 1),
    }
    result["controller_log"] = _log_findings(bench, "controller")
    return result


def apiserver_restarts(
    *,
    count: int = 60,
    windows: list[tuple[float, float]] | None = None,
    seed: int = 2,
    deadline_seconds: float = 180.0,
    converge_timeout: float = 90.0,
) -> dict[str, Any]:
    """Scenario 2: restart kube-apiserver in place (2 to 3 times) during the workload.

    A restart takes 5 to 15 s on a loaded 2-core machine, so the windows are spaced for the API to serve a
    while between outages.
    """
    windows = windows or [(4.0, 8.0), (28.0, 34.0), (52.0, 58.0)]
    with bench_stack(f"rel-api-{os.getpid()}") as bench:
        namespace = bench.namespace("restarts")
        restarter = faults.ApiserverRestarter(bench.stack.plane, windows=windows, seed=seed)
        supervisor = faults.Supervisor(bench.stack.processes, lock=threading.Lock())
        result = _disturbed(
            bench,
            namespace,
            restarter,
            supervisor=supervisor,
            count=count,
            release_seconds=windows[-1][1],
            seed=seed,
            deadline_seconds=deadline_seconds,
            converge_timeout=converge_timeout,
        )
        supervisor.stop()
        result["restarts"] = len(restarter.restarts)
        result["restart_seconds_until_ready"] = restarter.restarts
        result["restart_windows_s"] = [list(w) for w in windows]
        result["controller_log"] = _log_findings(bench, "controller")
        result["processes_alive_after"] = {p.name: p.running for p in bench.stack.processes}
        result["control_plane_running_after"] = bench.stack.plane.status().running
    return result


def connection_cuts(
    *,
    count: int = 60,
    cuts: int = 20,
    interval: tuple[float, float] = (2.0, 4.0),
    seed: int = 3,
    deadline_seconds: float = 180.0,
    converge_timeout: float = 90.0,
) -> dict[str, Any]:
    """Scenario 3: cut every controller ↔ API server connection every few seconds during the workload."""
    with proxied_stack(f"rel-cut-{os.getpid()}") as (bench, proxy):
        namespace = bench.namespace("cuts")
        cutter = faults.ConnectionCutter(proxy, cuts=cuts, interval=interval, seed=seed)
        supervisor = faults.Supervisor(bench.stack.processes, lock=threading.Lock())
        result = _disturbed(
            bench,
            namespace,
            cutter,
            supervisor=supervisor,
            count=count,
            release_seconds=cuts * sum(interval) / 2 * 0.9,
            seed=seed,
            deadline_seconds=deadline_seconds,
            converge_timeout=converge_timeout,
        )
        result["not_ready_probe"] = not_ready_probe(bench, proxy, supervisor, seed=seed)
        supervisor.stop()
        result["violations"] += result["not_ready_probe"]["violations"]
        result["cuts"] = cutter.done_cuts
        result["connections_cut"] = cutter.connections_cut
        result["cut_interval_s"] = list(interval)
        result["proxy_connections_accepted"] = proxy.accepted
        result["controller_log"] = _log_findings(bench, "controller")
    return result


def not_ready_probe(
    bench: Bench, proxy: faults.TcpProxy, supervisor: faults.Supervisor, *, seed: int, seconds: float = 3.0
) -> dict[str, Any]:
    """Point the controller, for ``seconds``, at a server answering ``404 page not found`` to everything — a
    kube-apiserver in its first moments after a start, before its CRD handlers are installed — then back at
    the real one, and check that the controller lived through it and still converges a small run."""
    pki = bench.stack.plane.dir / "pki"
    (port,) = free_ports(1)
    fake = faults.NotReadyApiserver(pki / "apiserver.crt", pki / "apiserver.key", port)
    fake.start()
    exits_before = len(supervisor.events)
    real = proxy.upstream
    proxy.upstream = lambda: ("127.0.0.1", port)
    proxy.cut()
    time.sleep(seconds)
    proxy.upstream = real
    proxy.cut()
    fake.close()
    time.sleep(2 * supervisor.every + 1.0)
    exits = supervisor.events[exits_before:]
    alive_after_window = bench.process("controller").running
    namespace = bench.namespace("after-not-ready")
    after = workload.run(bench, namespace, workload.scripts(10, 3.0, seed + 1), deadline_seconds=120.0)
    convergence = workload.converge(bench, namespace, after.expected, timeout=60.0)
    return {
        "seconds": seconds,
        "requests_answered_404": fake.answered,
        "controller_exits": len(exits),
        "exits": exits,
        "controller_process_alive_after_window": alive_after_window,
        "after": {"instances": 10, "problems": after.problems[:10], "convergence": convergence},
        # An exit is the designed answer (non-zero, the supervisor — Kubernetes, here the harness — restarts
        # it); staying up without reconciling is not, and the run afterwards would show it.
        "violations": len(after.problems) + (0 if convergence["converged"] else 1),
    }
