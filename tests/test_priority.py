"""Bulk work steps aside for syncs in flight, and never for longer than its bound."""

from __future__ import annotations

import asyncio

from watchdog.priority import Priority


async def test_bulk_work_waits_for_a_sync_in_flight_then_goes_on() -> None:
    priority = Priority(max_pause=5.0)
    order: list[str] = []

    async def bulk() -> None:
        for index in range(3):
            order.append(f"slice {index}")
            await priority.turn()

    async def sync() -> None:
        with priority.sync():
            order.append("sync starts")
            for _ in range(5):  # a sync's several turns of the loop (apply, store, publish)
                await asyncio.sleep(0)
            order.append("sync answered")

    await asyncio.gather(sync(), bulk())
    assert order == ["sync starts", "slice 0", "sync answered", "slice 1", "slice 2"]


async def test_a_stream_of_syncs_slows_bulk_work_but_never_stops_it() -> None:
    priority = Priority(max_pause=0.01)
    done = asyncio.Event()

    async def bulk() -> None:
        for _ in range(3):
            await priority.turn()
        done.set()

    with priority.sync():  # a sync that is never answered
        await asyncio.wait_for(bulk(), 1.0)
    assert done.is_set()
