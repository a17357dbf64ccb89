"""OTLP/gRPC end to end: the real OpenTelemetry SDK gRPC exporter (and a raw gRPC channel for
what the SDK cannot send) against a real sidecar."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.harness import RunningServer, running_server, sidecar_config
from tests.spans import SpanMaker, chat_attrs, encode
from tests.test_otlp_http import EXPECTED_SIGNALS, agent_run, assert_run, export_outcomes

EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


@pytest.fixture
def channel(sidecar: RunningServer) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(sidecar.grpc_target) as channel:
        yield channel


def export_raw(channel: grpc.Channel, body: bytes, **kwargs: object
               ) -> ExportTraceServiceResponse:
    """One ``Export`` call with the message bytes as given (no client-side serializer)."""
    call = channel.unary_unary(EXPORT_METHOD)
    response: ExportTraceServiceResponse = ExportTraceServiceResponse.FromString(
        call(body, timeout=10, **kwargs))
    return response


@pytest.mark.parametrize("compression", [grpc.Compression.NoCompression,
                                         grpc.Compression.Gzip])
def test_sdk_exporter_run_signals(sidecar: RunningServer,
                                  compression: grpc.Compression) -> None:
    spans, key = agent_run()
    exporter = OTLPSpanExporter(endpoint=sidecar.grpc_target, insecure=True,
                                compression=compression, timeout=10)
    try:
        assert exporter.export(spans[:-1]) is SpanExportResult.SUCCESS
        assert exporter.export(spans[-1:]) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    detail = assert_run(sidecar, key)
    assert detail["agent"] == "explorer"
    assert export_outcomes(sidecar, "grpc") == {"ok": 2}


def test_full_success_leaves_partial_success_unset(sidecar: RunningServer,
                                                   channel: grpc.Channel) -> None:
    spans, key = agent_run()
    response = export_raw(channel, encode(spans).SerializeToString())
    assert not response.HasField("partial_success")
    assert_run(sidecar, key)


def test_exporter_retry_is_counted_once(sidecar: RunningServer, channel: grpc.Channel) -> None:
    spans, key = agent_run()
    body = encode(spans).SerializeToString()
    export_raw(channel, body, compression=grpc.Compression.Gzip)
    export_raw(channel, body)  # the same message, this time uncompressed: still a retry
    assert_run(sidecar, key)
    assert export_outcomes(sidecar, "grpc") == {"ok": 1, "duplicate": 1}


def test_partial_success_reports_rejected_spans(sidecar: RunningServer,
                                                channel: grpc.Channel) -> None:
    maker = SpanMaker()
    with maker.agent():
        maker.span("chat", chat_attrs(7, 3))
    spans = maker.take()
    request = encode(spans)
    broken = request.resource_spans[0].scope_spans[0].spans.add()
    broken.name = "no ids"
    response = export_raw(channel, request.SerializeToString())
    assert response.partial_success.rejected_spans == 1
    assert "invalid_trace_id" in response.partial_success.error_message
    context = spans[0].context
    assert context is not None
    signals = sidecar.get_json(f"/v1/runs/trace:{context.trace_id:032x}")["signals"]
    assert (signals["iterations"], signals["input_tokens"]) == (1, 7)  # the valid spans count
    assert export_outcomes(sidecar, "grpc") == {"partial": 1}


def test_token_in_metadata(tmp_path: Path) -> None:
    with running_server(sidecar_config(tmp_path / "state", api_token="s3cret")) as sidecar:
        spans, key = agent_run()
        exporter = OTLPSpanExporter(endpoint=sidecar.grpc_target, insecure=True, timeout=10,
                                    headers={"authorization": "Bearer s3cret"})
        try:
            assert exporter.export(spans) is SpanExportResult.SUCCESS
        finally:
            exporter.shutdown()
        detail = sidecar.get_json(f"/v1/runs/{key}", {"Authorization": "Bearer s3cret"})
        assert detail["signals"]["tool_calls"] == EXPECTED_SIGNALS["tool_calls"]

        with grpc.insecure_channel(sidecar.grpc_target) as channel:
            for metadata in [(), (("authorization", "Bearer wrong"),),
                             (("authorization", "s3cret"),)]:
                with pytest.raises(grpc.RpcError) as caught:
                    export_raw(channel, b"", metadata=metadata)
                assert caught.value.code() is grpc.StatusCode.UNAUTHENTICATED
                assert "bearer token" in caught.value.details()
        assert export_outcomes(sidecar, "grpc") == {"ok": 1, "unauthorized": 3}
