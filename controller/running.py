"""Running the controller: configuration, waiting for the API, leader election (active-passive), the event loop,
signals.

Two replicas run active-passive: each campaigns for a Lease in the control-plane namespace; only the
holder runs the controller. A leader that loses its lease exits the process at once (as controller-runtime does),
so it can never act alongside the new leader; its pod restarts as a candidate. A leader whose renewals do
not succeed within the renew deadline (two thirds of the lease) — failing or hanging — exits too, before a
standby may take the lease over (:mod:`opbroker.controller.runtime.leadership`, the election of our own: the
Lease read and written as JSON through the project's transport).

Everything runs on one event loop from the start (:class:`Process`): the wait for the API, the campaign, the
lease's renewals, the API probe and the controller are coroutines and tasks on it; their blocking calls go to
threads through it. So a signal is handled on the loop at whatever step the process is in.

Every API client the process builds has deadlines and TCP keepalive (:mod:`opbroker.kubeclient.deadlines`);
their answers, and a probe when the cluster is quiet, tell the health probes whether the API server still
answers (:mod:`opbroker.controller.runtime.contact`).

Before campaigning, and again before the controller starts, the process waits (bounded by ``api_wait_seconds``) until
the API server serves every resource the controller watches (:mod:`opbroker.controller.runtime.apiready`): a watch
started against a kube-apiserver that is itself starting would fail on the custom resources missing from
discovery. The watches themselves are the informers' (:mod:`opbroker.controller.runtime.informers`), started with the
controller on the process's event loop (:mod:`opbroker.controller.runtime.lifecycle`).

SIGTERM or SIGINT (a pod deleted, a rollout, Ctrl-C) before the controller runs exits 0 at once; while it runs,
it stops the controller gracefully: no more work is taken, the
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
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from kubernetes import client, config

from opbroker.controller.app import Controller
from opbroker.controller.runtime import apiready, contact, health, leadership, lifecycle, trim
from opbroker.controller.runtime.clock import SYSTEM
from opbroker.controller.settings import ControllerSettings
from opbroker.kubeclient import deadlines
from opbroker.kubeclient.astreams import AsyncTransport
from opbroker.kubeclient.transport import transport_of

logger = logging.getLogger(__name__)
USER_AGENT = "opbroker-controller"
#: How long a stopping leader tries to hand its Lease over (beyond it, the standby waits the lease out).
RELEASE_SECONDS = 2.0
T = TypeVar("T")


def api_client_for(
    kubeconfig: str | None,
    *,
    timeouts: deadlines.Timeouts = deadlines.DEFAULT_TIMEOUTS,
    reached: contact.ApiContact | None = None,
    context: str | None = None,
    user_agent: str = USER_AGENT,
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
        user_agent=user_agent,
    )


def user_agent_of(settings: ControllerSettings) -> str:
    """The controller's user agent: sharded, it names the shard (audit logs tell the shards' requests apart)."""
    shards = settings.shards
    return f"{USER_AGENT}/shard-{shards.index}" if shards.sharded else USER_AGENT


def run(settings: ControllerSettings, *, kubeconfig: str | None) -> None:
    """The ``opbroker controller run`` entry point. Never returns: the process exits when the controller stops."""
    trim.limit_arenas()  # before any thread of ours allocates (see trim.ARENAS)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # httpx logs every request at INFO: a line per OSB call and poll of the Service Catalog's, some 8 % of the
    # OSB client's CPU under the servicecatalog bench; the operations' outcomes are in conditions and events.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    state = health.Health()
    if settings.metrics_port is not None:
        health.serve(state, settings.metrics_port)
    if kubeconfig:
        os.environ["KUBECONFIG"] = kubeconfig
    reached = contact.ApiContact()
    api = api_client_for(kubeconfig, timeouts=settings.timeouts, reached=reached, user_agent=user_agent_of(settings))
    # Another shard's controller (a takeover) gets a client of its own, its user agent naming that shard.
    process = Process(
        settings,
        api,
        Controller(api, settings),
        state,
        reached,
        make_controller=lambda taken: Controller(
            api_client_for(kubeconfig, timeouts=taken.timeouts, reached=reached, user_agent=user_agent_of(taken)),
            taken,
        ),
    )
    probe_every = min(settings.policies.api_probe.base, settings.stuck_seconds / 4)
    state.add_check(lambda: reached.problem(settings.stuck_seconds), liveness=True)
    state.add_check(lambda: reached.problem(3 * probe_every), liveness=False)
    # The process's controller: a standby taking another shard's Lease over runs one made for that shard.
    state.add_check(lambda: process.controller.runtime.stuck(settings.stuck_seconds), liveness=True)
    # Not asyncio.run(): its teardown waits for the pool's threads, and one blocked on the API would keep a
    # stopping controller up past its drain time. Whatever happens, the process exits after this.
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    process.controller.runtime.install(loop)  # the one pool, from the start
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, process.ask_to_stop, signum)
    probe = loop.create_task(contact.probe(api, reached, every=probe_every), name="api probe")
    try:
        code = loop.run_until_complete(process.main())
    except BaseException:
        logger.exception("the controller's loop has failed")
        code = 1
    probe.cancel()
    _exit(code)


class Process:
    """The controller's process on its one event loop: wait for the API, campaign for the lease (under leader
    election), run the controller until a signal asks it to stop, hand the lease over. Every step is a
    coroutine, so a signal is handled on the loop whatever step the process is in."""

    def __init__(
        self,
        settings: ControllerSettings,
        api: client.ApiClient,
        controller: Controller,
        state: health.Health,
        reached: contact.ApiContact,
        *,
        make_controller: Callable[[ControllerSettings], Controller],
    ) -> None:
        self.settings = settings
        self.api = api
        self.controller = controller
        self.state = state
        self.reached = reached
        self.shutdown = lifecycle.Shutdown()
        self.make_controller = make_controller
        """What :meth:`take_over` makes the controller of another shard with."""
        self.identity = f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"
        self.other_layout: tuple[leadership.LeaseLock, ...] = ()
        """The Leases of the other layout, read only, waited for before acting (:meth:`wait_for_the_other_layout`)."""

    async def main(self) -> int:
        """The process's life; its exit code. A stop asked before the controller runs ends it at once (0). The
        admission webhook is served by every replica, leader or not, from the start."""
        if self.settings.webhook_port is not None:
            self.controller.service_catalog.serve_webhook(self.settings)
        if not await self.unless_stopped(self.wait_for_the_api()):
            return 0
        if not self.settings.leader_election:
            return await self.operate()
        candidates = self.elections()
        self.state.standby()
        settings = self.settings
        names = ", ".join(election.lock.name for _, election in candidates)
        logger.info("%s campaigning for lease %s/%s", self.identity, settings.namespace, names)
        campaign = asyncio.ensure_future(self.campaign(candidates))
        if not await self.unless_stopped(campaign):
            await candidates[0][1].close()  # one transport for every candidate's lock
            return 0  # asked to stop while standing by: nothing to hand over
        index, election = campaign.result()
        if index != settings.shards.index:
            self.take_over(index)
        logger.info("%s became the leader of %s; starting reconciliation", self.identity, election.lock.name)
        holding = asyncio.ensure_future(election.hold())
        holding.add_done_callback(self._leading_ended)
        code = 0
        # A standby may have waited long for the lease: the API server may be starting now.
        if await self.unless_stopped(self.wait_for_the_api()) and await self.unless_stopped(
            self.wait_for_the_other_layout(election)
        ):
            code = await self.operate()
        holding.remove_done_callback(self._leading_ended)
        holding.cancel()
        await election.release(RELEASE_SECONDS)
        await election.close()
        return code

    async def wait_for_the_other_layout(self, election: leadership.Leadership) -> None:
        """Act only once no leader of the other layout leads (issue 46): a shard waits for the unsharded controller's
        Lease, the unsharded controller for every shard's. While a control plane changes between one controller and
        shards, the old leaders act on their objects until their renewals are refused (their Role no longer names
        their Lease) or they are stopped; their Leases free, they have stopped acting. The Roles grant ``get`` on the
        other layout's Leases; an unsharded controller whose Role predates that acts without waiting (logged)."""
        started = SYSTEM.monotonic()
        await election.wait_until_free(self.other_layout, forbidden_is_free=not self.settings.shards.sharded)
        logger.info(
            "no leader of the other layout holds its Lease (%d read; %.2f s)",
            len(self.other_layout),
            SYSTEM.monotonic() - started,
        )

    async def unless_stopped(self, step: Awaitable[T]) -> bool:
        """Run ``step`` unless a stop is asked first (then it is cancelled): whether it ran to its end."""
        running = asyncio.ensure_future(step)
        stop_asked = asyncio.ensure_future(self.shutdown.wait())
        await asyncio.wait({running, stop_asked}, return_when=asyncio.FIRST_COMPLETED)
        stop_asked.cancel()
        if running.done():
            running.result()  # raised: the caller's failure
            return True
        running.cancel()
        return False

    async def campaign(
        self, candidates: Sequence[tuple[int, leadership.Leadership]]
    ) -> tuple[int, leadership.Leadership]:
        """Campaign until one of ``candidates`` (shard, election) leads: the one Lease of this replica's shard, or
        under ``--shard-takeover`` every shard's, its own first."""
        elections = [election for _, election in candidates]
        position = await leadership.campaign_any(elections, retry_period=elections[0].retry_period)
        return candidates[position]

    def take_over(self, index: int) -> None:
        """Run as shard ``index``, whose Lease this standby took (``--shard-takeover``): a controller made for that
        shard (its label selector, its Lease checked before writes, shard 0's once-per-control-plane duties) replaces
        the one made for its own, which never started; the admission webhook stays with the first."""
        own = self.settings.shards.index
        self.settings = self.settings.as_shard(index)
        self.controller = self.make_controller(self.settings)
        self.controller.runtime.install(asyncio.get_running_loop())
        logger.info("%s (a standby of shard %d) takes shard %d over", self.identity, own, index)

    def elections(self) -> list[tuple[int, leadership.Leadership]]:
        """The elections this replica campaigns in, each over a shard's Lease (:meth:`ControllerSettings.shard_leases`),
        their requests over one transport."""
        settings = self.settings
        transport = self.lease_transport()
        # The other layout's Leases, read only (wait_for_the_other_layout).
        self.other_layout = tuple(
            leadership.LeaseLock(
                transport, settings.namespace, name, self.identity, lease_seconds=settings.lease_seconds
            )
            for name in settings.shards.other_layout_leases(settings.lease_name)
        )
        return [(index, self.election(name, transport)) for index, name in settings.shard_leases()]

    def lease_transport(self) -> AsyncTransport:
        """The Lease's own client, its every request ending well within the renew deadline."""
        settings = self.settings
        lease_seconds = max(1.0, settings.renew_deadline / 4)
        timeouts = deadlines.Timeouts(connect=lease_seconds, request=lease_seconds)
        lease_client = deadlines.bounded(
            self.api.configuration,
            timeouts=timeouts,
            on_answer=self.reached.answered,
            user_agent=user_agent_of(settings),
        )
        return AsyncTransport(transport_of(lease_client))

    def election(self, lease: str, transport: AsyncTransport) -> leadership.Leadership:
        """The election over ``lease``."""
        settings = self.settings
        lock = leadership.LeaseLock(
            transport, settings.namespace, lease, self.identity, lease_seconds=settings.lease_seconds
        )
        return leadership.Leadership(
            lock, renew_deadline=settings.renew_deadline, retry_period=max(1.0, settings.lease_seconds / 8)
        )

    def _leading_ended(self, holding: asyncio.Future[leadership.Ended]) -> None:
        """Leading ended while the controller acts: exit at once, so that only one controller ever acts."""
        if holding.cancelled():
            return
        ended = holding.result()
        if ended.lost_to is not None:
            logger.error(
                "%s lost the leadership to %s; exiting so that only one controller acts", self.identity, ended.lost_to
            )
        else:
            logger.error(
                "%s stops acting: its lease was last renewed %.1f s ago, past the renew deadline (%.1f s of a %d s "
                "lease); exiting before a standby may take over",
                self.identity,
                ended.age,
                self.settings.renew_deadline,
                self.settings.lease_seconds,
            )
            self.state.stopped("the lease could not be renewed in time")
        _exit(1)

    async def wait_for_the_api(self) -> None:
        """Bounded: exits the process when the API server does not serve what the controller watches in time."""
        settings = self.settings
        problems = await asyncio.to_thread(
            apiready.wait_until_served,
            self.api,
            apiready.wanted_of(self.controller.all_watches()),
            timeout=settings.api_wait_seconds,
            on_wait=self.state.waiting,
            poll=settings.policies.api_ready_poll.base,
        )
        if problems:
            self.state.stopped("the API server does not serve what the controller watches")
            logger.error(
                "gave up after %.0f s: the API server does not serve %s; exiting (its supervisor restarts it)",
                settings.api_wait_seconds,
                "; ".join(problems),
            )
            _exit(1)

    async def operate(self) -> int:
        """Run the controller until a stop is asked, then stop it: 0; a loop that ends unasked: 1."""
        # What start-up built (the Kubernetes client's models, pydantic, the controller's parts) lives as long
        # as the process: frozen out of the collector's reach, a full collection during a restart's listings walks
        # only what they allocate (the broker does the same; issue 31).
        gc.collect()
        gc.freeze()
        try:
            await lifecycle.operate(self.controller, self.shutdown, state=self.state, drain=self.settings.drain_seconds)
        except Exception:
            logger.exception("the controller's loop has failed")
        if not self.shutdown.requested:
            logger.error("the controller's loop has stopped; exiting")
            return 1
        return 0

    def ask_to_stop(self, signum: int) -> None:
        """SIGTERM (a pod deleted, a rollout) or SIGINT, on the loop: stop gracefully; a second signal exits now."""
        name = signal.Signals(signum).name
        if not self.shutdown.request(f"received {name}"):
            logger.warning("%s received %s again while stopping; exiting now", self.identity, name)
            _exit(1)
        logger.info("%s received %s; stopping", self.identity, name)


def _exit(code: int) -> None:
    """Exit now, whatever the pool's threads are doing (one blocked on the API must not keep the process up)."""
    logging.shutdown()
    os._exit(code)
