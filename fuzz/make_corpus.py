"""Write the seed corpus of the fuzz targets (valid inputs of each shape) into fuzz/corpus/."""

from __future__ import annotations

import base64
import json
import sys
import time
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry._logs import LogRecord
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource

try:  # (the SDK renamed it)
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter as InMemoryLogs
except ImportError:  # pragma: no cover
    from opentelemetry.sdk._logs.export import InMemoryLogExporter as InMemoryLogs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.spans import SpanMaker, chat_attrs, encode, tool_attrs
from tests.test_otlp_http import request_json

HERE = Path(__file__).resolve().parent / "corpus"
DETAILS = "gen_ai.client.inference.operation.details"


def main() -> None:
    maker = SpanMaker({"watchdog.budget.max_tool_calls": 5})
    t = time.time()
    with maker.agent("invoke_agent a", {"gen_ai.agent.name": "a", "watchdog.session.id": "s"},
                     start=t, end=t + 9):
        maker.span("chat m", chat_attrs(100, 20, finish="tool_calls",
                                        **{"gen_ai.input.messages": '[{"role": "user"}]'}),
                   start=t + 1)
        maker.span("execute_tool f", tool_attrs("f", '{"q": "x", "password": "p4ssw0rd"}',
                                                "ok"), start=t + 2)
        maker.span("execute_tool f", tool_attrs("f", "{}"), start=t + 3, error="boom 7")
    request = encode(maker.take())
    (HERE / "ingest" / "protobuf").write_bytes(b"\0" + request.SerializeToString())
    (HERE / "ingest" / "json").write_bytes(b"\1" + request_json(request))
    # numbers of every type where numbers are read: token counts and budgets
    maker.span("chat m", {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 10.5,
                          "gen_ai.usage.output_tokens": "7", "watchdog.run.id": "r{1}",
                          "watchdog.budget.max_iterations": 3.5}, start=t)
    numbers = encode(maker.take())
    (HERE / "ingest" / "numbers-protobuf").write_bytes(b"\0" + numbers.SerializeToString())
    (HERE / "ingest" / "numbers-json").write_bytes(b"\1" + request_json(numbers))
    for seed in range(4):  # route 2: the bytes only steer the builder
        (HERE / "ingest" / f"built-{seed}").write_bytes(bytes([2]) + bytes(range(seed, 200)))
    # fuzz/otlp_json.py: odd first byte: a built document, even: JSON bytes as they are
    (HERE / "otlp_json").mkdir(exist_ok=True)
    for name in ("json", "numbers-json"):
        (HERE / "otlp_json" / name).write_bytes(b"\0" + (HERE / "ingest" / name).read_bytes()[1:])
    for seed in range(4):
        (HERE / "otlp_json" / f"built-{seed}").write_bytes(bytes([1]) + bytes(range(seed, 200)))
    (HERE / "otlp_json" / "surrogate-key").write_bytes(
        b'\0{"resourceSpans": [{"scopeSpans": [{"spans": [{"\xed\xa0\x80": 1}]}]}]}')
    bodies = {
        "heartbeat": (0, {"messages": 3, "in_flight": 1, "oldest_call_started": t,
                          "announce": {"agent": "a", "session": "s", "parent_run": "p",
                                       "budget": {"max_tool_calls": 5, "max_seconds": 60.5}}}),
        "ack": (1, {"seq": 7}),
        "checkpoint": (2, {"remaining": "deploy", "state": {"path": "/srv", "n": 2, "ok": True,
                                                            "gone": None},
                           "failed_approaches": ["retry"], "run_id": "r"}),
    }
    for name, (route, body) in bodies.items():
        (HERE / "control" / name).write_bytes(bytes([route]) + json.dumps(body).encode())
    log_seeds(t)


def log_seeds(t: float) -> None:
    """fuzz/otlp_logs.py: what the SDK's OTLP log exporter sends for a run's model calls'
    ``gen_ai.client.inference.operation.details`` events (content structured, as
    opentelemetry-util-genai writes it), as protobuf (route 0) and OTLP/JSON (1), the logs
    before their spans and after (bit 2), spans in slices (bit 3), tight bounds (bits 4-5);
    and inputs that steer the built routes (2 protobuf, 3 OTLP/JSON)."""
    maker = SpanMaker()
    memory = InMemoryLogs()
    provider = LoggerProvider(resource=Resource.create({"service.name": "test-agent"}))
    provider.add_log_record_processor(SimpleLogRecordProcessor(memory))
    logger = provider.get_logger("opentelemetry.util.genai")
    user = {"role": "user", "parts": [{"type": "text", "content": "Look up a."}]}
    call = {"type": "tool_call", "id": "call_a", "name": "lookup", "arguments": {"key": "a"}}
    outputs: list[dict[str, Any]] = [
        {"role": "assistant", "finish_reason": "tool_call", "parts": [call]},
        {"role": "assistant", "finish_reason": "stop",
         "parts": [{"type": "text", "content": "a is 1."}]}]
    with maker.agent("invoke_agent a", {"gen_ai.agent.name": "a"}, start=t, end=t + 9):
        for step, output in enumerate(outputs):
            span = maker.span("chat m", chat_attrs(10, 5), start=t + 1 + step)
            context = span.get_span_context()
            logger.emit(LogRecord(
                event_name=DETAILS, trace_id=context.trace_id, span_id=context.span_id,
                trace_flags=context.trace_flags,
                attributes={"gen_ai.operation.name": "chat", "gen_ai.input.messages": [user],
                            "gen_ai.output.messages": [output]}))
    # the older form: the event's name as an attribute
    logger.emit(LogRecord(attributes={"event.name": DETAILS,
                                      "gen_ai.output.messages": json.dumps(outputs[1:])}))
    request = encode_logs(memory.get_finished_logs())
    document = MessageToDict(request)
    for resource in document["resourceLogs"]:
        for scope in resource["scopeLogs"]:
            for record in scope["logRecords"]:
                for key in ("traceId", "spanId"):
                    if key in record:
                        record[key] = base64.b64decode(record[key]).hex()
    protobuf, as_json = request.SerializeToString(), json.dumps(document).encode()
    folder = HERE / "otlp_logs"
    folder.mkdir(exist_ok=True)
    for name, first, body in (("protobuf", 0, protobuf), ("protobuf-spans-first", 4, protobuf),
                              ("protobuf-tight", 0x28, protobuf), ("json", 1, as_json),
                              ("json-spans-first-sliced", 0x1D, as_json)):
        (folder / name).write_bytes(bytes([first]) + body)
    for seed, first in enumerate((2, 3, 0x1E, 0x2F)):
        (folder / f"built-{seed}").write_bytes(bytes([first]) + bytes(range(seed, 250)))


if __name__ == "__main__":
    main()
