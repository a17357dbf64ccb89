"""OTLP ingest as agents' exporters really behave: replicas of one service exporting at once,
batches delivered again after the sidecar restarted. Each against a served sidecar, sent by the
OTel SDK's own exporters, read back from ``/v1/runs``."""

from __future__ import annotations

import time
from pathlib import Path

from tests.harness import RunningServer, running_server, sidecar_config
from tests.otel import export_http
from tests.spans import SpanMaker, chat_attrs, tool_attrs


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
    maker = SpanMaker({"service.name": "restarted"})
    ids = {"watchdog.run.id": "across-restart", "gen_ai.agent.name": "explorer"}
    t = time.time() - 20
    root = maker.open("invoke_agent explorer", {"gen_ai.operation.name": "invoke_agent", **ids},
                      start=t)
    for step in range(3):
        maker.span("chat gpt-4o", chat_attrs(finish="tool_calls", **ids), parent=root,
                   start=t + step, end=t + step + 0.3)
        maker.span("execute_tool search", tool_attrs("search", f'{{"q": {step}}}', "found",
                                                     **ids), parent=root,
                   start=t + step + 0.4, end=t + step + 0.6)
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


def counts(sidecar: RunningServer) -> tuple[int, int]:
    run = sidecar.get_json("/v1/runs/across-restart")
    return run["iterations"], run["tool_calls"]
