"""Run assembly (issue 28, mechanisms 4 and 5): a run ends when its root ends, whatever else the
root carries; one exception echoed on nested spans is one failure; an unnamed agent span that
only carries the answer is no nested agent. Spans from a real tracer (``tests.spans``), in the
order an exporter sends them (children first), one request or span by span."""

from __future__ import annotations

import json

import pytest
from opentelemetry.trace import Span

from tests.spans import T0, SpanMaker, chat_attrs, records_of, tool_attrs
from watchdog.core.runs.frames import LATE_SPAN_GRACE
from watchdog.core.runs.run import RunState
from watchdog.core.runs.terminal import TerminalState
from watchdog.core.runs.tracker import RunTracker
from watchdog.core.spans.record import AGENT, SpanRecord


def applied(records: list[SpanRecord], per_span: bool) -> RunTracker:
    tracker = RunTracker()
    batches = [[record] for record in records] if per_span else [records]
    for now, batch in enumerate(batches, start=1):
        tracker.apply(batch, T0 + now)
    return tracker


def _asking(tool: str = "lookup") -> dict[str, object]:
    return chat_attrs(finish="tool_calls", **{"gen_ai.output.messages": json.dumps(
        [{"role": "assistant", "parts": [{"type": "tool_call", "id": "call_1", "name": tool,
                                          "arguments": "{}"}]}])})


def _root_chat_loop(maker: SpanMaker, root_finish: str | None, end: bool = True) -> Span:
    """A loop whose root span an instrumentation made a model call's: the attributes of the
    loop's model calls written onto it (the last call's usage and finish reason, or none); the
    root, ended unless ``end`` is False."""
    root_attrs = chat_attrs(30, 12) if root_finish is None else chat_attrs(30, 12, root_finish)
    root = maker.open("chat research", root_attrs, start=T0)
    maker.span("chat", _asking(), parent=root, start=T0 + 1, end=T0 + 2)
    maker.span("execute_tool lookup", tool_attrs("lookup", "{}", "v"), parent=root,
               start=T0 + 2.1, end=T0 + 2.2)
    maker.span("chat", chat_attrs(finish="stop"), parent=root, start=T0 + 3, end=T0 + 4)
    if end:
        root.end(end_time=int((T0 + 5) * 1e9))
    return root


@pytest.mark.parametrize("per_span", [False, True])
@pytest.mark.parametrize("root_finish", [None, "tool_calls", "stop"])
def test_a_root_made_a_model_call_still_ends_its_run(per_span: bool,
                                                     root_finish: str | None) -> None:
    maker = SpanMaker()
    _root_chat_loop(maker, root_finish)
    tracker = applied(records_of(maker.take()), per_span)
    assert list(tracker.active()) == []
    (run,) = tracker.ended()
    assert (run.iterations, run.tool_calls, run.terminal_state) \
        == (2, 1, TerminalState.COMPLETED)
    assert (run.input_tokens, run.output_tokens) == (20, 10)  # the root's sums not again


@pytest.mark.parametrize("root_finish", [None, "tool_calls"])
def test_a_root_made_a_model_call_that_comes_first_still_frames_its_loop(
        root_finish: str | None) -> None:
    """The root made a model call's and the loop's last call sent first, a library's plumbing
    span of its own resource (LiteLLM's raw request) under the root ending first: a loose call
    (and its twin) until the loop's earlier calls come; then the root is the loop's span,
    ending its trace's run, read as in order — and named after the loop's service, not the
    library's."""
    maker, library = SpanMaker(), SpanMaker({"service.name": "a-library"})
    root = _root_chat_loop(maker, root_finish, end=False)
    library.span("raw request", {"input": "{}"}, parent=root, start=T0 + 3, end=T0 + 3.5)
    root.end(end_time=int((T0 + 5) * 1e9))
    spans = maker.take()
    in_order = applied(records_of([*spans[:2], *library.finished(), *spans[2:]]), False)
    tracker = RunTracker()
    tracker.apply(records_of([*library.take(), *spans[2:]]), T0 + 10)
    tracker.apply(records_of(spans[:2]), T0 + 11)
    assert list(tracker.active()) == []
    (run,) = tracker.ended()
    (expected,) = in_order.ended()
    assert (run.agent_name, run.iterations, run.tool_calls, run.terminal_state,
            run.input_tokens, run.output_tokens) \
        == (expected.agent_name, expected.iterations, expected.tool_calls,
            expected.terminal_state, expected.input_tokens, expected.output_tokens) \
        == ("test-agent", 2, 1, TerminalState.COMPLETED, 20, 10)


def test_a_root_model_call_kept_for_the_loop_it_may_frame_is_let_go_after_its_run_ended(
        ) -> None:
    """A loose model call (a trace of its own) is kept as a root that may frame a loop whose
    calls come later, while its run is open and ``LATE_SPAN_GRACE`` after it ended."""
    maker = SpanMaker()
    maker.span("chat", chat_attrs(finish="stop"), start=T0, end=T0 + 1)
    tracker = RunTracker()
    tracker.apply(records_of(maker.take()), T0 + 2)
    (run,) = tracker.ended()
    assert run.has_final_answer and len(tracker._lone_roots) == 1
    tracker.expire(T0 + 2 + LATE_SPAN_GRACE - 1)
    assert len(tracker._lone_roots) == 1
    tracker.expire(T0 + 3 + LATE_SPAN_GRACE)
    assert not tracker._lone_roots


def test_a_loose_model_call_with_its_twin_inside_is_still_a_loose_call() -> None:
    """One model call traced twice, one span inside the other, a trace of its own: a loose
    call (the next call, another trace, is the same run's)."""
    maker = SpanMaker()
    for start, finish in ((T0, "tool_calls"), (T0 + 10, "stop")):
        outer = maker.open("chat", chat_attrs(finish=finish), start=start)
        maker.span("chat", chat_attrs(finish=finish), parent=outer, start=start + 0.1,
                   end=start + 0.9)
        outer.end(end_time=int((start + 1) * 1e9))
    tracker = applied(records_of(maker.take()), per_span=True)
    (run,) = tracker.ended()
    assert (run.iterations, run.has_final_answer) == (2, True)


@pytest.mark.parametrize("per_span", [False, True])
def test_an_exception_echoed_on_the_span_around_a_tool_is_one_failed_call(
        per_span: bool) -> None:
    maker = SpanMaker()
    boom = RuntimeError("lookup failed for k9")
    with maker.agent(attrs={"gen_ai.agent.name": "a"}) as root:
        maker.span("chat", _asking(), parent=root, start=T0 + 1, end=T0 + 2)
        outer = maker.open("execute_tool lookup", tool_attrs("lookup", "{}"), parent=root,
                           start=T0 + 2.1)
        maker.span("execute_tool lookup", tool_attrs("lookup", "{}"), parent=outer,
                   start=T0 + 2.2, end=T0 + 2.3, exception=boom)
        outer.record_exception(boom)
        from opentelemetry.trace import Status, StatusCode
        outer.set_status(Status(StatusCode.ERROR, str(boom)))
        outer.end(end_time=int((T0 + 2.4) * 1e9))
        maker.span("chat", chat_attrs(finish="stop"), parent=root, start=T0 + 3, end=T0 + 4)
    tracker = applied(records_of(maker.take()), per_span)
    (run,) = tracker.ended()
    assert (run.tool_calls, run.errors, run.repeated_error) == (1, 1, 1)
    assert run.terminal_state is TerminalState.COMPLETED


def test_two_failures_of_one_exception_side_by_side_are_two() -> None:
    """The same exception on two sibling tool calls (a retry) is no echo: two failed calls."""
    maker = SpanMaker()
    with maker.agent(attrs={"gen_ai.agent.name": "a"}) as root:
        for start in (T0 + 1, T0 + 3):
            maker.span("chat", _asking(), parent=root, start=start, end=start + 0.5)
            maker.span("execute_tool lookup", tool_attrs("lookup", "{}"), parent=root,
                       start=start + 0.6, end=start + 0.7,
                       exception=RuntimeError("lookup failed for k9"))
    tracker = applied(records_of(maker.take()), per_span=False)
    (run,) = tracker.ended()
    assert (run.tool_calls, run.errors, run.repeated_error) == (2, 2, 2)


def test_a_framework_step_around_a_failed_tool_sent_first_leaves_the_call_counted() -> None:
    """Parents first (LangSmith's exporter): the step around the tool fails with the same
    exception and counts nothing; the tool call inside it, sent after it, counts."""
    maker = SpanMaker()
    boom = RuntimeError("no such key")
    with maker.agent(attrs={"gen_ai.agent.name": "a"}) as root:
        maker.span("chat", _asking(), parent=root, start=T0 + 1, end=T0 + 2)
        step = maker.open("tools", {}, parent=root, start=T0 + 2.1)
        maker.span("execute_tool lookup", tool_attrs("lookup", "{}"), parent=step,
                   start=T0 + 2.2, end=T0 + 2.3, exception=boom)
        step.record_exception(boom)
        from opentelemetry.trace import Status, StatusCode
        step.set_status(Status(StatusCode.ERROR, str(boom)))
        step.end(end_time=int((T0 + 2.4) * 1e9))
    records = records_of(maker.take())
    agent, chat, tool, frame = (next(r for r in records if r.kind is AGENT),
                                records[0], records[1], records[2])
    assert frame.name == "tools" and tool.name == "execute_tool lookup"
    tracker = applied([agent, chat, frame, tool], per_span=True)
    (run,) = tracker.ended()
    assert (run.tool_calls, run.errors) == (1, 1)


@pytest.mark.parametrize("outer_first", [False, True])
def test_a_failed_tool_call_inside_its_second_tool_span_counts_its_failure_in_either_order(
        outer_first: bool) -> None:
    """A tool call traced twice, one tool span inside the other (OpenInference's tool span
    around autogen-core's ``execute_tool``): the inner one failed, the outer one ended OK. One
    call and one failure, also when the outer one comes first (a later request sent first)."""
    maker = SpanMaker()
    with maker.agent(attrs={"gen_ai.agent.name": "a"}) as root:
        maker.span("chat", _asking(), parent=root, start=T0 + 1, end=T0 + 2)
        outer = maker.open("a.lookup", tool_attrs("lookup", "{}"), parent=root, start=T0 + 2.1)
        maker.span("execute_tool lookup", tool_attrs("lookup", "{}"), parent=outer,
                   start=T0 + 2.2, end=T0 + 2.3, exception=RuntimeError("no such key"))
        outer.end(end_time=int((T0 + 2.4) * 1e9))
    chat, inner, wrapper, agent = records_of(maker.take())
    assert (inner.name, wrapper.name) == ("execute_tool lookup", "a.lookup")
    order = [wrapper, chat, inner, agent] if outer_first else [chat, inner, wrapper, agent]
    tracker = applied(order, per_span=True)
    (run,) = tracker.ended()
    assert (run.tool_calls, run.errors, run.last_error) == (1, 1, "RuntimeError: no such key")


@pytest.mark.parametrize("per_span", [False, True])
def test_an_unnamed_agent_span_with_only_the_answer_is_the_runs_answer(per_span: bool) -> None:
    maker = SpanMaker()
    with maker.agent(attrs={"gen_ai.agent.name": "writer"}) as root:
        maker.span("chat", _asking(), parent=root, start=T0 + 1, end=T0 + 2)
        maker.span("execute_tool lookup", tool_attrs("lookup", "{}", "v"), parent=root,
                   start=T0 + 2.1, end=T0 + 2.2)
        maker.span("chat", chat_attrs(finish="tool_calls"), parent=root, start=T0 + 3,
                   end=T0 + 4)
        # (an OpenInference AGENT span that names no agent, its output the answer)
        maker.span("agent", {"openinference.span.kind": "AGENT", "output.value": "It is v."},
                   parent=root, start=T0 + 4.1, end=T0 + 4.2)
    records = records_of(maker.take())
    (answer,) = [r for r in records if r.kind is AGENT and r.parent_span_id is not None]
    assert (answer.agent, answer.final_answer) == (None, True)
    tracker = applied(records, per_span)
    (run,) = tracker.ended()
    assert (run.agent_name, run.tool_calls, run.has_final_answer, run.terminal_state) \
        == ("writer", 1, True, TerminalState.COMPLETED)
    assert run.final_output is not None and "It is v." in run.final_output
    assert run.parent_run is None


@pytest.mark.parametrize("per_span", [False, True])
@pytest.mark.parametrize("answer", [
    # the OTel GenAI conventions' answer as an event (Strands' ``end_agent_span`` default format)
    ("gen_ai.choice", {"message": "It is v.", "finish_reason": "end_turn"}),
    # ... and in the latest format (``gen_ai.client.inference.operation.details``)
    ("gen_ai.client.inference.operation.details", {"gen_ai.output.messages": json.dumps(
        [{"role": "assistant", "parts": [{"type": "text", "content": "It is v."}]}])}),
])
def test_a_bare_invoke_agent_span_with_only_the_answer_event_is_the_runs_answer(
        per_span: bool, answer: tuple[str, dict[str, str]]) -> None:
    """An ``invoke_agent`` span below the run's agent that names no agent is a step of the run
    (OpenLIT's turn spans), not a child run; the answer it carries only in an event is the
    run's. No real emitter was found that sends it: the shape is the conventions' own."""
    maker = SpanMaker()
    with maker.agent(attrs={"gen_ai.agent.name": "writer"}) as root:
        maker.span("chat", _asking(), parent=root, start=T0 + 1, end=T0 + 2)
        maker.span("execute_tool lookup", tool_attrs("lookup", "{}", "v"), parent=root,
                   start=T0 + 2.1, end=T0 + 2.2)
        maker.span("chat", chat_attrs(finish="tool_calls"), parent=root, start=T0 + 3,
                   end=T0 + 4)
        bare = maker.open("invoke_agent", {"gen_ai.operation.name": "invoke_agent"},
                          parent=root, start=T0 + 4.1)
        bare.add_event(answer[0], answer[1], timestamp=int((T0 + 4.15) * 1e9))
        bare.end(end_time=int((T0 + 4.2) * 1e9))
    tracker = applied(records_of(maker.take()), per_span)
    (run,) = tracker.ended()
    assert (run.agent_name, run.tool_calls, run.has_final_answer, run.terminal_state) \
        == ("writer", 1, True, TerminalState.COMPLETED)
    assert run.final_output is not None and "It is v." in run.final_output
    assert run.parent_run is None


def test_a_named_nested_agent_is_still_a_child_run() -> None:
    maker = SpanMaker()
    with maker.agent(attrs={"gen_ai.agent.name": "planner"}) as root:
        maker.span("chat", _asking("research"), parent=root, start=T0 + 1, end=T0 + 2)
        inner = maker.open("invoke_agent researcher", {
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "researcher"},
            parent=root, start=T0 + 2.1)
        maker.span("chat", chat_attrs(finish="stop"), parent=inner, start=T0 + 2.2,
                   end=T0 + 2.3)
        inner.end(end_time=int((T0 + 2.4) * 1e9))
        maker.span("chat", chat_attrs(finish="stop"), parent=root, start=T0 + 3, end=T0 + 4)
    tracker = applied(records_of(maker.take()), per_span=False)
    runs = {run.agent_name: run for run in tracker.ended()}
    assert set(runs) == {"planner", "researcher"}
    assert runs["researcher"].parent_run == runs["planner"].key


def test_a_restored_run_still_knows_the_tools_asked_for() -> None:
    """The asked tool calls are part of the run's stored state (a restart between the model
    call and the tool span)."""
    maker = SpanMaker()
    with maker.agent(attrs={"gen_ai.agent.name": "a"}) as root:
        maker.span("chat", _asking(), parent=root, start=T0 + 1, end=T0 + 2)
        maker.span("lookup", {"input": "{}"}, parent=root, start=T0 + 2.1, end=T0 + 2.2)
    chat, tool, agent = records_of(maker.take())
    tracker = RunTracker()
    tracker.apply([chat], T0 + 1)
    restored = RunTracker()
    restored.restore(RunState.from_dict(json.loads(json.dumps(run.to_dict())))
                     for run in tracker.active())
    restored.apply([tool, agent], T0 + 2)
    (run,) = restored.ended()
    assert (run.tool_calls, run.tools) == (1, {"lookup": 1})
