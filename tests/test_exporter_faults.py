"""OTLP ingest as agents' exporters really behave: replicas of one service exporting at once,
batches delivered again after the sidecar restarted. Each against a served sidecar, sent by the
OTel SDK's own exporters, read back from ``/v1/runs``."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.trace import Span

from tests.harness import RunningServer, http_request, running_server, sidecar_config, wait_until
from tests.otel import export_http
from tests.ports import free_port
from tests.spans import SpanMaker, chat_attrs, tool_attrs
from tests.test_otlp_http import export_outcomes
from watchdog.shell.receivers import otlp_grpc

PROTOBUF = {"Content-Type": "application/x-protobuf"}


def test_loose_calls_of_two_replicas_of_one_service_are_two_runs(
        sidecar: RunningServer) -> None:
    """Two pods of one deployment (one ``service.name``, OTel's ``service.instance.id`` their
    own), each a home-grown loop traced only by its model client (a trace per call), export
    through one gateway at the same time: two invocations, never merged into one run."""
    pods = {pod: SpanMaker({"service.name": "support-bot", "service.namespace": "prod",
                            "service.instance.id": pod}) for pod in ("pod-a", "pod-b")}
    t = time.time() - 30
    for step in range(3):
        for offset, maker in enumerate(pods.values()):
            maker.span("chat gpt-4o", chat_attrs(finish="tool_calls"),
                       start=t + step + offset * 0.2, end=t + step + offset * 0.2 + 0.1)
    spans = [span for maker in pods.values() for span in maker.take()]
    spans.sort(key=lambda span: span.end_time or 0)  # as a gateway receives them, interleaved
    export_http(sidecar, spans)

    runs = sidecar.get_json("/v1/runs")["runs"]
    assert sorted((run["agent"], run["iterations"]) for run in runs) == [
        ("support-bot", 3), ("support-bot", 3)], runs

    # one conversation whose steps any replica serves (a stateless chat backend): one run
    chat = {"gen_ai.conversation.id": "conversation-7"}
    for step in range(4):
        maker = pods["pod-a" if step % 2 else "pod-b"]
        maker.span("chat gpt-4o", chat_attrs(finish="tool_calls", **chat), start=t + 10 + step)
    export_http(sidecar, [span for maker in pods.values() for span in maker.take()])
    (run,) = sidecar.get_json("/v1/runs?session=conversation-7")["runs"]
    assert run["iterations"] == 4


def test_a_batch_sent_again_after_a_restart_is_applied_once(tmp_path: Path) -> None:
    """The sidecar applied a batch and stopped (a rolling update) before the exporter read its
    answer; the exporter (or a Collector's queue) sends the batch again, re-cut, to the next
    process: its tool and model calls are counted once, not twice."""
    maker, root, t = explorer_steps("restarted", "across-restart", 3)
    spans = maker.take()
    config = sidecar_config(tmp_path / "state")
    with running_server(config) as sidecar:
        export_http(sidecar, spans)
        assert counts(sidecar) == (3, 3)
    with running_server(config) as sidecar:
        export_http(sidecar, spans[::-1])  # (re-cut: another body, the same spans)
        export_http(sidecar, spans[:2])
        assert counts(sidecar) == (3, 3)
        root.end(int((t + 5) * 1e9))  # the run goes on: its end is applied
        export_http(sidecar, maker.take())
        run = sidecar.get_json("/v1/runs/across-restart")
        assert (run["iterations"], run["tool_calls"], run["state"]) == (3, 3, "ended")


def explorer_steps(service: str, run_id: str, steps: int) -> tuple[SpanMaker, Span, float]:
    """The spans of ``steps`` steps of an explorer run ``run_id`` (a model call asking for a
    tool, then the tool's call) under its root, left open; the maker, the root, the start."""
    maker = SpanMaker({"service.name": service})
    ids = {"watchdog.run.id": run_id, "gen_ai.agent.name": "explorer"}
    t = time.time() - 20
    root = maker.open("invoke_agent explorer", {"gen_ai.operation.name": "invoke_agent", **ids},
                      start=t)
    for step in range(steps):
        maker.span("chat gpt-4o", chat_attrs(finish="tool_calls", **ids), parent=root,
                   start=t + step, end=t + step + 0.3)
        maker.span("execute_tool search", tool_attrs("search", f'{{"q": {step}}}', "found",
                                                     **ids), parent=root,
                   start=t + step + 0.4, end=t + step + 0.6)
    return maker, root, t


def counts(sidecar: RunningServer) -> tuple[int, int]:
    run = sidecar.get_json("/v1/runs/across-restart")
    return run["iterations"], run["tool_calls"]


def test_a_collector_retries_what_an_overloaded_sidecar_refuses_and_drops_nothing(
        tmp_path: Path) -> None:
    """A gateway's Collector (its OTLP exporter, several consumers) sends more calls at once
    than the sidecar has processing slots: the calls past the slots are refused with
    UNAVAILABLE and a RetryInfo, which the Collector retries, so every batch arrives. (gRPC's
    own RESOURCE_EXHAUSTED carries no RetryInfo: the Collector drops the batch on it.)"""
    from tests.test_scale_out import otelcol

    batches = 40
    bodies = []
    t = time.time() - 10
    for index in range(batches):
        maker = SpanMaker({"service.name": "gateway-agents"})
        ids = {"watchdog.run.id": f"pressed-{index}"}
        for step in range(100):
            maker.span("execute_tool search", tool_attrs("search", f'{{"q": {step}}}',
                                                         "found " * 50, **ids),
                       start=t + step * 0.01, end=t + step * 0.01 + 0.005)
        bodies.append(encode_spans(maker.take()).SerializeToString())
    with running_server(sidecar_config(tmp_path / "state", max_pending_requests=2)) as sidecar:
        port = free_port()
        config = tmp_path / "collector.yaml"
        config.write_text(json.dumps({
            "receivers": {"otlp": {"protocols": {"http": {"endpoint": f"127.0.0.1:{port}"}}}},
            "exporters": {"load_balancing": {
                "protocol": {"otlp": {
                    "tls": {"insecure": True},
                    # (at most 4 calls a slot in flight: gRPC core's own bound is not reached)
                    "sending_queue": {"enabled": True, "num_consumers": 6, "queue_size": 500},
                    "retry_on_failure": {"enabled": True, "initial_interval": "100ms",
                                         "max_interval": "500ms", "max_elapsed_time": "60s"}}},
                "resolver": {"static": {"hostnames": [sidecar.grpc_target]}}}},
            "service": {"telemetry": {"metrics": {"level": "none"}, "logs": {"level": "warn"}},
                        "pipelines": {"traces": {"receivers": ["otlp"],
                                                 "exporters": ["load_balancing"]}}}}))
        log_path = tmp_path / "collector.log"
        with log_path.open("w") as log:
            collector = subprocess.Popen([str(otelcol()), "--config", str(config)],
                                         stderr=log)
        try:
            url = f"http://127.0.0.1:{port}/v1/traces"
            wait_until(lambda: collector.poll() is not None or _accepts(url),
                       "the Collector to accept exports", timeout=60)
            assert collector.poll() is None, log_path.read_text()
            with ThreadPoolExecutor(8) as pool:
                statuses = set(pool.map(lambda body: http_request("POST", url, body, PROTOBUF,
                                                                  timeout=30)[0], bodies))
            assert statuses == {200}

            def arrived() -> int:
                runs = sidecar.get_json(f"/v1/runs?limit={batches}")["runs"]
                return sum(run["tool_calls"] == 100 for run in runs)

            wait_until(lambda: arrived() == batches or "Dropping data" in log_path.read_text(),
                       "every batch at the sidecar", timeout=60)
            assert "Dropping data" not in log_path.read_text(), log_path.read_text()[-2000:]
            assert arrived() == batches
            assert export_outcomes(sidecar, "grpc").get("overloaded", 0) > 0  # (pressed)
        finally:
            collector.terminate()
            collector.wait(30)


def _accepts(url: str) -> bool:
    try:
        return http_request("POST", url, b"", PROTOBUF, timeout=2)[0] == 200
    except OSError:
        return False


def test_a_grpc_call_whose_message_stalls_gives_its_slot_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A call holds its processing slot from before its message is read: one whose message
    never comes is answered DEADLINE_EXCEEDED after ``MESSAGE_READ_TIMEOUT`` and frees its
    slot, so the next export (the only slot) is served."""
    monkeypatch.setattr(otlp_grpc, "MESSAGE_READ_TIMEOUT", 0.3)
    release = threading.Event()

    def stalled() -> Iterator[bytes]:
        release.wait(10)  # (the message would come only after the answer)
        yield b""

    maker = SpanMaker()
    maker.span("chat gpt-4o", chat_attrs(**{"watchdog.run.id": "after-the-stall"}),
               start=time.time() - 5)
    body = encode_spans(maker.take()).SerializeToString()
    with running_server(sidecar_config(tmp_path / "state", max_pending_requests=1)) as sidecar, \
            grpc.insecure_channel(sidecar.grpc_target) as channel:
        export = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
        with pytest.raises(grpc.RpcError) as caught:
            channel.stream_unary(export)(stalled(), timeout=10)
        release.set()
        error: grpc.Call = caught.value  # type: ignore[assignment]
        assert error.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        assert "did not arrive within 0.3s" in (error.details() or "")
        assert channel.unary_unary(export)(body, timeout=10) == b""
        assert sidecar.get_json("/v1/runs/after-the-stall")["iterations"] == 1
