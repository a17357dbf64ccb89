"""Bulk work steps aside for syncs in flight, and never for longer than its bound; the garbage
collector's full passes, which stop everything, are rare once the server has started."""

from __future__ import annotations

import asyncio
import itertools
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bench.workload import batches
from tests.processes import fresh_ports, running_sidecar, serve_env
from watchdog.shell.priority import SLICE_SECONDS, Priority


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


async def _turns_until(done: asyncio.Event, log: list[str]) -> None:
    """Marks every loop turn in ``log`` until ``done``."""
    while not done.is_set():
        log.append("turn")
        await asyncio.sleep(0)


async def test_bulk_work_takes_one_slice_per_loop_turn_in_order() -> None:
    priority = Priority()
    log: list[str] = []
    done = asyncio.Event()

    async def bulk(name: str) -> None:
        for index in range(3):
            await priority.turn()
            log.append(f"{name}{index}")

    ticker = asyncio.create_task(_turns_until(done, log))
    await asyncio.gather(bulk("a"), bulk("b"), bulk("c"))
    done.set()
    await ticker
    slices = [entry for entry in log if entry != "turn"]
    assert slices == ["a0", "b0", "c0", "a1", "b1", "c1", "a2", "b2", "c2"]  # first come first
    for before, after in itertools.pairwise(log):  # the loop turns between two slices
        assert before == "turn" or after == "turn", log


async def test_bytes_at_the_control_api_hold_bulk_work_until_their_request_is_dispatched() -> None:
    priority = Priority(max_pause=5.0)
    order: list[str] = []

    async def bulk() -> None:
        for index in range(2):
            await priority.turn()
            order.append(f"slice {index}")

    priority.arrived()
    task = asyncio.create_task(bulk())
    for _ in range(20):
        await asyncio.sleep(0)
    assert order == []  # held, although nothing is in flight yet
    priority.dispatched()
    await asyncio.wait_for(task, 1.0)
    assert order == ["slice 0", "slice 1"]


async def test_a_slice_let_go_just_before_a_sync_arrived_waits_for_it() -> None:
    priority = Priority(max_pause=5.0)
    order: list[str] = []

    async def bulk() -> None:
        await priority.turn()
        order.append("slice")

    task = asyncio.create_task(bulk())
    await asyncio.sleep(0)  # the bulk task is at its turn
    await asyncio.sleep(0)  # ... and its turn has been let go
    with priority.sync():  # a sync comes in before the slice's task wakes up
        for _ in range(10):
            await asyncio.sleep(0)
        order.append("sync answered")
    await asyncio.wait_for(task, 1.0)
    assert order == ["sync answered", "slice"]


async def test_bytes_that_never_make_a_request_hold_bulk_work_for_one_pause_only() -> None:
    priority = Priority(max_pause=0.01)
    priority.arrived()  # half a request, then silence
    loop = asyncio.get_running_loop()
    started = loop.time()
    for _ in range(3):
        await asyncio.wait_for(priority.turn(), 1.0)
    assert loop.time() - started < 0.5
    assert not priority.holding


async def test_sliced_turns_when_the_work_on_its_items_took_a_slice() -> None:
    priority = Priority()
    log: list[str] = []
    done = asyncio.Event()
    ticker = asyncio.create_task(_turns_until(done, log))
    await asyncio.sleep(0)
    async for item in priority.sliced(range(4)):
        log.append(f"item{item}")
        time.sleep(SLICE_SECONDS * 1.5)  # work longer than a slice on each item
    quick: list[int] = [item async for item in priority.sliced(range(1000))]
    done.set()
    await ticker
    items = [index for index, entry in enumerate(log) if entry.startswith("item")]
    assert len(items) == 4 and all(b - a > 1 for a, b in itertools.pairwise(items)), log
    assert quick == list(range(1000))


def collections(metrics_port: int) -> dict[str, float]:
    """``python_gc_collections_total`` by generation, from the process's /metrics."""
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {sample.labels["generation"]: sample.value
            for family in text_string_to_metric_families(text)
            if family.name == "python_gc_collections"
            for sample in family.samples if sample.name.endswith("_total")}


@pytest.mark.timeout(600)  # 61,440 spans: on a machine shared with other tests, minutes
def test_the_served_process_runs_no_full_collection_under_load(tmp_path: Path) -> None:
    """``watchdog serve`` as deployed: a load that makes hundreds of young collections (and,
    with CPython's defaults, full ones over a thousand open runs) pauses for no full one."""
    ports = fresh_ports()
    with running_sidecar(serve_env(tmp_path, ports), ports["metrics"]):
        before = collections(ports["metrics"])
        url = f"http://127.0.0.1:{ports['otlp_http']}/v1/traces"
        for body in batches(1000, 512, 61_440, workload="rules-firing"):
            request = urllib.request.Request(url, data=body, method="POST", headers={
                "Content-Type": "application/x-protobuf"})
            with urllib.request.urlopen(request, timeout=30) as response:
                assert response.status == 200
        after = collections(ports["metrics"])
    assert after["0"] - before["0"] > 100  # the load did make garbage to collect
    assert after["2"] == before["2"]
