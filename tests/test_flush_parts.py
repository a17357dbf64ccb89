"""A flush is written in parts (``WRITE_PART_RUNS`` runs with their activity per transaction),
so a sync storing a directive meanwhile contends with one part: every run and every entry still
lands, and a part that cannot be written puts the whole flush back. Sessions are encoded a slice
at a time too, and a checkpoint stored meanwhile is never overwritten by the flush's older
snapshot of its session."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import TypeVar

import pytest

from tests.test_signal_changes import record
from watchdog.core.runs.activity import ActivityEntry
from watchdog.core.runs.run import RunState
from watchdog.core.sessions import SessionBook
from watchdog.core.spans.record import KeySource, SpanKind
from watchdog.core.sync import MAX_RECENT_SPANS, RecentSpans
from watchdog.shell.priority import Priority
from watchdog.shell.state import store as state_store
from watchdog.shell.state.persist import MAX_LATE_RUNS, WRITE_PART_RUNS, StateWriter
from watchdog.shell.state.store import Store, StoreWriteError

T = TypeVar("T")


class Observer:
    def __init__(self) -> None:
        self.failed: list[str] = []
        self.writable: list[bool] = []

    def run_failed(self, stage: str) -> None:
        self.failed.append(stage)

    def state_writable(self, writable: bool) -> None:
        self.writable.append(writable)


def writer(tmp_path: Path, sessions: SessionBook | None = None
           ) -> tuple[StateWriter, Store, Observer]:
    store = Store(str(tmp_path))
    observer = Observer()
    book = sessions if sessions is not None else SessionBook(lambda _id: None)
    return StateWriter(store, book, observer, str(tmp_path), lambda *_: None), store, observer


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


def test_a_checkpoint_stored_during_a_flush_is_not_overwritten_by_the_flush(
        tmp_path: Path) -> None:
    book = SessionBook(lambda _id: None)
    state, store, _ = writer(tmp_path, book)
    changed_runs(state, WRITE_PART_RUNS + 1)  # two parts: the lane is awaited in between
    session = book.note_run("conv-1", "run-0", 1.7e9)  # dirty: the flush snapshots one run
    assert session is not None
    in_lane, checkpointed = state.in_lane, []

    async def lane_then_checkpoint(work: object, *args: object) -> object:
        result = await in_lane(work, *args)  # type: ignore[arg-type]
        if work == store.write and not checkpointed:  # the first part is written: the
            checkpointed.append(True)  # flush holds its snapshot; a checkpoint comes in
            session.note_run("run-1", 1.7e9 + 1)
            book.changed(session)
            await state.save_sessions([session.to_dict()])
        return result

    state.in_lane = lane_then_checkpoint  # type: ignore[method-assign]
    assert asyncio.run(state.save_pending()) is True
    assert checkpointed
    stored = store.get_session("conv-1")
    assert stored is not None and stored["runs"] == 2  # the checkpoint's, not the flush's 1
    assert [s.id for s in book.take_dirty()] == ["conv-1"]  # and the next flush has it too


def test_sessions_are_encoded_a_slice_at_a_time(tmp_path: Path) -> None:
    book = SessionBook(lambda _id: None)
    state, store, _ = writer(tmp_path, book)
    count = 3000
    for index in range(count):
        for run in range(64):
            book.note_run(f"conv-{index}", f"run-{index}-{run}-{'x' * 24}", 1.7e9)
    turns = 0
    at_write: list[int] = []
    write = store.write

    def counted_write(rows: object) -> None:
        at_write.append(turns)
        write(rows)  # type: ignore[arg-type]

    store.write = counted_write  # type: ignore[method-assign]

    async def main() -> bool:
        nonlocal turns
        flush = asyncio.create_task(state.save_pending())
        while not flush.done():
            turns += 1
            await asyncio.sleep(0)
        return flush.result()

    assert asyncio.run(main()) is True
    assert at_write and at_write[0] >= 5  # the loop ran other work while they were encoded
    assert len(store.session_ids()) == count


def test_a_flush_cancelled_midway_leaves_everything_for_the_final_flush(tmp_path: Path) -> None:
    book = SessionBook(lambda _id: None)
    state, store, _ = writer(tmp_path, book)
    count = WRITE_PART_RUNS * 2 + 5
    changed_runs(state, count)
    book.note_run("conv-1", "run-0", 1.7e9)
    in_lane = state.in_lane
    parts: list[object] = []

    async def first_part_then_hang(work: object, *args: object) -> object:
        if work == store.write:
            parts.append(args)
            if len(parts) > 1:
                await asyncio.Event().wait()  # shutdown cancels the flush here
        return await in_lane(work, *args)  # type: ignore[arg-type]

    async def shutdown() -> bool:
        state.in_lane = first_part_then_hang  # type: ignore[method-assign]
        flush = asyncio.create_task(state.save_pending())
        while len(parts) < 2:
            await asyncio.sleep(0)
        flush.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await flush
        state.in_lane = in_lane  # type: ignore[method-assign]
        return await state.save_pending()  # as Server.stop does after cancelling its tasks

    assert asyncio.run(shutdown()) is True
    assert len(store.load_runs(True, 10 * count)) == count
    assert [entry.seq for entry in store.activity(f"run-{count - 1}")] == [1, 2]
    assert [entry.seq for entry in store.activity("run-0")] == [1, 2]  # written once, not twice
    stored = store.get_session("conv-1")
    assert stored is not None and stored["runs"] == 1


def test_a_flush_stores_the_span_ids_applied_with_the_runs_and_a_failed_one_gives_them_back(
        tmp_path: Path) -> None:
    """The span ids applied since the last flush are stored with it (in its last part, once
    every run is written); a flush that cannot be written hands them to the next; the store
    keeps the newest ``MAX_RECENT_SPANS`` of them, read back at the next start."""
    store = Store(str(tmp_path))
    recent = RecentSpans()
    state = StateWriter(store, SessionBook(lambda _id: None), Observer(), str(tmp_path),
                        lambda *_: None, applied=recent)

    def apply(count: int) -> list[str]:
        records = [record(SpanKind.TOOL) for _ in range(count)]
        assert recent.admit(records) == records
        changed_runs(state, 1)
        return [r.trace_id + r.span_id for r in records]

    first = apply(3)
    assert asyncio.run(state.save_pending()) is True
    assert [key for key, _, _ in store.applied_spans()[0]] == first
    second = apply(2)
    write = store.write

    def failing(rows: object) -> None:
        raise StoreWriteError("disk full")

    store.write = failing  # type: ignore[method-assign]
    assert asyncio.run(state.save_pending()) is False
    third = apply(1)
    store.write = write  # type: ignore[method-assign]
    assert asyncio.run(state.save_pending()) is True
    assert [key for key, _, _ in store.applied_spans()[0]] == first + second + third
    assert asyncio.run(state.save_pending()) is True  # nothing new: no chunk
    assert len(store.applied_spans()[0]) == 6
    for _ in range(3):  # past the bound: the chunks wholly older than the newest ids go
        apply(MAX_RECENT_SPANS // 2)
        assert asyncio.run(state.save_pending()) is True
    kept, unread = store.applied_spans()
    assert len(kept) == MAX_RECENT_SPANS and unread == 0
    restored = RecentSpans()
    assert restored.restore(kept) == 0 and restored.take_new() == []  # stored: not again


def test_the_span_ids_of_many_small_flushes_are_kept_in_the_newest_chunks_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A quiet sidecar flushes a span or two at a time: far fewer ids than the store keeps, but
    a chunk each. Only the newest ``MAX_APPLIED_CHUNKS`` chunks stay (the table is bounded by
    rows as well as by ids), and they are the ones read back."""
    monkeypatch.setattr(state_store, "MAX_APPLIED_CHUNKS", 5)
    store = Store(str(tmp_path))
    for index in range(12):
        store.save([], [], applied=[(f"{index:048x}", index, index + 1)])
    kept, unread = store.applied_spans()
    assert [start for _, start, _ in kept] == [7, 8, 9, 10, 11] and unread == 0
    db = sqlite3.connect(tmp_path / state_store.DB_FILE)
    try:
        assert db.execute("SELECT COUNT(*) FROM applied_spans").fetchone() == (5,)
    finally:
        db.close()


def test_the_span_ids_stored_are_the_newest_max_recent_spans_exactly(tmp_path: Path) -> None:
    """Flushes whose chunks do not add up to the bound: the chunks wholly older than the newest
    ``MAX_RECENT_SPANS`` ids go, and the oldest one left keeps only its ids within it (the
    store held up to a chunk more than the bound)."""
    store = Store(str(tmp_path))
    stored = 0
    for size in (5000, 5000, 5000, 5000, 3, 7000, 1):
        store.save([], [], applied=[(f"{n:048x}", n, n + 1)
                                    for n in range(stored, stored + size)])
        stored += size
        kept, unread = store.applied_spans()
        assert [start for _, start, _ in kept] == list(
            range(max(0, stored - MAX_RECENT_SPANS), stored)) and unread == 0, size
    db = sqlite3.connect(tmp_path / state_store.DB_FILE)
    try:  # (the oldest chunk cut: ids numbered as they are stored)
        assert db.execute("SELECT SUM(spans), MAX(upto) - MIN(upto - spans) FROM applied_spans"
                          ).fetchone() == (MAX_RECENT_SPANS, MAX_RECENT_SPANS)
    finally:
        db.close()


class Applying(Priority):
    """A flush's slices with spans applied between them (``during``: called once, before the
    run at its index is snapshotted)."""

    def __init__(self, during: dict[int, Callable[[], None]]) -> None:
        super().__init__()
        self.during = during

    async def sliced(self, items: Iterable[T]) -> AsyncIterator[T]:
        for index, item in enumerate(list(items)):
            if index in self.during:
                self.during.pop(index)()
            yield item


def test_spans_applied_while_a_flush_snapshots_its_runs_are_stored_with_their_counts(
        tmp_path: Path) -> None:
    """Spans applied between two slices of a flush's snapshots, to the run it snapshots next
    (its counts in the flush) and to one it snapshotted already (not): the flush stores both
    runs as they are once its slices are done, with both ids, so after a crash neither span
    counts again, nor is either dropped with its counts lost."""
    store, recent = Store(str(tmp_path)), RecentSpans()
    runs = [RunState(f"run-{index}", KeySource.WATCHDOG, f"{index:032x}", 1.7e9)
            for index in range(3)]
    late = {index: record(SpanKind.TOOL) for index in (0, 1)}

    def apply(index: int) -> None:
        assert recent.admit([late[index]]) == [late[index]]
        runs[index].tool_calls += 1  # (what the span's apply changes)
        state.take({runs[index].key: runs[index]}, [])

    state = StateWriter(store, SessionBook(lambda _id: None), Observer(), str(tmp_path),
                        lambda *_: None, Applying({1: lambda: (apply(1), apply(0))}),
                        applied=recent)
    state.take({run.key: run for run in runs}, [])
    assert asyncio.run(state.save_pending()) is True
    assert [(store.get_run(run.key) or {})["tool_calls"] for run in runs] == [1, 1, 0]
    kept, _ = store.applied_spans()
    restarted = RecentSpans()  # a crash before the next flush
    restarted.restore(kept)
    assert restarted.admit(list(late.values())) == []


def test_spans_applied_while_a_flush_changes_many_runs_go_with_the_next_flush(
        tmp_path: Path) -> None:
    """Past ``MAX_LATE_RUNS`` runs changed while a flush snapshots, the spans applied meanwhile
    are not snapshotted again: their ids go with the next flush, none lost."""
    store, recent = Store(str(tmp_path)), RecentSpans()
    runs = [RunState(f"run-{index}", KeySource.WATCHDOG, f"{index:032x}", 1.7e9)
            for index in range(MAX_LATE_RUNS + 2)]
    spans = [record(SpanKind.TOOL) for _ in runs]

    def apply_all() -> None:
        assert recent.admit(spans) == spans
        state.take({run.key: run for run in runs}, [])

    state = StateWriter(store, SessionBook(lambda _id: None), Observer(), str(tmp_path),
                        lambda *_: None, Applying({1: apply_all}), applied=recent)
    state.take({runs[0].key: runs[0], runs[1].key: runs[1]}, [])
    assert asyncio.run(state.save_pending()) is True
    assert store.applied_spans()[0] == []
    assert asyncio.run(state.save_pending()) is True
    assert len(store.applied_spans()[0]) == len(spans)
