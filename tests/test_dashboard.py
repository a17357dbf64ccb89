"""The Grafana dashboard and the alert rules against real data: a real Prometheus scrapes a real
sidecar that agents feed — the benchmark's workload (bench/workload.py) over OTLP/HTTP and
scripted runs through the OTel SDK's exporter — and every query of the dashboard, and every
alert expression without its threshold, must return data. No dead panels, no alert on a metric
that does not exist.

The workload runs twice, with a scrape in between, so counters move between two samples and
rates, increases and histogram quantiles are numbers rather than NaN. Each round has finished
runs in several terminal states (completed, error, tool_limit_reached from the default budget
rules), an error loop the default pack aborts and that stays active (stuck), failing tools, a
rejected span, an undecodable request, a webhook that refuses directives and one that answers
503 (retried), a custom rule that fails to evaluate, and model calls through the model endpoint
(answered, steered by a budget's countdown, and failed upstream).
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Status, StatusCode, Tracer, set_span_in_context
from prometheus_client.parser import text_string_to_metric_families

from bench.workload import batches
from tests.frameworks.fakellm import FakeLLM, answer, steps
from tests.harness import (
    RunningServer,
    http_request,
    running_server,
    sidecar_config,
    wait_until,
)
from tests.prom import (
    ROOT,
    Prometheus,
    alert_groups,
    alert_rules,
    start_prometheus,
    stop,
)
from tools import dashboard

DASHBOARD = ROOT / "helm/agent-watchdog/dashboards/agent-watchdog.json"
AGENT = "agent-0"  # the value of $agent; bench/workload.py names its agents agent-0..7
# What Grafana puts in place of its variables for an instant query "now".
GRAFANA_VARIABLES = {
    "${datasource}": "prometheus",
    "${agent}": AGENT,
    "$agent": AGENT,
    "$cluster": ".*",  # "All": the test's series have no cluster label, which .* matches
    "$namespace": ".*",
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "1h",
}
SECRET = "whsec_" + "c2VjcmV0LWtleS1ieXRlcy1mb3ItdGVzdHMtMDAwMQ=="
PROTOBUF = {"Content-Type": "application/x-protobuf"}
# A rule that reads a budget field without has(): it fails to evaluate for every run without
# max_iterations, which is what agent_watchdog_rule_errors_total counts.
FAILING_PACK = """\
apiVersion: agent-watchdog/v1
kind: RulePack
name: dashboard-test
rules:
  - name: unguarded-iteration-budget
    description: Reads run.budget.max_iterations without has().
    when: "!run.ended && run.budget.max_iterations > 1000"
    action: notify
    message: never
"""
COMPARISON = re.compile(r"\s*(==|!=|>=|<=|>|<)\s*(bool\s+)?-?[0-9][0-9.]*(e[+-]?[0-9]+)?")
SELECTOR = re.compile(r"\b(agent_watchdog_\w+)(\{[^}]*\})?")
ABSENT = re.compile(r"^\s*absent\((.*)\)\s*$", re.DOTALL)


# -- what the tests read --------------------------------------------------------------------------

def substitute(expr: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    assert "$" not in expr, f"a Grafana variable the test does not know: {expr}"
    return expr


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", ())  # a collapsed row holds its panels


def targets(board: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(panel["title"], target) for panel in panels(board)
            for target in panel.get("targets", ())]


def left_hand_side(expr: str) -> str:
    """An alert expression without its thresholds (``absent(x)``: ``x``): what must have data."""
    absent = ABSENT.match(expr)
    if absent:
        return absent.group(1)
    return COMPARISON.sub("", expr)


def has_data(result: list[dict[str, Any]]) -> bool:
    return any(not math.isnan(float(series["value"][1])) for series in result)


# -- the world: a sidecar, its webhooks, its agents -----------------------------------------------

class Receiver:
    """Webhook receivers on one port: ``/refuse`` answers 400 (the directive fails at once),
    ``/unavailable`` 503 (it is retried)."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.send_response(400 if self.path == "/refuse" else 503)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Agents:
    """Scripted runs of agent-0 through the OTel SDK and its OTLP/HTTP exporter; ``flush``
    ends an export request, so a run's spans reach the sidecar in several requests."""

    def __init__(self, sidecar: RunningServer) -> None:
        self.provider = TracerProvider(resource=Resource.create({"service.name": "agents"}))
        self.provider.add_span_processor(BatchSpanProcessor(
            OTLPSpanExporter(endpoint=sidecar.otlp_http + "/v1/traces"),
            schedule_delay_millis=200))
        self.tracer: Tracer = self.provider.get_tracer("dashboard-tests")

    def flush(self) -> None:
        assert self.provider.force_flush(10_000)

    def close(self) -> None:
        self.provider.shutdown()

    def run(self, tools: list[str], budget: int | None = None, fail: str | None = None,
            end: str = "answer", session: str | None = None,
            before_end: Callable[[], None] | None = None) -> None:
        """One run (of ``session``, when given): a chat, ``tools`` (each failing with ``fail``
        when given), ``before_end``, then the root span ends it with an answer, an error, or
        not at all (``end="none"``)."""
        extra: dict[str, Any] = {"gen_ai.agent.name": AGENT}
        if budget is not None:
            extra["watchdog.budget.max_tool_calls"] = budget
        if session is not None:
            extra["watchdog.session.id"] = session
        root = self.tracer.start_span(f"invoke_agent {AGENT}", attributes={
            **extra, "gen_ai.operation.name": "invoke_agent"})
        context = set_span_in_context(root)
        llm = {**extra, "gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 300,
               "gen_ai.usage.output_tokens": 40}
        self.tracer.start_span("chat", context=context, attributes=llm).end()
        for i, tool in enumerate(tools):
            span = self.tracer.start_span(f"execute_tool {tool}", context=context, attributes={
                **extra, "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
                "gen_ai.tool.call.arguments": json.dumps({"path": f"src/{i}.py"})})
            if fail:
                span.set_attribute("error.type", "PermissionError")
                span.set_status(Status(StatusCode.ERROR, fail))
            span.end()
            self.flush()  # the rules see each step, as they would in a live agent
        if before_end is not None:
            before_end()
        if end == "none":
            return
        self.tracer.start_span("chat", context=context, attributes={
            **llm, "gen_ai.response.finish_reasons": ["stop"]}).end()
        if end == "error":
            root.set_attribute("error.type", "RuntimeError")
            root.set_status(Status(StatusCode.ERROR, "the model provider is down"))
        root.end()
        self.flush()


def rejected_span_request(round_: int) -> bytes:
    """A request with one good span and one whose trace id is 8 bytes (rejected)."""
    request = ExportTraceServiceRequest()
    spans = request.resource_spans.add().scope_spans.add().spans
    for trace_id in (bytes([round_]) * 16, bytes([round_]) * 8):
        span = spans.add(trace_id=trace_id, span_id=bytes([round_ + 1]) * 8,
                         name=f"chat round {round_}", start_time_unix_nano=time.time_ns(),
                         end_time_unix_nano=time.time_ns())
        span.attributes.add(key="gen_ai.operation.name").value.string_value = "chat"
    return request.SerializeToString()


def sidecar_values(sidecar: RunningServer) -> dict[str, float]:
    """The sidecar's own counters, summed by metric name (and outcome for deliveries)."""
    status, body = http_request("GET", sidecar.metrics + "/metrics")
    assert status == 200
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            key = sample.name
            if "outcome" in sample.labels:
                key += f'{{outcome="{sample.labels["outcome"]}"}}'
            values[key] = values.get(key, 0.0) + sample.value
    return values


ANSWERING_MODEL = "dashboard-model"


def model_calls(round_: int, sidecar: RunningServer) -> None:
    """Agent-0's calls through the model endpoint: one answered as sent (passed), one steered
    by the countdown of the budget its header announces (note), one to a model the upstream
    does not know (its 400 passed through: upstream_error)."""
    url = sidecar.url("model") + "/v1/chat/completions"
    for model, extra, expected in ((ANSWERING_MODEL, {}, 200),
                                   (ANSWERING_MODEL, {"x-watchdog-budget-tool-calls": "2"}, 200),
                                   ("no-such-model", {}, 400)):
        body = {"model": model, "messages": [
            {"role": "system", "content": "You answer."},
            {"role": "user", "content": f"Round {round_}: {model} {sorted(extra)}"}],
            "tools": [{"type": "function", "function": {"name": "search", "parameters": {
                "type": "object"}}}]}
        status, answer_body = http_request("POST", url, json.dumps(body).encode(), {
            "Content-Type": "application/json", "Authorization": "Bearer sk-dashboard-test",
            "x-watchdog-agent": AGENT, **extra})
        assert status == expected, (status, answer_body)


def play_round(round_: int, sidecar: RunningServer, agents: Agents, prometheus: Prometheus
               ) -> None:
    for body in batches(runs=8, batch_size=40, total_spans=320, seed=round_):
        status, _ = http_request("POST", sidecar.otlp_http + "/v1/traces", body, PROTOBUF)
        assert status == 200
    agents.run(["read", "search"])  # completed
    agents.run(["read", "read", "search", "grep"], budget=3)  # aborted: tool_limit_reached
    agents.run(["deploy"], end="error")  # error
    agents.run(["open"] * 5, fail="permission denied: /srv/data", end="none")  # stuck loop

    def no_progress() -> None:  # the same work left three times: stopped for a human
        for _ in range(3):
            status, answer = http_request(
                "POST", f"{sidecar.api}/v1/sessions/stalled-{round_}/checkpoints",
                json.dumps({"remaining": "migrate the billing tables"}).encode(),
                {"Content-Type": "application/json"})
            assert status == 200, answer
    agents.run(["migrate"], session=f"stalled-{round_}", before_end=no_progress)
    status, _ = http_request("POST", sidecar.otlp_http + "/v1/traces",
                             rejected_span_request(round_), PROTOBUF)
    assert status == 200  # partial success
    status, _ = http_request("POST", sidecar.otlp_http + "/v1/traces",
                             b"not protobuf %d" % round_, PROTOBUF)
    assert status == 400
    model_calls(round_, sidecar)

    # Every directive reached both webhooks once (refused; retried), then Prometheus has it all.
    def delivered() -> bool:
        values = sidecar_values(sidecar)
        fired = values.get("agent_watchdog_rule_fired_total", 0)
        return fired > 0 and values.get(
            'agent_watchdog_directives_delivered_total{outcome="failed"}', 0) == fired
    wait_until(delivered, "every directive refused by the /refuse webhook")
    values = sidecar_values(sidecar)
    prometheus.wait_for_at_least({
        f"sum({name})": values[name] for name in (
            "agent_watchdog_spans_received_total", "agent_watchdog_spans_rejected_total",
            "agent_watchdog_runs_finished_total", "agent_watchdog_rule_fired_total",
            "agent_watchdog_rule_errors_total", "agent_watchdog_tool_calls_total",
            "agent_watchdog_run_iterations_count", "agent_watchdog_model_steered_total",
            "agent_watchdog_model_upstream_duration_seconds_count")} | {
        f'sum(agent_watchdog_model_requests_total{{outcome="{outcome}"}})':
            values[f'agent_watchdog_model_requests_total{{outcome="{outcome}"}}']
        for outcome in ("passed", "steered", "upstream_error")} | {
        f'sum(agent_watchdog_directives_delivered_total{{outcome="{outcome}"}})':
            values[f'agent_watchdog_directives_delivered_total{{outcome="{outcome}"}}']
        for outcome in ("failed", "retry")} | {
        f'sum(agent_watchdog_export_requests_total{{outcome="{outcome}"}})':
            values[f'agent_watchdog_export_requests_total{{outcome="{outcome}"}}']
        for outcome in ("ok", "partial", "invalid")} | {
        f'sum(agent_watchdog_runs_stuck{{agent="{AGENT}"}})': round_})


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    tmp = tmp_path_factory.mktemp("dashboard")
    pack = tmp / "failing.yaml"
    pack.write_text(FAILING_PACK)
    receiver = Receiver()
    try:
        with FakeLLM() as llm, running_server(sidecar_config(
                tmp / "state", rules=(str(pack),), model_address="127.0.0.1:0",
                model_upstream=llm.base_url, webhooks=(
                    {"name": "refuses", "url": receiver.url + "/refuse", "secret": SECRET},
                    {"name": "unavailable", "url": receiver.url + "/unavailable",
                     "secret": SECRET}))) as sidecar:
            llm.script(ANSWERING_MODEL, steps(answer("Done.")))
            target = urllib.parse.urlsplit(sidecar.metrics).netloc
            running = start_prometheus(tmp, target, job="agent-watchdog")
            agents = Agents(sidecar)
            try:
                running.wait_for({'up{job="agent-watchdog"}': 1})
                for round_ in (1, 2):
                    play_round(round_, sidecar, agents, running)
                yield running
            finally:
                agents.close()
                stop(running.process)
    finally:
        receiver.close()


# -- the tests ------------------------------------------------------------------------------------

def test_the_committed_dashboard_is_what_the_generator_writes() -> None:
    assert DASHBOARD.read_text() == dashboard.render(), (
        "helm/agent-watchdog/dashboards/agent-watchdog.json is stale: "
        "run .venv/bin/python tools/dashboard.py")


def test_the_dashboard_shows_every_metric_the_alert_runbook_names() -> None:
    """docs/alerts.md sends its reader to the dashboard: "shows every metric named here"."""
    runbook = (ROOT / "docs" / "alerts.md").read_text("utf-8")
    assert "shows every metric named here" in runbook
    shown = {name for _, target in targets(json.loads(DASHBOARD.read_text()))
             for name, _ in SELECTOR.findall(target["expr"])}
    named = set(re.findall(r"\b(agent_watchdog_\w+)", runbook))
    assert named and not named - shown, sorted(named - shown)


def test_every_panel_uses_the_datasource_variable() -> None:
    board = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert [v["name"] for v in board["templating"]["list"]] == [
        "datasource", "cluster", "namespace", "agent"]
    for name in ("cluster", "namespace", "agent"):
        assert variables[name]["type"] == "query"
        assert variables[name]["datasource"]["uid"] == "${datasource}"
        assert (variables[name]["multi"], variables[name]["includeAll"],
                variables[name]["allValue"]) == (True, True, ".*")
    # Chained: the namespaces of the chosen clusters, the agents of the chosen namespaces.
    assert variables["cluster"]["query"] == "label_values(agent_watchdog_build_info, cluster)"
    assert 'cluster=~"$cluster"' in variables["namespace"]["query"]
    assert dashboard.SCOPE in variables["agent"]["query"]
    ids = [panel["id"] for panel in panels(board)]
    assert len(ids) == len(set(ids))
    for panel in panels(board):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            exemplars = dashboard.carries_exemplars(target["expr"]) and not target["instant"]
            assert target.get("exemplar", False) == exemplars, (
                panel["title"], target["expr"])


def test_every_dashboard_query_returns_data(prometheus: Prometheus) -> None:
    board = json.loads(DASHBOARD.read_text())
    dead = {}
    for title, target in targets(board):
        expr = substitute(target["expr"])
        result = prometheus.query(expr)
        if not has_data(result):
            dead[f"{title} [{target['refId']}]"] = (expr, result)
    assert not dead, json.dumps(dead, indent=1)
    variables = {v["name"]: v["query"] for v in board["templating"]["list"]}
    match = re.fullmatch(r"label_values\((.*), agent\)", variables["agent"])
    assert match, variables["agent"]
    agents = prometheus.api("label/agent/values", **{"match[]": substitute(match.group(1))})
    assert AGENT in agents  # the $agent variable's query


def test_every_metric_exists_and_is_filtered_by_cluster_namespace_and_agent(
        prometheus: Prometheus) -> None:
    series = prometheus.api("series", **{"match[]": '{__name__=~"agent_watchdog_.+"}'})
    labels: dict[str, set[str]] = {}
    for item in series:
        labels.setdefault(item["__name__"], set()).update(item)
    board = json.loads(DASHBOARD.read_text())
    for title, target in targets(board):
        for name, selector in SELECTOR.findall(target["expr"]):
            assert name in labels, f"{title}: no series named {name}"
            assert selector.startswith("{" + dashboard.SCOPE), (title, target["expr"])
            if "agent" in labels[name]:
                assert 'agent=~"$agent"' in selector, (title, target["expr"])


def test_exemplars_carry_trace_ids(prometheus: Prometheus) -> None:
    board = json.loads(DASHBOARD.read_text())
    now = time.time()
    missing = []
    for title, target in targets(board):
        if not target.get("exemplar"):
            continue
        expr = substitute(target["expr"])
        found = prometheus.api("query_exemplars", query=expr, start=str(now - 300),
                               end=str(now + 60))
        trace_ids = {e["labels"].get("trace_id") for s in found for e in s["exemplars"]}
        if not any(trace_ids):
            missing.append((title, expr))
    assert not missing, missing


def test_every_alert_expression_has_data(prometheus: Prometheus) -> None:
    rules = alert_rules(alert_groups())
    assert rules
    dead = {}
    for rule in rules:
        if rule["alert"] == "AgentWatchdogAbsent":
            continue  # kube-state-metrics' series: the next test
        expr = left_hand_side(rule["expr"])
        assert not COMPARISON.search(expr), expr
        # `A unless B` is empty while all is well (B: the good passes): each side has data
        # (an `unless` inside parentheses, e.g. a series born in the window, is queried whole)
        for part in top_level_unless(expr):
            result = prometheus.query(part.strip())
            if not has_data(result):
                dead[rule["alert"]] = (part.strip(), result)
    assert not dead, json.dumps(dead, indent=1)


def top_level_unless(expr: str) -> list[str]:
    """The sides of ``expr``'s ``unless`` operators outside any parentheses."""
    parts, depth, start = [], 0, 0
    for match in re.finditer(r"[()]|\bunless(?: on \([^)]*\))?", expr):
        token = match.group()
        if token == "(":
            depth += 1
        elif token == ")":
            depth -= 1
        elif depth == 0:
            parts.append(expr[start:match.start()])
            start = match.end()
    return [*parts, expr[start:]]


def test_the_absent_alert_reads_the_watchdogs_series_and_is_silent(
        prometheus: Prometheus) -> None:
    """What AgentWatchdogAbsent reads of the watchdog (after ``unless``) has data here; the pods
    it reads from kube-state-metrics do not exist in this Prometheus, so it returns nothing
    (it fires in the promtool unit tests, which give it those series)."""
    [rule] = [r for r in alert_rules(alert_groups()) if r["alert"] == "AgentWatchdogAbsent"]
    pods, _, scraped = rule["expr"].partition("unless on (cluster, namespace, pod)")
    assert scraped and "kube_pod_status_phase" in pods
    for selector in re.findall(r"\b(?:agent_watchdog_build_info|up)\{?[^}\s)]*\}?", scraped):
        assert has_data(prometheus.query(selector)), selector
    assert prometheus.query(rule["expr"]) == []


def test_unless_is_split_outside_parentheses_only() -> None:
    assert top_level_unless("a unless on (x) b") == ["a ", " b"]
    assert top_level_unless("sum((a unless a offset 5m) or c) unless d") == [
        "sum((a unless a offset 5m) or c) ", " d"]


def test_thresholds_are_stripped_from_alert_expressions() -> None:
    assert left_hand_side("sum by (a) (x) > 0") == "sum by (a) (x)"
    assert left_hand_side('(a / b) > 0.25\nand\nc{x=~"1|2"} >= 3') == '(a / b)\nand\nc{x=~"1|2"}'
    assert left_hand_side('up{job=~".*w.*"} == 0') == 'up{job=~".*w.*"}'
    assert left_hand_side("count(x == 0) > 0") == "count(x)"
    assert left_hand_side("absent(agent_watchdog_build_info)") == "agent_watchdog_build_info"
