"""The day-two resync sweep (``controller/runtime/resync.py``) on a fake clock: it queues only the settled instances
whose objects moved without an event (or that the store cannot answer for), spreads the look over the period, and costs
no reconcile for the others."""

from __future__ import annotations

import asyncio

from opbroker.api.meta import ResourceRef
from opbroker.controller.runtime import resync
from opbroker.controller.runtime.clock import FakeClock
from opbroker.controller.runtime.keys import Key


def ref(name: str, kind: str = "Database") -> ResourceRef:
    return ResourceRef(api_version="demo/v1", kind=kind, name=name, namespace="team")


def followed(name: str, version: str | None = "1") -> resync.Followed:
    return resync.Followed(Key("instance", "team", name), (ref(name),), (version,))


def test_moved_compares_the_versions_read_with_the_stores() -> None:
    store = {"a": "1", "b": "2"}

    def version_of(r: ResourceRef) -> object:
        return store.get(r.name, resync.Unknown) if r.name != "gone" else None

    assert not resync.moved(followed("a"), version_of)
    assert resync.moved(followed("b"), version_of)  # another version than read
    assert resync.moved(followed("c"), version_of)  # the store cannot say (an unwatched kind)
    assert not resync.moved(followed("gone", None), version_of)  # read as absent, still absent
    assert resync.moved(followed("gone", "3"), version_of)  # deleted without an event
    seeded = resync.Followed(Key("instance", "team", "new"), (ref("a"),), ())
    assert resync.moved(seeded, version_of)  # provisioned, never checked as declared: checked once


def test_a_sweep_queues_only_what_moved_spread_over_the_period() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        items = [followed(f"i{n}") for n in range(1000)]
        store = {f"i{n}": "1" for n in range(1000)}
        store["i7"] = "2"
        store["i900"] = "5"
        queued: list[Key] = []
        task = asyncio.create_task(
            resync.sweep_once(
                items, lambda r: store.get(r.name, resync.Unknown), queued.append, period=600, clock=clock
            )
        )
        await asyncio.sleep(0)
        assert [k.name for k in queued] == ["i7"]  # the first batch, at once
        for _ in range(4):  # 5 batches of 200: one every 120 s
            clock.advance(120)
            for _ in range(5):
                await asyncio.sleep(0)
        clock.advance(120)
        assert await task == 2
        assert [k.name for k in queued] == ["i7", "i900"]

    asyncio.run(scenario())


def test_resync_off_never_sweeps() -> None:
    async def scenario() -> None:
        calls: list[str] = []

        def listed() -> list[resync.Followed]:
            calls.append("listed")
            return []

        await resync.resync_forever(listed, lambda r: None, lambda k: None, period=0, clock=FakeClock())
        assert calls == []

    asyncio.run(scenario())
