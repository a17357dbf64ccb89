"""A flush is written in parts (``WRITE_PART_RUNS`` runs with their activity per transaction),
so a sync storing a directive meanwhile contends with one part: every run and every entry still
lands, and a part that cannot be written puts the whole flush back."""

from __future__ import annotations

import asyncio
from pathlib import Path

from watchdog.persist import WRITE_PART_RUNS, StateWriter
from watchdog.runs.activity import ActivityEntry
from watchdog.runs.record import KeySource
from watchdog.runs.run import RunState
from watchdog.sessions import SessionBook
from watchdog.store import Store, StoreWriteError


class Observer:
    def __init__(self) -> None:
        self.failed: list[str] = []
        self.writable: list[bool] = []

    def run_failed(self, stage: str) -> None:
        self.failed.append(stage)

    def state_writable(self, writable: bool) -> None:
        self.writable.append(writable)


def writer(tmp_path: Path) -> tuple[StateWriter, Store, Observer]:
    store = Store(str(tmp_path))
    observer = Observer()
    sessions = SessionBook(lambda _id: None)
    return StateWriter(store, sessions, observer, str(tmp_path), lambda *_: None), store, observer


def changed_runs(state: StateWriter, count: int) -> None:
    for index in range(count):
        run = RunState(f"run-{index}", KeySource.WATCHDOG, f"{index:032x}", 1.7e9)
        entries = [ActivityEntry(run.key, seq, 1.7e9 + seq, "tool", "read_file", None, "ok")
                   for seq in (1, 2)]
        state.take({run.key: run}, entries)


def test_a_flush_larger_than_a_part_stores_every_run_and_entry(tmp_path: Path) -> None:
    state, store, _ = writer(tmp_path)
    count = WRITE_PART_RUNS * 2 + 37
    changed_runs(state, count)
    assert asyncio.run(state.save_pending()) is True
    assert len(store.load_runs(True, 10 * count)) == count
    assert [entry.seq for entry in store.activity(f"run-{count - 1}")] == [1, 2]
    assert [entry.seq for entry in store.activity("run-0")] == [1, 2]


def test_a_part_that_cannot_be_written_puts_the_whole_flush_back(tmp_path: Path) -> None:
    state, store, observer = writer(tmp_path)
    count = WRITE_PART_RUNS * 2 + 1
    changed_runs(state, count)
    write, calls = store.write, []

    def failing_second_part(rows: object) -> None:
        calls.append(rows)
        if len(calls) == 2:
            raise StoreWriteError("disk full")
        write(rows)  # type: ignore[arg-type]

    store.write = failing_second_part  # type: ignore[method-assign]
    assert asyncio.run(state.save_pending()) is False
    assert observer.writable == [False] and state.state_error == "disk full"
    assert len(state.unsaved("run-0")) == 2  # pending again, though its part was written
    store.write = write  # type: ignore[method-assign]
    assert asyncio.run(state.save_pending()) is True
    assert observer.writable == [False, True] and state.state_error is None
    assert len(store.load_runs(True, 10 * count)) == count
    assert [entry.seq for entry in store.activity(f"run-{count - 1}")] == [1, 2]
