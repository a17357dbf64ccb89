"""Run signals (DESIGN §4), terminal states (§7) and the run lifecycle, from real spans.

Each test makes spans with the OpenTelemetry SDK at explicit times, sends them through the OTLP
encoder and the ingest pipeline, and folds them into a ``RunTracker`` with an injected ``now``.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Sequence
from types import MappingProxyType
from typing import Any

import pytest
from opentelemetry.trace import Span, Status, StatusCode

from tests.spans import (
    NS,
    T0,
    SpanMaker,
    chat_attrs,
    only_run,
    records_of,
    run_spans,
    tool_attrs,
)
from watchdog.core.runs.book import TRACED_ANSWER_WAIT
from watchdog.core.runs.fields import MAX_DISTINCT_TOOLS, OTHER_TOOL, RunFields
from watchdog.core.runs.run import RunState
from watchdog.core.runs.terminal import TerminalState
from watchdog.core.runs.tracker import RunTracker

Call = tuple[str, Any, Any]  # (tool, arguments, result)


@pytest.fixture
def otel() -> SpanMaker:
    return SpanMaker()


def tool_calls(otel: SpanMaker, parent: Span, calls: Sequence[Call], start: float = T0 + 1,
               **attrs: Any) -> None:
    """One ended ``execute_tool`` span per call, a second apart."""
    for i, (tool, arguments, result) in enumerate(calls):
        args = arguments if arguments is None or isinstance(arguments, str) else json.dumps(
            arguments)
        otel.span(f"execute_tool {tool}", tool_attrs(tool, args, result, **attrs),
                  parent=parent, start=start + i, end=start + i + 0.5)


def failing_call(otel: SpanMaker, parent: Span, message: str, start: float,
                 exc_type: type[Exception] = FileNotFoundError, tool: str = "read") -> None:
    otel.span(f"execute_tool {tool}", tool_attrs(tool, json.dumps({"at": start})),
              parent=parent, start=start, exception=exc_type(message))


def signals_after(otel: SpanMaker, now: float = T0 + 100) -> dict[str, Any]:
    tracker, _ = run_spans(otel.take(), now=now)
    return only_run(tracker).signals(now)


# ---------------------------------------------------------------------------------------------
# errors


def test_repeated_error_masks_paths_ids_and_numbers(otel: SpanMaker) -> None:
    root = otel.open("invoke_agent a")
    failing_call(otel, root, "file /tmp/a1 not found", T0 + 1)
    failing_call(otel, root, "file /tmp/b2 not found", T0 + 2)
    failing_call(otel, root, "file /var/data/c3.txt not found", T0 + 3)
    failing_call(otel, root, "request 7f3e9a2b-1c4d-4e5f-8a9b-0c1d2e3f4a5b failed", T0 + 4,
                 exc_type=ConnectionError)
    signals = signals_after(otel)
    assert signals["errors"] == 4
    assert signals["repeated_error"] == 3
    assert signals["last_error"] == (
        "ConnectionError: request 7f3e9a2b-1c4d-4e5f-8a9b-0c1d2e3f4a5b failed")


def test_repeated_error_tells_types_and_messages_apart(otel: SpanMaker) -> None:
    root = otel.open("invoke_agent a")
    failing_call(otel, root, "file /tmp/a1 not found", T0 + 1)
    failing_call(otel, root, "file /tmp/a1 not found", T0 + 2, exc_type=PermissionError)
    failing_call(otel, root, "disk /tmp/a1 full", T0 + 3)
    failing_call(otel, root, "timeout after 30 s", T0 + 4, exc_type=TimeoutError)
    failing_call(otel, root, "timeout after 45 s", T0 + 5, exc_type=TimeoutError)
    signals = signals_after(otel)
    assert signals["errors"] == 5
    assert signals["repeated_error"] == 2  # only the two timeouts share a signature


def test_consecutive_errors_reset_by_a_working_tool_call(otel: SpanMaker) -> None:
    root = otel.open("invoke_agent a")
    tracker = RunTracker()
    for i in range(3):
        failing_call(otel, root, "boom", T0 + 2 * i)
        otel.span("chat m", chat_attrs(finish="tool_calls"), parent=root, start=T0 + 2 * i + 1)
    tracker.apply(records_of(otel.take()), T0 + 10)
    run = only_run(tracker)
    # the model call that reads each error is no recovery
    assert (run.consecutive_errors, run.errors) == (3, 3)
    tool_calls(otel, root, [("read", {"f": 1}, "ok")], start=T0 + 11)
    tracker.apply(records_of(otel.take()), T0 + 12)
    assert (run.consecutive_errors, run.errors) == (0, 3)
    assert run.last_error == "FileNotFoundError: boom"  # the last error stays known


def test_consecutive_llm_errors_reset_by_a_working_llm_call(otel: SpanMaker) -> None:
    root = otel.open("invoke_agent a")
    tracker = RunTracker()
    for i in range(2):
        otel.span("chat m", chat_attrs(**{"error.type": "429"}), parent=root,
                  start=T0 + i, error="rate limited")
    tracker.apply(records_of(otel.take()), T0 + 5)
    run = only_run(tracker)
    assert run.consecutive_errors == 2
    otel.span("chat m", chat_attrs(), parent=root, start=T0 + 3)
    tracker.apply(records_of(otel.take()), T0 + 6)
    assert run.consecutive_errors == 0


# ---------------------------------------------------------------------------------------------
# repeats and cycles


def test_repeated_tool_call_ignores_argument_key_order_and_spacing(otel: SpanMaker) -> None:
    root = otel.open("invoke_agent a")
    tool_calls(otel, root, [
        ("grep", '{"pattern": "deprecated", "path": "src"}', "3 hits"),
        ("grep", '{"path":"src","pattern":"deprecated"}', "3 hits"),
        ("grep", '{ "path" : "src" , "pattern" : "deprecated" }', "3 hits"),
        ("grep", '{"path": "src", "pattern": "obsolete"}', "0 hits"),
        ("find", '{"path": "src", "pattern": "deprecated"}', "3 hits"),
    ])
    signals = signals_after(otel)
    assert signals["tool_calls"] == 5
    assert signals["tools"] == {"grep": 4, "find": 1}
    assert signals["repeated_tool_call"] == 3
    # the identical calls returned the same thing, but with the same arguments: not a
    # "same result for other arguments" repeat
    assert signals["repeated_tool_result"] == 1


def test_repeated_tool_result_counts_different_arguments_with_one_result(otel: SpanMaker
                                                                         ) -> None:
    root = otel.open("invoke_agent a")
    tool_calls(otel, root, [
        ("search", {"q": "paris population"}, "no results"),
        ("search", {"q": "population of paris"}, "no results"),
        ("search", {"q": "paris inhabitants"}, "no results"),
        ("search", {"q": "paris"}, "Paris: 2.1M"),
        ("fetch", {"url": "x"}, "no results"),  # another tool's identical result
    ])
    signals = signals_after(otel)
    assert signals["repeated_tool_result"] == 3
    assert signals["repeated_tool_call"] == 1


@pytest.mark.parametrize(("sequence", "expected"), [
    ("ABABAB", 3),
    ("ABCABCABC", 3),
    ("ABCDABCD", 2),
    ("AAAA", 4),
    ("XABAB", 2),
    ("ABABC", 0),  # the tail broke the cycle
    ("ABCD", 0),
])
def test_cycle_repeats(otel: SpanMaker, sequence: str, expected: int) -> None:
    root = otel.open("invoke_agent a")
    tool_calls(otel, root, [(f"tool_{c}", {"x": c}, f"result {i}")
                            for i, c in enumerate(sequence)])
    assert signals_after(otel)["cycle_repeats"] == expected


def test_cycle_needs_identical_calls_not_just_the_same_tools(otel: SpanMaker) -> None:
    root = otel.open("invoke_agent a")
    tool_calls(otel, root, [(t, {"page": i}, "r") for i, t in enumerate("ABABAB")])
    assert signals_after(otel)["cycle_repeats"] == 0


# ---------------------------------------------------------------------------------------------
# time


def test_elapsed_and_idle_seconds_follow_the_injected_clock(otel: SpanMaker) -> None:
    root = otel.open("invoke_agent a", start=T0)
    tool_calls(otel, root, [("ls", {}, "a b")], start=T0 + 5)
    tracker = RunTracker()
    tracker.apply(records_of(otel.take()), now=T0 + 10)  # the batch arrives at T0+10
    run = only_run(tracker)
    signals = run.signals(T0 + 70)
    assert signals["elapsed_seconds"] == pytest.approx(65.0)  # since the first span started
    assert signals["idle_seconds"] == pytest.approx(60.0)  # since the batch arrived
    assert run.signals(T0 + 130)["idle_seconds"] == pytest.approx(120.0)


@pytest.mark.parametrize("skew", [-7200.0, -61.0, 61.0, 7200.0, 86400.0 * 365])
def test_time_counts_on_the_agents_clock_when_it_disagrees_with_the_sidecars(
        otel: SpanMaker, skew: float) -> None:
    """An agent whose clock is ``skew`` seconds behind the sidecar's (negative: ahead): its run
    is as old as its spans say, not ``skew`` older, and goes on ageing in the sidecar's time —
    a stuck run still reaches the total timeout, a fresh one is not over it at its first span.
    Its calls in flight (the client's own clock) age the same way."""
    agent = T0 - skew  # the agent's clock when the sidecar's reads T0
    root = otel.open("invoke_agent a", start=agent)
    tool_calls(otel, root, [("ls", {}, "a b")], start=agent + 5)
    tracker = RunTracker()
    tracker.apply(records_of(otel.take()), now=T0 + 6)  # 0.5 s after the tool call ended
    run = only_run(tracker)
    assert run.clock_skew() == pytest.approx(skew + 0.5)
    # since the first ended span (the tool call) started, half a second before it arrived
    assert run.signals(T0 + 6)["elapsed_seconds"] == pytest.approx(0.5)
    assert run.signals(T0 + 906)["elapsed_seconds"] == pytest.approx(900.5)
    tracker.heartbeat(run.key, messages=0, now=T0 + 10, in_flight=1,
                      oldest_call_started=agent + 8)  # a call started 2 s ago
    assert run.signals(T0 + 10)["in_flight_seconds"] == pytest.approx(1.5)
    root.end(end_time=int((agent + 20) * NS))
    tracker.apply(records_of(otel.take()), now=T0 + 20.5)
    assert run.ended and run.signals(T0 + 5000)["elapsed_seconds"] == pytest.approx(20.0)


def test_spans_that_waited_are_not_a_clock_that_disagrees(otel: SpanMaker) -> None:
    """Spans an exporter held back (its batch delay, retries: under a minute) are not skew: the
    run is as old as the sidecar's clock says."""
    root = otel.open("invoke_agent a", start=T0)
    tool_calls(otel, root, [("ls", {}, "a b")], start=T0 + 5)
    tracker = RunTracker()
    tracker.apply(records_of(otel.take()), now=T0 + 55)  # held back 49.5 s
    run = only_run(tracker)
    assert run.clock_skew() == 0.0
    assert run.signals(T0 + 55)["elapsed_seconds"] == pytest.approx(50.0)


def test_heartbeat_that_grows_the_conversation_resets_idle(otel: SpanMaker) -> None:
    root = otel.open("invoke_agent a", start=T0)
    otel.span("chat m", chat_attrs(**{"gen_ai.input.messages": json.dumps(
        [{"role": "user", "content": "hi"}])}), parent=root, start=T0 + 1)
    tracker = RunTracker()
    tracker.apply(records_of(otel.take()), now=T0 + 10)
    run = only_run(tracker)
    assert run.messages == 2

    tracker.heartbeat(run.key, messages=2, now=T0 + 50)  # alive, but no progress
    assert run.signals(T0 + 60)["idle_seconds"] == pytest.approx(50.0)
    tracker.heartbeat(run.key, messages=5, now=T0 + 70)  # the conversation grew
    assert run.signals(T0 + 70)["idle_seconds"] == pytest.approx(0.0)
    assert run.signals(T0 + 80)["idle_seconds"] == pytest.approx(10.0)
    assert run.signals(T0 + 80)["messages"] == 5
    tracker.heartbeat(run.key, messages=5, now=T0 + 90)
    assert run.signals(T0 + 95)["idle_seconds"] == pytest.approx(25.0)
    # a heartbeat keeps the run from being abandoned even without progress
    assert RunTracker(run_end_timeout=30).expire(T0 + 95) == []
    assert tracker.expire(T0 + 90 + tracker.run_end_timeout - 1) == []
    assert tracker.expire(T0 + 90 + tracker.run_end_timeout + 1) == [run]


# ---------------------------------------------------------------------------------------------
# budgets


def test_budget_from_span_attributes_and_remaining(otel: SpanMaker) -> None:
    root = otel.open("invoke_agent a", start=T0)
    otel.span("chat m", chat_attrs(300, 100, **{
        "watchdog.budget.max_tool_calls": 5, "watchdog.budget.max_iterations": 10,
        "watchdog.budget.max_tokens": 1000, "watchdog.budget.max_seconds": 120.0,
    }), parent=root, start=T0 + 1)
    tool_calls(otel, root, [("ls", {"d": i}, str(i)) for i in range(3)], start=T0 + 2)
    budget = signals_after(otel, now=T0 + 50)["budget"]
    assert budget == {
        "max_tool_calls": 5, "remaining_tool_calls": 2,
        "max_iterations": 10, "remaining_iterations": 9,
        "max_tokens": 1000, "remaining_tokens": 600,
        # the agent span has not arrived: time counts from the first span seen (T0+1)
        "max_seconds": 120, "remaining_seconds": pytest.approx(71.0),
    }


def test_budget_from_resource_and_defaults(otel: SpanMaker) -> None:
    maker = SpanMaker(resource={"watchdog.budget.max_tool_calls": 3})
    root = maker.open("invoke_agent a")
    tool_calls(maker, root, [("ls", {}, "")] * 5)
    tracker, _ = run_spans(maker.take())
    run = only_run(tracker)
    view = run.signals(T0 + 100, default_budget={"max_tool_calls": 50, "max_iterations": 7})
    assert view["budget"]["max_tool_calls"] == 3  # announced beats the rule pack's default
    assert view["budget"]["remaining_tool_calls"] == 0  # never negative
    assert view["budget"]["max_iterations"] == 7

    root = otel.open("invoke_agent b")
    tool_calls(otel, root, [("ls", {}, "")])
    assert signals_after(otel)["budget"] == {}  # absent when no budget is known


# ---------------------------------------------------------------------------------------------
# terminal states


def _ended(otel: SpanMaker, root: Span, end: float = T0 + 60) -> RunState:
    root.end(end_time=int(end * NS))
    tracker, result = run_spans(otel.take())
    run = only_run(tracker)
    assert result.ended == [run]
    assert run.ended and run.signals(T0 + 100)["ended"] is True
    return run


def test_completed_run(otel: SpanMaker) -> None:
    root = otel.open("invoke_agent a", {"gen_ai.operation.name": "invoke_agent"})
    tool_calls(otel, root, [("ls", {}, "x")])
    otel.span("chat m", chat_attrs(finish="stop"), parent=root, start=T0 + 5)
    run = _ended(otel, root)
    assert (run.terminal_state, run.terminal_reason) == (TerminalState.COMPLETED, None)
    assert run.has_final_answer is True
    assert run.signals(T0 + 100)["finish_reason"] == "stop"


def test_the_answer_is_the_last_model_call_to_end_whatever_the_arrival_order(
        otel: SpanMaker) -> None:
    """An export request groups its spans by instrumentation scope (Semantic Kernel's model
    calls and tool calls have different ones): a tool call may arrive after the model call
    that followed it and answered. Which came last is in their end times."""
    root = otel.open("invoke_agent a", {"gen_ai.operation.name": "invoke_agent"})
    otel.span("chat m", chat_attrs(finish="tool_calls"), parent=root, start=T0)
    otel.span("chat m", chat_attrs(finish="stop"), parent=root, start=T0 + 5)
    otel.span("chat m", chat_attrs(finish="tool_calls"), parent=root, start=T0 + 0.1,
              end=T0 + 0.2)  # an earlier request, arriving late: the answer stands
    tool_calls(otel, root, [("ls", {}, "x")])  # ran at T0 + 1, before the answer
    run = _ended(otel, root)
    assert run.terminal_state is TerminalState.COMPLETED and run.has_final_answer is True
    assert run.tool_calls == 1


@pytest.mark.parametrize("order", ["inner first", "outer first", "by scope", "one by one"])
def test_a_model_call_traced_twice_one_span_inside_the_other_counts_once(
        otel: SpanMaker, order: str) -> None:
    """A framework's model-call span around its client library's (DSPy's ``LM.__call__``
    around LiteLLM's ``completion``) is one call: one iteration, its usage once (from the span
    that reported it). An export request groups spans by scope: either may arrive first, and
    all of one scope's before the other's; or each span comes in a request of its own."""
    root = otel.open("invoke_agent a", {"gen_ai.operation.name": "invoke_agent"})
    for step, finish in enumerate(("tool_calls", "stop")):
        start = T0 + 10 * step
        outer = otel.open("LM.__call__", chat_attrs(0, 0), parent=root, start=start)
        otel.span("completion", chat_attrs(100, 7, finish=finish), parent=outer,
                  start=start + 0.1, end=start + 0.9)
        outer.end(end_time=int((start + 1) * NS))
        if step == 0:
            tool_calls(otel, root, [("ls", {}, "x")], start=start + 2)
    root.end(end_time=int((T0 + 60) * NS))
    spans = otel.take()
    if order == "outer first":  # each outer span before the inner one it wraps
        for index, span in enumerate(spans):
            if span.name == "LM.__call__":
                spans.insert(index - 1, spans.pop(index))
    elif order == "by scope":
        spans.sort(key=lambda span: span.name != "LM.__call__")
    if order == "one by one":
        tracker = RunTracker()
        for span in spans:
            tracker.apply(records_of([span]), T0 + 100)
    else:
        tracker, _ = run_spans(spans)
    run = only_run(tracker)
    assert (run.iterations, run.input_tokens, run.output_tokens) == (2, 200, 14)
    assert run.terminal_state is TerminalState.COMPLETED and run.tool_calls == 1


@pytest.mark.parametrize("order", ["as ended", "agent span first", "one by one, reversed"])
def test_model_calls_an_agent_span_reports_are_the_calls_traced_whatever_comes_first(
        otel: SpanMaker, order: str) -> None:
    """An agent span that reports how many model calls it made (``gen_ai.agent.turn.count``;
    crewai's) counts them when no model-call span does; the model-call spans that come after
    it (a later export request, a collector's re-ordering) are those calls, not more: the run
    has as many iterations, priced, as the spans say."""
    root = otel.open("invoke_agent a", {"gen_ai.operation.name": "invoke_agent",
                                        "gen_ai.agent.turn.count": 2})
    for step, finish in enumerate(("tool_calls", "stop")):
        otel.span("chat m", chat_attrs(100, 7, finish=finish), parent=root,
                  start=T0 + 10 * step, end=T0 + 10 * step + 1)
    root.end(end_time=int((T0 + 60) * NS))
    spans = otel.take()
    if order == "as ended":
        tracker, _ = run_spans(spans)
    else:
        tracker = RunTracker()
        batches = [[spans[-1]], spans[:-1]] if order == "agent span first" \
            else [[span] for span in reversed(spans)]
        for batch in batches:
            tracker.apply(records_of(batch), T0 + 100)
    run = only_run(tracker)
    assert (run.iterations, run.input_tokens, run.output_tokens) == (2, 200, 14)
    assert run.unpriced_calls == 2  # (the test model has no price: each counted once)
    assert run.terminal_state is TerminalState.COMPLETED


def test_no_response_run(otel: SpanMaker) -> None:
    root = otel.open("invoke_agent a", {"gen_ai.operation.name": "invoke_agent"})
    tool_calls(otel, root, [("ls", {}, "x")])
    otel.span("chat m", chat_attrs(finish="length"), parent=root, start=T0 + 5)
    run = _ended(otel, root)
    assert run.terminal_state is TerminalState.NO_RESPONSE
    assert run.has_final_answer is False


def test_error_run(otel: SpanMaker) -> None:
    root = otel.open("invoke_agent a", {"gen_ai.operation.name": "invoke_agent"})
    otel.span("chat m", chat_attrs(), parent=root)
    root.record_exception(ValueError("bad input 7"))
    root.set_status(Status(StatusCode.ERROR, "ValueError: bad input 7"))
    run = _ended(otel, root)
    assert (run.terminal_state, run.terminal_reason) == (TerminalState.ERROR, "ValueError")
    assert run.errors == 0  # the agent span's own failure is the outcome, not a failed step
    assert run.last_error == "ValueError: bad input 7"


@pytest.mark.parametrize("exc_name", ["pydantic_ai.exceptions.UsageLimitExceeded",
                                      "agents.exceptions.MaxTurnsExceeded",
                                      "GraphRecursionError"])
def test_framework_limit_is_tool_limit_reached(otel: SpanMaker, exc_name: str) -> None:
    root = otel.open("invoke_agent a", {"gen_ai.operation.name": "invoke_agent",
                                        "error.type": exc_name})
    tool_calls(otel, root, [("ls", {"i": i}, "x") for i in range(3)])
    root.set_status(Status(StatusCode.ERROR, "limit"))
    run = _ended(otel, root)
    assert run.terminal_state is TerminalState.TOOL_LIMIT_REACHED
    assert run.terminal_reason == exc_name.rsplit(".", 1)[-1]
    assert run.has_final_answer is False


@pytest.mark.parametrize("answered", [True, False])
def test_run_at_its_budget_is_tool_limit_reached_answer_or_not(otel: SpanMaker,
                                                               answered: bool) -> None:
    root = otel.open("invoke_agent a", {"gen_ai.operation.name": "invoke_agent",
                                        "watchdog.budget.max_tool_calls": 3})
    tool_calls(otel, root, [("ls", {"i": i}, "x") for i in range(3)])
    otel.span("chat m", chat_attrs(finish="stop" if answered else "length"), parent=root,
              start=T0 + 10)
    run = _ended(otel, root)
    assert run.terminal_state is TerminalState.TOOL_LIMIT_REACHED  # never "completed"
    assert run.terminal_reason == "budget"
    assert run.has_final_answer is answered


def test_run_under_its_budget_completes(otel: SpanMaker) -> None:
    root = otel.open("invoke_agent a", {"gen_ai.operation.name": "invoke_agent",
                                        "watchdog.budget.max_tool_calls": 4})
    tool_calls(otel, root, [("ls", {"i": i}, "x") for i in range(3)])
    otel.span("chat m", chat_attrs(finish="stop"), parent=root, start=T0 + 10)
    assert _ended(otel, root).terminal_state is TerminalState.COMPLETED


def test_forced_state_wins_when_the_run_ends(otel: SpanMaker) -> None:
    root = otel.open("invoke_agent a", {"gen_ai.operation.name": "invoke_agent"})
    tool_calls(otel, root, [("ls", {}, "x")] * 3)
    tracker, _ = run_spans(otel.take())
    run = only_run(tracker)
    run.force(TerminalState.LOOP_DETECTED, "repeated-calls")
    run.force(TerminalState.ABORTED, "other-rule")  # the first decision stands
    otel.span("chat m", chat_attrs(finish="stop"), parent=root, start=T0 + 10)
    root.end(end_time=int((T0 + 20) * NS))
    tracker.apply(records_of(otel.take()), T0 + 30)
    assert (run.terminal_state, run.terminal_reason) == (TerminalState.LOOP_DETECTED,
                                                         "repeated-calls")
    assert run.has_final_answer is True


def test_silent_run_is_abandoned_by_expire(otel: SpanMaker) -> None:
    root = otel.open("invoke_agent a")
    tool_calls(otel, root, [("ls", {}, "x")])
    tracker = RunTracker(run_end_timeout=900)
    tracker.apply(records_of(otel.take()), now=T0 + 10)
    run = only_run(tracker)
    assert tracker.expire(T0 + 10 + 899) == []
    assert not run.ended and len(tracker) == 1
    assert tracker.expire(T0 + 10 + 901) == [run]
    assert (run.terminal_state, run.terminal_reason) == (TerminalState.ABANDONED,
                                                         "run_end_timeout")
    assert len(tracker) == 0
    assert tracker.get(run.key) is run
    assert run.signals(T0 + 2000)["idle_seconds"] == 0.0  # an ended run is not idle


def test_oldest_idle_run_is_evicted_over_max_runs(otel: SpanMaker) -> None:
    tracker = RunTracker(max_runs=2)

    def step(key: str, now: float) -> Any:
        root = otel.open(f"invoke_agent {key}", {"watchdog.run.id": key})
        tool_calls(otel, root, [("ls", {}, "x")], **{"watchdog.run.id": key})
        return tracker.apply(records_of(otel.take()), now)

    assert step("r0", T0).evicted == []
    assert step("r1", T0 + 1).evicted == []
    assert step("r0", T0 + 2).evicted == []  # r0 works again: r1 is now the oldest idle run
    result = step("r2", T0 + 3)
    assert [r.key for r in result.evicted] == ["r1"]
    assert {r.key for r in tracker.active()} == {"r0", "r2"}
    evicted = tracker.get("r1")
    assert evicted is not None and evicted.ended
    assert (evicted.terminal_state, evicted.terminal_reason) == (TerminalState.ABANDONED,
                                                                 "evicted")
    assert result.touched["r1"] is evicted  # so the shell persists it


def test_eviction_keeps_a_forced_state_and_its_reason(otel: SpanMaker) -> None:
    tracker = RunTracker(max_runs=1)
    root = otel.open("invoke_agent a", {"watchdog.run.id": "a"})
    tool_calls(otel, root, [("ls", {}, "x")], **{"watchdog.run.id": "a"})
    tracker.apply(records_of(otel.take()), T0)
    tracker.get("a").force(TerminalState.IDLE_TIMEOUT, "idle-timeout")  # type: ignore[union-attr]
    root = otel.open("invoke_agent b", {"watchdog.run.id": "b"})
    tool_calls(otel, root, [("ls", {}, "x")], **{"watchdog.run.id": "b"})
    result = tracker.apply(records_of(otel.take()), T0 + 1)
    (victim,) = result.evicted
    assert (victim.terminal_state, victim.terminal_reason) == (TerminalState.IDLE_TIMEOUT,
                                                               "idle-timeout")


def test_late_span_after_run_end(otel: SpanMaker) -> None:
    root = otel.open("invoke_agent a")
    tool_calls(otel, root, [("ls", {}, "x")])
    otel.span("chat m", chat_attrs(finish="stop"), parent=root, start=T0 + 5)
    root.end(end_time=int((T0 + 10) * NS))
    tracker, _ = run_spans(otel.take(), now=T0 + 20)
    run = only_run(tracker)
    assert run.terminal_state is TerminalState.COMPLETED

    # a span of the same run from a slower exporter, after the agent span
    otel.span("execute_tool cat", tool_attrs("cat", "{}", "y"), parent=root, start=T0 + 6)
    result = tracker.apply(records_of(otel.take()), T0 + 30)
    assert result.late_spans == 1
    assert result.started == [] and result.ended == []
    assert len(tracker) == 0  # not brought back to life
    assert run.terminal_state is TerminalState.COMPLETED
    assert run.tool_calls == 2  # the work it reports still counts


# ---------------------------------------------------------------------------------------------
# persistence and bounds


def test_to_dict_from_dict_round_trip_keeps_signals_and_continues_identically(
        otel: SpanMaker) -> None:
    root = otel.open("invoke_agent a", {"gen_ai.agent.name": "planner",
                                        "watchdog.budget.max_tool_calls": 20})
    otel.span("chat m", chat_attrs(10, 2, **{"gen_ai.conversation.id": "s1"}), parent=root)
    tool_calls(otel, root, [("A", {"i": 1}, "r"), ("B", {"i": 2}, "r"), ("A", {"i": 1}, "r")])
    failing_call(otel, root, "no /tmp/x1", T0 + 9)
    tracker, _ = run_spans(otel.take(), now=T0 + 10)
    original = only_run(tracker)
    original.force(TerminalState.LOOP_DETECTED, "cycle")

    copy = RunState.from_dict(json.loads(json.dumps(original.to_dict())))
    assert copy.signals(T0 + 40) == original.signals(T0 + 40)

    # both continue the same way: cycle and repeat state survived the trip
    tool_calls(otel, root, [("B", {"i": 2}, "r"), ("A", {"i": 1}, "r")], start=T0 + 20)
    failing_call(otel, root, "no /tmp/y2", T0 + 25)
    root.end(end_time=int((T0 + 30) * NS))
    more = records_of(otel.take())
    for run in (original, copy):
        for record in more:
            run.apply(record, T0 + 31)
        run.end(T0 + 31)
    assert copy.signals(T0 + 40) == original.signals(T0 + 40)
    assert original.signals(T0 + 40)["repeated_error"] == 2
    assert original.terminal_state is copy.terminal_state is TerminalState.LOOP_DETECTED
    assert copy.terminal_reason == "cycle"


def test_a_runs_copy_shares_nothing_it_updates_in_place(otel: SpanMaker) -> None:
    """The run's rings of recent calls, failures, asks and its clock lags are updated in place:
    a copy (what a request would make of the run) is the run's as it was, whatever folds into
    the run or the copy after, and each goes on as the run stored then restored does."""
    root = otel.open("invoke_agent a", {"gen_ai.agent.name": "planner"})
    otel.span("chat m", chat_attrs(10, 2, finish="tool_calls"), parent=root, start=T0,
              end=T0 + 0.5)
    tool_calls(otel, root, [("A", {"i": 1}, "r"), ("B", {"i": 2}, "r")])
    failing_call(otel, root, "no /tmp/x1", T0 + 9)
    tracker, _ = run_spans(otel.take(), now=T0 + 10)
    original = only_run(tracker)
    as_stored = json.dumps(original.to_dict(), sort_keys=True)
    clone = original.copy()

    otel.span("chat m", chat_attrs(20, 4, finish="tool_calls"), parent=root, start=T0 + 19,
              end=T0 + 19.5)
    tool_calls(otel, root, [("B", {"i": 2}, "r"), ("A", {"i": 1}, "r")], start=T0 + 20)
    failing_call(otel, root, "no /tmp/y2", T0 + 25)
    more = records_of(otel.take())
    for record in more:
        clone.apply(record, T0 + 5000)  # (a lag past the first ones: the clock lags move too)
    copied = json.dumps(clone.to_dict(), sort_keys=True)
    assert copied != as_stored
    assert json.dumps(original.to_dict(), sort_keys=True) == as_stored
    restored = RunState.from_dict(json.loads(as_stored))
    for run in (original, restored):  # the same spans into the run itself, and its snapshot
        for record in more:
            run.apply(record, T0 + 5000)
        assert json.dumps(run.to_dict(), sort_keys=True) == copied
    assert json.dumps(clone.to_dict(), sort_keys=True) == copied


@pytest.mark.parametrize("fields", [4, 5, 6])
def test_an_older_builds_last_model_call_still_pairs_its_twin(otel: SpanMaker,
                                                               fields: int) -> None:
    """Builds before this one stored only the last model call (4, 5, then 6 fields): restored,
    it is the run's one recent call, and the twin of that call (the span around it, from a
    second instrumentation) still counts once."""
    root = otel.open("invoke_agent a")
    outer = otel.open("chat wrapper", chat_attrs(0, 0), parent=root)
    otel.span("chat client", chat_attrs(10, 2, finish="stop"), parent=outer)
    tracker, _ = run_spans(otel.take(), now=T0 + 10)
    data = json.loads(json.dumps(only_run(tracker).to_dict()))
    (call,) = data.pop("_models")
    data["_last_model"] = call[:fields]
    restored = RunState.from_dict(data)
    outer.end(end_time=int((T0 + 9) * NS))
    for record in records_of(otel.take()):
        restored.apply(record, T0 + 11)
    assert (restored.iterations, restored.input_tokens, restored.output_tokens) == (1, 10, 2)


def test_distinct_tools_are_bounded(otel: SpanMaker) -> None:
    root = otel.open("invoke_agent a")
    extra = 5
    tool_calls(otel, root, [(f"tool_{i}", {}, "x") for i in range(MAX_DISTINCT_TOOLS + extra)])
    tool_calls(otel, root, [("tool_0", {}, "x")], start=T0 + 500)  # a known tool still counts
    signals = signals_after(otel, now=T0 + 600)
    assert signals["tool_calls"] == MAX_DISTINCT_TOOLS + extra + 1
    assert len(signals["tools"]) == MAX_DISTINCT_TOOLS + 1
    assert signals["tools"][OTHER_TOOL] == extra
    assert signals["tools"]["tool_0"] == 2


def test_an_older_builds_answered_run_is_not_taken_for_an_endpoint_run_without_spans(
        otel: SpanMaker) -> None:
    """A run stored by a build before ``agent_spans`` (whether a span of the agent's came) is
    not taken, restored, for a traced model-endpoint run whose agent sends no spans: its
    answer does not end it ``TRACED_ANSWER_WAIT`` later (it waits for its root, as before)."""
    root = otel.open("invoke_agent a")
    otel.span("chat m", chat_attrs(10, 2, finish="stop"), parent=root)  # (answered; root open)
    tracker, _ = run_spans(otel.take(), now=T0 + 10)
    run = only_run(tracker)
    assert run.has_final_answer and not run.ended
    data = json.loads(json.dumps(run.to_dict()))
    del data["agent_spans"]  # (an older build's)
    restored = RunTracker()
    restored.restore([RunState.from_dict(data)])
    assert not restored.expire(T0 + 10 + TRACED_ANSWER_WAIT + 1)
    assert [r.key for r in restored.active()] == [run.key]



def failed_below_an_open_root(otel: SpanMaker) -> tuple[RunTracker, Span]:
    """A run whose agent span failed below a workflow root still open (an instrumentation
    that ends the trace's root only when the run returns: OpenInference's for the OpenAI Agents
    SDK in JavaScript), its spans applied at ``T0 + 10``; the tracker and that root."""
    root = otel.open("Agent workflow")
    agent = otel.open("invoke_agent a", parent=root, start=T0 + 1)
    otel.span("chat m", chat_attrs(10, 2, finish="tool_calls"), parent=agent, start=T0 + 2)
    tool_calls(otel, agent, [("lookup", {"key": "k0"}, "value of k0")], start=T0 + 3)
    agent.set_status(Status(StatusCode.ERROR, "Max turns (1) exceeded"))
    agent.end(end_time=int((T0 + 5) * NS))
    tracker = RunTracker(loose_run_gap=60.0)
    run_spans(otel.take(), now=T0 + 10, tracker=tracker)
    return tracker, root


def test_a_run_whose_agent_failed_ends_a_gap_after_its_last_span_if_its_root_never_comes(
        otel: SpanMaker) -> None:
    """The run's own agent span failed (its outcome is known) and the trace's root that closes
    the run never comes: it ends ``loose_run_gap`` after its last span as it failed, not
    ``abandoned`` after ``run_end_timeout``; so does one restored (a restart in between)."""
    tracker, _ = failed_below_an_open_root(otel)
    restored = RunTracker(loose_run_gap=60.0)
    restored.restore([RunState.from_dict(json.loads(json.dumps(only_run(tracker).to_dict())))])
    for each in (tracker, restored):
        assert not each.expire(T0 + 10 + 59)
        ended = each.expire(T0 + 10 + 61)
        run = only_run(each)
        assert [r.key for r in ended] == [run.key] and run.ended
        assert (run.terminal_state, run.iterations, run.tool_calls) == (
            TerminalState.TOOL_LIMIT_REACHED, 1, 1)


def test_a_run_whose_agent_failed_waits_for_its_root_while_its_spans_come(
        otel: SpanMaker) -> None:
    """A span of the trace within the gap (the framework went on after the agent's error)
    puts the run's end off; its root, come then, ends it (once)."""
    tracker, root = failed_below_an_open_root(otel)
    otel.span("chat m", chat_attrs(10, 2, finish="stop"), parent=root, start=T0 + 40)
    run_spans(otel.take(), now=T0 + 50, tracker=tracker)
    assert not tracker.expire(T0 + 10 + 61)
    root.end(end_time=int((T0 + 100) * NS))
    run_spans(otel.take(), now=T0 + 100, tracker=tracker)
    run = only_run(tracker)
    assert run.ended and run.terminal_state is TerminalState.TOOL_LIMIT_REACHED
    assert not tracker.expire(T0 + 1000)


def _containers(value: object, into: dict[int, object]) -> dict[int, object]:
    """Every mutable container reachable from ``value`` through containers (a mapping proxy's
    dict and a named tuple's fields too), by id (kept alive in ``into``)."""
    if isinstance(value, (dict, list, set, MappingProxyType, tuple)):
        if not isinstance(value, tuple) and id(value) not in into:
            into[id(value)] = value
        inner = gc.get_referents(value) if isinstance(value, MappingProxyType) else (
            value.values() if isinstance(value, dict) else value)
        for item in list(inner):
            _containers(item, into)
    return into


def test_what_a_run_hands_out_shares_nothing_it_updates_later(otel: SpanMaker) -> None:
    """A view (what the core hands out: decisions, steps, the API) and a snapshot to keep
    (``to_dict``) are the run as it was: more spans folded into the run move neither, and
    neither holds a list or dict of the run's own (its rings, counters, tools, budget)."""
    root = otel.open("invoke_agent a", {"gen_ai.agent.name": "planner",
                                        "watchdog.budget.max_tool_calls": 20})
    otel.span("chat m", chat_attrs(10, 2, finish="tool_calls"), parent=root, start=T0,
              end=T0 + 0.5)
    tool_calls(otel, root, [("A", {"i": 1}, "r"), ("B", {"i": 2}, "r"), ("A", {"i": 1}, "r")])
    failing_call(otel, root, "no /tmp/x1", T0 + 9)
    tracker, _ = run_spans(otel.take(), now=T0 + 10)
    run = only_run(tracker)
    view, kept = run.view(T0 + 10), run.to_dict()
    view_text, kept_text = repr(view), json.dumps(kept, sort_keys=True)
    owned = {key for name in RunFields.__slots__
             for key in _containers(getattr(run, name), {})}
    assert not owned & _containers(tuple(view), {}).keys()
    assert [name for name, value in kept.items() if owned & _containers(value, {}).keys()] == []

    otel.span("chat m", chat_attrs(20, 4, finish="tool_calls"), parent=root, start=T0 + 19,
              end=T0 + 19.5)
    tool_calls(otel, root, [("C", {"i": 3}, "r"), ("A", {"i": 1}, "r")], start=T0 + 20)
    failing_call(otel, root, "no /tmp/y2", T0 + 25)
    for record in records_of(otel.take()):
        run.apply(record, T0 + 5000)
    assert json.dumps(run.to_dict(), sort_keys=True) != kept_text  # (the run did move)
    assert repr(view) == view_text
    assert json.dumps(kept, sort_keys=True) == kept_text


@pytest.mark.parametrize("budget", [None, {"max_tool_calls": 3.0, "max_cost_usd": 0.5}])
def test_what_the_endpoint_reads_of_a_run_is_what_its_view_holds(
        otel: SpanMaker, budget: dict[str, float] | None) -> None:
    """``RunState.opened`` (what the model endpoint reads of its run at a request) holds the
    values a view taken at the same moment holds, a budget's remainders too, its own under the
    rule pack's."""
    root = otel.open("invoke_agent a", {"gen_ai.agent.name": "planner"})
    otel.span("chat m", chat_attrs(10, 2, finish="tool_calls"), parent=root, start=T0,
              end=T0 + 0.5)
    tool_calls(otel, root, [("A", {"i": 1}, "r"), ("B", {"i": 2}, "r")])
    tracker, _ = run_spans(otel.take(), now=T0 + 10)
    run = only_run(tracker)
    run.budget.update({"max_iterations": 9.0})
    for at in (T0 + 10, T0 + 70):
        view, opened = run.view(at, budget), run.opened(at, budget)
        assert (opened.key, opened.agent, opened.framed, opened.terminal_state, opened.ended,
                opened.iterations, opened.tool_calls, opened.cost_usd, opened.total_tokens,
                dict(opened.budget)) == (
            view.key, view.agent, view.framed, view.terminal_state, view.ended,
            view.iterations, view.tool_calls, view.cost_usd, view.total_tokens,
            dict(view.budget))
        assert opened.tool_calls == 2 and opened.budget["remaining_tool_calls" if budget
                                                        else "remaining_iterations"] >= 1
        assert isinstance(opened.budget, MappingProxyType)


def test_a_run_whose_agent_sends_nothing_after_an_error_ends_error_a_gap_later() -> None:
    """A run the model endpoint saw answered with an error: with no request after it (its
    agent gave up) it ends ``error``, the error's code its reason, ``loose_run_gap`` after the
    error and after its last sign of life; a request after the error (a retry) keeps it going."""
    tracker = RunTracker(loose_run_gap=60.0)
    for key in ("model:gave-up", "model:retried"):
        tracker.heartbeat(key, 0, T0, register=True)
        tracker.asked_failed(key, "upstream_unreachable", T0 + 1)
    tracker.asked("model:retried")
    tracker.heartbeat("model:gave-up", 0, T0 + 5)  # (its call settled after the error)
    assert not tracker.expire(T0 + 64)
    ended = tracker.expire(T0 + 66)
    assert [run.key for run in ended] == ["model:gave-up"]
    run = ended[0]
    assert (run.terminal_state, run.terminal_reason, run.has_final_answer) == (
        TerminalState.ERROR, "upstream_unreachable", False)
    retried = tracker.get("model:retried")
    assert retried is not None and not retried.ended
    assert not tracker.expire(T0 + 500)
