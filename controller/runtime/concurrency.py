"""The controller's one concurrency rule (issue 45), and the one place its kinds get a thread primitive from.

Watches and timers are asyncio tasks on the process's one loop; blocking work runs only in the runtime's one pool
(``asyncio.to_thread``: the reconciles, the timers' blocking steps); threads are started only inside the runtime,
each saying why it is one (the informers' streams, until they have an async transport; the health server, which
must answer when the loop itself has stopped; the lease's lane, so a renewal never waits behind reconciles). What
the loop and the pool's threads share outside the runtime is guarded with these: the kinds import them from here,
never ``threading`` itself, so an import contract (``controller-threads-in-runtime``) keeps thread starts in the
runtime.
"""

from __future__ import annotations

import threading

Lock = threading.Lock
"""A mutual-exclusion lock for state shared by the loop and the pool's threads."""

Event = threading.Event
"""A flag set once, waited on from a pool thread (a start-up picture made whole, a listing synced)."""
