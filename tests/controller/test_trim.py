"""Memory is given back to the system after a burst of reconciles, once the queue has drained."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from opbroker.controller.runtime import trim
from opbroker.controller.runtime.clock import FakeClock
from opbroker.controller.runtime.policies import DEFAULTS

TRIM_PROBE = """
import ctypes, ctypes.util, os
from opbroker.controller.runtime import trim


def resident_bytes():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


found = trim.libc_trim()
assert found is not None
libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
blocks = [libc.malloc(4096) for _ in range(10_000)]
for block in blocks:
    ctypes.memset(block, 1, 4096)  # touched: resident
pin = libc.malloc(16)
for block in blocks:
    libc.free(block)
before = resident_bytes()
assert found() == 1
print(before - resident_bytes())
libc.free(pin)
"""


@pytest.mark.process
def test_glibc_trim_is_found_here_and_gives_freed_memory_back() -> None:
    """40 MB freed inside the heap (a small block allocated after them keeps the heap from shrinking on its own)
    stays resident until the trim found here hands it back to the kernel. Measured in a fresh interpreter: in the
    test process the blocks reuse whatever earlier tests left free in its heap, so how much was resident to give
    back depended on the tests run before (23 MB once, in a whole run)."""
    shown = subprocess.run([sys.executable, "-c", TRIM_PROBE], capture_output=True, text=True, check=True)
    released = int(shown.stdout.strip())
    assert released > 30_000_000, released


ARENAS_PROBE = """
import ctypes, ctypes.util, sys, threading
from opbroker.controller.runtime import trim
if sys.argv[1] == "limited":
    assert trim.limit_arenas(2)
libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
held = []
together = threading.Barrier(6)
def allocate():
    together.wait()  # all six alive at once: glibc hands a thread's arena on only once that thread has ended
    held.extend(libc.malloc(1024) for _ in range(1000))
    together.wait()
threads = [threading.Thread(target=allocate) for _ in range(6)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
libc.malloc_stats()  # one "Arena n:" paragraph per arena, on stderr
"""


@pytest.mark.process
@pytest.mark.parametrize(("mode", "most"), [("limited", 2), ("default", None)])
def test_the_allocator_is_held_to_two_arenas(mode: str, most: int | None) -> None:
    """With the limit, six allocating threads share two arenas; without it glibc gives them more (so the test
    can tell): each thread's arena holds what it allocated among what it freed, out of a trim's reach."""
    shown = subprocess.run([sys.executable, "-c", ARENAS_PROBE, mode], capture_output=True, text=True, check=True)
    arenas = shown.stderr.count("Arena ")
    if most is None:
        assert arenas > 2, shown.stderr
    else:
        assert 1 <= arenas <= most, shown.stderr


def test_trims_once_per_burst_and_only_when_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    trims: list[int] = []
    state = {"reconciles": 0, "idle": False}
    monkeypatch.setattr(trim, "libc_trim", lambda: lambda: trims.append(state["reconciles"]) or 1)
    clock = FakeClock()

    async def waiting_on_the_clock() -> None:
        """Until the trimmer waits for its next period (its trim runs in a thread: a real deadline bounds this)."""
        deadline = asyncio.get_running_loop().time() + 10
        await asyncio.sleep(0)
        while clock.waiting != 1:
            assert asyncio.get_running_loop().time() < deadline, "the trimmer does not wait on the clock"
            await asyncio.sleep(0.001)

    async def look() -> None:
        """One period of the fake clock passes; return once the trimmer has looked (and trimmed, if it did)."""
        clock.advance(DEFAULTS.memory_trim.base)
        await waiting_on_the_clock()

    async def scenario() -> None:
        task = asyncio.create_task(
            trim.trim_when_settled(lambda: state["reconciles"], lambda: bool(state["idle"]), clock=clock)
        )
        await waiting_on_the_clock()  # started: waits for its first look
        await look()
        assert trims == []  # nothing happened yet
        state["reconciles"] = 10
        await look()
        assert trims == []  # busy: never while reconciles run
        state["idle"] = True
        await look()
        assert trims == [10]  # the burst settled: once
        await look()
        assert trims == [10]  # ... and only once
        state["reconciles"] = 12
        await look()
        assert trims == [10, 12]
        task.cancel()

    asyncio.run(scenario())
