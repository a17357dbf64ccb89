"""GenAI log events read whatever order they and their spans come in.

A real SDK exports spans and log records on two batch timers (5 s and 1 s by default), and a
busy machine reorders them: a model call's span may come before its service's first log event,
after it, or between the log events of the calls around it, and an exporter (or a Collector)
groups either into requests anywhere. The recording of opentelemetry-instrumentation-openai-v2
in event mode (tests/frameworks/recordings/openai_v2_loop/three_tools_stream_events: four
streamed model calls, each a trace of its own, their content only in log records; a streamed
call's span carries no finish reason, so only the content tells the answer) is delivered to
the service (:class:`WatchdogService`, a manual clock, the timer's tick between requests) in
every interleaving of its spans and its logs, cut into requests in many ways, quickly and with
waits past every hold and gap, and the run read must be the one read when the logs come first:
its answer, its counts, its messages, its terminal state.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from opentelemetry._logs import LogRecord
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource

from tests.recorded import RECORDINGS, ScopedSpan, request_of, scoped_spans
from tests.spans import SpanMaker, encode, tool_attrs
from watchdog.core.spans import decode, native
from watchdog.core.spans.decode import TraceRequest, parse_protobuf
from watchdog.core.spans.logs import CONTENT_WAIT_SECONDS, LogJoin, parse_logs_json
from watchdog.shell.clock import ManualClock
from watchdog.shell.config import Config
from watchdog.shell.service import WatchdogService
from watchdog.shell.state.store import Store

DRIVER, SCENARIO = "openai_v2_loop", "three_tools_stream_events"
AGENT = "openai-v2-loop"
ANSWER = "a, b and c are known."
T0 = 1_795_848_590.0  # just after the recording's spans ended
LOOSE_RUN_GAP = 5.0  # the run of loose calls ends after this long without a call
# Signals that tell when, not what the run did
TIMING = frozenset({"id", "trace_id", "service", "elapsed_seconds", "idle_seconds",
                    "seconds_since_progress", "in_flight_seconds", "seconds_since_last_span"})

try:  # (renamed in opentelemetry-sdk 1.39)
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter as InMemoryLogs
except ImportError:  # pragma: no cover
    from opentelemetry.sdk._logs.export import InMemoryLogExporter as InMemoryLogs

DETAILS = "gen_ai.client.inference.operation.details"
LogItem = tuple[Any, Any, Any]  # (resource, scope, log record)
Step = tuple[str, Sequence[int]]  # ("spans" or "logs", the indices sent in one request)


@functools.cache
def _log_items() -> tuple[LogItem, ...]:
    path = RECORDINGS / DRIVER / f"{SCENARIO}.logs.jsonl"
    items: list[LogItem] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        for resource_logs in parse_logs_json(line.encode()).resource_logs:
            for scope_logs in resource_logs.scope_logs:
                items.extend((resource_logs.resource, scope_logs.scope, record)
                             for record in scope_logs.log_records)
    return tuple(items)


@functools.cache
def _spans() -> tuple[ScopedSpan, ...]:
    return tuple(scoped_spans(DRIVER, SCENARIO))


def logs_request(items: Sequence[LogItem]) -> ExportLogsServiceRequest:
    """One logs export request of ``items``, grouped by resource and scope as an SDK does."""
    request = ExportLogsServiceRequest()
    for resource, scope, record in items:
        if not request.resource_logs or request.resource_logs[-1].resource != resource:
            request.resource_logs.add().resource.CopyFrom(resource)
        group = request.resource_logs[-1]
        if not group.scope_logs or group.scope_logs[-1].scope != scope:
            group.scope_logs.add().scope.CopyFrom(scope)
        group.scope_logs[-1].log_records.add().CopyFrom(record)
    return request


def as_received(request: ExportTraceServiceRequest) -> TraceRequest:
    """``request`` as the receivers decode its bytes (the compiled decode, where built)."""
    return parse_protobuf(request.SerializeToString())


def _given(request: ExportLogsServiceRequest) -> Callable[[], ExportLogsServiceRequest]:
    return lambda: request


def read_run(steps: Sequence[Step], wait: float = 0.1, known: bool = False
             ) -> dict[str, Any]:
    """What the service makes of the recording sent as ``steps`` (``wait`` seconds apart, the
    timer ticking in between); ``known``: the service sent GenAI log events before (its model
    calls wait for their content)."""
    assert sorted(i for kind, indices in steps if kind == "spans" for i in indices) == [0, 1, 2, 3]
    assert sorted(i for kind, indices in steps if kind == "logs" for i in indices) == [0, 1, 2, 3]
    clock = ManualClock(T0)
    service = WatchdogService(Config(loose_run_gap=LOOSE_RUN_GAP), Store(":memory:"),
                              clock=clock)
    spans, logs = _spans(), _log_items()

    async def deliver() -> None:
        if known:  # an event of another span of the service: it is known to send them
            resource, scope, record = logs[0]
            other = ExportLogsServiceRequest()
            other.CopyFrom(logs_request([(resource, scope, record)]))
            other.resource_logs[0].scope_logs[0].log_records[0].span_id = b"\x01" * 8
            assert await service.export_logs(lambda: other, "http")
        for kind, indices in steps:
            if kind == "spans":
                service.export(as_received(request_of([spans[i] for i in indices])), "http")
            else:
                request = logs_request([logs[i] for i in indices])
                assert await service.export_logs(_given(request), "http")
            clock.advance(wait)
            service.tick()
        clock.advance(LogJoin().content_wait_seconds + LOOSE_RUN_GAP + 1)
        service.tick()

    try:
        asyncio.run(deliver())
        assert service.core.newest_keys(True, AGENT, 10) == []  # every run ended
        runs = [service.view(key) for key in service.core.newest_keys(False, AGENT, 10)]
    finally:
        service.store.close()
    assert len(runs) == 1, f"one run, not {len(runs)}"
    (run,) = runs
    assert run is not None
    return {"signals": {key: value for key, value in dict(run.signals).items()
                        if key not in TIMING},
            "terminal_state": run.terminal_state, "terminal_reason": run.terminal_reason,
            "final_output": run.final_output}


@functools.cache
def logs_first() -> dict[str, Any]:
    """The run read when every log event comes before its span, one request each."""
    return read_run([("logs", [i]) for i in range(4)] + [("spans", [i]) for i in range(4)])


def test_the_logs_first_reading_is_the_run_itself() -> None:
    run = logs_first()
    signals = run["signals"]
    assert (run["terminal_state"].value, run["final_output"], signals["iterations"],
            signals["tool_calls"], signals["has_final_answer"]) == (
        "completed", ANSWER, 4, 0, True)
    assert signals["messages"] == 8  # the last call's input (7 messages) and its answer


def _parts(count: int, cuts: Sequence[int]) -> list[list[int]]:
    bounds = [0, *cuts, count]
    return [list(range(start, end)) for start, end in itertools.pairwise(bounds)]


def _interleavings(spans: list[list[int]], logs: list[list[int]]) -> Iterator[list[Step]]:
    """Every order of the two streams' requests that keeps each stream's own order."""
    total = len(spans) + len(logs)
    for at in itertools.combinations(range(total), len(spans)):
        span_parts, log_parts = iter(spans), iter(logs)
        yield [("spans", next(span_parts)) if index in at else ("logs", next(log_parts))
               for index in range(total)]


def deliveries() -> Iterator[tuple[str, list[Step]]]:
    """The recording cut into requests (a request per span or log; all in one; cut in two at
    every point) and each cut sent in every interleaving of spans and logs."""
    cuts = [[1, 2, 3], [], [1], [2], [3]]
    for span_cuts, log_cuts in itertools.product(cuts, cuts):
        if (span_cuts == [1, 2, 3]) != (log_cuts == [1, 2, 3]):
            continue  # (one per request for both streams, or cuts of both)
        spans, logs = _parts(4, span_cuts), _parts(4, log_cuts)
        for steps in _interleavings(spans, logs):
            name = " ".join(f"{kind[0]}{''.join(map(str, indices))}" for kind, indices in steps)
            yield name, steps


DELIVERIES = dict(deliveries())


@pytest.mark.parametrize("name", sorted(DELIVERIES))
def test_every_order_reads_the_run_the_logs_first_order_reads(name: str) -> None:
    assert read_run(DELIVERIES[name]) == logs_first()


SPANS_FIRST = [("spans", [0, 1, 2, 3]), ("logs", [0, 1, 2, 3])]
BY_ONE_SPANS_FIRST = [("spans", [i]) for i in range(4)] + [("logs", [i]) for i in range(4)]


@pytest.mark.parametrize("steps", [SPANS_FIRST, BY_ONE_SPANS_FIRST], ids=["one", "by-one"])
@pytest.mark.parametrize("known", [False, True], ids=["first-events", "known-service"])
@pytest.mark.parametrize("late", [0.4, LOOSE_RUN_GAP + 1, CONTENT_WAIT_SECONDS - 0.5],
                         ids=["quick", "past-the-gap", "near-the-bound"])
def test_content_after_its_span_is_read_into_the_run(steps: list[Step], known: bool,
                                                      late: float) -> None:
    """The spans first, each call's log ``late`` seconds after its span: at once after the
    service's first event (before it, the service is not known to send them: its spans go on
    at once), after the run of loose calls ended unanswered, after the held calls' wait was
    over (a known service), or just before the bound: the content still reaches the run —
    its answer, its messages — and nothing is counted twice."""
    wait = late / (len(steps) // 2)  # (a span and its log are half the steps apart)
    assert read_run(steps, wait=wait, known=known) == logs_first()


def test_content_that_comes_after_its_bound_is_given_up() -> None:
    """A model call is kept for its content ``CONTENT_WAIT_SECONDS``: content that comes
    later is not read (the run stays as its spans alone read it)."""
    given_up = read_run(SPANS_FIRST, wait=CONTENT_WAIT_SECONDS + 1)
    assert given_up["terminal_state"].value == "no_response"
    assert given_up["signals"]["iterations"] == 4 and given_up["final_output"] is None


# -- an agent's trace: its root ends the run, a nested agent is a child run -----------------

def _call(key: str, tool: str = "lookup") -> dict[str, Any]:
    return {"role": "assistant", "finish_reason": "tool_call", "parts": [
        {"type": "tool_call", "id": f"call_{key}_{tool}", "name": tool,
         "arguments": {"key": key}}]}


def _text(text: str) -> dict[str, Any]:
    return {"role": "assistant", "finish_reason": "stop",
            "parts": [{"type": "text", "content": text}]}


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"type": "text", "content": text}]}


@functools.cache
def agent_trace() -> tuple[list[ExportTraceServiceRequest], list[ExportLogsServiceRequest]]:
    """A planner's run whose model calls carry their content only in log events: it asks for
    ``lookup`` twice with the same arguments (a repeat), the second fails, then asks a
    researcher (a nested agent, run as a tool: a child run) and answers. Its spans one
    request each, in the order they ended (root last); its events one request each, in the
    order its calls were made."""
    maker = SpanMaker()
    bare = {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 10,
            "gen_ai.usage.output_tokens": 5}
    calls: list[tuple[Any, list[dict[str, Any]], list[dict[str, Any]]]] = []
    history = [_user("Find a.")]
    with maker.agent("invoke_agent planner", {"gen_ai.agent.name": "planner"},
                     start=T0, end=T0 + 40) as root:
        calls.append((maker.span("chat m", bare, start=T0 + 1, end=T0 + 2), list(history),
                      [_call("a")]))
        maker.span("execute_tool lookup", tool_attrs("lookup", '{"key": "a"}', "1",
                   **{"gen_ai.tool.call.id": "call_a_lookup"}), start=T0 + 3, end=T0 + 4)
        history += [_call("a"), {"role": "tool", "parts": [{"type": "tool_call_response",
                                                             "id": "call_a_lookup",
                                                             "result": "1"}]}]
        calls.append((maker.span("chat m", bare, start=T0 + 5, end=T0 + 6), list(history),
                      [_call("a")]))
        maker.span("execute_tool lookup", tool_attrs("lookup", '{"key": "a"}'),
                   start=T0 + 7, end=T0 + 8, exception=RuntimeError("backend down for a"))
        history += [_call("a"), {"role": "tool", "parts": [{"type": "tool_call_response",
                                                             "id": "call_a_lookup",
                                                             "result": "error"}]}]
        calls.append((maker.span("chat m", bare, start=T0 + 9, end=T0 + 10), list(history),
                      [_call("a", "ask_researcher")]))
        tool = maker.open("execute_tool ask_researcher", tool_attrs(
            "ask_researcher", '{"key": "a"}'), parent=root, start=T0 + 11)
        researcher = maker.open("invoke_agent researcher", {
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "researcher"},
            parent=tool, start=T0 + 12)
        calls.append((maker.span("chat m", bare, parent=researcher, start=T0 + 13,
                                 end=T0 + 14), [_user("a?")], [_text("a is 1, says r.")]))
        researcher.end(end_time=int((T0 + 15) * 1e9))
        tool.end(end_time=int((T0 + 16) * 1e9))
        history += [_call("a", "ask_researcher")]
        calls.append((maker.span("chat m", bare, start=T0 + 17, end=T0 + 18), list(history),
                      [_text("a is 1.")]))
    spans = [encode([span]) for span in maker.take()]
    logs = [_event(span, inputs, outputs) for span, inputs, outputs in calls]
    return spans, logs


def _event(span: Any, inputs: list[dict[str, Any]], outputs: list[dict[str, Any]]
           ) -> ExportLogsServiceRequest:
    memory = InMemoryLogs()
    provider = LoggerProvider(resource=Resource.create({"service.name": "test-agent"}))
    provider.add_log_record_processor(SimpleLogRecordProcessor(memory))
    context = span.get_span_context()
    provider.get_logger("opentelemetry.util.genai").emit(LogRecord(
        event_name=DETAILS, trace_id=context.trace_id, span_id=context.span_id,
        trace_flags=context.trace_flags, attributes={
            "gen_ai.operation.name": "chat", "gen_ai.input.messages": inputs,
            "gen_ai.output.messages": outputs}))
    return ExportLogsServiceRequest.FromString(
        encode_logs(memory.get_finished_logs()).SerializeToString())


def read_agent_runs(order: Sequence[tuple[str, int]], pause: float = 0.0
                    ) -> dict[str, dict[str, Any]]:
    """The runs the service reads of :func:`agent_trace` sent in ``order`` (("spans" or
    "logs", index)) 0.1 s apart, with ``pause`` seconds more halfway, by agent."""
    spans, logs = agent_trace()
    clock = ManualClock(T0 + 60)
    service = WatchdogService(Config(), Store(":memory:"), clock=clock)

    async def deliver() -> None:
        for at, (kind, index) in enumerate(order):
            if kind == "spans":
                service.export(as_received(spans[index]), "http")
            else:
                assert await service.export_logs(_given(logs[index]), "http")
            clock.advance(0.1 + (pause if at == len(order) // 2 else 0.0))
            service.tick()
        clock.advance(LogJoin().content_wait_seconds + 1)
        service.tick()

    try:
        asyncio.run(deliver())
        assert service.core.newest_keys(True, None, 10) == []
        views = [service.view(key) for key in service.core.newest_keys(False, None, 10)]
    finally:
        service.store.close()
    runs: dict[str, dict[str, Any]] = {}
    for view in views:
        assert view is not None and view.agent not in runs
        runs[view.agent] = {
            "signals": {key: value for key, value in dict(view.signals).items()
                        if key not in TIMING},
            "terminal_state": view.terminal_state, "terminal_reason": view.terminal_reason,
            "final_output": view.final_output, "parent": view.parent_run is not None}
    return runs


def _agent_orders() -> dict[str, list[tuple[str, int]]]:
    spans, logs = (len(part) for part in agent_trace())
    span_steps = [("spans", i) for i in range(spans)]
    log_steps = [("logs", i) for i in range(logs)]
    mixed = []  # each call's log right after the span that ended after it
    for step in span_steps:
        mixed.append(step)
        if len(mixed) % 2 == 0 and log_steps[len(mixed) // 2 - 1:len(mixed) // 2]:
            mixed.append(log_steps[len(mixed) // 2 - 1])
    mixed += [step for step in log_steps if step not in mixed]
    return {"spans first": span_steps + log_steps,
            "spans first, logs in reverse": span_steps + log_steps[::-1],
            "root last": span_steps[:-1] + log_steps + span_steps[-1:],
            "interleaved": mixed,
            "logs between": span_steps[:4] + log_steps[2:] + span_steps[4:] + log_steps[:2]}


@functools.cache
def agent_logs_first() -> dict[str, dict[str, Any]]:
    spans, logs = agent_trace()
    return read_agent_runs([("logs", i) for i in range(len(logs))]
                           + [("spans", i) for i in range(len(spans))])


def test_the_agents_logs_first_reading_is_their_runs() -> None:
    runs = agent_logs_first()
    planner, researcher = runs["planner"], runs["researcher"]
    assert (planner["terminal_state"].value, planner["final_output"],
            planner["signals"]["iterations"], planner["signals"]["tool_calls"],
            planner["signals"]["errors"], planner["signals"]["repeated_tool_call"],
            planner["signals"]["messages"], planner["parent"]) == (
        "completed", "a is 1.", 4, 3, 1, 2, 7, False)
    assert "backend down for a" in planner["signals"]["last_error"]
    assert (researcher["terminal_state"].value, researcher["final_output"],
            researcher["signals"]["iterations"], researcher["parent"]) == (
        "completed", "a is 1, says r.", 1, True)


@pytest.mark.parametrize("pause", [0.0, LogJoin().wait_seconds + 1],
                         ids=["quick", "past-the-hold"])
@pytest.mark.parametrize("order", sorted(_agent_orders()))
def test_an_agents_runs_read_the_same_in_every_order(order: str, pause: float) -> None:
    """The root's span before the content of its calls (the run ends unanswered, then reads
    its answer; the child run's answer, come first, does not stand for the planner's own),
    the nested agent split off before or after its call's content came, held calls let go
    without their content (past the hold): the runs read as when the logs come first —
    answers, calls, messages, the repeat, the error's text."""
    assert read_agent_runs(_agent_orders()[order], pause) == agent_logs_first()


@pytest.mark.parametrize("steps", [SPANS_FIRST, BY_ONE_SPANS_FIRST], ids=["one", "by-one"])
def test_content_after_its_span_is_read_with_protobufs_own_parser(steps: list[Step]) -> None:
    """The spans read by protobuf's own parser (``native: false``), not the compiled decode:
    a span kept for its content is kept, and read again, the same."""
    before = decode.compiled is not None
    native.use_native(False)
    try:
        assert type(as_received(request_of(list(_spans())))) is ExportTraceServiceRequest
        assert read_run(steps) == logs_first()
    finally:
        native.use_native(before)
