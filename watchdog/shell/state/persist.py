"""Persisting the core's state: changed runs, new activity and sessions, written in order on
one worker thread (the "store lane") so the event loop never waits on disk.

Theory of operation
-------------------
The shell hands every :class:`~watchdog.core.handout.Step` here (:meth:`StateWriter.take`): the
runs it touched become *dirty* and its activity entries *pending*. :meth:`StateWriter.save_pending`,
called by the flush timer, snapshots the dirty runs in small slices (requests are served in
between), then writes snapshots, activity and dirty sessions in one transaction on the lane.
Work is submitted in order, so an older snapshot can never overwrite a newer one.

When the store cannot be written, what was taken is put back, :attr:`state_error` says why,
:meth:`admit` refuses new work with :class:`StateUnavailable` (503 / UNAVAILABLE, and
``/readyz`` unready) until a write succeeds, and it is logged once per change. When the store
falls behind, :meth:`admit` refuses with :class:`Overloaded` rather than queue without bound.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, TypeVar

from watchdog.core.runs.activity import ActivityEntry
from watchdog.core.sessions import SessionBook, SessionState
from watchdog.shell.errors import Overloaded, StateUnavailable
from watchdog.shell.priority import Priority
from watchdog.shell.state.lanes import Lane
from watchdog.shell.state.store import Rows, Store, StoreWriteError

log = logging.getLogger("watchdog")

MAX_PENDING_ACTIVITY = 250_000  # activity entries waiting for the store before ingest says 503
STATE_RETRY_AFTER = 5.0  # seconds exporters are told to wait while the state is not writable
WRITE_PART_RUNS = 200  # runs (with their new activity) per store transaction of a flush
# runs a flush snapshots again at the end of its slices, with the spans applied meanwhile
# (about one slice of work): past it, those spans' ids go with the next flush (_take_late)
MAX_LATE_RUNS = 32

T = TypeVar("T")


class Snapshotted(Protocol):
    """A changed run as :attr:`watchdog.core.handout.Step.dirty` hands it over: snapshotted here,
    when a flush writes it (not at every step), and otherwise left alone."""

    key: str

    def to_row(self) -> dict[str, Any]: ...


class AppliedSpans(Protocol):
    """The span ids applied since the last flush (:class:`~watchdog.core.sync.RecentSpans`),
    stored with the runs whose counts they changed: a crash loses both or neither."""

    def take_new(self) -> list[tuple[str, int, int]]: ...
    def give_back(self, items: list[tuple[str, int, int]]) -> None: ...


class WriteObserver(Protocol):
    def run_failed(self, stage: str) -> None: ...
    def state_writable(self, writable: bool) -> None: ...


class PendingActivity:
    """Activity entries not yet in the store, in order and indexed by run, so reading one run's
    log does not scan every pending entry."""

    __slots__ = ("by_run", "entries")

    def __init__(self) -> None:
        self.entries: list[ActivityEntry] = []
        self.by_run: dict[str, list[ActivityEntry]] = {}

    def extend(self, entries: Iterable[ActivityEntry]) -> None:
        by_run = self.by_run
        for entry in entries:
            self.entries.append(entry)
            run = by_run.get(entry.run_key)
            if run is None:
                by_run[entry.run_key] = [entry]
            else:
                run.append(entry)

    def of(self, key: str) -> list[ActivityEntry]:
        return self.by_run.get(key, [])

    def __len__(self) -> int:
        return len(self.entries)


class StateWriter:
    def __init__(self, store: Store, sessions: SessionBook, observer: WriteObserver,
                 state_dir: str, on_failed_run: Callable[[str, str], None],
                 priority: Priority | None = None, applied: AppliedSpans | None = None) -> None:
        self.store = store
        self.applied = applied
        self.sessions = sessions
        self.observer = observer
        self.state_dir = state_dir
        self._on_failed_run = on_failed_run
        self.priority = priority or Priority()
        self._dirty: dict[str, Snapshotted] = {}
        self._gone: set[str] = set()  # runs folded into another: their rows are deleted
        self._pending = PendingActivity()
        self._saving = PendingActivity()  # handed to the store, not committed yet
        # sessions a checkpoint stored while a flush was encoding its own snapshots of them
        # (None: no flush under way); the flush leaves them out, see save_pending
        self._checkpointed: set[str] | None = None
        self._lane = Lane("watchdog-store")
        self.state_error: str | None = None  # why the last store write failed; None: writable
        # told when the state becomes unwritable or writable again (the model relay's proofs
        # hold only while it is writable)
        self.writable_changed: Callable[[], None] | None = None
        self.closing = False  # the receivers are closed (shutdown): nothing is accepted now

    # -- what changed -----------------------------------------------------------------------------

    def take(self, touched: Mapping[str, Snapshotted], activity: list[ActivityEntry],
             gone: Iterable[str] = ()) -> None:
        self._dirty.update(touched)
        if activity:
            self._pending.extend(activity)
        for key in gone:
            self._dirty.pop(key, None)
            self._gone.add(key)

    @property
    def behind(self) -> bool:
        """More activity waits for the store than it takes (:meth:`admit` refuses work)."""
        return len(self._pending.entries) >= MAX_PENDING_ACTIVITY

    def admit(self) -> None:
        """Raise unless new work can be accepted (the state is writable and keeps up)."""
        self.admit_state()
        if self.behind:
            raise Overloaded("the state store is behind; retry shortly", retry_after=1.0)

    def admit_state(self) -> None:
        if self.state_error is not None:
            raise StateUnavailable(f"the state cannot be written ({self.state_error}); nothing "
                                   f"is acknowledged until it can: retry later",
                                   retry_after=STATE_RETRY_AFTER)

    def unsaved(self, key: str) -> list[ActivityEntry]:
        """The run's activity on its way to the store (being written, then pending)."""
        return self._saving.of(key) + self._pending.of(key)

    # -- writing --------------------------------------------------------------------------------

    async def in_lane(self, work: Callable[..., T], *args: Any) -> T:
        """Run store work on the store lane, after everything submitted before it."""
        return await self._lane.run(work, *args)

    def flush(self) -> None:
        """Persist everything pending, synchronously (only when no loop is running: tests)."""
        rows = [run.to_row() for run in self._dirty.values()]
        activity, gone = self._pending.entries, self._gone
        self._dirty, self._pending, self._gone = {}, PendingActivity(), set()
        sessions = [state.to_dict() for state in self.sessions.take_dirty()]
        applied = self.applied.take_new() if self.applied is not None else []
        if rows or activity or sessions or gone or applied:
            self.store.save(rows, activity, sessions, gone, applied)

    async def save_pending(self) -> bool:
        """Persist changed runs, new activity and changed sessions without stalling the event
        loop: runs and sessions are snapshotted and encoded a slice at a time (other requests
        run in between), then written on the lane in parts of ``WRITE_PART_RUNS`` runs (each
        with its new activity, one transaction each; the sessions with the last), so a sync
        whose directive is being stored meanwhile contends with one part, not the whole flush.
        A checkpoint stored while this flush was under way wrote a newer snapshot of its
        session than the one this flush may hold: that session is left out here (it is dirty
        again, so the next flush has it). Returns False when the store could not be written
        (everything is pending again; so it is when shutdown cancels the flush midway, for the
        final flush to write)."""
        dirty, self._dirty = self._dirty, {}
        activity, self._pending = self._pending, PendingActivity()
        gone, self._gone = self._gone, set()
        states = self.sessions.take_dirty()
        # the ids of the spans applied by now: their runs are among those snapshotted below
        # (and those applied meanwhile, when few runs changed: _take_late)
        applied = self.applied.take_new() if self.applied is not None else []
        self._saving = activity  # still the run's (unsaved) until the store has it
        self._checkpointed = set()
        try:
            saved = await self._save(dirty, activity, states, gone, applied)
        except asyncio.CancelledError:
            self._requeue(dirty, activity, states, gone, applied)
            raise
        finally:
            self._checkpointed = None
            if self._saving is activity:
                self._saving = PendingActivity()
        return saved

    async def _save(self, dirty: dict[str, Snapshotted], activity: PendingActivity,
                    states: list[SessionState], gone: set[str],
                    applied: list[tuple[str, int, int]]) -> bool:
        size = self.store.activity_log_size
        parts = [Rows(size)]
        by_run = activity.by_run
        async for run in self.priority.sliced(dirty.values()):
            rows = parts[-1]
            if len(rows.runs) >= WRITE_PART_RUNS:
                rows = Rows(size)
                parts.append(rows)
            try:
                rows.add_run(run.to_row())  # a run changed after this is dirty again
            except Exception:
                rows.refused.append(run.key)
            entries = by_run.get(run.key)
            if entries:
                rows.add_activity(((run.key, entries),))
        parts[-1].add_activity((key, entries) for key, entries in by_run.items()
                               if key not in dirty)
        last = parts[-1]
        last.gone.extend((key,) for key in gone)  # after the activity they may still have
        self._take_late(last, applied)
        last.add_applied(applied)  # with the last part: once every run is written
        async for state in self.priority.sliced(states):
            last.add_sessions((state.to_dict(),))
        for rows in parts:
            for key in rows.refused:
                self._on_failed_run("flush", key)
        wrote = False
        try:
            for rows in parts[:-1]:
                await self.in_lane(self.store.write, rows)
                wrote = True
                await self.priority.turn()
            checkpointed = self._checkpointed
            if checkpointed:  # stored meanwhile, newer than what was encoded here
                last.sessions = [row for row in last.sessions if row[0] not in checkpointed]
            if last:
                await self.in_lane(self.store.write, last)
                wrote = True
        except StoreWriteError as exc:
            self._requeue(dirty, activity, states, gone, applied)
            self.failed(exc)
            return False
        if wrote:
            self._written()
        return True

    def _take_late(self, last: Rows, applied: list[tuple[str, int, int]]) -> None:
        """Add to ``applied`` the ids of the spans applied while the flush snapshotted its runs
        (a span's run snapshotted after it has its counts stored, one snapshotted before it
        not): the runs changed since the flush began are snapshotted again into ``last``
        here, with no turn between, so each id the flush stores has its counts stored with it
        and each count its id (a crash then counts no span twice when it comes again). When
        more than ``MAX_LATE_RUNS`` runs changed, the ids go with the next flush instead (a
        crash before it counts them again). The runs stay dirty: the next flush writes them
        with their activity."""
        if self.applied is None:
            return
        late = self.applied.take_new()
        if not late:
            return
        if len(self._dirty) > MAX_LATE_RUNS:
            self.applied.give_back(late)
            return
        for run in self._dirty.values():
            try:
                last.add_run(run.to_row())
            except Exception:  # (its refusal is counted when the next flush meets it)
                continue
        applied.extend(late)

    async def save_sessions(self, sessions: list[dict[str, Any]]) -> None:
        """Store session snapshots now (a checkpoint, before it is acknowledged)."""
        self.admit_state()
        if self._checkpointed is not None:  # a flush under way must not write older ones after
            self._checkpointed.update(session["id"] for session in sessions)
        try:
            await self.in_lane(self.store.save_sessions, sessions)
        except StoreWriteError as exc:  # it stays dirty: the next flush that works stores it
            self.failed(exc)
            raise StateUnavailable(f"the checkpoint could not be stored ({exc}); retry later",
                                   retry_after=STATE_RETRY_AFTER) from None

    def _requeue(self, dirty: dict[str, Snapshotted], activity: PendingActivity,
                 sessions: list[SessionState], gone: set[str],
                 applied: list[tuple[str, int, int]]) -> None:
        """What a failed write took, pending again, in its order (older activity first)."""
        if self.applied is not None:
            self.applied.give_back(applied)
        self._gone |= gone
        for key, run in dirty.items():
            self._dirty.setdefault(key, run)  # the run object is live: its next snapshot is new
        merged = PendingActivity()
        merged.extend(activity.entries)
        merged.extend(self._pending.entries)
        self._pending = merged
        self.sessions.requeue(sessions)

    def failed(self, exc: Exception) -> None:
        was = self.state_error
        self.state_error = str(exc) or type(exc).__name__
        if was is None:  # logged once per change of state, not every flush
            log.error("the state in %s cannot be written (%s): exports are refused with 503 / "
                      "UNAVAILABLE and /readyz is unready until a write succeeds; %d runs and "
                      "%d activity entries wait in memory", self.state_dir, exc,
                      len(self._dirty), len(self._pending))
            self.observer.state_writable(False)
            if self.writable_changed is not None:
                self.writable_changed()

    def _written(self) -> None:
        if self.state_error is not None and self.closing:
            log.warning("the state in %s could be written at shutdown: what waited in memory "
                        "is saved", self.state_dir)
        elif self.state_error is not None:
            log.warning("the state in %s is writable again: exports are accepted",
                        self.state_dir)
            self.state_error = None
            self.observer.state_writable(True)
            if self.writable_changed is not None:
                self.writable_changed()

    async def close(self) -> None:
        """Persist what is pending and close the store (shutdown)."""
        self.closing = True
        if not await self.save_pending():
            log.error("shutting down with unsaved state: %d runs and %d activity entries could "
                      "not be written (%s)", len(self._dirty), len(self._pending),
                      self.state_error)
        await self.in_lane(self.store.close)
        self._lane.close()
