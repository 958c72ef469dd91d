"""Running the controller: configuration, waiting for the API, leader election (active-passive), the event loop,
signals.

Two replicas run active-passive: each campaigns for a Lease in the control-plane namespace; only the
holder runs the controller. A leader that loses its lease exits the process at once (as controller-runtime does),
so it can never act alongside the new leader; its pod restarts as a candidate. A leader whose renewals do
not succeed within the renew deadline (two thirds of the lease) — failing or hanging — exits too, before a
standby may take the lease over (:mod:`opbroker.controller.runtime.leadership`; the Lease is read and written
as JSON through the project's transport, :mod:`opbroker.controller.runtime.leaselock`).

Every API client the process builds has deadlines and TCP keepalive (:mod:`opbroker.kubeclient.deadlines`);
their answers, and a probe when the cluster is quiet, tell the health probes whether the API server still
answers (:mod:`opbroker.controller.runtime.contact`).

Before campaigning, and again before the controller starts, the process waits (bounded by ``api_wait_seconds``) until
the API server serves every resource the controller watches (:mod:`opbroker.controller.runtime.apiready`): a watch
started against a kube-apiserver that is itself starting would fail on the custom resources missing from
discovery. The watches themselves are the informers' (:mod:`opbroker.controller.runtime.informers`), started with the
controller on the process's event loop (:mod:`opbroker.controller.runtime.lifecycle`).

SIGTERM or SIGINT (a pod deleted, a rollout, Ctrl-C) stops the controller gracefully: no more work is taken, the
reconciles running get up to ``shutdown_seconds`` to end (see ``ControllerSettings.drain_seconds``), then a
leader releases its Lease and the process exits 0 — an idle controller within a fraction of a second, well inside a
pod's grace period. A second signal exits at once. If the loop ends without being asked, the process exits
non-zero, so the pod restarts. :mod:`opbroker.controller.runtime.health` reports all of this on the metrics port
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

from kubernetes import client, config
from kubernetes.leaderelection import electionconfig

from opbroker.controller.app import Controller
from opbroker.controller.runtime import apiready, contact, health, leadership, lifecycle, trim
from opbroker.controller.runtime.kube import Kube
from opbroker.controller.runtime.leaselock import LeaseLock
from opbroker.controller.settings import ControllerSettings
from opbroker.kubeclient import deadlines
from opbroker.kubeclient.lean import LeanApi

logger = logging.getLogger(__name__)
USER_AGENT = "opbroker-controller"


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


def run(settings: ControllerSettings, *, kubeconfig: str | None) -> None:
    """The ``opbroker controller run`` entry point. Never returns: the process exits when the controller stops."""
    trim.limit_arenas()  # before any thread of ours allocates (see trim.ARENAS)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
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
    probe_every = min(settings.policies.api_probe.base, settings.stuck_seconds / 4)
    contact.start_probe(api, reached, every=probe_every)
    state.add_check(lambda: reached.problem(settings.stuck_seconds), liveness=True)
    state.add_check(lambda: reached.problem(3 * probe_every), liveness=False)
    state.add_check(lambda: controller.runtime.stuck(settings.stuck_seconds), liveness=True)
    if settings.webhook_port is not None:
        controller.service_catalog.serve_webhook(settings)
    shutdown = lifecycle.Shutdown()
    wanted = apiready.wanted_of(controller.all_watches())

    def wait_for_the_api() -> None:
        """Bounded: exits the process when the API server does not serve what the controller watches in time."""
        problems = apiready.wait_until_served(
            api,
            wanted,
            timeout=settings.api_wait_seconds,
            on_wait=state.waiting,
            poll=settings.policies.api_ready_poll.base,
        )
        if problems:
            state.stopped("the API server does not serve what the controller watches")
            logger.error(
                "gave up after %.0f s: the API server does not serve %s; exiting (its supervisor restarts it)",
                settings.api_wait_seconds,
                "; ".join(problems),
            )
            _exit(1)

    def operate(*, check_the_api: bool) -> None:
        """Run the controller on a new event loop in this thread until a stop is asked; then return (the caller
        exits). A loop that ends unasked exits the process non-zero."""
        if check_the_api:  # a standby may have waited long for the lease: the API server may be starting now
            wait_for_the_api()
        # What start-up built (the Kubernetes client's models, pydantic, the controller's parts) lives as long
        # as the process: frozen out of the collector's reach, a full collection during a restart's listings walks
        # only what they allocate (the broker does the same; issue 31).
        gc.collect()
        gc.freeze()
        # Not asyncio.run(): its teardown waits for the reconcile threads, and one blocked on the API would keep a
        # stopping controller up past its drain time. Whatever happens, the process exits after this.
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        if threading.current_thread() is threading.main_thread():  # no election: the signals come to this loop
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, stop_on_signal, signum)
        try:
            loop.run_until_complete(lifecycle.operate(controller, shutdown, state=state, drain=settings.drain_seconds))
        except BaseException:
            logger.exception("the controller's loop has failed")
        if not shutdown.requested:
            _exit_because_the_loop_stopped()

    def ask_to_stop(signum: int, who: str) -> None:
        """Ask the loop to stop for ``signum`` (``who`` names this process in the log); a second signal exits now."""
        name = signal.Signals(signum).name
        if not shutdown.request(f"received {name}"):
            logger.warning("%s received %s again while stopping; exiting now", who, name)
            _exit(1)
        logger.info("%s received %s; stopping", who, name)

    def stop_on_signal(signum: int) -> None:
        """A signal on the loop's own thread (no election): ask the loop to stop; :func:`operate` returns then."""
        ask_to_stop(signum, "the controller")

    wait_for_the_api()
    if not settings.leader_election:
        operate(check_the_api=False)
        _exit(0)  # stopped as asked
    identity = f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"
    # Each lease request ends well within the renew deadline (the library's own client has no deadline).
    lease_seconds = max(1.0, settings.renew_deadline / 4)
    lease_timeouts = deadlines.Timeouts(connect=lease_seconds, request=lease_seconds)
    lease_client = deadlines.bounded(
        api.configuration, timeouts=lease_timeouts, on_answer=reached.answered, user_agent=USER_AGENT
    )
    lock = LeaseLock(LeanApi(lease_client), settings.lease_name, settings.namespace, identity)
    leading = threading.Event()

    def terminate(signum: int, _frame: object) -> None:
        """SIGTERM (a pod being deleted, a rollout) or SIGINT, in the main thread while the leader's loop runs in
        the election's: stop the controller gracefully, then hand the Lease over and exit 0. Without this the
        process ignores the signal (as a container's PID 1 it has no default action) and the pod is killed only
        after its grace period, and the standby waits out the lease on top. A second signal exits at once."""
        ask_to_stop(signum, identity)
        if shutdown.operating and not shutdown.wait_stopped(settings.drain_seconds + lifecycle.STOP_MARGIN_SECONDS):
            logger.warning("%s: the controller did not stop in time; exiting all the same", identity)
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
        operate(check_the_api=True)  # returns once a signal asked it to stop: the main thread's handler exits

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


def _exit_because_the_loop_stopped() -> None:
    """The controller's loop ended without a stop being asked (it failed): a controller that no longer watches must
    not look alive: exit non-zero, so the pod (or whoever started it) restarts a working one."""
    logger.error("the controller's loop has stopped; exiting")
    _exit(1)


def _exit(code: int) -> None:
    """Exit now, from any thread (the leader's runs in a thread; daemon threads must not keep us up)."""
    logging.shutdown()
    os._exit(code)
