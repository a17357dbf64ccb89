"""Pass-through (DESIGN §2): the OTel SDK's own exporters send traces, metrics and logs over
OTLP/HTTP and OTLP/gRPC to a real sidecar, which forwards them to a real OTLP/HTTP receiver
(tests/upstream.py) — unchanged, from a bounded queue, never making the agent wait."""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
import subprocess
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import (
    OTLPLogExporter as GrpcLogExporter,
)
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
    OTLPMetricExporter as GrpcMetricExporter,
)
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http._log_exporter import (
    OTLPLogExporter as HttpLogExporter,
)
from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
    OTLPMetricExporter as HttpMetricExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpSpanExporter,
)
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client.parser import text_string_to_metric_families

from tests.harness import RunningServer, http_request, running_server, sidecar_config, wait_until
from tests.spans import SpanMaker, chat_attrs
from tests.upstream import Upstream
from watchdog.core.spans import codings
from watchdog.shell.config import Config, load, url_for_logs
from watchdog.shell.errors import ConfigError
from watchdog.shell.metrics import Metrics
from watchdog.shell.receivers.forward import Forwarder, Outcome, RetryPolicy, is_retryable

try:  # the SDK's newer name; older SDKs (>= 1.30 allowed) have only the first
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter as InMemoryLogs
except ImportError:  # pragma: no cover - depends on the installed SDK
    from opentelemetry.sdk._logs.export import InMemoryLogExporter as InMemoryLogs

PROTOBUF = "application/x-protobuf"
UPSTREAM_HEADERS = {"X-Scope-OrgID": "tenant-a", "Authorization": "Bearer upstream-secret-1"}
EXPORT_TIMEOUT = 5.0  # the agent's exporter gives up (FAILURE) past this


# -- the agent side: real SDK data, sent by the real exporters ---------------------------------

@dataclass
class Export:
    """One export request an agent makes: what it sends and how."""

    signal: str
    protocol: str  # http | grpc
    send: Callable[[], str]  # runs the exporter; the result's name, "SUCCESS" on success
    payload: bytes  # the OTLP message the exporter serializes (the bytes on the wire)


def span_export(sidecar: RunningServer, protocol: str, tag: str,
                compression: str | None = None) -> Export:
    maker = SpanMaker()
    with maker.agent(f"invoke_agent {tag}", {"gen_ai.agent.name": tag}):
        maker.span(f"chat {tag}", chat_attrs(10, 2))
    spans = maker.take()
    if protocol == "http":
        exporter = HttpSpanExporter(endpoint=sidecar.otlp_http + "/v1/traces",
                                    timeout=EXPORT_TIMEOUT, compression=_http(compression))
    else:
        exporter = GrpcSpanExporter(endpoint=sidecar.grpc_target, insecure=True,
                                    timeout=EXPORT_TIMEOUT, compression=_grpc(compression))
    return Export("traces", protocol, _once(exporter, spans),
                  encode_spans(spans).SerializeToString())


def metric_export(sidecar: RunningServer, protocol: str, tag: str,
                  compression: str | None = None) -> Export:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    provider.get_meter("agent").create_counter(f"tokens_{tag}").add(42, {"tag": tag})
    data = reader.get_metrics_data()
    assert data is not None
    provider.shutdown()
    if protocol == "http":
        exporter = HttpMetricExporter(endpoint=sidecar.otlp_http + "/v1/metrics",
                                      timeout=EXPORT_TIMEOUT, compression=_http(compression))
    else:
        exporter = GrpcMetricExporter(endpoint=sidecar.grpc_target, insecure=True,
                                      timeout=EXPORT_TIMEOUT, compression=_grpc(compression))
    return Export("metrics", protocol, _once(exporter, data),
                  encode_metrics(data).SerializeToString())


def log_export(sidecar: RunningServer, protocol: str, tag: str,
               compression: str | None = None) -> Export:
    memory = InMemoryLogs()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(memory))
    provider.get_logger("agent").emit(LogRecord(body=f"tool search failed for {tag}",
                                                severity_number=SeverityNumber.WARN))
    records = memory.get_finished_logs()
    assert len(records) == 1
    if protocol == "http":
        exporter = HttpLogExporter(endpoint=sidecar.otlp_http + "/v1/logs",
                                   timeout=EXPORT_TIMEOUT, compression=_http(compression))
    else:
        exporter = GrpcLogExporter(endpoint=sidecar.grpc_target, insecure=True,
                                   timeout=EXPORT_TIMEOUT, compression=_grpc(compression))
    return Export("logs", protocol, _once(exporter, records),
                  encode_logs(records).SerializeToString())


MAKERS = {"traces": span_export, "metrics": metric_export, "logs": log_export}


def _once(exporter: object, batch: object) -> Callable[[], str]:
    def send() -> str:
        try:
            return str(exporter.export(batch).name)  # type: ignore[attr-defined]
        finally:
            exporter.shutdown()  # type: ignore[attr-defined]

    return send


def _http(compression: str | None) -> Compression:
    return Compression.Gzip if compression == "gzip" else Compression.NoCompression


def _grpc(compression: str | None) -> grpc.Compression:
    return grpc.Compression.Gzip if compression == "gzip" else grpc.Compression.NoCompression


# -- the sidecar side ------------------------------------------------------------------------------

def forwarded(sidecar: RunningServer) -> dict[tuple[str, str], float]:
    """``agent_watchdog_forwarded_total`` as scraped from /metrics: (signal, outcome) -> n."""
    status, body = http_request("GET", sidecar.metrics + "/metrics")
    assert status == 200
    return {(sample.labels["signal"], sample.labels["outcome"]): sample.value
            for family in text_string_to_metric_families(body.decode())
            if family.name == "agent_watchdog_forwarded"
            for sample in family.samples if sample.name.endswith("_total")}


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream().start()
    try:
        yield server
    finally:
        server.close()


@contextmanager
def forwarding_sidecar(tmp_path: Path, upstream: Upstream, **overrides: object
                       ) -> Iterator[RunningServer]:
    config = sidecar_config(tmp_path / "state", forward_endpoint=upstream.url, **overrides)
    with running_server(config) as sidecar:
        yield sidecar


# -- end to end ------------------------------------------------------------------------------------

@pytest.mark.parametrize("compression", [None, "gzip"])
def test_every_signal_over_both_protocols_arrives_unchanged(
        tmp_path: Path, upstream: Upstream, compression: str | None) -> None:
    with forwarding_sidecar(tmp_path, upstream, forward_headers=UPSTREAM_HEADERS) as sidecar:
        exports = [MAKERS[signal](sidecar, protocol, f"{protocol}-{signal}", compression)
                   for protocol in ("http", "grpc") for signal in ("traces", "metrics", "logs")]
        for export in exports:
            assert export.send() == "SUCCESS", export
        wait_until(lambda: upstream.answered >= len(exports), what="six forwarded requests")
        assert len(upstream.received) == len(exports)
        for export, request in zip(exports, upstream.received, strict=True):
            assert request.path == f"/v1/{export.signal}"
            assert request.payload == export.payload  # the exporter's very bytes
            assert request.headers["Content-Type"] == PROTOBUF
            assert request.headers["X-Scope-OrgID"] == "tenant-a"
            assert request.headers["Authorization"] == "Bearer upstream-secret-1"
            coding = request.headers.get("Content-Encoding")
            # HTTP keeps the agent's content coding; gRPC's own compression ends at the sidecar.
            assert coding == (compression if export.protocol == "http" else None), request
        counts = forwarded(sidecar)
        assert len(counts) == 3 * 6  # every signal x outcome, zeros included
        assert {key: n for key, n in counts.items() if n} == {
            ("traces", "sent"): 2, ("metrics", "sent"): 2, ("logs", "sent"): 2}


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_a_compressed_body_is_forwarded_byte_for_byte(tmp_path: Path, upstream: Upstream,
                                                      coding: str) -> None:
    """Over HTTP the upstream gets the very bytes the agent sent, in their coding: not inflated
    and compressed again (which would make other bytes at another level, and cost the CPU)."""
    maker = SpanMaker()
    with maker.agent("invoke_agent coded"):
        maker.span("chat coded", chat_attrs(10, 2))
    message = encode_spans(maker.take()).SerializeToString()
    metrics = b"" if coding == "gzip" else b"\n\x00"  # an empty metrics export
    compress: Callable[[bytes], bytes] = (
        (lambda data: gzip.compress(data, compresslevel=1, mtime=7)) if coding == "gzip"
        else (lambda data: zlib.compress(data, 9)))
    sent = [("/v1/traces", compress(message)), ("/v1/metrics", compress(metrics))]
    with forwarding_sidecar(tmp_path, upstream) as sidecar:
        for path, body in sent:
            status, _ = http_request("POST", sidecar.otlp_http + path, body,
                                     {"Content-Type": PROTOBUF, "Content-Encoding": coding})
            assert status == 200
        wait_until(lambda: upstream.answered == 2, what="the two forwarded requests")
    for (path, body), request in zip(sent, upstream.received, strict=True):
        assert request.path == path
        assert request.headers["Content-Encoding"] == coding
        assert request.body == body  # the agent's bytes, not the same message compressed anew


def test_otlp_json_keeps_its_content_type(tmp_path: Path, upstream: Upstream) -> None:
    body = b'{"resourceLogs": [{"scopeLogs": [{"logRecords": [{"body": {"stringValue": "hi"}}]}]}]}'
    with forwarding_sidecar(tmp_path, upstream) as sidecar:
        status, answer = http_request("POST", sidecar.otlp_http + "/v1/logs", body,
                                      {"Content-Type": "application/json"})
        assert (status, answer) == (200, b"{}")
        wait_until(lambda: upstream.answered == 1, what="the forwarded JSON")
        request = upstream.received[0]
        assert request.headers["Content-Type"] == "application/json"
        assert request.payload == body


def test_upstream_down_then_up_loses_nothing_within_the_bound(
        tmp_path: Path, upstream: Upstream) -> None:
    upstream.stop()  # the Collector is down: connections are refused
    queue_size = 4
    with forwarding_sidecar(tmp_path, upstream, forward_queue_size=queue_size) as sidecar:
        plan = [("http", "traces"), ("grpc", "metrics"), ("http", "logs"), ("grpc", "traces"),
                ("http", "metrics"), ("grpc", "logs"), ("http", "traces")]  # the last 3 overflow
        exports = [MAKERS[signal](sidecar, protocol, f"{n}-{protocol}-{signal}")
                   for n, (protocol, signal) in enumerate(plan)]
        for export in exports:
            assert export.send() == "SUCCESS"  # the agent never sees the upstream's outage
        wait_until(lambda: forwarded(sidecar).get(("traces", "retried")),
                   what="a failed attempt")
        counts = forwarded(sidecar)
        assert counts[("metrics", "dropped_queue_full")] == 1
        assert counts[("logs", "dropped_queue_full")] == 1
        assert counts[("traces", "dropped_queue_full")] == 1
        assert not counts.get(("traces", "sent"))

        upstream.start()  # back on the same port
        kept = exports[:queue_size]
        wait_until(lambda: upstream.answered >= queue_size, timeout=40,
                   what="the queued requests to reach the upstream once it is back")
        assert [r.payload for r in upstream.received] == [e.payload for e in kept]  # in order
        counts = forwarded(sidecar)
        assert counts[("traces", "sent")] == 2
        assert counts[("metrics", "sent")] == 1
        assert counts[("logs", "sent")] == 1
        assert counts[("traces", "retried")] >= 1


def test_the_agents_answer_never_waits_for_the_upstream(tmp_path: Path,
                                                        upstream: Upstream) -> None:
    upstream.hold()  # accepts connections and reads requests, answers nothing
    with forwarding_sidecar(tmp_path, upstream) as sidecar:
        first = span_export(sidecar, "http", "first")
        assert first.send() == "SUCCESS"
        wait_until(lambda: upstream.received, what="the forwarded request to hang upstream")
        # The upstream holds the forwarded request; the agent's next exports, over both
        # protocols, are answered meanwhile (a sidecar waiting on it would time them out).
        second = log_export(sidecar, "grpc", "second")
        third = metric_export(sidecar, "http", "third")
        assert second.send() == "SUCCESS"
        assert third.send() == "SUCCESS"
        assert upstream.answered == 0
        upstream.release()
        wait_until(lambda: forwarded(sidecar).get(("metrics", "sent")), what="all sent")
        assert [r.payload for r in upstream.received][-3:] == [
            first.payload, second.payload, third.payload]


def test_retry_after_is_honoured_and_permanent_refusals_are_not_retried(
        tmp_path: Path, upstream: Upstream) -> None:
    upstream.answer(503, {"Retry-After": "2"})
    upstream.answer(200)
    upstream.answer(400)  # the metrics request: refused for good
    with forwarding_sidecar(tmp_path, upstream) as sidecar:
        assert span_export(sidecar, "http", "t").send() == "SUCCESS"
        assert metric_export(sidecar, "grpc", "m").send() == "SUCCESS"
        assert log_export(sidecar, "http", "l").send() == "SUCCESS"
        wait_until(lambda: forwarded(sidecar).get(("logs", "sent")), what="the logs sent")
        # One request at a time, in order: a retry of the refused metrics would come before
        # the logs.
        assert upstream.paths() == ["/v1/traces", "/v1/traces", "/v1/metrics", "/v1/logs"]
        first, retry = upstream.received[:2]
        assert retry.at - first.at >= 2.0  # the upstream's Retry-After, not the 1 s backoff
        counts = forwarded(sidecar)
        assert counts[("traces", "retried")] == 1
        assert counts[("traces", "sent")] == 1
        assert counts[("metrics", "dropped_permanent")] == 1
        assert not counts.get(("metrics", "sent"))


def test_refused_requests_are_not_forwarded(tmp_path: Path, upstream: Upstream) -> None:
    with forwarding_sidecar(tmp_path, upstream, api_token="agent-token-1234") as sidecar:
        url = sidecar.otlp_http
        assert http_request("POST", url + "/v1/logs", b"", {"Content-Type": PROTOBUF})[0] == 401
        auth = {"Authorization": "Bearer agent-token-1234"}
        for path, body, content_type in (("/v1/metrics", b"\xff\xff\xff", PROTOBUF),
                                         ("/v1/logs", b"[1, 2]", "application/json"),
                                         ("/v1/logs", b"{", "application/json")):
            status, _ = http_request("POST", url + path, body,
                                     {"Content-Type": content_type, **auth})
            assert status == 400, (path, body)
        status, _ = http_request("POST", url + "/v1/metrics", b"", {"Content-Type": "text/plain",
                                                                    **auth})
        assert status == 415
        with grpc.insecure_channel(sidecar.grpc_target) as channel:
            call = channel.unary_unary(
                "/opentelemetry.proto.collector.logs.v1.LogsService/Export")
            with pytest.raises(grpc.RpcError) as refused:
                call(b"", timeout=10)
            assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
            assert call(b"", timeout=10, metadata=(("authorization",
                                                    "Bearer agent-token-1234"),)) == b""
        status, _ = http_request("POST", url + "/v1/metrics", b"",
                                 {"Content-Type": PROTOBUF, **auth})
        assert status == 200
        # The two accepted requests (empty exports) are the only ones forwarded, without the
        # agent's token: that is the watchdog's, not the upstream's.
        wait_until(lambda: forwarded(sidecar).get(("metrics", "sent")), what="the accepted ones")
        assert upstream.paths() == ["/v1/logs", "/v1/metrics"]
        assert not any("Authorization" in request.headers for request in upstream.received)


def test_without_forward_endpoint_metrics_are_answered_as_a_collector_would(
        sidecar: RunningServer) -> None:
    """A Collector registers no handler for a signal without a pipeline: 404 / UNIMPLEMENTED.
    Logs are read (their GenAI events) whether forwarded or not: accepted, passed on nowhere."""
    status, _ = http_request("POST", sidecar.otlp_http + "/v1/metrics", b"",
                             {"Content-Type": PROTOBUF})
    assert status == 404
    assert metric_export(sidecar, "grpc", "m").send() == "FAILURE"
    status, _ = http_request("POST", sidecar.otlp_http + "/v1/logs", b"",
                             {"Content-Type": PROTOBUF})
    assert status == 200
    for protocol in ("http", "grpc"):
        assert log_export(sidecar, protocol, "l").send() == "SUCCESS"
    with grpc.insecure_channel(sidecar.grpc_target) as channel:
        call = channel.unary_unary(
            "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export")
        with pytest.raises(grpc.RpcError) as refused:
            call(b"", timeout=10)
        assert refused.value.code() is grpc.StatusCode.UNIMPLEMENTED
    assert span_export(sidecar, "http", "t").send() == "SUCCESS"  # traces are watched as ever
    assert not any(forwarded(sidecar).values())


# -- the forwarder on its own, against a real upstream -----------------------------------------

def counts_of(metrics: Metrics) -> dict[tuple[str, str], float]:
    """The non-zero ``forwarded_total`` series."""
    return {(s.labels["signal"], s.labels["outcome"]): s.value
            for family in metrics.registry.collect() if family.name == "agent_watchdog_forwarded"
            for s in family.samples if s.name.endswith("_total") and s.value}


async def test_queue_bytes_are_bounded_and_shutdown_flushes_within_its_limit() -> None:
    down = Upstream()  # never started: refused connections
    metrics = Metrics(version="test")
    forwarder = Forwarder(down.url, {}, metrics, max_requests=10, max_bytes=100)
    await forwarder.start()
    try:
        assert forwarder.offer("traces", b"x" * 60, PROTOBUF)
        assert not forwarder.offer("logs", b"y" * 60, PROTOBUF)  # 120 bytes > 100
        assert forwarder.offer("logs", b"z" * 40, PROTOBUF)  # exactly 100
        # The upstream stays down: both are given up when the flush time is over, not after
        # the retry policy's 5 minutes (wait_for fails the test then).
        await asyncio.wait_for(forwarder.stop(timeout=0.3), 30)
        await forwarder.stop()  # idempotent
        assert not forwarder.offer("metrics", b"late", PROTOBUF)
    finally:
        down.close()
    assert counts_of(metrics) == {
        ("traces", Outcome.DROPPED_SHUTDOWN): 1, ("logs", Outcome.DROPPED_SHUTDOWN): 1,
        ("logs", Outcome.DROPPED_QUEUE_FULL): 1, ("metrics", Outcome.DROPPED_SHUTDOWN): 1,
        ("traces", Outcome.RETRIED): counts_of(metrics)[("traces", Outcome.RETRIED)]}
    assert counts_of(metrics)[("traces", Outcome.RETRIED)] >= 1


async def test_shutdown_sends_what_is_queued(upstream: Upstream) -> None:
    metrics = Metrics(version="test")
    forwarder = Forwarder(upstream.url, {}, metrics)
    await forwarder.start()
    for n in range(5):
        assert forwarder.offer("metrics", gzip.compress(b"m%d" % n), PROTOBUF, "gzip")
    await forwarder.stop()
    assert counts_of(metrics) == {("metrics", Outcome.SENT): 5}
    assert [r.payload for r in upstream.received] == [b"m%d" % n for n in range(5)]


# -- the retry policy (pure) ---------------------------------------------------------------------

def test_retryable_statuses_follow_the_otlp_specification() -> None:
    assert [s for s in (200, 400, 401, 403, 404, 408, 413, 429, 500, 502, 503, 504)
            if is_retryable(s)] == [429, 502, 503, 504]
    assert is_retryable(None)  # refused, reset, timed out


def test_backoff_doubles_to_its_cap_and_gives_up_after_max_elapsed() -> None:
    policy = RetryPolicy(initial_backoff=1.0, max_backoff=8.0, jitter=0.0, max_elapsed=60.0)
    assert [policy.delay(n, None, age=0.0) for n in range(1, 7)] == [1, 2, 4, 8, 8, 8]
    assert policy.delay(1, retry_after=7.0, age=0.0) == 7.0  # the upstream's word wins
    assert policy.delay(3, retry_after=0.0, age=0.0) == 4.0  # ... but is no busy loop
    assert policy.delay(3, None, age=56.0) == 4.0  # the attempt comes at 60 s: still in time
    assert policy.delay(3, None, age=56.5) is None
    assert policy.delay(1, retry_after=120.0, age=0.0) is None
    jittered = RetryPolicy(initial_backoff=10.0, jitter=0.2)
    assert jittered.delay(1, None, 0.0, rand=0.0) == pytest.approx(8.0)
    assert jittered.delay(1, None, 0.0, rand=0.999999) == pytest.approx(12.0, rel=1e-5)


# -- configuration -----------------------------------------------------------------------------

def test_forward_configuration_from_env_and_flags() -> None:
    config = load(env={"WATCHDOG_FORWARD_ENDPOINT": "https://otlp.example.com:4318/tenant",
                       "WATCHDOG_FORWARD_HEADERS":
                           "Authorization=Bearer%20s3cret-token,X-Scope-OrgID = team-a",
                       "WATCHDOG_FORWARD_QUEUE_SIZE": "50"})
    assert config.forward_endpoint == "https://otlp.example.com:4318/tenant"
    assert config.forward_headers == {"Authorization": "Bearer s3cret-token",
                                      "X-Scope-OrgID": "team-a"}
    assert config.forward_queue_size == 50
    assert "s3cret" not in repr(config)
    assert {f.name for f in fields(Config)} >= {"forward_endpoint", "forward_headers"}
    flags = load(env={}, flags={"forward_endpoint": "http://collector:4318"})
    assert flags.forward_endpoint == "http://collector:4318"
    assert load(env={}).forward_endpoint is None


@pytest.mark.parametrize(("settings", "expected"), [
    ({"forward_endpoint": "collector:4318"}, "forward_endpoint='collector:4318' is not allowed"),
    ({"forward_endpoint": "ftp://collector:4318"}, "expected an OTLP/HTTP base URL"),
    ({"forward_endpoint": "http://collector:4318/v1/traces"},
     "/v1/traces, /v1/metrics, /v1/logs are appended"),
    ({"forward_endpoint": "http://c:4318?x=1"}, "without ?query"),
    ({"forward_endpoint": "http://c:99999"}, "expected an OTLP/HTTP base URL"),
    ({"forward_endpoint": "http://c:4318", "forward_headers": {"Content-Type": "text/plain"}},
     "header 'Content-Type' is not allowed: the forwarder sets it"),
    ({"forward_endpoint": "http://c:4318", "forward_headers": {"bad name": "v"}},
     "header name 'bad name' is not allowed"),
    ({"forward_endpoint": "http://c:4318", "forward_headers": "novalue"},
     "forward_headers: entry 1 is not allowed: expected name=value"),
    ({"forward_headers": {"X-Token": "abc"}}, "forward_headers is set but forward_endpoint is not"),
    ({"forward_queue_size": "0"}, "forward_queue_size='0' is not allowed"),
    ({"forward_endpoint": "http://localhost:4318", "otlp_http_address": "0.0.0.0:4318",
      "insecure": True}, "is this watchdog's own otlp_http_address"),
    ({"forward_endpoint": "http://127.0.0.1:4318/"}, "is this watchdog's own otlp_http_address"),
])
def test_bad_forward_settings_are_refused_naming_the_key(settings: dict[str, object],
                                                         expected: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load(env={}, flags=settings)
    assert expected in str(refused.value)


def test_secrets_never_appear_in_messages() -> None:
    secret = "s3cret-value-xyz"
    with pytest.raises(ConfigError) as refused:
        load(env={}, flags={"forward_endpoint": "http://c:4318",
                            "forward_headers": {"Authorization": f"Bearer {secret}\r\nX: y"}})
    assert "forward_headers[Authorization] (hidden)" in str(refused.value)
    assert secret not in str(refused.value)
    with pytest.raises(ConfigError) as refused:
        load(env={}, flags={"forward_endpoint": f"ftp://user:{secret}@c:4318"})
    assert secret not in str(refused.value)
    assert url_for_logs(f"https://user:{secret}@c:4318/x") == "https://user:***@c:4318/x"


def _raw_deflate(data: bytes) -> bytes:
    deflater = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    return deflater.compress(data) + deflater.flush()


# Bodies the receiver takes (docs/limits.md, "One rule for compressed bodies") in the forms a
# Collector's zlib and gzip readers refuse (raw deflate; gzip with zero bytes after its last
# member), and one it reads as it came (zlib with zero bytes after it)
CODED: dict[str, tuple[str, Callable[[bytes], bytes]]] = {
    "raw-deflate": ("deflate", _raw_deflate),
    "raw-deflate-padded": ("deflate", lambda data: _raw_deflate(data) + b"\0" * 7),
    "gzip-padded": ("gzip", lambda data: gzip.compress(data, mtime=7) + b"\0" * 512),
    "gzip-members-padded": ("gzip", lambda data: gzip.compress(data[:9], mtime=7)
                            + gzip.compress(data[9:], mtime=7) + b"\0"),
    "zlib-padded": ("deflate", lambda data: zlib.compress(data) + b"\0\0"),
}


def test_every_body_the_receiver_takes_is_forwarded_in_a_form_the_collector_reads(
        tmp_path: Path) -> None:
    """Agent → sidecar → a real OpenTelemetry Collector (its OTLP/HTTP receiver, as ``make
    collector`` builds it) → a second sidecar behind it: raw deflate goes on as zlib (the same
    compressed data), padded gzip without its padding, and the Collector takes every one (it
    answers 400 to the bodies as they came), so each run reaches the sidecar behind it."""
    from tests.ports import free_port
    from tests.test_scale_out import otelcol

    behind = running_server(sidecar_config(tmp_path / "behind"))
    with behind as backend:
        port = free_port()
        config = tmp_path / "collector.yaml"
        config.write_text(json.dumps({
            "receivers": {"otlp": {"protocols": {"http": {"endpoint": f"127.0.0.1:{port}"}}}},
            "exporters": {"load_balancing": {
                "protocol": {"otlp": {"tls": {"insecure": True}}},
                "resolver": {"static": {"hostnames": [backend.grpc_target]}}}},
            "service": {"telemetry": {"metrics": {"level": "none"}, "logs": {"level": "warn"}},
                        "pipelines": {"traces": {"receivers": ["otlp"],
                                                 "exporters": ["load_balancing"]}}}}))
        log = (tmp_path / "collector.log").open("w+")
        collector = subprocess.Popen([str(otelcol()), "--config", str(config)], stderr=log)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_until(lambda: collector.poll() is not None or (_listening(port) and http_request(
                "POST", url + "/v1/traces", b"", {"Content-Type": PROTOBUF})[0] == 200),
                "the Collector to accept exports", timeout=60)
            assert collector.poll() is None, "the Collector exited"
            config_a = sidecar_config(tmp_path / "state", forward_endpoint=url)
            with running_server(config_a) as sidecar:
                for case, (coding, compress) in CODED.items():
                    maker = SpanMaker()
                    with maker.agent(f"invoke_agent {case}", {"watchdog.run.id": case}):
                        maker.span("chat coded", chat_attrs(10, 2))
                    body = compress(encode_spans(maker.take()).SerializeToString())
                    status, answer = http_request(
                        "POST", sidecar.otlp_http + "/v1/traces", body,
                        {"Content-Type": PROTOBUF, "Content-Encoding": coding})
                    assert status == 200, (case, answer)
                wait_until(lambda: forwarded(sidecar)[("traces", "sent")]
                           + forwarded(sidecar)[("traces", "dropped_permanent")] == len(CODED),
                           "every request forwarded")
                assert forwarded(sidecar)[("traces", "dropped_permanent")] == 0
            for case in CODED:
                run = wait_until(lambda case=case: (found := _run_of(backend, case)) is not None
                                 and found, f"run {case} behind the Collector")
                assert run["signals"]["iterations"] == 1, case
        finally:
            collector.terminate()
            collector.wait(30)
            log.close()


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _run_of(server: RunningServer, key: str) -> dict[str, Any] | None:
    status, body = http_request("GET", f"{server.api}/v1/runs/{key}")
    return json.loads(body) if status == 200 else None


@pytest.mark.parametrize("case", sorted(CODED))
def test_a_body_goes_on_as_whole_streams_of_its_coding(case: str) -> None:
    """What goes on is gzip members (or one zlib stream, checksum checked) back to back and
    nothing after them, holding the message as it came; zlib with zero bytes after it, which
    the Collector reads, goes as it came."""
    coding, compress = CODED[case]
    message = b"\n\x00" * 300 + b"the message"
    body = compress(message)
    sent = codings.forwardable(body, coding, codings.decode(body, coding, 1 << 20))
    if case == "zlib-padded":
        assert sent == body
        return
    wbits = 16 + zlib.MAX_WBITS if coding == "gzip" else zlib.MAX_WBITS
    read, rest = b"", sent
    while rest:
        inflater = zlib.decompressobj(wbits)
        read += inflater.decompress(rest)
        assert inflater.eof
        rest = inflater.unused_data
    assert read == message
    assert sent[:2] == codings.ZLIB_HEADER if coding == "deflate" else sent[:2] == b"\x1f\x8b"
