"""The shell around the core: export requests in, the core's steps carried on, one way.

Receivers call :meth:`WatchdogService.export_in_slices` (the :class:`~watchdog.ingest.consumer.
TraceConsumer` they depend on); the control API calls the client methods (heartbeat, sync,
checkpoint) and reads through :attr:`WatchdogService.queries`. Each call runs the sans-IO
:class:`~watchdog.core.Core` and carries its :class:`~watchdog.core.Step` on: touched runs and
activity to the :class:`~watchdog.persist.StateWriter`, decisions to the decision sink (the
outbox), counts to the observer (metrics), events to the log. Nothing below calls back up.

All methods run on the event loop thread (the core is not thread-safe). Work the state cannot
take is refused (:class:`Overloaded`, :class:`StateUnavailable`) rather than queued without
bound.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from watchdog import logs
from watchdog.clock import Clock, SystemClock
from watchdog.config import Config
from watchdog.core import RECENT_STEPS, SESSION_CHANGED, Core, Decided, Step
from watchdog.directives.model import Directive
from watchdog.errors import NotFound
from watchdog.ingest.decode import ExportTraceServiceRequest
from watchdog.ingest.pipeline import Decoded, records_from, slices_of
from watchdog.model.steer import Board
from watchdog.persist import StateWriter
from watchdog.priority import Priority
from watchdog.queries import RunQueries
from watchdog.rules.engine import FiredRecord, RuleEngine
from watchdog.runs.record import KeySource, SpanRecord
from watchdog.runs.run import RunState
from watchdog.runs.tracker import BatchResult, RunTracker
from watchdog.sessions import Checkpoint, SessionBook, SessionState, empty_context
from watchdog.store import Store, StoreWriteError

log = logging.getLogger("watchdog")

MAX_RECENT_REQUESTS = 1024  # digests of recent export bodies, to drop exporter retries
MAX_BOARDS = 10_000  # runs whose latest directives the model endpoint can read
MAX_FAILED_RUNS_LOGGED = 1000  # runs whose failure was logged (each is logged once per stage)
INGEST_SLICE = 32  # spans applied between two yields to the event loop
EVAL_SLICE = 50  # runs whose timed rules are evaluated between two yields to the event loop



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

    def submit(self, decided: Decided) -> object: ...


class WatchdogService:
    def __init__(self, config: Config, store: Store, observer: Observer | None = None,
                 clock: Clock | None = None, engine: RuleEngine | None = None,
                 sink: DecisionSink | None = None) -> None:
        self.config = config
        self.sink = sink
        self.store = store
        self.observer: Observer = observer or NullObserver()
        self.clock: Clock = clock or SystemClock()
        self.sessions = SessionBook(store.get_session)
        tracker = RunTracker(max_runs=config.max_runs, run_end_timeout=config.run_end_timeout,
                             loose_run_gap=config.loose_run_gap)
        self.core = Core(tracker, self.sessions, engine)
        self.priority = Priority()  # bulk work steps aside for syncs in flight (DESIGN §8)
        self.state = StateWriter(store, self.sessions, self.observer, config.state_dir,
                                 self._run_failed, self.priority)
        self.queries = RunQueries(tracker, store, self.clock, self.core.default_budget,
                                  self.state.unsaved, self._run_failed,
                                  config.activity_log_size)
        self._recent_requests: OrderedDict[bytes, None] = OrderedDict()
        self._in_progress: set[bytes] = set()  # digests of requests being applied in slices
        self._failed_logged: set[tuple[str, str]] = set()  # (stage, run) already logged
        self.boards: OrderedDict[str, Board] = OrderedDict()  # run -> its latest directives

    @property
    def tracker(self) -> RunTracker:
        return self.core.tracker

    @property
    def state_error(self) -> str | None:
        return self.state.state_error

    # -- lifecycle ------------------------------------------------------------------------------

    def restore(self) -> int:
        """Load the runs that were active (and recently ended) when the process last stopped.
        A stored run that cannot be read back is skipped and counted, never a failed start."""
        active = self._restored(self.store.load_runs(True, self.config.max_runs))
        ended = self._restored(self.store.load_runs(False, 1000))
        self.tracker.restore(active + ended)
        self._restore_tracker_state()
        for run in active:  # their last steps, for the report prompts of their next directives
            self.core.remember(self.store.activity(run.key, RECENT_STEPS))
        self.sessions.know(self.store.session_ids())
        return len(active)

    def _restore_tracker_state(self) -> None:
        """What the tracker held beyond its runs at a clean shutdown (not after a crash: then
        a nested agent whose spans came before the restart is not split out of its trace's
        run); never a failed start."""
        saved = self.store.take_tracker_state()
        if saved is None:
            return
        try:
            skipped = self.tracker.restore_state(json.loads(saved))
        except (ValueError, TypeError, AttributeError):
            log.warning("the tracker state kept at the last shutdown cannot be read: skipped")
            return
        if skipped:
            log.warning("%d traces of the tracker state kept at the last shutdown cannot be "
                        "read: skipped", skipped)

    def _restored(self, rows: Iterable[dict[str, Any]]) -> list[RunState]:
        return [run for data in rows if (run := self.queries.from_store(data)) is not None]

    def restore_forced(self, fired: Iterable[FiredRecord]) -> None:
        self.core.restore_forced(fired)

    async def close(self) -> None:
        """Persist what is pending, and what the tracker holds beyond its runs (the records
        of traces in progress), then close the store."""
        try:
            kept = self.tracker.state()
            if kept["left_out"]:
                log.warning("%d traces in progress are too many to keep their records over the "
                            "restart: a nested agent of theirs stays in its parent's run",
                            kept["left_out"])
            state = json.dumps(kept, separators=(",", ":"), allow_nan=False)
            await self.state.in_lane(self.store.save_tracker_state, state)
        except (StoreWriteError, ValueError) as exc:
            log.warning("the tracker state cannot be kept (%s): after the restart, a nested "
                        "agent of a trace in progress stays in its parent's run", exc)
        await self.state.close()
        self.queries.close()

    # -- carrying a step on ---------------------------------------------------------------------

    def _carry(self, step: Step) -> None:
        """Hand what a core step produced to whoever takes it: one way, no answers back."""
        self.state.take(step.touched, step.activity, step.gone)
        observer = self.observer
        if step.batch is not None:
            observer.batch_applied(step.batch)
        for failure in step.failures:
            self._run_failed(failure.stage, failure.run_key, failure.error)
        if step.eval_seconds:
            observer.rule_eval(step.eval_seconds)
        for rule, count in step.rule_errors.items():
            for _ in range(count):
                observer.rule_error(rule)
        for decided in step.decisions:
            self._decided(decided)
        for key, into in step.gone.items():
            logs.event("run_merged", run=key, into=into)
        if step.finished:
            observer.runs_finished(step.finished)
            for run in step.finished:
                logs.event("run_ended", run=run.key, agent=run.agent_name,
                           terminal_state=run.terminal_state.value if run.terminal_state
                           else None, reason=run.terminal_reason,
                           has_final_answer=run.has_final_answer)

    def _decided(self, decided: Decided) -> None:
        decision, run = decided.decision, decided.run
        self.observer.rule_fired(decision.rule, decision.action.value, run.agent_name,
                                 run.trace_id)
        logs.event("rule_fired", rule=decision.rule, action=decision.action.value,
                   severity=decision.severity.value, run=run.key, agent=run.agent_name,
                   terminal_state=decision.terminal_state.value if decision.terminal_state
                   else None, escalation=decision.escalation)
        if self.sink is not None:
            directive = self.sink.submit(decided)
            if isinstance(directive, Directive):
                self._post(directive)

    def _post(self, directive: Directive) -> None:
        """Keep a run's latest directives for the model endpoint's next request of it: it
        reads them as they are decided, not from the store (read-your-writes, as a sync)."""
        boards = self.boards
        board = boards.get(directive.run_id)
        if board is None:
            board = boards[directive.run_id] = Board()
            while len(boards) > MAX_BOARDS:
                boards.popitem(last=False)
        else:
            boards.move_to_end(directive.run_id)
        board.post(directive)

    def _run_failed(self, stage: str, key: str, error: BaseException | None = None) -> None:
        """One run's work failed at ``stage``: counted; logged (with the traceback) once per
        run and stage, so one poisoned run cannot flood the log every tick."""
        self.observer.run_failed(stage)
        logged = self._failed_logged
        if (stage, key) in logged:
            return
        if len(logged) >= MAX_FAILED_RUNS_LOGGED:
            logged.clear()
        logged.add((stage, key))
        log.error("run %r: %s failed; skipped for this run, the others go on", key[:200],
                  stage, exc_info=error if error is not None else True)

    # -- ingest ---------------------------------------------------------------------------------

    def export(self, request: ExportTraceServiceRequest, protocol: str,
               digest: bytes | None = None) -> Decoded:
        """Apply one OTLP export request at once. ``digest`` (of the body) lets a retried
        request that was already applied be acknowledged without counting its spans twice."""
        if self._is_duplicate(digest):
            return Decoded(duplicate=True)
        self.state.admit()
        decoded = records_from(request)
        self._apply(decoded, protocol)
        self._remember(digest)
        return decoded

    async def export_in_slices(self, parse: Callable[[], ExportTraceServiceRequest],
                               protocol: str, digest: bytes | None = None) -> Decoded:
        """:meth:`export` for the receivers (:class:`~watchdog.ingest.consumer.TraceConsumer`):
        the request is parsed at its turn — a sync on its way goes first, not after a whole
        body's parse (~1 ms for 128 spans) — and applied ``INGEST_SLICE`` spans at a time with
        the event loop served in between, so a small request (a sync, a heartbeat, an SSE
        write) never waits for a whole 512-span batch."""
        if self._is_duplicate(digest):
            return Decoded(duplicate=True)
        self.state.admit()
        if digest is not None:
            self._in_progress.add(digest)
        total = Decoded()
        try:
            await self.priority.turn()  # the parse is a slice of its own
            request = parse()
            for part in slices_of(request, INGEST_SLICE):
                await self.priority.turn()
                self._apply(part, protocol)
                total.rejected.update(part.rejected)
                total.first_error = total.first_error or part.first_error
        finally:
            if digest is not None:
                self._in_progress.discard(digest)
        self._remember(digest)
        return total

    def _is_duplicate(self, digest: bytes | None) -> bool:
        return digest is not None and (digest in self._recent_requests
                                       or digest in self._in_progress)

    def _remember(self, digest: bytes | None) -> None:
        if digest is not None:
            self._recent_requests[digest] = None
            if len(self._recent_requests) > MAX_RECENT_REQUESTS:
                self._recent_requests.popitem(last=False)

    def _apply(self, decoded: Decoded, protocol: str) -> int:
        """Apply decoded records; returns how many were new (not a synced span's copy)."""
        now = self.clock.now()
        self.observer.spans_received(protocol, decoded, now)
        step = self.core.apply(decoded.records, now)
        self._carry(step)
        return step.applied

    # -- the client's calls ---------------------------------------------------------------------

    def heartbeat(self, key: str, messages: int, in_flight: int | None = None,
                  oldest_call_started: float | None = None,
                  announce: dict[str, Any] | None = None) -> RunState:
        run, step = self.core.heartbeat(key, messages, self.clock.now(), in_flight,
                                        oldest_call_started, announce)
        if run is None:
            raise NotFound(f"no active run {key!r}")
        self._carry(step)
        return run

    def sync(self, key: str, request: ExportTraceServiceRequest, stop: str | None = None
             ) -> tuple[RunState | None, int]:
        """Apply the spans a client sends before its next step (:mod:`watchdog.sync`): the
        run's state once they are applied, and how many were new. ``stop``: the client stopped
        the run by itself (:data:`watchdog.sync.CLIENT_STOPS`), taken before the spans when the
        run is known: a tool call refused at the stop still ends a span, which must not count
        as an overrun of a grace."""
        self.core.ledger.register(key)
        self.state.admit()
        decoded = records_from(request)
        stopped = self.core.client_stopped(key, stop) if stop is not None else None
        applied = self._apply(decoded, "sync")
        if stop is None:
            return self.tracker.get(key), applied
        run = stopped if stopped is not None else self.core.client_stopped(key, stop)
        if run is not None:
            self.state.mark(run)
        return run, applied

    # -- the model endpoint (DESIGN §12) -------------------------------------------------------

    def model_open(self, key: str, key_source: KeySource, trace_id: str, agent: str | None,
                   session: str | None, budget: dict[str, float] | None) -> RunState:
        """The endpoint's run at a request, opened if no span has named it yet."""
        self.state.admit()
        run, step = self.core.open_run(key, key_source, trace_id, self.clock.now(), agent,
                                       session, budget)
        self._carry(step)
        return run

    def model_records(self, records: list[SpanRecord]) -> None:
        """Apply what the model endpoint saw (its calls and the tool results they carried)
        through the path spans take."""
        if records:
            self.state.admit()
            self._carry(self.core.apply(records, self.clock.now()))

    def model_in_flight(self, key: str, calls: int) -> None:
        """The model endpoint's word on what runs for ``key`` now (its model call, or the
        tools it handed over), as a client heartbeat tells it: a run waiting on them is not
        idle."""
        run = self.tracker.get(key)
        if run is not None and not run.ended and not run.framed:
            run.heartbeat(0, self.clock.now(), calls)

    def board(self, key: str) -> Board | None:
        return self.boards.get(key)

    # -- the timer ------------------------------------------------------------------------------

    def tick(self) -> list[RunState]:
        """Periodic work: time-based rules for active runs, then silent runs are abandoned."""
        now = self.clock.now()
        step = Step()
        self.core.evaluate(list(self.tracker.active()), now, step, timed_only=True)
        return self._expire(now, step)

    async def tick_in_slices(self) -> list[RunState]:
        """:meth:`tick` for the server: the timed rules run over the active runs in slices, so
        export requests and directive streams are served in between."""
        now = self.clock.now()
        runs = list(self.tracker.active())
        for start in range(0, len(runs), EVAL_SLICE):
            step = Step()
            self.core.evaluate(runs[start:start + EVAL_SLICE], now, step, timed_only=True)
            self._carry(step)
            await self.priority.turn()
        return self._expire(now, Step())

    def _expire(self, now: float, step: Step) -> list[RunState]:
        self.core.expire(now, step)
        expired = [run for run in step.finished]
        self._carry(step)
        self.observer.set_stuck(self.core.stuck_counts())
        return expired

    def evaluate(self, runs: Iterable[RunState], now: float, timed_only: bool = False,
                 changed: frozenset[str] | None = None) -> int:
        """Evaluate the rules for ``runs`` and hand every decision on; returns how many fired."""
        step = Step()
        fired = self.core.evaluate(runs, now, step, timed_only, changed)
        self._carry(step)
        return fired

    # -- sessions -------------------------------------------------------------------------------

    async def checkpoint(self, session_id: str, checkpoint: Checkpoint) -> dict[str, Any]:
        """Fold a checkpoint into its session, persist it before answering (an acknowledged
        checkpoint survives a crash), then evaluate the session's active runs (zero-progress)."""
        self.state.admit_state()
        session = self.sessions.get_or_create(session_id)
        run = self.tracker.get(checkpoint.run) if checkpoint.run else None
        if run is not None and run.session is None:
            run.announce(session=session_id)  # the checkpoint says whose run it is
            self.state.mark(run)
        outcome = session.checkpoint(checkpoint, self._active_runs(session))
        self.sessions.changed(session)
        await self.state.save_sessions([session.to_dict()])
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
        return self.core.stuck_counts()

    def default_budget(self, run: RunState) -> dict[str, float] | None:
        return self.core.default_budget(run)

    # -- persistence ----------------------------------------------------------------------------

    def flush(self) -> None:
        """Persist everything pending, synchronously (only when no loop is running: tests)."""
        self.state.flush()

    async def save_pending(self) -> bool:
        return await self.state.save_pending()
