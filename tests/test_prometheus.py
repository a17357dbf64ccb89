"""The metrics endpoint as Prometheus sees it: a real ``prometheus`` server scrapes a real sidecar
that a real OTLP/HTTP exporter feeds, and the answers come from Prometheus's query API.

``make test`` installs the Debian ``prometheus`` package (which brings ``promtool``); when the
binaries are missing these tests fail rather than skip, because the contract of DESIGN §9 is
what Prometheus stores, not what the endpoint prints.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Status, StatusCode, Tracer, set_span_in_context

from tests.harness import RunningServer, http_request, running_server, sidecar_config
from tests.prom import Prometheus, binary, start_prometheus, stop

OPENMETRICS_ACCEPT = "application/openmetrics-text;version=1.0.0"
# The runs that ended, by agent and the state they are in now (docs/metrics.md)
ENDED_BY_STATE = (
    "sum by (agent, terminal_state) (agent_watchdog_runs_finished_total)"
    " - (sum by (agent, terminal_state) (agent_watchdog_runs_reclassified_total)"
    " or sum by (agent, terminal_state) (agent_watchdog_runs_finished_total) * 0)")


@pytest.fixture
def prometheus(tmp_path: Path, sidecar: RunningServer) -> Iterator[Prometheus]:
    target = urllib.parse.urlsplit(sidecar.metrics).netloc
    running = start_prometheus(tmp_path, target)
    yield running
    stop(running.process)


@pytest.fixture
def tracer(sidecar: RunningServer) -> Iterator[tuple[Tracer, Callable[[], None]]]:
    """A tracer whose spans reach the sidecar the way an agent's do: BatchSpanProcessor and the
    OTLP/HTTP exporter. The second element flushes the batch now."""
    provider = TracerProvider(resource=Resource.create({"service.name": "agents"}))
    exporter = OTLPSpanExporter(endpoint=sidecar.otlp_http + "/v1/traces")
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=200))

    def flush() -> None:
        assert provider.force_flush(10_000)

    yield provider.get_tracer("watchdog-tests"), flush
    provider.shutdown()


def agent_run(tracer: Tracer, agent: str, tools: list[str], finish: bool = True) -> str:
    """One agent run in the OTel GenAI conventions; returns its trace id."""
    root = tracer.start_span(f"invoke_agent {agent}", attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent})
    context = set_span_in_context(root)
    llm: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.agent.name": agent,
           "gen_ai.usage.input_tokens": 100, "gen_ai.usage.output_tokens": 10}
    tracer.start_span("chat", context=context, attributes=llm).end()
    for i, tool in enumerate(tools):
        span = tracer.start_span(f"execute_tool {tool}", context=context, attributes={
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
            "gen_ai.agent.name": agent, "gen_ai.tool.call.arguments": json.dumps({"i": i})})
        if tool == "fail":
            span.set_attribute("error.type", "TimeoutError")
            span.set_status(Status(StatusCode.ERROR, "timed out"))
        span.end()
    tracer.start_span("chat", context=context, attributes={
        **llm, "gen_ai.response.finish_reasons": ["stop"]}).end()
    if finish:
        root.end()
    return format(root.get_span_context().trace_id, "032x")


def test_prometheus_scrapes_what_agents_did(
        sidecar: RunningServer, prometheus: Prometheus,
        tracer: tuple[Tracer, Callable[[], None]]) -> None:
    tracer_, flush = tracer
    traces = [agent_run(tracer_, "explorer", ["search", "search", "read"]),
              agent_run(tracer_, "explorer", ["search", "fail", "read"])]
    agent_run(tracer_, "writer", ["draft"], finish=False)  # still running
    flush()
    start = time.time()

    prometheus.wait_for({
        'up{job="watchdog"}': 1,
        'sum(agent_watchdog_tool_calls_total{agent="explorer"})': 6,
        'agent_watchdog_tool_calls_total{agent="explorer",tool="search"}': 3,
        'agent_watchdog_runs_finished_total{agent="explorer",terminal_state="completed"}': 2,
        'agent_watchdog_errors_total{agent="explorer",error_type="TimeoutError"}': 1,
        'agent_watchdog_tokens_total{agent="explorer",direction="input"}': 400,
        'agent_watchdog_run_tool_calls_sum{agent="explorer"}': 6,
        'agent_watchdog_run_iterations_count{agent="explorer"}': 2,
        'agent_watchdog_runs_active{agent="writer"}': 1,
        'agent_watchdog_runs_active{agent="explorer"}': 0,
        'agent_watchdog_spans_received_total{protocol="http"}': 15,
        'sum(agent_watchdog_export_requests_total{protocol="http",outcome="ok"}) > bool 0': 1,
        'count(agent_watchdog_build_info)': 1,
    })
    # Prometheus asked for OpenMetrics, so the trace ids arrived as exemplars, not as labels.
    exemplars = prometheus.api("query_exemplars", query="agent_watchdog_runs_finished_total",
                               start=str(start - 60), end=str(time.time() + 60))
    trace_ids = {e["labels"].get("trace_id") for series in exemplars for e in series["exemplars"]}
    assert trace_ids & set(traces), exemplars
    series = prometheus.api("series", **{"match[]": '{__name__=~"agent_watchdog_.+"}'})
    for labels in series:
        for name, value in labels.items():
            assert not any(t in value for t in traces), (name, value)


def test_exposition_passes_promtool(sidecar: RunningServer,
                                    tracer: tuple[Tracer, Callable[[], None]]) -> None:
    tracer_, flush = tracer
    agent_run(tracer_, "explorer", ["search", "fail"])
    flush()
    for accept in ("", OPENMETRICS_ACCEPT):
        status, body = http_request("GET", sidecar.metrics + "/metrics",
                                    headers={"Accept": accept})
        assert status == 200
        assert b'agent_watchdog_tool_calls_total{agent="explorer",tool="search"} 1.0' in body
    status, body = http_request("GET", sidecar.metrics + "/metrics")
    lint = subprocess.run([binary("promtool"), "check", "metrics"], input=body,
                          capture_output=True, timeout=30)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_the_counters_alerts_count_are_shown_at_zero_ahead(sidecar: RunningServer) -> None:
    """A labelled counter's series born at its first increment is a step from nothing that
    ``increase()`` never sees (the first rule error would not alert): every loaded rule has its
    ``rule_errors_total`` and the outbox its undelivered outcomes at 0 before any happens."""
    rules = sidecar.call(lambda: [rule.name for rule in sidecar.server.rules.engine.ruleset.rules])
    assert "error-loop" in rules
    status, body = http_request("GET", sidecar.metrics + "/metrics")
    assert status == 200
    text = body.decode()
    for rule in rules:
        assert f'agent_watchdog_rule_errors_total{{rule="{rule}"}} 0.0' in text.splitlines()
    for action in ("notify", "wind_down", "abort"):
        for outcome in ("dropped", "conflict"):
            assert (f'agent_watchdog_directives_delivered_total{{action="{action}",'
                    f'channel="outbox",outcome="{outcome}"}} 0.0') in text.splitlines()


def test_a_webhooks_outcomes_are_shown_at_zero_ahead(tmp_path: Path) -> None:
    hook = {"name": "ops", "url": "http://127.0.0.1:9/hook", "secret": "whsec_" + "k" * 32}
    with running_server(sidecar_config(tmp_path / "state", webhooks=(hook,))) as server:
        status, body = http_request("GET", server.metrics + "/metrics")
    assert status == 200
    lines = body.decode().splitlines()
    for action in ("notify", "wind_down", "abort"):
        for outcome in ("delivered", "retry", "failed"):
            assert (f'agent_watchdog_directives_delivered_total{{action="{action}",'
                    f'channel="webhook",outcome="{outcome}"}} 0.0') in lines


def test_a_run_classified_again_after_its_end_is_counted_in_its_new_state(
        sidecar: RunningServer, prometheus: Prometheus) -> None:
    """Two export paths (two processes, two exporters) of one run: the agent's span comes
    first, with no answer, and the run ends ``no_response``; the model call that answered
    comes after, and the run is ``completed``. What Prometheus stores says what ``/v1/runs``
    says: the end counted, and the move from the state it was counted in."""
    def provider() -> TracerProvider:
        made = TracerProvider(resource=Resource.create({"service.name": "agents"}))
        made.add_span_processor(BatchSpanProcessor(
            OTLPSpanExporter(endpoint=sidecar.otlp_http + "/v1/traces"),
            schedule_delay_millis=60_000))
        return made

    agents, models = provider(), provider()
    root = agents.get_tracer("agent").start_span("invoke_agent late", attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "late"})
    models.get_tracer("model").start_span(
        "chat", context=set_span_in_context(root), attributes={
            "gen_ai.operation.name": "chat", "gen_ai.agent.name": "late",
            "gen_ai.response.finish_reasons": ["stop"],
            "gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 5}).end()
    root.end()
    trace_id = format(root.get_span_context().trace_id, "032x")
    assert agents.force_flush(10_000)
    ended = 'agent_watchdog_runs_finished_total{agent="late",terminal_state="no_response"}'
    prometheus.wait_for({ended: 1})
    (run,) = sidecar.get_json("/v1/runs?state=ended")["runs"]
    assert (run["trace_id"], run["terminal_state"]) == (trace_id, "no_response")

    assert models.force_flush(10_000)
    moved = 'agent_watchdog_runs_reclassified_total{agent="late",terminal_state="no_response"}'
    again = 'agent_watchdog_runs_finished_total{agent="late",terminal_state="completed"}'
    prometheus.wait_for({ended: 1, moved: 1, again: 1})
    (run,) = sidecar.get_json("/v1/runs?state=ended")["runs"]
    assert (run["trace_id"], run["terminal_state"]) == (trace_id, "completed")
    # what docs/metrics.md says to query: the runs that ended, by the state they are in now
    by_state = {series["metric"]["terminal_state"]: float(series["value"][1])
                for series in prometheus.query(ENDED_BY_STATE)}
    assert by_state == {"no_response": 0.0, "completed": 1.0}
    agents.shutdown()
    models.shutdown()
