"""Memory is given back to the system after a burst of reconciles, once the queue has drained."""

from __future__ import annotations

import asyncio

import pytest

from opbroker.controller import trim


def test_glibc_trim_is_found_here() -> None:
    found = trim.libc_trim()
    assert found is not None and found() in (0, 1)


def test_trims_once_per_burst_and_only_when_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    trims: list[int] = []
    state = {"reconciles": 0, "idle": False}
    monkeypatch.setattr(trim, "libc_trim", lambda: lambda: trims.append(state["reconciles"]) or 1)

    async def scenario() -> None:
        task = asyncio.create_task(
            trim.trim_when_settled(lambda: state["reconciles"], lambda: bool(state["idle"]), every=0.01)
        )
        await asyncio.sleep(0.05)
        assert trims == []  # nothing happened yet
        state["reconciles"] = 10
        await asyncio.sleep(0.05)
        assert trims == []  # busy: never while reconciles run
        state["idle"] = True
        await asyncio.sleep(0.05)
        assert trims == [10]  # the burst settled: once
        state["reconciles"] = 12
        await asyncio.sleep(0.05)
        assert trims == [10, 12]
        task.cancel()

    asyncio.run(scenario())
