"""Run assembly when a span carries a copy of another's call (issue 28, mechanisms 4 and 5, the
rules the real recordings in ``tests/test_assembly_recorded.py`` needed), on spans from a real
tracer (``tests.spans``): a loop's root that an instrumentation made a copy of one model call
(LiteLLM's callback), a tool call traced twice, one span inside the other, and an exception
recorded on a span whose status was left OK."""

from __future__ import annotations

import json

import pytest
from opentelemetry.trace import Status, StatusCode

from tests.spans import T0, SpanMaker, chat_attrs, records_of, tool_attrs
from watchdog.core.runs.terminal import TerminalState
from watchdog.core.runs.tracker import RunTracker
from watchdog.core.spans.record import LLM, SpanRecord

NS = 1_000_000_000


def _applied(batches: list[list[SpanRecord]]) -> RunTracker:
    tracker = RunTracker()
    for now, batch in enumerate(batches, start=1):
        tracker.apply(batch, T0 + now)
    return tracker


def _call(response: str, finish: str, tokens: int, text: str | None = None) -> dict[str, object]:
    parts = [{"type": "tool_call", "id": "call_1", "name": "lookup", "arguments": "{}"}] \
        if text is None else [{"type": "text", "content": text}]
    return chat_attrs(tokens, 5, finish, **{
        "gen_ai.response.id": response,
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": parts}])})


def _copied_root_loop() -> list[SpanRecord]:
    """A loop whose root carries the first call's attributes (its response id, usage, finish
    reason), as LiteLLM's callback leaves it when the last call's copy comes after the root
    ended; inside it that call, the tool it asked for and the answering call."""
    maker = SpanMaker()
    root = maker.open("research agent", _call("r1", "tool_calls", 30), start=T0)
    maker.span("chat", _call("r1", "tool_calls", 30), parent=root, start=T0 + 1, end=T0 + 2)
    maker.span("lookup", {"input": "{}"}, parent=root, start=T0 + 2.1, end=T0 + 2.2)
    maker.span("chat", _call("r2", "stop", 40, "It is v."), parent=root, start=T0 + 3,
               end=T0 + 4)
    root.end(end_time=int((T0 + 5) * NS))
    return records_of(maker.take())


@pytest.mark.parametrize("order", ["one request", "span by span", "root before last call"])
def test_a_root_carrying_a_copy_of_one_call_frames_its_loop(order: str) -> None:
    first, tool, last, root = _copied_root_loop()
    assert (root.kind, root.response_id, last.response_id) == (LLM, "r1", "r2")
    batches = {"one request": [[first, tool, last, root]],
               "span by span": [[first], [tool], [last], [root]],
               # a request grouped by scope: the root's scope before the calls' scope
               "root before last call": [[first], [tool], [root], [last]]}[order]
    tracker = _applied(batches)
    assert list(tracker.active()) == []
    (run,) = tracker.ended()
    assert (run.iterations, run.tool_calls, run.terminal_state, run.final_output) \
        == (2, 1, TerminalState.COMPLETED, "It is v.")
    assert (run.input_tokens, run.output_tokens) == (70, 10)  # the copy not counted again


@pytest.mark.parametrize(("inner", "tokens", "expected"), [
    ("r2", 40, (2, 70)),  # two nested spans naming different responses: two calls
    ("r1", 30, (1, 30)),  # one call traced twice: still one
])
def test_nested_model_call_spans_are_one_call_only_for_one_response(
        inner: str, tokens: int, expected: tuple[int, int]) -> None:
    maker = SpanMaker()
    with maker.agent(attrs={"gen_ai.agent.name": "a"}) as root:
        outer = maker.open("chat", _call("r1", "tool_calls", 30), parent=root, start=T0 + 1)
        maker.span("chat", _call(inner, "tool_calls", tokens), parent=outer, start=T0 + 1.1,
                   end=T0 + 1.9)
        outer.end(end_time=int((T0 + 2) * NS))
    (run,) = _applied([records_of(maker.take())]).ended()
    assert (run.iterations, run.input_tokens) == expected


@pytest.mark.parametrize("per_span", [False, True])
def test_a_tool_call_inside_a_call_of_the_same_tool_is_one_call(per_span: bool) -> None:
    """A framework's tool span and a second tracer's tool span inside it (OpenInference's tool
    decorator inside pydantic-ai's ``execute_tool``): one execution."""
    maker = SpanMaker()
    with maker.agent(attrs={"gen_ai.agent.name": "a"}) as root:
        maker.span("chat", _call("r1", "tool_calls", 30), parent=root, start=T0 + 1, end=T0 + 2)
        outer = maker.open("execute_tool lookup", tool_attrs(
            "lookup", "{}", "v", **{"gen_ai.tool.call.id": "call_1"}), parent=root,
            start=T0 + 2.1)
        maker.span("lookup", {"openinference.span.kind": "TOOL", "tool.name": "lookup",
                              "output.value": "v"}, parent=outer, start=T0 + 2.2, end=T0 + 2.3)
        outer.end(end_time=int((T0 + 2.4) * NS))
        maker.span("chat", _call("r2", "stop", 40, "It is v."), parent=root, start=T0 + 3,
                   end=T0 + 4)
    records = records_of(maker.take())
    (run,) = _applied([[r] for r in records] if per_span else [records]).ended()
    assert (run.tool_calls, run.tools) == (1, {"lookup": 1})


def test_two_calls_of_one_tool_side_by_side_are_two() -> None:
    maker = SpanMaker()
    with maker.agent(attrs={"gen_ai.agent.name": "a"}) as root:
        maker.span("chat", _call("r1", "tool_calls", 30), parent=root, start=T0 + 1, end=T0 + 2)
        for start in (T0 + 2.1, T0 + 2.3):
            maker.span("execute_tool lookup", tool_attrs("lookup", "{}", "v"), parent=root,
                       start=start, end=start + 0.1)
    (run,) = _applied([records_of(maker.take())]).ended()
    assert run.tool_calls == 2


@pytest.mark.parametrize(("message", "state", "reason", "errors"), [
    ("Agent stopped: maximum number of steps (5) reached", TerminalState.TOOL_LIMIT_REACHED,
     "max_steps", 0),
    ("connection reset", TerminalState.NO_RESPONSE, None, 0),  # no failure: no error either
])
def test_an_exception_on_a_span_left_ok_is_read_only_for_a_limit(
        message: str, state: TerminalState, reason: str | None, errors: int) -> None:
    """LiteLLM's callback sets the span around a call OK; the SDK then keeps OK when the
    exception that leaves the span would set ERROR: only the exception event is left."""
    maker = SpanMaker()
    root = maker.open("invoke_agent a", {"gen_ai.operation.name": "invoke_agent",
                                         "gen_ai.agent.name": "a"}, start=T0)
    maker.span("chat", _call("r1", "tool_calls", 30), parent=root, start=T0 + 1, end=T0 + 2)
    root.set_status(Status(StatusCode.OK))
    root.record_exception(RuntimeError(message))
    root.set_status(Status(StatusCode.ERROR, message))  # ignored: OK is final
    root.end(end_time=int((T0 + 5) * NS))
    records = records_of(maker.take())
    assert not records[-1].error
    (run,) = _applied([records]).ended()
    assert (run.terminal_state, run.terminal_reason, run.errors) == (state, reason, errors)
