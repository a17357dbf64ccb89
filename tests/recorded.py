"""Reading the committed recordings of real frameworks (``tests/frameworks/recordings``) back
into span records, for tests of what the normaliser makes of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from watchdog.core.runs.terminal import short_type
from watchdog.core.spans.decode import ExportTraceServiceRequest, parse_json
from watchdog.core.spans.pipeline import records_from
from watchdog.core.spans.record import AGENT, LLM, OTHER, TOOL, SpanRecord

RECORDINGS = Path(__file__).resolve().parent / "frameworks" / "recordings"


def recording(driver: str, scenario: str) -> Path:
    path = RECORDINGS / driver / f"{scenario}.jsonl"
    assert path.exists(), f"{path} is missing: it is committed with the framework tests"
    return path


def recorded_lines(driver: str, scenario: str) -> list[str]:
    return [line for line in recording(driver, scenario).read_text("utf-8").splitlines()
            if line.strip()]


def records_of_lines(lines: list[str]) -> list[SpanRecord]:
    records: list[SpanRecord] = []
    for line in lines:
        decoded = records_from(parse_json(line.encode()))
        assert not decoded.rejected, decoded.message()
        records.extend(decoded.records)
    return records


def recorded_records(driver: str, scenario: str) -> list[SpanRecord]:
    """Every span of a recording, normalised, in the order the framework exported them."""
    return records_of_lines(recorded_lines(driver, scenario))


# (resource, scope, span) of a recording, as protobuf messages
ScopedSpan = tuple[Any, Any, Any]


def scoped_spans(driver: str, scenario: str) -> list[ScopedSpan]:
    """Every span of a recording with its resource and scope, in the order exported."""
    spans: list[ScopedSpan] = []
    for line in recorded_lines(driver, scenario):
        for resource_spans in parse_json(line.encode()).resource_spans:
            for scope_spans in resource_spans.scope_spans:
                spans.extend((resource_spans.resource, scope_spans.scope, span)
                             for span in scope_spans.spans)
    return spans


def request_of(spans: list[ScopedSpan]) -> ExportTraceServiceRequest:
    """One export request of ``spans``, grouped by resource and then by scope in the order each
    first appears, as the OpenTelemetry SDK's exporters (and a Collector's batches) group them."""
    request = ExportTraceServiceRequest()
    groups: dict[bytes, Any] = {}
    scopes: dict[tuple[bytes, bytes], Any] = {}
    for resource, scope, span in spans:
        resource_key = resource.SerializeToString(deterministic=True)
        group = groups.get(resource_key)
        if group is None:
            group = groups[resource_key] = request.resource_spans.add()
            group.resource.CopyFrom(resource)
        scope_key = (resource_key, scope.SerializeToString(deterministic=True))
        scoped = scopes.get(scope_key)
        if scoped is None:
            scoped = scopes[scope_key] = group.scope_spans.add()
            scoped.scope.CopyFrom(scope)
        scoped.spans.add().CopyFrom(span)
    return request


def signature(record: SpanRecord) -> str | None:
    """What a record says, in one line (None for plumbing that says nothing)."""
    extra = []
    if record.final_answer:
        extra.append("answer")
    if record.requested_tools:
        extra.append("asks-tools")
    if record.limit_stop:
        extra.append(f"limit={record.limit_stop}")
    if record.error:
        extra.append(f"error={short_type(record.error_type or 'error')}")
    if record.creates_agent:
        extra.append("creates-agent")
    if record.model_calls:
        extra.append(f"reports-calls={record.model_calls}")
    tail = "".join(" " + item for item in extra)
    if record.kind is LLM:
        return f"llm {record.finish_reason}{tail}"
    if record.kind is TOOL:
        return f"tool {record.tool_name} {record.args_brief}{tail}"
    if record.kind is AGENT:
        return f"agent {record.agent}{tail}"
    assert record.kind is OTHER
    if record.tool_name is not None:  # an output tool
        return f"output-tool {record.tool_name}{tail}"
    return f"other{tail}" if extra else None


def signatures(records: list[SpanRecord]) -> list[str]:
    return [line for line in map(signature, records) if line is not None]
