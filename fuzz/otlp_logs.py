"""Fuzz target: OTLP logs (GenAI log events) -> decode (protobuf or OTLP/JSON) -> the
``LogJoin`` with the spans they name, in both orders -> records, the way the service applies
them (``watchdog/shell/service.py``: ``export_logs``, ``export``, the tick's ``expired``).

The contract: a payload is refused with ``DecodeError`` (a 400 with its message), or every span
sent with it ends as a record or a counted rejection once the waits are over, none left behind;
after each step the join is within its bounds (bytes, held traces, held spans, services, model
calls kept for their late content) and its byte count is the sum of what it holds; late content
is handed out with the span it belongs to. Any other exception is a crash.

    .venv/bin/python fuzz/otlp_logs.py -dict=fuzz/otlp.dict CORPUS -runs=1000000 -max_len=8192

The first byte of each input: ``% 4`` picks the route (0 protobuf bytes, 1 OTLP/JSON bytes, 2 a
request *built* from the rest of the input, sent as protobuf, 3 the same sent as OTLP/JSON with
raw bytes spliced into its strings as in ``fuzz/otlp_json.py``); bit 2 the order (the logs
before their spans, or the spans first, held because an earlier event named their service);
bit 3 whether spans are applied in slices; bits 4-5 the join's bounds. The spans are made from
the decoded logs (a model call per log record's trace and span id, an agent span over each
trace); on the built routes the rest of the input shapes them. The seeds are
``fuzz/corpus/otlp_logs/`` (``fuzz/make_corpus.py``).
"""

from __future__ import annotations

import base64
import json
import re
import sys
from typing import Any

import atheris
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

with atheris.instrument_imports(include=["watchdog"]):
    from watchdog.core.spans.attributes import WANTED_ATTRIBUTES
    from watchdog.core.spans.decode import DecodeError
    from watchdog.core.spans.logs import (
        CONTENT_EVENTS,
        MAX_SERVICES,
        MAX_UNREAD_SPANS,
        LogJoin,
        parse_logs_json,
        parse_logs_protobuf,
    )
    from watchdog.core.spans.pipeline import Decoded, late_content, released, slices_of

NOW = 1_900_000_000.0
NS = 1_000_000_000
WAIT = 2.0  # a span waits for its content
CONTENT_WAIT = 10.0  # content waits for its span
# the join's bounds, by bits 4-5 of the first byte: (max_bytes, held traces, held spans)
BOUNDS = [(1 << 20, 64, 256), (2048, 3, 6), (512, 1, 2), (1, 2, 4)]
MAX_SPANS = 24  # spans made for one input
DETAILS = "gen_ai.client.inference.operation.details"
EVENTS = [DETAILS, DETAILS, *sorted(CONTENT_EVENTS), "gen_ai.choice", "event", ""]
SERVICES = ["agent", "agent", "other", "", "x" * 300]
CONTENT = ["gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.input.messages_delta",
           "gen_ai.response.finish_reasons", "gen_ai.system_instructions"]
KEYS = [*CONTENT, *CONTENT, *sorted(WANTED_ATTRIBUTES), "event.name", "other"]
TRACE_IDS = [bytes(range(1, 17)), bytes(range(2, 18)), b"\xff" * 16, bytes(16), b"",
             bytes(range(1, 16)), bytes(range(1, 18))]
SPAN_IDS = [bytes(range(1, 9)), bytes(range(2, 10)), bytes(range(3, 11)), b"\xff" * 8,
            bytes(8), b"", bytes(range(1, 8)), bytes(range(1, 10))]
_TEXT = {"type": "text", "content": "a is 1."}
_CALL = {"type": "tool_call", "id": "call_a", "name": "lookup", "arguments": {"key": "a"}}
# content as util-genai writes it (structured) and as some SDKs do (a JSON string)
MESSAGES: list[Any] = [
    [{"role": "user", "parts": [{"type": "text", "content": "Look up a."}]}],
    [{"role": "assistant", "finish_reason": "stop", "parts": [_TEXT]}],
    [{"role": "assistant", "finish_reason": "tool_call", "parts": [_CALL]}],
    [{"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_a", "result": 1}]}],
    [{"role": "assistant", "parts": []}], [{}], [], [None], {"role": "user"}, ["stop"],
]
STRINGS = [json.dumps(messages) for messages in MESSAGES] + [
    "inf", "nan", "1e999", "-5", "{}", "[]", "null", '"', '"\\"x\\""', '"\\ud800"', '"unclosed',
    '[{"role": "user", "parts": [{"type": "text", "content": "' + "x" * 400 + '"}]}]', "\x00"]
# spliced into strings, as in fuzz/otlp_json.py: UTF-8-encoded surrogates, stray continuation
# and lead bytes, overlong and beyond-U+10FFFF forms, escapes of surrogates and NUL, and what
# ends a string early
FRAGMENTS = [b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xed\xb0\x80x", b"\x80", b"\xc3", b"\xff",
             b"\xc0\xaf", b"\xe0\x80\xaf", b"\xf4\x90\x80\x80", b"\xf0\x9f\x98\x80",
             b"\\ud800", b"\\udfff\\ud800", b"\\u0000", b'\\"', b'"', b"\\", b"\x00",
             b"\xef\xbb\xbf"]


def _python(value: object, out: AnyValue) -> None:
    """``value`` (JSON-like) as the SDK encodes an attribute: maps as kvlists, lists as arrays."""
    if isinstance(value, dict):
        for key, item in value.items():
            _python(item, out.kvlist_value.values.add(key=key).value)
    elif isinstance(value, list):
        out.array_value.SetInParent()
        for item in value:
            _python(item, out.array_value.values.add())
    elif isinstance(value, bool):
        out.bool_value = value
    elif isinstance(value, int):
        out.int_value = value
    elif isinstance(value, str):
        out.string_value = value
    # None: an AnyValue with no value set


def _value(data: atheris.FuzzedDataProvider, out: AnyValue, depth: int = 0) -> None:
    """An AnyValue of every type (unset included), content of the conventions' shapes often."""
    kind = data.ConsumeIntInRange(0, 10 if depth < 2 else 7)
    if kind == 0:
        out.int_value = data.ConsumeIntInRange(-(2**63), 2**63 - 1)
    elif kind == 1:
        out.double_value = data.ConsumeFloat()  # often NaN, +-inf, huge, tiny
    elif kind == 2:
        out.bool_value = data.ConsumeBool()
    elif kind == 3:
        out.bytes_value = data.ConsumeBytes(data.ConsumeIntInRange(0, 8))
    elif kind == 4:
        out.string_value = data.PickValueInList(STRINGS)
    elif kind == 5:
        out.string_value = data.ConsumeUnicodeNoSurrogates(32)
    elif kind == 6:
        _python(data.PickValueInList(MESSAGES), out)
    elif kind == 7:
        pass  # no value
    elif kind == 8:
        out.array_value.SetInParent()
        for _ in range(data.ConsumeIntInRange(0, 3)):
            _value(data, out.array_value.values.add(), depth + 1)
    else:
        out.kvlist_value.SetInParent()
        for _ in range(data.ConsumeIntInRange(0, 3)):
            kv = out.kvlist_value.values.add(key=data.PickValueInList(
                ["role", "parts", "type", "content", "finish_reason", "name", "id", "x"]))
            _value(data, kv.value, depth + 1)


def built_logs(data: atheris.FuzzedDataProvider) -> ExportLogsServiceRequest:
    """A small OTLP logs request: resources, scopes, records with event names (the field or
    the older ``event.name`` attribute), ids of right and wrong lengths, bodies and attributes
    of every AnyValue type."""
    request = ExportLogsServiceRequest()
    for _ in range(data.ConsumeIntInRange(1, 3)):
        resource_logs = request.resource_logs.add()
        if data.ConsumeBool():
            service = resource_logs.resource.attributes.add(key="service.name").value
            if data.ConsumeIntInRange(0, 7):
                service.string_value = data.PickValueInList(SERVICES)
            else:
                _value(data, service)
        for _ in range(data.ConsumeIntInRange(0, 2)):
            _value(data, resource_logs.resource.attributes.add(
                key=data.PickValueInList(KEYS)).value)
        for _ in range(data.ConsumeIntInRange(1, 2)):
            scope_logs = resource_logs.scope_logs.add()
            scope_logs.scope.name = data.PickValueInList(["opentelemetry.util.genai", ""])
            for _ in range(data.ConsumeIntInRange(0, 4)):
                record = scope_logs.log_records.add(
                    trace_id=data.PickValueInList(TRACE_IDS),
                    span_id=data.PickValueInList(SPAN_IDS),
                    time_unix_nano=data.ConsumeIntInRange(0, 2**64 - 1),
                    severity_number=data.ConsumeIntInRange(0, 24),
                    flags=data.ConsumeIntInRange(0, 2**32 - 1))
                name = data.PickValueInList(EVENTS)
                how = data.ConsumeIntInRange(0, 3)
                if how < 2:
                    record.event_name = name
                if how > 0:
                    event = record.attributes.add(key="event.name").value
                    if how == 2:
                        event.string_value = name
                    else:
                        _value(data, event)
                if data.ConsumeBool():
                    _value(data, record.body)
                for _ in range(data.ConsumeIntInRange(0, 5)):
                    _value(data, record.attributes.add(key=data.PickValueInList(KEYS)).value)
    return request


def as_json(request: ExportLogsServiceRequest, data: atheris.FuzzedDataProvider) -> bytes:
    """``request`` in OTLP/JSON (hex ids, as the spec asks), then raw bytes spliced in at the
    start of some of its strings (field names and values alike)."""
    document = MessageToDict(request)
    for resource in document.get("resourceLogs", ()):
        for scope in resource.get("scopeLogs", ()):
            for record in scope.get("logRecords", ()):
                for key in ("traceId", "spanId"):
                    if key in record:
                        record[key] = base64.b64decode(record[key]).hex()
    body = json.dumps(document).encode()
    quotes = [match.start() for match in re.finditer(b'"', body)] or [0]
    for _ in range(data.ConsumeIntInRange(0, 3)):
        at = data.PickValueInList(quotes) + 1
        cut = data.ConsumeIntInRange(0, 4)  # bytes of the string replaced
        insert = (data.PickValueInList(FRAGMENTS) if data.ConsumeBool()
                  else data.ConsumeBytes(data.ConsumeIntInRange(1, 6)))
        body = body[:at] + insert + body[at + cut:]
        quotes = [index for index in quotes if index < at] or [0]
    return body


def spans_for(logs: ExportLogsServiceRequest, data: atheris.FuzzedDataProvider | None
              ) -> tuple[ExportTraceServiceRequest, int]:
    """The spans ``logs`` names, and how many: for each log record a model call with its trace
    and span id and no content of its own, from the log's resource, under an agent span that
    ends after it. On the built routes ``data`` varies each: a call with content of its own, a
    call no log names, a tool call, a loose call; the agent span first, last or absent; the
    resource's service one no GenAI event named."""
    def pick(top: int) -> int:  # 0, the plain case, on the raw routes
        return data.ConsumeIntInRange(0, top) if data is not None else 0

    request = ExportTraceServiceRequest()
    made = 0
    rooted: set[bytes] = set()  # traces with their agent span (one a trace: another resource's
    #                             would be its copy, dropped unreported as a copy is)
    start = int(NOW * NS)
    for resource_logs in logs.resource_logs:
        resource_spans = request.resource_spans.add()
        resource_spans.resource.CopyFrom(resource_logs.resource)
        if pick(3) == 3:  # (a repeated key: its last value is read)
            resource_spans.resource.attributes.add(key="service.name").value.string_value = \
                "quiet"
        scope_spans = resource_spans.scope_spans.add()
        scope_spans.scope.name = "agent"
        calls: list[Span] = []
        roots: dict[bytes, bytes] = {}  # trace id -> its agent span's id
        for scope_logs in resource_logs.scope_logs:
            for record in scope_logs.log_records:
                if made >= MAX_SPANS:
                    break
                trace_id, span_id = bytes(record.trace_id), bytes(record.span_id)
                root = roots.setdefault(trace_id, (b"r" + trace_id)[:8].ljust(8, b"r"))
                shape = pick(4)
                span = Span(name="chat m", trace_id=trace_id, span_id=span_id,
                            parent_span_id=root, start_time_unix_nano=start + made * 1000,
                            end_time_unix_nano=start + made * 1000 + 500)
                operation = "chat"
                if shape == 1:
                    span.attributes.add(key="gen_ai.output.messages").value.string_value = \
                        STRINGS[1]
                elif shape == 2:
                    span.span_id = bytes(byte ^ 0x55 for byte in span_id)
                elif shape == 3:
                    span.name, operation = "execute_tool lookup", "execute_tool"
                    span.attributes.add(key="gen_ai.tool.name").value.string_value = "lookup"
                elif shape == 4:
                    span.ClearField("parent_span_id")
                span.attributes.add(key="gen_ai.operation.name").value.string_value = operation
                span.attributes.add(key="gen_ai.usage.input_tokens").value.int_value = 10
                calls.append(span)
                made += 1
        for trace_id, root_id in roots.items():
            where = pick(2)  # 0 after its calls (as they end), 1 before, 2 none
            if where == 2 or made >= MAX_SPANS or trace_id in rooted:
                continue
            rooted.add(trace_id)
            root = Span(name="invoke_agent a", trace_id=trace_id, span_id=root_id,
                        start_time_unix_nano=start - 1000, end_time_unix_nano=start + 10**9)
            root.attributes.add(key="gen_ai.operation.name").value.string_value = "invoke_agent"
            root.attributes.add(key="gen_ai.agent.name").value.string_value = "a"
            calls.insert(0 if where else len(calls), root)
            made += 1
        scope_spans.spans.extend(calls)
    return request, made


def announced(logs: ExportLogsServiceRequest) -> ExportLogsServiceRequest:
    """An earlier GenAI event (no span named) of each resource of ``logs``: their services
    are known to send them before their spans come."""
    earlier = ExportLogsServiceRequest()
    for resource_logs in logs.resource_logs:
        resource = earlier.resource_logs.add()
        resource.resource.CopyFrom(resource_logs.resource)
        resource.scope_logs.add().log_records.add(event_name=DETAILS)
    return earlier


class Service:
    """The join and what was applied, step by step as ``watchdog/shell/service.py`` takes them,
    the join checked after each."""

    def __init__(self, bounds: tuple[int, int, int], size: int | None) -> None:
        max_bytes, max_traces, max_spans = bounds
        self.join = LogJoin(wait_seconds=WAIT, content_wait_seconds=CONTENT_WAIT,
                            max_bytes=max_bytes, max_held_traces=max_traces,
                            max_held_spans=max_spans)
        self.size = size
        self.records = 0
        self.rejected = 0

    def _take(self, decoded: Decoded) -> None:
        assert decoded.rejected_count == 0 or decoded.message()
        self.records += len(decoded.records)
        self.rejected += decoded.rejected_count

    def export_logs(self, logs: ExportLogsServiceRequest, now: float) -> None:
        ready = self.join.add(logs, now)
        if ready:
            self._take(released(ready, self.join, now))
        for record, reread in late_content(self.join):  # content of a call applied without it
            assert record.span_id == reread.span_id and record.trace_id == reread.trace_id
        self.check()

    def export(self, spans: ExportTraceServiceRequest, now: float) -> None:
        for part in slices_of(spans, self.size, self.join, now):
            self._take(part)
        self.check()

    def tick(self, now: float) -> None:
        due = self.join.expired(now)
        if due:
            self._take(released(due, self.join, now))
        self.check()

    def check(self) -> None:
        """The join's bounds and its accounting (what it holds is no part of its API)."""
        join = self.join
        held = join._held.values()
        assert 0 <= join._bytes <= join.max_bytes, (join._bytes, join.max_bytes)
        assert join._bytes == sum(size for _, size, _ in join._content.values()) + sum(
            trace.size for trace in held) + sum(len(unread.span) for unread in
                                                join._unread.values()), \
            "the join's byte count is not what it holds"
        assert len(join._unread) <= MAX_UNREAD_SPANS and not join.late
        assert len(join._held) <= join.max_held_traces
        assert join._held_spans == sum(
            isinstance(item, tuple) for trace in held for item in trace.items)
        assert join._held_spans <= join.max_held_spans
        assert len(join._services) <= MAX_SERVICES
        assert not join.overflow, "held traces pushed out by the bounds were not applied"


def test_one_input(data: bytes) -> None:
    if not data:
        return
    route, logs_first = data[0] % 4, not data[0] & 4
    provider = atheris.FuzzedDataProvider(data[1:]) if route >= 2 else None
    try:
        if provider is None:
            logs = (parse_logs_json if route == 1 else parse_logs_protobuf)(data[1:])
        else:
            built = built_logs(provider)
            logs = (parse_logs_protobuf(built.SerializeToString()) if route == 2
                    else parse_logs_json(as_json(built, provider)))
    except DecodeError as exc:
        assert str(exc)
        return
    spans, sent = spans_for(logs, provider)
    service = Service(BOUNDS[(data[0] >> 4) & 3], 2 if data[0] & 8 else None)
    if logs_first:
        service.export_logs(logs, NOW)
        service.export(spans, NOW + 0.5)
    else:
        service.export_logs(announced(logs), NOW)
        service.export(spans, NOW)
        service.export_logs(logs, NOW + 0.5)
    service.tick(NOW + 1)  # no wait over yet
    service.tick(NOW + 1 + CONTENT_WAIT)  # every wait over
    # ... and the wait of the calls those waits let go on without content: nothing is left
    service.tick(NOW + 1 + 2 * CONTENT_WAIT)
    join = service.join
    assert not join._held and not join._content and join._bytes == 0 and join._held_spans == 0
    assert not join._unread
    assert service.records + service.rejected == sent, (service.records, service.rejected, sent)


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
