"""An agent both watched (its own spans, no ``traceparent`` on its model requests) and steered
(the model endpoint relays its calls) is one run (DESIGN §12): a span of a model call whose
response id is the one the endpoint relayed is that call, whichever comes first; the trace is
the endpoint's run's, its model calls counted once (paired by response id) and its tool calls
once (paired with the calls the endpoint handed over by call id).

The endpoint's records are the real :class:`~watchdog.core.model.book.ModelBook`'s of real
chat requests; the agent's spans a real OpenTelemetry tracer's, decoded as the receiver does;
both go to one real tracker, in every order they may come in.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.spans import T0, SpanMaker, chat_attrs, records_of, tool_attrs
from watchdog.core.model.book import Caller, ModelBook
from watchdog.core.model.chat import ChatWire
from watchdog.core.model.wire import Observation, ToolCall
from watchdog.core.runs.tracker import RunTracker
from watchdog.core.spans.record import SpanRecord

NS = 1_000_000_000
USAGE = [(100, 20), (180, 30)]  # (input, output) tokens of the two calls, as the model said


def endpoint_calls(book: ModelBook, response_ids: list[str]) -> list[list[SpanRecord]]:
    """The endpoint's records of a two-call conversation (a search, then the answer): the
    first call's; then the tool call it handed over, and the second call's."""
    return endpoint_loop(book, Caller(), "find the file", [("search", "call_search_1")], T0,
                         USAGE, response_ids)


def endpoint_loop(book: ModelBook, caller: Caller, task: str, steps: list[tuple[str, str]],
                  at: float, usage: list[tuple[int, int]], response_ids: list[str]
                  ) -> list[list[SpanRecord]]:
    """The endpoint's records of a conversation of ``caller`` (its session, its sub-agent):
    a call per step (a tool call asked: its name and id; its result found), then the answer,
    a second apart, each of its ``usage`` and response id; each request offers the tools the
    steps ask for (an agent asks for the tools it offers)."""
    wire = ChatWire()
    messages: list[dict[str, Any]] = [{"role": "user", "content": task}]
    batches: list[list[SpanRecord]] = []
    tools = [{"type": "function", "function": {"name": name, "parameters": {}}}
             for name in dict.fromkeys(name for name, _ in steps)]
    for step, asked in enumerate([*steps, None]):
        request = wire.read_request({"model": "m", **({"tools": tools} if tools else {}),
                                     "messages": messages})
        state = book.identify("chat", request, caller, "steered-agent", lambda _key: False)
        records = book.tool_records(state, request, int((at + step) * NS))
        calls = [ToolCall(asked[1], asked[0], '{"q": "file"}')] if asked else []
        seen = Observation(response_ids[step], *usage[step], model="m",
                           finish_reason="tool_calls" if calls else "stop", calls=calls,
                           text="" if calls else "it is in /tmp", complete=True)
        records.append(book.call_record(state, request, seen, calls, int((at + step) * NS),
                                        int((at + step + 0.2) * NS)))
        book.settle(state)
        batches.append(records)
        if asked:
            messages += [{"role": "assistant", "content": None, "tool_calls": [
                {"id": asked[1], "type": "function",
                 "function": {"name": asked[0], "arguments": '{"q": "file"}'}}]},
                         {"role": "tool", "tool_call_id": asked[1], "content": "found"}]
    return batches


def agent_spans(response_ids: list[str | None], call_id: str = "call_search_1"
                ) -> list[list[SpanRecord]]:
    """The agent's own spans of the same invocation (a trace of its own, no request names
    it): the first call and the tool it ran (``call_id``); then the second call and the
    invocation's root. A response id None: the span names none (Claude Code's)."""
    maker = SpanMaker({"service.name": "watched-agent"})
    batches: list[list[SpanRecord]] = []
    with maker.agent("invoke_agent watched", {"gen_ai.agent.name": "watched-agent"},
                     start=T0 - 0.1, end=T0 + 2):
        maker.span("chat m", chat_attrs(*USAGE[0], "tool_calls", **named(response_ids[0])),
                   start=T0, end=T0 + 0.2)
        maker.span("execute_tool search", tool_attrs(
            "search", json.dumps({"q": "file"}), "found",
            **{"gen_ai.tool.call.id": call_id}), start=T0 + 0.3, end=T0 + 0.5)
        batches.append(records_of(maker.take()))
        maker.span("chat m", chat_attrs(*USAGE[1], "stop", **named(response_ids[1])),
                   start=T0 + 1, end=T0 + 1.2)
    batches.append(records_of(maker.take()))
    return batches


def named(response_id: str | None) -> dict[str, str]:
    return {} if response_id is None else {"gen_ai.response.id": response_id}


ORDERS = {
    "endpoint first": "E0 E1 S0 S1",
    "spans first": "S0 E0 E1 S1",
    "interleaved": "E0 S0 E1 S1",
    "spans of the first call before it is booked, the rest after": "S0 E0 S1 E1",
}


@pytest.mark.parametrize("named_responses", [True, False],
                         ids=["spans name the response", "spans name no response"])
@pytest.mark.parametrize("order", ORDERS.values(), ids=list(ORDERS))
def test_an_agent_watched_and_steered_is_one_run_counted_once(order: str,
                                                              named_responses: bool) -> None:
    """Spans that name their responses (Qwen Code's) pair by them; spans that name none
    (Claude Code's) pair their trace by the id of the tool call the endpoint handed over,
    which the agent's span of running it carries, and each model call with the endpoint's
    record of it by its usage."""
    ids = ["chatcmpl-paired-1", "chatcmpl-paired-2"]
    spans = agent_spans(ids if named_responses else [None, None])
    batches = {"E": endpoint_calls(ModelBook(), ids), "S": spans}
    tracker = RunTracker()
    now = T0 + 3
    first = batches["E"][0][0]  # (the endpoint opens its run at the first request)
    tracker.open(first.run_key, first.key_source, first.trace_id, now)
    for step in order.split():
        tracker.apply(batches[step[0]][int(step[1])], now)
        now += 0.1
    runs = [*tracker.active(), *tracker.ended()]
    assert [run.key.split(":")[0] for run in runs] == ["model"], [run.key for run in runs]
    run = runs[0]
    assert (run.iterations, run.tool_calls) == (2, 1)
    assert (run.input_tokens, run.output_tokens) == (280, 50)  # each call's once
    assert run.agent == "watched-agent"  # named by its spans, as any run
    assert run.has_final_answer


def test_spans_that_name_another_response_stay_a_run_of_their_own() -> None:
    """A trace whose model calls name responses the endpoint never relayed, and its tool call
    another id (another agent's, sent to its model directly), is not the endpoint's run: two
    runs, each counting its own."""
    batches = endpoint_calls(ModelBook(), ["chatcmpl-relayed-1", "chatcmpl-relayed-2"])
    spans = agent_spans(["chatcmpl-direct-1", "chatcmpl-direct-2"], "call_other_9")
    tracker = RunTracker()
    tracker.open(batches[0][0].run_key, batches[0][0].key_source, batches[0][0].trace_id, T0)
    for batch in (spans[0], batches[0], batches[1], spans[1]):
        tracker.apply(batch, T0 + 3)
    runs = sorted([*tracker.active(), *tracker.ended()], key=lambda run: run.key)
    assert [(run.key.split(":")[0], run.iterations, run.tool_calls) for run in runs] == [
        ("model", 2, 1), ("trace", 2, 1)]


@pytest.mark.parametrize(("side_model", "side_at", "calls"), [
    ("small-model", 1.5, 3), ("m", 30.0, 3), ("m-2025-01-01", 0.0, 2), ("m-20250101", 0.0, 2),
    ("m-70b", 0.0, 3)],
    ids=["another model at once", "the same model 30 s later",
         "the first call itself, its model's dated id", "... dated as Anthropic dates it",
         "another size of its model at once"])
def test_a_span_pairs_by_usage_only_with_a_call_of_its_model_and_its_time(
        side_model: str, side_at: float, calls: int) -> None:
    """The agent's spans name no response (Claude Code's): a model-call span pairs with the
    endpoint's record of a call by their usage, and only with a call of the same model that
    ran at the same time. Here the span of the endpoint's first call was not kept (a span the
    sidecar dropped), and the agent made a call of its own (a side call, to another model at
    once, or to the same model 30 s later, sent to its provider directly) with the usage of
    that first call: it is a call of its own, not the first call's twin — three calls, each
    call's tokens once. A span of the first call itself naming its model's dated id (the
    response's; the request named ``m``) is its twin: two calls."""
    ids = ["chatcmpl-side-1", "chatcmpl-side-2"]
    endpoint = endpoint_calls(ModelBook(), ids)
    spans = agent_spans([None, None])
    maker = SpanMaker({"service.name": "watched-agent"})
    maker.span("chat " + side_model, chat_attrs(*USAGE[0], "stop", **{
        "gen_ai.request.model": side_model, "gen_ai.response.model": side_model}),
        start=T0 + side_at, end=T0 + side_at + 0.2)
    side = [record for record in records_of(maker.take())]
    for record in side:  # (the same trace as the agent's other spans: one invocation)
        record.trace_id = spans[1][0].trace_id
        record.run_key = "trace:" + record.trace_id
    tracker = RunTracker()
    first = endpoint[0][0]
    tracker.open(first.run_key, first.key_source, first.trace_id, T0 + 3)
    # (the first call's span and the tool's: not kept; the second call's, the side call's)
    for batch in (endpoint[0], endpoint[1], spans[0][1:], side, spans[1]):
        tracker.apply(batch, T0 + 40)
    runs = [*tracker.active(), *tracker.ended()]
    assert [run.key.split(":")[0] for run in runs] == ["model"], [run.key for run in runs]
    run = runs[0]
    assert (run.iterations, run.tool_calls) == (calls, 1)
    assert (run.input_tokens, run.output_tokens) == ((380, 70) if calls == 3 else (280, 50))


@pytest.mark.parametrize("apart", [False, True],
                         ids=["one export request", "the sub-agent's spans first, apart"])
def test_a_sub_agents_spans_in_its_callers_trace_are_its_child_runs(apart: bool) -> None:
    """Claude Code's shape: the main conversation asks for ``Agent`` (its sub-agent), which
    runs below that tool call's span in the invocation's trace — two model calls and a
    ``Bash`` call — then answers; no span names a response. At the endpoint, the sub-agent's
    requests name it in the session: a child run of the main one. The trace is the main run's,
    but the spans beside the sub-agent's ``Bash`` call (its run handed over its id) are the
    child run's: each run counts its own calls once, as the endpoint does."""
    book = ModelBook()
    main_calls = endpoint_loop(book, Caller(session="s-1"), "find the file",
                               [("Agent", "toolu_agent")], T0, [(100, 10), (101, 10)],
                               ["msg_main_1", "msg_main_2"])
    sub_calls = endpoint_loop(book, Caller(session="s-1", subagent="agent-1"), "look in /srv",
                              [("Bash", "toolu_bash")], T0 + 0.5, [(300, 20), (301, 20)],
                              ["msg_sub_1", "msg_sub_2"])
    main_key, sub_key = main_calls[0][-1].run_key, sub_calls[0][-1].run_key
    assert book.get(sub_key).parent == main_key  # type: ignore[union-attr]
    maker = SpanMaker({"service.name": "claude-code"})
    with maker.agent("claude_code.interaction", start=T0 - 0.1, end=T0 + 3):
        maker.span("chat m", chat_attrs(100, 10, "tool_calls"), start=T0, end=T0 + 0.2)
        agent = maker.open("execute_tool Agent", tool_attrs(
            "Agent", "{}", "found", **{"gen_ai.tool.call.id": "toolu_agent"}), start=T0 + 0.3)
        maker.span("chat m", chat_attrs(300, 20, "tool_calls"), parent=agent,
                   start=T0 + 0.5, end=T0 + 0.7)
        maker.span("execute_tool Bash", tool_attrs(
            "Bash", "{}", "ok", **{"gen_ai.tool.call.id": "toolu_bash"}), parent=agent,
            start=T0 + 0.8, end=T0 + 0.9)
        maker.span("chat m", chat_attrs(301, 20, "stop"), parent=agent,
                   start=T0 + 1.5, end=T0 + 1.7)
        sub_spans = records_of(maker.take())
        agent.end(end_time=int((T0 + 1.8) * NS))
        maker.span("chat m", chat_attrs(101, 10, "stop"), start=T0 + 1, end=T0 + 1.2)
    main_spans = records_of(maker.take())
    tracker = RunTracker()
    now = T0 + 4
    for first, parent in ((main_calls[0][-1], None), (sub_calls[0][-1], main_key)):
        run, _ = tracker.open(first.run_key, first.key_source, first.trace_id, now)
        run.parent_run = parent  # (as the core opens it: Core.open_run)
    for batch in (*main_calls, *sub_calls):
        tracker.apply(batch, now)
    for batch in ((sub_spans, main_spans) if apart else ([*sub_spans, *main_spans],)):
        tracker.apply(batch, now)
    runs = {run.key: run for run in [*tracker.active(), *tracker.ended()]}
    assert sorted(runs) == sorted([main_key, sub_key]), sorted(runs)
    main, sub = runs[main_key], runs[sub_key]
    assert (main.iterations, main.tool_calls, main.input_tokens) == (2, 1, 201)
    assert (sub.iterations, sub.tool_calls, sub.input_tokens) == (2, 1, 601)
    assert main.spans > 3 and sub.spans > 3  # (the endpoint's records and the spans)
