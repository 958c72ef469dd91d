"""Giving memory back to the system once a burst of work has settled.

A (re)start reads every watched object: the informers' listings of our kinds, the source watches' listings (every
Secret), and the reconciles that follow. Most of what that allocates is freed again, but glibc's allocator
keeps freed memory for reuse instead of returning it: measured after a restart over 1 000 instances and
2 000 bindings, the process kept tens of MiB it no longer used. ``malloc_trim(0)`` hands such free memory
back to the system. It runs when the work queue has drained after reconciles (never while reconciles run:
it takes the allocator's lock), and costs a few milliseconds. Without glibc (musl, macOS) it does nothing.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
from collections.abc import Callable
from typing import Any

from opbroker.controller.runtime.clock import SYSTEM, Clock
from opbroker.controller.runtime.policies import DEFAULTS

logger = logging.getLogger(__name__)


def _libc_function(name: str) -> Any:
    """The C library's function ``name``, or None where there is none (no glibc: musl, macOS)."""
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):
        return None


def libc_trim() -> Callable[[], int] | None:
    """glibc's ``malloc_trim(0)``, or None where there is none."""
    trim = _libc_function("malloc_trim")
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: int(trim(0))


#: glibc's ``mallopt`` parameter for the most arenas the allocator may create (``M_ARENA_MAX``).
_M_ARENA_MAX = -8
#: Arenas the controller's allocator may use. glibc gives each thread that meets contention an arena of its own
#: (up to 8 per core); what an informer thread allocates for a listing — the store's texts among it — then sits in
#: that thread's arena between what it freed, and no trim can hand that back. Measured on a restart over 1 000
#: instances + 2 000 bindings (session 13, three restarts each): 21.3 to 22.9 KiB per settled object with glibc's
#: default, 17.7 to 18.0 with 2 arenas, 16.4 with 1; the CPU to idle the same within the runs' spread.
ARENAS = 2


def limit_arenas(count: int = ARENAS) -> bool:
    """Let glibc's allocator create at most ``count`` arenas (``mallopt(M_ARENA_MAX)``), as ``MALLOC_ARENA_MAX``
    would; whether it took (False without glibc). Called first thing, before the controller starts threads."""
    mallopt = _libc_function("mallopt")
    if mallopt is None:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_ARENA_MAX, count))


async def trim_when_settled(
    reconciles: Callable[[], int],
    idle: Callable[[], bool],
    *,
    every: float = DEFAULTS.memory_trim.base,
    clock: Clock = SYSTEM,
) -> None:
    """Forever: once ``reconciles()`` has moved since the last trim and ``idle()`` holds, trim (looking every
    ``every`` seconds of ``clock``: the runtime's)."""
    trim = libc_trim()
    if trim is None:
        return
    trimmed_at = reconciles()
    while True:
        await clock.sleep(every)
        count = reconciles()
        if count != trimmed_at and idle():
            await asyncio.to_thread(trim)
            trimmed_at = count
