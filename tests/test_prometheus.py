"""The metrics endpoint as Prometheus sees it: a real ``prometheus`` server scrapes a real sidecar
that a real OTLP/HTTP exporter feeds, and the answers come from Prometheus's query API.

``make test`` installs the Debian ``prometheus`` package (which brings ``promtool``); when the
binaries are missing these tests fail rather than skip, because the contract of DESIGN §9 is
what Prometheus stores, not what the endpoint prints.
"""

from __future__ import annotations

import json
import shutil
import socket
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

from tests.harness import RunningServer, http_request

SCRAPE_INTERVAL = "1s"
WAIT_SECONDS = 20.0  # scrape every 1 s: a healthy setup answers within ~2 s
POLL_SECONDS = 0.2
OPENMETRICS_ACCEPT = "application/openmetrics-text;version=1.0.0"


def binary(name: str) -> str:
    path = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
    if path is None:
        pytest.fail(f"{name} is not installed; `make test` installs the Debian package "
                    "prometheus (or run `make system-deps`)")
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Prometheus:
    def __init__(self, url: str, process: subprocess.Popen[bytes], log: Path) -> None:
        self.url = url
        self.process = process
        self.log = log

    def api(self, path: str, **params: str) -> Any:
        status, body = http_request("GET", f"{self.url}/api/v1/{path}?"
                                    + urllib.parse.urlencode(params), timeout=5)
        assert status == 200, (path, params, status, body[:500])
        return json.loads(body)["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.api("query", query=expr)["result"]
        return result

    def scalar(self, expr: str) -> float | None:
        """The value of a query that yields one series, or None while it yields none."""
        result = self.query(expr)
        return float(result[0]["value"][1]) if len(result) == 1 else None

    def diagnosis(self) -> str:
        targets = self.api("targets")["activeTargets"]
        health = [(t["scrapeUrl"], t["health"], t["lastError"]) for t in targets]
        return f"targets: {health}\nprometheus log tail:\n{self.log.read_text()[-2000:]}"

    def wait_for(self, expected: dict[str, float]) -> None:
        """Poll until every query returns its expected value (bounded)."""
        deadline = time.monotonic() + WAIT_SECONDS
        seen: dict[str, float | None] = {}
        while time.monotonic() < deadline:
            seen = {expr: self.scalar(expr) for expr in expected}
            if seen == expected:
                return
            time.sleep(POLL_SECONDS)
        pytest.fail(f"after {WAIT_SECONDS}s Prometheus answers {seen}, expected {expected}\n"
                    + self.diagnosis())


def start_prometheus(tmp_path: Path, target: str) -> Prometheus:
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n"
        f"  scrape_interval: {SCRAPE_INTERVAL}\n"
        f"  scrape_timeout: {SCRAPE_INTERVAL}\n"
        "scrape_configs:\n"
        "  - job_name: watchdog\n"
        f"    static_configs: [{{targets: ['{target}']}}]\n")
    port = free_port()
    log = tmp_path / "prometheus.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [binary("prometheus"), f"--config.file={config}",
             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}",
             "--enable-feature=exemplar-storage", "--log.level=warn"],
            stdout=out, stderr=subprocess.STDOUT)
    prometheus = Prometheus(f"http://127.0.0.1:{port}", process, log)
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"prometheus exited with {process.returncode}:\n{log.read_text()}")
        try:
            if http_request("GET", prometheus.url + "/-/ready", timeout=1)[0] == 200:
                return prometheus
        except OSError:
            pass
        time.sleep(POLL_SECONDS)
    stop(process)
    pytest.fail(f"prometheus not ready after {WAIT_SECONDS}s:\n{log.read_text()}")


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


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
