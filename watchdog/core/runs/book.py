"""The runs a tracker holds, and their reads: the active runs in order of last activity, the
recently ended ones (bounded), the trace aliases, the open runs of loose calls and the answers
that ended them, and the child runs waiting for the span their agent span hangs from; and how
they are saved and put back over a restart. Where each span goes is
:class:`~watchdog.core.runs.tracker.RunTracker`'s.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple, Protocol

from watchdog.core.bounds import is_number
from watchdog.core.runs.frames import FrameBook, TraceFrames
from watchdog.core.runs.run import RunState
from watchdog.core.spans.record import KEY_TRACE, KeySource, SpanRecord

MAX_ACTIVE_RUNS = 10_000  # default bound on runs tracked at once; the oldest idle is evicted
MAX_ENDED_IN_MEMORY = 2_000  # recently ended runs kept for late spans and fast reads
MAX_TRACE_ALIASES = 20_000  # trace id -> run, for spans below the agent that name no run
RUN_END_TIMEOUT = 900.0  # seconds without a span before a run is classified abandoned
# A run of loose model calls (no invocation span) that has not answered ends after this long
# without a call: longer than a slow tool plus a slow model call, shorter than "abandoned".
LOOSE_RUN_GAP = 120.0
# A run its trace names (a request's traceparent) that the model endpoint saw answer, and no
# span of the agent's came for: its agent sends no spans here, so its answer ends it after this
# long (an exporter sends a trace's spans within seconds; the trace's root ends the run then)
TRACED_ANSWER_WAIT = 30.0
MAX_TRACED_ANSWERS = 10_000
# A trace's run whose own agent span failed (its outcome known) waits for the trace's root that
# closes it only ``loose_run_gap`` after its last span: an instrumentation may leave that root
# open when the run raises (it is never exported); this many such runs are watched at once
MAX_FAILED_UNCLOSED = 10_000
# Response ids of model calls the model endpoint relayed for a run of its own (no traceparent),
# and of model calls a trace's spans traced: a span and an endpoint call of one response id are
# one call, and the span's trace is the endpoint's run (either may come first)
MAX_PAIRED_RESPONSES = 20_000
# Traces (and in each, at most MAX_SUBAGENTS_PER_TRACE spans) below which a sub-agent the model
# endpoint steers as a child run ran, in its caller's trace (the tool call that ran it): the
# spans below them are that child run's
MAX_SUBAGENT_TRACES = 10_000
MAX_SUBAGENTS_PER_TRACE = 64
MAX_LOOSE_GROUPS = 10_000  # open runs of loose calls (loose_group) tracked at once
MAX_PENDING_PARENTS = 10_000  # child runs waiting for the span their agent span hangs from
# Spans of no kind a run keeps that no tool asked for matched yet: the model call that asked
# for them may come later (its request after theirs), and then takes them (the most recent
# runs' first; kept over a clean restart)
MAX_UNCLAIMED_RUNS = 1_000
MAX_UNCLAIMED_PER_RUN = 4
# ... and the spans of no kind that came first in a trace with no run yet: placed when a span
# of the trace comes that has one (the most recent traces' first; kept over a clean restart)
MAX_UNPLACED_TRACES = 1_000
MAX_UNPLACED_PER_TRACE = 4
# ... and the spans of a run of loose calls opened by a tool call no model asked for at the
# root of its trace (or a model call's root: an instrumentation's attributes on the loop's
# span), while that trace is all the run has: if its model loop comes later (the root's
# request sent first), the root was the invocation (the most recent traces'; kept while the
# run is open and LATE_SPAN_GRACE after it ended; kept over a clean restart)
MAX_LONE_ROOTS = 1_000
MAX_LONE_ROOT_SPANS = 16
# Keys of each hold (runs, traces) whose spans are kept over a clean restart, the most recent
MAX_STATE_HELD = 500
# Retained records kept over a clean restart at most (the most recently used traces' first):
# the state is encoded at shutdown, within the pod's grace period.
MAX_STATE_RECORDS = 20_000


class LooseAnswer(NamedTuple):
    """The call that ended an agent's last run of loose calls."""

    run_key: str
    response_id: str  # "" if none: its twin (a second instrumentation's span) has it too
    scope: str  # ... and another scope
    start_ns: int
    end_ns: int
    since_ns: int  # when the answer before it (of the run before) ended; 0: unknown


class _Grouped(Protocol):
    service: str | None
    instance: str | None
    agent: str | None
    session: str | None


def loose_group(item: _Grouped) -> tuple[str | None, ...]:
    """The agent whose loose calls (a span's, or a run's) form one run: its service, its name
    and its session, else (no session) which process of the service it is: two replicas of one
    service are two agents, but the turns of one conversation may be served by any of them."""
    session = item.session
    return (item.service, item.instance if session is None else None, item.agent, session)


class RunBook:
    """What the tracker holds (all bounded), its reads, and its state over a restart."""

    def __init__(self, max_runs: int = MAX_ACTIVE_RUNS,
                 run_end_timeout: float = RUN_END_TIMEOUT,
                 max_ended: int = MAX_ENDED_IN_MEMORY,
                 loose_run_gap: float = LOOSE_RUN_GAP) -> None:
        self.max_runs = max_runs
        self.run_end_timeout = run_end_timeout
        self.max_ended = max_ended
        self.loose_run_gap = loose_run_gap
        self._active: OrderedDict[str, RunState] = OrderedDict()
        self._ended: OrderedDict[str, RunState] = OrderedDict()
        # told the key of each ended run let go (its bound): a request of it finds it no more
        self.dropped: Callable[[str], None] | None = None
        self._trace_runs: OrderedDict[str, tuple[str, KeySource]] = OrderedDict()
        # the model endpoint opened a run (it steers agents here): their spans' model calls
        # are looked up among the calls it relayed
        self.steering = False
        self._relayed: OrderedDict[str, str] = OrderedDict()  # response id -> endpoint run
        self._traced: OrderedDict[str, str] = OrderedDict()  # response id -> its span's trace
        # trace -> span -> the endpoint's child run whose sub-agent ran below that span
        self._subagents: OrderedDict[str, dict[str, str]] = OrderedDict()
        self._frames = FrameBook()
        self._loose: OrderedDict[tuple[str | None, ...], str] = OrderedDict()
        self._loose_traces: OrderedDict[str, str] = OrderedDict()  # trace -> its loose run
        # loose_group -> the call that ended its last run of loose calls: that
        # call's twin (its span by a second instrumentation, a trace of its own) may come after
        # it, and is no call of a next run; nor is a call that ended before it started (and
        # after the answer before it), sent after it: its run's, late
        self._loose_answers: OrderedDict[tuple[str | None, ...], LooseAnswer] = OrderedDict()
        self._pending_parents: OrderedDict[str, str] = OrderedDict()  # span id -> child run
        self._unclaimed: OrderedDict[str, list[SpanRecord]] = OrderedDict()  # run -> spans
        self._unplaced: OrderedDict[str, list[SpanRecord]] = OrderedDict()  # trace -> spans
        self._lone_roots: OrderedDict[str, list[SpanRecord]] = OrderedDict()  # trace -> spans
        self._traced_answers: OrderedDict[str, None] = OrderedDict()  # runs (TRACED_ANSWER_WAIT)
        self._failed_unclosed: OrderedDict[str, None] = OrderedDict()  # runs (loose_run_gap)
        # runs of the model endpoint whose last request got an error, no request after it yet:
        # the error's code and when (ended ``error`` loose_run_gap later unless one comes)
        self._failed_asks: OrderedDict[str, tuple[str, float]] = OrderedDict()
        # runs whose last answer their agent acts on (SpanRecord.acted_on): ended loose_run_gap
        # after their last call unless another comes
        self._acted_answers: OrderedDict[str, None] = OrderedDict()
        # ... and the response ids of such answers (at most MAX_TRACED_ANSWERS): a span of the
        # same call (the agent's own tracing of it, LiteLLM's callback's) is no answer either
        self._acted_responses: OrderedDict[str, None] = OrderedDict()

    # -- reads ----------------------------------------------------------------------------------

    def held_keys(self) -> set[str]:
        """The spans held out of every run's counts until a later span places or claims them
        (trace + span id, as :class:`~watchdog.core.sync.RecentSpans` keys them): at most
        MAX_UNCLAIMED_RUNS x MAX_UNCLAIMED_PER_RUN + MAX_UNPLACED_TRACES x
        MAX_UNPLACED_PER_TRACE."""
        return {record.trace_id + record.span_id
                for holds in (self._unclaimed, self._unplaced)
                for records in holds.values() for record in records}

    def get(self, key: str) -> RunState | None:
        return self._active.get(key) or self._ended.get(key)

    def children(self, key: str) -> list[RunState]:
        """The child runs of ``key`` that are in memory."""
        return [run for run in (*self._active.values(), *self._ended.values())
                if run.parent_run == key]

    def trace_run(self, trace_id: str) -> str | None:
        """The run the spans of ``trace_id`` that name one went to last (None: none did)."""
        owner = self._trace_runs.get(trace_id)
        return owner[0] if owner is not None else None

    def name_trace(self, trace_id: str, run: RunState, now: float) -> None:
        """The client SDK's run is in ``trace_id`` (its announcement says so): a model
        request that carries the trace's ``traceparent``, and a span of it that names no run,
        are that run's before any of its spans has come (the run named last, as spans name
        them). The run keeps the name with its snapshot (:meth:`restore` names it again)."""
        run.named_trace, run.named_at = trace_id, now
        self._alias(trace_id, run.key)

    def _alias(self, trace_id: str, key: str) -> None:
        traces = self._trace_runs
        traces[trace_id] = (key, KeySource.WATCHDOG)
        traces.move_to_end(trace_id)
        while len(traces) > MAX_TRACE_ALIASES:
            traces.popitem(last=False)

    def open(self, key: str, key_source: KeySource, trace_id: str, now: float
             ) -> tuple[RunState, bool]:
        """The run ``key`` (active or recently ended), or a new active one that no span has
        named yet (the model endpoint's, at its first request); and whether it is new."""
        self.steering = True
        run = self.get(key)
        if run is not None:
            return run, False
        run = self._active[key] = RunState(key, key_source, trace_id, now)
        return run, True

    def resume(self, key: str, now: float, going_on: bool = False
               ) -> tuple[RunState, tuple[str, str]] | None:
        """The run ``key``, ended ``abandoned`` (or ``completed``, ``going_on``), active
        again (:meth:`RunState.resume`), and the state and reason it had ended with; None when
        it is not such a run, or its spans say when it ends (a trace's run, or one the client
        SDK frames)."""
        run = self._ended.get(key)
        if run is None or run.framed or run.key_source is KEY_TRACE:
            return None
        ended = run.resume(now, going_on)
        if ended is None:
            return None
        del self._ended[key]
        self._active[key] = run
        return run, ended

    def active(self) -> Iterator[RunState]:
        return iter(self._active.values())

    def ended(self) -> Iterator[RunState]:
        return iter(self._ended.values())

    def __len__(self) -> int:
        return len(self._active)

    # -- writes ---------------------------------------------------------------------------------

    def restore(self, runs: Iterable[RunState]) -> None:
        """Put runs loaded from the store back (oldest activity first); an open run of loose
        calls is its agent's again, and its last call's trace is its own (the tool calls
        below that call may still come); the answer of one that ended still has its twin; a
        child run still waits for its parent's span; a trace an announcement named is its
        run's again (the run named last, of those named: a crash lost the tracker's state, a
        clean shutdown's :meth:`restore_state` puts it back whole after this)."""
        runs = list(runs)
        for run in sorted((run for run in runs if run.named_trace is not None),
                          key=lambda r: r.named_at):
            self._alias(str(run.named_trace), run.key)
        for run in sorted(runs, key=lambda r: r.last_seen):
            target = self._ended if run.ended else self._active
            target[run.key] = run
            if run.loose_trace is not None:
                self._loose_traces[run.loose_trace] = run.key
                group = loose_group(run)
                if not run.ended:
                    self._loose[group] = run.key
                elif run.has_final_answer and (answer := run.answer_call()) is not None:
                    self._remember_answer(group, run.key, *answer)
            if run.hangs_from is not None and run.parent_run is None:
                self._pending_parents[run.hangs_from] = run.key
            if not run.ended and run.key_source is KEY_TRACE and run.has_final_answer \
                    and not run.agent_spans:
                self._traced_answers[run.key] = None
            if not run.ended and run.key_source is KEY_TRACE and run.end_error_type is not None:
                self._failed_unclosed[run.key] = None
            if not run.ended and run.key.startswith("model:") and run.has_final_answer \
                    and not run.agent_spans:
                # (an endpoint's run open after its answer: its agent acts on its answers)
                self._acted_answers[run.key] = None
        self._trim_ended()

    def state(self, max_records: int = MAX_STATE_RECORDS) -> dict[str, Any]:
        """What the tracker holds beyond its runs, in JSON-able values, for a clean restart to
        go on with: the records and parent links retained of traces in progress (a nested agent
        whose spans came before its agent span is split out of them; the most recently used
        traces' up to ``max_records`` records, then those of traces whose run ended lately, the
        rest left out and counted in ``"left_out"``) and the run each trace's run-naming spans
        went to (the spans below them that name none follow); and the spans kept for a later
        request (a run's spans of no kind waiting for the model call that asks for their tool,
        a trace's first spans waiting for its run)."""
        frames: list[list[Any]] = []
        ended: list[list[Any]] = []
        left_out = 0
        for kept, traces in ((frames, self._frames.items()),
                             (ended, self._frames.ended_items())):
            for trace, at, trace_frames in reversed(list(traces)):
                max_records -= len(trace_frames.records)
                if max_records < 0:
                    left_out += 1
                    continue
                kept.append([trace, trace_frames.to_dict()] if at is None
                            else [trace, at, trace_frames.to_dict()])
            kept.reverse()  # least recently used first, as restore_state puts them back
        holds: dict[str, list[list[Any]]] = {}
        for name, held in (("unclaimed", self._unclaimed), ("unplaced", self._unplaced),
                           ("lone_roots", self._lone_roots)):
            holds[name] = [[key, [record.to_dict() for record in records]]
                           for key, records in list(held.items())[-MAX_STATE_HELD:]]
        return {"frames": frames, "ended_frames": ended, "left_out": left_out,
                "trace_runs": [[trace, key, source.value]
                               for trace, (key, source) in self._trace_runs.items()],
                "holds": holds}

    def restore_state(self, state: dict[str, Any]) -> int:
        """Take back what :meth:`state` gave (after :meth:`restore`); returns the traces left
        out because their part of it cannot be read."""
        skipped = 0
        for item in state.get("frames", ()):
            try:
                trace, data = item
                self._frames.put(str(trace), TraceFrames.from_dict(data))
            except (KeyError, TypeError, ValueError):
                skipped += 1
        for item in state.get("ended_frames", ()):
            try:
                trace, at, data = item
                if not is_number(at):
                    raise ValueError(f"not a time: {at!r}")
                self._frames.end(str(trace), float(at), TraceFrames.from_dict(data))
            except (KeyError, TypeError, ValueError):
                skipped += 1
        for item in state.get("trace_runs", ()):
            try:
                trace, key, source = item
                self._trace_runs[str(trace)] = (str(key), KeySource(source))
            except (TypeError, ValueError):
                skipped += 1
        while len(self._trace_runs) > MAX_TRACE_ALIASES:
            self._trace_runs.popitem(last=False)
        holds = state.get("holds") or {}
        for name, held, max_keys, max_each in (
                ("unclaimed", self._unclaimed, MAX_UNCLAIMED_RUNS, MAX_UNCLAIMED_PER_RUN),
                ("unplaced", self._unplaced, MAX_UNPLACED_TRACES, MAX_UNPLACED_PER_TRACE),
                ("lone_roots", self._lone_roots, MAX_LONE_ROOTS, MAX_LONE_ROOT_SPANS)):
            for item in holds.get(name, ()) if isinstance(holds, dict) else ():
                try:
                    key, records = item
                    held[str(key)] = [SpanRecord.from_dict(record)
                                      for record in records][-max_each:]
                except (KeyError, TypeError, ValueError):
                    skipped += 1
            while len(held) > max_keys:
                held.popitem(last=False)
        return skipped

    def _remember_answer(self, group: tuple[str | None, ...], run_key: str, response_id: str,
                  scope: str, start_ns: int, end_ns: int) -> None:
        answers = self._loose_answers
        before = answers.get(group)
        answers[group] = LooseAnswer(run_key, response_id, scope, start_ns, end_ns,
                                     before.end_ns if before is not None else 0)
        answers.move_to_end(group)
        while len(answers) > MAX_LOOSE_GROUPS:
            answers.popitem(last=False)

    def _remember_ended(self, run: RunState) -> None:
        if run.key_source is KEY_TRACE and run.parent_run is None:
            self._frames.end(run.trace_id, run.ended_at or 0.0)
        self._ended[run.key] = run
        self._ended.move_to_end(run.key)
        self._trim_ended()

    def _trim_ended(self) -> None:
        while len(self._ended) > self.max_ended:
            key, _ = self._ended.popitem(last=False)
            if self.dropped is not None:
                self.dropped(key)
