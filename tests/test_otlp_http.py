"""OTLP/HTTP end to end: the real OpenTelemetry SDK exporter (and a plain HTTP client for
OTLP/JSON) against a real sidecar; what the control API shows must equal what was sent."""

from __future__ import annotations

import base64
import gzip
import json
import threading
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.harness import RunningServer, http_request, running_server, sidecar_config
from tests.spans import SpanMaker, chat_attrs, encode, tool_attrs

PROTOBUF = "application/x-protobuf"
JSON = "application/json"

# What the run built by agent_run() must show: 3 LLM calls, 5 tool executions of which two
# are the identical call search({"q": "otlp"}) and one failed.
EXPECTED_SIGNALS = {
    "iterations": 3,
    "tool_calls": 5,
    "tools": {"search": 3, "read_file": 1, "run_tests": 1},
    "errors": 1,
    "input_tokens": 600,
    "output_tokens": 90,
    "total_tokens": 690,
    "repeated_tool_call": 2,
    "ended": True,
}
EXPECTED_SPANS = 9


def agent_run(maker: SpanMaker | None = None) -> tuple[list[ReadableSpan], str]:
    """One GenAI-shaped agent run, in the order an exporter sends it: children, then the
    ``invoke_agent`` root last. Returns the spans and the run id (trace-keyed)."""
    maker = maker or SpanMaker()
    t = time.time() - 10
    with maker.agent("invoke_agent explorer", {"gen_ai.agent.name": "explorer"},
                     start=t, end=t + 9):
        maker.span("chat gpt-4o", chat_attrs(100, 20), start=t + 1)
        maker.span("execute_tool search", tool_attrs("search", '{"q": "otlp"}', "3 hits"),
                   start=t + 2)
        maker.span("execute_tool search", tool_attrs("search", '{"q":"otlp"}', "3 hits"),
                   start=t + 3)
        maker.span("chat gpt-4o", chat_attrs(200, 30), start=t + 4)
        maker.span("execute_tool search", tool_attrs("search", '{"q": "grpc"}', "5 hits"),
                   start=t + 5)
        maker.span("execute_tool read_file",
                   tool_attrs("read_file", '{"path": "README.md"}', "# agent-watchdog"),
                   start=t + 6)
        maker.span("execute_tool run_tests", tool_attrs("run_tests", '{"k": "otlp"}'),
                   start=t + 7, error="AssertionError: 1 failed")
        maker.span("chat gpt-4o", chat_attrs(300, 40, finish="stop"), start=t + 8)
    spans = maker.take()
    assert spans[-1].name == "invoke_agent explorer"
    return spans, run_id(spans)


def run_id(spans: Sequence[ReadableSpan]) -> str:
    context = spans[0].context
    assert context is not None
    return f"trace:{context.trace_id:032x}"


def assert_run(sidecar: RunningServer, key: str, headers: dict[str, str] | None = None
               ) -> dict[str, object]:
    """The run as the control API shows it has exactly the signals agent_run() sent."""
    detail = sidecar.get_json(f"/v1/runs/{key}", headers)
    signals = detail["signals"]
    assert {name: signals[name] for name in EXPECTED_SIGNALS} == EXPECTED_SIGNALS
    assert detail["spans"] == EXPECTED_SPANS
    assert detail["state"] == "ended"
    return dict(detail)


def otlp_json(spans: Sequence[ReadableSpan]) -> bytes:
    return request_json(encode(spans))


def request_json(request: ExportTraceServiceRequest) -> bytes:
    """OTLP/JSON as the spec writes it: lowerCamelCase, integer enums, hex trace/span ids."""
    document = json_format.MessageToDict(request, use_integers_for_enums=True)
    for resource_spans in document["resourceSpans"]:
        for scope_spans in resource_spans["scopeSpans"]:
            for span in scope_spans["spans"]:
                for field in ("traceId", "spanId", "parentSpanId"):
                    if field in span:
                        span[field] = base64.b64decode(span[field]).hex()
    return json.dumps(document).encode()


def export_outcomes(sidecar: RunningServer, protocol: str) -> dict[str, float]:
    """``agent_watchdog_export_requests_total`` for ``protocol``, by outcome."""
    metrics = sidecar.server.metrics
    assert metrics is not None
    return {sample.labels["outcome"]: sample.value
            for family in metrics.registry.collect()
            if family.name == "agent_watchdog_export_requests"
            for sample in family.samples
            if sample.name.endswith("_total") and sample.labels["protocol"] == protocol}


def post(sidecar: RunningServer, body: bytes, content_type: str = PROTOBUF,
         headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    status, _, response = post_full(sidecar, body, content_type, headers)
    return status, response


def post_full(sidecar: RunningServer, body: bytes, content_type: str = PROTOBUF,
              headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """POST to ``/v1/traces``: status, response headers, body."""
    request = urllib.request.Request(sidecar.otlp_http + "/v1/traces", data=body, method="POST",
                                     headers={"Content-Type": content_type, **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


@pytest.mark.parametrize("compression", [Compression.NoCompression, Compression.Gzip,
                                         Compression.Deflate])
def test_sdk_exporter_run_signals(sidecar: RunningServer, compression: Compression) -> None:
    spans, key = agent_run()
    exporter = OTLPSpanExporter(endpoint=sidecar.otlp_http + "/v1/traces",
                                compression=compression, timeout=10)
    try:
        assert exporter.export(spans[:-1]) is SpanExportResult.SUCCESS  # children first
        assert exporter.export(spans[-1:]) is SpanExportResult.SUCCESS  # the agent span last
    finally:
        exporter.shutdown()  # type: ignore[no-untyped-call]
    detail = assert_run(sidecar, key)
    assert detail["agent"] == "explorer"
    assert export_outcomes(sidecar, "http") == {"ok": 2}


def test_sdk_exporter_with_token(tmp_path: Path) -> None:
    config = sidecar_config(tmp_path / "state", api_token="s3cret")
    with running_server(config) as sidecar:
        spans, key = agent_run()
        exporter = OTLPSpanExporter(endpoint=sidecar.otlp_http + "/v1/traces",
                                    headers={"Authorization": "Bearer s3cret"}, timeout=10)
        try:
            assert exporter.export(spans) is SpanExportResult.SUCCESS
        finally:
            exporter.shutdown()  # type: ignore[no-untyped-call]
        detail = sidecar.get_json(f"/v1/runs/{key}", {"Authorization": "Bearer s3cret"})
        assert detail["signals"]["tool_calls"] == EXPECTED_SIGNALS["tool_calls"]


def test_protobuf_response_is_an_empty_export_response(sidecar: RunningServer) -> None:
    spans, _ = agent_run()
    status, body = post(sidecar, encode(spans).SerializeToString())
    assert status == 200
    response = ExportTraceServiceResponse.FromString(body)
    assert not response.HasField("partial_success")  # OTLP: unset on full success


@pytest.mark.parametrize("encoding", ["identity", "gzip", "deflate"])
def test_otlp_json(sidecar: RunningServer, encoding: str) -> None:
    spans, key = agent_run()
    body = otlp_json(spans)
    headers = {}
    if encoding == "gzip":
        body, headers = gzip.compress(body), {"Content-Encoding": "gzip"}
    elif encoding == "deflate":
        body, headers = zlib.compress(body), {"Content-Encoding": "deflate"}
    status, response_headers, response = post_full(sidecar, body, JSON + "; charset=utf-8",
                                                   headers)
    assert status == 200, response
    assert response_headers["Content-Type"].startswith(JSON)  # answered in kind
    assert json.loads(response) == {}  # OTLP: partial_success unset on full success
    assert_run(sidecar, key)


def test_exporter_retry_is_counted_once(sidecar: RunningServer) -> None:
    spans, key = agent_run()
    body = gzip.compress(encode(spans).SerializeToString())
    for _ in range(2):  # a retry after a lost response sends the very same body
        status, _ = post(sidecar, body, headers={"Content-Encoding": "gzip"})
        assert status == 200
    assert_run(sidecar, key)
    assert export_outcomes(sidecar, "http") == {"ok": 1, "duplicate": 1}


def rejecting_run() -> list[ReadableSpan]:
    """A run's spans of which the sidecar rejects one (a run id with a line break in it)."""
    maker = SpanMaker()
    with maker.agent():
        maker.span("chat", chat_attrs(7, 3))
        maker.span("chat", {**chat_attrs(7, 3), "watchdog.run.id": "bad\nid"})
    return maker.take()


def spans_rejected(sidecar: RunningServer) -> float:
    metrics = sidecar.server.metrics
    assert metrics is not None
    return sum(sample.value for family in metrics.registry.collect()
               if family.name == "agent_watchdog_spans_rejected"
               for sample in family.samples if sample.name.endswith("_total"))


def test_an_exporters_retry_gets_the_first_answers_partial_success(
        sidecar: RunningServer) -> None:
    """The SDK's exporter whose first answer is lost (the connection closed before it: a
    proxy's, a load balancer's) sends the very same body again at once, on its own; that
    retry, already applied, is answered with what the first answer said, its
    ``partial_success`` (else the exporter never learns of the rejection), the spans not
    counted again. What the exporter got is read between it and the sidecar."""
    answers: list[bytes] = []

    class LosesTheFirstAnswer(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            status, headers, answer = post_full(sidecar, body, self.headers["Content-Type"])
            answers.append(answer)
            if len(answers) == 1:
                self.close_connection = True  # (no answer: the connection closes)
                return
            self.send_response(status)
            self.send_header("Content-Type", headers["Content-Type"])
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *_args: object) -> None:
            pass

    middle = ThreadingHTTPServer(("127.0.0.1", 0), LosesTheFirstAnswer)
    thread = threading.Thread(target=middle.serve_forever, daemon=True)
    thread.start()
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{middle.server_port}/v1/traces",
                                timeout=10)
    try:
        assert exporter.export(rejecting_run()) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()  # type: ignore[no-untyped-call]
        middle.shutdown()
        middle.server_close()
    first, retry = (ExportTraceServiceResponse.FromString(answer) for answer in answers)
    assert first.partial_success.rejected_spans == 1
    assert "run id 'bad\\nid' is not allowed" in first.partial_success.error_message
    assert retry == first
    assert export_outcomes(sidecar, "http") == {"partial": 1, "duplicate": 1}
    assert spans_rejected(sidecar) == 1


@pytest.mark.parametrize("content_type", [PROTOBUF, JSON])
def test_a_retry_gets_the_first_answer_in_its_encoding(sidecar: RunningServer,
                                                       content_type: str) -> None:
    """The same body sent again (OTLP/HTTP protobuf or JSON, gzipped the second time: the
    digest is the body's, read) is answered as the first was, rejection and all."""
    request = encode(rejecting_run())
    body = request.SerializeToString() if content_type == PROTOBUF else request_json(request)
    first = post(sidecar, body, content_type)
    retry = post(sidecar, gzip.compress(body), content_type, {"Content-Encoding": "gzip"})
    assert first[0] == 200 and first == retry
    said = ExportTraceServiceResponse.FromString(first[1]) if content_type == PROTOBUF \
        else json.loads(first[1])
    assert (said.partial_success.rejected_spans if content_type == PROTOBUF
            else said["partialSuccess"]["rejectedSpans"]) in (1, "1"), said
    assert export_outcomes(sidecar, "http") == {"partial": 1, "duplicate": 1}
    assert spans_rejected(sidecar) == 1


def test_same_spans_in_both_encodings_apply_once_each(sidecar: RunningServer) -> None:
    """Only byte-identical bodies are retries; the digest is not a span-level dedupe."""
    spans, key = agent_run()
    children, root = spans[:-1], spans[-1:]
    assert post(sidecar, otlp_json(children), JSON)[0] == 200
    assert post(sidecar, encode(root).SerializeToString())[0] == 200
    assert_run(sidecar, key)


def test_empty_request_is_success(sidecar: RunningServer) -> None:
    assert post(sidecar, b"") == (200, b"")
    assert post(sidecar, b"{}", JSON) == (200, b"{}")


@pytest.mark.parametrize(("method", "path", "status"), [
    ("GET", "/v1/traces", 405),
    ("PUT", "/v1/traces", 405),
    ("POST", "/v1/metrics", 404),
    ("POST", "/", 404),
])
def test_unknown_routes(sidecar: RunningServer, method: str, path: str, status: int) -> None:
    assert http_request(method, sidecar.otlp_http + path, b"" if method != "GET" else None,
                        {"Content-Type": PROTOBUF})[0] == status
