"""Run lifecycle: which run a span belongs to, when runs start, end, are abandoned or evicted.

Theory of operation
-------------------
Active runs live in an ``OrderedDict`` kept in order of last activity (``move_to_end`` on every
span), which makes both bounds cheap: evicting the oldest idle run when there are more than
``max_runs`` is ``popitem(last=False)``, and finding runs silent for ``run_end_timeout`` walks
from the front and stops at the first recent one. A run ends when a span that closes it arrives
(:attr:`SpanRecord.ends_run`); recently ended runs stay in memory (bounded) so that late spans,
reads and rule evaluation find them. The tracker is pure: ``now`` is always an argument.

One run per agent invocation (DESIGN §3):

* spans that name their run (``watchdog.run.id``, ``gen_ai.agent.call.id``) are keyed by it; a
  nested agent keyed so is a child run, and its parent is the run of the span its agent span
  hangs from (that span ends later, children first: the link waits in ``_pending_parents``);
* spans that name no run belong to their trace's run; a nested agent's subtree is split out into
  a child run by :mod:`watchdog.core.runs.frames`;
* a model (or tool) call that is a whole trace by itself — a home-grown loop traced only by its
  client's instrumentation, with no span for the invocation — is *loose*: consecutive loose
  calls of one agent (service and its instance, agent name, session: ``loose_group``) form
  one run, which ends with a call that answered, or after ``loose_run_gap`` seconds without a
  call;
* a tool call no model asked for at the root of such a trace, with model calls below it, is not
  loose: it is the invocation (code invoked a function that runs the model loop itself, as
  Semantic Kernel's ``kernel.invoke_prompt`` does), the trace's run, ended by it; so is a
  model call at the root with other model calls below it (an instrumentation wrote the loop's
  model calls onto the agent's root span): a run ends when its root ends, whatever the root
  carries. Such a root that comes before its model calls opens a run of loose calls, and is
  kept with the spans of its trace (``_lone_roots``) until they show what it is.

Tool calls are also recognised by what the model asked for: a span of no kind after a model
call that asked for a tool, named after that tool (alone, or as its first or last word) and not
yet answered by a tool call, is that tool's execution, its exception a failed call
(:meth:`RunState.asked_for <watchdog.core.runs.run.RunState.asked_for>`); in a trace of its own, it
joins its agent's open run of loose calls. A span that carries the call's id (an attribute, or
in its input JSON) is matched by it, whatever its name: two calls of one tool are two calls,
and a span named after the tool that carries another id answers none of them. One exception
seen on a failed span and on the span around it is counted once.

What the tracker holds (all of it bounded), its reads and its state over a restart are
:class:`~watchdog.core.runs.book.RunBook`'s; this module decides where each span goes.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from watchdog.core.runs.activity import ActivityEntry, entry_for
from watchdog.core.runs.book import (
    MAX_FAILED_UNCLOSED,
    MAX_LONE_ROOT_SPANS,
    MAX_LONE_ROOTS,
    MAX_LOOSE_GROUPS,
    MAX_PAIRED_RESPONSES,
    MAX_PENDING_PARENTS,
    MAX_SUBAGENT_TRACES,
    MAX_SUBAGENTS_PER_TRACE,
    MAX_TRACE_ALIASES,
    MAX_TRACED_ANSWERS,
    MAX_UNCLAIMED_PER_RUN,
    MAX_UNCLAIMED_RUNS,
    MAX_UNPLACED_PER_TRACE,
    MAX_UNPLACED_TRACES,
    TRACED_ANSWER_WAIT,
    RunBook,
    loose_group,
)
from watchdog.core.runs.counts import claimable
from watchdog.core.runs.frames import LATE_SPAN_GRACE, TraceFrames
from watchdog.core.runs.run import RunState
from watchdog.core.runs.terminal import TerminalState
from watchdog.core.spans.record import (
    AGENT,
    ENDPOINT_SCOPE,
    KEY_TRACE,
    KEY_WATCHDOG,
    LLM,
    OTHER,
    TOOL,
    KeySource,
    SpanRecord,
)

K = TypeVar("K")


class Tally(Counter[K], Generic[K]):
    """A :class:`Counter` made without ``Counter.__init__``'s ``update`` call (0.2 µs, not
    1.2): a step of the core makes four, most of them left empty."""

    __slots__ = ()

    def __init__(self, counts: Mapping[K, int] | None = None, /) -> None:
        if counts is not None:  # (Counter.copy and pickling pass one)
            self.update(counts)


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
    unsplit_agents: int = 0  # nested agents left in their parent: the trace outgrew its bound
    tool_calls: Tally[tuple[str, str]] = field(default_factory=Tally)  # (agent, tool)
    tokens: Tally[tuple[str, str]] = field(default_factory=Tally)  # (agent, direction)
    errors: Tally[tuple[str, str]] = field(default_factory=Tally)  # (agent, error type)
    cost: dict[tuple[str, str], float] = field(default_factory=dict)  # (agent, model): USD
    exemplars: dict[str, str] = field(default_factory=dict)  # agent -> a trace id
    # the tool calls counted, in order: (tool, run, error type; None: it succeeded) (the fleet)
    tool_results: list[tuple[str, str, str | None]] = field(default_factory=list)
    # runs folded into another run and gone (their key -> the run that has their spans now)
    absorbed: dict[str, str] = field(default_factory=dict)


class RunTracker(RunBook):
    """Where each span goes: its run (or none), loose calls grouped, nested agents split out
    into child runs, runs ended, silent ones expired."""

    def _learn_aliases(self, records: list[SpanRecord]) -> dict[str, tuple[str, KeySource]]:
        """Which run each span of this batch that names its run belongs to (by span id), and
        remember, per trace, the run named last (bounded)."""
        traces = self._trace_runs
        unnamed = False
        # the trace named last, and its run (no tuple made a span: less for the collector)
        last_trace: str | None = None
        last_key: str | None = None
        last_source: KeySource | None = None
        for record in records:
            if record.key_source is KEY_TRACE:
                unnamed = True
            elif record.pinned:
                continue  # (its run was its trace's at its request: not necessarily now)
            elif last_trace != record.trace_id or last_key != record.run_key \
                    or last_source is not record.key_source:  # (the span before said as much)
                trace, key, source = record.trace_id, record.run_key, record.key_source
                owner = traces.get(trace)
                if owner is None or owner[0] != key or owner[1] is not source:
                    traces[trace] = (key, source)
                traces.move_to_end(trace)
                last_trace, last_key, last_source = trace, key, source
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
        loose = self._loose_traces.get(record.trace_id)
        if loose is not None:  # the tool calls hung below a loose model call
            record.run_key, record.loose = loose, True
            return True
        if record.kind is TOOL and record.parent_span_id is not None \
                and record.run_key not in self._active \
                and self._frames.get(record.trace_id) is None:
            # a tool call below a span of no kind at its trace's root (a scheduler's: Gemini
            # CLI's `schedule_tool_calls`) that answers a call a model call of its agent's open
            # run of loose calls asked for: that run's, the rest of its trace with it (or of
            # its last run, answered: in this batch, after the tool, or before, the tool late)
            group = loose_group(record)
            key = self._loose.get(group)
            if key is None and (answer := self._loose_answers.get(group)) is not None:
                key = answer.run_key
            run = self.get(key) if key is not None else None
            if run is not None and run.answers_asked(record):
                record.run_key, record.loose = run.key, True
                self._loose_traces[record.trace_id] = run.key
                while len(self._loose_traces) > MAX_TRACE_ALIASES:
                    self._loose_traces.popitem(last=False)
                return True
        if record.kind is OTHER and record.parent_span_id is None:
            # a trace of its own named after a tool the agent's last loose model call asked
            # for: that tool's execution, traced by hand (the apply makes it a tool call)
            loose = self._loose.get(loose_group(record))
            run = self._active.get(loose) if loose is not None else None
            if run is not None and run.asked_for(record) is not None:
                record.run_key, record.loose = run.key, True
                return True

        # Plumbing spans (an HTTP request, a framework step) of a trace with no agent activity
        # are not a run of their own: the service may emit traces that have nothing to do
        # with an agent.
        # (a run that ended first, its frames kept for the spans still to come: its steps)
        return record.kind is not OTHER or record.run_key in self._active \
            or self._frames.get(record.trace_id) is not None

    def _group_loose(self, records: list[SpanRecord]) -> list[tuple[SpanRecord, str]]:
        """Key each loose call (a model or tool call at the root of a trace no span names a
        run of) to the open run of its agent, or open one; the rest of its trace (the tool
        calls an instrumentation hangs below the model call) follows through the trace alias.
        Returns the loose calls whose trace's spans ending first opened a run before them
        (sent span by span): that run belongs in the agent's run each call was keyed to.
        """
        traces = self._loose_traces
        opened: set[str] = set()  # runs this batch opens (not active until it is applied)
        strays: list[tuple[SpanRecord, str]] = []  # (the call, its trace's run)
        inner: dict[str, list[SpanRecord]] | None = None  # trace -> its model calls below root
        for record in records:
            if record.key_source is not KEY_TRACE or record.parent_span_id is not None \
                    or not (record.kind is LLM or record.kind is TOOL) \
                    or record.trace_id in traces or record.trace_id in self._trace_runs:
                continue
            if record.unasked and (record.models_below or self._ran_models(record, records)):
                record.as_invocation()  # the trace's run, closed by this span
                continue
            if record.kind is LLM and inner is None:
                inner = {}
                for other in records:
                    if other.kind is LLM and other.parent_span_id is not None:
                        inner.setdefault(other.trace_id, []).append(other)
            if record.kind is LLM and inner is not None \
                    and self._frames_calls(record, inner.get(record.trace_id, [])):
                # the root of a trace whose other model calls ran inside it: the agent's own
                # span, made a model call's by the attributes an instrumentation wrote onto it;
                # it frames its trace's run, which ends with it
                record.kind, record.workflow = AGENT, True
                continue
            group = loose_group(record)
            answer = self._loose_answers.get(group)
            if answer is not None and record.response_id is not None \
                    and answer.response_id == record.response_id and answer.scope != record.scope:
                record.kind = OTHER  # the answer's twin, counted with it: no run of its own
                run = self.get(answer.run_key) if record.final_output is not None else None
                if run is not None and run.final_output is None:
                    run.final_output = record.final_output  # (its text, where only it has one)
                continue
            record.loose = True
            key = self._loose.get(group)
            if key is not None and (key in self._active or key in opened):
                self._loose.move_to_end(group)
                self._lone_roots.pop(key.removeprefix("trace:"), None)  # (a trace more)
            elif answer is not None and not record.final_answer \
                    and answer.since_ns <= record.start_ns and record.end_ns <= answer.start_ns \
                    and self.get(answer.run_key) is not None:
                # a call of the run that answered, sent after its answer (a Collector retries a
                # refused request after later ones): the run's, late
                key = answer.run_key
                self._lone_roots.pop(key.removeprefix("trace:"), None)
            else:
                key = self._loose[group] = record.run_key
                opened.add(key)
                while len(self._loose) > MAX_LOOSE_GROUPS:
                    self._loose.popitem(last=False)
                if record.unasked or record.kind is LLM:  # its model loop may come later
                    self._lone_roots[record.trace_id] = [record]
                    while len(self._lone_roots) > MAX_LONE_ROOTS:
                        self._lone_roots.popitem(last=False)
            if record.run_key != key and record.run_key in self._active:
                strays.append((record, record.run_key))
            record.run_key = key
            if record.final_answer and not record.acted_on:  # the run ends with this call:
                # the next opens another (not with an answer its agent acts on: it goes on)
                del self._loose[group]
                self._remember_answer(group, record.run_key, record.response_id or "", record.scope,
                               record.start_ns, record.end_ns)
            traces[record.trace_id] = record.run_key
            while len(traces) > MAX_TRACE_ALIASES:
                traces.popitem(last=False)
        return strays

    def _absorb(self, call: SpanRecord, stray_key: str, now: float, result: BatchResult
                ) -> None:
        """Fold the run that the first spans of a loose call's trace opened (the call not yet
        come: the spans inside it, a second instrumentation's span of the call, end first) into
        the agent's run of loose calls, and drop it: one invocation, one run (DESIGN §3). Its
        spans were counted in the metrics when they came; they are not counted again. Restored
        after a restart (its spans not retained), it is dropped only if it is the call's twin
        alone (the call counts for both)."""
        stray = self._active.get(stray_key)
        if stray is None or stray.key_source is not KEY_TRACE or stray.parent_run is not None:
            return
        frames = self._frames.get(stray.trace_id)
        if frames is None:
            if not stray.only_twin_of(call):
                return
            records = []
        elif not frames.complete or frames.children:
            return  # the spans are not all retained, or a nested agent was split out of them
        else:
            records = frames.records
            self._frames.forget(stray.trace_id)
        del self._active[stray_key]
        result.touched.pop(stray_key, None)
        result.absorbed[stray_key] = call.run_key
        for record in records:
            record.run_key, record.loose = call.run_key, True
            self._fold(record, self._run_for(record, now, result), now, result, count=False)

    def _take_named_root(self, trace_id: str, run: RunState, now: float,
                         result: BatchResult) -> None:
        """A trace's root names its run (a ``watchdog.run.id`` on the root span alone) and
        comes after spans of the trace that named none, in an earlier request (an exporter
        sends children first): the run those spans opened under the trace's key is folded into
        the named one and dropped, as within one request they would be its (the trace's alias),
        one invocation, one run. Its spans were counted when they came. Not when its spans are
        not all retained or a nested agent was split out of them (the two stay apart)."""
        stray_key = "trace:" + trace_id
        stray = self._active.get(stray_key)
        if stray is None or stray is run or stray.parent_run is not None:
            return
        frames = self._frames.get(trace_id)
        if frames is None or not frames.complete or frames.children:
            return
        records = frames.records
        self._frames.forget(trace_id)
        del self._active[stray_key]
        result.touched.pop(stray_key, None)
        result.absorbed[stray_key] = run.key
        for record in records:
            record.run_key, record.key_source = run.key, run.key_source
            self._fold(record, run, now, result, count=False)

    def _pair_relayed(self, records: list[SpanRecord], now: float, result: BatchResult
                      ) -> list[tuple[str, str]]:
        """A model call the model endpoint relayed for a run of its own (its request named no
        trace) and an agent's span of a model call with the same response id are one call (and
        so are a tool call it handed over and a span of running it with the same call id), so
        the span's trace is the endpoint's run: its trace is named that run's (as the client
        SDK names its run's trace), and a run the trace's spans opened before (they came
        first) is folded into it (:meth:`_take_trace`). The endpoint's run is the one kept: its
        budget, the notes it was given and its directives are the ones its agent was steered
        by; the spans' model calls pair with its calls by response id, their tool calls with
        the tool calls it handed over by call id, each counted once. Returns the pairs (trace,
        endpoint run) to join once the batch is applied (the run not open yet)."""
        relayed, traced = self._relayed, self._traced
        later: list[tuple[str, str]] = []
        # trace -> the endpoint run its spans pair with: of several (a sub-agent's conversation,
        # a run of its own at the endpoint, traced in its caller's trace), the one that started
        # first, the caller's; a sub-agent's run that is a child of its caller's (its client
        # names it) gives the trace to its caller, and keeps the spans that ran in it
        pairs: dict[str, str] = {}
        found: list[tuple[SpanRecord, str]] = []  # trace spans paired, with their run
        for record in records:
            if record.kind is LLM:
                response = record.response_id
            elif record.kind is TOOL and record.tool_call_id:
                # (the id of a tool call the endpoint handed over: unique to its response, so
                # it pairs as a response id does, for an agent whose spans name no response)
                response = "\0" + record.tool_call_id
            else:
                continue
            if record.scope == ENDPOINT_SCOPE:
                if record.key_source is KEY_TRACE or record.pinned:
                    continue  # (its traceparent named its trace: one run already)
                # (a call's response, and the tool calls it handed over)
                for handed in (*((response,) if response else ()),
                               *("\0" + call_id for _, call_id in record.asked_tools
                                 if call_id)):
                    relayed[handed] = record.run_key
                    relayed.move_to_end(handed)
                    trace = traced.get(handed)
                    if trace is not None and not self._take_trace(trace, record.run_key, now,
                                                                  result):
                        later.append((trace, record.run_key))
                while len(relayed) > MAX_PAIRED_RESPONSES:
                    relayed.popitem(last=False)
            elif response and record.key_source is KEY_TRACE:
                key = relayed.get(response)
                if key is not None:
                    found.append((record, key))
                    # (a sub-agent's run, a child of its caller's: the trace is the caller's)
                    key = self._caller_of(key)
                    first = pairs.setdefault(record.trace_id, key)
                    if first != key and self._started_before(key, first):
                        pairs[record.trace_id] = key
                elif record.trace_id not in self._trace_runs:
                    traced[response] = record.trace_id
                    traced.move_to_end(response)
                    while len(traced) > MAX_PAIRED_RESPONSES:
                        traced.popitem(last=False)
        for trace_id, key in pairs.items():
            if not self._take_trace(trace_id, key, now, result):
                later.append((trace_id, key))
        if found:
            self._learn_subagents(found, pairs)
        if self._subagents:
            self._give_subagents(records)
        return later

    def _caller_of(self, key: str) -> str:
        """The run whose child endpoint run ``key`` is (a sub-agent's caller's), else ``key``."""
        run = self.get(key)
        return run.parent_run if run is not None and run.parent_run is not None else key

    def _learn_subagents(self, found: list[tuple[SpanRecord, str]], pairs: dict[str, str]
                         ) -> None:
        """A span of a trace paired with an endpoint run that is a child run of the trace's
        (a sub-agent its client names: :class:`~watchdog.core.model.book.Caller`) ran in that
        sub-agent, and so did every span beside it, below the span it hangs from (the caller's
        tool call that ran the sub-agent: Claude Code's ``Agent``)."""
        aliases, subagents = self._trace_runs, self._subagents
        for record, key in found:
            owner = pairs.get(record.trace_id) or (aliases.get(record.trace_id) or ("",))[0]
            run = self.get(key)
            if key == owner or record.parent_span_id is None or run is None \
                    or run.parent_run is None or run.parent_run != owner:
                continue
            below = subagents.setdefault(record.trace_id, {})
            subagents.move_to_end(record.trace_id)
            if len(below) < MAX_SUBAGENTS_PER_TRACE:
                below[record.parent_span_id] = key
            while len(subagents) > MAX_SUBAGENT_TRACES:
                subagents.popitem(last=False)

    def _give_subagents(self, records: list[SpanRecord]) -> None:
        """The spans of this batch below a sub-agent's span (:meth:`_learn_subagents`) are its
        child run's, as the endpoint counts them: the caller's run does not count them (a
        nested agent's calls are its own). Their spans below them follow (by parent)."""
        subagents = self._subagents
        for record in records:
            if record.key_source is KEY_TRACE and record.parent_span_id is not None \
                    and (below := subagents.get(record.trace_id)) is not None \
                    and (key := below.get(record.parent_span_id)) is not None:
                # (pinned: the trace stays its caller's run)
                record.run_key, record.key_source, record.pinned = key, KEY_WATCHDOG, True

    def _started_before(self, key: str, other: str) -> bool:
        """Whether run ``key`` started before run ``other`` (a run not in memory: no)."""
        run, then = self.get(key), self.get(other)
        return run is not None and (then is None or run.first_seen < then.first_seen)

    def _take_trace(self, trace_id: str, key: str, now: float, result: BatchResult) -> bool:
        """The spans of ``trace_id`` are the endpoint's run ``key``'s from now on, and the run
        they opened before is folded into it and dropped, unless the trace names a run already
        (the client SDK's, or ``key``) or its run's spans are not all retained (then the two
        stay apart). False: run ``key`` is not open yet (its first call is in this batch)."""
        run = self.get(key)
        if run is None:
            return False
        if trace_id in self._trace_runs:
            return True
        stray_key = "trace:" + trace_id
        stray = self._active.get(stray_key)
        records: list[SpanRecord] = []
        if stray is not None:
            frames = self._frames.get(trace_id)
            if frames is None or not frames.complete or frames.children \
                    or stray.parent_run is not None:
                return True
            records = frames.records
            self._frames.forget(trace_id)
            del self._active[stray_key]
            result.touched.pop(stray_key, None)
            result.absorbed[stray_key] = key
        elif stray_key in self._ended:
            return True  # (its run ended before the endpoint's call came: the two stay apart)
        self._alias(trace_id, key)
        for record in records:
            record.run_key, record.key_source = key, run.key_source
            self._fold(record, run, now, result, count=False)
        return True

    def _frames_calls(self, root: SpanRecord, calls: list[SpanRecord]) -> bool:
        """Whether root model call ``root`` frames its trace's model loop: model calls of its
        trace, other than its twin (the same call traced by a second instrumentation, one span
        inside the other), ran before it ended — in the trace's run (spans that came before
        it) or in this batch (``calls``: the model calls below its trace's root)."""
        run = self._active.get(root.run_key)
        earlier = run.iterations if run is not None and run.key_source is KEY_TRACE else 0
        if earlier + len(calls) > 1:
            # two calls besides the root, wherever they came: at most one is its twin
            # (LiteLLM's callback copies a call's attributes onto the loop's span around it)
            return True
        if earlier:  # one call so far: its twin, unless a tool it asked for ran inside too
            return run is not None and (run.models_besides_twin(root)
                                        or run.ran_tool_after_models_inside(root))
        return len(calls) == 1 and calls[0].parent_span_id != root.span_id

    def _ran_models(self, root: SpanRecord, records: list[SpanRecord]) -> bool:
        """Whether model calls ran in ``root``'s trace (all of it lies below its root): in the
        trace's run, or in this batch (children end, and arrive, before their root)."""
        run = self._active.get(root.run_key)
        if run is not None and run.iterations:
            return True
        return any(record.kind is LLM and record.trace_id == root.trace_id for record in records)

    @staticmethod
    def _frames_models(tool: SpanRecord, run: RunState) -> bool:
        """Whether a tool call no model asked for ran its run's model loop: a model call ran
        inside it in its request (the pipeline looked), or, in a run its spans name (a nested
        agent shares its key: its calls are the run's), the run's last model call did."""
        if tool.models_below is not None:
            return tool.models_below
        return tool.key_source is not KEY_TRACE and run.ran_model_inside(tool)

    def _run_for(self, record: SpanRecord, now: float, result: BatchResult) -> RunState:
        key = record.run_key
        run = self._active.get(key)
        if run is not None:
            self._active.move_to_end(key)
            return run
        run = self._ended.get(key)
        if run is not None:
            result.late_spans += 1
            return run
        run = self._active[key] = RunState(key, record.key_source, record.trace_id, now)
        result.started.append(run)
        return run

    def apply(self, records: Iterable[SpanRecord], now: float,
              late_content: Iterable[tuple[SpanRecord, SpanRecord]] = ()) -> BatchResult:
        """Fold a batch of records into their runs; ``late_content``: model calls applied
        before their content came (a GenAI log event after its span), each with its span read
        again with it (:meth:`_read_late_content`)."""
        result = BatchResult()
        for record, reread in late_content:
            self._read_late_content(record, reread, now, result)
        records = list(records)
        paired = self._pair_relayed(records, now, result) if self.steering else None
        by_span = self._learn_aliases(records)
        for call, stray in self._group_loose(records):
            self._absorb(call, stray, now, result)
        reframed: list[tuple[SpanRecord, RunState]] = []
        if self._lone_roots:
            for record in records:
                if record.kind is LLM and record.parent_span_id is not None \
                        and (lone := self._lone_roots.get(record.trace_id)) is not None \
                        and self._frames_lone(lone, records):
                    self._reframe(record.trace_id, now, result, reframed)
        linked: list[TraceFrames] = []
        waiting = self._link_traces(records, linked)
        pending = self._pending_parents
        active = self._active
        unplaced = self._unplaced
        # the spans of this batch that came before their trace had a run: placed when a span
        # of the trace opens one, in the batch or later (held then: bounded across requests)
        unplaced_here: dict[str, list[SpanRecord]] = {}
        for record in records:  # (a trace's unplaced spans are added when it has a run)
            if record.key_source is KEY_TRACE and not self._attribute(record, by_span):
                result.ignored_spans += 1
                unplaced_here.setdefault(record.trace_id, []).append(record)
                continue
            if pending and record.span_id in pending:
                self._adopt(pending.pop(record.span_id), record.run_key, result)
            frames = None
            if record.key_source is KEY_TRACE and not record.loose:
                frames = self._frames.of(record.trace_id)
                if waiting and (batch := waiting.pop(record.trace_id, None)):
                    self._link(frames, batch, linked)
                if record.subagent is not None and record.parent_span_id not in frames.children:
                    self._split_subagent(frames, record, now, result)
                frames.note(record)
                child = frames.children.get(record.span_id) if frames.children else None
                if child is not None:  # a sub-agent's invocation, its calls split off first
                    self._end_subagent(child, record, now, result)
                    continue
                child = frames.child_of(record.parent_span_id) if record.parent_span_id \
                    else None
                if child is None and frames.children and record.agent is not None:
                    child = frames.beside_child(record)  # (come after its agent's split)
                if child is not None:  # a late span of a nested agent already split off
                    record.run_key = child
                    if frames.left_below(record.span_id, child):
                        # spans below it came first, their link to it not known yet when the
                        # nested agent was split off: that child run's too
                        self._gather(frames, child, record, now, result)
            run = active.get(record.run_key)
            if run is None:
                run = self._run_for(record, now, result)
            else:
                active.move_to_end(record.run_key)
            if record.parent_span_id is None and record.key_source is not KEY_TRACE \
                    and not record.pinned and not record.loose:
                self._take_named_root(record.trace_id, run, now, result)
            if unplaced and record.trace_id in unplaced:  # its trace has a run now
                records.extend(unplaced.pop(record.trace_id))
            if unplaced_here and record.trace_id in unplaced_here:
                records.extend(unplaced_here.pop(record.trace_id))
            if record.kind is AGENT and record.parent_span_id is None and frames is not None \
                    and (not record.workflow or record.team
                         or frames.works_itself(record.span_id)):
                # the root is itself an agent (or a workflow that made model calls of its own,
                # as a team's leader does, or a team's, whose members are peers): the one taken
                # as main, if any, ran inside it
                main = frames.main_agent
                if record.team:
                    # its output is the whole conversation: the team answers with its last
                    # member's answer, as a run that handed off does
                    record.final_answer, record.final_output = False, None
                if main is not None and (record.team
                                         or not frames.same_invocation(main, record.span_id)):
                    self._split(frames, main, run, now, result)
                elif main is not None:
                    frames.inner_agent = main  # (taken in as the root's own invocation)
                frames.main_agent = record.span_id
            elif record.kind is AGENT and record.parent_span_id is not None and (
                    not run.ended or frames is not None) \
                    and not (frames is not None and frames.answer_only(record)):
                # (an unnamed agent span with no call below it is no nested agent: the answer
                # it may carry is its run's)
                # (a nested agent may come after the root ended the trace run: an exporter
                # that sends parents first, LangSmith's, or a later request sent first; it is
                # a child run all the same, and below a workflow root that came first the
                # first agent to end is the run's own, as in order)
                if frames is not None:
                    if self._place_agent(record, frames, run, now, result) is not run:
                        continue  # a nested agent: its child run has it, folded and ended
                elif run.parent_run is None:
                    pending[record.parent_span_id] = record.run_key
                    run.hangs_from = record.parent_span_id
                    while len(pending) > MAX_PENDING_PARENTS:
                        pending.popitem(last=False)
            if record.kind is OTHER and (tool := run.asked_for(record)) is not None:
                # a span named after a tool the model just asked for: that tool's execution
                self._as_tool(record, tool, frames)
            if record.unasked and record.kind is TOOL and self._frames_models(record, run):
                record.as_frame()  # the run's model loop ran inside it: no tool call
            elif record.loose and record.parent_span_id is None:
                run.loose_trace = record.trace_id
            unclaimed = record.kind is OTHER  # (not a call folded as none: a twin, an echo)
            if record.loose and (lone := self._lone_roots.get(record.trace_id)) is not None \
                    and record is not lone[0]:
                lone.append(record)
                if len(lone) > MAX_LONE_ROOT_SPANS:
                    del self._lone_roots[record.trace_id]  # (too many to fold again)
            self._fold(record, run, now, result)
            if frames is not None and frames.graphs \
                    and (graph := frames.graph_in_tool(record)) is not None:
                self._nest_graph(graph, frames, run, now, result)
            if unclaimed:
                self._hold_unclaimed(record, run)
            elif record.asked_tools and record.kind is LLM and run.key in self._unclaimed:
                self._claim(run, now, result)
        for trace_id, spans in unplaced_here.items():
            for record in spans:
                self._hold(unplaced, trace_id, record, MAX_UNPLACED_TRACES,
                           MAX_UNPLACED_PER_TRACE)
        if paired:  # (the endpoint's runs these calls opened exist now)
            for trace_id, key in paired:
                self._take_trace(trace_id, key, now, result)
        for root, run in reframed:  # it ended after what ran inside it
            self._fold(root, run, now, result, count=False)
        for run in result.touched.values():
            if run.loop_capped() and run.ended:
                run.late_answer()
        for frames in linked:
            frames.ahead.clear()
        while len(self._active) > self.max_runs:
            _, victim = self._active.popitem(last=False)
            victim.end(now, abandoned=True)
            if victim.terminal_state is TerminalState.ABANDONED:  # keep a forced state's reason
                victim.terminal_reason = "evicted"
            self._remember_ended(victim)
            result.evicted.append(victim)
            result.touched[victim.key] = victim
        return result

    def _read_late_content(self, record: SpanRecord, reread: SpanRecord, now: float,
                           result: BatchResult) -> None:
        """Model call ``record``, folded into its run without its content, and ``reread``,
        its span read again with the content its GenAI log event brought later (or an agent
        span and the answer an agent's own log event brought, ``RunState.read_answer``; a tool
        call and its arguments, read by folding its ended run again): the run reads the content
        now as it would have read it with the span (its messages, the
        tools asked for, its answer or tool request, a limit its input tells), and counts
        nothing again.
        ``record`` takes the content, so the run's retained records have it when a nested
        agent's split folds them again. A run that ended unanswered is classified again
        (:meth:`RunState.late_answer`); an open run of loose calls that the call answered
        ends, as the call would have ended it."""
        kind = record.kind
        if reread.kind is not kind or kind is OTHER:
            return
        run = self.get(record.run_key)
        if run is None:  # (gone: evicted, or ended long ago)
            return
        frames = self._frames.get(run.trace_id) if run.key_source is KEY_TRACE else None
        # the run ended (its root came first) and keeps its records: folded again with the
        # content, it reads what it would have read had the content come first (an answer it
        # took from a child run that ended later yields to its own)
        kept = [kept for kept in frames.records if kept.run_key == run.key] \
            if frames is not None and frames.complete and run.ended \
            and any(kept is record for kept in frames.records) else None
        record.take_content(reread)
        if kept is not None:
            self._refold(run, kept, now)
        elif kind is TOOL:  # (an open run, or its records not all kept: >512 spans a trace)
            run.read_tool_call(record)
        elif kind is AGENT:  # (an agent span's answer, from an agent's own log event)
            run.read_answer(record)
        else:
            run.read_content(record)
        result.touched[run.key] = run
        if record.asked_tools and run.key in self._unclaimed:
            self._claim(run, now, result)
        if run.ended:
            run.late_answer()
            self._late_parent_answer(run, result)
            return
        if record.loose and run.has_final_answer and kind is not TOOL:
            group = loose_group(record)
            if self._loose.get(group) == run.key:  # the next call opens the next run
                del self._loose[group]
            self._remember_answer(group, run.key, record.response_id or "", record.scope,
                                  record.start_ns, record.end_ns)
            self._finish(run, now)
            result.ended.append(run)

    def _late_parent_answer(self, run: RunState, result: BatchResult) -> None:
        """``run``, a child run, has its answer after it and its parent ended: the answer of
        the child run the parent handed off to is the parent's."""
        if run.parent_run is not None and run.has_final_answer \
                and (parent := self.get(run.parent_run)) is not None and parent.ended \
                and not parent.has_final_answer and parent.end_error_type is None:
            self._outcome_from_children(parent)
            if parent.late_answer():
                result.touched[parent.key] = parent

    def _link_traces(self, records: list[SpanRecord], linked: list[TraceFrames]
                     ) -> dict[str, list[SpanRecord]]:
        """What the batch holds of each trace, known to the trace's frames before any of its
        spans is placed: their parent links, and the tool calls still to be folded
        (:attr:`TraceFrames.ahead`, cleared when the batch is done: the frames go to
        ``linked``). A nested agent's span ends before the spans around it (children first);
        where its trace's root or its caller's agent span came first, only those tell where it
        ran. The records of traces with no frames yet are returned, for when their first span
        is placed (:meth:`_link`)."""
        waiting: dict[str, list[SpanRecord]] = {}
        for record in records:
            if record.key_source is KEY_TRACE and not record.loose:
                waiting.setdefault(record.trace_id, []).append(record)
        for trace_id in list(waiting):
            if (frames := self._frames.get(trace_id)) is not None:
                self._link(frames, waiting.pop(trace_id), linked)
        return waiting

    @staticmethod
    def _link(frames: TraceFrames, records: list[SpanRecord], linked: list[TraceFrames]
              ) -> None:
        for record in records:
            frames.parents.setdefault(record.span_id, record.parent_span_id)
        frames.ahead = [record for record in records if record.kind is TOOL]
        if frames.ahead:
            linked.append(frames)

    @staticmethod
    def _frames_lone(lone: list[SpanRecord], records: list[SpanRecord]) -> bool:
        """Whether the root of ``lone`` (a trace's root that came first and opened a run of
        loose calls, then the spans of its trace since) frames its trace's model loop, now that
        ``records`` bring model calls below it: a tool call no model asked for does; a model
        call does when the calls below it are more than its twin, as :meth:`_frames_calls`
        tells (LiteLLM's callback writes a call's attributes onto the loop's span around it)."""
        root = lone[0]
        if root.kind is not LLM:
            return True
        calls = [record for record in (*lone[1:], *records)
                 if record.kind is LLM and record.trace_id == root.trace_id
                 and record.parent_span_id is not None]
        return len(calls) > 1 or (len(calls) == 1 and calls[0].parent_span_id != root.span_id)

    def _reframe(self, trace_id: str, now: float, result: BatchResult,
                 reframed: list[tuple[SpanRecord, RunState]]) -> None:
        """A model call below the root of ``trace_id`` has come, and that root, a tool call no
        model asked for, came first and opened a run of loose calls with nothing but its trace:
        the root was the invocation (code invoked a function that runs the model loop itself,
        as Semantic Kernel's ``kernel.invoke_prompt`` does): no tool call, and no loose run, but
        its trace's run, folded again without it; the root goes to ``reframed``, to end the
        run once the batch's spans (what ran inside it) are folded."""
        records = self._lone_roots.pop(trace_id)
        root = records[0]
        run = self.get(root.run_key)
        if run is None or run.trace_id != trace_id or run.loose_trace != trace_id:
            return
        self._loose_traces.pop(trace_id, None)
        group = loose_group(root)
        if self._loose.get(group) == run.key:
            del self._loose[group]
        run.loose_trace = None
        if root.kind is LLM:  # the agent's own span, a model call's by what was written on it
            root.kind, root.workflow = AGENT, True
        else:
            root.as_invocation()
        for record in records:
            record.loose = False
        run.refold(records[1:], now)
        result.touched[run.key] = run
        reframed.append((root, run))

    def _fold(self, record: SpanRecord, run: RunState, now: float, result: BatchResult,
              count: bool = True) -> None:
        """Fold ``record`` into ``run``; with ``count``, add what it added to the run's counts
        to the batch's (metrics): a record folded again (moved into a child run, or a stray
        run folded into its agent's) was counted when it first came."""
        late = run.ended
        kind = record.kind
        count = count and (kind is LLM or kind is TOOL or record.error)  # else it adds none
        if count:
            before = (run.tool_calls, run.input_tokens, run.output_tokens, run.errors,
                      run.cost_usd)
        cap = run.loop_cap_taken if late and record.loop_end else None
        run.apply(record, now)
        if cap is not None:
            run.uncapped(cap)  # (its loop ended by its loop-end tool, come after its cap)
        ends = record.ends_run and (
            not run.framed or record.run_frame or record.ends_its_run
            or record.parent_span_id is None) and not (
            # (the agent's span of a call whose answer it acts on, the model endpoint's record
            # of it come first: the run goes on, as that record says)
            kind is LLM and record.scope != ENDPOINT_SCOPE and record.response_id is not None
            and record.response_id in self._acted_responses)
        if late:
            if ends and not run.has_final_answer and run.end_error_type is None:
                self._outcome_from_children(run)
            run.late_answer(ends)
            self._late_parent_answer(run, result)
        result.touched[run.key] = run
        entry = entry_for(record, run.activity_seq + 1)
        if entry is not None:
            run.activity_seq += 1
            result.activity.append(entry)
        if count:
            self._count(record, run, before, result)
        else:
            result.exemplars[run.agent_name] = record.trace_id
        if ends and not run.ended:
            if not run.has_final_answer and run.end_error_type is None:
                self._outcome_from_children(run)
            self._finish(run, now)
            result.ended.append(run)
        elif record.acted_on and not run.ended:
            # its agent acts on this answer (its actions are in its text): the run goes on at
            # its next request, or ends loose_run_gap after its last call (expire)
            acted = self._acted_answers
            acted[run.key] = None
            acted.move_to_end(run.key)
            while len(acted) > MAX_TRACED_ANSWERS:
                acted.popitem(last=False)
            if record.response_id:
                responses = self._acted_responses
                responses[record.response_id] = None
                while len(responses) > MAX_TRACED_ANSWERS:
                    responses.popitem(last=False)
        elif record.scope == ENDPOINT_SCOPE and record.final_answer and not run.ended \
                and run.key_source is KEY_TRACE and not run.agent_spans:
            # answered, seen by the model endpoint, and no span of the agent's has come: it
            # ends after TRACED_ANSWER_WAIT unless one does (expire)
            answers = self._traced_answers
            answers[run.key] = None
            answers.move_to_end(run.key)
            while len(answers) > MAX_TRACED_ANSWERS:
                answers.popitem(last=False)
        if not run.ended and (run.end_error_type is not None or run.limit_stop is not None) \
                and run.key_source is KEY_TRACE:
            # its own agent span failed, or a span of it told a stop at a limit, and the trace's
            # root that closes it has not come (an instrumentation may leave it open when the
            # run raises: OpenLLMetry's `withAgent` in JavaScript): it ends after loose_run_gap
            # without a span unless the root comes (expire)
            failed = self._failed_unclosed
            failed[run.key] = None
            failed.move_to_end(run.key)
            while len(failed) > MAX_FAILED_UNCLOSED:
                failed.popitem(last=False)

    @staticmethod
    def _as_tool(record: SpanRecord, tool: str, frames: TraceFrames | None) -> None:
        """``record``, a span of no kind, is the execution of ``tool`` a model call asked for."""
        record.kind, record.tool_name, record.named_tool = TOOL, tool, True
        if frames is not None:
            frames.calls.add(record.span_id)

    def _hold_unclaimed(self, record: SpanRecord, run: RunState) -> None:
        """Keep a span of no kind that may be a tool's execution whose model call has not come
        yet (an exporter's later request, or one sent first, holds it): when it comes and asks
        for that tool, :meth:`_claim` counts the call. Past the bound, those named after a tool
        the run called are kept over the others (a library's plumbing beside a loop's tools)."""
        if claimable(record) and record.name:
            self._hold(self._unclaimed, run.key, record, MAX_UNCLAIMED_RUNS,
                       MAX_UNCLAIMED_PER_RUN, run.named_after_a_tool)

    @staticmethod
    def _hold(holds: OrderedDict[str, list[SpanRecord]], key: str, record: SpanRecord,
              max_keys: int, max_each: int,
              rather: Callable[[SpanRecord], bool] | None = None) -> None:
        """Keep ``record`` under ``key``: the last ``max_each`` of the ``max_keys`` keys held
        most recently, a trace's root (it ends the run) kept over the spans below it, and the
        spans ``rather`` says over the others."""
        held = holds.get(key)
        if held is None:
            held = holds[key] = []
            while len(holds) > max_keys:
                holds.popitem(last=False)
        else:
            holds.move_to_end(key)
        held.append(record)
        if len(held) > max_each:
            below = [index for index, kept in enumerate(held) if kept.parent_span_id is not None]
            if rather is not None:
                below = [index for index in below if not rather(held[index])] or below
            del held[below[0] if below else 0]

    def _claim(self, run: RunState, now: float, result: BatchResult) -> None:
        """A model call of ``run`` asked for tools: the spans of no kind it kept that are
        their executions (come before the call, in its request or an earlier one) are
        counted as those tool calls now, in the order they started."""
        held = self._unclaimed[run.key]
        for record in sorted(held, key=lambda held_record: held_record.start_ns):
            tool = run.asked_for(record)
            if tool is None:
                continue
            held.remove(record)
            if run.counted_around(record, tool):
                continue  # the call around (or inside) one counted when it came: one call
            self._as_tool(record, tool, self._frames.get(record.trace_id)
                          if record.key_source is KEY_TRACE else None)
            run.spans -= 1  # folded again, as the call it is: one span all the same
            self._fold(record, run, now, result)
        if not held:
            del self._unclaimed[run.key]

    def _outcome_from_children(self, run: RunState) -> None:
        """A run that handed off (OpenAI Agents SDK handoffs) ends through the child run that
        ended last: its answer is the invocation's, and so is the framework limit that stopped
        it (the SDK's ``max_turns`` fails the agent span it opens after the last turn)."""
        frames = self._frames.get(run.trace_id)
        if frames is None or not frames.children:
            return
        children = [child for key in frames.children.values()
                    if (child := self.get(key)) is not None and child.parent_run == run.key
                    and child.ended]
        if children:
            # (by their spans' times: the one that started last; a child split off again, a
            # team's first member at the team's root, ended in a later batch all the same)
            last = max(children, key=lambda child: child.first_start_ns)
            if last.has_final_answer:
                run.explicit_final = True
                run.final_output = last.final_output
            elif last.limit_stop is not None and run.limit_stop is None:
                run.limit_stop = last.limit_stop

    def end(self, key: str, now: float) -> RunState | None:
        """End active run ``key`` now (the model endpoint answered its agent with the stop of
        an abort: the agent has its final answer); None when it is not active."""
        run = self._active.get(key)
        if run is None:
            return None
        self._finish(run, now)
        return run

    def _finish(self, run: RunState, now: float) -> None:
        run.end(now)
        self._active.pop(run.key, None)
        self._remember_ended(run)

    def _adopt(self, child_key: str, parent_key: str, result: BatchResult) -> None:
        """The span a child run's agent span hangs from has arrived: its run is the parent."""
        child = self.get(child_key)
        if child is not None and child_key != parent_key and child.parent_run is None:
            child.parent_run = parent_key
            child.hangs_from = None
            result.touched[child_key] = child

    def _place_agent(self, record: SpanRecord, frames: TraceFrames, run: RunState, now: float,
                     result: BatchResult) -> RunState:
        """Decide whether an agent span below its trace root is the trace run's own agent
        (returns the trace run) or a nested one (returns its child run, already folded)."""
        main = frames.main_agent
        if main is None:
            frames.main_agent = record.span_id
            return run
        if record.loop_call and frames.next_step(record, main):
            return run  # the next call of a loop its application runs itself: the run's step
        if frames.within(main, record.span_id) or frames.ran_in_a_tool_of(main, record.span_id):
            # the agent taken as main ran inside this one (below it, or in one of its tools)
            if not frames.same_invocation(main, record.span_id):
                self._split(frames, main, run, now, result)
            frames.main_agent = record.span_id
            return run
        if (above := frames.split_above(record.span_id)) is not None \
                and frames.same_invocation(record.span_id, above):
            # the inner view of a nested agent split off already (come after it: a later
            # request first): its child run's, with the calls that came before it
            self._gather(frames, frames.children[above], record, now, result)
            return run
        if frames.within(record.span_id, main):
            inner = frames.inner_agent
            if inner is not None and self._ended_first(frames, record, inner):
                # a sibling of the agent the root took in that ended before it, come after the
                # root: the first to end is the trace run's agent, as when they come in order
                self._split(frames, inner, run, now, result)
                frames.inner_agent = record.span_id
                return run
            if frames.same_invocation(record.span_id, main) and (
                    inner is None or frames.within(record.span_id, inner)
                    or frames.within(inner, record.span_id)):
                # the inner view of the main agent, ending after it (async exporters); not a
                # sibling of the one the root took in already
                return run
        elif frames.parents.get(main) is not None and self._ended_first(frames, record, main):
            # a sibling that ended before the one taken as main (not the trace's root), come
            # after it (a later request came first): the first to end is the main agent, as
            # when they come in order
            self._split(frames, main, run, now, result)
            frames.main_agent = record.span_id
            return run
        if (twin := frames.split_twin(record.span_id)) is not None:
            return self._join(frames, record, twin, run, now, result)
        return self._split(frames, record.span_id, run, now, result) or run

    @staticmethod
    def _ended_first(frames: TraceFrames, record: SpanRecord, agent: str) -> bool:
        """Whether agent span ``record`` is a sibling of agent span ``agent`` (neither below
        the other, nor run in one of its tools) that ended before it."""
        span = record.span_id
        return span != agent and not frames.within(span, agent) \
            and not frames.within(agent, span) and frames.ended_before(record, agent) \
            and not frames.ran_in_a_tool_of(span, agent)

    def _split_subagent(self, frames: TraceFrames, record: SpanRecord, now: float,
                        result: BatchResult) -> None:
        """``record``, a model or tool call that names the sub-agent it ran in (no agent span
        of the sub-agent's: Claude Code's), hangs from the sub-agent's invocation (its caller's
        tool call that ran it): that span's subtree is a child run of the trace's run from now
        on (the spans below it come to it), ended when that span comes."""
        frame = record.parent_span_id
        if frame is None:
            return
        # the run its invocation is in: a sub-agent's that called it, else the trace's (opened
        # by this call when it is the trace's first)
        owner = frames.child_of(frame)
        parent = self.get(owner) if owner is not None else self._run_for(record, now, result)
        if parent is not None:
            self._split(frames, frame, parent, now, result)

    def _end_subagent(self, key: str, record: SpanRecord, now: float, result: BatchResult
                      ) -> None:
        """``record`` is the invocation of the sub-agent split off into child run ``key``
        before it came (:meth:`_split_subagent`): that run's, and its end."""
        record.run_key = key
        child = self._run_for(record, now, result)
        self._fold(record, child, now, result)
        if not child.ended:
            self._finish(child, now)
            result.ended.append(child)

    def _nest_graph(self, graph: SpanRecord, frames: TraceFrames, run: RunState, now: float,
                    result: BatchResult) -> None:
        """``graph``, a graph's span that made model calls directly below a tool call of
        ``run``, is a sub-agent run as that tool: named after the graph, a child run."""
        graph.kind, graph.agent = AGENT, graph.name
        frames.agents[graph.span_id] = graph.name
        self._split(frames, graph.span_id, run, now, result)

    def _join(self, frames: TraceFrames, record: SpanRecord, twin: str, parent: RunState,
              now: float, result: BatchResult) -> RunState:
        """Agent span ``record`` is the outer view of nested agent span ``twin``, split off
        already: it and what ran below it beside ``twin`` join ``twin``'s child run."""
        key = frames.children[twin]
        child = self.get(key)
        if child is None:
            return parent
        frames.children[record.span_id] = key
        record.run_key = key
        self._gather(frames, key, record, now, result)
        self._fold(record, child, now, result, count=False)
        return child

    def _gather(self, frames: TraceFrames, key: str, record: SpanRecord, now: float,
                result: BatchResult) -> None:
        """Fold into child run ``key`` the retained records (but ``record``, placed by the
        caller) that it owns now and another run has (the trace run, or a nested agent's run
        split off above it): those runs are folded again from what they keep."""
        child = self.get(key)
        moved = [held for held in frames.records
                 if held.run_key != key and held.span_id != record.span_id
                 and frames.child_of(held.span_id) == key]
        if child is None or not moved:
            return
        losers = {held.run_key for held in moved}
        for held in moved:
            held.run_key = key
            self._fold(held, child, now, result, count=False)
        for loser_key in losers:
            if (loser := self.get(loser_key)) is not None:
                self._refold(loser, [held for held in frames.records
                                     if held.run_key == loser_key], now)
                result.touched[loser_key] = loser

    def _split(self, frames: TraceFrames, agent_span: str, parent: RunState, now: float,
               result: BatchResult) -> RunState | None:
        """Move the subtree of the nested agent span ``agent_span`` out of ``parent`` into a
        child run of its own, folded again from the retained records."""
        if not frames.complete:
            result.unsplit_agents += 1
            return None
        key = f"{parent.key}:{agent_span}"
        moved = frames.subtree(agent_span, key)
        for grandchild in frames.nested_children(agent_span):
            nested = self.get(grandchild)
            if nested is not None and nested.parent_run == parent.key:
                nested.parent_run = key
                result.touched[grandchild] = nested
        frames.children[agent_span] = key
        child = self._active[key] = RunState(key, KEY_TRACE, parent.trace_id, now)
        child.parent_run = parent.key
        result.started.append(child)
        for record in moved:
            record.run_key = key
            self._fold(record, child, now, result, count=False)
        if not child.ended and any(record.span_id == agent_span for record in moved):
            self._finish(child, now)
            result.ended.append(child)
        self._refold(parent, frames.own(), now)
        result.touched[parent.key] = parent
        return child

    def kept_records(self, run: RunState) -> list[SpanRecord] | None:
        """The records of ``run``, a run of a trace, as its trace keeps them (at most
        ``MAX_RETAINED_SPANS``, while the trace's frames are kept), in the order they came;
        None when they are not all kept (another run's, too many, or let go)."""
        frames = self._frames.get(run.trace_id) if run.key_source is KEY_TRACE else None
        if frames is None or not frames.complete:
            return None
        return [record for record in frames.records if record.run_key == run.key]

    def _refold(self, run: RunState, records: list[SpanRecord], now: float) -> None:
        """Fold ``run`` again from ``records`` (what it keeps once a nested agent's spans moved
        out); a run that ended unanswered (its root came first) ends through its children."""
        run.refold(records, now)
        if run.ended and not run.has_final_answer and run.end_error_type is None:
            self._outcome_from_children(run)

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

    def asked_failed(self, key: str, code: str, now: float) -> None:
        """The model endpoint answered the run ``key``'s request with an error (``code``: the
        upstream's failure, or its error status passed on): unless the run's next request
        comes (:meth:`asked`), its agent gave up, and it ends ``error`` (``code``) after
        ``loose_run_gap``. Not a run whose agent's spans tell how it ends."""
        run = self._active.get(key)
        if run is None or run.framed or run.agent_spans:
            return
        failed = self._failed_asks
        failed[key] = (code, now)
        failed.move_to_end(key)
        while len(failed) > MAX_FAILED_UNCLOSED:
            failed.popitem(last=False)

    def asked(self, key: str) -> None:
        """The run ``key``'s agent sent the model endpoint a request: it did not give up."""
        self._failed_asks.pop(key, None)

    def expire(self, now: float) -> list[RunState]:
        """End, as ``abandoned``, every run silent for longer than ``run_end_timeout``; end
        runs of loose calls that have had no call for ``loose_run_gap``, runs of a trace whose
        own agent span failed and that have had no span for ``loose_run_gap`` (the trace's root
        that would close them never came), runs whose last model request got an error and no
        request after it for ``loose_run_gap`` (as ``error``), and runs a trace names that
        answered through the model endpoint and had no span of the agent's for
        ``TRACED_ANSWER_WAIT``."""
        expired: list[RunState] = []
        self._frames.expire(now)
        for trace_id, lone in list(self._lone_roots.items()):
            # (kept while their run is open, and LATE_SPAN_GRACE after it ended, as frames are)
            run = self.get(lone[0].run_key)
            if run is None or (run.ended and (run.ended_at or 0.0) + LATE_SPAN_GRACE < now):
                del self._lone_roots[trace_id]
        gap_deadline = now - self.loose_run_gap
        for group, key in list(self._loose.items()):
            run = self._active.get(key)
            if run is None:
                del self._loose[group]
            elif run.last_seen <= gap_deadline:
                del self._loose[group]
                self._finish(run, now)
                expired.append(run)
        answer_deadline = now - TRACED_ANSWER_WAIT
        for key in list(self._traced_answers):
            run = self._active.get(key)
            if run is None or run.agent_spans or not run.has_final_answer:
                del self._traced_answers[key]
            elif run.last_seen <= answer_deadline:
                del self._traced_answers[key]
                self._finish(run, now)
                expired.append(run)
        for key in list(self._acted_answers):
            run = self._active.get(key)
            if run is None or not run.has_final_answer:
                del self._acted_answers[key]
            elif run.last_seen <= gap_deadline:
                del self._acted_answers[key]
                self._finish(run, now)
                expired.append(run)
        for key, (code, failed_at) in list(self._failed_asks.items()):
            run = self._active.get(key)
            if run is None or run.agent_spans:
                del self._failed_asks[key]
            elif failed_at <= gap_deadline and run.last_seen <= gap_deadline:
                # its agent got the error and gave up: no request came after it (nor anything
                # of the run: what the timer ends is never before last_seen + loose_run_gap)
                del self._failed_asks[key]
                run.end_error_type = code
                self._finish(run, now)
                expired.append(run)
        for key in list(self._failed_unclosed):
            run = self._active.get(key)
            if run is None:
                del self._failed_unclosed[key]
            elif run.last_seen <= gap_deadline:
                del self._failed_unclosed[key]
                self._finish(run, now)
                expired.append(run)
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

    @staticmethod
    def _count(record: SpanRecord, run: RunState,
               before: tuple[int, int, int, int, float], result: BatchResult) -> None:
        """Count what folding ``record`` added to ``run``'s tool calls, tokens and errors, as
        the run reads it (a second instrumentation's span of a call, a tool call that framed
        the model loop add nothing), under the run's agent."""
        tools, input_tokens, output_tokens, errors, cost = before
        agent = run.agent_name
        if run.tool_calls > tools:
            tool = record.tool_name or "unknown"
            result.tool_calls[(agent, tool)] += run.tool_calls - tools
            result.tool_results.append(
                (tool, run.key, (record.error_type or "error") if record.error else None))
        if run.input_tokens > input_tokens:
            result.tokens[(agent, "input")] += run.input_tokens - input_tokens
        if run.output_tokens > output_tokens:
            result.tokens[(agent, "output")] += run.output_tokens - output_tokens
        if run.errors > errors:
            result.errors[(agent, record.error_type or "error")] += run.errors - errors
        if run.cost_usd > cost:
            key = (agent, record.model or "unknown")
            result.cost[key] = result.cost.get(key, 0.0) + run.cost_usd - cost
        result.exemplars[agent] = record.trace_id
