"""Starting the controller against an API server that is not ready, and its health probes.

A kube-apiserver that has just started answers ``404 page not found`` for custom resources until its CRD
handlers are installed. The controller must neither stay up idle (kopf resolving no resources) nor stop
for good: it waits, bounded, for the API to serve what it watches, says what is missing, and exits non-zero
when the wait or kopf's loop ends — so that its supervisor restarts it. The fault is the reliability suite's
own (``bench.faults``): a TLS server with the API server's certificate answering 404 to everything, behind a
TCP relay whose upstream the test switches.

Deadlines are generous and polled; no test asserts how long anything took.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from bench.faults import NotReadyApiserver, TcpProxy
from opbroker.controller.app import Controller
from opbroker.controller.runtime import apiready, health
from opbroker.controller.settings import ControllerSettings
from opbroker.devcluster import ControlPlane
from opbroker.devcluster.controlplane import free_ports
from tests.controller.test_lifecycle import provision, state_of
from tests.controller_support import Process, controller_command, wait_for

CRDS = [
    apiready.Wanted("osb.servicefabrik.io", "v1alpha1", plural)
    for plural in ("sfservices", "sfplans", "sfserviceinstances", "sfservicebindings")
] + [apiready.Wanted("primaza.io", "v1alpha1", plural) for plural in ("registeredservices", "serviceclaims")]


# -- the health state and its HTTP server (no cluster) ---------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_health_follows_the_process_through_its_phases() -> None:
    clock = Clock()
    state = health.Health(stale_after=60, clock=clock)
    assert state.liveness()[0] and not state.readiness()[0]  # waiting for the API: alive, not ready
    state.waiting("waiting for the API server to serve: sfplans")
    assert state.readiness() == (False, "waiting: waiting for the API server to serve: sfplans")
    state.standby()
    assert state.liveness()[0] and state.readiness()[0]  # a healthy standby counts as available
    state.running()
    clock.now += 59
    assert state.liveness()[0] and state.readiness()[0]
    state.beat()
    clock.now += 61
    alive, why = state.liveness()
    assert not alive and "has not beaten for 61 s" in why
    assert not state.readiness()[0]
    state.beat()
    assert state.liveness()[0]
    state.stopped()
    assert state.liveness() == (False, "the controller's loop has stopped")
    assert not state.readiness()[0]


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


def test_the_health_server_answers_probes_and_metrics() -> None:
    state = health.Health()
    server = health.serve(state, 0, host="127.0.0.1")
    port = server.server_address[1]
    try:
        assert get(port, "/healthz")[0] == 200
        assert get(port, "/readyz") == (503, "unhealthy: waiting: waiting for the API server\n")
        state.running()
        assert get(port, "/readyz") == (200, "ok: running: the controller's loop is running\n")
        state.stopped()
        assert get(port, "/healthz") == (503, "unhealthy: the controller's loop has stopped\n")
        status, text = get(port, "/metrics")
        assert status == 200 and "# TYPE opbroker_reconcile_seconds histogram" in text
        assert get(port, "/nothing-here")[0] == 404
    finally:
        server.shutdown()
        server.server_close()


def test_the_wait_covers_every_resource_the_controller_watches() -> None:
    controller = Controller(client.ApiClient(), ControllerSettings(multicluster=True))
    wanted = apiready.wanted_of(controller.all_watches())
    assert set(CRDS) <= set(wanted)
    assert {
        apiready.Wanted("resource.servicefabrik.io", "v1alpha1", "sfclusters"),
        apiready.Wanted("batch", "v1", "jobs"),
        apiready.Wanted("apps", "v1", "deployments"),
    } <= set(wanted)
    # Secrets are watched once, by the controller's source watch (the claims subscribe to it), not by kopf.
    assert apiready.Wanted("", "v1", "secrets") not in set(wanted)
    assert len(wanted) == len(set(wanted))
    assert str(apiready.Wanted("", "v1", "secrets")) == "secrets (v1)"
    assert str(CRDS[0]) == "sfservices.osb.servicefabrik.io/v1alpha1"


# -- the wait, against the real API server and the not-ready one ------------------------------------------


def client_for(kubeconfig: Path) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(kubeconfig))


def kubeconfig_for(control_plane: ControlPlane, server: str, path: Path) -> Path:
    """The control plane's kubeconfig with another server URL (same CA, same token)."""
    kubeconfig = yaml.safe_load(control_plane.kubeconfig.read_text())
    for cluster in kubeconfig["clusters"]:
        cluster["cluster"]["server"] = server
    path.write_text(yaml.safe_dump(kubeconfig, sort_keys=False))
    return path


@pytest.fixture
def not_ready(control_plane: ControlPlane) -> Iterator[NotReadyApiserver]:
    pki = control_plane.dir / "pki"
    (port,) = free_ports(1)
    fake = NotReadyApiserver(pki / "apiserver.crt", pki / "apiserver.key", port)
    fake.start()
    yield fake
    fake.close()


class Relay:
    """A TCP relay in front of the API server whose upstream the test switches (dropping live connections)."""

    def __init__(self, control_plane: ControlPlane, fake: NotReadyApiserver) -> None:
        state = control_plane.state()
        assert state is not None
        self.real = ("127.0.0.1", state.ports.apiserver)
        self.fake = ("127.0.0.1", fake.port)
        self.upstream = self.real
        (port,) = free_ports(1)
        self.proxy = TcpProxy(port, lambda: self.upstream)
        self.proxy.start()

    def to(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.proxy.cut()


@pytest.fixture
def relay(control_plane: ControlPlane, not_ready: NotReadyApiserver) -> Iterator[Relay]:
    relay = Relay(control_plane, not_ready)
    yield relay
    relay.proxy.close()


def test_a_ready_api_server_serves_everything_at_once(api_client: client.ApiClient) -> None:
    assert apiready.missing(api_client, [*CRDS, apiready.Wanted("", "v1", "secrets")]) == []
    assert apiready.wait_until_served(api_client, CRDS, timeout=0) == []


def test_the_wait_names_what_a_not_ready_api_server_lacks_then_gives_up(
    control_plane: ControlPlane, not_ready: NotReadyApiserver, tmp_path: Path
) -> None:
    api = client_for(kubeconfig_for(control_plane, f"https://127.0.0.1:{not_ready.port}", tmp_path / "kc"))
    seen: list[str] = []
    sleeps: list[float] = []
    clock = Clock()

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock.now += seconds

    problems = apiready.wait_until_served(api, CRDS, timeout=3, on_wait=seen.append, clock=clock, sleep=sleep)
    assert problems == [f"{w} (discovery HTTP 404: 404 page not found)" for w in sorted(CRDS)]
    assert sleeps == [1.0, 1.0, 1.0] and len(seen) == 4
    assert seen[-1] == "waiting for the API server to serve: " + "; ".join(problems)


def test_the_wait_reports_an_api_server_that_does_not_answer(control_plane: ControlPlane, tmp_path: Path) -> None:
    (port,) = free_ports(1)  # nothing listens there
    api = client_for(kubeconfig_for(control_plane, f"https://127.0.0.1:{port}", tmp_path / "kc"))
    (problem,) = apiready.missing(api, CRDS)
    assert problem.startswith(f"the API server at https://127.0.0.1:{port} does not answer (")


def test_a_crd_missing_from_discovery_is_named(api_client: client.ApiClient) -> None:
    absent = apiready.Wanted("osb.servicefabrik.io", "v1alpha1", "sfnothings")
    assert apiready.missing(api_client, [absent, *CRDS]) == [
        "sfnothings.osb.servicefabrik.io/v1alpha1 (not in discovery)"
    ]


# -- the controller process --------------------------------------------------------------------------------


def command(control_plane: ControlPlane, kubeconfig: Path, *extra: str) -> list[str]:
    cmd = controller_command(control_plane, *extra)
    cmd[cmd.index("--kubeconfig") + 1] = str(kubeconfig)
    return cmd


def await_(process: Process, condition: Callable[[], Any], timeout: float, what: str) -> Any:
    try:
        return wait_for(condition, timeout, what, interval=0.2)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- {process.name} log ---\n{process.tail(40)}") from None


def test_a_controller_whose_api_server_never_gets_ready_exits_non_zero_naming_what_is_missing(
    control_plane: ControlPlane, relay: Relay, tmp_path: Path
) -> None:
    relay.to(relay.fake)
    kubeconfig = kubeconfig_for(control_plane, relay.proxy.url, tmp_path / "kubeconfig")
    process = Process("gives-up", command(control_plane, kubeconfig, "--api-wait-seconds", "2"), tmp_path)
    process.start()
    try:
        await_(process, lambda: not process.running, 60, "the controller to give up")
        assert process.popen is not None and process.popen.returncode != 0
        log = process.log.read_text(errors="replace")
        assert "waiting for the API server to serve what the controller watches" in log
        assert "gave up after 2 s: the API server does not serve " in log
        assert "sfserviceinstances.osb.servicefabrik.io/v1alpha1 (discovery HTTP 404: 404 page not found)" in log
        assert "Unresolved resources cannot be served" not in log  # kopf never started idle
    finally:
        process.stop()


def test_a_controller_started_while_the_api_server_answers_404_waits_then_converges(
    api_client: client.ApiClient,
    namespace: str,
    control_plane: ControlPlane,
    controller: Process,
    relay: Relay,
    tmp_path: Path,
) -> None:
    controller.stop()  # the session's controller would reconcile the instance too
    relay.to(relay.fake)
    kubeconfig = kubeconfig_for(control_plane, relay.proxy.url, tmp_path / "kubeconfig")
    (port,) = free_ports(1)
    process = Process(
        "starts-early",
        command(control_plane, kubeconfig, "--metrics-port", str(port), "--api-wait-seconds", "90"),
        tmp_path,
    )
    process.start()
    try:
        await_(process, lambda: "waiting for the API server" in process.log.read_text(), 30, "the wait to be logged")
        assert "(discovery HTTP 404: 404 page not found)" in process.log.read_text()
        assert get(port, "/healthz")[0] == 200  # waiting, bounded: alive
        status, text = get(port, "/readyz")
        assert status == 503 and "waiting for the API server to serve: " in text
        assert process.running

        relay.to(relay.real)  # the API server has finished starting
        await_(process, lambda: get(port, "/readyz")[0] == 200, 60, "the controller to start reconciling")
        provision(api_client, namespace, "early")
        await_(
            process,
            lambda: state_of(api_client, namespace, "sfserviceinstances", "early") == "succeeded",
            60,
            "the instance to be provisioned",
        )
        assert process.running
        log = process.log.read_text(errors="replace")
        assert "the API server serves every resource the controller watches (after " in log
        assert "Unresolved resources cannot be served" not in log
    finally:
        process.stop()
        controller.start()


def test_a_running_controller_hit_by_404s_exits_non_zero_or_carries_on_never_idle(
    api_client: client.ApiClient,
    namespace: str,
    control_plane: ControlPlane,
    controller: Process,
    relay: Relay,
    tmp_path: Path,
) -> None:
    controller.stop()
    kubeconfig = kubeconfig_for(control_plane, relay.proxy.url, tmp_path / "kubeconfig")
    (port,) = free_ports(1)
    process = Process(
        "hit", command(control_plane, kubeconfig, "--metrics-port", str(port), "--api-wait-seconds", "90"), tmp_path
    )
    exits: list[int | None] = []

    def supervised(condition: Callable[[], bool]) -> Callable[[], bool]:
        """The condition, with the process restarted whenever it has exited (as its pod would be)."""

        def check() -> bool:
            if not process.running:
                assert process.popen is not None
                exits.append(process.popen.returncode)
                process.start()
            return condition()

        return check

    process.start()
    try:
        await_(process, lambda: get(port, "/readyz")[0] == 200, 60, "the controller to start reconciling")
        provision(api_client, namespace, "before")
        await_(
            process,
            lambda: state_of(api_client, namespace, "sfserviceinstances", "before") == "succeeded",
            60,
            "the first instance",
        )
        # The API server restarts: 404s until the controller's watches have reconnected into them (the informer logs
        # each refusal) or the controller has exited over them.
        seen = len(process.log.read_bytes())
        relay.to(relay.fake)
        await_(
            process,
            lambda: not process.running or b"was refused (HTTP 404)" in process.log.read_bytes()[seen:],
            30,
            "a watch refused with a 404",
        )
        relay.to(relay.real)
        provision(api_client, namespace, "after")
        await_(
            process,
            supervised(lambda: state_of(api_client, namespace, "sfserviceinstances", "after") == "succeeded"),
            90,
            "the instance provisioned after the 404s",
        )
        assert all(code != 0 for code in exits), f"exit codes {exits}: a clean exit would hide the failure"
        log = process.log.read_text(errors="replace")
        if exits:
            assert "the operator loop has stopped; exiting" in log
    finally:
        process.stop()
        controller.start()
