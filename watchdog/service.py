"""The sidecar's application state: runs, their persistence and the counters about them.

Receivers and the API call into :class:`WatchdogService`; it never calls out to them. All
methods run on the event loop thread (the tracker is not thread-safe). Store work runs on one
worker thread (the "store lane"), in submission order, on snapshots taken here, so the event
loop never waits on disk and an older snapshot can never overwrite a newer one. Work that cannot
be persisted fast enough is refused with :class:`Overloaded` rather than queued without bound.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from watchdog import logs
from watchdog.clock import Clock, SystemClock
from watchdog.config import Config
from watchdog.errors import NotFound, Overloaded, StateUnavailable
from watchdog.ingest.decode import ExportTraceServiceRequest
from watchdog.ingest.pipeline import Decoded, records_from, slices_of
from watchdog.rules.decision import Action, Decision, forced_state
from watchdog.rules.engine import FiredRecord, RuleEngine
from watchdog.runs.activity import ActivityEntry
from watchdog.runs.changes import Snapshot, changed_signals, snapshot
from watchdog.runs.run import RunState
from watchdog.runs.terminal import TerminalState
from watchdog.runs.tracker import BatchResult, RunTracker
from watchdog.runs.view import run_detail, run_summary
from watchdog.sessions import Checkpoint, SessionBook, SessionState, empty_context
from watchdog.store import Store, StoreWriteError
from watchdog.sync import STOP_GRACE, SpanLedger

log = logging.getLogger("watchdog")

MAX_PENDING_ACTIVITY = 250_000  # activity entries waiting for the store before ingest says 503
MAX_RECENT_REQUESTS = 1024  # digests of recent export bodies, to drop exporter retries
MAX_LIST_LIMIT = 1000
MAX_FAILED_RUNS_LOGGED = 1000  # runs whose failure was logged (each is logged once per stage)
STATE_RETRY_AFTER = 5.0  # seconds exporters are told to wait while the state is not writable
INGEST_SLICE = 64  # spans applied between two yields to the event loop
EVAL_SLICE = 200  # runs whose timed rules are evaluated between two yields to the event loop
SNAPSHOT_SLICE = 100  # runs snapshotted between two yields to the event loop while flushing

SESSION_CHANGED = frozenset({"session"})  # what a checkpoint changes, for the rule engine

T = TypeVar("T")


class Observer(Protocol):
    """What the service reports as it works; :mod:`watchdog.metrics` implements it."""

    def spans_received(self, protocol: str, decoded: Decoded, now: float) -> None: ...
    def batch_applied(self, result: BatchResult) -> None: ...
    def runs_finished(self, runs: Iterable[RunState]) -> None: ...
    def rule_fired(self, rule: str, action: str, agent: str, trace_id: str | None) -> None: ...
    def rule_error(self, rule: str) -> None: ...
    def rule_eval(self, seconds: float) -> None: ...
    def set_stuck(self, counts: dict[tuple[str, str], int]) -> None: ...
    def run_failed(self, stage: str) -> None: ...
    def state_writable(self, writable: bool) -> None: ...


class NullObserver:
    def spans_received(self, protocol: str, decoded: Decoded, now: float) -> None:
        pass

    def batch_applied(self, result: BatchResult) -> None:
        pass

    def runs_finished(self, runs: Iterable[RunState]) -> None:
        pass

    def rule_fired(self, rule: str, action: str, agent: str, trace_id: str | None) -> None:
        pass

    def rule_error(self, rule: str) -> None:
        pass

    def rule_eval(self, seconds: float) -> None:
        pass

    def set_stuck(self, counts: dict[tuple[str, str], int]) -> None:
        pass

    def run_failed(self, stage: str) -> None:
        pass

    def state_writable(self, writable: bool) -> None:
        pass


class DecisionSink(Protocol):
    """Where decisions go to become directives (:class:`watchdog.directives.outbox.Outbox`)."""

    def submit(self, decision: Decision, run: RunState, now: float) -> object: ...


class PendingActivity:
    """Activity entries not yet in the store, in order and indexed by run, so a directive's
    report prompt finds its run's latest steps without scanning every pending entry."""

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


class WatchdogService:
    def __init__(self, config: Config, store: Store, observer: Observer | None = None,
                 clock: Clock | None = None, engine: RuleEngine | None = None,
                 sink: DecisionSink | None = None) -> None:
        self.config = config
        self.engine = engine
        self.sink = sink
        self._stuck: dict[str, tuple[str, str]] = {}  # run -> (agent, reason) after wind_down/abort
        self.store = store
        self.observer: Observer = observer or NullObserver()
        self.clock: Clock = clock or SystemClock()
        self.tracker = RunTracker(max_runs=config.max_runs,
                                  run_end_timeout=config.run_end_timeout,
                                  loose_run_gap=config.loose_run_gap)
        self._dirty: dict[str, RunState] = {}
        self._pending_activity = PendingActivity()
        self._saving_activity = PendingActivity()  # handed to the store, not committed yet
        self._recent_requests: OrderedDict[bytes, None] = OrderedDict()
        self._in_progress: set[bytes] = set()  # digests of requests being applied in slices
        self._store_lane = ThreadPoolExecutor(max_workers=1, thread_name_prefix="watchdog-store")
        self.sessions = SessionBook(store.get_session)
        self.ledger = SpanLedger()  # spans of synced runs applied so far (DESIGN §8)
        self.state_error: str | None = None  # why the last store write failed; None: writable
        self._failed_logged: set[tuple[str, str]] = set()  # (stage, run) already logged

    # -- lifecycle ------------------------------------------------------------------------------

    def restore(self) -> int:
        """Load the runs that were active (and recently ended) when the process last stopped.
        A stored run that cannot be read back is skipped and counted, never a failed start."""
        active = self._restored(self.store.load_runs(True, self.config.max_runs))
        ended = self._restored(self.store.load_runs(False, 1000))
        self.tracker.restore(active + ended)
        return len(active)

    def _restored(self, rows: Iterable[dict[str, Any]]) -> list[RunState]:
        # a row from an older build, or one damaged on disk, is skipped (and counted)
        return [run for data in rows if (run := self._from_store(data)) is not None]

    def _run_failed(self, stage: str, key: str) -> None:
        """One run's work failed at ``stage``: counted; logged (with the traceback) once per
        run and stage, so one poisoned run cannot flood the log every tick."""
        self.observer.run_failed(stage)
        logged = self._failed_logged
        if (stage, key) in logged:
            return
        if len(logged) >= MAX_FAILED_RUNS_LOGGED:
            logged.clear()
        logged.add((stage, key))
        log.exception("run %r: %s failed; skipped for this run, the others go on", key[:200],
                      stage)

    def restore_forced(self, fired: Iterable[FiredRecord]) -> None:
        """After a restart: the terminal state each stored directive decided for an active run.
        A run snapshot is flushed every ``state_flush_interval`` but a directive is stored at
        once, so after a crash the directive is the more recent truth."""
        for record in fired:
            run = self.tracker.get(record.run_key)
            state = forced_state(record.action, record.terminal_state)
            if run is not None and not run.ended and state is not None:
                run.force(state, record.rule)

    # -- ingest ---------------------------------------------------------------------------------

    def export(self, request: ExportTraceServiceRequest, protocol: str,
               digest: bytes | None = None) -> Decoded:
        """Apply one OTLP export request at once. ``digest`` (of the body) lets a retried
        request that was already applied be acknowledged without counting its spans twice."""
        if self._is_duplicate(digest):
            return Decoded(duplicate=True)
        self._admit()
        decoded = records_from(request)
        self._apply(decoded, protocol)
        self._remember(digest)
        return decoded

    async def export_in_slices(self, request: ExportTraceServiceRequest, protocol: str,
                               digest: bytes | None = None) -> Decoded:
        """:meth:`export` for the receivers: a large request is applied ``INGEST_SLICE`` spans
        at a time with the event loop served in between, so a small request (a directive's
        trigger, a heartbeat, an SSE write) never waits for a whole 512-span batch."""
        if self._is_duplicate(digest):
            return Decoded(duplicate=True)
        self._admit()
        if digest is not None:
            self._in_progress.add(digest)
        total = Decoded()
        try:
            for part in slices_of(request, INGEST_SLICE):
                self._apply(part, protocol)
                total.rejected.update(part.rejected)
                total.first_error = total.first_error or part.first_error
                await asyncio.sleep(0)
        finally:
            if digest is not None:
                self._in_progress.discard(digest)
        self._remember(digest)
        return total

    def _is_duplicate(self, digest: bytes | None) -> bool:
        return digest is not None and (digest in self._recent_requests
                                       or digest in self._in_progress)

    def _admit(self) -> None:
        if self.state_error is not None:
            raise StateUnavailable(f"the state cannot be written ({self.state_error}); nothing "
                                   f"is acknowledged until it can: retry later",
                                   retry_after=STATE_RETRY_AFTER)
        if len(self._pending_activity) >= MAX_PENDING_ACTIVITY:
            raise Overloaded("the state store is behind; retry shortly", retry_after=1.0)

    def _remember(self, digest: bytes | None) -> None:
        if digest is not None:
            self._recent_requests[digest] = None
            if len(self._recent_requests) > MAX_RECENT_REQUESTS:
                self._recent_requests.popitem(last=False)

    def _apply(self, decoded: Decoded, protocol: str) -> None:
        now = self.clock.now()
        self.observer.spans_received(protocol, decoded, now)
        rules = self.engine is not None and bool(self.engine.ruleset.rules)
        if self.ledger:  # a synced span's second copy (sync, then OTLP, or the reverse)
            decoded.records = self.ledger.admit(decoded.records)
        before = self._snapshots(decoded) if rules else {}
        result = self.tracker.apply(decoded.records, now)
        self._dirty.update(result.touched)
        self._note_sessions(result.touched.values(), now)
        self._pending_activity.extend(result.activity)
        self.observer.batch_applied(result)
        if rules:
            self._evaluate_batch(before, result, now)
        finished = result.ended + result.evicted
        if finished:
            self._finished(finished)

    def heartbeat(self, key: str, messages: int, in_flight: int | None = None,
                  oldest_call_started: float | None = None,
                  announce: dict[str, Any] | None = None) -> RunState:
        """A client heartbeat. ``announce`` (agent, session, parent_run, budget) registers a
        run that has no ended span yet, so it is watched from its first second."""
        now = self.clock.now()
        run, created = self.tracker.heartbeat(key, messages, now, in_flight,
                                              oldest_call_started, register=announce is not None)
        if run is None:
            raise NotFound(f"no active run {key!r}")
        if announce:
            self.ledger.register(key)
            run.announce(**announce)
            self._note_sessions((run,), now)
        self._dirty[key] = run
        if created or announce:
            self.evaluate([run], now)
        return run

    def sync(self, key: str, request: ExportTraceServiceRequest, stop: str | None = None
             ) -> tuple[RunState | None, int]:
        """Apply the spans a client sends before its next step (:mod:`watchdog.sync`): the
        run's state once they are applied, and how many were new. ``stop``: the client stopped
        the run by itself (:data:`watchdog.sync.CLIENT_STOPS`), taken before the spans: a
        tool call it refused at the stop still ends a span, which must not count as an
        overrun."""
        self.ledger.register(key)
        self._admit()
        decoded = records_from(request)
        stopped = stop is not None and self._client_stop(key, stop)
        self._apply(decoded, "sync")
        run = self.tracker.get(key)
        if stop is not None and not stopped:
            self._client_stop(key, stop)
        return run, len(decoded.records)

    def _client_stop(self, key: str, stop: str) -> bool:
        """The run ends as the stop decides: ``tool_limit_reached`` at the budget; at a grace,
        as the wind_down's escalation would have ended it (its rule's terminal state). False
        when the run is not known yet."""
        run = self.tracker.get(key)
        if run is None:
            return False
        if run.ended:
            return True
        if stop == STOP_GRACE:
            kept = self.engine.grace_kept(key) if self.engine is not None else None
            if kept is not None:
                run.force(*kept)
        else:
            run.force(TerminalState.TOOL_LIMIT_REACHED, stop)
        self._dirty[key] = run
        return True

    def tick(self) -> list[RunState]:
        """Periodic work: time-based rules for active runs, then silent runs are abandoned."""
        now = self.clock.now()
        self.evaluate(list(self.tracker.active()), now, timed_only=True)
        return self._expire(now)

    async def tick_in_slices(self) -> list[RunState]:
        """:meth:`tick` for the server: the timed rules run over the active runs in slices, so
        export requests and directive streams are served in between (10,000 runs take ~0.1 s)."""
        now = self.clock.now()
        runs = list(self.tracker.active())
        for start in range(0, len(runs), EVAL_SLICE):
            self.evaluate(runs[start:start + EVAL_SLICE], now, timed_only=True)
            await asyncio.sleep(0)
        return self._expire(now)

    def _expire(self, now: float) -> list[RunState]:
        expired = self.tracker.expire(now)
        for run in expired:
            self._dirty[run.key] = run
            self._forget(run)
        if expired:
            self._finished(expired)
        self.observer.set_stuck(self.stuck_counts())
        return expired

    # -- rules ----------------------------------------------------------------------------------

    def evaluate(self, runs: Iterable[RunState], now: float, timed_only: bool = False,
                 changed: AbstractSet[str] | None = None) -> int:
        """Evaluate the rules for ``runs`` and hand every decision on; returns how many fired.
        ``changed``: only the rules reading these signals (None: all)."""
        engine = self.engine
        if engine is None:
            return 0
        fired = 0
        started = time.perf_counter()
        for run in runs:
            fired += self._evaluate_run(engine, run, now, timed_only, changed)
        self._after_evaluation(time.perf_counter() - started)
        return fired

    def _evaluate_run(self, engine: RuleEngine, run: RunState, now: float, timed_only: bool,
                      changed: AbstractSet[str] | None) -> int:
        """The rules for one run; a failure (a bug, or a value nothing should have let in)
        is this run's alone: counted, logged once, and the other runs are evaluated."""
        fired = 0
        try:
            for decision in engine.evaluate(run, now, self._session_of(run),
                                            timed_only=timed_only, changed=changed):
                self._decide(decision, run, now)
                fired += 1
        except Exception:
            self._run_failed("rules", run.key)
        if run.ended:
            self._forget(run)
        return fired

    def _snapshots(self, decoded: Decoded) -> dict[str, Snapshot]:
        """The existing runs a batch names, as they are before it is applied."""
        before: dict[str, Snapshot] = {}
        get = self.tracker.get
        for record in decoded.records:
            key = record.run_key
            if key not in before:
                run = get(key)
                if run is not None:
                    before[key] = snapshot(run)
        return before

    def _evaluate_batch(self, before: dict[str, Snapshot], result: BatchResult,
                        now: float) -> None:
        """Evaluate the runs a batch touched, each only for the rules whose signals changed
        (a run seen for the first time, or reached through another key: all rules)."""
        engine = self.engine
        assert engine is not None
        started = time.perf_counter()
        for key, run in result.touched.items():
            old = before.get(key)
            changed = None if old is None else changed_signals(
                old, run, bool(run.budget) or bool(engine.default_budget(run.agent_name)))
            if changed is not None and not changed:
                continue
            self._evaluate_run(engine, run, now, False, changed)
        self._after_evaluation(time.perf_counter() - started)

    def _after_evaluation(self, seconds: float) -> None:
        assert self.engine is not None
        self.observer.rule_eval(seconds)
        if self.engine.errors:
            for rule, count in self.engine.drain_errors().items():
                for _ in range(count):
                    self.observer.rule_error(rule)

    def _finished(self, runs: list[RunState]) -> None:
        self.observer.runs_finished(runs)
        for run in runs:
            logs.event("run_ended", run=run.key, agent=run.agent_name,
                       terminal_state=run.terminal_state.value if run.terminal_state else None,
                       reason=run.terminal_reason, has_final_answer=run.has_final_answer)

    def _decide(self, decision: Decision, run: RunState, now: float) -> None:
        state = forced_state(decision.action, decision.terminal_state)
        if state is not None:
            run.force(state, decision.rule)
            self._dirty[run.key] = run
        if decision.action is not Action.NOTIFY and not run.ended:
            reason = decision.terminal_state.value if decision.terminal_state else decision.rule
            self._stuck[run.key] = (run.agent_name, reason)
        self.observer.rule_fired(decision.rule, decision.action.value, run.agent_name,
                                 run.trace_id)
        logs.event("rule_fired", rule=decision.rule, action=decision.action.value,
                   severity=decision.severity.value, run=run.key, agent=run.agent_name,
                   terminal_state=decision.terminal_state.value if decision.terminal_state
                   else None, escalation=decision.escalation)
        if self.sink is not None:
            self.sink.submit(decision, run, now)

    def _forget(self, run: RunState) -> None:
        if self.engine is not None:
            self.engine.forget(run.key)
        self._stuck.pop(run.key, None)

    # -- sessions -------------------------------------------------------------------------------

    def _note_sessions(self, runs: Iterable[RunState], now: float) -> None:
        """Count the runs of each session (``session.runs``) as they are first seen."""
        note_run = self.sessions.note_run
        for run in runs:
            if run.session is not None and not run.session_counted:
                run.session_counted = True
                note_run(run.session, run.key, now)

    def _session_of(self, run: RunState) -> dict[str, Any] | None:
        """The CEL ``session`` of a run (None: the run has no session)."""
        if run.session is None:
            return None
        state = self.sessions.get(run.session)
        return state.activation(run.key) if state is not None else {"id": run.session}

    async def checkpoint(self, session_id: str, checkpoint: Checkpoint) -> dict[str, Any]:
        """Fold a checkpoint into its session, persist it before answering (an acknowledged
        checkpoint survives a crash), then evaluate the session's active runs (zero-progress)."""
        self._admit_state()
        session = self.sessions.get_or_create(session_id)
        run = self.tracker.get(checkpoint.run) if checkpoint.run else None
        if run is not None and run.session is None:
            run.announce(session=session_id)  # the checkpoint says whose run it is
            self._dirty[run.key] = run
        outcome = session.checkpoint(checkpoint, self._active_runs(session))
        self.sessions.changed(session)
        self._admit_state()
        try:
            await self.in_store_lane(self.store.save_sessions, [session.to_dict()])
        except StoreWriteError as exc:  # it stays dirty: the next flush that works stores it
            self._state_failed(exc)
            raise StateUnavailable(f"the checkpoint could not be stored ({exc}); retry later",
                                   retry_after=STATE_RETRY_AFTER) from None
        runs = [r for key in outcome.runs
                if (r := self.tracker.get(key)) is not None and not r.ended]
        fired = self.evaluate(runs, self.clock.now(), changed=SESSION_CHANGED)
        return {**session.context(), "fired": fired}

    def _active_runs(self, session: SessionState) -> list[str]:
        get = self.tracker.get
        return [key for key in session.recent_runs
                if (run := get(key)) is not None and not run.ended]

    def session_context(self, session_id: str) -> dict[str, Any]:
        """What the next run of a session starts from; an unknown session has an empty
        context (zero counts), since agents ask for it before their first checkpoint."""
        session = self.sessions.get(session_id)
        context = session.context() if session is not None else empty_context(session_id)
        context["active_runs"] = self._active_runs(session) if session is not None else []
        return context

    def stuck_counts(self) -> dict[tuple[str, str], int]:
        """Active runs a wind_down/abort was sent to, by agent and reason (runs_stuck)."""
        return dict(Counter(self._stuck.values()))

    def default_budget(self, run: RunState) -> dict[str, float] | None:
        return self.engine.default_budget(run.agent_name) if self.engine is not None else None

    # -- persistence ----------------------------------------------------------------------------

    def take_pending(self) -> tuple[list[dict[str, Any]], list[ActivityEntry]]:
        """Snapshots of changed runs and new activity, to hand to :meth:`Store.save`."""
        rows = [run.to_dict() for run in self._dirty.values()]
        activity = self._pending_activity.entries
        self._dirty = {}
        self._pending_activity = PendingActivity()
        return rows, activity

    def flush(self) -> None:
        """Persist everything pending, synchronously (only when no loop is running: tests)."""
        rows, activity = self.take_pending()
        sessions = self.sessions.take_dirty()
        if rows or activity or sessions:
            self.store.save(rows, activity, sessions)

    async def in_store_lane(self, work: Callable[..., T], *args: Any) -> T:
        """Run store work on the store lane, after everything submitted before it."""
        return await asyncio.get_running_loop().run_in_executor(self._store_lane, work, *args)

    async def save_pending(self) -> bool:
        """Persist changed runs and new activity without stalling the event loop: runs are
        snapshotted in small slices (other requests run in between), then written on the lane.

        When the store cannot be written, everything taken is put back (the next flush tries
        again), the service refuses new exports (:meth:`_admit`) until a write succeeds, and
        False is returned. A run whose snapshot fails is skipped and counted; the rest are
        written."""
        dirty, self._dirty = self._dirty, {}
        activity, self._pending_activity = self._pending_activity, PendingActivity()
        rows: list[dict[str, Any]] = []
        for index, run in enumerate(dirty.values(), 1):
            try:
                rows.append(run.to_dict())  # a run changed after this is dirty again: next flush
            except Exception:
                self._run_failed("flush", run.key)
            if index % SNAPSHOT_SLICE == 0:
                await asyncio.sleep(0)
        # Taken right before the store lane gets them: a checkpoint snapshotted while the runs
        # were being sliced above is written before this, and must not be overwritten by an
        # older snapshot of its session.
        sessions = self.sessions.take_dirty()
        if not (rows or activity or sessions):
            return True
        self._saving_activity = activity
        try:
            refused = await self.in_store_lane(self.store.save, rows, activity.entries, sessions)
        except StoreWriteError as exc:
            self._requeue(dirty, activity, sessions)
            self._state_failed(exc)
            return False
        finally:
            if self._saving_activity is activity:
                self._saving_activity = PendingActivity()
        for key in refused:
            self._run_failed("flush", key)
        self._state_written()
        return True

    def _requeue(self, dirty: dict[str, RunState], activity: PendingActivity,
                 sessions: list[dict[str, Any]]) -> None:
        """What a failed write took, pending again, in its order (older activity first)."""
        for key, run in dirty.items():
            self._dirty.setdefault(key, run)  # the run object is live: its next snapshot is new
        merged = PendingActivity()
        merged.extend(activity.entries)
        merged.extend(self._pending_activity.entries)
        self._pending_activity = merged
        self.sessions.requeue(sessions)

    def _admit_state(self) -> None:
        if self.state_error is not None:
            raise StateUnavailable(f"the state cannot be written ({self.state_error}); retry "
                                   f"later", retry_after=STATE_RETRY_AFTER)

    def _state_failed(self, exc: Exception) -> None:
        if self.state_error is None:  # logged once per change of state, not every flush
            log.error("the state in %s cannot be written (%s): exports are refused with 503 / "
                      "UNAVAILABLE and /readyz is unready until a write succeeds; %d runs and "
                      "%d activity entries wait in memory", self.config.state_dir, exc,
                      len(self._dirty), len(self._pending_activity))
            self.observer.state_writable(False)
        self.state_error = str(exc) or type(exc).__name__

    def _state_written(self) -> None:
        if self.state_error is not None:
            log.warning("the state in %s is writable again: exports are accepted",
                        self.config.state_dir)
            self.state_error = None
            self.observer.state_writable(True)

    async def close(self) -> None:
        """Persist what is pending and close the store (shutdown)."""
        if not await self.save_pending():
            log.error("shutting down with unsaved state: %d runs and %d activity entries could "
                      "not be written (%s)", len(self._dirty), len(self._pending_activity),
                      self.state_error)
        await self.in_store_lane(self.store.close)
        self._store_lane.shutdown(wait=True)

    # -- reads ----------------------------------------------------------------------------------

    def find_run(self, key: str) -> RunState:
        run = self.tracker.get(key)
        if run is None:
            data = self.store.get_run(key)
            if data is None:
                raise NotFound(f"no run {key!r}")
            run = self._from_store(data)
            if run is None:
                raise NotFound(f"run {key!r} is stored but cannot be read (see the log)")
        return run

    def _from_store(self, data: dict[str, Any]) -> RunState | None:
        try:
            return RunState.from_dict(data)
        except Exception:
            self._run_failed("restore", str(data.get("key")))
            return None

    def run_detail(self, key: str) -> dict[str, Any]:
        run = self.find_run(key)
        now = self.clock.now()
        detail = run_detail(run, now, self.default_budget(run))
        detail["children"] = [run_summary(child, now) for child in self.child_runs(key)]
        return detail

    def child_runs(self, key: str) -> list[RunState]:
        """The runs of nested agents below ``key`` (sub-agents, agents as tools, handoffs)."""
        children = {child.key: child for child in self.tracker.children(key)}
        for data in self.store.child_runs(key, MAX_LIST_LIMIT):
            if data["key"] not in children and (stored := self._from_store(data)):
                children[data["key"]] = stored
        return sorted(children.values(), key=lambda run: (run.first_start_ns, run.key))

    def list_runs(self, state: str | None = None, agent: str | None = None,
                  limit: int = 100) -> list[dict[str, Any]]:
        """Active runs come from memory; ended ones from memory then the store."""
        now = self.clock.now()
        limit = max(1, min(limit, MAX_LIST_LIMIT))
        runs: dict[str, RunState] = {}
        if state in (None, "active"):
            for run in reversed(list(self.tracker.active())):
                if agent is None or run.agent_name == agent:
                    runs[run.key] = run
        if state in (None, "ended"):
            for run in reversed(list(self.tracker.ended())):
                if agent is None or run.agent_name == agent:
                    runs.setdefault(run.key, run)
            if len(runs) < limit:
                for data in self.store.list_runs(True, agent, limit):
                    if data["key"] not in runs and (stored := self._from_store(data)):
                        runs[data["key"]] = stored
        summaries = []
        for run in list(runs.values())[:limit]:
            try:
                summaries.append(run_summary(run, now))
            except Exception:  # one damaged run must not take the listing down with it
                self._run_failed("read", run.key)
        return summaries

    def activity(self, key: str) -> list[ActivityEntry]:
        """The run's activity log: what the store has, plus what is on its way there.

        The store reads through its own connection, so this never waits for a flush.
        """
        entries = {entry.seq: entry for entry in self.store.activity(key)}
        for batch in (self._saving_activity, self._pending_activity):
            for entry in batch.of(key):
                entries[entry.seq] = entry
        ordered = [entries[seq] for seq in sorted(entries)]
        return ordered[-self.config.activity_log_size:]
