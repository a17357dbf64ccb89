"""GenAI log events over OTLP logs: the same run read from span content and from log-record
content gives the same signals.

A real OpenTelemetry SDK makes one agent run twice: once with each model call's content (its
messages in and out, the tool calls it asks for, its finish reason) on the span, once with it on
a ``gen_ai.client.inference.operation.details`` log record of that span, as the conventions'
newest text and opentelemetry-util-genai (``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=
event_only``) send it. The SDK's own OTLP exporters send the spans (HTTP) and the logs (HTTP
protobuf, gRPC, or OTLP/JSON) to a running sidecar, the logs before the spans or after them.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from google.protobuf.json_format import MessageToDict
from opentelemetry import trace
from opentelemetry._logs import LogRecord
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import (
    OTLPLogExporter as GrpcLogExporter,
)
from opentelemetry.exporter.otlp.proto.http._log_exporter import (
    OTLPLogExporter as HttpLogExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    LogRecordExporter,
    LogRecordExportResult,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from prometheus_client.parser import text_string_to_metric_families

from tests.harness import (
    RunningServer,
    http_request,
    run_detail,
    running_server,
    sidecar_config,
    wait_until,
)

DETAILS = "gen_ai.client.inference.operation.details"
ANSWER = "a is 1 and b is 2."
# Signals that tell which run and when, not what it did: they differ between any two runs
TIMING = frozenset({"id", "trace_id", "service", "elapsed_seconds", "idle_seconds",
                    "seconds_since_progress", "in_flight_seconds", "seconds_since_last_span"})


class JsonLogExporter(LogRecordExporter):
    """OTLP/JSON logs (the Python SDK ships no JSON exporter): the SDK's own encoding, its ids
    written as hex as OTLP/JSON asks, posted to ``/v1/logs``."""

    def __init__(self, url: str) -> None:
        self.url = url

    def export(self, batch: Any) -> LogRecordExportResult:
        document = MessageToDict(encode_logs(batch))
        for resource in document.get("resourceLogs", ()):
            for scope in resource.get("scopeLogs", ()):
                for record in scope.get("logRecords", ()):
                    for key in ("traceId", "spanId"):
                        if key in record:
                            record[key] = base64.b64decode(record[key]).hex()
        status, _ = http_request("POST", self.url, json.dumps(document).encode(),
                                 {"Content-Type": "application/json"})
        return LogRecordExportResult.SUCCESS if status == 200 else LogRecordExportResult.FAILURE

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True

    def shutdown(self) -> None:
        pass


def _log_exporter(sidecar: RunningServer, protocol: str) -> LogRecordExporter:
    if protocol == "grpc":
        return GrpcLogExporter(endpoint=sidecar.grpc_target, insecure=True, timeout=10)
    if protocol == "json":
        return JsonLogExporter(sidecar.otlp_http + "/v1/logs")
    return HttpLogExporter(endpoint=sidecar.otlp_http + "/v1/logs", timeout=10)


@contextmanager
def providers(sidecar: RunningServer, service: str, protocol: str
              ) -> Iterator[tuple[TracerProvider, LoggerProvider]]:
    resource = Resource.create({"service.name": service})
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(BatchSpanProcessor(
        OTLPSpanExporter(endpoint=sidecar.otlp_http + "/v1/traces", timeout=10),
        schedule_delay_millis=60_000))  # flushed by the test, in the order it wants
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(BatchLogRecordProcessor(
        _log_exporter(sidecar, protocol), schedule_delay_millis=60_000))
    try:
        yield tracer_provider, logger_provider
    finally:
        tracer_provider.shutdown()
        logger_provider.shutdown()


def _call(name: str, key: str) -> dict[str, Any]:
    return {"type": "tool_call", "id": f"call_{key}", "name": name, "arguments": {"key": key}}


# The conversation of the run, call by call: (input messages, output messages)
def _conversation() -> list[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    user = {"role": "user", "parts": [{"type": "text", "content": "Look up a and b."}]}
    calls: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]] = []
    history = [user]
    for key in ("a", "a", "b"):  # the model asks for a twice: a repeated tool call
        out = {"role": "assistant", "parts": [_call("lookup", key)],
               "finish_reason": "tool_call"}
        calls.append((list(history), [out]))
        history += [{"role": "assistant", "parts": [_call("lookup", key)]},
                    {"role": "tool", "parts": [{"type": "tool_call_response",
                                                "id": f"call_{key}", "result": key}]}]
    calls.append((list(history), [{"role": "assistant", "finish_reason": "stop",
                                   "parts": [{"type": "text", "content": ANSWER}]}]))
    return calls


def make_run(tracer_provider: TracerProvider, logger_provider: LoggerProvider,
             content_on: str) -> str:
    """One agent run; each model call's content on its span (``"span"``) or on its log event
    (``"log"``); the run's id."""
    tracer = tracer_provider.get_tracer("agent")
    logger = logger_provider.get_logger("opentelemetry.util.genai")
    with tracer.start_as_current_span("invoke_agent researcher", attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "researcher"}) as root:
        for inputs, outputs in _conversation():
            with tracer.start_as_current_span("chat fake-model", attributes={
                    "gen_ai.operation.name": "chat", "gen_ai.request.model": "fake-model",
                    "gen_ai.usage.input_tokens": 100,
                    "gen_ai.usage.output_tokens": 10}) as span:
                if content_on == "span":
                    span.set_attribute("gen_ai.input.messages", json.dumps(inputs))
                    span.set_attribute("gen_ai.output.messages", json.dumps(outputs))
                else:  # as util-genai does: the event, in the span's context, before its end
                    logger.emit(LogRecord(event_name=DETAILS, attributes={
                        "gen_ai.operation.name": "chat",
                        "gen_ai.input.messages": inputs, "gen_ai.output.messages": outputs}))
            call = outputs[0]["parts"][0]
            if call["type"] == "tool_call":
                with tracer.start_as_current_span("execute_tool lookup", attributes={
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.name": "lookup", "gen_ai.tool.call.id": call["id"],
                        "gen_ai.tool.call.arguments": json.dumps(call["arguments"]),
                        "gen_ai.tool.call.result": call["arguments"]["key"]}):
                    pass
        trace_id = root.get_span_context().trace_id
    return f"trace:{trace.format_trace_id(trace_id)}"


def ended_run(sidecar: RunningServer, run_id: str) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        detail = run_detail(sidecar.api, run_id)
        return detail if detail is not None and detail.get("state") == "ended" else None
    found: dict[str, Any] = wait_until(ended, what=f"run {run_id} ended", timeout=20)
    return found


def what_it_did(run: dict[str, Any]) -> dict[str, Any]:
    signals = {key: value for key, value in run["signals"].items() if key not in TIMING}
    return {"signals": signals, "terminal_state": run["terminal_state"],
            "final_output": run.get("final_output")}


@pytest.mark.parametrize(("protocol", "logs_first"), [
    ("http", True), ("http", False), ("grpc", True), ("grpc", False), ("json", True)])
def test_span_content_and_log_content_give_the_same_signals(
        sidecar: RunningServer, protocol: str, logs_first: bool) -> None:
    with providers(sidecar, "agent-spans", protocol) as (tracer_provider, logger_provider):
        from_spans = make_run(tracer_provider, logger_provider, "span")
        tracer_provider.force_flush()
    with providers(sidecar, "agent-logs", protocol) as (tracer_provider, logger_provider):
        if not logs_first:
            # a service known to send GenAI events: its model calls wait for their content
            make_run(tracer_provider, logger_provider, "log")
            logger_provider.force_flush()
            tracer_provider.force_flush()
        from_logs = make_run(tracer_provider, logger_provider, "log")
        first, second = (logger_provider, tracer_provider) if logs_first else (
            tracer_provider, logger_provider)
        first.force_flush()
        if not logs_first:  # the spans are in, held for their content
            wait_until(lambda: sidecar.call(lambda: sidecar.server.service.log_join.held_traces),
                       what="the trace held for its content")
            assert run_detail(sidecar.api, from_logs) is None
        second.force_flush()
    spans_run, logs_run = ended_run(sidecar, from_spans), ended_run(sidecar, from_logs)
    assert what_it_did(logs_run) == what_it_did(spans_run)
    _is_the_run_itself(spans_run)


def _is_the_run_itself(spans_run: dict[str, Any]) -> None:
    """What the run with its content on its spans did is the run itself: its answer, its
    calls, the repeat."""
    signals = spans_run["signals"]
    assert (spans_run["terminal_state"], signals["iterations"], signals["tool_calls"],
            signals["messages"], signals["has_final_answer"]) == ("completed", 4, 3, 8, True)
    assert signals["repeated_tool_call"] == 2


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_spans_before_the_services_first_event_read_their_content_when_it_comes(
        sidecar: RunningServer, protocol: str) -> None:
    """The service's first run: its spans (the root among them) come before any of its log
    events, so nothing holds them: the run ends at once, unanswered; its calls' content,
    come after, is read into it, and it reads as the run read from its spans' content."""
    with providers(sidecar, "agent-spans-first", protocol) as (tracer_provider, logger_provider):
        from_spans = make_run(tracer_provider, logger_provider, "span")
        tracer_provider.force_flush()
    spans_run = ended_run(sidecar, from_spans)
    _is_the_run_itself(spans_run)
    with providers(sidecar, "agent-first-events", protocol) as (tracer_provider,
                                                                 logger_provider):
        from_logs = make_run(tracer_provider, logger_provider, "log")
        tracer_provider.force_flush()
        unanswered = ended_run(sidecar, from_logs)  # its root ended it: no content yet
        assert (unanswered["terminal_state"], unanswered["signals"]["messages"]) == (
            "no_response", 0)
        logger_provider.force_flush()
    expected = what_it_did(spans_run)
    wait_until(lambda: what_it_did(ended_run(sidecar, from_logs)) == expected,
               what="the run read with its content", timeout=20)


def log_content(sidecar: RunningServer) -> dict[str, float]:
    """``agent_watchdog_log_content_total`` as /metrics shows it: outcome -> count."""
    status, body = http_request("GET", sidecar.metrics + "/metrics")
    assert status == 200
    return {sample.labels["outcome"]: sample.value
            for family in text_string_to_metric_families(body.decode())
            if family.name == "agent_watchdog_log_content"
            for sample in family.samples if sample.name.endswith("_total")}


def test_how_each_calls_content_was_read_is_counted(sidecar: RunningServer) -> None:
    """Shown at 0 from the start; a service's first run, its spans before its first events:
    its four calls' content read late; its next run, its events first: read with the spans."""
    assert log_content(sidecar) == {"with_span": 0, "late": 0, "dropped": 0}
    with providers(sidecar, "agent-counted", "http") as (tracer_provider, logger_provider):
        first = make_run(tracer_provider, logger_provider, "log")
        tracer_provider.force_flush()
        ended_run(sidecar, first)
        logger_provider.force_flush()
        wait_until(lambda: log_content(sidecar)["late"] == 4, "the content read late")
        second = make_run(tracer_provider, logger_provider, "log")
        logger_provider.force_flush()
        tracer_provider.force_flush()
        ended_run(sidecar, second)
    assert log_content(sidecar) == {"with_span": 4, "late": 4, "dropped": 0}

def test_without_its_log_a_call_is_read_with_what_its_span_has(
        sidecar: RunningServer) -> None:
    """The log never comes (content capture off for it, an exporter that failed): the held
    trace goes on after the wait, its model calls read without content."""
    with providers(sidecar, "agent-lost-logs", "http") as (tracer_provider, logger_provider):
        make_run(tracer_provider, logger_provider, "log")
        logger_provider.force_flush()
        tracer_provider.force_flush()
        lost = make_run(tracer_provider, logger_provider, "log")
        tracer_provider.force_flush()  # its logs are never sent
        run = ended_run(sidecar, lost)
        assert run["terminal_state"] == "no_response" and run["signals"]["iterations"] == 4


def test_logs_have_the_limits_traces_have(tmp_path: Any) -> None:
    """The size limit, the media types and the content codings of a trace export."""
    with running_server(sidecar_config(tmp_path / "state", max_request_bytes=1024)) as sidecar:
        url = sidecar.otlp_http + "/v1/logs"
        big = encode_logs([]).SerializeToString() + b"\n\x00" * 600  # (valid or not: too big)
        status, _ = http_request("POST", url, big, {"Content-Type": "application/x-protobuf"})
        assert status == 413
        status, _ = http_request("POST", url, b"{}", {"Content-Type": "text/plain"})
        assert status == 415
        status, _ = http_request("POST", url, b"{}", {"Content-Type": "application/json",
                                                      "Content-Encoding": "br"})
        assert status == 415
        status, body = http_request("POST", url, b'{"resourceLogs": [{"scopeLogs": [{'
                                    b'"logRecords": [{"traceId": "zz"}]}]}]}',
                                    {"Content-Type": "application/json"})
        # an id that is not hex is no id, as in traces (a protobuf id of the wrong length):
        # the record names no span, and the request is no error
        assert (status, body) == (200, b"{}")
