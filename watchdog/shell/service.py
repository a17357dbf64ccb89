"""The shell around the core: export requests in, the core's steps carried on, one way.

Receivers call :meth:`WatchdogService.export_in_slices` (the
:class:`~watchdog.shell.receivers.consumer. TraceConsumer` they depend on); the control API calls
the client methods (heartbeat, sync, checkpoint) and reads through :attr:`WatchdogService.queries`.
Each call runs the sans-IO :class:`~watchdog.core.step.Core` and carries its
:class:`~watchdog.core.handout.Step` on: touched runs and activity to the
:class:`~watchdog.shell.state.persist.StateWriter`, decisions to the decision sink (the outbox),
counts to the observer (metrics), events to the log. Nothing below calls back up.

All methods run on the event loop thread (the core is not thread-safe). Work the state cannot
take is refused (:class:`Overloaded`, :class:`StateUnavailable`) rather than queued without
bound.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from watchdog.core.directives.model import Directive
from watchdog.core.fleet import Fleet
from watchdog.core.handout import Step
from watchdog.core.rules.decision import Action, Decided, withdraws
from watchdog.core.rules.engine import FiredRecord, RuleEngine
from watchdog.core.rules.model import Budget, Finish, text_template
from watchdog.core.runs.tracker import BatchResult, RunTracker
from watchdog.core.runs.view import OpenedRun, RunView
from watchdog.core.sessions import Checkpoint, SessionBook, SessionState, empty_context
from watchdog.core.shown import shown
from watchdog.core.spans.decode import TraceRequest
from watchdog.core.spans.record import (
    DUPLICATE_SPAN_ID,
    KeySource,
    SpanRecord,
    duplicate_message,
)
from watchdog.core.step import RECENT_STEPS, SESSION_CHANGED, Core, newer_snapshot
from watchdog.shell import logs
from watchdog.shell.clock import Clock, SystemClock
from watchdog.shell.config import Config
from watchdog.shell.errors import NotFound
from watchdog.shell.pricing import GenAIPrices
from watchdog.shell.priority import Priority
from watchdog.shell.state.persist import StateWriter
from watchdog.shell.state.queries import RunQueries
from watchdog.shell.state.store import UNREADABLE, Store, StoreWriteError, decode, encode_row

if TYPE_CHECKING:
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    from watchdog.core.model.steer import Board
    from watchdog.core.spans.logs import LogJoin
    from watchdog.core.spans.pipeline import Decoded

log = logging.getLogger("watchdog")

# what an export request's answer said: the spans it rejected, by reason, and the first error
Answered = tuple[tuple[tuple[str, int], ...], str]

MAX_RECENT_REQUESTS = 1024  # digests of recent export bodies, to drop exporter retries
MAX_ANSWERED_ERROR_CHARS = 1024  # of the first error each kept export's answer names
MAX_BOARDS = 10_000  # runs whose latest directives the model endpoint can read
MAX_FAILED_RUNS_LOGGED = 1000  # runs whose failure was logged (each is logged once per stage)
INGEST_SLICE = 32  # spans applied between two yields to the event loop
EVAL_SLICE = 50  # runs whose timed rules are evaluated between two yields to the event loop



class Observer(Protocol):
    """What the service reports as it works; :mod:`watchdog.shell.metrics` implements it."""

    def spans_received(self, protocol: str, decoded: Decoded, now: float) -> None: ...
    def spans_rejected(self, reason: str, count: int) -> None: ...
    def batch_applied(self, result: BatchResult, evicted: Sequence[RunView]) -> None: ...
    def runs_finished(self, runs: Iterable[RunView]) -> None: ...
    def runs_reclassified(self, moves: Iterable[tuple[RunView, str]]) -> None: ...
    def runs_resumed(self, moves: Iterable[tuple[str | None, str]]) -> None: ...
    def rule_fired(self, rule: str, action: str, agent: str, trace_id: str | None) -> None: ...
    def rule_error(self, rule: str) -> None: ...
    def rule_eval(self, seconds: float) -> None: ...
    def set_stuck(self, counts: dict[tuple[str, str], int]) -> None: ...
    def tools_failing(self, outages: dict[str, bool]) -> None: ...
    def run_failed(self, stage: str) -> None: ...
    def state_writable(self, writable: bool) -> None: ...


class NullObserver:
    def spans_received(self, protocol: str, decoded: Decoded, now: float) -> None:
        pass

    def spans_rejected(self, reason: str, count: int) -> None:
        pass

    def batch_applied(self, result: BatchResult, evicted: Sequence[RunView]) -> None:
        pass

    def runs_finished(self, runs: Iterable[RunView]) -> None:
        pass

    def runs_reclassified(self, moves: Iterable[tuple[RunView, str]]) -> None:
        pass

    def runs_resumed(self, moves: Iterable[tuple[str | None, str]]) -> None:
        pass

    def rule_fired(self, rule: str, action: str, agent: str, trace_id: str | None) -> None:
        pass

    def rule_error(self, rule: str) -> None:
        pass

    def rule_eval(self, seconds: float) -> None:
        pass

    def set_stuck(self, counts: dict[tuple[str, str], int]) -> None:
        pass

    def tools_failing(self, outages: dict[str, bool]) -> None:
        pass

    def run_failed(self, stage: str) -> None:
        pass

    def state_writable(self, writable: bool) -> None:
        pass


class DecisionSink(Protocol):
    """Where decisions go to become directives
    (:class:`watchdog.shell.directives.outbox.Outbox`), each stored with its run's snapshot as
    the decision left it (``run_row``); once a flush of the runs has stored every run decided
    on up to a directive (``global_seq``), those snapshots are forgotten."""

    @property
    def global_seq(self) -> int: ...

    def submit(self, decided: Decided, run_row: str | None = None) -> object: ...

    async def forget_snapshots(self, up_to: int) -> None: ...


def _new_log_join(wait_seconds: float) -> LogJoin:
    """A log join, the span pipeline imported with it (at the first export, on a thread)."""
    import watchdog.core.spans.pipeline  # noqa: F401
    from watchdog.core.spans.logs import LogJoin

    return LogJoin(wait_seconds)


class WatchdogService:
    def __init__(self, config: Config, store: Store, observer: Observer | None = None,
                 clock: Clock | None = None, engine: RuleEngine | None = None,
                 sink: DecisionSink | None = None) -> None:
        self.config = config
        self.sink = sink
        self.store = store
        self.observer: Observer = observer or NullObserver()
        self.clock: Clock = clock or SystemClock()
        self.sessions = SessionBook(store.get_session, unreadable=self._session_unreadable)
        tracker = RunTracker(max_runs=config.max_runs, run_end_timeout=config.run_end_timeout,
                             loose_run_gap=config.loose_run_gap)
        self.pricer = GenAIPrices()
        self.core = Core(tracker, self.sessions, engine, Fleet(config.fleet_window),
                         timer=time.perf_counter, pricer=self.pricer)
        self.priority = Priority()  # bulk work steps aside for syncs in flight (DESIGN §8)
        # told after each step of the core (the model endpoint's relay: the fleet may have
        # moved, and with it what a new run gets)
        self.stepped: Callable[[Step], None] | None = None
        # told the id of a session a checkpoint changed (the model relay's proofs read it)
        self.session_changed: Callable[[str], None] | None = None
        self.state = StateWriter(store, self.sessions, self.observer, config.state_dir,
                                 self._run_failed, self.priority, applied=self.core.recent)
        self.queries = RunQueries(self.core, store, self.clock,
                                  self.state.unsaved, self._run_failed,
                                  config.activity_log_size, config.trace_url)
        # runs first seen before this (the clock's time a flush that stored every changed run
        # began) are in the store: a directive decided on one needs no snapshot of it
        self._stored_before = float("-inf")
        # ... each with what its answer said (the spans it rejected by reason, the first
        # error): an exporter's retry of it, its answer lost, gets the same answer
        self._recent_requests: OrderedDict[bytes, Answered] = OrderedDict()
        # digests of requests being applied in slices: a retry meanwhile waits for the answer
        self._in_progress: dict[bytes, asyncio.Event] = {}
        self._failed_logged: set[tuple[str, str]] = set()  # (stage, run) already logged
        self._rule_errors = logs.RuleErrorLog()
        self.boards: OrderedDict[str, Board] = OrderedDict()  # run -> its latest directives
        # GenAI log events and the spans they describe meet here (bounded in size and time):
        # made with the span pipeline, at the first export (:attr:`log_join`)
        self._log_join: LogJoin | None = None
        # when each logs request being read came in: a held trace's wait is over only once no
        # request that came before its deadline is still unread (a busy loop reads late)
        self._logs_arrived: list[float] = []

    @property
    def log_join(self) -> LogJoin:
        """Where GenAI log events and their spans meet; made at the first trace or logs export
        or sync, when the span pipeline loads (the conventions and their tables, some 1.2 MB:
        docs/performance.md, Footprint)."""
        if self._log_join is None:
            self._log_join = _new_log_join(self.config.log_content_wait)
        return self._log_join

    def log_content_counts(self) -> dict[str, int]:
        """How GenAI log events' content was read so far (the metric ``log_content_total``):
        none before the log join is made."""
        join = self._log_join
        return join.content_counts() if join is not None else {}

    async def _pipeline_loaded(self) -> None:
        """The first export's: the span pipeline's imports (some 20 ms) on a thread, the event
        loop serving meanwhile, and the log join made."""
        if self._log_join is None:
            made = await asyncio.to_thread(_new_log_join, self.config.log_content_wait)
            if self._log_join is None:  # (not made meanwhile, for another first export)
                self._log_join = made

    @property
    def tracker(self) -> RunTracker:
        return self.core.tracker

    @property
    def state_error(self) -> str | None:
        return self.state.state_error

    # -- lifecycle ------------------------------------------------------------------------------

    def restore(self, decided: Iterable[tuple[str, str]] = ()) -> int:
        """Load the runs that were active (and recently ended) when the process last stopped.
        ``decided``: ``(run, snapshot)`` stored with the directives decided since the last
        flush; a run the store lacks, or holds as it was before that snapshot, is taken from
        it (a crash between a decision and the next flush). A stored run that cannot be read
        back is skipped and counted, never a failed start."""
        active = self.store.load_runs(True, self.config.max_runs)
        ended = self.store.load_runs(False, 1000)
        newer = self._decided_snapshots(decided, active, ended)
        if newer:
            kept = set(newer)
            active = [row for row in active if row.get("key") not in kept]
            ended = [row for row in ended if row.get("key") not in kept]
            for row in newer.values():
                (ended if row.get("ended") else active).append(row)
        restored = self.core.restore(active, ended, self._unreadable)
        for key in newer:  # stored by the next flush (then their directives' copies go)
            run = self.tracker.get(key)
            if run is not None:
                self.state.take({key: run}, [])
        active_keys = restored
        self._restore_applied()
        self._restore_tracker_state()
        for key in active_keys:  # their last steps, for the report prompts of their next ones
            self.core.remember(self.store.activity(key, RECENT_STEPS))
        self.sessions.know(self.store.session_ids())
        return len(active_keys)

    def _decided_snapshots(self, decided: Iterable[tuple[str, str]],
                           active: list[dict[str, Any]], ended: list[dict[str, Any]]
                           ) -> dict[str, dict[str, Any]]:
        """Of the snapshots stored with directives, those newer than the store's row of their
        run (or whose run it lacks), by run."""
        loaded = {row.get("key"): row for row in (*active, *ended)}
        newer: dict[str, dict[str, Any]] = {}
        for key, text in decided:
            try:
                row = decode(text)
                if not isinstance(row, dict) or row.get("key") != key:
                    raise ValueError("not this run's snapshot")
            except UNREADABLE:
                self._unreadable(key)
                continue
            stored = loaded[key] if key in loaded else self.store.get_run(key)
            if newer_snapshot(row, stored):
                newer[key] = row
        return newer

    def _restore_applied(self) -> None:
        """The span ids the flushes stored with the runs they changed (the last ones a crash
        left too): such a span sent again is dropped, its counts being stored."""
        spans, unread = self.store.applied_spans()
        unread += self.core.recent.restore(spans)
        if unread:
            log.warning("%d span ids of those applied, kept by the state flushes, cannot be "
                        "read: skipped (such a span sent again is applied again)", unread)

    def _restore_tracker_state(self) -> None:
        """What the tracker held beyond its runs at a clean shutdown, and the spans applied
        last (not after a crash: then a nested agent whose spans came before the restart is
        not split out of its trace's run, and a batch sent again is applied again); never a
        failed start."""
        saved = self.store.take_tracker_state()
        if saved is None:
            return
        try:
            kept = json.loads(saved)
            skipped = self.tracker.restore_state(kept)
            unread = self.core.recent.restore(kept.get("recent_spans"))
        except (ValueError, TypeError, AttributeError):
            log.warning("the tracker state kept at the last shutdown cannot be read: skipped")
            return
        if skipped:
            log.warning("%d traces of the tracker state kept at the last shutdown cannot be "
                        "read: skipped", skipped)
        if unread:
            log.warning("%d span ids of those applied last, kept at the last shutdown, cannot be "
                        "read: skipped (such a span sent again is applied again)", unread)

    def _unreadable(self, key: str) -> None:
        self._run_failed("restore", key)

    def _session_unreadable(self, session_id: str, error: Exception) -> None:
        self.observer.run_failed("session")
        log.warning("session %s is stored but cannot be read (%s): a run or checkpoint of it "
                    "starts it afresh", shown(session_id), str(error)[:200] or type(error).__name__)

    def restore_forced(self, fired: Iterable[FiredRecord]) -> None:
        self.core.restore_forced(fired)
        self.observer.set_stuck(self.core.stuck_counts())  # runs_stuck as before the restart

    async def close(self) -> None:
        """Persist what is pending, and what the tracker holds beyond its runs (the records
        of traces in progress), then close the store. Traces held for their GenAI log events
        go on first, read with what came."""
        try:
            self._release_held(float("inf"), closing=True)
        except Exception:  # (a run's failure is logged by _apply's callers; close goes on)
            log.exception("the traces held for their log events could not be applied")
        try:
            kept = self.tracker.state()
            kept["recent_spans"] = self.core.recent.state()  # (a retry after the restart)
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
        self.state.take(step.dirty, step.activity, step.gone)
        if self.stepped is not None:
            self.stepped(step)
        observer = self.observer
        if step.batch is not None:
            observer.batch_applied(step.batch, step.evicted)
        for failure in step.failures:
            self._run_failed(failure.stage, failure.run_key, failure.error)
        if step.eval_seconds:
            observer.rule_eval(step.eval_seconds)
        for rule, count in step.rule_errors.items():
            for _ in range(count):
                observer.rule_error(rule)
            self._rule_errors.failed(rule, count, *step.rule_error_texts.get(rule, ("", "")),
                                     self.clock.now())
        if step.outages:
            observer.tools_failing(step.outages)
            for tool, failing in step.outages.items():
                logs.event("tool_outage" if failing else "tool_recovered", tool=tool)
        if step.decisions:
            rows: dict[str, str | None] = {}
            for decided in step.decisions:
                key = decided.run.key
                if key not in rows:
                    rows[key] = self._decided_row(key, step)
                self._decided(decided, rows[key])
        for key, into in step.gone.items():
            logs.event("run_merged", run=key, into=into)
        if step.resumed:
            resumed: list[tuple[str | None, str]] = []
            for key, (was, reason) in step.resumed.items():  # (its run_ended said so)
                logs.event("run_resumed", run=key, was=was, reason=reason)
                back = step.dirty.get(key) or self.tracker.get(key)
                resumed.append((back.agent if back is not None else None, was))
            observer.runs_resumed(resumed)
        if step.finished:
            observer.runs_finished(step.finished)
            for run in step.finished:
                logs.event("run_ended", run=run.key, agent=run.agent,
                           terminal_state=run.terminal_state.value if run.terminal_state
                           else None, reason=run.terminal_reason,
                           has_final_answer=run.has_final_answer)
        if step.reclassified:
            observer.runs_reclassified(step.reclassified)
            for run, was in step.reclassified:
                logs.event("run_reclassified", run=run.key, agent=run.agent, was=was,
                           terminal_state=run.terminal_state.value if run.terminal_state
                           else None, reason=run.terminal_reason)

    def _decided_row(self, key: str, step: Step) -> str | None:
        """The run's snapshot as the step that decided on it left it (the runs database's row),
        to be stored with its directives when the runs database may not hold the run yet (it
        came after the last flush began): the runs are flushed every ``state_flush_interval``,
        the directive at once, and a crash in between must not keep a directive without its run.
        (A run the store holds keeps, after a crash, the stop its directives decided:
        :meth:`restore_forced`.) The run is dirty too, so the next flush stores it (after
        which the snapshot stored with the directive is forgotten). None when none is needed,
        or when it cannot be taken (the failure is counted)."""
        if self.sink is None:
            return None
        run = step.dirty.get(key) or self.tracker.get(key)
        if run is None:
            return None
        if key not in step.dirty:
            self.state.take({key: run}, [])
        if run.first_seen < self._stored_before:  # a flush that began after it has stored it
            return None
        try:
            return encode_row(run.to_row())
        except Exception as exc:
            self._run_failed("snapshot", key, exc)
            return None

    def _decided(self, decided: Decided, run_row: str | None = None) -> None:
        decision, run = decided.decision, decided.run
        if withdraws(decision.action.value, decision.message):  # (no firing: a note taken back)
            logs.event("rule_withdrawn", rule=decision.rule, run=run.key, agent=run.agent)
        else:
            self.observer.rule_fired(decision.rule, decision.action.value, run.agent,
                                     run.trace_id)
            logs.event("rule_fired", rule=decision.rule, action=decision.action.value,
                       severity=decision.severity.value, run=run.key, agent=run.agent,
                       terminal_state=decision.terminal_state.value if decision.terminal_state
                       else None, escalation=decision.escalation)
        if self.sink is not None:
            directive = self.sink.submit(decided, run_row)
            if isinstance(directive, Directive):
                self._post(directive)

    def restore_boards(self, directives: Iterable[Directive]) -> None:
        """After a restart: the active runs' stored directives (oldest first) on their boards,
        so the model endpoint's next request of a run stopped or wound down before the restart
        is answered as it would have been (an abort: not sent upstream). One stored before
        directives said what they count down (``countdown``), of a rule that declares it now,
        counts it down (so a run wound down by the default pack's countdown is not told its
        stale message once the sidecar that stored it is upgraded)."""
        engine = self.core.engine
        for directive in directives:
            if directive.countdown is None and engine is not None and not directive.grace \
                    and not directive.escalation and directive.action != Action.NOTIFY.value:
                rule = engine.ruleset.get(directive.rule)
                if rule is not None:
                    directive.countdown = rule.countdown
            self._post(directive)

    def _post(self, directive: Directive) -> None:
        """Keep a run's latest directives for the model endpoint's next request of it: it
        reads them as they are decided, not from the store (read-your-writes, as a sync).
        Without a model endpoint nothing reads them: none is kept (and its module never
        loads)."""
        if self.config.model_address is None:
            return
        boards = self.boards
        board = boards.get(directive.run_id)
        if board is None:
            from watchdog.core.model.steer import Board  # (loaded with the model endpoint)

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

    def export(self, request: TraceRequest, protocol: str,
               digest: bytes | None = None) -> Decoded:
        """Apply one OTLP export request at once. ``digest`` (of the body) lets a retried
        request that was already applied be acknowledged without counting its spans twice."""
        from watchdog.core.spans.pipeline import slices_of

        if self._is_duplicate(digest):
            return self._answered_again(digest)
        self.state.admit()
        decoded = next(slices_of(request, None, self.log_join, self.clock.now()))
        self._apply(decoded, protocol)
        self._remember(digest, decoded)
        return decoded

    async def export_in_slices(self, parse: Callable[[], TraceRequest],
                               protocol: str, digest: bytes | None = None) -> Decoded:
        """:meth:`export` for the receivers
        (:class:`~watchdog.shell.receivers.consumer.TraceConsumer`): the request is parsed at its
        turn — a sync on its way goes first, not after a whole body's parse (~1 ms for 128
        spans) — and applied ``INGEST_SLICE`` spans at a time (on to the end of the trace they
        end in, up to ``MAX_TRACE_SLICE``: a trace is read in one step) with the event loop
        served in between, so a small request (a sync, a heartbeat, an SSE write) never waits
        for a whole 512-span batch."""
        await self._pipeline_loaded()
        from watchdog.core.spans.pipeline import Decoded, slices_of

        while digest is not None and (applying := self._in_progress.get(digest)) is not None:
            await applying.wait()  # (a retry while the request is applied: its answer)
        if self._is_duplicate(digest):
            return self._answered_again(digest)
        self.state.admit()
        if digest is not None:
            self._in_progress[digest] = asyncio.Event()
        total = Decoded()
        try:
            if not self.pricer.ready:  # the first export: the price data loads off the loop
                await self.pricer.loaded()
            await self.priority.turn()  # the parse is a slice of its own
            request = parse()
            for part in slices_of(request, INGEST_SLICE, self.log_join, self.clock.now()):
                await self.priority.turn()
                self._apply(part, protocol)
                total.rejected.update(part.rejected)
                total.first_error = total.first_error or part.first_error
            self._remember(digest, total)
        finally:
            if digest is not None:
                self._in_progress.pop(digest).set()
        return total

    async def export_logs(self, parse: Callable[[], ExportLogsServiceRequest],
                          protocol: str, digest: bytes | None = None) -> bool:
        """Read one OTLP logs export request's GenAI log events (the content of the spans
        they name, :mod:`watchdog.core.spans.logs`) and apply the held traces whose content
        is now all there. False for an exporter's retry of a request already read."""
        await self._pipeline_loaded()
        from watchdog.core.spans.pipeline import Decoded, late_content, released

        if self._is_duplicate(digest):
            return False
        self.state.admit()
        arrived = self.clock.now()
        self._logs_arrived.append(arrived)
        try:
            await self.priority.turn()
            request = parse()
            now = self.clock.now()
            ready = self.log_join.add(request, now)
        finally:
            self._logs_arrived.remove(arrived)
        late = late_content(self.log_join)  # (content of model calls applied without it)
        if ready or late:
            self._apply(released(ready, self.log_join, now) if ready else Decoded(), protocol,
                        late)
        self._remember(digest)
        return True

    def _release_held(self, now: float, closing: bool = False) -> None:
        """Traces held for their content whose wait is over go on, read with what came: over
        by ``now`` and before the first logs request still unread came in (all when
        ``closing``)."""
        if self._log_join is None:  # no export yet: nothing held
            return
        from watchdog.core.spans.pipeline import released

        if self._logs_arrived and not closing:
            now = min(now, min(self._logs_arrived))
        due = self._log_join.expired(now)
        if due:
            self._apply(released(due, self.log_join, self.clock.now()), "held")

    def _is_duplicate(self, digest: bytes | None) -> bool:
        return digest is not None and (digest in self._recent_requests
                                       or digest in self._in_progress)

    def _answered_again(self, digest: bytes | None) -> Decoded:
        """An exporter's retry of a request applied (or being applied, by :meth:`export`):
        acknowledged, not counted, with what the request's answer said (its
        ``partial_success``: the exporter whose answer was lost learns of the rejection)."""
        from collections import Counter

        from watchdog.core.spans.pipeline import Decoded

        rejected, first_error = self._recent_requests.get(digest or b"", ((), ""))
        return Decoded(rejected=Counter(dict(rejected)), first_error=first_error,
                       duplicate=True)

    def _remember(self, digest: bytes | None, decoded: Decoded | None = None) -> None:
        if digest is not None:
            self._recent_requests[digest] = (
                tuple(decoded.rejected.items()), decoded.first_error[:MAX_ANSWERED_ERROR_CHARS]
            ) if decoded is not None and decoded.rejected else ((), "")
            if len(self._recent_requests) > MAX_RECENT_REQUESTS:
                self._recent_requests.popitem(last=False)

    def _apply(self, decoded: Decoded, protocol: str,
               late: Sequence[tuple[SpanRecord, SpanRecord]] = ()) -> int:
        """Apply decoded records (and ``late``: model calls applied before their content
        came, with that content); returns how many were new (not a synced span's copy)."""
        now = self.clock.now()
        self.observer.spans_received(protocol, decoded, now)
        step = self.core.apply(decoded.records, now, late)
        if step.conflicts:  # another span with an id applied before: the request's rejection
            decoded.rejected[DUPLICATE_SPAN_ID] += len(step.conflicts)
            decoded.first_error = decoded.first_error or duplicate_message(step.conflicts[0])
            self.observer.spans_rejected(DUPLICATE_SPAN_ID, len(step.conflicts))
        self._carry(step)
        return step.applied

    # -- the client's calls ---------------------------------------------------------------------

    def heartbeat(self, key: str, messages: int, in_flight: int | None = None,
                  oldest_call_started: float | None = None,
                  announce: dict[str, Any] | None = None) -> RunView:
        self.pricer.load_soon()  # a run has begun: its model calls will be priced
        run, step = self.core.heartbeat(key, messages, self.clock.now(), in_flight,
                                        oldest_call_started, announce)
        if run is None:
            raise NotFound(f"no active run {shown(key)}")
        self._carry(step)
        return run

    def sync(self, key: str, request: TraceRequest, stop: str | None = None,
             announce: dict[str, Any] | None = None) -> tuple[RunView | None, int]:
        """Apply the spans a client sends before its next step (:mod:`watchdog.core.sync`): the
        run's state once they are applied, and how many were new. ``stop``: the client stopped
        the run by itself (:data:`watchdog.core.sync.CLIENT_STOPS`), taken before the spans when the
        run is known: a tool call refused at the stop still ends a span, which must not count
        as an overrun of a grace. ``announce``: who the run is and its budget (as a heartbeat's),
        taken first — a sync that comes before the run's first heartbeat counts against it."""
        self.core.ledger.register(key)
        self.state.admit()
        self.pricer.load_soon()
        from watchdog.core.spans.pipeline import records_from

        decoded = records_from(request)
        core = self.core
        if announce is not None:
            self._carry(core.heartbeat(key, 0, self.clock.now(), announce=announce)[1])
        stopped = core.client_stopped(key, stop, self.clock.now()) if stop is not None else None
        applied = self._apply(decoded, "sync")
        if stop is not None:
            if stopped is None:
                stopped = core.client_stopped(key, stop, self.clock.now())
            if stopped is not None:
                self._carry(stopped)
        return self.view(key), applied

    def view(self, key: str) -> RunView | None:
        """The run ``key`` as it is now (None: not in memory)."""
        return self.core.view(key, self.clock.now())

    def live_runs(self) -> list[tuple[str, float]]:
        """The active runs' agents and last progress (the live-runs gauges)."""
        return self.core.live_runs()

    def active_keys(self) -> list[str]:
        """The active runs' keys."""
        return self.core.active_keys()

    def now(self) -> float:
        """The time on the watchdog's clock."""
        return self.clock.now()

    # -- the model endpoint (DESIGN §12) -------------------------------------------------------

    def model_open(self, key: str, key_source: KeySource, trace_id: str, agent: str | None,
                   session: str | None, budget: dict[str, float] | None,
                   records: Sequence[SpanRecord] = (), going_on: bool = False,
                   parent: str | None = None) -> OpenedRun:
        """The endpoint's run at a request, opened if no span has named it yet, after the
        ``records`` the request carried (one step of the core); ``going_on``: the request
        answers calls the run handed over; ``parent``: the run whose child it is (a
        sub-agent's caller's) (:meth:`Core.open_run`)."""
        self.state.admit()
        self.pricer.load_soon()  # priced when the upstream has answered
        run, step = self.core.open_run(key, key_source, trace_id, self.clock.now(), agent,
                                       session, budget, records, going_on, parent)
        self._carry(step)
        return run

    def model_records(self, records: list[SpanRecord]) -> None:
        """Apply what the model endpoint saw (its calls and the tool results they carried)
        through the path spans take."""
        if records:
            self.state.admit()
            self._carry(self.core.model_records(records, self.clock.now()))

    def model_stopped(self, key: str) -> None:
        """The model endpoint answered run ``key`` with an abort's stop: the run ends now."""
        stopped = self.core.model_stopped(key, self.clock.now())
        if stopped is not None:
            self._carry(stopped)

    def model_stop_answered(self, key: str, note: str, answers: Iterable[str]) -> None:
        """The model endpoint answered run ``key`` with its stop ``note``; ``answers``: what a
        request that goes on from it carries. Kept with the run (its snapshot)."""
        stopped = self.core.model_stop_answered(key, note, answers, self.clock.now())
        if stopped is not None:
            self._carry(stopped)

    def stop_of(self, key: str | None, answers: Sequence[str]
                ) -> tuple[str, str, tuple[str, ...]] | None:
        """The model endpoint's stop kept with run ``key``, else with the run whose stop answer
        one of ``answers`` is: ``(run, note, answers)``, or None."""
        return self.core.stop_of(key, answers)

    def model_in_flight(self, key: str, calls: int, since: float | None = None) -> None:
        """The model endpoint's word on what runs for ``key`` now (its model call, or the
        tools it handed over), as a client heartbeat tells it: a run waiting on them is not
        idle; ``since``: when their request arrived (:meth:`now`'s clock)."""
        self.core.model_in_flight(key, calls, self.clock.now(), since)

    def model_failed(self, key: str, code: str) -> None:
        """The model endpoint answered the run ``key``'s request with an error (``code``): the
        run ends ``error`` unless its agent sends another request within ``loose_run_gap``."""
        self.core.model_failed(key, code, self.clock.now())

    def board(self, key: str) -> Board | None:
        return self.boards.get(key)

    def acts_in_text(self, agent: str | None) -> Budget | None:
        """The rule packs' budgets entry of ``agent`` when its agents act in their answers'
        text (``actions: text``), else None."""
        engine = self.core.engine
        return engine.ruleset.acts_in_text(agent) if engine is not None and agent else None

    def text_acting(self, agent: str | None, instructions: str) -> Budget | None:
        """How a model request of ``agent`` that offers no API tools acts in its answers'
        text (:meth:`RuleSet.text_acting <watchdog.core.rules.model.RuleSet.text_acting>`: its
        budgets entry when that says ``actions:``, else the text templates its
        ``instructions`` carry), else None."""
        engine = self.core.engine
        if engine is not None and agent:
            return engine.ruleset.text_acting(agent, instructions)
        return text_template(instructions)

    def per_conversation(self, agent: str | None) -> bool:
        """Whether the rule packs' budgets entry of ``agent`` covers its whole conversation
        (``budget_per: conversation``)."""
        engine = self.core.engine
        return engine is not None and agent is not None and engine.ruleset.per_conversation(agent)

    def pack_budget(self, agent: str | None) -> Mapping[str, float]:
        """The rule packs' budget for ``agent`` (empty: none), read only."""
        engine = self.core.engine
        return engine.agent_budget(agent) if engine is not None and agent else {}

    def work_beside_answer(self, agent: str | None) -> str | None:
        """Whether ``agent`` runs the calls asked beside its answer's, as the rule packs say
        (``work_beside_answer``), else None (as its framework's conventions say)."""
        engine = self.core.engine
        return engine.ruleset.work_beside_answer(agent) if engine is not None and agent \
            else None

    def finish_of(self, agent: str | None) -> Finish | None:
        """The tool call that ends ``agent``'s task, as the rule packs declare it
        (``finish:``), else None."""
        engine = self.core.engine
        return engine.ruleset.finish_of(agent) if engine is not None and agent else None

    def recent_lines(self, key: str) -> tuple[str, ...]:
        """The run's last steps as report lines (redacted), oldest first."""
        return self.core.recent_lines(key)

    def model_run(self, key: str) -> RunView | None:
        """The run ``key`` as it is now (None: not in memory)."""
        return self.core.view(key, self.clock.now())

    def trace_run(self, trace_id: str) -> str | None:
        """The run the spans of this trace named, if any."""
        return self.core.trace_run(trace_id)

    # -- the timer ------------------------------------------------------------------------------

    def tick(self) -> list[RunView]:
        """Periodic work: time-based rules for active runs, then silent runs are abandoned."""
        now = self.clock.now()
        self._release_held(now)
        self.evaluate(self.core.active_keys(), now, timed_only=True)
        self._carry(self.core.fleet_tick(now))
        return self._expire(now)

    async def tick_in_slices(self) -> list[RunView]:
        """:meth:`tick` for the server: the timed rules run over the active runs in slices, so
        export requests and directive streams are served in between."""
        now = self.clock.now()
        self._release_held(now)
        await self._evaluate_active(now, timed_only=True)
        self._carry(self.core.fleet_tick(now))
        return self._expire(now)

    async def rules_replaced(self) -> None:
        """The rules were reloaded: every active run is evaluated against them now, every rule
        (a lowered budget, a new rule), in slices as :meth:`tick_in_slices` does, so what they
        say holds without waiting for each run's next span."""
        await self._evaluate_active(self.clock.now(), timed_only=False)

    async def _evaluate_active(self, now: float, timed_only: bool) -> None:
        keys = self.core.active_keys()
        for start in range(0, len(keys), EVAL_SLICE):
            self.evaluate(keys[start:start + EVAL_SLICE], now, timed_only=timed_only)
            await self.priority.turn()

    def _expire(self, now: float) -> list[RunView]:
        step = Step()
        self.core.expire(now, step)
        self._carry(step)
        self.observer.set_stuck(self.core.stuck_counts())
        return step.finished

    def evaluate(self, keys: Iterable[str], now: float, timed_only: bool = False,
                 changed: frozenset[str] | None = None) -> int:
        """Evaluate the rules for the active runs ``keys`` names and hand every decision on;
        returns how many fired."""
        step = self.core.evaluate_keys(keys, now, timed_only, changed)
        self._carry(step)
        return len(step.decisions)

    # -- sessions -------------------------------------------------------------------------------

    async def checkpoint(self, session_id: str, checkpoint: Checkpoint) -> dict[str, Any]:
        """Fold a checkpoint into its session, persist it before answering (an acknowledged
        checkpoint survives a crash), then evaluate the session's active runs (zero-progress)."""
        self.state.admit_state()
        session = self.sessions.get_or_create(session_id)
        if checkpoint.run:  # the checkpoint says whose run it is
            self._carry(self.core.claim_session(checkpoint.run, session_id, self.clock.now()))
        outcome = session.checkpoint(checkpoint, self._active_runs(session))
        self.sessions.changed(session)
        if self.session_changed is not None:
            self.session_changed(session_id)
        await self.state.save_sessions([session.to_dict()])
        fired = self.evaluate(outcome.runs, self.clock.now(), changed=SESSION_CHANGED)
        return {**session.context(), "fired": fired}

    def _active_runs(self, session: SessionState) -> list[str]:
        return self.core.active_among(session.recent_runs)

    def session_context(self, session_id: str) -> dict[str, Any]:
        """What the next run of a session starts from; an unknown session has an empty
        context (zero counts), since agents ask for it before their first checkpoint."""
        session = self.sessions.get(session_id)
        if session is None and self.sessions.cannot_be_read(session_id):
            raise NotFound(f"session {shown(session_id)} is stored but cannot be read "
                           "(see the log)")
        context = session.context() if session is not None else empty_context(session_id)
        context["active_runs"] = self._active_runs(session) if session is not None else []
        return context

    def stuck_counts(self) -> dict[tuple[str, str], int]:
        return self.core.stuck_counts()

    # -- persistence ----------------------------------------------------------------------------

    def flush(self) -> None:
        """Persist everything pending, synchronously (only when no loop is running: tests)."""
        self.state.flush()

    def closing(self) -> None:
        """The receivers are closed (shutdown): what is saved now is said as such."""
        self.state.closing = True

    async def save_pending(self) -> bool:
        """Flush the runs; once it has stored them, the snapshots stored with the directives
        decided before it began are not needed: forgotten."""
        sink = self.sink
        decided = sink.global_seq if sink is not None else 0  # (read as the flush takes the runs)
        began = self.clock.now()
        saved = await self.state.save_pending()
        if saved:
            self._stored_before = max(self._stored_before, began)
            if decided and sink is not None:
                await sink.forget_snapshots(decided)
        return saved

    async def prune_store(self) -> None:
        """Drop what the store keeps beyond its bounds (on the store lane)."""
        await self.state.in_lane(self.store.prune, self.config.state_max_ended_runs)
