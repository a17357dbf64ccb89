"""Tracing set-up shared by the framework drivers (they run in the framework's own venv, so
this imports only the OpenTelemetry SDK, its OTLP/HTTP exporter and the standard library).

The spans go to the sidecar through the real OTLP/HTTP exporter, configured by the standard
``OTEL_EXPORTER_OTLP_*`` variables the test sets. With ``RECORD_SPANS`` set to a file path, every
span is also appended there as one OTLP/JSON ``ExportTraceServiceRequest`` per line: the
recordings under ``tests/frameworks/recordings/`` are exactly what the framework emitted.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Sequence
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

_ID_KEYS = ("traceId", "spanId", "parentSpanId")  # (log records name theirs the same)


def _hex_ids(value: Any) -> Any:
    """OTLP/JSON writes ids as hex, protobuf's JSON mapping as base64."""
    if isinstance(value, dict):
        return {key: (base64.b64decode(item).hex() if key in _ID_KEYS and isinstance(item, str)
                      else _hex_ids(item)) for key, item in value.items()}
    if isinstance(value, list):
        return [_hex_ids(item) for item in value]
    return value


class JsonLinesExporter(SpanExporter):
    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        request = MessageToDict(encode_spans(spans), use_integers_for_enums=True)
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(json.dumps(_hex_ids(request), sort_keys=True) + "\n")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def add_exporters(provider: TracerProvider) -> TracerProvider:
    """The sidecar's exporter (and the recorder, when asked) on a provider a framework made."""
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(), schedule_delay_millis=50))
    record = os.environ.get("RECORD_SPANS")
    if record:
        provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter(record)))
    return provider


def setup_tracing(service_name: str) -> TracerProvider:
    """A global tracer provider exporting to the sidecar."""
    provider = add_exporters(TracerProvider(resource=Resource.create(
        {"service.name": service_name})))
    trace.set_tracer_provider(provider)
    return provider


def model_settings() -> tuple[str, str]:
    """(base_url, model name) of the scripted model server for this scenario."""
    return os.environ["FAKE_LLM_BASE_URL"], os.environ["FAKE_LLM_MODEL"]


def setup_logs(service_name: str) -> object:
    """A global logger provider exporting OTLP logs to the sidecar (GenAI log events: a model
    call's content with ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=event_only``);
    with ``RECORD_SPANS`` set, each export is also appended, as one OTLP/JSON
    ``ExportLogsServiceRequest`` per line, to the same path with ``.logs`` before its suffix."""
    from opentelemetry._logs import set_logger_provider
    from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import (
        LogRecordExporter,
        LogRecordExportResult,
        SimpleLogRecordProcessor,
    )

    class JsonLinesLogs(LogRecordExporter):
        def __init__(self, path: str) -> None:
            self.path = path

        def export(self, batch: Any) -> LogRecordExportResult:
            request = MessageToDict(encode_logs(batch), use_integers_for_enums=True)
            with open(self.path, "a", encoding="utf-8") as out:
                out.write(json.dumps(_hex_ids(request), sort_keys=True) + "\n")
            return LogRecordExportResult.SUCCESS

        def force_flush(self, timeout_millis: int = 30_000) -> bool:
            return True

        def shutdown(self) -> None:
            pass

    provider = LoggerProvider(resource=Resource.create({"service.name": service_name}))
    # Each log record exported as it is emitted (at its span's end), before the span's batch:
    # the SDK's defaults send log records before their spans (batched for 1 s against 5 s),
    # and a batch processor's thread on a busy machine may otherwise send them last
    provider.add_log_record_processor(SimpleLogRecordProcessor(OTLPLogExporter()))
    record = os.environ.get("RECORD_SPANS")
    if record:
        root, _, suffix = record.rpartition(".")
        provider.add_log_record_processor(SimpleLogRecordProcessor(
            JsonLinesLogs(f"{root}.logs.{suffix}")))
    set_logger_provider(provider)
    return provider
