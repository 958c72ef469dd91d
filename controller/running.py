"""Running the controller: configuration, waiting for the API, leader election (active-passive), kopf's loop.

Two replicas run active-passive: each campaigns for a Lease in the control-plane namespace; only the
holder runs kopf. A leader that loses its lease exits the process at once (as controller-runtime does),
so it can never act alongside the new leader; its pod restarts as a candidate. A leader whose renewals do
not succeed within the renew deadline (two thirds of the lease) — failing or hanging — exits too, before a
standby may take the lease over (:mod:`opbroker.controller.leadership`).

Every API client the process builds has deadlines and TCP keepalive (:mod:`opbroker.kubeclient.deadlines`);
their answers, and a probe when the cluster is quiet, tell the health probes whether the API server still
answers (:mod:`opbroker.controller.contact`).

Before campaigning, and again before kopf starts, the process waits (bounded by ``api_wait_seconds``) until
the API server serves every resource the controller watches (:mod:`opbroker.controller.apiready`): a watch
started against a kube-apiserver that is itself starting would fail on the custom resources missing from
discovery. The watches themselves are the informers' (:mod:`opbroker.controller.informers`), started with
kopf's loop. When kopf's loop ends — on a signal — the process exits
non-zero, so the pod restarts. :mod:`opbroker.controller.health` reports all of this on the metrics port
(``/healthz``, ``/readyz``) for the pod's probes.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import socket
import threading
import uuid
from typing import Any

import kopf
from kubernetes import client, config
from kubernetes.leaderelection import electionconfig
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

from opbroker.controller import apiready, contact, health, leadership, trim
from opbroker.controller.app import Controller, build_registry
from opbroker.controller.kube import Kube
from opbroker.controller.settings import ControllerSettings
from opbroker.kubeclient import deadlines

logger = logging.getLogger(__name__)
USER_AGENT = "opbroker-controller"
#: Once kopf's loop stops, the longest the process may take to exit (kopf's own teardown included).
EXIT_GRACE_SECONDS = 10.0


def api_client_for(
    kubeconfig: str | None,
    *,
    timeouts: deadlines.Timeouts = deadlines.DEFAULT_TIMEOUTS,
    reached: contact.ApiContact | None = None,
    context: str | None = None,
) -> client.ApiClient:
    """The official client, configured from a kubeconfig (its ``context``: default the current one) or the pod's
    service account, with ``timeouts`` on every call; each answer is reported to ``reached``."""
    if kubeconfig or context:
        config.load_kube_config(config_file=kubeconfig, context=context)
    else:
        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
    configuration = client.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = 32
    # The user agent lets audit logs (and the benchmarks) tell the controller's requests apart.
    return deadlines.bounded(
        configuration,
        timeouts=timeouts,
        on_answer=reached.answered if reached is not None else None,
        user_agent=USER_AGENT,
    )


async def run_operator(
    registry: kopf.OperatorRegistry, *, state: health.Health | None = None, stop: asyncio.Event | None = None
) -> None:
    """Run kopf with ``registry``'s handlers until ``stop`` is set (or its loop ends); while it runs, its event
    loop beats ``state``'s heartbeat."""
    state = state or health.Health()
    state.running()
    heartbeat = asyncio.create_task(_beat(state), name="health heartbeat")
    try:
        await kopf.operator(
            registry=registry,
            settings=kopf.OperatorSettings(),
            clusterwide=True,
            standalone=True,
            stop_flag=stop,
        )
    finally:
        heartbeat.cancel()
        state.stopped()


async def _beat(state: health.Health) -> None:
    while True:
        state.beat()
        await asyncio.sleep(health.HEARTBEAT_SECONDS)


def run(settings: ControllerSettings, *, kubeconfig: str | None) -> None:
    """The ``opbroker controller run`` entry point. Never returns: the process exits when kopf's loop ends."""
    trim.limit_arenas()  # before any thread of ours allocates (see trim.ARENAS)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)  # one line per handled event is noise
    # The election library logs every renewal and every retry (a line a second, forever); ours log changes.
    logging.getLogger("leaderelection").setLevel(logging.WARNING)
    # httpx logs every request at INFO: a line per OSB call and poll of the Service Catalog's, some 8 % of the
    # OSB client's CPU under the servicecatalog bench; the operations' outcomes are in conditions and events.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    state = health.Health()
    if settings.metrics_port is not None:
        health.serve(state, settings.metrics_port)
    if kubeconfig:
        os.environ["KUBECONFIG"] = kubeconfig
    reached = contact.ApiContact()
    api = api_client_for(kubeconfig, timeouts=settings.timeouts, reached=reached)
    controller = Controller(api, settings)
    probe_every = min(contact.PROBE_SECONDS, settings.stuck_seconds / 4)
    contact.start_probe(api, reached, every=probe_every)
    state.add_check(lambda: reached.problem(settings.stuck_seconds), liveness=True)
    state.add_check(lambda: reached.problem(3 * probe_every), liveness=False)
    state.add_check(lambda: controller.runtime.stuck(settings.stuck_seconds), liveness=True)
    if settings.webhook_port is not None:
        controller.service_catalog.serve_webhook(settings)
    registry = build_registry(controller, kubeconfig=kubeconfig)
    wanted = apiready.wanted_of(controller.all_watches())

    def wait_for_the_api() -> None:
        """Bounded: exits the process when the API server does not serve what the controller watches in time."""
        problems = apiready.wait_until_served(api, wanted, timeout=settings.api_wait_seconds, on_wait=state.waiting)
        if problems:
            state.stopped("the API server does not serve what the controller watches")
            logger.error(
                "gave up after %.0f s: the API server does not serve %s; exiting (its supervisor restarts it)",
                settings.api_wait_seconds,
                "; ".join(problems),
            )
            _exit(1)

    @kopf.on.cleanup(registry=registry)
    async def exit_soon(**_: Any) -> None:
        """kopf is stopping (a signal, or its watchers gave up): whatever its teardown waits for, the process
        ends within ``EXIT_GRACE_SECONDS`` — a controller that no longer watches must never stay up."""
        state.stopped("kopf's operator loop is stopping")
        timer = threading.Timer(EXIT_GRACE_SECONDS, _exit_because_kopf_stopped)
        timer.daemon = True
        timer.start()

    def operate(*, check_the_api: bool) -> None:
        if check_the_api:  # a standby may have waited long for the lease: the API server may be starting now
            wait_for_the_api()
        # What start-up built (the Kubernetes client's models, kopf, pydantic, the controller's parts) lives as long
        # as the process: frozen out of the collector's reach, a full collection during a restart's listings walks
        # only what they allocate (the broker does the same; issue 31).
        gc.collect()
        gc.freeze()
        # Not asyncio.run(): its teardown waits for the reconcile threads, and one blocked on the API would
        # keep a controller whose kopf has stopped up for good. Whatever happens, the process exits here.
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(run_operator(registry, state=state))
        except BaseException:
            logger.exception("the operator loop has failed")
        finally:
            _exit_because_kopf_stopped()

    wait_for_the_api()
    if not settings.leader_election:
        operate(check_the_api=False)
    identity = f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"
    lock = LeaseLock(settings.lease_name, settings.namespace, identity)
    # Each lease request ends well within the renew deadline (the library's own client has no deadline).
    lease_seconds = max(1.0, settings.renew_deadline / 4)
    lease_timeouts = deadlines.Timeouts(connect=lease_seconds, request=lease_seconds)
    lock.api_instance = client.CoordinationV1Api(
        deadlines.bounded(api.configuration, timeouts=lease_timeouts, on_answer=reached.answered, user_agent=USER_AGENT)
    )
    leading = threading.Event()

    def terminate(signum: int, _frame: object) -> None:
        """SIGTERM (a pod being deleted, a rollout): hand the lease over and exit at once. Without this
        the process ignores the signal (as a container's PID 1 it has no default action) and the pod is
        killed only after its grace period, and the standby waits out the lease on top."""
        logger.info("%s received %s; exiting", identity, signal.Signals(signum).name)
        state.stopped("terminating")
        if leading.is_set():
            release_lease(api, settings.namespace, settings.lease_name, identity)
        _exit(0)

    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGINT, terminate)

    def overdue(age: float) -> None:
        logger.error(
            "%s stops acting: its lease was last renewed %.1f s ago, past the renew deadline (%.1f s of a %d s "
            "lease); exiting before a standby may take over",
            identity,
            age,
            settings.renew_deadline,
            settings.lease_seconds,
        )
        state.stopped("the lease could not be renewed in time")
        _exit(1)

    def lead() -> None:
        logger.info("%s became the leader; starting reconciliation", identity)
        leading.set()
        leadership.guard(election, settings.renew_deadline, overdue)
        operate(check_the_api=True)

    def lost() -> None:
        logger.error("%s lost the leadership; exiting so that only one controller acts", identity)
        _exit(1)

    election = leadership.GuardedElection(
        electionconfig.Config(
            lock,
            # Whole seconds: the Lease API stores an integer, and the library refuses periods under 1 s.
            lease_duration=settings.lease_seconds,
            renew_deadline=settings.renew_deadline,
            retry_period=max(1, settings.lease_seconds // 8),
            onstarted_leading=lead,
            onstopped_leading=lost,
        )
    )
    state.standby()
    logger.info("%s campaigning for lease %s/%s", identity, settings.namespace, settings.lease_name)
    election.run()  # type: ignore[no-untyped-call]
    _exit(1)  # the election loop only returns when leading ended


def release_lease(api: client.ApiClient, namespace: str, name: str, identity: str) -> bool:
    """Give up the Lease if ``identity`` still holds it, as client-go's ``ReleaseOnCancel`` does: an empty
    holder lets a standby take it on its next try instead of after the lease duration. Conditional on the
    version read, so a lease someone else took meanwhile is left alone. Best effort: False when not done."""
    try:
        if not Kube(api).release_lease(namespace, name, identity, timeout=2.0):
            return False
    except Exception:
        logger.warning("could not release lease %s/%s; the standby takes over when it expires", namespace, name)
        return False
    logger.info("%s released lease %s/%s", identity, namespace, name)
    return True


def _exit_because_kopf_stopped() -> None:
    """kopf's loop ended: on a signal, or because its watchers gave up (the reliability suite saw this after
    seconds of "404 page not found" from a starting API server). A controller that no longer watches must
    not look alive: exit non-zero, so the pod (or whoever started it) restarts a working one."""
    logger.error("the operator loop has stopped; exiting")
    _exit(1)


def _exit(code: int) -> None:
    """Exit now, from any thread (the leader's runs in a thread; daemon threads must not keep us up)."""
    logging.shutdown()
    os._exit(code)
