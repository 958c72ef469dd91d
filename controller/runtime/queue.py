"""The runtime's rate-limited work queue with client-go semantics, for level-triggered reconciliation, fair
across namespaces.

Why our own queue: the informers deliver watch events; what to do about an object is decided by
reading its current state, not the event. Events only *enqueue* keys. The queue guarantees that

* a key is never processed by two workers at once (a key added while being processed is marked dirty and
  processed again right after, so no change is lost);
* many events for one key collapse into one reconcile;
* a failing key is retried with exponential backoff (per key, reset on success), and a key that is
  waiting on something outside (an operator's status) is re-checked after the delay its reconcile asked for.

Why fair (issue 42, nothing a tenant writes sizes the controller): with one FIFO, a tenant that creates a
thousand objects in its namespace puts a thousand keys ahead of every other namespace's next change. So ready
keys are held per *tenant* (a key's namespace; cluster-scoped keys share the tenant ``""``), each tenant's in
the order they came, and the tenants are served in turn:

* round robin: a worker takes the first key of the first tenant in the rotation and puts that tenant at the
  back. With ``T`` tenants holding ready keys, a key that is first in its tenant's line starts after at most
  ``T - 1`` keys of other tenants start (each is served at most once before it), whatever their backlog;
* a cap per tenant (``per_tenant``): no more than that many of one tenant's reconciles run at once. A tenant at
  its cap keeps its place in the rotation but is skipped until one of its reconciles finishes, so a flood holds
  at most ``per_tenant`` of the ``workers`` and the others are served by the rest. A worker that finds only
  capped tenants waits until a reconcile finishes or a key is added (no polling). Tenants named ``uncapped`` (the
  platform's own namespaces: every instance of a platform that sends no ``context.namespace`` lives in the control
  plane's) may use every worker, still in turn;
* bounded bookkeeping: a tenant is kept only while it has keys ready or running, so the structures grow with
  the keys in the queue, never with the number of namespaces ever seen. Skipping capped tenants costs at most
  ``workers / per_tenant`` steps per key taken (only a tenant with a running reconcile can be capped).

Time comes from the clock passed in (:mod:`.clock`): tests advance a fake one instead of sleeping.

It also tells whether its workers are stuck (:meth:`WorkQueue.stuck`, for the liveness probe): a reconcile
running past a bound, or keys waiting for a worker while no reconcile has started or finished for as long. Keys
held back by their tenant's cap do not count as waiting for a worker (see :attr:`WorkQueue.held`): they wait for
their tenant's own reconciles, which the first check watches; while other tenants progress, nothing is stuck.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import threading
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Collection, Hashable

from opbroker.controller.runtime.clock import SYSTEM, Clock
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.outcomes import Outcome, TemporaryError
from opbroker.controller.runtime.policies import DEFAULTS, Draw
from opbroker.osbclient import Backoff

logger = logging.getLogger(__name__)


def _no_jitter() -> float:
    return 0.0


Reconcile = Callable[[Hashable], Awaitable[Outcome]]
Tenant = Callable[[Hashable], str]
"""Whose a key is, for fairness: keys of one tenant are served in order and capped together."""


def namespace_of(key: Hashable) -> str:
    """The default tenant of a key: a :class:`.keys.Key`'s namespace; ``""`` for anything else (and for
    cluster-scoped keys, whose namespace is empty)."""
    return key.namespace if isinstance(key, Key) else ""


class WorkQueue:
    """Keys in, reconciles out, with ``workers`` reconciles running concurrently, at most ``per_tenant`` of
    them (default: half the workers, at least one) for one tenant, tenants served in turn."""

    def __init__(
        self,
        reconcile: Reconcile,
        *,
        workers: int = 4,
        per_tenant: int | None = None,
        tenant: Tenant = namespace_of,
        uncapped: Collection[str] = (),
        backoff: Backoff = DEFAULTS.retries,
        draw: Draw = _no_jitter,
        clock: Clock = SYSTEM,
    ) -> None:
        per_tenant = max(1, workers // 2) if per_tenant is None else per_tenant
        if workers < 1 or per_tenant < 1:
            raise ValueError(f"a work queue needs at least one worker and one per tenant ({workers}, {per_tenant})")
        self._reconcile = reconcile
        self._workers = workers
        self._per_tenant = per_tenant
        self._tenant = tenant
        self._uncapped = frozenset(uncapped)
        """Tenants any number of workers may serve at once (still in turn): the platform's own namespaces — the
        control plane's, where every instance of a platform without ``context.namespace`` is recorded."""
        self._backoff = backoff
        """A failed reconcile's retry (the policy table's ``retries``), jittered by ``draw`` (default: none)."""
        self._draw = draw
        self._clock = clock
        self._failures: dict[Hashable, int] = {}
        """Failures in a row per key (reset on success or :meth:`forget`)."""
        self._lines: OrderedDict[str, deque[Hashable]] = OrderedDict()
        """Ready keys per tenant, each tenant's in arrival order; the dict's order is the rotation. Only tenants
        with a ready key are in it."""
        self._queued: set[Hashable] = set()
        """Every ready key (those in :attr:`_lines`), to collapse repeated adds."""
        self._processing: set[Hashable] = set()
        self._dirty: set[Hashable] = set()
        self._delayed: list[tuple[float, int, Hashable]] = []
        self._due_at: dict[Hashable, float] = {}
        """When each delayed key is due: one time per key, the earliest asked (an entry of :attr:`_delayed` that is
        not its key's time here is stale, and skipped when it comes up)."""
        self._sequence = itertools.count()
        self._wakeup = asyncio.Event()
        """Wakes the timer: a delayed key was added."""
        self._changed = asyncio.Event()
        """Wakes idle workers: a key was added or a reconcile finished (a capped tenant may be served again)."""
        self._tasks: list[asyncio.Task[None]] = []
        self._busy: dict[asyncio.Task[None], Hashable] = {}
        """The workers running a reconcile now, and its key (set and cleared with no await between: exact whenever
        the event loop runs anything else, :meth:`stop` included)."""
        self._closing = False
        self._drained = asyncio.Event()
        """Set once no reconcile runs any more after :meth:`stop` began."""
        # When each running reconcile started, and when one last started or finished (monotonic), and how many
        # reconciles each tenant runs (only tenants running one): read by the health server's threads, hence
        # the lock.
        self._progress_lock = threading.Lock()
        self._running_since: dict[Hashable, float] = {}
        self._running: dict[str, int] = {}
        self._moved_at = clock.monotonic()

    # -- producers -----------------------------------------------------------------------------------

    def add(self, key: Hashable) -> None:
        """Reconcile ``key`` as soon as a worker is free and its tenant's turn comes (at most once however
        often it is added)."""
        if key in self._processing:
            self._dirty.add(key)
            return
        if key in self._queued:
            return
        self._queued.add(key)
        tenant = self._tenant(key)
        line = self._lines.get(tenant)
        if line is None:
            line = self._lines[tenant] = deque()  # a tenant new to the rotation joins at its back
        line.append(key)
        self._changed.set()

    def add_after(self, key: Hashable, delay: float) -> None:
        """Reconcile ``key`` after ``delay`` seconds (earlier if it is added meanwhile). A key already waiting for
        an earlier time keeps it (the reconcile then asks for its own next time); a later one is moved earlier. One
        waiting time per key, as client-go's delaying queue keeps: each reconcile asks for its look after, and every
        settled instance asks for its resync on every reconcile — kept each, the entries of a key grew by one per
        event and never shrank (each firing reconcile asked for the next), so its resyncs multiplied."""
        if delay <= 0:
            self.add(key)
            return
        due = self._clock.monotonic() + delay
        waiting = self._due_at.get(key)
        if waiting is not None and waiting <= due:
            return
        self._due_at[key] = due
        heapq.heappush(self._delayed, (due, next(self._sequence), key))
        self._wakeup.set()

    def forget(self, key: Hashable) -> None:
        """The object is gone: drop its backoff history (pending entries run and find nothing)."""
        self._failures.pop(key, None)

    @property
    def depth(self) -> int:
        return len(self._queued) + len(self._due_at)

    @property
    def due(self) -> int:
        """Keys due now: ready, or held back by their tenant's cap (not those waiting for their time)."""
        return len(self._queued)

    @property
    def delayed(self) -> int:
        """Keys waiting for their time."""
        return len(self._due_at)

    @property
    def ready(self) -> int:
        """Keys waiting for a free worker: ready keys of tenants below their cap (not those waiting for their
        time, nor those held back by their tenant's cap: :attr:`held`). Thread-safe."""
        with self._progress_lock:
            return self._waiting()

    @property
    def held(self) -> int:
        """Ready keys held back because their tenant runs ``per_tenant`` reconciles already. Thread-safe."""
        with self._progress_lock:
            return self._held()

    @property
    def in_flight(self) -> int:
        """Keys being reconciled now."""
        return len(self._processing)

    @property
    def tenants(self) -> int:
        """Tenants the queue keeps anything for (a key ready or running): zero once everything has run."""
        return len(self._lines.keys() | self._running.keys())

    def stuck(self, bound: float, now: float | None = None) -> str | None:
        """Why the workers look stuck (None: they do not). Thread-safe."""
        now = self._clock.monotonic() if now is None else now
        with self._progress_lock:
            running = list(self._running_since.values())
            moved_at = self._moved_at
            waiting = self._waiting()
        return stuck(now=now, running_since=running, waiting=waiting, moved_at=moved_at, bound=bound)

    def _held(self) -> int:
        """:attr:`held`, under the lock: only a tenant running a reconcile can be capped, so this looks at no
        more tenants than there are workers (and at the lines only by length, safe from another thread)."""
        held = 0
        for tenant, running in self._running.items():
            if running >= self._cap(tenant):
                line = self._lines.get(tenant)
                held += len(line) if line is not None else 0
        return held

    def _waiting(self) -> int:
        """:attr:`ready`, under the lock."""
        return max(0, len(self._queued) - self._held())

    # -- running -------------------------------------------------------------------------------------

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._worker(i), name=f"reconcile-worker-{i}") for i in range(self._workers)]
        self._tasks.append(asyncio.create_task(self._timer(), name="reconcile-timer"))

    async def stop(self, drain: float = 0.0) -> list[Hashable]:
        """Stop the workers: none takes another key, and the reconciles running now have up to ``drain`` seconds
        to finish, on the queue's clock — a reconcile cut half-way leaves its object for the next controller to find
        half-done, so a graceful stop lets it end. Returns the keys still running when the time was up (their workers
        are cancelled; their threads end with the process)."""
        self._closing = True
        busy = dict(self._busy)
        for task in self._tasks:
            if task not in busy:
                task.cancel()  # waiting for a key or a timer: nothing half-done
        if busy:
            await self._clock.wait(self._drained, drain)
        cut = list(self._busy.values())
        for task in list(self._busy):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        return cut

    async def _timer(self) -> None:
        while True:
            now = self._clock.monotonic()
            while self._delayed and self._delayed[0][0] <= now:
                due, _, key = heapq.heappop(self._delayed)
                if self._due_at.get(key) != due:
                    continue  # stale: its key was moved earlier (and has run since)
                del self._due_at[key]
                self.add(key)
            timeout = self._delayed[0][0] - now if self._delayed else None
            self._wakeup.clear()
            await self._clock.wait(self._wakeup, timeout)

    async def _next(self) -> tuple[Hashable, str]:
        """The next key to reconcile and its tenant, marked running; waits while there is none a worker may
        take (no key ready, or only keys of capped tenants)."""
        while True:
            taken = self._take()
            if taken is not None:
                return taken
            # Nothing awaits between the look and the clear: no add or finish can slip in and be missed.
            self._changed.clear()
            await self._changed.wait()

    def _take(self) -> tuple[Hashable, str] | None:
        """The first key of the first tenant in the rotation below its cap, marked running; that tenant goes
        to the back of the rotation (or leaves it, its line empty). None: no tenant may be served now."""
        tenant = self._turn()
        if tenant is None:
            return None
        line = self._lines[tenant]
        key = line.popleft()
        if line:
            self._lines.move_to_end(tenant)
        else:
            del self._lines[tenant]
        self._queued.discard(key)
        self._processing.add(key)
        with self._progress_lock:
            self._running[tenant] = self._running.get(tenant, 0) + 1
            self._running_since[key] = self._moved_at = self._clock.monotonic()
        return key, tenant

    def _turn(self) -> str | None:
        """The first tenant in the rotation below its cap (None: every tenant with a ready key is capped).
        Only the capped tenants before it are looked at: no more than ``workers / per_tenant``."""
        for tenant in self._lines:
            if self._running.get(tenant, 0) < self._cap(tenant):
                return tenant
        return None

    def _cap(self, tenant: str) -> int:
        """How many of ``tenant``'s reconciles may run at once."""
        return self._workers if tenant in self._uncapped else self._per_tenant

    def _finished(self, key: Hashable, tenant: str) -> None:
        """``key``'s reconcile is over: its tenant runs one fewer (and is forgotten once it runs none), a dirty
        key goes back in line, and idle workers look again (the tenant may have been at its cap)."""
        with self._progress_lock:
            self._running_since.pop(key, None)
            self._moved_at = self._clock.monotonic()
            running = self._running[tenant] - 1
            if running:
                self._running[tenant] = running
            else:
                del self._running[tenant]
        self._processing.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)
        self._changed.set()

    async def _worker(self, index: int) -> None:
        me = asyncio.current_task()
        assert me is not None
        while not self._closing:
            key, tenant = await self._next()
            self._busy[me] = key
            try:
                outcome = await self._reconcile(key)
            except asyncio.CancelledError:
                raise
            except TemporaryError as exc:
                delay = self._retry_delay(key)
                logger.warning("reconcile of %s: %s; retrying in %.1fs", key, exc, delay)
                self.add_after(key, delay)
            except Exception:
                delay = self._retry_delay(key)
                logger.exception("reconcile of %s failed; retrying in %.1fs", key, delay)
                self.add_after(key, delay)
            else:
                self._failures.pop(key, None)
                if outcome.requeue_after is not None:
                    self.add_after(key, outcome.requeue_after)
            finally:
                del self._busy[me]
                self._finished(key, tenant)
                if self._closing and not self._busy:
                    self._drained.set()

    def _retry_delay(self, key: Hashable) -> float:
        """Count one more failure of ``key`` in a row; the wait before its retry."""
        failures = self._failures[key] = self._failures.get(key, 0) + 1
        return self._backoff.delay(failures, self._draw())


def stuck(*, now: float, running_since: list[float], waiting: int, moved_at: float, bound: float) -> str | None:
    """Why workers look stuck, from their bookkeeping (pure): a reconcile started more than ``bound`` seconds
    ago and still running, or keys waiting for a worker while no reconcile started or finished (``moved_at``)
    for ``bound`` seconds."""
    oldest = min(running_since, default=None)
    if oldest is not None and now - oldest > bound:
        return f"a reconcile has been running for {now - oldest:.0f} s (bound {bound:.0f} s)"
    if waiting and now - moved_at > bound:
        return f"{waiting} keys wait for a worker and no reconcile has moved for {now - moved_at:.0f} s"
    return None
