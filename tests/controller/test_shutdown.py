"""A controller process given SIGTERM (a pod deleted, a rollout, Ctrl-C), on a real API server: it takes no more
work, lets the reconciles running end, hands its Lease over and exits 0 — an idle one within 2 s, well inside a
pod's 30 s grace (before issue 45 kopf's teardown took about 46 s, so the pod was killed before it released the
Lease, and the standby waited the lease out)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from opbroker.controller.runtime.lifecycle import STOP_MARGIN_SECONDS
from opbroker.devcluster import ControlPlane
from opbroker.devcluster.controlplane import free_ports
from tests.controller.test_lifecycle import provision, state_of
from tests.controller.test_robustness import lease_holder
from tests.controller.test_startup import get
from tests.controller_support import Process, controller_command, wait_for

pytestmark = pytest.mark.usefixtures("demo_catalog", "demo_operator")

#: What the issue asks of an idle controller, and what a pod's default grace (30 s) leaves ample room for.
IDLE_EXIT_SECONDS = 2.0
LEASE_SECONDS = 6
#: Under election the drain is half the renew deadline (two thirds of the lease): 2 s here.
DRAIN_SECONDS = LEASE_SECONDS * 2 / 3 / 2


def terminate(process: Process) -> tuple[int, float]:
    """SIGTERM ``process`` (its own, as a pod's runtime sends it); its exit code and how long it took."""
    assert process.popen is not None
    sent = time.monotonic()
    os.kill(process.popen.pid, signal.SIGTERM)
    try:
        code = process.popen.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        raise AssertionError(f"{process.name} still ran 30 s after SIGTERM\n{process.tail(40)}") from None
    return code, time.monotonic() - sent


def gauges(port: int) -> dict[str, float]:
    """The controller's unlabelled metrics and the sum of each labelled one, by name."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return values


def reconciled(port: int) -> float:
    return gauges(port).get("opbroker_reconcile_seconds_count", 0.0)


def idle(port: int) -> bool:
    """Nothing due and nothing being reconciled (the runtime's own ``idle``)."""
    values = gauges(port)
    return values.get("opbroker_workqueue_due") == 0 and values.get("opbroker_workqueue_in_flight") == 0


def test_an_idle_controller_exits_zero_within_two_seconds_of_sigterm(
    control_plane: ControlPlane, controller: Process, tmp_path: Path
) -> None:
    controller.stop()  # the session's: its own stop is this test's subject for another process
    (port,) = free_ports(1)
    process = Process("idle", [*controller_command(control_plane), "--metrics-port", str(port)], tmp_path)
    process.start()
    try:
        wait_for(lambda: get(port, "/readyz")[0] == 200, 60, "the controller to run", interval=0.2)
        # Listed and watching (a watch blocked in a read is what held the exit for a minute once kopf was gone:
        # informers.abort), and idle: the session's cluster holds what earlier tests left, which a fresh controller
        # reconciles first (a busy one is the leader test's subject, below).
        wait_for(lambda: reconciled(port) >= 1, 120, "the controller to reconcile what it listed", interval=0.2)
        wait_for(lambda: idle(port) and idle(port), 120, "the controller to be idle", interval=0.5)
        code, seconds = terminate(process)
        log = process.log.read_text(errors="replace")
        print(f"idle controller: exit {code} {seconds:.2f} s after SIGTERM")
        assert code == 0, log[-3000:]
        assert seconds < IDLE_EXIT_SECONDS, f"{seconds:.1f} s to exit\n{log[-3000:]}"
        assert "received SIGTERM; stopping" in log and "are cut" not in log
    finally:
        process.stop()
        controller.start()


def test_a_leader_given_sigterm_mid_provisioning_ends_its_reconciles_hands_its_lease_over_and_exits_zero(
    api_client: client.ApiClient,
    namespace: str,
    catalog_namespace: str,
    control_plane: ControlPlane,
    controller: Process,
    tmp_path: Path,
) -> None:
    controller.stop()
    replicas = [
        Process(
            f"replica-{index}",
            [*controller_command(control_plane), "--leader-election", "--lease-seconds", str(LEASE_SECONDS)],
            tmp_path,
        )
        for index in range(2)
    ]
    try:
        replicas[0].start()
        holder = wait_for(lambda: lease_holder(api_client, catalog_namespace), 60, "a leader to be elected")
        leader = replicas[0]
        wait_for(lambda: "starting reconciliation" in leader.log.read_text(), 30, "the leader to start")
        replicas[1].start()
        wait_for(lambda: "campaigning" in replicas[1].log.read_text(), 60, "the standby to campaign")
        names = [f"busy-{index}" for index in range(12)]
        for name in names:
            provision(api_client, namespace, name)
        wait_for(lambda: state_of(api_client, namespace, "sfserviceinstances", names[0]), 30, "work to start")

        code, seconds = terminate(leader)
        log = leader.log.read_text(errors="replace")
        print(f"leader: exit {code} {seconds:.2f} s after SIGTERM")
        assert code == 0, log[-3000:]
        assert seconds < DRAIN_SECONDS + STOP_MARGIN_SECONDS + IDLE_EXIT_SECONDS, log[-3000:]
        assert f"{holder} released lease" in log
        assert "are cut" not in log, "a reconcile running at the signal must be let to end"
        # Released, not expired: the standby takes it at its next try (a retry period: a second here).
        taken = wait_for(
            lambda: (h := lease_holder(api_client, catalog_namespace)) not in (None, "", holder) and h,
            LEASE_SECONDS / 2,
            "the standby to take the released lease",
            interval=0.1,
        )
        assert taken and "became the leader" in replicas[1].log.read_text()
        for name in names:
            wait_for(
                lambda n=name: state_of(api_client, namespace, "sfserviceinstances", n) == "succeeded",  # type: ignore[misc]
                60,
                f"{name} to be provisioned by the new leader",
            )
        # A standby given SIGTERM while it campaigns exits 0 at once (the signal reaches the loop at every step).
        standby = Process(
            "replica-2",
            [*controller_command(control_plane), "--leader-election", "--lease-seconds", str(LEASE_SECONDS)],
            tmp_path,
        )
        replicas.append(standby)
        standby.start()
        wait_for(lambda: "the lease is held by" in standby.log.read_text(), 60, "the new standby to campaign")
        code, seconds = terminate(standby)
        log = standby.log.read_text(errors="replace")
        assert code == 0 and seconds < IDLE_EXIT_SECONDS, log[-3000:]
        assert "became the leader" not in log and lease_holder(api_client, catalog_namespace) == taken
    finally:
        for replica in replicas:
            replica.stop()
        controller.start()
