"""OTLP/gRPC end to end: the real OpenTelemetry SDK gRPC exporter (and a raw gRPC channel for
what the SDK cannot send) against a real sidecar."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.harness import RunningServer, running_server, sidecar_config, wait_until
from tests.spans import SpanMaker, chat_attrs, encode
from tests.test_otlp_http import (
    EXPECTED_SIGNALS,
    agent_run,
    assert_run,
    export_outcomes,
    rejecting_run,
    spans_rejected,
)

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


def spans_received(sidecar: RunningServer) -> float:
    metrics = sidecar.server.metrics
    assert metrics is not None
    return sum(sample.value for family in metrics.registry.collect()
               for sample in family.samples
               if sample.name == "agent_watchdog_spans_received_total"
               and sample.labels["protocol"] == "grpc")


def pending(sidecar: RunningServer) -> int:
    return sidecar.call(lambda: sidecar.server.admission.pending
                        if sidecar.server.admission is not None else -1)


def test_a_call_cancelled_before_its_message_is_counted(sidecar: RunningServer,
                                                        channel: grpc.Channel) -> None:
    """A client that cancels while its message has not come (an exporter shut down, a
    deadline passed) is counted ``cancelled``, and its processing slot is given back."""
    hold = threading.Event()

    def nothing_yet() -> Iterator[bytes]:
        hold.wait(30)
        yield from ()

    call = channel.stream_unary(EXPORT_METHOD).future(nothing_yet())
    try:
        wait_until(lambda: pending(sidecar) == 1, what="the call at the receiver")
        assert call.cancel()
    finally:
        hold.set()
    wait_until(lambda: export_outcomes(sidecar, "grpc") == {"cancelled": 1},
               what="the cancelled call counted")
    assert pending(sidecar) == 0
    # a call that closes its stream sending nothing is no cancellation: invalid, answered so
    with pytest.raises(grpc.RpcError) as refused:
        channel.stream_unary(EXPORT_METHOD)(iter(()), timeout=10)
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert export_outcomes(sidecar, "grpc") == {"cancelled": 1, "invalid": 1}


def test_a_call_cancelled_while_its_spans_are_applied_is_counted_and_applied_whole(
        sidecar: RunningServer, channel: grpc.Channel) -> None:
    """Cancelled while its message's spans are applied (in slices, the event loop served in
    between), a call is counted ``cancelled`` and its message applied whole all the same:
    the exporter's retry is a duplicate, no span counted twice or lost."""
    maker = SpanMaker()
    runs = 6000
    for index in range(runs):
        maker.span("chat m", {**chat_attrs(), "watchdog.run.id": f"c-{index}"},
                   start=time.time())
    body = encode(maker.take()).SerializeToString()
    call = channel.unary_unary(EXPORT_METHOD).future(body, timeout=60)
    while not 0 < spans_received(sidecar) < runs:  # the moment: some slices applied
        assert not call.done(), "answered before a cancel could come: make the batch larger"
        time.sleep(0.001)
    assert call.cancel()
    wait_until(lambda: export_outcomes(sidecar, "grpc") == {"cancelled": 1},
               what="the cancelled call counted")
    assert spans_received(sidecar) == runs
    assert pending(sidecar) == 0
    export_raw(channel, body)  # the exporter's retry
    assert export_outcomes(sidecar, "grpc") == {"cancelled": 1, "duplicate": 1}
    assert spans_received(sidecar) == runs
    assert sidecar.get_json("/v1/runs/c-5999")["signals"]["iterations"] == 1


def test_a_retry_gets_the_first_answers_partial_success(sidecar: RunningServer,
                                                        channel: grpc.Channel) -> None:
    """An exporter's retry of a message already applied (gzipped this time) is answered
    with what the first answer said, its ``partial_success``, the spans not counted again."""
    body = encode(rejecting_run()).SerializeToString()
    first = export_raw(channel, body)
    retry = export_raw(channel, body, compression=grpc.Compression.Gzip)
    assert first.partial_success.rejected_spans == 1
    assert retry == first
    assert export_outcomes(sidecar, "grpc") == {"partial": 1, "duplicate": 1}
    assert spans_rejected(sidecar) == 1


def test_a_retry_while_the_first_is_applied_waits_for_its_answer(
        sidecar: RunningServer, channel: grpc.Channel) -> None:
    """A retry that comes while its message is still being applied (in slices, the event
    loop served in between: an exporter whose deadline passed first) gets the answer the
    message gets once applied, rejection and all, not an empty one before it is known."""
    maker = SpanMaker()
    runs = 6000
    for index in range(runs):
        maker.span("chat m", {**chat_attrs(), "watchdog.run.id": f"w-{index}"},
                   start=time.time())
    maker.span("chat m", {**chat_attrs(), "watchdog.run.id": "bad\nid"}, start=time.time())
    body = encode(maker.take()).SerializeToString()
    call = channel.unary_unary(EXPORT_METHOD).future(body, timeout=60)
    while not 0 < spans_received(sidecar) < runs:  # the moment: some slices applied
        assert not call.done(), "answered before the retry could come: make the batch larger"
        time.sleep(0.001)
    retry = export_raw(channel, body)
    first = ExportTraceServiceResponse.FromString(call.result())
    assert first.partial_success.rejected_spans == 1
    assert retry == first
    assert export_outcomes(sidecar, "grpc") == {"partial": 1, "duplicate": 1}
    assert spans_received(sidecar) == runs + 1
