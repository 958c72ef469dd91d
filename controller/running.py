"""Running the controller: configuration, leader election (active-passive), kopf's operator loop.

Two replicas run active-passive: each campaigns for a Lease in the control-plane namespace; only the
holder runs kopf. A leader that loses its lease exits the process at once (as controller-runtime does),
so it can never act alongside the new leader; its pod restarts as a candidate.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import uuid

import kopf
from kubernetes import client, config
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock
from prometheus_client import start_http_server

from opbroker.controller.app import Controller, build_registry
from opbroker.controller.settings import ControllerSettings

logger = logging.getLogger(__name__)
USER_AGENT = "opbroker-controller"


def api_client_for(kubeconfig: str | None) -> client.ApiClient:
    """The official client, configured from a kubeconfig or the pod's service account."""
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig)
    else:
        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
    configuration = client.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = 32
    api = client.ApiClient(configuration)
    api.user_agent = USER_AGENT  # so audit logs (and the benchmarks) can tell the controller's requests apart
    return api


async def run_operator(
    settings: ControllerSettings, *, kubeconfig: str | None, stop: asyncio.Event | None = None
) -> None:
    """Run kopf with our handlers until ``stop`` is set (or forever)."""
    if kubeconfig:
        os.environ["KUBECONFIG"] = kubeconfig
    controller = Controller(api_client_for(kubeconfig), settings)
    registry = build_registry(controller, kubeconfig=kubeconfig)
    operator_settings = kopf.OperatorSettings()
    await kopf.operator(
        registry=registry,
        settings=operator_settings,
        clusterwide=True,
        standalone=True,
        stop_flag=stop,
    )


def run(settings: ControllerSettings, *, kubeconfig: str | None) -> None:
    """The ``opbroker controller run`` entry point."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)  # one line per handled event is noise
    if settings.metrics_port is not None:
        start_http_server(settings.metrics_port)
    if not settings.leader_election:
        asyncio.run(run_operator(settings, kubeconfig=kubeconfig))
        _exit_because_kopf_stopped()
    api_client_for(kubeconfig)  # loads the default configuration the lease lock uses
    identity = f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"
    lock = LeaseLock(settings.lease_name, settings.namespace, identity)
    leading = threading.Event()

    def lead() -> None:
        leading.set()
        logger.info("%s became the leader; starting reconciliation", identity)
        asyncio.run(run_operator(settings, kubeconfig=kubeconfig))
        _exit_because_kopf_stopped()

    def lost() -> None:
        logger.error("%s lost the leadership; exiting so that only one controller acts", identity)
        os._exit(1)

    election = leaderelection.LeaderElection(
        electionconfig.Config(
            lock,
            # Whole seconds: the Lease API stores an integer, and the library refuses periods under 1 s.
            lease_duration=settings.lease_seconds,
            renew_deadline=max(2, settings.lease_seconds * 2 // 3),
            retry_period=max(1, settings.lease_seconds // 8),
            onstarted_leading=lead,
            onstopped_leading=lost,
        )
    )
    logger.info("%s campaigning for lease %s/%s", identity, settings.namespace, settings.lease_name)
    election.run()


def _exit_because_kopf_stopped() -> None:
    """kopf's loop ended: on a signal, or because its watchers gave up (the reliability suite saw this after
    seconds of "404 page not found" from a starting API server). A controller that no longer watches must
    not look alive: exit non-zero, so the pod (or whoever started it) restarts a working one."""
    logger.error("the operator loop has stopped; exiting")
    logging.shutdown()
    os._exit(1)
