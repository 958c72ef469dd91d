"""Deadlines on the way to the API server: a black-holed connection, a stuck worker, a hung lease renewal.

Aspects: every API call of the controller and the broker gets a deadline (a watch its own, from its server-side
duration); liveness fails when workers are stuck or the API server answers nothing, readiness on its own bound;
a leader stops at its renew deadline (on a fake clock in test_leadership). Against the real API server, through
:class:`BlackHole` (a TCP relay that stops forwarding and keeps its connections open): the controller notices,
``/healthz`` says so, and once the path works again it converges with no operation lost; a leader whose renewals
are black-holed stops acting before the standby takes over.

Bounds are generous and polled; no test asserts how fast anything happened, only in which order.
"""

from __future__ import annotations

import asyncio
import datetime
import re
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from opbroker.broker import server as broker_server
from opbroker.controller.app import Controller
from opbroker.controller.runtime import contact, health, queue
from opbroker.controller.settings import ControllerSettings
from opbroker.devcluster import ControlPlane
from opbroker.devcluster.controlplane import free_ports
from opbroker.kubeclient import deadlines
from tests.blackhole import BlackHole
from tests.controller.test_lifecycle import provision, wait_state
from tests.controller.test_robustness import lease_holder
from tests.controller_support import OPBROKER, Process, wait_for

# -- the deadlines, the checks and the guard (no cluster) -------------------------------------------------


@pytest.mark.parametrize(
    ("url", "want"),
    [
        ("https://h/api/v1/namespaces/a/secrets/b", (10.0, 60.0)),
        ("https://h/apis/g/v1/things?labelSelector=a%3Db&limit=500", (10.0, 60.0)),
        ("https://h/apis/g/v1/things?watch=true&timeoutSeconds=60", (10.0, 75.0)),
        ("https://h/apis/g/v1/things?watch=True&timeoutSeconds=4", (10.0, 5.0)),
        ("https://h/apis/g/v1/things?watch=true", (10.0, 75.0)),  # no server-side end: the controller's own
        ("https://h/apis/g/v1/things?watch=false", (10.0, 60.0)),
    ],
)
def test_every_controller_call_gets_a_deadline_and_a_watch_its_own(url: str, want: tuple[float, float]) -> None:
    assert deadlines.Timeouts().for_url(url) == want


def test_the_credentials_hook_runs_at_most_once_per_period() -> None:
    """Issue 31: the client ran a kubeconfig's hook before every request (2.8 % of the controller's CPU); the
    bounded client runs it at most once per REFRESH_SECONDS, on a clock the test moves."""
    calls: list[object] = []
    configuration = client.Configuration()
    configuration.api_key = {"BearerToken": "t"}
    configuration.refresh_api_key_hook = calls.append
    deadlines.bounded(configuration)
    hook = configuration.refresh_api_key_hook
    assert isinstance(hook, deadlines.ThrottledRefresh)
    now = [100.0]
    hook.clock = lambda: now[0]
    for _ in range(50):
        configuration.get_api_key_with_prefix("BearerToken")
    assert calls == [configuration]
    now[0] += deadlines.REFRESH_SECONDS
    configuration.get_api_key_with_prefix("BearerToken")
    assert len(calls) == 2
    deadlines.sibling(deadlines.bounded(configuration))  # wrapped once, however many clients share it
    assert configuration.refresh_api_key_hook is hook


def test_a_kubeconfigs_hook_stays_throttled_though_it_installs_itself_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The official loader's hook sets itself on the configuration again each time it runs: the throttle lasted
    one refresh, then every request ran the hook (2.3 % of the controller's CPU, py-spy, session 12)."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    runs: list[str] = []
    loader_hook = configuration.refresh_api_key_hook
    original_set_config = config.kube_config.KubeConfigLoader._set_config

    def counting(self: Any, target: Any) -> None:
        runs.append("refresh")
        original_set_config(self, target)

    monkeypatch.setattr(config.kube_config.KubeConfigLoader, "_set_config", counting)
    deadlines.bounded(configuration)
    throttle = configuration.refresh_api_key_hook
    assert isinstance(throttle, deadlines.ThrottledRefresh) and throttle.hook is loader_hook
    now = [100.0]
    throttle.clock = lambda: now[0]
    for period in range(3):
        for _ in range(20):
            assert configuration.get_api_key_with_prefix("BearerToken") == "Bearer t"
        assert configuration.refresh_api_key_hook is throttle, "the loader's hook did not take the throttle's place"
        assert len(runs) == period + 1
        now[0] += deadlines.REFRESH_SECONDS


@pytest.mark.parametrize(
    ("url", "want"),
    [
        ("https://h/apis/g/v1/namespaces/a/things/b", (10.0, 30.0)),
        ("https://h/apis/g/v1/things?watch=true&timeoutSeconds=120", (10.0, 150.0)),
        ("https://h/apis/g/v1/things?watch=true", (10.0, 75.0)),
    ],
)
def test_every_broker_call_gets_a_deadline_and_a_watch_its_own(url: str, want: tuple[float, float]) -> None:
    assert broker_server.TIMEOUTS.for_url(url) == want


@pytest.mark.parametrize(
    ("running", "waiting", "moved", "want"),
    [
        ([], 0, 0.0, None),  # idle for long: nothing is stuck
        ([95.0], 3, 95.0, None),  # busy, moving
        ([20.0], 0, 20.0, "a reconcile has been running for 80 s (bound 60 s)"),
        ([50.0, 80.0], 5, 30.0, "5 keys wait for a worker and no reconcile has moved for 70 s"),
        ([], 2, 39.0, "2 keys wait for a worker and no reconcile has moved for 61 s"),
        ([], 2, 41.0, None),
    ],
)
def test_stuck_workers_are_told_apart_from_busy_and_idle_ones(
    running: list[float], waiting: int, moved: float, want: str | None
) -> None:
    assert queue.stuck(now=100.0, running_since=running, waiting=waiting, moved_at=moved, bound=60) == want


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class CountingClock(Clock):
    """A fake clock that counts its reads, so a test can wait until a thread has looked at it (not sleep)."""

    def __init__(self) -> None:
        super().__init__()
        self._reads = 0
        self._read = threading.Condition()

    def __call__(self) -> float:
        with self._read:
            self._reads += 1
            self._read.notify_all()
        return self.now

    def reads_reach(self, count: int, *, within: float) -> bool:
        with self._read:
            return self._read.wait_for(lambda: self._reads >= count, timeout=within)


def test_liveness_fails_on_its_checks_and_readiness_on_its_own() -> None:
    clock = Clock()
    reached = contact.ApiContact(clock=clock)
    state = health.Health(clock=clock)
    state.add_check(lambda: reached.problem(120), liveness=True)
    state.add_check(lambda: reached.problem(10), liveness=False)
    assert state.liveness()[0]  # waiting: the checks do not apply yet
    state.running()
    clock.now += 11
    state.beat()
    assert state.liveness()[0]
    assert state.readiness() == (False, "the API server has not answered the controller for 11 s (bound 10 s)")
    reached.answered()
    assert state.readiness()[0]
    clock.now += 121
    state.beat()
    assert state.liveness() == (False, "the API server has not answered the controller for 121 s (bound 120 s)")
    assert not state.readiness()[0]


# -- a client through a black hole ends at its deadline ----------------------------------------------------


def black_holed_kubeconfig(hole: BlackHole, path: Path) -> Path:
    """A kubeconfig naming ``hole`` (nothing answers there once it swallows)."""
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": hole.url, "insecure-skip-tls-verify": True}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    return path


def ends(call: Any, within: float) -> BaseException | None:
    """Run ``call`` in a thread: the exception it ended with; fails the test if it is still running after
    ``within`` seconds (a call without a deadline)."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(within)
    assert outcome, f"the call was still waiting after {within} s"
    return outcome[0]


def test_a_broker_call_into_a_black_hole_ends_at_its_deadline(tmp_path: Path) -> None:
    hole = BlackHole(lambda: ("127.0.0.1", 9))
    hole.swallow()
    try:
        api = broker_server.kubernetes_client(
            black_holed_kubeconfig(hole, tmp_path / "kc"), timeouts=deadlines.Timeouts(connect=1, request=1)
        )
        failure = ends(lambda: client.CoreV1Api(api).read_namespace("default"), within=60)
        assert failure is not None and hole.swallowed >= 1
    finally:
        hole.close()


def test_a_controller_call_into_a_black_hole_ends_at_its_deadline(tmp_path: Path) -> None:
    hole = BlackHole(lambda: ("127.0.0.1", 9))
    hole.swallow()
    configuration = client.Configuration()
    configuration.host = hole.url
    configuration.verify_ssl = False
    reached = contact.ApiContact()
    api = deadlines.bounded(
        configuration, timeouts=deadlines.Timeouts(connect=1, request=1), on_answer=reached.answered
    )
    try:
        failure = ends(lambda: client.CoreV1Api(api).read_namespace("default"), within=60)
        assert failure is not None and hole.swallowed >= 1
        # and a sibling (an impersonating door) keeps the deadlines
        twin = deadlines.sibling(api)
        assert ends(lambda: client.CoreV1Api(twin).read_namespace("default"), within=60) is not None
    finally:
        hole.close()


def test_a_controller_starting_against_a_silent_api_server_keeps_its_loop_free() -> None:
    """Start-up's reads (the catalog, discovery) hang on a black hole: they wait in the pool, not on the loop — the
    loop races the lease's renew deadline, and a read hanging on it kept a leader acting past that deadline (the
    hung-lease test below, one run in ten, before)."""
    hole = BlackHole(lambda: ("127.0.0.1", 9))
    hole.swallow()
    configuration = client.Configuration()
    configuration.host = hole.url
    configuration.verify_ssl = False
    api = deadlines.bounded(configuration, timeouts=deadlines.Timeouts(connect=1, request=1))
    controller = Controller(api, ControllerSettings())

    async def race() -> tuple[bool, bool]:
        starting = asyncio.ensure_future(controller.start())
        beat = asyncio.ensure_future(asyncio.sleep(0.1))
        await asyncio.wait({starting, beat}, return_when=asyncio.FIRST_COMPLETED)
        outcome = beat.done(), starting.done()
        starting.cancel()
        return outcome

    try:
        beat_done, start_done = asyncio.run(race())
        assert beat_done and not start_done, "the loop was held by start-up's reads"
    finally:
        hole.close()


# -- the controller behind a black hole ---------------------------------------------------------------------


def kubeconfig_through(control_plane: ControlPlane, hole: BlackHole, path: Path) -> Path:
    """The control plane's kubeconfig with ``hole`` as its server (same CA, same credentials)."""
    kubeconfig = yaml.safe_load(control_plane.kubeconfig.read_text())
    for cluster in kubeconfig["clusters"]:
        cluster["cluster"]["server"] = hole.url
    path.write_text(yaml.safe_dump(kubeconfig, sort_keys=False))
    return path


def hole_to(control_plane: ControlPlane) -> BlackHole:
    state = control_plane.state()
    assert state is not None
    return BlackHole(lambda: ("127.0.0.1", state.ports.apiserver))


def command(kubeconfig: Path, port: int, *extra: str) -> list[str]:
    return [
        str(OPBROKER),
        "controller",
        "run",
        "--kubeconfig",
        str(kubeconfig),
        "--poll-seconds",
        "2",
        "--error-threshold",
        "50",  # an outage must not fail the operation: it is retried until the API answers again
        "--metrics-port",
        str(port),
        "--request-timeout",
        "3",
        "--watch-seconds",
        "4",
        "--stuck-seconds",
        "12",
        *extra,
    ]


def probe(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


@pytest.fixture
def quiet(controller: Process) -> Iterator[None]:
    """The session's controller out of the picture (it would act on the test's objects), back afterwards."""
    controller.stop()
    yield
    controller.start()


def test_a_black_holed_api_server_is_noticed_and_nothing_is_lost_once_it_answers_again(
    api_client: client.ApiClient,
    namespace: str,
    catalog_namespace: str,
    control_plane: ControlPlane,
    demo_operator: Process,
    quiet: None,
    tmp_path: Path,
) -> None:
    hole = hole_to(control_plane)
    (port,) = free_ports(1)
    kubeconfig = kubeconfig_through(control_plane, hole, tmp_path / "kubeconfig")
    process = Process("controller", command(kubeconfig, port, "--no-leader-election"), tmp_path)
    process.start()
    try:
        wait_for(lambda: probe(port, "/readyz")[0] == 200, 90, "the controller to be ready")
        provision(api_client, namespace, "before")
        wait_state(api_client, namespace, "sfserviceinstances", "before", "succeeded", timeout=60)

        hole.swallow()
        provision(api_client, namespace, "during")  # requested while the controller cannot hear of it

        def unhealthy() -> str | None:
            status, why = probe(port, "/healthz")
            return why if status == 503 else None

        why = wait_for(unhealthy, 90, "/healthz to report the silent API server")
        assert "the API server has not answered the controller" in why, why
        assert probe(port, "/readyz")[0] == 503
        assert process.running, "noticing is the probes' job; the process itself stays up"

        hole.forward()  # new connections work; the swallowed ones stay dead, for the controller to notice
        wait_for(lambda: probe(port, "/healthz")[0] == 200, 90, "/healthz to recover")
        wait_state(api_client, namespace, "sfserviceinstances", "during", "succeeded", timeout=120)
        wait_for(lambda: probe(port, "/readyz")[0] == 200, 30, "/readyz to recover")
        assert process.running
        assert hole.swallowed >= 1  # the controller did dial into the black hole meanwhile
    finally:
        process.stop()
        hole.close()


# -- a hung lease renewal ---------------------------------------------------------------------------------

LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def logged_at(log: Path, needle: str) -> datetime.datetime | None:
    """When the first line containing ``needle`` was logged (the process's logging clock: this machine's)."""
    for line in log.read_text(errors="replace").splitlines():
        if needle in line:
            match = LOG_TIME.match(line)
            assert match, f"no timestamp on {line!r}"
            return datetime.datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f")
    return None


def test_a_hung_lease_renewal_never_leaves_two_leaders_acting(
    api_client: client.ApiClient,
    namespace: str,
    catalog_namespace: str,
    control_plane: ControlPlane,
    demo_operator: Process,
    quiet: None,
    tmp_path: Path,
) -> None:
    holes = [hole_to(control_plane) for _ in range(2)]
    ports = free_ports(2)
    replicas = [
        Process(
            f"replica-{i}",
            command(
                kubeconfig_through(control_plane, hole, tmp_path / f"kubeconfig-{i}"),
                port,
                "--leader-election",
                "--lease-seconds",
                "12",  # renew deadline 8 s: the leader must be gone within it; the standby waits 12
            ),
            tmp_path,
        )
        for i, (hole, port) in enumerate(zip(holes, ports, strict=True))
    ]
    try:
        for replica in replicas:
            replica.start()
        wait_for(
            lambda: any("became the leader" in r.log.read_text() for r in replicas if r.log.exists()),
            90,
            "a leader to be elected",
        )
        (leader,) = [r for r in replicas if "became the leader" in r.log.read_text()]
        standby = next(r for r in replicas if r is not leader)
        old_holder = lease_holder(api_client, catalog_namespace)
        assert old_holder and f"{old_holder} became the leader" in leader.log.read_text()

        holes[replicas.index(leader)].swallow()  # its renewals (and everything else) now hang
        wait_for(lambda: "became the leader" in standby.log.read_text(), 90, "the standby to take over")
        wait_for(lambda: not leader.running, 30, "the old leader to have exited")
        # The guard's line, or the election loop's own when its renew deadline passed first: both exit at once. Or
        # neither: a request of the leader's start-up (swallowed too) met its deadline first and the process exited
        # over it — it acts no more from that line on.
        lines = ("stops acting", "lost the leadership", "the controller's loop has stopped; exiting")
        stopped = min((t for t in (logged_at(leader.log, line) for line in lines) if t), default=None)
        started = logged_at(standby.log, "became the leader")
        assert stopped is not None, leader.tail()
        assert started is not None
        assert stopped < started, f"the old leader acted until {stopped}, the new one from {started}"
        new_holder = lease_holder(api_client, catalog_namespace)
        assert new_holder not in (None, old_holder)

        holes[replicas.index(leader)].forward()
        provision(api_client, namespace, "after-failover")
        wait_state(api_client, namespace, "sfserviceinstances", "after-failover", "succeeded", timeout=60)
        assert "became the leader" in standby.log.read_text() and standby.running
    finally:
        for replica in replicas:
            replica.stop()
        for hole in holes:
            hole.close()
