"""Bad input and overload against a real sidecar: every refusal has the documented status and
a message, nothing crashes, and a run ingested before the bad request is intact afterwards."""

from __future__ import annotations

import base64
import gzip
import json
import logging
import socket
import struct
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.harness import RunningServer, running_server, sidecar_config
from tests.spans import T0, SpanMaker, chat_attrs, encode, tool_attrs
from tests.test_otlp_grpc import EXPORT_METHOD
from tests.test_otlp_http import (
    JSON,
    PROTOBUF,
    agent_run,
    assert_run,
    export_outcomes,
    otlp_json,
    post,
    post_full,
    request_json,
)
from watchdog.shell.receivers import otlp_grpc, otlp_http

MAX_REQUEST_BYTES = 1024 * 1024
MIB = 1024 * 1024


@dataclass
class Guarded:
    """A sidecar holding one known-good run, to check after each bad request."""

    sidecar: RunningServer
    run_id: str
    headers: dict[str, str]  # the Authorization a good client sends, if a token is set

    def assert_intact(self) -> None:
        assert_run(self.sidecar, self.run_id, self.headers)  # every signal as sent, no more
        assert post(self.sidecar, b"", headers=self.headers)[0] == 200  # the receiver answers


@contextmanager
def start_guarded(tmp_path: Path, token: str | None = None, **config: object
                  ) -> Iterator[Guarded]:
    with running_server(sidecar_config(tmp_path / "state", max_request_bytes=MAX_REQUEST_BYTES,
                                       api_token=token, **config)) as sidecar:
        spans, key = agent_run()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        assert post(sidecar, encode(spans).SerializeToString(), headers=headers)[0] == 200
        guarded = Guarded(sidecar, key, headers)
        guarded.assert_intact()
        yield guarded


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[Guarded]:
    with start_guarded(tmp_path) as guarded:
        yield guarded


def counted(before: dict[str, float], outcome: str, times: int = 1) -> dict[str, float]:
    return {**before, outcome: before.get(outcome, 0) + times}


def status_message(body: bytes, content_type: str) -> status_pb2.Status:
    """The google.rpc.Status error body, in the encoding of the request (JSON otherwise)."""
    if content_type == PROTOBUF:
        return status_pb2.Status.FromString(body)
    document = json.loads(body)
    return status_pb2.Status(code=document.get("code", 0), message=document["message"])



def partial_success(response: bytes, content_type: str) -> tuple[int, str]:
    """The rejected spans and the message of an export's answer, protobuf or JSON."""
    if content_type == PROTOBUF:
        partial = ExportTraceServiceResponse.FromString(response).partial_success
        return partial.rejected_spans, partial.error_message
    partial_json = json.loads(response)["partialSuccess"]
    return int(partial_json["rejectedSpans"]), partial_json["errorMessage"]

def valid_body() -> bytes:
    spans, _ = agent_run()
    body: bytes = encode(spans).SerializeToString()
    return body


def gzip_bomb(size: int) -> bytes:
    """``size`` zero bytes (a multiple of 16 MiB) as one gzip member of about size/1000 bytes,
    built from one compressed block repeated (a full flush makes blocks independent)."""
    chunk = bytes(16 * MIB)
    assert size % len(chunk) == 0
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = compressor.compress(chunk) + compressor.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(size // len(chunk)):
        crc = zlib.crc32(chunk, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    final_empty_block = b"\x03\x00"
    return (header + block * (size // len(chunk)) + final_empty_block
            + struct.pack("<II", crc, size & 0xFFFFFFFF))


# (name, body factory, content type, extra headers, status, outcome, message fragment)
HTTP_CASES: list[tuple[str, Callable[[], bytes], str, dict[str, str], int, str, str]] = [
    ("garbage", lambda: b"\xff\xfe garbage \x00\x01", PROTOBUF, {}, 400, "invalid",
     "invalid OTLP protobuf payload"),
    ("truncated protobuf", lambda: valid_body()[:-7], PROTOBUF, {}, 400, "invalid",
     "invalid OTLP protobuf payload"),
    ("invalid JSON", lambda: b'{"resourceSpans": [', JSON, {}, 400, "invalid", "invalid JSON"),
    ("JSON not an object", lambda: b"[1, 2]", JSON, {}, 400, "invalid",
     "the top level must be an object"),
    ("JSON bad structure", lambda: b'{"resourceSpans": "x"}', JSON, {}, 400, "invalid",
     "unexpected structure"),
    ("JSON bad field type",
     lambda: b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": 5, "kind": "x"}]}]}]}',
     JSON, {}, 400, "invalid", "invalid OTLP/JSON payload"),
    ("wrong content type", lambda: b"{}", "text/plain", {}, 415, "unsupported_media_type",
     "unsupported Content-Type 'text/plain'"),
    ("unsupported content encoding", valid_body, PROTOBUF, {"Content-Encoding": "snappy"}, 415,
     "unsupported_media_type", "unsupported Content-Encoding 'snappy'"),
    ("not gzip data", valid_body, PROTOBUF, {"Content-Encoding": "gzip"}, 400, "invalid",
     "not valid gzip data"),
    ("oversized body", lambda: b"\x00" * (MAX_REQUEST_BYTES + 1), PROTOBUF, {}, 413,
     "too_large", "exceeds max_request_bytes=1048576"),
    ("oversized after gzip", lambda: gzip.compress(b"\x00" * (MAX_REQUEST_BYTES + 1)), JSON,
     {"Content-Encoding": "gzip"}, 413, "too_large", "(after decompression)"),
]


@pytest.mark.parametrize(("body", "content_type", "headers", "status", "outcome", "message"),
                         [case[1:] for case in HTTP_CASES], ids=[case[0] for case in HTTP_CASES])
def test_http_bad_input(guarded: Guarded, body: Callable[[], bytes], content_type: str,
                        headers: dict[str, str], status: int, outcome: str, message: str,
                        caplog: pytest.LogCaptureFixture) -> None:
    before = export_outcomes(guarded.sidecar, "http")
    with caplog.at_level(logging.WARNING, logger="watchdog.receivers"):
        got, response_headers, response = post_full(guarded.sidecar, body(), content_type,
                                                     headers)
    warned = [record.getMessage() for record in caplog.records
              if record.name == "watchdog.receivers"]
    assert len(warned) == (outcome == "too_large"), warned  # a refusal for good is logged
    assert all(text.startswith(f"OTLP/HTTP: 1 export request(s) refused over "
                               f"max_request_bytes={MAX_REQUEST_BYTES};") for text in warned)
    assert got == status, response
    expected_type = content_type if content_type in (PROTOBUF, JSON) else JSON
    assert response_headers["Content-Type"].startswith(expected_type)
    error = status_message(response, expected_type)
    assert message in error.message
    assert "Traceback" not in error.message
    assert export_outcomes(guarded.sidecar, "http") == counted(before, outcome)
    guarded.assert_intact()


def _reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")  # resets VmHWM to the current RSS
    except OSError:
        return False
    return True


def _peak_rss() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/self/status")


def test_gzip_bomb_is_refused_without_inflating_it(guarded: Guarded) -> None:
    bomb = gzip_bomb(1024 * MIB)  # 1 GiB of zeros in about 1 MiB
    assert len(bomb) < 2 * MIB
    # Linux lets a process reset its own peak RSS; without that the check below would be void.
    assert _reset_peak_rss(), "cannot reset the peak RSS (/proc/self/clear_refs)"
    baseline = _peak_rss()
    got, _, response = post_full(guarded.sidecar, bomb, PROTOBUF, {"Content-Encoding": "gzip"})
    assert got == 413
    assert "after decompression" in status_message(response, PROTOBUF).message
    guarded.assert_intact()
    # The server runs in this process: had it inflated the body, the peak would be +1 GiB.
    assert _peak_rss() - baseline < 64 * MIB


def test_spans_without_ids_are_rejected_and_the_rest_applied(guarded: Guarded) -> None:
    before = export_outcomes(guarded.sidecar, "http")
    for content_type in (PROTOBUF, JSON):
        maker = SpanMaker()
        with maker.agent():
            maker.span("chat", chat_attrs(11, 4))
        spans = maker.take()
        request = encode(spans)
        scope_spans = request.resource_spans[0].scope_spans[0]
        scope_spans.spans.add().name = "no ids at all"
        scope_spans.spans.add().trace_id = b"\x01" * 16  # no span id

        body = request.SerializeToString() if content_type == PROTOBUF else request_json(request)
        status, response = post(guarded.sidecar, body, content_type)
        assert status == 200
        rejected, message = partial_success(response, content_type)
        assert rejected == 2
        assert "invalid_trace_id" in message and "invalid_span_id" in message

        context = spans[0].context
        assert context is not None
        detail = guarded.sidecar.get_json(f"/v1/runs/trace:{context.trace_id:032x}")
        assert detail["spans"] == 2  # the valid spans of the request were applied
        assert (detail["signals"]["iterations"], detail["signals"]["input_tokens"]) == (1, 11)
    assert export_outcomes(guarded.sidecar, "http") == counted(before, "partial", 2)
    guarded.assert_intact()


def _ids_as(body: bytes, spans: dict[str, dict[str, str]]) -> bytes:
    """An OTLP/JSON ``body`` with the ids of the spans named in ``spans`` replaced."""
    document = json.loads(body)
    for span in document["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        span.update(spans.get(span["name"], {}))
    return json.dumps(document).encode()


def test_json_ids_that_are_not_hex_reject_their_span_only(guarded: Guarded) -> None:
    """A trace or span id in base64 (protobuf's JSON mapping of bytes) or not hex at all is no
    id: that span is rejected in partialSuccess, the rest applied, as in protobuf an id of the
    wrong length is. A parent span id that is not hex makes its span a root in both."""
    details = []
    for content_type in (PROTOBUF, JSON):
        maker = SpanMaker()
        with maker.agent():
            maker.span("chat", chat_attrs(11, 4))
        maker.span("chat", chat_attrs(5, 2))  # a loose call: its parent id is made bad below
        spans = maker.take()
        request = encode(spans)
        scope_spans = request.resource_spans[0].scope_spans[0]
        for name in ("bad trace id", "bad span id"):
            bad = scope_spans.spans.add()
            bad.CopyFrom(scope_spans.spans[0])
            bad.name = name
        loose = next(span for span in scope_spans.spans if span.span_id == bytes.fromhex(
            f"{spans[2].context.span_id:016x}"))
        loose.name = "loose"
        loose.parent_span_id = b"\x01\x02\x03"
        if content_type == PROTOBUF:
            scope_spans.spans[-2].trace_id = b"\x05" * 12
            scope_spans.spans[-1].span_id = b"\x06" * 7
            body = request.SerializeToString()
        else:
            b64 = base64.b64encode(bytes(range(1, 9))).decode()  # "AQIDBAUGBwg=": not hex
            body = _ids_as(request_json(request), {
                "bad trace id": {"traceId": base64.b64encode(bytes(range(1, 17))).decode()},
                "bad span id": {"spanId": b64},
                "loose": {"parentSpanId": "zz" * 8}})
        status, response = post(guarded.sidecar, body, content_type)
        assert status == 200, response
        rejected, message = partial_success(response, content_type)
        assert rejected == 2, message
        assert "1 invalid_span_id, 1 invalid_trace_id" in message
        context = spans[0].context
        assert context is not None
        detail = guarded.sidecar.get_json(f"/v1/runs/trace:{context.trace_id:032x}")
        details.append((detail["spans"], detail["signals"]["iterations"],
                        detail["signals"]["input_tokens"]))
        assert details[-1] == (2, 1, 11)  # the good spans of the request were applied
    guarded.assert_intact()


def _rejected_of(response: bytes) -> tuple[int, str]:
    partial = ExportTraceServiceResponse.FromString(response).partial_success
    return partial.rejected_spans, partial.error_message


def _duplicates_rejected(sidecar: RunningServer) -> float:
    metrics = sidecar.server.metrics
    assert metrics is not None
    return sum(sample.value for family in metrics.registry.collect()
               if family.name == "agent_watchdog_spans_rejected" for sample in family.samples
               if sample.name.endswith("_total")
               and sample.labels["reason"] == "duplicate_span_id")


@pytest.mark.parametrize("first", ["tool", "chat"])
@pytest.mark.parametrize("requests", [1, 2])
def test_the_first_span_of_an_id_is_kept_and_another_rejected(guarded: Guarded, first: str,
                                                              requests: int) -> None:
    """Two different spans (a tool call and a model call) with one trace and span id: the
    first that comes is the span — in one request the first in it, across requests the earlier
    request's — whichever kind; the other is rejected in partialSuccess and counted
    (spans_rejected_total{reason="duplicate_span_id"}). A copy (same name and times: a retry)
    is no conflict: dropped unreported."""
    key = f"dup-{first}-{requests}"
    maker = SpanMaker()
    maker.span("execute_tool search", {**tool_attrs("search"), "watchdog.run.id": key})
    maker.span("chat", {**chat_attrs(999, 1), "watchdog.run.id": key}, start=T0 + 1)
    spans = encode(maker.take()).resource_spans[0].scope_spans[0].spans
    tool, chat = spans
    chat.trace_id, chat.span_id = tool.trace_id, tool.span_id
    order = [tool, chat] if first == "tool" else [chat, tool]

    def body(*spans: object) -> bytes:
        request = encode([])
        scope_spans = request.resource_spans.add().scope_spans.add()
        scope_spans.spans.extend(spans)
        return request.SerializeToString()

    before = _duplicates_rejected(guarded.sidecar)
    bodies = [body(*order)] if requests == 1 else [body(order[0]), body(order[1])]
    answers = []
    for request_body in bodies:
        status, response = post(guarded.sidecar, request_body)
        assert status == 200
        answers.append(_rejected_of(response) if response else (0, ""))
    rejected, message = answers[-1]
    assert rejected == 1, answers
    assert "1 duplicate_span_id" in message
    assert f"span {tool.span_id.hex()} of trace {tool.trace_id.hex()}" in message
    assert answers[:-1] == [(0, "")] * (requests - 1)
    assert _duplicates_rejected(guarded.sidecar) == before + 1

    # a copy of the kept span, in a request of its own or twice in one: no rejection
    for copies in (body(order[0]), body(order[0], order[0])):
        assert post(guarded.sidecar, copies) == (200, b"")
    assert _duplicates_rejected(guarded.sidecar) == before + 1
    signals = guarded.sidecar.get_json(f"/v1/runs/{key}")["signals"]
    expected = (1, 0, 0) if first == "tool" else (0, 1, 999)
    assert (signals["tool_calls"], signals["iterations"], signals["input_tokens"]) == expected
    guarded.assert_intact()


@pytest.mark.parametrize("authorization", [None, "Bearer wrong", "s3cret", "Basic s3cret"])
def test_wrong_token(tmp_path: Path, authorization: str | None) -> None:
    with start_guarded(tmp_path, token="s3cret") as guarded:
        before = export_outcomes(guarded.sidecar, "http")
        headers = {"Authorization": authorization} if authorization else {}
        status, response_headers, response = post_full(guarded.sidecar, valid_body(), PROTOBUF,
                                                       headers)
        assert status == 401
        assert response_headers["WWW-Authenticate"] == "Bearer"
        assert "bearer token" in status_message(response, PROTOBUF).message
        assert export_outcomes(guarded.sidecar, "http") == counted(before, "unauthorized")
        guarded.assert_intact()


# -- gRPC -------------------------------------------------------------------------------------

def grpc_export(sidecar: RunningServer, body: bytes, **kwargs: object) -> bytes:
    with grpc.insecure_channel(sidecar.grpc_target) as channel:
        return bytes(channel.unary_unary(EXPORT_METHOD)(body, timeout=10, **kwargs))


@pytest.mark.parametrize(("body", "compression", "code", "message"), [
    (lambda: b"\xff\xfe garbage", grpc.Compression.NoCompression,
     grpc.StatusCode.INVALID_ARGUMENT, "invalid OTLP protobuf payload"),
    (lambda: valid_body()[:-7], grpc.Compression.NoCompression,
     grpc.StatusCode.INVALID_ARGUMENT, "invalid OTLP protobuf payload"),
    # Over the limit: refused by the watchdog, counted, not to be retried (as HTTP's 413).
    (lambda: b"\x00" * (MAX_REQUEST_BYTES + 1), grpc.Compression.NoCompression,
     grpc.StatusCode.INVALID_ARGUMENT, "exceeds max_request_bytes=1048576"),
    # Small on the wire, over the limit once inflated: the limit applies after decompression.
    (lambda: b"\x00" * (MAX_REQUEST_BYTES + 1), grpc.Compression.Gzip,
     grpc.StatusCode.INVALID_ARGUMENT, "(after decompression)"),
    # Far over it (past READ_MARGIN more): gRPC core refuses it before reading it all.
    (lambda: b"\x00" * (MAX_REQUEST_BYTES + otlp_grpc.READ_MARGIN + 1),
     grpc.Compression.NoCompression,
     grpc.StatusCode.RESOURCE_EXHAUSTED, "larger than max"),
    (lambda: b"\x00" * (8 * MAX_REQUEST_BYTES), grpc.Compression.Gzip,
     grpc.StatusCode.RESOURCE_EXHAUSTED, "Decompressed message larger than max"),
], ids=["garbage", "truncated", "oversized", "oversized after gzip", "far oversized",
        "far oversized after gzip"])
def test_grpc_bad_input(guarded: Guarded, body: Callable[[], bytes],
                        compression: grpc.Compression, code: grpc.StatusCode,
                        message: str) -> None:
    before = export_outcomes(guarded.sidecar, "grpc")
    with pytest.raises(grpc.RpcError) as caught:
        grpc_export(guarded.sidecar, body(), compression=compression)
    error: grpc.Call = caught.value
    assert error.code() is code
    assert message in (error.details() or "")
    if "exceeds" in message or "after decompression" in message:
        assert export_outcomes(guarded.sidecar, "grpc") == counted(before, "too_large")
    guarded.assert_intact()


def test_an_oversized_batch_is_refused_once_counted_and_logged(
        guarded: Guarded, caplog: pytest.LogCaptureFixture) -> None:
    """The SDK's own gRPC exporter, a batch over max_request_bytes: refused as HTTP refuses it
    (413): with a code the exporter does not retry (one request, counted once), and a warning
    in the log — one for many such requests."""
    maker = SpanMaker()
    with maker.agent():
        for n in range(40):
            maker.span("chat", {**chat_attrs(1, 1), "filler": f"{n:04d}" + "x" * 40_000})
    spans = maker.take()
    assert MAX_REQUEST_BYTES < len(encode(spans).SerializeToString()) < 2 * MAX_REQUEST_BYTES
    before = export_outcomes(guarded.sidecar, "grpc")
    with caplog.at_level(logging.WARNING, logger="watchdog.receivers"):
        for attempt in range(2):
            exporter = GrpcSpanExporter(endpoint=guarded.sidecar.grpc_target, insecure=True,
                                        timeout=10)
            try:
                assert exporter.export(spans) is SpanExportResult.FAILURE
            finally:
                exporter.shutdown()
            # One request: the exporter did not retry it (a retry would be counted again).
            assert export_outcomes(guarded.sidecar, "grpc") == counted(before, "too_large",
                                                                       attempt + 1)
    warnings = [record.getMessage() for record in caplog.records
                if record.name == "watchdog.receivers"]
    assert len(warnings) == 1, warnings  # the second, within LOG_INTERVAL, is counted only
    assert "OTLP/gRPC: 1 export request(s) refused over max_request_bytes=1048576" in warnings[0]
    guarded.assert_intact()


# -- overload ---------------------------------------------------------------------------------

class SlowUpload:
    """An OTLP/HTTP request whose headers and first bytes are sent, the rest held back."""

    def __init__(self, sidecar: RunningServer, body: bytes) -> None:
        host, port = sidecar.server.addresses["otlp_http"]
        self.body = body
        self.sock = socket.create_connection((host, port), timeout=10)
        self.sock.sendall(
            b"POST /v1/traces HTTP/1.1\r\nHost: watchdog\r\nContent-Type: "
            + PROTOBUF.encode() + b"\r\nContent-Length: " + str(len(body)).encode()
            + b"\r\nConnection: close\r\n\r\n" + body[:10])

    def finish(self) -> tuple[int, bytes]:
        self.sock.sendall(self.body[10:])
        return self.response()

    def response(self, keep_open: bool = False) -> tuple[int, bytes]:
        """Status and body, read by Content-Length (the server may keep the socket open)."""
        data = b""
        while b"\r\n\r\n" not in data:
            data += self._recv()
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        length = next(int(line.split(":", 1)[1]) for line in lines
                      if line.lower().startswith("content-length:"))
        while len(body) < length:
            body += self._recv()
        if not keep_open:
            self.sock.close()
        return int(lines[0].split()[1]), body

    def _recv(self) -> bytes:
        chunk = self.sock.recv(65536)
        assert chunk, "the server closed the connection without a complete response"
        return chunk


def test_overload_answers_503_and_unavailable(tmp_path: Path) -> None:
    with start_guarded(tmp_path, max_pending_requests=1) as guarded:
        sidecar = guarded.sidecar
        admission = sidecar.server.admission
        assert admission is not None
        # The one processing slot is taken, as by an export being applied (a slow upload no
        # longer holds one: see test_hostile.py).
        sidecar.call(admission.__enter__)
        try:
            status_code, headers, body = post_full(sidecar, b"")
            assert status_code == 503
            assert headers["Retry-After"] == "1"
            status = status_message(body, PROTOBUF)
            assert "max_pending_requests=1" in status.message
            retry_info = error_details_pb2.RetryInfo()
            assert status.details[0].Unpack(retry_info)
            assert retry_info.retry_delay.seconds == 1

            with pytest.raises(grpc.RpcError) as caught:
                grpc_export(sidecar, b"")
            error: grpc.Call = caught.value
            assert error.code() is grpc.StatusCode.UNAVAILABLE
            trailers = dict(error.trailing_metadata() or ())
            details = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
            assert details.code == grpc.StatusCode.UNAVAILABLE.value[0]
            assert details.details[0].Unpack(retry_info) and retry_info.retry_delay.seconds == 1
            # what opentelemetry-python's exporter reads to pace its retry
            assert error_details_pb2.RetryInfo.FromString(
                trailers["google.rpc.retryinfo-bin"]).retry_delay.seconds == 1
        finally:
            sidecar.call(lambda: admission.__exit__(None, None, None))

        assert post(sidecar, b"")[0] == 200  # the slot is free again
        assert export_outcomes(sidecar, "grpc") == {"overloaded": 1}
        guarded.assert_intact()


def test_stalled_upload_times_out(guarded: Guarded, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(otlp_http, "BODY_READ_TIMEOUT", 0.2)
    held = SlowUpload(guarded.sidecar, valid_body())
    status, body = held.response(keep_open=True)
    held.sock.sendall(held.body[10:])  # the late rest is drained and dropped by the server
    held.sock.close()
    assert status == 408
    assert "did not arrive within 0.2s" in status_message(body, PROTOBUF).message
    guarded.assert_intact()


def test_unexpected_error_is_logged_not_shown(guarded: Guarded, monkeypatch: pytest.MonkeyPatch,
                                              caplog: pytest.LogCaptureFixture) -> None:
    """Fault injection (the one place these tests replace behaviour): a bug in the service
    answers 500 / INTERNAL with a plain message; the traceback goes to the log only."""
    service = guarded.sidecar.server.service
    assert service is not None

    async def broken_export(*args: object, **kwargs: object) -> None:
        raise RuntimeError("secret internal detail")

    with monkeypatch.context() as patch:
        patch.setattr(service, "export_in_slices", broken_export)
        status, _, body = post_full(guarded.sidecar, otlp_json(agent_run()[0]), JSON)
        assert status == 500
        assert status_message(body, JSON).message == "internal error; see the watchdog log"
        with pytest.raises(grpc.RpcError) as caught:
            grpc_export(guarded.sidecar, valid_body())
        error: grpc.Call = caught.value
        assert error.code() is grpc.StatusCode.INTERNAL
        assert "secret" not in (error.details() or "")
    assert "secret internal detail" in caplog.text  # logged with its traceback
    guarded.assert_intact()
