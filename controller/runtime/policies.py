"""The controller's one table of timing policies: every backoff and every retry or poll interval, with jitter.

Why one table: the waits were ~30 constants in ~20 modules, each with its reason beside it and none jittered.
Here each is a named, frozen :class:`osbclient.Backoff` (the one value type: ``base``, cap ``maximum``, give-up
``max_duration`` where one applies — ``inf`` where a retry goes on as long as it takes — and ``jitter``, the
fraction of a wait a random draw may take off), documented with why it has the value it has. The table is
:attr:`ControllerSettings.policies <opbroker.controller.settings.ControllerSettings.policies>`; the runtime and
the subsystems are handed it and read their waits from it, so a test (or an operator, ``--policy
NAME=BASE[:CAP[:GIVE_UP[:JITTER]]]``) sets any of them in one place.

Why jitter: waits that start together end together. A controller restarting over a thousand operations, or a
broker answering a hundred polls with one error, otherwise sends every retry of the batch in the same instant,
again and again at each doubling. A draw in [0, 1) takes up to ``jitter`` of each wait off
(:meth:`osbclient.Backoff.delay`): a wait lies in ``[(1 - jitter) * d, d]``, so the cap stays a cap and no
wait grows. Loops that only this process runs (its start-up and API probes, the memory trim, a rollout's looks)
have nothing to be in step with and no jitter.

Where the draws come from: :attr:`Policies.draw`, a random source seeded from ``os.urandom`` (each replica
differs) unless the table names a ``seed`` (tests: the same draws every run). Pure functions never draw: their
caller draws once (:meth:`Policies.delay`, or a fact the edge took) and passes the number in.
"""

from __future__ import annotations

import dataclasses
import os
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property

from opbroker.osbclient import Backoff

INF = float("inf")

Draw = Callable[[], float]
"""A random source: each call a number in [0, 1)."""


def every(seconds: float, *, jitter: float = 0.0) -> Backoff:
    """A fixed interval: ``seconds`` every time (base = cap), never giving up."""
    return Backoff(base=seconds, maximum=seconds, max_duration=INF, jitter=jitter)


def source(seed: int | None = None) -> Draw:
    """A random source: the same numbers for the same ``seed`` (tests), else seeded from ``os.urandom``."""
    return random.Random(seed if seed is not None else int.from_bytes(os.urandom(16), "big")).random


@dataclass(frozen=True)
class Policies:
    """The table (see the module docstring). Every field but :attr:`seed` is a policy."""

    # -- the runtime ---------------------------------------------------------------------------------

    conflicts: Backoff = Backoff(base=0.05, maximum=5.0, max_duration=INF, jitter=0.5)
    """After a conflict (HTTP 409, :class:`.outcomes.Conflict`) the whole reconcile runs again this soon, on a
    fresh read, doubling with each conflict in a row up to the cap: a key whose writes keep losing (another
    writer rewriting the object in a loop) is retried every few seconds, not at 20 Hz for ever. A reconcile that
    ends otherwise starts the count again. Never gives up: a conflict is nobody's failure. Jittered by half: two
    writers that conflicted at once should not retry at once."""
    retries: Backoff = Backoff(base=0.5, maximum=60.0, max_duration=INF, jitter=0.25)
    """A failed reconcile is retried after 0.5 s, doubling with each failure in a row up to a minute (client-go's
    item backoff has the same shape); it never gives up: the object's state, not a count, decides. Jittered: the
    keys one outage failed together come back spread."""
    write_retries: Backoff = Backoff(base=0.05, maximum=1.0, max_duration=10.0, jitter=0.5)
    """A guarded write *outside* a reconcile (``opbroker instance abandon``, a rollout marking its instances, the
    webhook's shared certificate) that met a 409 reads afresh and tries again after this, doubling, until the
    give-up (then it says the object kept changing): no runtime repeats those. Inside a reconcile a conflict
    propagates to :attr:`conflicts` instead. (Was: 2 or 5 tries without a pause.)"""

    drift_backoff: Backoff = Backoff(base=2.0, maximum=300.0, max_duration=INF)
    """Day two: the wait after an object's first correction (opbroker setting back what another writer changed)
    before the next; it doubles with each correction in the drift window, up to that window (a longer wait outlives
    the corrections it counts). Not jittered: it paces one object against its other writer, in step with nobody
    else's (and the pure drift decision takes no draw)."""

    # -- re-checks a reconcile asks for (the safety net under the watch events) -----------------

    in_use_recheck: Backoff = every(30.0, jitter=0.25)
    """How often a catalog entry (SFPlan, SFService) whose deletion waits for its users is looked at again (a
    user's deletion also queues it: this is the safety net)."""
    unresolved_recheck: Backoff = every(30.0, jitter=0.25)
    """Seconds before a Service Catalog Instance or Binding whose references do not resolve is looked at again (a
    class, a Secret or its instance appearing or changing also queues it)."""

    # -- Service Catalog: talking to brokers --------------------------------------------------------

    broker_retries: Backoff = Backoff(base=1.0, maximum=60.0, max_duration=INF, jitter=0.25)
    """The backoff between retries of a transient broker failure (the count is forgotten on success)."""
    broker_polls: Backoff = Backoff(base=1.0, maximum=30.0, max_duration=3600.0, jitter=0.25)
    """The ``last_operation`` poll pacing before a plan's ``maximum_polling_duration`` and
    ``--max-operation-seconds`` shorten its give-up (a broker's ``Retry-After`` replaces it, unjittered)."""
    broker_catalog: Backoff = every(10.0, jitter=0.25)
    """After a failed catalog fetch, when to try again (the runtime's error backoff is for exceptions; this is a
    verdict)."""
    webhook_start: Backoff = every(30.0, jitter=0.25)
    """Pause between attempts to start the admission webhook."""
    webhook_register: Backoff = every(10.0, jitter=0.25)
    """How soon a failed registration of the webhook (the configuration not there yet, an API server starting)
    is tried again."""
    webhook_refresh: Backoff = every(300.0, jitter=0.1)
    """How often a replica re-reads the shared certificate and checks the registered caBundle. Jittered so the
    replicas started together do not read in step."""

    # -- multi-cluster --------------------------------------------------------------------------------

    seed_retry: Backoff = every(2.0, jitter=0.25)
    """How soon a failed seeding of the multi-cluster state (its first listing) is tried again."""
    placement_not_ready: Backoff = every(0.2, jitter=0.25)
    """How soon a placement reconcile waiting for the controller's start-up (first list, first probes) looks
    again."""
    placement_handover: Backoff = every(1.0, jitter=0.25)
    """How soon a binding whose instance is still being handed over to a sister cluster looks again."""

    # -- housekeeping loops ---------------------------------------------------------------------------

    registry_sweep: Backoff = every(600.0, jitter=0.1)
    """How often orphaned registries are looked for: a teardown deletes its own, so this only catches a
    finalizer removed by hand or an object deleted while no controller ran; one list of the registry namespace's
    registries (by label) and one metadata-only listing of instances and of bindings."""
    admin_poll: Backoff = every(2.0, jitter=0.25)
    """Seconds between two looks for new admin requests (previews, rollouts)."""
    rollout_cancel_check: Backoff = every(1.0)
    """A running rollout re-reads its request (for a cancel) at most this often, and wakes from its pacing this
    often to do so: how late a cancel is seen."""
    rollout_settle: Backoff = every(0.5)
    """While a rollout waits for a page of marked instances to finish: how often it looks (a bound on how late it
    sees them settle; one process's loop, no jitter)."""

    # -- watches -------------------------------------------------------------------------------------

    watches: Backoff = Backoff(base=1.0, maximum=30.0, max_duration=INF, jitter=0.5)
    """After a failed list or watch, an informer (:mod:`opbroker.kubeclient.informer`) waits this long before
    listing again, doubling with each failure in a row (a whole listing ends the streak): an API server that
    restarts breaks every stream at once, and they come back spread over the wait, not in one burst of listings
    (client-go's reflector backs off the same way, from 800 ms to 30 s)."""

    # -- this process's own checks (nothing to be in step with: no jitter) -------------------------

    api_ready_poll: Backoff = every(1.0)
    """At start: how often the check for the resources the controller watches runs while something is missing."""
    api_probe: Backoff = every(5.0)
    """How often the API server is probed when nothing else has answered (also the probe's deadline)."""
    memory_trim: Backoff = every(5.0)
    """How often the queue is looked at for a settled moment to return freed memory to the system."""

    seed: int | None = field(default=None, compare=False)
    """The random source's seed (tests); None: seeded from ``os.urandom``."""

    @cached_property
    def draw(self) -> Draw:
        """The table's random source (one per table value: thread-safe, each call one number in [0, 1))."""
        return source(self.seed)

    def delay(self, policy: Backoff, attempt: int = 1) -> float:
        """``policy``'s jittered wait after the ``attempt``-th try in a row (1 for the first; an interval's is
        its one wait)."""
        return policy.delay(attempt, self.draw())

    def attempts(
        self,
        policy: Backoff,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> Iterator[int]:
        """For a loop that must retry in place (see :attr:`write_retries`): the attempt numbers 1, 2, ..., with
        ``policy``'s jittered wait slept before each but the first, and none begun past its give-up duration
        after the first (the loop then ends: its caller says why)."""
        started = clock()
        attempt = 1
        while True:
            yield attempt
            pause = self.delay(policy, attempt)
            if clock() + pause - started > policy.max_duration:
                return
            sleep(pause)
            attempt += 1

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The policies' names (every field but :attr:`seed`)."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.name != "seed")

    def unjittered(self) -> Policies:
        """This table without jitter (every wait exact: tests that assert waits to the tick)."""
        return self._with({name: dataclasses.replace(getattr(self, name), jitter=0.0) for name in self.names()})

    def overridden(self, spec: str) -> Policies:
        """This table with one policy replaced from ``NAME=BASE[:CAP[:GIVE_UP[:JITTER]]]`` (seconds; an omitted
        cap is the base — a fixed interval —, an omitted give-up is the policy's, an omitted jitter too).
        Raises ValueError naming what is wrong."""
        name, sep, values = spec.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in self.names():
            raise ValueError(f"not NAME=BASE[:CAP[:GIVE_UP[:JITTER]]] with a known name ({', '.join(self.names())})")
        old: Backoff = getattr(self, name)
        parts = [float(part) for part in values.split(":")]
        if not 1 <= len(parts) <= 4:
            raise ValueError(f"{name}: one to four numbers, got {values!r}")
        base = parts[0]
        new = Backoff(
            base=base,
            maximum=parts[1] if len(parts) > 1 else base,
            max_duration=parts[2] if len(parts) > 2 else old.max_duration,
            jitter=parts[3] if len(parts) > 3 else old.jitter,
        )
        return self._with({name: new})

    def _with(self, changes: dict[str, Backoff]) -> Policies:
        """This table with the named policies replaced (the seed kept)."""
        kept = {name: getattr(self, name) for name in self.names()}
        return Policies(seed=self.seed, **{**kept, **changes})


DEFAULTS = Policies()
"""The table as documented (pure functions' defaults; the controller's comes from its settings)."""
