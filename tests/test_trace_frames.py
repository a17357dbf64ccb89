"""A trace's frames (``watchdog.core.runs.frames``) outlive its run for spans that come after
the root: for ``LATE_SPAN_GRACE`` seconds and the last ``MAX_TRACES_ENDED`` traces, no more."""

from __future__ import annotations

from tests.recorded import ScopedSpan, request_of
from tests.test_rebatching import (
    as_exported,
    ended_runs,
    read_as_exported,
    runs_read,
    scoped_spans,
)
from watchdog.core.runs.frames import LATE_SPAN_GRACE, FrameBook
from watchdog.core.runs.tracker import RunTracker
from watchdog.core.spans.pipeline import records_from


def read_late(wait: float) -> list[tuple[str, int, int]]:
    """The Vercel AI SDK's sub-agent recording, its root sent first (with the caller's first
    model call) and the rest ``wait`` seconds later: each run's agent, model and tool calls."""
    spans = scoped_spans("vercel_ai", "subagent")
    tracker = RunTracker()
    tracker.apply(records_from(request_of(spans[:1] + spans[-1:])).records, 1.0)
    tracker.expire(1.0 + wait)
    tracker.apply(records_from(request_of(spans[1:-1])).records, 1.0 + wait)
    return sorted((run.agent_name, run.iterations, run.tool_calls) for run in tracker.ended())


def test_a_nested_agent_after_its_root_is_split_out_within_the_grace_alone() -> None:
    exported = sorted(run[:3] for run in read_as_exported("vercel_ai", "subagent"))
    assert exported == [("vercel_researcher", 2, 1), ("vercel_sub", 2, 1)]
    assert read_late(LATE_SPAN_GRACE - 1) == exported
    # past it, the sub-agent's spans fold into the run that ended
    assert read_late(LATE_SPAN_GRACE + 1) == [("vercel_researcher", 4, 2)]


def test_the_frames_of_ended_traces_are_bounded_oldest_dropped_first() -> None:
    book = FrameBook(max_ended=2)
    for at, trace in enumerate("abc"):
        book.of(trace).parents["s"] = None
        book.end(trace, float(at))
    assert [book.get(trace) is not None for trace in "abc"] == [False, True, True]
    assert book.of("b").parents == {"s": None}  # a late span of b finds b's frames
    book.expire(1.0 + LATE_SPAN_GRACE)
    assert [book.get(trace) is not None for trace in "abc"] == [False, False, True]
    assert len(book) == 0  # (traces in progress: none)


def team_runs(spans: list[ScopedSpan]) -> list[tuple[str | None, int, int, str | None]]:
    """What the tracker reads of ``spans`` sent one per request: each run's agent, model and
    tool calls, and its parent run's agent."""
    tracker = RunTracker()
    for at, span in enumerate(spans, start=1):
        tracker.apply(records_from(request_of([span])).records, float(at))
    runs = [*tracker.active(), *tracker.ended()]
    agents = {run.key: run.agent_name for run in runs}
    return sorted((run.agent_name, run.iterations, run.tool_calls,
                   agents.get(run.parent_run) if run.parent_run else None) for run in runs)


def test_a_nested_agent_seen_by_two_instrumentations_is_one_child_run_in_either_order() -> None:
    """AutoGen's team under OpenInference: each member's turn is autogen-core's ``invoke_agent``
    with OpenInference's ``<agent>.on_messages_stream`` inside (no call between them). The
    writer, a nested agent, is one child run whichever of its two spans comes first."""
    spans = scoped_spans("autogen_oi", "team")
    outer = next(index for index, (_, _, span) in enumerate(spans)
                 if span.name == "invoke_agent autogen_writer")
    inner = next(index for index, (_, _, span) in enumerate(spans)
                 if span.name == "autogen_writer.on_messages_stream")
    assert inner < outer  # (as exported: children end first)
    reordered = [*spans[:inner], spans[outer], *spans[inner:outer], *spans[outer + 1:]]
    for order in (spans, reordered):
        assert team_runs(order) == [("autogen-oi-service", 0, 0, None),
                                    ("autogen_researcher", 4, 3, "autogen-oi-service"),
                                    ("autogen_writer", 1, 0, "autogen-oi-service")]


def test_agents_below_a_workflow_root_that_came_first_are_placed_as_in_order() -> None:
    """The OpenAI Agents SDK's ``Agent workflow`` root (a workflow: no agent of its own) sent
    before the agent spans below it, which come after it ended the trace's run: the first of
    them to end is still the run's agent and the next ones nested agents, child runs of it —
    handoffs and an agent called as a tool read as in order."""
    for driver, scenario in [("openai_agents_openllmetry", "handoff"),
                             ("openai_agents_openlit", "agent_as_tool"),
                             ("openai_agents_openlit", "handoff")]:
        spans = scoped_spans(driver, scenario)
        exported = read_as_exported(driver, scenario)
        assert len(exported) > 1
        assert runs_read([request_of(spans[-1:]), request_of(spans[:-1])]) == exported


def test_an_agent_called_as_a_tool_whose_tool_call_comes_later_in_its_request_is_nested(
        ) -> None:
    """The OpenAI Agents SDK's agent as a tool: the workflow root sent first, then the called
    agent's spans, its agent span, the tool call that ran it and the caller's agent span in one
    request, then the caller's first model call. The called agent, placed before the tool
    call above it is, is a nested agent (the tool call lies between it and the root), not the
    root's own invocation seen twice."""
    for driver in ("openai_agents_sdk", "openai_agents_oi"):
        spans = scoped_spans(driver, "agent_as_tool")
        names = [span.name for _, _, span in spans]
        assert names[-2:] == ["Agent workflow", "Agent workflow"]
        assert names.index("research") > next(
            index for index, name in enumerate(names) if name.endswith("researcher"))
        requests = [request_of(spans[-2:]), request_of(spans[1:-2]), request_of(spans[:1])]
        assert runs_read(requests) == read_as_exported(driver, "agent_as_tool")


def test_spans_that_came_before_the_span_they_hang_from_follow_it_into_its_child_run(
        ) -> None:
    """A nested agent's model or tool call sent before the step span it hangs from, and the
    nested agent's span (and the trace's root) sent between the two: split off without that
    call, whose link to it was not known yet; the step span, when it comes, brings the call
    into the child run. (Three requests: the first part, the last, then the middle.)"""
    for driver, scenario, first, second in [("openai_agents_openlit", "handoff", 13, 19),
                                            ("openai_agents_openlit", "agent_as_tool", 7, 13),
                                            ("langgraphjs_oi", "managed_config", 13, 19)]:
        spans = scoped_spans(driver, scenario)
        requests = [request_of(part) for part in (
            spans[:first], spans[second:], spans[first:second])]
        assert runs_read(requests) == read_as_exported(driver, scenario)


def test_a_workflow_root_that_made_model_calls_of_its_own_is_the_runs_agent() -> None:
    """Agno's team under OpenLLMetry: the team is a workflow span (``agno.team.name``), the
    leader's model calls and its delegation tool call directly below it, the member's agent
    span beside them: the team's run, the member a child run of it."""
    assert sorted(run[:3] + run[6:] for run in read_as_exported("agno_olm", "team")) == [
        ("agno_researcher", 4, 3, "agno_team"), ("agno_team", 2, 1, None)]


def test_a_teams_members_are_peers_each_a_child_run_of_the_team() -> None:
    """AutoGen's RoundRobinGroupChat under OpenInference: the team's root CHAIN lists its
    participants (``participant_names``); the members ran one after the other below it. The
    team is the trace's run (named after the service: nothing names the team), each member a
    child run of it (not the first member the run and the next its child, as a handoff), and
    the team answers with its last member's answer (its own output is the whole TaskResult)."""
    runs = ended_runs(as_exported("autogen_oi", "team"))
    agents = {run.key: run.agent_name for run in runs}
    assert sorted((run.agent_name, run.iterations, run.tool_calls, agents.get(run.parent_run),
                   run.final_output) for run in runs) == [
        ("autogen-oi-service", 0, 0, None, "Write-up: a, b and c are known."),
        ("autogen_researcher", 4, 3, "autogen-oi-service", "a, b and c are known."),
        ("autogen_writer", 1, 0, "autogen-oi-service", "Write-up: a, b and c are known.")]


def test_a_graph_below_a_tool_call_is_a_child_run_whichever_comes_last() -> None:
    """LangGraph.js under OpenInference, the manager's tool invoking another graph with its
    config: the sub-agent's graph is a CHAIN (LangGraph's metadata) below the TOOL span, its
    model calls below it, no span AGENT. It is a child run named after the graph, whether the
    tool call, the graph's span or its model calls come last."""
    exported = read_as_exported("langgraphjs_oi", "managed_config")
    assert sorted(run[:3] + run[6:] for run in exported) == [
        ("lg_manager", 2, 1, None), ("lg_researcher", 2, 1, "lg_manager")]
    spans = scoped_spans("langgraphjs_oi", "managed_config")
    graph = next(index for index, (_, _, span) in enumerate(spans)
                 if span.name == "lg_researcher")
    for cut in (1, graph, graph + 1):  # the rest first: the model calls, the graph, the tool last
        assert runs_read([request_of(spans[cut:]), request_of(spans[:cut])]) == exported
