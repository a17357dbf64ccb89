"""Which run each span of a trace belongs to when no span names its run.

Theory of operation
-------------------
Instrumentations that stamp no run id on their spans (OpenInference, OpenLLMetry, the GenAI
instrumentations of agent frameworks) tell a span's run only through its trace and parent span.
Spans end children first, so the model and tool calls of a nested agent (a sub-agent, an agent
used as a tool, a handoff) arrive *before* the agent span that says they were a sub-agent's.

The tracker folds each span into the trace's run as it arrives — rules need the live view —
and a :class:`TraceFrames` remembers, per trace, the parent links and the records seen (both
bounded), so that when an agent span that is not the trace root arrives it can decide:

* a workflow root that made model calls of its own (not inside an agent span below it), or
  one that lists a team's members (:attr:`team_root`), is the trace run's agent, as an agent
  root is: the agents below it are nested ones (a team's members peers, each a child run of
  the team's run, none the same invocation as the team);
* the trace's **main agent** (the first agent span to end that no earlier one encloses): its
  subtree stays in the trace run, and its outcome is the run's (a workflow root that ends OK
  above an agent that hit its limit);
* a **nested agent** (a sibling that ends after the main one, as a handoff does, or one inside
  the main agent's subtree): its subtree moves out into a *child run* whose signals are folded
  again from the retained records, with ``parent_run`` = the trace run;
* a sibling of the main agent that is, as it is, one call of a loop the application runs
  itself, a call a step (:attr:`SpanRecord.loop_call`, of the same agent) is no nested agent:
  the run's next step;
* a nested agent span with nothing below it (LangGraph under OpenLLMetry hangs a sub-agent's
  work from a sibling task span) takes the spans beside it that carry its agent name;
* an agent span that names no agent and has no model or tool call below it is no nested agent
  (:meth:`TraceFrames.answer_only`): the answer it may carry is the trace run's;
* a graph's span (:attr:`SpanRecord.graph`) directly below a tool call, with model calls below
  it, is a nested agent named after it, whichever of the three comes last;
* two agent spans of one nested agent's invocation (seen by two instrumentations, one inside
  the other, in either order) are one child run: the outer one joins the inner one's;
* an agent span that encloses the one taken as main until then demotes it to a child: the inner
  agent of "agent as a tool" ends first (enclosed by the parent links, or by the times of one
  of the outer agent's tool calls when the instrumentation hangs both agents side by side) —
  unless both are one invocation seen by two
  instrumentations (OpenInference's ``agent_run`` around google-adk's own ``invoke_agent``):
  the same agent name (or none), and no model or tool call between them.

A span that comes after spans below it (a request sent before the one with their parent)
may leave them out of a nested agent split off in between: when it comes inside a child run,
the records below it that another run has move there too (:meth:`TraceFrames.left_below`).

The retained records are kept for ``LATE_SPAN_GRACE`` seconds after the trace run ends (spans
may come after their root: a batch retried, or sent beside a later one), then dropped. Past
``MAX_RETAINED_SPANS`` a trace is no longer split (its nested agents stay folded into the
trace run): counted, never unbounded.
The module is pure: no clock, no I/O.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from watchdog.core.spans.record import AGENT, LLM, OTHER, TOOL, SpanRecord

MAX_RETAINED_SPANS = 512  # records kept per trace to fold a nested agent's run again
MAX_TRACES_RETAINED = 4_000  # traces with retained records at once (least recent dropped)
MAX_DEPTH = 64  # parent links followed at most (a cycle or a very deep tree ends the walk)
MAX_TRACES_ENDED = 256  # traces whose run ended, kept for late spans (some 10 KiB each)
LATE_SPAN_GRACE = 30.0  # seconds they are kept


@dataclass(slots=True)
class TraceFrames:
    """Parent links and retained records of one trace whose spans name no run."""

    parents: dict[str, str | None] = field(default_factory=dict)
    records: list[SpanRecord] = field(default_factory=list)
    children: dict[str, str] = field(default_factory=dict)  # agent span id -> child run key
    adopted: dict[str, str] = field(default_factory=dict)  # span beside its agent -> child run
    calls: set[str] = field(default_factory=set)  # model and tool call span ids
    agents: dict[str, str | None] = field(default_factory=dict)  # agent span id -> agent name
    main_agent: str | None = None
    # the agent taken as main until an agent root took it in as its own invocation (the OpenAI
    # Agents SDK's workflow root around its first agent): a sibling of it that ended first is
    # the trace run's agent when it comes after the root
    inner_agent: str | None = None
    team_root: str | None = None  # a team's root span: its members are peers, none its own
    graphs: set[str] = field(default_factory=set)  # spans of a graph's metadata (record.graph)
    complete: bool = True  # False once a record could not be retained: no more splitting
    ahead: list[SpanRecord] = field(default_factory=list)  # tool calls of the batch, unfolded

    def to_dict(self) -> dict[str, Any]:
        """The frames in JSON-able values (kept over a clean restart)."""
        return {"parents": self.parents, "records": [record.to_dict() for record in self.records],
                "children": self.children, "adopted": self.adopted, "calls": sorted(self.calls),
                "agents": self.agents, "main_agent": self.main_agent, "complete": self.complete,
                "team_root": self.team_root, "graphs": sorted(self.graphs),
                "inner_agent": self.inner_agent}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TraceFrames:
        """The frames :meth:`to_dict` gave; raises KeyError, TypeError or ValueError for data it
        did not. No more than ``MAX_RETAINED_SPANS`` records are taken back."""
        records = [SpanRecord.from_dict(record) for record in data["records"]]
        return cls(parents=dict(data["parents"]), records=records[:MAX_RETAINED_SPANS],
                   children=dict(data["children"]), adopted=dict(data["adopted"]),
                   calls=set(data["calls"]), agents=dict(data["agents"]),
                   main_agent=data["main_agent"], team_root=data.get("team_root"),
                   inner_agent=data.get("inner_agent"),
                   graphs=set(data.get("graphs", ())),
                   complete=bool(data["complete"]) and len(records) <= MAX_RETAINED_SPANS)

    def note(self, record: SpanRecord) -> None:
        self.parents[record.span_id] = record.parent_span_id
        kind = record.kind
        if kind is LLM or kind is TOOL:
            self.calls.add(record.span_id)
        elif record.graph and len(self.graphs) < MAX_RETAINED_SPANS:
            self.graphs.add(record.span_id)
        elif kind is AGENT:
            self.agents[record.span_id] = record.agent
            if record.team:
                self.team_root = record.span_id
        if len(self.records) >= MAX_RETAINED_SPANS:
            self.complete = False
            return
        self.records.append(record)

    def left_below(self, span_id: str, key: str) -> bool:
        """Whether a retained record hangs from span ``span_id`` (come after it: its link
        was not known) in a run other than ``key``."""
        return any(record.parent_span_id == span_id and record.run_key != key
                   for record in self.records)

    def within(self, span_id: str, ancestor: str) -> bool:
        """Whether ``span_id`` is ``ancestor`` or below it (as far as the links seen tell)."""
        parents = self.parents
        current: str | None = span_id
        for _ in range(MAX_DEPTH):
            if current is None:
                return False
            if current == ancestor:
                return True
            current = parents.get(current)
        return False

    def same_invocation(self, inner: str, outer: str) -> bool:
        """Whether agent span ``inner`` (below ``outer``) is ``outer``'s own invocation seen by
        a second instrumentation or framed by a wrapper: their agent names agree (or one is
        unknown), no model or tool call lies between them, and ``outer`` made no call of its own
        outside ``inner`` (a smolagents manager whose step runs a managed agent did)."""
        inner_name, outer_name = self.agents.get(inner), self.agents.get(outer)
        if (inner_name and outer_name and inner_name != outer_name) or outer == self.team_root:
            return False
        calls, ahead = self.calls, self.ahead
        current = self.parents.get(inner)
        for _ in range(MAX_DEPTH):
            if current is None or current == outer:
                break
            if current in calls or (ahead and any(call.span_id == current for call in ahead)):
                return False  # (a tool call of its batch still to be placed lies between)
            current = self.parents.get(current)
        if current != outer:
            return False
        return not any(self.within(call, outer) and not self.within(call, inner)
                       and self.child_of(call) is None for call in calls)

    def graph_in_tool(self, placed: SpanRecord) -> SpanRecord | None:
        """A graph's span directly below a tool call, not split off yet, that made model calls
        (LangGraph.js invoking a graph inside a tool that passes its config on: no span of it
        is an agent), as ``placed`` (the tool call, the graph's span or a model call below it:
        whichever comes last) completes it; None if there is none."""
        graphs = self.graphs
        if not graphs:
            return None
        if placed.kind is TOOL:
            candidates = [span for span in graphs if self.parents.get(span) == placed.span_id]
        elif placed.graph:
            candidates = [placed.span_id]
        elif placed.kind is LLM:  # the graph spans above it
            candidates = [span for span in graphs if self.within(placed.span_id, span)]
        else:
            return None
        for span in candidates:
            tool = self.parents.get(span)
            if tool not in self.calls or span in self.children \
                    or self.child_of(span) is not None:
                continue
            graph = tool_call = None
            for record in self.records:
                if record.span_id == span:
                    graph = record
                elif record.span_id == tool and record.kind is TOOL:
                    tool_call = record
            if graph is not None and tool_call is not None and graph.kind is OTHER and any(
                    record.kind is LLM and self.within(record.span_id, span)
                    for record in self.records):
                return graph
        return None

    def works_itself(self, root: str) -> bool:
        """Whether workflow span ``root`` made a model call of its own: one below it that no
        agent span below it encloses (Agno's team under OpenLLMetry: the leader's model and
        delegation calls hang from the team's workflow span, the member's agent span beside
        them)."""
        return any(record.kind is LLM and self.agent_above(record.span_id) == root
                   for record in self.records)

    def agent_above(self, span_id: str) -> str | None:
        """The nearest agent span strictly above ``span_id``, if any."""
        agents, parents = self.agents, self.parents
        current = parents.get(span_id)
        for _ in range(MAX_DEPTH):
            if current is None or current in agents:
                return current
            current = parents.get(current)
        return None

    def split_twin(self, outer: str) -> str | None:
        """The agent span below agent span ``outer`` already split into a child run that is
        ``outer``'s own invocation seen by a second instrumentation (autogen-core's
        ``invoke_agent`` around OpenInference's ``on_messages_stream``): its span id, if any."""
        for span in self.children:
            if span != outer and self.within(span, outer) and self.same_invocation(span, outer):
                return span
        return None

    def split_above(self, span_id: str) -> str | None:
        """The nearest agent span strictly above ``span_id`` split into a child run, if any."""
        children, parents = self.children, self.parents
        if not children:
            return None
        current = parents.get(span_id)
        for _ in range(MAX_DEPTH):
            if current is None:
                return None
            if current in children:
                return current
            current = parents.get(current)
        return None

    def ran_in_a_tool_of(self, inner: str, outer: str) -> bool:
        """Whether agent span ``inner`` ran inside a tool call below agent span ``outer`` by
        their times, though no parent link says so: an agent used as a tool that the
        instrumentation hangs beside its caller (OpenLLMetry hangs every OpenAI Agents SDK agent
        span from the workflow root)."""
        agent = next((record for record in self.records if record.span_id == inner), None)
        if agent is None:
            return False
        start, end = agent.start_ns, agent.end_ns
        return any(record.kind is TOOL and record.start_ns <= start and end <= record.end_ns
                   and self.within(record.span_id, outer)
                   for records in (self.records, self.ahead) for record in records)

    def next_step(self, agent: SpanRecord, main: str) -> bool:
        """Whether agent span ``agent`` and agent span ``main`` (retained) are two calls of one
        loop its application runs itself, a call a step (:attr:`SpanRecord.loop_call`): both
        such calls of the same agent, neither inside the other nor run in a tool of it."""
        span = agent.span_id
        return agent.loop_call and span != main and any(
            record.span_id == main and record.loop_call and record.agent == agent.agent
            for record in self.records) \
            and not self.within(span, main) and not self.within(main, span) \
            and not self.ran_in_a_tool_of(span, main) and not self.ran_in_a_tool_of(main, span)

    def ended_before(self, agent: SpanRecord, other: str) -> bool:
        """Whether agent span ``agent`` ended before span ``other`` (retained) did."""
        return any(record.span_id == other and agent.end_ns < record.end_ns
                   for record in self.records)

    def answer_only(self, agent: SpanRecord) -> bool:
        """Whether agent span ``agent`` (below the trace root) is no agent of its own: it names
        no agent and no model or tool call ran below it (a framework that puts the run's final
        answer, or its stand-in for one at a limit, on an unnamed agent-kind span of its own:
        LlamaIndex's ``finalize_response``)."""
        if agent.agent is not None:
            return False
        span = agent.span_id
        return not any(call != span and self.within(call, span) for call in self.calls)

    def child_of(self, span_id: str) -> str | None:
        """The child run of the nearest nested agent at or above ``span_id``, if any."""
        children, adopted = self.children, self.adopted
        if not children:
            return None
        parents = self.parents
        current: str | None = span_id
        for _ in range(MAX_DEPTH):
            if current is None:
                return None
            key = children.get(current) or adopted.get(current)
            if key is not None:
                return key
            current = parents.get(current)
        return None

    def subtree(self, agent_span: str, key: str) -> list[SpanRecord]:
        """The retained records at or below ``agent_span`` that no deeper child run owns —
        or, for an agent span with nothing below it, the spans beside it (under its parent)
        that carry its agent name, which are then owned by ``key``: never the trace's main
        agent or what ran below it (the same agent invoked again, with nothing below — the
        OpenAI Agents SDK's span of an agent stopped by ``max_turns`` before its turn — takes
        nothing from the trace run's own agent)."""
        moved = [record for record in self.records
                 if self.child_of(record.span_id) is None
                 and self.within(record.span_id, agent_span)]
        name, parent = self.agents.get(agent_span), self.parents.get(agent_span)
        if len(moved) <= 1 and name and parent:
            main = self.main_agent
            # (the trace's own agent beside it, and what ran below it, stay; an agent above
            # its parent, the trace's root, holds all of them)
            main = main if main is not None and self.within(main, parent) else None
            beside = [record for record in self.records
                      if record.agent == name and record.kind is not AGENT  # (one of its own)
                      and self.child_of(record.span_id) is None
                      and self.within(record.span_id, parent)
                      and not (main is not None and self.within(record.span_id, main))]
            for record in beside:
                self.adopted[record.span_id] = key
            moved = beside + moved
        return moved

    def beside_child(self, record: SpanRecord) -> str | None:
        """The child run a span that came after its nested agent was split out belongs to by
        :meth:`subtree`'s rule for an agent span with nothing below it: beside it (under its
        parent, in no agent span of its own), carrying its agent name; adopted by that run.
        None for any other span (an agent span is placed as one)."""
        if record.kind is AGENT:
            return None
        filled: set[str] | None = None  # (found once for all the agents: :meth:`_filled`)
        for agent_span, key in self.children.items():
            name, parent = self.agents.get(agent_span), self.parents.get(agent_span)
            if name != record.agent or not parent or agent_span == record.span_id \
                    or not self._agentless_below(record.span_id, parent):
                continue
            if filled is None:
                filled = self._filled()
            if agent_span in filled:
                continue
            main = self.main_agent
            if main is not None and self.within(main, parent) \
                    and self.within(record.span_id, main):
                continue  # (as in subtree)
            self.adopted[record.span_id] = key
            return key
        return None

    def _filled(self) -> set[str]:
        """The nested agents' spans (:attr:`children`) with a retained record below them, as
        :meth:`within` follows the links: one walk up from each record, not one pass over the
        records per agent (a trace with many nested agents of one name)."""
        children, parents = self.children, self.parents
        filled: set[str] = set()
        for held in self.records:
            span_id = held.span_id
            current = parents.get(span_id)
            for _ in range(MAX_DEPTH - 1):
                if current is None:
                    break
                if current in children and current != span_id:
                    filled.add(current)
                current = parents.get(current)
        return filled

    def _agentless_below(self, span_id: str, ancestor: str) -> bool:
        """Whether ``span_id`` lies below ``ancestor`` with no agent span between them (then
        it ran in no agent of its own)."""
        parents, agents = self.parents, self.agents
        current = parents.get(span_id)
        for _ in range(MAX_DEPTH):
            if current is None:
                return False
            if current == ancestor:
                return True
            if current in agents:
                return False
            current = parents.get(current)
        return False

    def own(self) -> list[SpanRecord]:
        """The retained records that belong to the trace run itself."""
        return [record for record in self.records if self.child_of(record.span_id) is None]

    def nested_children(self, agent_span: str) -> list[str]:
        """Child runs already split off below ``agent_span`` (their parent becomes its run)."""
        return [key for span, key in self.children.items()
                if span != agent_span and self.within(span, agent_span)]


class FrameBook:
    """The :class:`TraceFrames` of traces in progress, least recently used dropped first; and
    of traces whose run has ended, for ``LATE_SPAN_GRACE`` seconds (at most
    ``MAX_TRACES_ENDED``): spans that come after their root (a batch retried, or sent beside a
    later one, arrives after it) still find their nested agent's child run, or split it out."""

    def __init__(self, max_traces: int = MAX_TRACES_RETAINED,
                 max_ended: int = MAX_TRACES_ENDED) -> None:
        self.max_traces = max_traces
        self.max_ended = max_ended
        self._traces: OrderedDict[str, TraceFrames] = OrderedDict()
        self._ended: OrderedDict[str, tuple[float, TraceFrames]] = OrderedDict()
        self.dropped = 0  # traces that stopped being split for want of room (a counter)

    def of(self, trace_id: str) -> TraceFrames:
        frames = self._traces.get(trace_id)
        if frames is None:
            ended = self._ended.get(trace_id)
            if ended is not None:
                return ended[1]
            frames = self._traces[trace_id] = TraceFrames()
            if len(self._traces) > self.max_traces:
                self._traces.popitem(last=False)
                self.dropped += 1
        else:
            self._traces.move_to_end(trace_id)
        return frames

    def get(self, trace_id: str) -> TraceFrames | None:
        frames = self._traces.get(trace_id)
        if frames is None and (ended := self._ended.get(trace_id)) is not None:
            return ended[1]
        return frames

    def forget(self, trace_id: str) -> None:
        self._traces.pop(trace_id, None)
        self._ended.pop(trace_id, None)

    def end(self, trace_id: str, now: float, frames: TraceFrames | None = None) -> None:
        """The trace's run has ended (at ``now``): its frames (or ``frames``, restored) are
        kept for late spans a while longer."""
        frames = self._traces.pop(trace_id, None) or frames
        if frames is None:
            return
        self._ended[trace_id] = (now, frames)
        self._ended.move_to_end(trace_id)
        while len(self._ended) > self.max_ended:
            self._ended.popitem(last=False)

    def expire(self, now: float) -> None:
        """Drop the frames of traces whose run ended more than ``LATE_SPAN_GRACE`` ago."""
        ended = self._ended
        while ended and next(iter(ended.values()))[0] <= now - LATE_SPAN_GRACE:
            ended.popitem(last=False)

    def items(self) -> Iterator[tuple[str, None, TraceFrames]]:
        """Every trace in progress: its id, None and its frames, least recently used first."""
        return ((trace, None, frames) for trace, frames in self._traces.items())

    def ended_items(self) -> Iterator[tuple[str, float, TraceFrames]]:
        """Every trace whose run has ended: its id, when, and its frames, oldest first."""
        return ((trace, at, frames) for trace, (at, frames) in self._ended.items())

    def put(self, trace_id: str, frames: TraceFrames) -> None:
        """Keep ``frames`` as the trace's (restored): the most recently used, within bounds."""
        self._traces[trace_id] = frames
        self._traces.move_to_end(trace_id)
        while len(self._traces) > self.max_traces:
            self._traces.popitem(last=False)
            self.dropped += 1

    def __len__(self) -> int:
        return len(self._traces)
