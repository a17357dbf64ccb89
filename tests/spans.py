"""Real OpenTelemetry spans for core tests: the SDK makes them, OTLP encodes them, the watchdog
decodes and normalises them. Nothing here is a stand-in for a part of the product.

``SpanMaker`` wraps a real ``TracerProvider`` with an ``InMemorySpanExporter``; ``span()`` records
one ended span with explicit attributes and times (seconds since the epoch), so tests control the
clock that ``elapsed_seconds``/``idle_seconds`` read. ``records_of(spans)`` runs the pure data
path: ``encode_spans`` -> ``parse_protobuf`` -> ``records_from``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Span, Status, StatusCode

from watchdog.core.runs.run import RunState
from watchdog.core.runs.tracker import BatchResult, RunTracker
from watchdog.core.spans.decode import parse_protobuf
from watchdog.core.spans.pipeline import Decoded, records_from
from watchdog.core.spans.record import SpanRecord

NS = 1_000_000_000
T0 = 1_800_000_000.0  # a fixed wall-clock origin for spans made with explicit times


def encode(spans: Sequence[ReadableSpan]) -> ExportTraceServiceRequest:
    """What an OTLP exporter sends for ``spans`` (the SDK's own encoder)."""
    return encode_spans(spans)


def decode(spans: Sequence[ReadableSpan]) -> Decoded:
    """``spans`` through the wire and the ingest pipeline."""
    return records_from(parse_protobuf(encode(spans).SerializeToString()))


def records_of(spans: Sequence[ReadableSpan]) -> list[SpanRecord]:
    decoded = decode(spans)
    assert not decoded.rejected, decoded.message()
    return decoded.records


def record_of(span: ReadableSpan) -> SpanRecord:
    (record,) = records_of([span])
    return record


class SpanMaker:
    """A real tracer whose ended spans are collected in memory."""

    def __init__(self, resource: Mapping[str, Any] | None = None,
                 scope: str = "watchdog-tests") -> None:
        """``scope``: the instrumentation scope its spans come from (a framework's own, for
        what a convention with ``scopes`` reads on its spans alone)."""
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider(
            resource=Resource.create({"service.name": "test-agent", **(resource or {})}))
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer(scope)

    def finished(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def take(self) -> list[ReadableSpan]:
        """The spans ended since the last ``take`` (in end order, as a batch exporter sends)."""
        spans = self.finished()
        self.exporter.clear()
        return spans

    def span(self, name: str, attrs: Mapping[str, Any] | None = None, *,
             parent: Span | None = None, start: float = T0, end: float | None = None,
             error: str | None = None, exception: BaseException | None = None) -> Span:
        """Record one ended span. ``error`` sets status ERROR with that description;
        ``exception`` also records an ``exception`` event (and status ERROR)."""
        span = self.open(name, attrs, parent=parent, start=start)
        if exception is not None:
            span.record_exception(exception)
            span.set_status(Status(StatusCode.ERROR, error or f"{type(exception).__name__}: "
                                   f"{exception}"))
        elif error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=int((start + 0.5 if end is None else end) * NS))
        return span

    def open(self, name: str, attrs: Mapping[str, Any] | None = None, *,
             parent: Span | None = None, start: float = T0) -> Span:
        """Start a span (e.g. an agent span that children need as parent); end it yourself."""
        context = trace.set_span_in_context(parent) if parent is not None else None
        return self.tracer.start_span(name, context=context, attributes=dict(attrs or {}),
                                      start_time=int(start * NS))

    @contextmanager
    def agent(self, name: str = "invoke_agent demo", attrs: Mapping[str, Any] | None = None, *,
              start: float = T0, end: float | None = None,
              error: str | None = None) -> Iterator[Span]:
        """An agent root span, current while the block runs (spans made in it without a
        ``parent`` are its children); it ends, and is recorded, last."""
        root = self.open(name, {"gen_ai.operation.name": "invoke_agent", **(attrs or {})},
                         start=start)
        with trace.use_span(root, end_on_exit=False):
            yield root
        if error is not None:
            root.set_status(Status(StatusCode.ERROR, error))
        root.end(end_time=int((start + 60 if end is None else end) * NS))


def tool_attrs(tool: str, arguments: str | None = None, result: str | None = None,
               **extra: Any) -> dict[str, Any]:
    """OTel GenAI ``execute_tool`` attributes."""
    attrs: dict[str, Any] = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool}
    if arguments is not None:
        attrs["gen_ai.tool.call.arguments"] = arguments
    if result is not None:
        attrs["gen_ai.tool.call.result"] = result
    attrs.update(extra)
    return attrs


def chat_attrs(input_tokens: int = 10, output_tokens: int = 5, finish: str | None = None,
               **extra: Any) -> dict[str, Any]:
    """OTel GenAI ``chat`` attributes."""
    attrs: dict[str, Any] = {"gen_ai.operation.name": "chat",
                             "gen_ai.usage.input_tokens": input_tokens,
                             "gen_ai.usage.output_tokens": output_tokens}
    if finish is not None:
        attrs["gen_ai.response.finish_reasons"] = [finish]
    attrs.update(extra)
    return attrs


def run_spans(spans: Sequence[ReadableSpan], now: float = T0 + 100,
              tracker: RunTracker | None = None) -> tuple[RunTracker, BatchResult]:
    """Feed ``spans`` (one batch) to a tracker, as the receiver does."""
    tracker = tracker if tracker is not None else RunTracker()
    return tracker, tracker.apply(records_of(spans), now)


def only_run(tracker: RunTracker) -> RunState:
    runs = list(tracker.active()) + list(tracker.ended())
    assert len(runs) == 1, [r.key for r in runs]
    return runs[0]
