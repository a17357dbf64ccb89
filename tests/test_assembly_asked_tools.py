"""Tool calls recognised by what the model asked for (issue 28, mechanism 2): a span after a
model call, named after a tool that call asked for, is that tool's execution though it carries
no GenAI attribute (a hand-written loop's own span per tool call, with only generic
``input``/``output`` attributes and the exception when the tool raises). Read on real
recordings (``tests/frameworks/recordings``), over the real OTLP/HTTP receiver and in the
tracker."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan

from tests.frameworks.harness import RECORDINGS, replay, runs_seen
from tests.harness import RunningServer
from tests.recorded import recorded_records
from tests.spans import T0, SpanMaker, chat_attrs, records_of, tool_attrs
from tests.test_rebatching import as_exported, ended_runs, restarted
from watchdog.core.runs.book import (
    MAX_UNCLAIMED_PER_RUN,
    MAX_UNCLAIMED_RUNS,
    MAX_UNPLACED_PER_TRACE,
    MAX_UNPLACED_TRACES,
)
from watchdog.core.runs.tracker import RunTracker
from watchdog.core.spans.record import LLM, MAX_ASKED_TOOLS, TOOL

HAND_TRACED = "openai_olm_loop"  # OpenLLMetry's model calls, the loop's own tool spans
# ... and Logfire's, its tool spans named after their message template ("lookup {key}")
HAND_TRACED_SETUPS = (HAND_TRACED, "logfire_loop")


@pytest.mark.parametrize(("driver", "scenario"), [
    ("openai_v2_loop", "three_tools_stream"),  # gen_ai.output.messages: tool_call parts
    ("llamaindex_oi", "three_tools"),  # llm.output_messages.{i}.message.tool_calls.{j}.*
    (HAND_TRACED, "three_tools"),  # gen_ai.completion.{i}.tool_calls.{j}.*
])
def test_a_model_call_record_names_the_tool_calls_it_asked_for(driver: str,
                                                               scenario: str) -> None:
    asking = [record for record in recorded_records(driver, scenario)
              if record.kind is LLM and record.requested_tools]
    assert len(asking) == 3
    for record in asking:
        ((name, call_id),) = record.asked_tools
        assert name == "lookup"
        assert call_id.startswith("call_"), call_id


def test_asked_tool_calls_are_bounded() -> None:
    from watchdog.core.spans.model_calls import asked_tools

    output = json.dumps([{"role": "assistant", "parts": [
        {"type": "tool_call", "id": f"call_{i}", "name": f"tool{i}"} for i in range(100)]}])
    asked = asked_tools(output, None)
    assert len(asked) == MAX_ASKED_TOOLS
    assert asked[0] == ("tool0", "call_0")


@pytest.mark.parametrize("driver", HAND_TRACED_SETUPS)
def test_hand_traced_tool_spans_are_the_tool_calls_asked_for(sidecar: RunningServer,
                                                             driver: str) -> None:
    """Three tools then an answer: the loop's spans named after ``lookup`` are its three
    calls."""
    replay(sidecar, RECORDINGS / driver / "three_tools.jsonl")
    (run,) = runs_seen(sidecar, 1)
    signals = run["signals"]
    assert (signals["iterations"], signals["tool_calls"], signals["tools"], signals["errors"]) \
        == (4, 3, {"lookup": 3}, 0)
    assert run["terminal_state"] == "completed"


@pytest.mark.parametrize("driver", HAND_TRACED_SETUPS)
def test_a_hand_traced_tool_that_raises_is_a_failed_tool_call(sidecar: RunningServer,
                                                              driver: str) -> None:
    replay(sidecar, RECORDINGS / driver / "tool_error.jsonl")
    (run,) = runs_seen(sidecar, 1)
    signals = run["signals"]
    assert (signals["tool_calls"], signals["errors"]) == (1, 1)
    assert signals["last_error"].startswith("RuntimeError")


def _renamed(spans: list[dict[str, Any]]) -> None:
    for span in spans:
        if span["name"].startswith("lookup"):
            span["name"] = "search" + span["name"][len("lookup"):]


@pytest.mark.parametrize("driver", HAND_TRACED_SETUPS)
def test_a_span_named_after_no_asked_tool_is_no_tool_call(sidecar: RunningServer,
                                                          driver: str) -> None:
    """The same recording with the tool spans named after a tool no model asked for."""
    replay(sidecar, RECORDINGS / driver / "three_tools.jsonl", edit=_renamed)
    (run,) = runs_seen(sidecar, 1)
    assert (run["signals"]["tool_calls"], run["signals"]["tools"]) == (0, {})


@pytest.mark.parametrize("driver", HAND_TRACED_SETUPS)
@pytest.mark.parametrize("scenario", ["three_tools", "tool_error", "limit"])
def test_the_recording_reads_the_same_in_one_request(driver: str, scenario: str) -> None:
    """Batched (a request grouped by scope: the loop's tool spans before OpenLLMetry's model
    calls), the spans are applied in end order: the same calls."""
    from tests.recorded import request_of, scoped_spans

    apart = ended_runs(as_exported(driver, scenario))
    together = ended_runs([request_of(scoped_spans(driver, scenario))])
    assert [(run.tool_calls, run.errors, run.iterations) for run in together] \
        == [(run.tool_calls, run.errors, run.iterations) for run in apart]
    assert apart[0].errors == (scenario == "tool_error")
    assert apart[0].tool_calls == {"three_tools": 3, "tool_error": 1, "limit": 5}[scenario]


def _asking_chat(call_id: str = "call_1", tool: str = "lookup") -> dict[str, Any]:
    return chat_attrs(finish="tool_calls", **{"gen_ai.output.messages": json.dumps(
        [{"role": "assistant", "parts": [{"type": "tool_call", "id": call_id, "name": tool,
                                          "arguments": "{}"}]}])})


@pytest.mark.parametrize("split", [False, True], ids=["one request", "the tool first"])
def test_a_tool_span_and_its_generic_wrapper_are_one_call(split: bool) -> None:
    """An instrumented tool call (GenAI attributes) inside a span named after the same tool:
    the asked call is answered once, the wrapper is no second call — also when both come
    before the model call that asked for the tool (the wrapper kept for it, then known as the
    call counted inside it)."""
    maker = SpanMaker()
    with maker.agent(attrs={"gen_ai.agent.name": "a"}) as root:
        maker.span("chat", _asking_chat(), parent=root, start=T0, end=T0 + 1)
        asking = maker.take()
        wrapper = maker.open("lookup", {"input": "{}"}, parent=root, start=T0 + 1.1)
        maker.span("execute_tool lookup", tool_attrs("lookup", "{}"), parent=wrapper,
                   start=T0 + 1.2, end=T0 + 1.3)
        wrapper.end(int((T0 + 1.4) * 1e9))
        tool = maker.take()
        maker.span("chat", chat_attrs(finish="stop"), parent=root, start=T0 + 2, end=T0 + 3)
    rest = maker.take()
    tracker = RunTracker()
    if split:
        tracker.apply(records_of(tool), T0 + 5)
        tracker.apply(records_of(asking + rest), T0 + 6)
    else:
        tracker.apply(records_of(asking + tool + rest), T0 + 5)
    (run,) = tracker.ended()
    assert (run.tool_calls, run.iterations) == (1, 2)


def test_a_span_named_after_the_tool_before_the_model_asked_is_no_call() -> None:
    maker = SpanMaker()
    with maker.agent(attrs={"gen_ai.agent.name": "a"}) as root:
        maker.span("lookup", {"input": "{}"}, parent=root, start=T0, end=T0 + 0.5)
        maker.span("chat", _asking_chat(), parent=root, start=T0 + 1, end=T0 + 2)
    tracker = RunTracker()
    records = records_of(maker.take())
    tracker.apply(records, T0 + 5)
    (run,) = tracker.ended()
    assert run.tool_calls == 0
    assert [record.kind for record in records if record.name == "lookup"] != [TOOL]


@pytest.mark.parametrize("order", ["tool, rest, call", "rest, tool, call", "tool, call, rest",
                                   "tool, restart, rest, call", "rest, restart, tool, call"])
def test_a_tool_span_before_the_call_that_asked_for_it_is_that_call(order: str) -> None:
    """A hand-traced tool (a span named after the tool, no GenAI attributes) sent before the
    model call that asked for it, first in its trace or not: kept, and counted as that call
    when the call comes."""
    maker = SpanMaker()
    root = maker.open("research agent")
    maker.span("chat", _asking_chat(), parent=root, start=T0, end=T0 + 1)
    parts = {"call": maker.take()}
    maker.span("lookup {key}", {"input": "{}"}, parent=root, start=T0 + 1.1, end=T0 + 1.2)
    parts["tool"] = maker.take()
    maker.span("chat", chat_attrs(finish="stop", **{"gen_ai.output.messages": json.dumps(
        [{"role": "assistant", "parts": [{"type": "text", "content": "done"}]}])}),
        parent=root, start=T0 + 2, end=T0 + 3)
    root.end(int((T0 + 4) * 1e9))
    parts["rest"] = maker.take()
    tracker = RunTracker()
    for now, part in enumerate(order.split(", "), start=1):
        if part == "restart":  # a clean one: what the tracker kept comes back
            tracker = restarted(tracker, clean=True)
            continue
        tracker.apply(records_of(parts[part]), T0 + 10 + now)
    (run,) = tracker.ended()
    assert (run.iterations, run.tool_calls, run.tools, run.spans) == (2, 1, {"lookup": 1}, 4)


def test_a_tool_span_paired_with_an_earlier_call_goes_to_the_later_call_that_asked_for_it(
        ) -> None:
    """Two model calls of a hand-written loop each ask for ``lookup``, the second call and its
    tool sent first, then the first call, then the first call's tool with the second call: the
    second tool, taken by the first call when it came (the only one that had asked), is the
    second call's when that comes (it asked after the first and before the tool started), and
    the first tool answers the first call: two tool calls."""
    maker = SpanMaker()
    root = maker.open("research agent")
    maker.span("chat", _asking_chat("call_1"), parent=root, start=T0, end=T0 + 1)
    first_call = maker.take()
    maker.span("lookup {key}", {"input": "{}"}, parent=root, start=T0 + 1.1, end=T0 + 1.2)
    first_tool = maker.take()
    maker.span("chat", _asking_chat("call_2"), parent=root, start=T0 + 2, end=T0 + 3)
    second_call = maker.take()
    maker.span("lookup {key}", {"input": "{}"}, parent=root, start=T0 + 3.1, end=T0 + 3.2)
    maker.span("chat", chat_attrs(finish="stop", **{"gen_ai.output.messages": json.dumps(
        [{"role": "assistant", "parts": [{"type": "text", "content": "done"}]}])}),
        parent=root, start=T0 + 4, end=T0 + 5)
    root.end(int((T0 + 6) * 1e9))
    rest = maker.take()
    tracker = RunTracker()
    for now, part in enumerate([rest, first_call, first_tool + second_call], start=1):
        tracker.apply(records_of(part), T0 + 10 + now)
    (run,) = tracker.ended()
    assert (run.iterations, run.tool_calls, run.tools, run.spans) == (3, 2, {"lookup": 2}, 6)


def _hand_traced_loop(asking: int, plumbing: int = 0) -> tuple[
        dict[str, ReadableSpan], Callable[[str], list[ReadableSpan]]]:
    """A hand-written loop: model calls ``c1``… that each ask for ``lookup``, then ``lookup``
    spans ``t1``… (and ``plumbing`` spans of no kind after each, ``p1a``…), an answer and the
    loop's span ``root``; and what picks them by name in the order given."""
    maker = SpanMaker()
    root = maker.open("research agent")
    for step in range(1, asking + 1):
        start = T0 + 2 * step
        maker.span("chat", _asking_chat(f"call_{step}"), parent=root, start=start,
                   end=start + 1)
        maker.span("lookup {key}", {"input": "{}"}, parent=root, start=start + 1.1,
                   end=start + 1.2)
        for index in range(plumbing):
            maker.span(f"raw request {index}", {}, parent=root, start=start + 1.3,
                       end=start + 1.4 + index / 10)
    maker.span("chat", chat_attrs(finish="stop", **{"gen_ai.output.messages": json.dumps(
        [{"role": "assistant", "parts": [{"type": "text", "content": "done"}]}])}),
        parent=root, start=T0 + 2 * asking + 2, end=T0 + 2 * asking + 3)
    root.end(int((T0 + 2 * asking + 4) * 1e9))
    spans = maker.take()
    names: dict[str, ReadableSpan] = {}
    counts = {"c": 0, "t": 0}
    for span in spans:
        if span.name.startswith("raw request"):
            names[f"p{counts['t']}{'abc'[int(span.name[-1])]}"] = span
        elif span.name != "research agent":
            letter = "c" if span.name == "chat" else "t"
            counts[letter] += 1
            names[f"{letter}{counts[letter]}"] = span
        else:
            names["root"] = span
    return names, lambda order: [names[name] for name in order.split()]


def test_spans_that_come_before_their_trace_has_a_run_are_all_placed_in_their_request(
        ) -> None:
    """The last tools of a hand-written loop and its span (as many as a trace keeps before it
    has a run), then the first tool and the later model calls, then the first model call:
    the first tool, come before the model call that opened the trace's run in its request,
    takes no kept span's place."""
    _, pick = _hand_traced_loop(MAX_UNPLACED_PER_TRACE)
    tracker = RunTracker()
    last_tools = " ".join(f"t{step}" for step in range(2, MAX_UNPLACED_PER_TRACE + 1))
    rest = " ".join(f"c{step}" for step in range(2, MAX_UNPLACED_PER_TRACE + 2))
    for now, order in enumerate([f"{last_tools} root", f"t1 {rest}", "c1"], start=1):
        tracker.apply(records_of(pick(order)), T0 + 100 + now)
    (run,) = tracker.ended()
    assert (run.iterations, run.tool_calls) \
        == (MAX_UNPLACED_PER_TRACE + 1, MAX_UNPLACED_PER_TRACE)


def test_spans_kept_for_the_model_call_that_asks_keep_those_named_after_its_tools_first(
        ) -> None:
    """A loop whose steps each leave two spans of no kind beside the tool's (a library's raw
    request): its later steps first, then the tools and plumbing of the first two, then the
    model calls that asked for those tools. The run keeps the spans named after a tool it
    called over the plumbing, and counts both calls."""
    _, pick = _hand_traced_loop(3, plumbing=2)
    tracker = RunTracker()
    for now, order in enumerate(["c3 t3 p3a p3b c4 root", "t1 p1a p1b t2 p2a p2b", "c1 c2"],
                                start=1):
        tracker.apply(records_of(pick(order)), T0 + 100 + now)
    (run,) = tracker.ended()
    assert (run.iterations, run.tool_calls) == (4, 3)


def test_spans_kept_for_a_later_request_are_bounded() -> None:
    """Spans of no kind first in a trace with no run (plumbing alone here), and spans of no
    kind no model call asked for yet, are kept for a later request: the last few of each
    trace or run, of the traces and runs that kept one most recently."""
    maker = SpanMaker()
    tracker = RunTracker()
    for index in range(MAX_UNPLACED_TRACES + 50):
        request = maker.open("GET /things")  # (its end never sent)
        for step in range(MAX_UNPLACED_PER_TRACE + 2):
            maker.span(f"SELECT {step}", {"db.system": "sqlite"}, parent=request,
                       start=T0 + index)
        tracker.apply(records_of(maker.take()), T0 + index)
    assert len(tracker._unplaced) == MAX_UNPLACED_TRACES
    assert {len(held) for held in tracker._unplaced.values()} == {MAX_UNPLACED_PER_TRACE}
    assert len(tracker) == 0  # no run of them
    for index in range(MAX_UNCLAIMED_RUNS + 50):
        root = maker.open("invoke_agent a", {"watchdog.run.id": f"run-{index}"})
        for step in range(MAX_UNCLAIMED_PER_RUN + 2):
            maker.span(f"step {step}", {"watchdog.run.id": f"run-{index}"}, parent=root,
                       start=T0 + index)
        tracker.apply(records_of(maker.take()), T0 + index)
    assert len(tracker._unclaimed) == MAX_UNCLAIMED_RUNS
    assert {len(held) for held in tracker._unclaimed.values()} == {MAX_UNCLAIMED_PER_RUN}


def test_a_hand_traced_tool_in_a_trace_of_its_own_joins_the_loose_run() -> None:
    """A hand-written loop with no span around it: each model call a trace of its own (a
    loose call), and the loop's span of the tool the first one asked for a trace of its own
    too. The tool span is the run's tool call, not plumbing left out."""
    maker = SpanMaker()
    maker.span("chat", _asking_chat(), start=T0, end=T0 + 1)
    maker.span("lookup", {"input": "{}", "output": "v"}, start=T0 + 1.1, end=T0 + 1.2)
    maker.span("chat", chat_attrs(finish="stop"), start=T0 + 2, end=T0 + 3)
    tracker = RunTracker()
    for now, span in enumerate(maker.take(), start=1):
        tracker.apply(records_of([span]), T0 + now)
    (run,) = tracker.ended()
    assert (run.iterations, run.tool_calls, run.tools, run.has_final_answer) \
        == (2, 1, {"lookup": 1}, True)


def test_a_plain_span_in_a_trace_of_its_own_no_model_asked_for_is_left_out() -> None:
    maker = SpanMaker()
    maker.span("chat", _asking_chat(), start=T0, end=T0 + 1)
    maker.span("GET /health", {}, start=T0 + 1.1, end=T0 + 1.2)
    tracker = RunTracker()
    results = [tracker.apply(records_of([span]), T0 + now)
               for now, span in enumerate(maker.take(), start=1)]
    assert results[1].ignored_spans == 1
    (run,) = tracker.active()
    assert run.tool_calls == 0


@pytest.mark.parametrize("per_span", [False, True])
def test_a_span_named_after_the_tool_inside_its_tool_call_is_one_call(per_span: bool) -> None:
    """The tool's own code traces itself (a span named after the tool) inside the framework's
    tool-call span: the inner span ends first and is taken as the call; the call around it is
    the same execution, counted once."""
    maker = SpanMaker()
    with maker.agent(attrs={"gen_ai.agent.name": "a"}) as root:
        maker.span("chat", _asking_chat(), parent=root, start=T0, end=T0 + 1)
        call = maker.open("execute_tool lookup", tool_attrs("lookup", "{}"), parent=root,
                          start=T0 + 1.1)
        maker.span("lookup", {"input": "{}"}, parent=call, start=T0 + 1.2, end=T0 + 1.3)
        call.end(int((T0 + 1.4) * 1e9))
        maker.span("chat", chat_attrs(finish="stop"), parent=root, start=T0 + 2, end=T0 + 3)
    records = records_of(maker.take())
    tracker = RunTracker()
    counted = 0
    for now, batch in enumerate([[r] for r in records] if per_span else [records], start=1):
        counted += sum(tracker.apply(batch, T0 + now).tool_calls.values())
    (run,) = tracker.ended()
    assert (run.tool_calls, run.tools, counted) == (1, {"lookup": 1}, 1)


def test_a_gemini_api_output_names_the_tool_calls_it_asked_for() -> None:
    """Gemini CLI's model calls record their output in the Gemini API's own shape
    (``functionCall`` parts, with the call id Gemini CLI gave each): a call that asks for a
    tool is no answer, and names the tool and the call."""
    records = [record for record in recorded_records("gemini_cli", "two_tools")
               if record.kind is LLM]
    assert [record.requested_tools for record in records] == [True, True, False]
    assert [[name for name, _ in record.asked_tools] for record in records] == [
        ["run_shell_command"], ["read_file"], []]
    assert all(call_id.startswith(f"{name}__")
               for record in records for name, call_id in record.asked_tools)
    assert [record.final_answer for record in records] == [False, False, True]


def _call_ids(spans: list[dict[str, Any]], new: Callable[[str], str]) -> None:
    for span in spans:
        for attribute in span["attributes"]:
            if attribute["key"] == "gen_ai.tool.call_id":
                attribute["value"]["stringValue"] = new(attribute["value"]["stringValue"])


def test_a_tool_call_below_a_span_of_no_kind_joins_the_loose_run_that_asked_for_it(
        sidecar: RunningServer) -> None:
    """Gemini CLI's tool calls hang below its ``schedule_tool_calls`` span, a trace per batch
    beside its model calls' (each a loose call): each joins the run whose model call asked for
    it by its call id. With ids no model call gave, each batch's trace is a run of its own, as
    any trace whose root is no model or tool call: nothing asked for them."""
    replay(sidecar, RECORDINGS / "gemini_cli" / "two_tools.jsonl",
           edit=lambda spans: _call_ids(spans, lambda call_id: "other-" + call_id))
    runs = runs_seen(sidecar, 3)
    assert sorted((run["iterations"], run["tool_calls"], run["terminal_state"])
                  for run in runs) == [(0, 1, "no_response"), (0, 1, "no_response"),
                                       (3, 0, "completed")], runs
