"""The controller's one reconcile runtime: one work queue for every kind, one error table, one memory.

Watch handlers (the informers') only enqueue keys. The runtime hands each key to the reconciler
registered for its ``kind`` — instances, bindings, catalog entries, claims, clusters — in a worker thread,
and owns everything around it that used to be repeated per subsystem:

* the queue (:mod:`.queue`): one worker per key at a time, events collapsed, per-key backoff, namespaces served
  in turn with at most ``namespace_workers`` reconciles of one namespace at once;
* failures, mapped by one table (:mod:`.failures`): conflicts re-read at once, transport errors and API
  server overload retried with backoff as one log line, anything else retried with a traceback;
* re-checks: a reconcile's ``requeue_after`` is dropped when an earlier re-check of the key is already due
  (a status poll requested by every event would otherwise pile up timers);
* per-key memory (:mod:`.memory`): :meth:`forget` clears the key from every registered store and the queue's
  backoff when its object goes;
* failures shown where the user looks: every failure but a conflict is classified once
  (:mod:`opbroker.controller.core.shown_failures`) and, for a kind that shows failures (:class:`.kinds.ShowsFailures`),
  written on its object as a condition and an Event, and taken back once a reconcile of the key succeeds;
* the reconcile duration and error metrics;
* the one worker pool (issue 45): the loop's default executor, which ``asyncio.to_thread`` uses — the reconciles'
  blocking calls and those of the controller's timers and rollouts (asyncio tasks on the same loop), sized so that
  neither ever waits for a thread the other holds (:data:`BACKGROUND_THREADS`).

Time comes from the clock passed in (:mod:`.clock`, the real one by default), and every wait is a policy of the
one table passed in (:mod:`.policies`, jittered from its random source): the queue's retries
(:attr:`.policies.Policies.retries`) and conflicts (:attr:`.policies.Policies.conflicts`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor

from opbroker.controller.runtime import metrics
from opbroker.controller.runtime.clock import SYSTEM, Clock
from opbroker.controller.runtime.failures import Handling, classify
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.kinds import Reconciler, ShowsFailures
from opbroker.controller.runtime.memory import Memories, PerKey
from opbroker.controller.runtime.outcomes import DONE, Outcome, TemporaryError
from opbroker.controller.runtime.policies import Policies
from opbroker.controller.runtime.queue import WorkQueue
from opbroker.controller.runtime.troubles import shown_for

logger = logging.getLogger(__name__)

#: Admin rollouts run at once (``catalog/admin_requests.py``): each holds a pool thread for its whole length (it
#: paces itself in that thread, for minutes or hours), so their number is bounded, and their threads counted below;
#: a rollout found beyond it starts at a later pass.
ROLLOUTS_AT_ONCE = 2
#: The controller's timers that may each be in a blocking call at the same moment, one thread each: the memory trim,
#: the registry housekeeping, the admin requests' pass, namespace onboarding, the clusters' seeding, the webhook's
#: start and refresh.
TIMER_THREADS = 6
#: Pool threads beyond the ``workers`` (the work queue runs at most that many reconciles at once): a timer or a
#: rollout must never take a reconcile's thread — with one pool of exactly ``workers`` threads, two rollouts would
#: cut the reconciles by two for as long as they run. Threads are made only when used: idle ones cost nothing.
BACKGROUND_THREADS = ROLLOUTS_AT_ONCE + TIMER_THREADS


class Runtime:
    """Keys in, reconciles out; see the module docstring."""

    def __init__(
        self,
        *,
        workers: int,
        namespace_workers: int | None = None,
        uncapped_namespaces: Collection[str] = (),
        memories: Memories | None = None,
        clock: Clock = SYSTEM,
        policies: Policies | None = None,
    ) -> None:
        self.workers = workers
        self.namespace_workers = namespace_workers
        """Reconciles of one namespace at once (the queue's ``per_tenant``; None: its default, half the workers)."""
        self.uncapped_namespaces = tuple(uncapped_namespaces)
        """Namespaces every worker may serve at once (the platform's own: see the queue's ``uncapped``)."""
        self.memories = memories or Memories()
        self.clock = clock
        """The one clock of the runtime and its queue (tests pass a :class:`.clock.FakeClock`)."""
        self.policies = policies if policies is not None else Policies()
        """The timing table (the settings'): the runtime's retries and conflicts, and every subsystem's waits
        (they are handed the runtime)."""
        self._kinds: dict[str, Reconciler] = {}
        self._rechecks: PerKey[float] = self.memories.keep(PerKey())
        self._conflicts: PerKey[int] = self.memories.keep(PerKey())
        """Conflicts in a row per key (see :attr:`.policies.Policies.conflicts`)."""
        self._shown: PerKey[object] = self.memories.keep(PerKey())
        """What each failing key's object shows of its failure (what :meth:`ShowsFailures.show_failure` returned)."""
        self.queue: WorkQueue | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._pool: ThreadPoolExecutor | None = None
        self.reconciles = 0
        """Reconciles run so far (approximate under concurrency: a hint of activity, not a metric)."""

    def register(self, reconciler: Reconciler) -> None:
        """Dispatch keys of ``reconciler.kind`` to ``reconciler``; a kind has exactly one reconciler."""
        if reconciler.kind in self._kinds:
            raise ValueError(f"a reconciler for {reconciler.kind!r} is already registered")
        self._kinds[reconciler.kind] = reconciler

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(self._kinds)

    # -- lifecycle -----------------------------------------------------------------------------------

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        """Make the runtime's one pool ``loop``'s default executor (what ``asyncio.to_thread`` uses), once: the
        process does it as it creates its loop, so everything before the reconciles start (the wait for the API,
        the webhook's start) runs in the same pool."""
        if self._pool is not None:
            return
        # Reconciles run their blocking API calls in threads: one per worker (asyncio's default pool is only
        # cpu+4 threads, which would silently cap the workers), and the timers and rollouts theirs in the same pool,
        # in threads of their own (BACKGROUND_THREADS).
        self._pool = ThreadPoolExecutor(self.workers + BACKGROUND_THREADS, thread_name_prefix="reconcile")
        loop.set_default_executor(self._pool)

    def start(self) -> None:
        """Start the workers on the running event loop (the controller's, :mod:`opbroker.controller.running`)."""
        self.loop = asyncio.get_running_loop()
        self.install(self.loop)
        queue = self.queue = WorkQueue(
            self._reconcile,
            workers=self.workers,
            per_tenant=self.namespace_workers,
            uncapped=self.uncapped_namespaces,
            backoff=self.policies.retries,
            draw=self.policies.draw,
            clock=self.clock,
        )
        metrics.WORKQUEUE_DEPTH.set_function(lambda: queue.depth)
        metrics.WORKQUEUE_IN_FLIGHT.set_function(lambda: queue.in_flight)
        metrics.WORKQUEUE_DUE.set_function(lambda: queue.due)
        metrics.WORKQUEUE_DELAYED.set_function(lambda: queue.delayed)
        queue.start()

    async def stop(self, drain: float = 0.0) -> None:
        """Take no more keys; let the reconciles running now finish for up to ``drain`` seconds (see
        :meth:`WorkQueue.stop`), and log the ones that did not."""
        if self.queue is None:
            return
        cut = await self.queue.stop(drain)
        if cut:
            logger.warning(
                "stopping: %d reconcile(s) still running after %.1f s are cut: %s",
                len(cut),
                drain,
                ", ".join(sorted(str(key) for key in cut)),
            )

    # -- producers -----------------------------------------------------------------------------------

    def enqueue(self, key: Key) -> None:
        """Reconcile ``key`` soon (call on the event loop: watch handlers run there)."""
        if self.queue is not None:
            self.queue.add(key)

    def enqueue_threadsafe(self, key: Key) -> None:
        """:meth:`enqueue` from any thread (reconciles, source watchers, probes)."""
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.enqueue, key)

    def forget(self, key: Key) -> None:
        """``key``'s object is gone: clear it from every per-key memory and the queue's backoff."""
        self.memories.forget(key)
        if self.queue is not None:
            self.queue.forget(key)

    @property
    def depth(self) -> int:
        return self.queue.depth if self.queue is not None else 0

    def stuck(self, bound: float) -> str | None:
        """Why the workers look stuck (see :meth:`WorkQueue.stuck`); None before the runtime starts."""
        return self.queue.stuck(bound) if self.queue is not None else None

    @property
    def idle(self) -> bool:
        """Nothing due, nothing being reconciled (keys waiting for their time do not count: settled objects may wait
        for a look much later — a bound binding's resync — and would keep the controller from ever being idle)."""
        return self.queue is None or (self.queue.due == 0 and self.queue.in_flight == 0)

    # -- reconciling ---------------------------------------------------------------------------------

    def reconcile_now(self, key: Key) -> Outcome:
        """One reconcile of ``key`` in the calling thread, under the error table (tests and tools use this;
        the workers call it too)."""
        reconciler = self._kinds[key.kind]
        self.reconciles += 1
        due = self._rechecks.get(key)
        if due is not None and due <= self.clock.monotonic() + 0.01:
            self._rechecks.forget(key)
        with metrics.reconcile_timer(key.kind):
            try:
                outcome = reconciler.reconcile(key)
            except Exception as exc:
                failure = classify(exc)
                metrics.RECONCILE_ERRORS.labels(kind=key.kind, reason=failure.label).inc()
                if failure.handling is Handling.REREAD:
                    reconciler.reread(key)
                    streak = (self._conflicts.get(key) or 0) + 1
                    self._conflicts.put(key, streak)
                    return Outcome(requeue_after=self.policies.delay(self.policies.conflicts, streak))
                self._conflicts.forget(key)
                self._show(reconciler, key, exc)
                if failure.handling is Handling.TRANSIENT:
                    raise TemporaryError(failure.message) from exc
                raise
        self._conflicts.forget(key)
        self._clear(reconciler, key)
        return self._coalesced(key, outcome)

    def _show(self, reconciler: Reconciler, key: Key, exc: Exception) -> None:
        """Show ``exc`` on ``key``'s object (best effort: a failure to show it is one log line)."""
        failure = shown_for(exc)
        if failure is None or not isinstance(reconciler, ShowsFailures):
            return
        try:
            shown = reconciler.show_failure(key, failure, self._shown.get(key), self.clock.now())
        except Exception as failed:  # the object may be gone, or the API server down: the retry shows it later
            logger.warning("could not show the failure of %s on it: %s", key, classify(failed).message)
            return
        if shown is None:
            self._shown.forget(key)
        else:
            self._shown.put(key, shown)

    def _clear(self, reconciler: Reconciler, key: Key) -> None:
        """A reconcile of ``key`` succeeded: take back the failure its object showed, if it showed one."""
        shown = self._shown.get(key)
        if shown is None or not isinstance(reconciler, ShowsFailures):
            return
        self._shown.forget(key)
        try:
            reconciler.clear_failure(key, shown)
        except Exception as failed:
            logger.warning("could not take back the failure shown on %s: %s", key, classify(failed).message)

    async def _reconcile(self, key: object) -> Outcome:
        assert isinstance(key, Key), f"not a Key: {key!r}"
        return await asyncio.to_thread(self.reconcile_now, key)

    def _coalesced(self, key: Key, outcome: Outcome) -> Outcome:
        """``outcome``, unless the re-check it asks for is already covered by an earlier scheduled one."""
        delay = outcome.requeue_after
        if delay is None or delay <= self.policies.conflicts.base:
            return outcome
        now = self.clock.monotonic()
        pending = self._rechecks.get(key)
        if pending is not None and now < pending <= now + delay + 0.01:
            return DONE
        self._rechecks.put(key, now + delay)
        return outcome
