"""The worker lane (:mod:`watchdog.shell.state.lanes`): one named thread, work in submission order,
errors raised to the caller unchanged, nothing accepted after close — and the sidecar's four lanes
are built with it."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from watchdog.core.sessions import SessionBook
from watchdog.shell.directives.outbox import Outbox
from watchdog.shell.directives.store import DirectiveStore
from watchdog.shell.state.lanes import Lane
from watchdog.shell.state.persist import StateWriter
from watchdog.shell.state.queries import RunQueries
from watchdog.shell.state.store import Store


def test_work_runs_on_one_named_thread_in_submission_order() -> None:
    lane = Lane("test-lane")
    done: list[int] = []
    threads: set[str] = set()

    def work(index: int) -> int:
        threads.add(threading.current_thread().name)
        time.sleep(0.002 * (5 - index))  # the first submitted is the slowest: order still holds
        done.append(index)
        return index * 10

    async def main() -> list[int]:
        return list(await asyncio.gather(*(lane.run(work, index) for index in range(5))))

    try:
        assert asyncio.run(main()) == [0, 10, 20, 30, 40]
    finally:
        lane.close()
    assert done == [0, 1, 2, 3, 4]
    assert threads == {"test-lane_0"}


def test_an_error_reaches_the_caller_unchanged_and_the_lane_goes_on() -> None:
    lane = Lane("test-lane")

    def fail(message: str) -> None:
        raise KeyError(message)

    async def main() -> str:
        with pytest.raises(KeyError, match="lost"):
            await lane.run(fail, "lost")
        return await lane.run(str.upper, "still here")

    try:
        assert asyncio.run(main()) == "STILL HERE"
    finally:
        lane.close()


def test_close_waits_for_submitted_work_and_refuses_more() -> None:
    lane = Lane("test-lane")
    finished: list[str] = []

    async def main() -> None:
        started = asyncio.get_running_loop().create_future()
        loop = asyncio.get_running_loop()

        def slow() -> None:
            loop.call_soon_threadsafe(started.set_result, None)
            time.sleep(0.05)
            finished.append("slow")

        pending = asyncio.ensure_future(lane.run(slow))
        await started
        lane.close()  # blocks until slow() returns
        assert finished == ["slow"]
        await pending
        with pytest.raises(RuntimeError, match="shutdown"):
            await lane.run(str.upper, "late")
        lane.close()  # idempotent

    asyncio.run(main())


def test_the_sidecars_lanes_keep_their_thread_names(tmp_path: Path) -> None:
    """Thread lists (and the API's reader-lane test) show these names."""
    store = Store(str(tmp_path))
    state = StateWriter(store, SessionBook(lambda _id: None), None,  # type: ignore[arg-type]
                        str(tmp_path), lambda *_: None)
    queries = RunQueries(None, store, None, lambda _key: [],  # type: ignore[arg-type]
                         lambda *_: None, 10)
    outbox = Outbox(DirectiveStore(str(tmp_path)))

    def thread() -> str:
        return threading.current_thread().name

    async def main() -> list[str]:
        await outbox.restore()
        names = [await state.in_lane(thread), await queries._lane.run(thread),
                 await outbox._lane.run(thread), await outbox.hub.reader.run(thread)]
        await outbox.stop()
        await state.close()
        return names

    try:
        assert asyncio.run(main()) == ["watchdog-store_0", "watchdog-reader_0",
                                       "watchdog-directives_0", "watchdog-directives-read_0"]
    finally:
        queries.close()
