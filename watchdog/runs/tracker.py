"""Run lifecycle: which run a span belongs to, when runs start, end, are abandoned or evicted.

Theory of operation
-------------------
Active runs live in an ``OrderedDict`` kept in order of last activity (``move_to_end`` on every
span), which makes both bounds cheap: evicting the oldest idle run when there are more than
``max_runs`` is ``popitem(last=False)``, and finding runs silent for ``run_end_timeout`` walks
from the front and stops at the first recent one. A run ends when a span that closes it arrives
(:attr:`SpanRecord.ends_run`); recently ended runs stay in memory (bounded) so that late spans,
reads and rule evaluation find them. The tracker is pure: ``now`` is always an argument.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from watchdog.runs.activity import ActivityEntry, entry_for
from watchdog.runs.record import AGENT, KEY_TRACE, LLM, OTHER, TOOL, KeySource, SpanRecord
from watchdog.runs.run import RunState
from watchdog.runs.terminal import TerminalState

MAX_ACTIVE_RUNS = 10_000  # default bound on runs tracked at once; the oldest idle is evicted
MAX_ENDED_IN_MEMORY = 2_000  # recently ended runs kept for late spans and fast reads
MAX_TRACE_ALIASES = 20_000  # trace id -> run, for spans below the agent that name no run
RUN_END_TIMEOUT = 900.0  # seconds without a span before a run is classified abandoned


@dataclass(slots=True)
class BatchResult:
    """What one batch of records changed; the shell persists it and updates metrics from it."""

    touched: dict[str, RunState] = field(default_factory=dict)
    started: list[RunState] = field(default_factory=list)
    ended: list[RunState] = field(default_factory=list)
    evicted: list[RunState] = field(default_factory=list)
    activity: list[ActivityEntry] = field(default_factory=list)
    late_spans: int = 0
    ignored_spans: int = 0  # plumbing spans (HTTP, SDK) of traces with no agent activity
    tool_calls: Counter[tuple[str, str]] = field(default_factory=Counter)  # (agent, tool)
    tokens: Counter[tuple[str, str]] = field(default_factory=Counter)  # (agent, direction)
    errors: Counter[tuple[str, str]] = field(default_factory=Counter)  # (agent, error type)
    exemplars: dict[str, str] = field(default_factory=dict)  # agent -> a trace id


class RunTracker:
    def __init__(self, max_runs: int = MAX_ACTIVE_RUNS,
                 run_end_timeout: float = RUN_END_TIMEOUT,
                 max_ended: int = MAX_ENDED_IN_MEMORY) -> None:
        self.max_runs = max_runs
        self.run_end_timeout = run_end_timeout
        self.max_ended = max_ended
        self._active: OrderedDict[str, RunState] = OrderedDict()
        self._ended: OrderedDict[str, RunState] = OrderedDict()
        self._trace_runs: OrderedDict[str, tuple[str, KeySource]] = OrderedDict()

    # -- reads ----------------------------------------------------------------------------------

    def get(self, key: str) -> RunState | None:
        return self._active.get(key) or self._ended.get(key)

    def active(self) -> Iterator[RunState]:
        return iter(self._active.values())

    def ended(self) -> Iterator[RunState]:
        return iter(self._ended.values())

    def __len__(self) -> int:
        return len(self._active)

    # -- writes ---------------------------------------------------------------------------------

    def restore(self, runs: Iterable[RunState]) -> None:
        """Put runs loaded from the store back (oldest activity first)."""
        for run in sorted(runs, key=lambda r: r.last_seen):
            target = self._ended if run.ended else self._active
            target[run.key] = run
        self._trim_ended()

    def _learn_aliases(self, records: list[SpanRecord]) -> dict[str, tuple[str, KeySource]]:
        """Which run each span of this batch that names its run belongs to (by span id), and
        remember, per trace, the run named last (bounded)."""
        traces = self._trace_runs
        unnamed = False
        for record in records:
            if record.key_source is KEY_TRACE:
                unnamed = True
            else:
                traces[record.trace_id] = (record.run_key, record.key_source)
                traces.move_to_end(record.trace_id)
        while len(traces) > MAX_TRACE_ALIASES:
            traces.popitem(last=False)
        if not unnamed:
            return {}  # every span names its run: no parent needs looking up
        return {record.span_id: (record.run_key, record.key_source) for record in records
                if record.key_source is not KEY_TRACE}

    def _attribute(self, record: SpanRecord, by_span: dict[str, tuple[str, KeySource]]) -> bool:
        """Give a span that names no run (keyed by its trace) to the run of its parent or
        trace; False to ignore it.

        Instrumentation below the agent (HTTP clients, SDK calls) carries no run attributes;
        without this, each such trace would become a phantom run that is later abandoned.
        """
        owner = by_span.get(record.parent_span_id or "") or self._trace_runs.get(record.trace_id)
        if owner is not None:
            record.run_key, record.key_source = owner
            return True
        # Plumbing spans (an HTTP request, a framework step) of a trace with no agent activity
        # are not a run of their own: the service may emit traces that have nothing to do
        # with an agent.
        return record.kind is not OTHER or record.run_key in self._active

    def apply(self, records: Iterable[SpanRecord], now: float) -> BatchResult:
        result = BatchResult()
        active, ended = self._active, self._ended
        records = list(records)
        by_span = self._learn_aliases(records)
        for record in records:
            if record.key_source is KEY_TRACE and not self._attribute(record, by_span):
                result.ignored_spans += 1
                continue
            key = record.run_key
            run = active.get(key)
            if run is not None:
                active.move_to_end(key)
            else:
                run = ended.get(key)
                if run is not None:
                    result.late_spans += 1
                else:
                    run = RunState(key, record.key_source, record.trace_id, now)
                    active[key] = run
                    result.started.append(run)
            run.apply(record, now)
            result.touched[key] = run
            entry = entry_for(record, run.activity_seq + 1)
            if entry is not None:
                run.activity_seq += 1
                result.activity.append(entry)
            self._count(record, run, result)
            if record.ends_run and not run.ended:
                run.end(now)
                del active[key]
                self._remember_ended(run)
                result.ended.append(run)
        while len(active) > self.max_runs:
            _, victim = active.popitem(last=False)
            victim.end(now, abandoned=True)
            if victim.terminal_state is TerminalState.ABANDONED:  # keep a forced state's reason
                victim.terminal_reason = "evicted"
            self._remember_ended(victim)
            result.evicted.append(victim)
            result.touched[victim.key] = victim
        return result

    def heartbeat(self, key: str, messages: int, now: float, in_flight: int | None = None,
                  oldest_call_started: float | None = None, register: bool = False
                  ) -> tuple[RunState | None, bool]:
        """Apply a client heartbeat; with ``register`` an unknown run is started by it (the
        client SDK announces a run before any of its spans has ended). Returns the run (None
        if unknown and not registered, or already ended) and whether it was created."""
        run = self._active.get(key)
        created = False
        if run is None:
            if not register or key in self._ended:
                return None, False
            run = RunState(key, KeySource.WATCHDOG, "", now)
            self._active[key] = run
            created = True
        run.heartbeat(messages, now, in_flight, oldest_call_started)
        self._active.move_to_end(key)
        return run, created

    def expire(self, now: float) -> list[RunState]:
        """End, as ``abandoned``, every run silent for longer than ``run_end_timeout``."""
        expired: list[RunState] = []
        deadline = now - self.run_end_timeout
        active = self._active
        while active:
            key, run = next(iter(active.items()))
            if run.last_seen > deadline:
                break
            del active[key]
            run.end(now, abandoned=True)
            self._remember_ended(run)
            expired.append(run)
        return expired

    def _remember_ended(self, run: RunState) -> None:
        self._ended[run.key] = run
        self._ended.move_to_end(run.key)
        self._trim_ended()

    def _trim_ended(self) -> None:
        while len(self._ended) > self.max_ended:
            self._ended.popitem(last=False)

    @staticmethod
    def _count(record: SpanRecord, run: RunState, result: BatchResult) -> None:
        agent = run.agent_name
        if record.kind is TOOL:
            result.tool_calls[(agent, record.tool_name or "unknown")] += 1
        elif record.kind is LLM:
            if record.input_tokens:
                result.tokens[(agent, "input")] += record.input_tokens
            if record.output_tokens:
                result.tokens[(agent, "output")] += record.output_tokens
        if record.error and record.kind is not AGENT:
            result.errors[(agent, record.error_type or "error")] += 1
        result.exemplars[agent] = record.trace_id
