"""The newest GenAI conventions (semantic-conventions-genai), read from spans a real OpenTelemetry
SDK made with the attributes the conventions' own examples give (no emitter on PyPI sets them
yet, but for the log events: tests/test_genai_log_events.py and the openai-v2 framework test):
an agent's own budget, turn count, cost, end reason, messages delta, caller and transfer, the
framework entry point ``handle_conversation_turn``, ``cache_write``; and the join of GenAI log
events to their spans (:mod:`watchdog.core.spans.logs`), pure: "now" is an argument.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math

import pytest
from google.protobuf.json_format import MessageToDict
from opentelemetry._logs import LogRecord
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource

from tests.spans import (
    T0,
    SpanMaker,
    chat_attrs,
    encode,
    only_run,
    record_of,
    records_of,
    run_spans,
)
from watchdog.core.rules.engine import RuleEngine
from watchdog.core.rules.pack import load_text
from watchdog.core.runs.terminal import TerminalState
from watchdog.core.runs.tracker import RunTracker
from watchdog.core.spans.decode import DecodeError, parse_protobuf
from watchdog.core.spans.logs import LogJoin, parse_logs_json, parse_logs_protobuf
from watchdog.core.spans.pipeline import released, slices_of
from watchdog.core.spans.record import LLM, TOOL
from watchdog.shell.clock import ManualClock
from watchdog.shell.config import Config, load
from watchdog.shell.errors import ConfigError
from watchdog.shell.service import WatchdogService
from watchdog.shell.state.store import Store

try:  # (the SDK renamed it)
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter as InMemoryLogs
except ImportError:  # pragma: no cover
    from opentelemetry.sdk._logs.export import InMemoryLogExporter as InMemoryLogs

DETAILS = "gen_ai.client.inference.operation.details"


def _user(text: str) -> dict[str, object]:
    return {"role": "user", "parts": [{"type": "text", "content": text}]}


# -- what an agent reports of itself ---------------------------------------------------------

def test_a_budget_the_agent_reports_counts_down_without_an_announcement() -> None:
    """``gen_ai.agent.iteration_budget.limit`` on a span is the run's budget, as an announced
    one is; ``.consumed`` counts where it is more than the watchdog counted."""
    maker = SpanMaker()
    with maker.agent(attrs={"gen_ai.agent.name": "planner"}):
        maker.span("chat m", chat_attrs(finish="tool_calls", **{
            "gen_ai.agent.iteration_budget.limit": 6,
            "gen_ai.agent.iteration_budget.consumed": 3,
            "gen_ai.agent.token_budget.limit": 1000}))
    tracker, _ = run_spans(maker.take()[:-1])  # the agent still running
    run = only_run(tracker)
    view = run.budget_view()
    assert view["max_iterations"] == 6 and view["remaining_iterations"] == 3  # 3 said used
    assert view["max_tokens"] == 1000 and view["remaining_tokens"] == 985
    # an announcement (watchdog.budget.*) wins over the agent's report
    announced = SpanMaker({"watchdog.budget.max_iterations": 4})
    record = record_of(announced.span("chat m", chat_attrs(**{
        "gen_ai.agent.iteration_budget.limit": 6})))
    assert record.budget == {"max_iterations": 4}


def test_a_rule_counts_the_reported_budget_down() -> None:
    """A countdown on ``run.budget.remaining_iterations`` fires from the budget the agent
    reports on its model calls, with no announcement."""
    engine = RuleEngine(load_text("""
apiVersion: agent-watchdog/v1
kind: RulePack
name: reported-budgets
rules:
  - {name: iteration-countdown, action: wind_down, severity: warning, repeat: on_change,
     when: "has(run.budget.remaining_iterations) && run.budget.remaining_iterations <= 2",
     message: "[budget: ${run.budget.remaining_iterations} of ${run.budget.max_iterations}
       model calls left]"}
""", "pack.yaml"))
    maker = SpanMaker()
    tracker = RunTracker()
    fired = []
    with maker.agent(attrs={"gen_ai.agent.name": "planner"}):
        for call in range(4):
            maker.span("chat m", chat_attrs(finish="tool_calls", **{
                "gen_ai.agent.iteration_budget.limit": 5}), start=T0 + call)
            tracker.apply(records_of(maker.take()), T0 + call + 1)
            run = only_run(tracker)
            fired += [decision.message for decision in engine.evaluate(run, T0 + call + 1)]
    assert fired == ["[budget: 2 of 5 model calls left]", "[budget: 1 of 5 model calls left]"]


@pytest.mark.parametrize("value", [math.nan, -1, 1e13, "six"])
def test_a_budget_out_of_range_is_no_budget(value: object) -> None:
    maker = SpanMaker()
    record = record_of(maker.span("chat m", chat_attrs(**{
        "gen_ai.agent.iteration_budget.limit": value,
        "gen_ai.agent.iteration_budget.consumed": value})))
    assert record.budget is None and record.budget_used is None


def test_a_used_up_budget_the_agent_reports_ends_the_run_at_its_budget() -> None:
    maker = SpanMaker()
    with maker.agent(attrs={"gen_ai.agent.name": "planner",
                            "gen_ai.agent.iteration_budget.limit": 2,
                            "gen_ai.agent.iteration_budget.consumed": 2}):
        maker.span("chat m", chat_attrs(finish="tool_calls"))
    tracker, _ = run_spans(maker.take())
    run = only_run(tracker)
    assert (run.terminal_state, run.terminal_reason) == (TerminalState.TOOL_LIMIT_REACHED,
                                                         "budget")


def test_turn_count_is_the_runs_iterations_when_no_model_call_span_says() -> None:
    maker = SpanMaker()
    with maker.agent(attrs={"gen_ai.agent.name": "planner", "gen_ai.agent.turn.count": 4,
                            "gen_ai.output.messages": json.dumps([{
                                "role": "assistant", "finish_reason": "stop",
                                "parts": [{"type": "text", "content": "done"}]}])}):
        pass
    tracker, _ = run_spans(maker.take())
    run = only_run(tracker)
    assert run.iterations == 4 and run.terminal_state is TerminalState.COMPLETED


@pytest.mark.parametrize(("end_reason", "state", "reason"), [
    ("max_turns", TerminalState.TOOL_LIMIT_REACHED, "max_turns"),
    ("max_iterations_reached", TerminalState.TOOL_LIMIT_REACHED, "max_iterations"),
    ("tool_call_limit", TerminalState.TOOL_LIMIT_REACHED, "max_tool_calls"),
    ("token_budget_exhausted", TerminalState.TOOL_LIMIT_REACHED, "max_tokens"),
    ("budget_exhausted", TerminalState.TOOL_LIMIT_REACHED, "budget"),
    # the conventions' own voice-agent values name no limit
    ("interrupted", TerminalState.NO_RESPONSE, None),
    ("session_closed", TerminalState.NO_RESPONSE, None),
])
def test_the_end_reason_the_agent_reports(end_reason: str, state: TerminalState,
                                          reason: str | None) -> None:
    maker = SpanMaker()
    with maker.agent(attrs={"gen_ai.agent.name": "planner",
                            "gen_ai.agent.invocation.end_reason": end_reason}):
        maker.span("chat m", chat_attrs(finish="tool_calls"))
    tracker, _ = run_spans(maker.take())
    run = only_run(tracker)
    assert (run.terminal_state, run.terminal_reason) == (state, reason)


def test_reported_cost_and_cache_tokens_are_kept_on_the_call() -> None:
    maker = SpanMaker()
    record = record_of(maker.span("chat m", chat_attrs(
        100, 10, "stop", **{"gen_ai.usage.cost.total": 0.0042,
                            "gen_ai.usage.cache_read.input_tokens": 60,
                            "gen_ai.usage.cache_write.input_tokens": 30})))
    assert (record.reported_cost_usd, record.cache_read_tokens,
            record.cache_write_tokens) == (0.0042, 60, 30)
    # the older name of the write count reads the same
    old = record_of(maker.span("chat m", chat_attrs(
        100, 10, "stop", **{"gen_ai.usage.cache_creation.input_tokens": 25,
                            "gen_ai.usage.cost": "0.5"})))
    assert (old.cache_write_tokens, old.reported_cost_usd) == (25, 0.5)


@pytest.mark.parametrize("cost", [math.nan, math.inf, -0.01, 2e6, "free", True])
def test_a_cost_out_of_range_is_not_reported(cost: object) -> None:
    record = record_of(SpanMaker().span("chat m", chat_attrs(**{"gen_ai.usage.cost.total":
                                                                cost})))
    assert record.reported_cost_usd is None


def test_messages_delta_grows_the_conversation() -> None:
    """``gen_ai.input.messages_delta``: only what is new since the previous call (the previous
    answer and the tool results); the run's conversation is their sum and the last answer."""
    maker = SpanMaker()
    call = {"type": "tool_call", "id": "c1", "name": "lookup", "arguments": {"key": "a"}}
    with maker.agent(attrs={"gen_ai.agent.name": "planner"}):
        maker.span("chat m", chat_attrs(finish="tool_calls", **{
            "gen_ai.input.messages_delta": json.dumps([_user("Look up a.")])}))
        maker.span("chat m", chat_attrs(finish="stop", **{
            "gen_ai.input.messages_delta": json.dumps([
                {"role": "assistant", "parts": [call]},
                {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1",
                                            "result": "1"}]}])}))
    tracker, _ = run_spans(maker.take())
    assert only_run(tracker).messages == 4  # user, assistant, tool, the answer


# -- who called whom -------------------------------------------------------------------------

def test_a_transfer_span_is_a_tool_call_naming_the_agent_it_hands_to() -> None:
    """docs/gen-ai/non-normative/examples-agent-interactions.md, "Tool-based transfer": the
    span name ends with the target; the target agent's span below it is a child run."""
    maker = SpanMaker()
    with maker.agent("invoke_agent source", {"gen_ai.agent.name": "source"}) as root:
        maker.span("chat m", chat_attrs(finish="tool_calls"), start=T0 + 1)
        transfer = maker.open("execute_tool transfer_to_weather_agent weather_agent", {
            "gen_ai.operation.name": "execute_tool", "gen_ai.agent.name": "source",
            "gen_ai.transfer.mode": "pass_control",
            "gen_ai.transfer.target.name": "weather_agent"}, start=T0 + 2)
        maker.span("invoke_agent weather_agent", {"gen_ai.operation.name": "invoke_agent",
                                                  "gen_ai.agent.name": "weather_agent"},
                   parent=transfer, start=T0 + 3, end=T0 + 5)
        transfer.end(end_time=int((T0 + 6) * 1e9))
    spans = maker.take()
    records = {record.name: record for record in slices_and_records(spans)}
    tool = records["execute_tool transfer_to_weather_agent weather_agent"]
    assert (tool.kind, tool.tool_name, tool.handoff_to) == (TOOL, "transfer_to_weather_agent",
                                                           "weather_agent")
    tracker = RunTracker()
    tracker.apply(list(records.values()), T0 + 100)
    runs = {run.agent_name: run for run in [*tracker.active(), *tracker.ended()]}
    assert set(runs) == {"source", "weather_agent"}
    assert runs["weather_agent"].parent_run == runs["source"].key
    assert runs["source"].tool_calls == 1 and root is not None


def test_the_caller_of_a_remote_agent_is_kept() -> None:
    """"Agent invocation through a remote client": the CLIENT span names its caller."""
    record = record_of(SpanMaker().span("invoke_agent refund_agent", {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "refund_agent",
        "gen_ai.caller.type": "agent", "gen_ai.caller.name": "support_agent"}))
    assert (record.agent, record.caller) == ("refund_agent", "support_agent")


def test_handle_conversation_turn_frames_the_invocation() -> None:
    maker = SpanMaker()
    turn = {"gen_ai.operation.name": "handle_conversation_turn"}
    with maker.agent("handle_conversation_turn", turn), \
            maker.agent("invoke_agent concierge", {"gen_ai.agent.name": "concierge"},
                        start=T0 + 1, end=T0 + 30):
        maker.span("chat m", chat_attrs(finish="stop"), start=T0 + 2)
    tracker, _ = run_spans(maker.take())
    run = only_run(tracker)  # one run, not a workflow run with the agent as a child
    assert run.agent_name == "concierge" and run.iterations == 1


def slices_and_records(spans: list) -> list:  # type: ignore[type-arg]
    (decoded,) = list(slices_of(parse_protobuf(encode(spans).SerializeToString()), None))
    return decoded.records


# -- GenAI log events joined to their spans --------------------------------------------------

def _events(span_context_of: object, service: str = "test-agent",
            output: list[object] | None = None) -> ExportLogsServiceRequest:
    """What the SDK's OTLP log exporter sends for one ``gen_ai.client.inference.operation.
    details`` event of the span ``span_context_of``."""
    memory = InMemoryLogs()
    provider = LoggerProvider(resource=Resource.create({"service.name": service}))
    provider.add_log_record_processor(SimpleLogRecordProcessor(memory))
    context = span_context_of.get_span_context()  # type: ignore[attr-defined]
    provider.get_logger("genai").emit(LogRecord(
        event_name=DETAILS, trace_id=context.trace_id, span_id=context.span_id,
        trace_flags=context.trace_flags,
        attributes={"gen_ai.operation.name": "chat",
                    # structured, as the conventions ask of events (util-genai writes them so)
                    "gen_ai.input.messages": [_user("Look up a.")],
                    "gen_ai.output.messages": output or [{
                        "role": "assistant", "finish_reason": "stop",
                        "parts": [{"type": "text", "content": "a is 1."}]}]}))
    request = ExportLogsServiceRequest()
    request.ParseFromString(encode_logs(memory.get_finished_logs()).SerializeToString())
    return request


def _bare_call(maker: SpanMaker) -> object:
    """A model call whose span carries no content (it went to a log event)."""
    return maker.span("chat m", {"gen_ai.operation.name": "chat",
                                 "gen_ai.usage.input_tokens": 10,
                                 "gen_ai.usage.output_tokens": 5})


def test_content_from_a_log_that_came_first() -> None:
    maker = SpanMaker()
    span = _bare_call(maker)
    join = LogJoin()
    assert join.add(_events(span), T0) == []
    (decoded,) = list(slices_of(encode(maker.take()), None, join, T0 + 0.5))
    (record,) = decoded.records
    assert record.kind is LLM and record.final_answer and record.final_output == "a is 1."
    assert record.messages == 2 and join.content(b"", b"") is None
    assert join.content_counts() == {"with_span": 1, "late": 0, "dropped": 0}


def test_a_span_waits_for_its_log_then_goes_on_with_its_trace() -> None:
    maker = SpanMaker()
    join = LogJoin()
    join.add(_events(_bare_call(maker)), T0)  # the service is known to send GenAI events
    maker.take()
    with maker.agent(attrs={"gen_ai.agent.name": "planner"}):
        span = _bare_call(maker)
    (decoded,) = list(slices_of(encode(maker.take()), None, join, T0))
    assert decoded.records == [] and join.held_traces == 1  # the root waits with its call
    (ready,) = join.add(_events(span), T0 + 0.1)
    records = released([ready], join, T0).records
    assert [record.kind.value for record in records] == ["llm", "agent"]
    assert records[0].final_output == "a is 1." and join.held_traces == 0
    assert join.content_counts() == {"with_span": 1, "late": 0, "dropped": 0}


def test_a_held_trace_keeps_the_content_that_came_before_its_other_calls() -> None:
    """Call A waits for its log, holding its trace; B's log came before B's span: B, held
    with its trace, keeps it; A's log releases the trace, each call read with its own."""
    maker = SpanMaker()
    join = LogJoin()
    join.add(_events(_bare_call(maker)), T0)
    maker.take()
    with maker.agent(attrs={"gen_ai.agent.name": "planner"}):
        first = maker.span("chat m", {"gen_ai.operation.name": "chat"}, start=T0 + 1)
        second = maker.span("chat m", {"gen_ai.operation.name": "chat"}, start=T0 + 2)
    join.add(_events(second, output=[{"role": "assistant", "finish_reason": "stop",
                                      "parts": [{"type": "text", "content": "b"}]}]), T0)
    assert next(slices_of(encode(maker.take()), None, join, T0)).records == []  # all wait
    (ready,) = join.add(_events(first, output=[{"role": "assistant", "finish_reason": "stop",
                                                "parts": [{"type": "text", "content": "a"}]}]),
                        T0 + 0.1)
    records = released([ready], join, T0).records
    assert [(record.kind.value, record.final_output) for record in records] == [
        ("llm", "a"), ("llm", "b"), ("agent", None)]


def test_a_span_whose_log_never_comes_goes_on_after_the_wait() -> None:
    maker = SpanMaker()
    join = LogJoin(wait_seconds=2.0)
    join.add(_events(_bare_call(maker)), T0)
    maker.take()
    _bare_call(maker)
    assert next(slices_of(encode(maker.take()), None, join, T0)).records == []
    assert join.expired(T0 + 1.9) == []
    (due,) = join.expired(T0 + 2.0)
    (record,) = released([due], join, T0).records
    assert record.kind is LLM and not record.final_answer  # read with what it had
    assert join.expired(T0 + 10) == []


def test_content_waits_for_its_span_as_long_as_the_sdk_batches_spans() -> None:
    """The OpenTelemetry SDK sends log records after 1 s and spans after up to 5 s: content that
    came 5 s before its span is still read with it; after 10 s it is dropped."""
    maker = SpanMaker()
    join = LogJoin()
    call = maker.span("chat m", {"gen_ai.operation.name": "chat"}, start=T0)
    join.add(_events(call, output=[{"role": "assistant", "finish_reason": "stop",
                                    "parts": [{"type": "text", "content": "late span"}]}]), T0)
    assert join.expired(T0 + 5.0) == []
    (record,) = next(slices_of(encode(maker.take()), None, join, T0 + 5.0)).records
    assert record.final_output == "late span"
    late = maker.span("chat m", {"gen_ai.operation.name": "chat"}, start=T0)
    join.add(_events(late, output=[{"role": "assistant", "finish_reason": "stop",
                                    "parts": [{"type": "text", "content": "too late"}]}]), T0)
    assert join.expired(T0 + 10.0) == []  # (the content alone: nothing held goes on)
    # its span, from a service that sends content in logs, now waits for content that is gone
    assert next(slices_of(encode(maker.take()), None, join, T0 + 10.0)).records == []
    (due,) = join.expired(T0 + 12.0)
    (record,) = released([due], join, T0).records
    assert record.final_output is None
    assert join.content_counts() == {"with_span": 1, "late": 0, "dropped": 1}


def test_the_join_is_bounded() -> None:
    maker = SpanMaker()
    join = LogJoin(max_held_traces=2)
    join.add(_events(_bare_call(maker)), T0)
    maker.take()
    for _ in range(3):
        _bare_call(maker)  # three traces, each a model call waiting for its content
    (decoded,) = list(slices_of(encode(maker.take()), None, join, T0))
    # the first one held was pushed out and goes on at once, read with what it had
    assert len(decoded.records) == 1 and join.held_traces == 2
    maker.take()
    small = LogJoin(max_bytes=1)  # content beyond the bound is dropped, oldest first
    small.add(_events(_bare_call(maker)), T0)
    (alone,) = next(slices_of(encode(maker.take()), None, small, T0)).records
    assert not alone.final_answer and alone.messages == 0  # read without the dropped content
    assert small.content_counts() == {"with_span": 0, "late": 0, "dropped": 1}


def test_logs_in_otlp_json_read_as_protobuf() -> None:
    request = _events(_bare_call(SpanMaker()))
    document = MessageToDict(request)
    for resource in document["resourceLogs"]:
        for scope in resource["scopeLogs"]:
            for record in scope["logRecords"]:
                for key in ("traceId", "spanId"):
                    record[key] = base64.b64decode(record[key]).hex()
    again = parse_logs_json(json.dumps(document).encode())
    assert again == parse_logs_protobuf(request.SerializeToString())


@pytest.mark.parametrize("body", [
    b"", b"[]", b"null", b"{", b'{"resourceLogs": 5}', b'{"resourceLogs": [5]}',
    b'{"resourceLogs": [{"scopeLogs": [{"logRecords": [{"traceId": 7}]}]}]}',
    b'{"resourceLogs": [{"scopeLogs": [{"logRecords": [{"timeUnixNano": "x"}]}]}]}',
    b'{"resourceLogs": [{"scopeLogs": [{"logRecords": [{"attributes": [{"key": "\xed\xa0\x80"}'
    b"]}]}]}]}",
    b'{"resourceLogs": [{"scopeLogs": [{"logRecords": [{"body": ' + b"[" * 5000 + b"]" * 5000
    + b"}]}]}]}",
])
def test_bad_logs_in_otlp_json_are_refused_with_a_reason(body: bytes) -> None:
    with pytest.raises(DecodeError) as refused:
        parse_logs_json(body)
    assert str(refused.value)


def test_a_log_id_that_is_not_hex_is_no_id() -> None:
    """As in traces: the record names no span (protobuf's id of the wrong length)."""
    request = parse_logs_json(b'{"resourceLogs": [{"scopeLogs": [{"logRecords": [{"spanId": '
                              b'"0g", "traceId": "AQIDBAUGBwgJCgsMDQ4PEA=="}]}]}]}')
    (record,) = request.resource_logs[0].scope_logs[0].log_records
    assert (record.trace_id, record.span_id) == (b"", b"")


def test_odd_log_events_are_read_without_a_failure() -> None:
    """Events with no span, ids of the wrong length, content of any type: read or skipped."""
    document = {"resourceLogs": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "x" * 1000}}]},
        "scopeLogs": [{"logRecords": [
            {"eventName": DETAILS},  # no ids
            {"eventName": DETAILS, "traceId": "00" * 16, "spanId": "00" * 8},
            {"eventName": DETAILS, "traceId": "ab" * 8, "spanId": "cd" * 8},
            {"eventName": DETAILS, "traceId": "ab" * 16, "spanId": "cd" * 8, "attributes": [
                {"key": "gen_ai.output.messages", "value": {"intValue": "5"}},
                {"key": "gen_ai.input.messages", "value": {"kvlistValue": {}}},
                {"key": "gen_ai.response.finish_reasons", "value": {"bytesValue": "AAE="}}]},
            {"attributes": [{"key": "event.name", "value": {"stringValue": DETAILS}}],
             "traceId": "ab" * 16, "spanId": "ef" * 8},
            {"eventName": "other", "traceId": "ab" * 16, "spanId": "cd" * 8}]}]}]}
    join = LogJoin()
    assert join.add(parse_logs_json(json.dumps(document).encode()), T0) == []
    assert join.events == 5  # the GenAI events, the older `event.name` attribute's too
    content = join.content(bytes.fromhex("ab" * 16), bytes.fromhex("cd" * 8))
    assert content is not None and content["gen_ai.output.messages"] == 5


def test_a_log_that_came_before_the_wait_was_over_is_read_even_when_read_late() -> None:
    """A busy sidecar reads a logs request after the held trace's deadline although the request
    came before it: the timer does not let the trace go on while that request waits its turn,
    so the call is read with its content."""
    clock = ManualClock(T0)
    service = WatchdogService(Config(), Store(":memory:"), clock=clock)
    maker = SpanMaker()

    async def scenario() -> None:
        assert await service.export_logs(lambda: _events(_bare_call(maker)), "http")
        maker.take()  # (the service is known to send GenAI events)
        with maker.agent(attrs={"gen_ai.agent.name": "planner"}):
            span = _bare_call(maker)
        service.export(encode(maker.take()), "http")  # the trace waits for the call's log
        runs = service.core.newest_keys(False, "planner", 10)
        assert runs == []
        late = asyncio.get_running_loop().create_task(
            service.export_logs(lambda: _events(span), "http"))
        await asyncio.sleep(0)  # it came in, and waits its turn on the loop
        assert not late.done()
        clock.advance(LogJoin().wait_seconds + 1)
        service.tick()
        assert service.core.newest_keys(False, "planner", 10) == []  # held for the request
        assert await late
        (key,) = service.core.newest_keys(False, "planner", 10)
        view = service.view(key)
        assert view is not None and view.final_output == "a is 1."

    try:
        asyncio.run(scenario())
    finally:
        service.store.close()


def test_the_wait_for_log_content_is_configured() -> None:
    """``log_content_wait`` (seconds or a duration) is how long a call waits for its log."""
    config = load(env={"WATCHDOG_LOG_CONTENT_WAIT": "5s"})
    assert config.log_content_wait == 5.0
    for bad in ("0", "-1", "11m", "nan"):
        with pytest.raises(ConfigError, match="log_content_wait"):
            load(env={"WATCHDOG_LOG_CONTENT_WAIT": bad})
    clock = ManualClock(T0)
    service = WatchdogService(config, Store(":memory:"), clock=clock)
    maker = SpanMaker()
    try:
        asyncio.run(service.export_logs(lambda: _events(_bare_call(maker)), "http"))
        maker.take()
        with maker.agent(attrs={"gen_ai.agent.name": "planner"}):
            _bare_call(maker)
        service.export(encode(maker.take()), "http")
        clock.advance(4.9)
        service.tick()
        assert service.core.newest_keys(False, "planner", 10) == []  # still waiting
        clock.advance(0.1)
        service.tick()
        (key,) = service.core.newest_keys(False, "planner", 10)  # read without its content
        view = service.view(key)
        assert view is not None and view.final_output is None
    finally:
        service.store.close()
