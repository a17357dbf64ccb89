"""Metrics from real OTLP requests: spans made by the OTel SDK, encoded by its OTLP encoder and
applied by a real :class:`WatchdogService`; values read back from the Prometheus registry and
from the exposition the endpoint serves.
"""

from __future__ import annotations

import gzip
import logging
import re
from collections.abc import Iterator

import pytest
from aiohttp.test_utils import TestClient, TestServer
from opentelemetry.trace import Span

from tests.spans import NS, T0, SpanMaker, chat_attrs, encode, tool_attrs
from watchdog.core.rules.engine import RuleEngine
from watchdog.core.rules.pack import load_rules
from watchdog.core.runs.terminal import TerminalState
from watchdog.core.spans.record import ENDPOINT_SCOPE, KeySource, SpanKind, SpanRecord
from watchdog.shell.clock import ManualClock
from watchdog.shell.config import Config
from watchdog.shell.metrics import (
    INGEST_LAG_BUCKETS,
    MAX_AGENTS,
    MAX_ERROR_TYPES_PER_AGENT,
    MAX_LABEL_CHARS,
    MAX_PENDING_SERIES,
    MAX_TOOLS_PER_AGENT,
    OTHER,
    Metrics,
    PlainHistogram,
    create_metrics_app,
)
from watchdog.shell.service import WatchdogService
from watchdog.shell.state.store import Store

OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"
# What Prometheus 2.x sends when it scrapes.
PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
                     "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
P = "agent_watchdog_"


class Sidecar:
    """A service wired to its metrics, as ``Server.start`` wires them."""

    def __init__(self, clock: ManualClock, config: Config,
                 engine: RuleEngine | None = None) -> None:
        self.clock = clock
        self.metrics = Metrics(version="1.2.3")
        self.store = Store(":memory:")
        self.service = WatchdogService(config, self.store, self.metrics, clock, engine=engine)
        self.metrics.read_live_runs(self.service.live_runs, clock.now)

    def export(self, maker: SpanMaker, protocol: str = "http") -> None:
        self.service.export(encode(maker.take()), protocol)

    def value(self, name: str, **labels: str) -> float | None:
        return self.metrics.registry.get_sample_value(P + name, labels)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0 + 10)


@pytest.fixture
def sidecar(clock: ManualClock) -> Iterator[Sidecar]:
    wired = Sidecar(clock, Config())
    yield wired
    wired.store.close()


def trace_id(span: Span) -> str:
    return format(span.get_span_context().trace_id, "032x")


def explorer_run(maker: SpanMaker, root: Span) -> None:
    """Two LLM calls, three tool calls (one failing), an answer; the agent span still open."""
    maker.span("chat", chat_attrs(100, 20), parent=root, start=T0 + 1, end=T0 + 2)
    maker.span("execute_tool search", tool_attrs("search", '{"q": 1}'), parent=root,
               start=T0 + 2, end=T0 + 3)
    maker.span("execute_tool search", tool_attrs("search", '{"q": 2}'), parent=root,
               start=T0 + 3, end=T0 + 4)
    maker.span("execute_tool read", tool_attrs("read", '{"p": "a"}', **{"error.type": "OSError"}),
               parent=root, start=T0 + 4, end=T0 + 5, error="no such file")
    maker.span("chat", chat_attrs(200, 30, finish="stop"), parent=root, start=T0 + 5, end=T0 + 6)


# -- samples parsed from the exposition text, without a Prometheus library ---------------------

LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def samples(body: str) -> list[tuple[str, dict[str, str], str]]:
    """(name, labels, exemplar text) of every sample line."""
    found = []
    for line in body.splitlines():
        if not line or line.startswith("#"):
            continue
        sample, _, exemplar = line.partition(" # ")
        name, _, rest = sample.partition("{")
        labels = dict(LABEL.findall(rest.rpartition("}")[0])) if rest else {}
        found.append((name.split(" ")[0], labels, exemplar))
    return found


# -- counters and histograms ------------------------------------------------------------------


def test_a_run_through_otlp_moves_every_run_metric(sidecar: Sidecar, clock: ManualClock) -> None:
    maker = SpanMaker({"service.name": "explorer"})
    with maker.agent(start=T0, end=T0 + 7) as root:
        explorer_run(maker, root)
        sidecar.export(maker)  # the children, at T0+10; the oldest ended at T0+2

        assert sidecar.value("spans_received_total", protocol="http") == 5
        assert sidecar.value("tool_calls_total", agent="explorer", tool="search") == 2
        assert sidecar.value("tool_calls_total", agent="explorer", tool="read") == 1
        assert sidecar.value("tokens_total", agent="explorer", direction="input") == 300
        assert sidecar.value("tokens_total", agent="explorer", direction="output") == 50
        assert sidecar.value("errors_total", agent="explorer", error_type="OSError") == 1
        assert sidecar.value("ingest_lag_seconds_count") == 1
        assert sidecar.value("ingest_lag_seconds_sum") == pytest.approx(8.0)
        assert sidecar.value("runs_active", agent="explorer") == 1
        clock.advance(30)
        assert sidecar.value("run_idle_seconds_max", agent="explorer") == pytest.approx(30)
        assert sidecar.value("runs_finished_total", agent="explorer",
                             terminal_state="completed") is None
    sidecar.export(maker)  # the agent span, at T0+40

    assert sidecar.value("spans_received_total", protocol="http") == 6
    assert sidecar.value("runs_finished_total", agent="explorer", terminal_state="completed") == 1
    assert sidecar.value("runs_active", agent="explorer") == 0  # known agent: 0, not absent
    assert sidecar.value("run_idle_seconds_max", agent="explorer") == 0
    assert sidecar.value("run_iterations_count", agent="explorer") == 1
    assert sidecar.value("run_iterations_sum", agent="explorer") == 2
    assert sidecar.value("run_iterations_bucket", agent="explorer", le="2.0") == 1
    assert sidecar.value("run_iterations_bucket", agent="explorer", le="1.0") == 0
    assert sidecar.value("run_tool_calls_sum", agent="explorer") == 3
    assert sidecar.value("run_duration_seconds_sum", agent="explorer") == pytest.approx(40)
    assert sidecar.value("runs_evicted_total", agent="explorer") is None
    assert sidecar.value("build_info", version="1.2.3") == 1


def test_rejected_and_duplicate_requests(sidecar: Sidecar) -> None:
    maker = SpanMaker({"service.name": "explorer"})
    maker.span("execute_tool a", tool_attrs("a"))
    maker.span("execute_tool b", tool_attrs("b"))
    request = encode(maker.take())
    request.resource_spans[0].scope_spans[0].spans[0].trace_id = b""

    sidecar.service.export(request, "grpc", digest=b"body-1")
    sidecar.service.export(request, "grpc", digest=b"body-1")  # the exporter retried

    assert sidecar.value("spans_received_total", protocol="grpc") == 2
    assert sidecar.value("spans_rejected_total", reason="invalid_trace_id") == 1
    assert sidecar.value("tool_calls_total", agent="explorer", tool="b") == 1


def test_receivers_count_requests_by_outcome(sidecar: Sidecar) -> None:
    sidecar.metrics.export_request("http", "ok")
    sidecar.metrics.export_request("http", "ok")
    sidecar.metrics.export_request("grpc", "invalid")
    assert sidecar.value("export_requests_total", protocol="http", outcome="ok") == 2
    assert sidecar.value("export_requests_total", protocol="grpc", outcome="invalid") == 1


def test_evicted_and_abandoned_runs(clock: ManualClock) -> None:
    wired = Sidecar(clock, Config(max_runs=2, run_end_timeout=60))
    maker = SpanMaker({"service.name": "explorer"})
    roots = [maker.open("invoke_agent explorer", {"gen_ai.operation.name": "invoke_agent"})
             for _ in range(3)]
    for root in roots[:2]:  # one tool span per run; no agent span ends, so the runs stay open
        maker.span("execute_tool a", tool_attrs("a"), parent=root)
    wired.export(maker)
    # A rule stopped the oldest run; eviction keeps that state, and still counts the eviction.
    oldest = wired.service.tracker.get("trace:" + trace_id(roots[0]))
    assert oldest is not None
    oldest.force(TerminalState.IDLE_TIMEOUT, "idle-timeout")
    clock.advance(1)
    maker.span("execute_tool a", tool_attrs("a"), parent=roots[2])
    wired.export(maker)

    assert wired.value("runs_evicted_total", agent="explorer") == 1
    assert wired.value("runs_finished_total", agent="explorer",
                       terminal_state="idle_timeout") == 1
    assert wired.value("runs_active", agent="explorer") == 2

    clock.advance(61)
    wired.service.tick()
    assert wired.value("runs_finished_total", agent="explorer", terminal_state="abandoned") == 2
    assert wired.value("runs_evicted_total", agent="explorer") == 1
    assert wired.value("run_tool_calls_count", agent="explorer") == 3
    wired.store.close()


def test_a_run_its_agent_takes_back_leaves_the_state_it_was_counted_in(
        sidecar: Sidecar, clock: ManualClock) -> None:
    """A model-endpoint run ended at an answer that its agent's next request goes on from (a
    side request's run, opencode's title, taken back by its first request) is counted at each
    end, and as having left the state of the first: the runs that ended, by the state they are
    in now (docs/metrics.md's query), hold it once."""
    key = "model:" + "ab" * 16
    service = sidecar.service

    def call(answer: bool) -> SpanRecord:
        now = clock.now()
        record = SpanRecord(run_key=key, key_source=KeySource.WATCHDOG, trace_id="ab" * 16,
                            span_id=f"{int(now * 1000):016x}", parent_span_id=None,
                            name="chat m", kind=SpanKind.LLM, start_ns=int(now * NS),
                            end_ns=int(now * NS), agent="opencode", session="ses_1",
                            loose=True, scope=ENDPOINT_SCOPE)
        record.requested_tools = not answer
        if answer:
            record.final_answer, record.final_output = True, "done"
        return record

    def ended_by_state() -> dict[str, float]:
        counts: dict[str, float] = {}
        for state in ("completed", "abandoned"):
            finished = sidecar.value("runs_finished_total", agent="opencode",
                                     terminal_state=state) or 0
            moved = sidecar.value("runs_reclassified_total", agent="opencode",
                                  terminal_state=state) or 0
            counts[state] = finished - moved
        return counts

    service.model_open(key, KeySource.WATCHDOG, "ab" * 16, "opencode", "ses_1", None)
    service.model_records([call(answer=True)])  # the title: the run ends at its answer
    assert ended_by_state() == {"completed": 1, "abandoned": 0}
    clock.advance(1)
    service.model_open(key, KeySource.WATCHDOG, "ab" * 16, "opencode", "ses_1", None,
                       going_on=True)  # taken back: active
    assert ended_by_state() == {"completed": 0, "abandoned": 0}
    service.model_records([call(answer=False)])
    clock.advance(1)
    service.model_records([call(answer=True)])
    assert ended_by_state() == {"completed": 1, "abandoned": 0}
    assert sidecar.value("runs_finished_total", agent="opencode",
                         terminal_state="completed") == 2


# -- cardinality ------------------------------------------------------------------------------


def test_tool_names_are_capped_per_agent(sidecar: Sidecar) -> None:
    extra = 7
    for agent in ("explorer", "writer"):
        maker = SpanMaker({"service.name": agent})
        with maker.agent() as root:
            for i in range(MAX_TOOLS_PER_AGENT + extra):
                maker.span(f"execute_tool t{i}", tool_attrs(f"tool-{i}"), parent=root)
        sidecar.export(maker)

    for agent in ("explorer", "writer"):  # each agent has its own allowance
        assert sidecar.value("tool_calls_total", agent=agent, tool="tool-0") == 1
        assert sidecar.value("tool_calls_total", agent=agent,
                             tool=f"tool-{MAX_TOOLS_PER_AGENT - 1}") == 1
        assert sidecar.value("tool_calls_total", agent=agent,
                             tool=f"tool-{MAX_TOOLS_PER_AGENT}") is None
        assert sidecar.value("tool_calls_total", agent=agent, tool=OTHER) == extra
    body = sidecar.metrics.render("")[0].decode()
    tools = [s for s in samples(body) if s[0] == P + "tool_calls_total"]
    assert len(tools) == 2 * (MAX_TOOLS_PER_AGENT + 1)


def test_agent_names_are_capped(sidecar: Sidecar, caplog: pytest.LogCaptureFixture) -> None:
    """The first MAX_AGENTS names keep their series, later ones share ``_other``; the sidecar
    says so once, at the first name turned away (on a gateway, a flood of generated names
    would otherwise leave a team's dashboards reading ``_other`` with no word why)."""
    caplog.set_level(logging.WARNING, logger="watchdog")
    extra = 5
    maker = SpanMaker()
    for i in range(MAX_AGENTS + extra):  # one (trace-keyed) run per agent
        name = {"gen_ai.agent.name": f"agent-{i}"}
        with maker.agent(attrs=name) as root:
            maker.span("execute_tool a", tool_attrs("a", **name), parent=root)
    sidecar.export(maker)

    assert sidecar.value("tool_calls_total", agent="agent-0", tool="a") == 1
    assert sidecar.value("tool_calls_total", agent=f"agent-{MAX_AGENTS}", tool="a") is None
    assert sidecar.value("tool_calls_total", agent=OTHER, tool="a") == extra
    assert sidecar.value("runs_finished_total", agent=OTHER, terminal_state="no_response") == extra
    assert sidecar.value("run_tool_calls_count", agent=OTHER) == extra
    body = sidecar.metrics.render("")[0].decode()
    agents = {labels["agent"] for _, labels, _ in samples(body) if "agent" in labels}
    assert len(agents) == MAX_AGENTS + 1
    assert OTHER in agents
    said = [record.getMessage() for record in caplog.records if "_other" in record.getMessage()]
    assert len(said) == 1, said
    assert f'"agent-{MAX_AGENTS}"' in said[0] and f"{MAX_AGENTS} agent names" in said[0]


def test_error_types_are_capped_and_label_values_truncated(sidecar: Sidecar) -> None:
    long_tool = "t" * 200  # the most the span normaliser keeps
    maker = SpanMaker({"service.name": "explorer"})
    with maker.agent() as root:
        for i in range(MAX_ERROR_TYPES_PER_AGENT + 3):
            maker.span("execute_tool x", tool_attrs(long_tool, **{"error.type": f"E{i}"}),
                       parent=root, error="failed")
    sidecar.export(maker)

    assert sidecar.value("errors_total", agent="explorer", error_type="E0") == 1
    assert sidecar.value("errors_total", agent="explorer", error_type=OTHER) == 3
    assert sidecar.value("tool_calls_total", agent="explorer",
                         tool="t" * MAX_LABEL_CHARS) == MAX_ERROR_TYPES_PER_AGENT + 3
    body = sidecar.metrics.render(OPENMETRICS)[0].decode()
    assert max(len(v) for _, labels, _ in samples(body) for v in labels.values()) \
        == MAX_LABEL_CHARS


def test_ids_never_label_values_and_exemplars_carry_trace_ids(sidecar: Sidecar) -> None:
    maker = SpanMaker({"service.name": "explorer", "watchdog.session.id": "session-42"})
    ids = {"watchdog.run.id": "run-7f3e9a"}
    with maker.agent(attrs=ids) as root:
        maker.span("chat", chat_attrs(10, 5, **ids), parent=root)
        maker.span("execute_tool search", tool_attrs("search", **ids), parent=root, error="boom")
        maker.span("chat", chat_attrs(10, 5, finish="stop", **ids), parent=root)
    sidecar.export(maker)
    trace = trace_id(root)
    sidecar.metrics.rule_fired("budget-countdown", "wind_down", "explorer", trace)
    run = sidecar.service.tracker.get("run-7f3e9a")
    assert run is not None and run.trace_id == trace

    body, content_type = sidecar.metrics.render(PROMETHEUS_ACCEPT)
    assert content_type.startswith("application/openmetrics-text; version=1.0.0")
    text = body.decode()
    assert text.endswith("# EOF\n")
    parsed = samples(text)
    for name, labels, _ in parsed:
        for value in labels.values():
            assert value not in {"run-7f3e9a", trace, "trace:" + trace, "session-42"}, name
            assert "run-7f3e9a" not in value and trace not in value, name
    exemplars = {name for name, _, exemplar in parsed if f'{{trace_id="{trace}"}}' in exemplar}
    assert {P + "tool_calls_total", P + "tokens_total", P + "errors_total",
            P + "runs_finished_total", P + "rule_fired_total"} <= exemplars
    assert {P + "run_iterations_bucket", P + "run_tool_calls_bucket",
            P + "run_duration_seconds_bucket"} <= exemplars

    plain, plain_type = sidecar.metrics.render("text/plain")
    assert plain_type == "text/plain; version=0.0.4; charset=utf-8"
    assert b"trace_id" not in plain  # exemplars exist only in OpenMetrics
    assert b"agent_watchdog_tool_calls_total{" in plain
    assert b"_created" not in plain


# -- the rules engine's and directives' metrics -----------------------------------------------


def test_rule_and_directive_metrics(sidecar: Sidecar) -> None:
    metrics = sidecar.metrics
    assert sidecar.value("rules_reload_success") is None  # not claimed before a load
    metrics.rules_reloaded(True)
    assert sidecar.value("rules_reload_success") == 1
    metrics.rules_reloaded(False)
    assert sidecar.value("rules_reload_success") == 0

    metrics.rule_fired("error-loop", "abort", "explorer", None)
    metrics.rule_error("budget-countdown")
    metrics.directive_delivered("abort", "webhook", "retry")
    metrics.rule_eval(0.002)
    assert sidecar.value("rule_fired_total", rule="error-loop", action="abort",
                         agent="explorer") == 1
    assert sidecar.value("rule_errors_total", rule="budget-countdown") == 1
    assert sidecar.value("directives_delivered_total", action="abort", channel="webhook",
                         outcome="retry") == 1
    assert sidecar.value("rule_eval_duration_seconds_count") == 1
    assert sidecar.value("rule_eval_duration_seconds_bucket", le="0.0025") == 1

    metrics.set_stuck({("explorer", "idle-timeout"): 2, ("writer", "tool-cycle"): 1})
    assert sidecar.value("runs_stuck", agent="explorer", reason="idle-timeout") == 2
    metrics.set_stuck({("writer", "tool-cycle"): 3})
    assert sidecar.value("runs_stuck", agent="explorer", reason="idle-timeout") == 0
    assert sidecar.value("runs_stuck", agent="writer", reason="tool-cycle") == 3


def test_a_plain_histogram_is_shown_as_prometheus_client_shows_one() -> None:
    """``ingest_lag_seconds`` and ``rule_eval_duration_seconds`` are counted by
    :class:`PlainHistogram`: the same values on a bound, between two, past the last, zero and
    NaN give the exposition prometheus_client's ``Histogram`` gives, in both formats."""
    from prometheus_client import CollectorRegistry, Histogram
    from prometheus_client.exposition import generate_latest
    from prometheus_client.openmetrics.exposition import generate_latest as openmetrics

    ours, theirs = CollectorRegistry(), CollectorRegistry()
    plain = PlainHistogram("lag_seconds", "Lag.", INGEST_LAG_BUCKETS, ours)
    reference = Histogram("lag_seconds", "Lag.", registry=theirs, buckets=INGEST_LAG_BUCKETS)
    for value in (0.0, 0.05, 0.07, 1, 1.0000001, 6, 299.9, 300, 301, 1e9, 0.0, float("nan")):
        plain.observe(value)
        reference.observe(value)
    assert generate_latest(ours) == generate_latest(theirs)
    assert openmetrics(ours) == openmetrics(theirs)
    assert ours.get_sample_value("lag_seconds_bucket", {"le": "1.0"}) == 5


def test_decisions_are_counted_at_the_scrape_with_their_latest_trace(sidecar: Sidecar) -> None:
    """``rule_fired`` adds up until the registry is collected: every decision counted, each
    series' exemplar the latest trace among its decisions (one without a trace keeps the one
    before), new agents past the cap still ``_other``."""
    metrics = sidecar.metrics
    first, latest = "a" * 32, "b" * 32
    metrics.rule_fired("error-loop", "abort", "explorer", first)
    metrics.rule_fired("error-loop", "abort", "explorer", latest)
    metrics.rule_fired("error-loop", "abort", "explorer", None)
    metrics.rule_fired("tool-cycle", "wind_down", "explorer", None)

    def fired() -> dict[tuple[str, str], tuple[float, str]]:
        body = metrics.render(PROMETHEUS_ACCEPT)[0].decode()
        found = {}
        for line in body.splitlines():
            if line.startswith(P + "rule_fired_total{"):
                sample, _, exemplar = line.partition(" # ")
                labels = dict(LABEL.findall(sample))
                found[(labels["rule"], labels["agent"])] = (float(sample.split()[-1]), exemplar)
        return found

    counted = fired()
    assert counted[("error-loop", "explorer")][0] == 3
    assert f'trace_id="{latest}"' in counted[("error-loop", "explorer")][1]
    assert counted[("tool-cycle", "explorer")] == (1, "")
    metrics.rule_fired("error-loop", "abort", "explorer", None)  # after the scrape
    assert fired()[("error-loop", "explorer")][0] == 4
    for index in range(MAX_AGENTS + 2):
        metrics.rule_fired("error-loop", "abort", f"agent-{index}", None)
    assert fired()[("error-loop", OTHER)][0] >= 2


def test_decisions_waiting_for_a_scrape_are_bounded(sidecar: Sidecar) -> None:
    """Past ``MAX_PENDING_SERIES`` label combinations waiting, the decisions go into their
    series without a scrape: what waits never grows with the agents a scrape has not seen."""
    metrics = sidecar.metrics
    for index in range(MAX_PENDING_SERIES + 1):
        metrics.rule_fired(f"rule-{index % 7}", "abort", f"agent-{index}", None)
    assert metrics.pending_series() <= 1
    assert sidecar.value("rule_fired_total", rule="rule-0", action="abort",
                         agent="agent-0") == 1


def test_a_run_told_to_stop_is_told_nothing_more(clock: ManualClock) -> None:
    """An abort is the last word a run gets: its end may never come (an agent that cannot
    send it), and the timers that would fire for a run that went silent (idle, total time)
    say nothing it was not told; it stays stuck for the abort's reason until it is
    abandoned."""
    wired = Sidecar(clock, Config(), RuleEngine(load_rules([])))
    try:
        maker = SpanMaker({"service.name": "explorer", "watchdog.run.id": "run-stuck"})
        root = maker.open("invoke_agent explorer", {"gen_ai.operation.name": "invoke_agent"},
                          start=T0)  # its end is never exported
        for i in range(5):
            maker.span("execute_tool read", tool_attrs("read", f'{{"p": {i}}}'), parent=root,
                       start=T0 + i, end=T0 + i + 0.5, error="no such file")
        wired.export(maker)
        stuck = {"agent": "explorer", "reason": "loop_detected"}
        assert wired.value("rule_fired_total", rule="error-loop", action="abort",
                           agent="explorer") == 1
        for _ in range(2):
            clock.advance(400)  # past idle-timeout's 300 s
            wired.service.tick()
            assert wired.value("runs_stuck", **stuck) == 1
        clock.advance(300)  # past total-timeout's 900 s, and abandoned (run_end_timeout)
        wired.service.tick()
        run = wired.service.tracker.get("run-stuck")
        assert run is not None and run.terminal_state is TerminalState.LOOP_DETECTED
        assert wired.value("runs_stuck", **stuck) == 0
        fired = {labels["rule"] for name, labels, _ in
                 samples(wired.metrics.render("text/plain")[0].decode())
                 if name == P + "rule_fired_total"}
        assert fired == {"error-loop"}
    finally:
        wired.store.close()


def test_the_process_and_its_garbage_collector_are_measured(sidecar: Sidecar) -> None:
    registry = sidecar.metrics.registry
    assert registry.get_sample_value("process_resident_memory_bytes") > 10 * 2**20
    assert registry.get_sample_value("process_cpu_seconds_total") > 0
    assert registry.get_sample_value("python_gc_collections_total", {"generation": "0"}) > 0
    assert registry.get_sample_value("python_gc_collections_total", {"generation": "2"}) >= 0
    text = sidecar.metrics.render("text/plain")[0].decode()
    assert "python_info{" in text and "agent_watchdog_process" not in text


def test_registries_are_independent() -> None:
    first, second = Metrics(version="a"), Metrics(version="b")
    first.export_request("http", "ok")
    assert first.registry.get_sample_value(P + "export_requests_total",
                                           {"protocol": "http", "outcome": "ok"}) == 1
    assert second.registry.get_sample_value(P + "export_requests_total",
                                            {"protocol": "http", "outcome": "ok"}) is None
    assert second.registry.get_sample_value(P + "runs_active", {"agent": "x"}) is None  # unbound


# -- the endpoint -----------------------------------------------------------------------------


async def test_metrics_app_serves_both_formats_and_health(sidecar: Sidecar) -> None:
    ready = False
    app = create_metrics_app(sidecar.metrics, lambda: ready)
    maker = SpanMaker({"service.name": "explorer"})
    maker.span("execute_tool a", tool_attrs("a"))
    sidecar.export(maker)

    async with TestClient(TestServer(app)) as client:
        response = await client.get("/metrics", headers={"Accept": PROMETHEUS_ACCEPT})
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("application/openmetrics-text")
        assert "# {trace_id=" in await response.text()

        response = await client.get("/metrics", headers={"Accept-Encoding": "identity"})
        assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        assert 'agent_watchdog_tool_calls_total{agent="explorer",tool="a"} 1.0' in (
            await response.text())

        response = await client.get("/metrics", headers={"Accept-Encoding": "gzip"},
                                    auto_decompress=False)
        assert response.headers["Content-Encoding"] == "gzip"
        assert b"agent_watchdog_build_info" in gzip.decompress(await response.read())

        response = await client.get("/healthz")
        assert (response.status, await response.text()) == (200, "ok")
        assert (await client.get("/readyz")).status == 503
        ready = True
        assert (await client.get("/readyz")).status == 200


def test_the_log_content_outcomes_shown_from_the_start_are_the_joins() -> None:
    """``log_content_total``'s outcomes are named in the metrics module too (the log join
    loads with the span pipeline, later): the same names."""
    from watchdog.core.spans.logs import CONTENT_OUTCOMES
    from watchdog.shell.metrics import LOG_CONTENT_OUTCOMES

    assert LOG_CONTENT_OUTCOMES == CONTENT_OUTCOMES


def test_a_withdrawn_note_is_no_rule_firing(clock: ManualClock,
                                            caplog: pytest.LogCaptureFixture) -> None:
    """A tool outage's note (``tool-outage``, a ``repeat: each_time`` notify) is withdrawn when
    the tool succeeds again: a notify with an empty message, which counts no firing in
    ``rule_fired_total`` and is logged as ``rule_withdrawn``, not ``rule_fired``."""
    wired = Sidecar(clock, Config())
    wired.service.core.engine = RuleEngine(load_rules([]))  # the default pack, as served
    maker = SpanMaker({"service.name": "demo"})
    roots = [maker.open("invoke_agent demo", {"gen_ai.operation.name": "invoke_agent",
                                              "gen_ai.agent.name": "demo"}, start=T0)
             for _ in range(3)]

    def call_search(root: Span, at: float, error: BaseException | None = None) -> None:
        maker.span("chat m", chat_attrs(finish="tool_calls"), parent=root, start=at - 1,
                   end=at - 0.5)
        maker.span("execute_tool search", tool_attrs("search", '{"q": "x"}',
                                                     None if error else "ok"),
                   parent=root, start=at - 0.4, end=at, exception=error)
        wired.export(maker)
        wired.service.tick()

    try:
        for index, root in enumerate(roots):
            call_search(root, T0 + 1 + index, ConnectionError("refused"))
        fired = wired.value("rule_fired_total", rule="tool-outage", action="notify",
                            agent="demo")
        assert fired == 3  # each run told of the outage once
        with caplog.at_level("INFO", logger="watchdog.decisions"):
            call_search(roots[0], T0 + 10)  # the tool is back: the three notes withdrawn
        withdrawn = [r.getMessage() for r in caplog.records
                     if r.getMessage().startswith("rule_withdrawn")]
        assert len(withdrawn) == 3 and all("rule=tool-outage" in m for m in withdrawn)
        assert not [r for r in caplog.records if r.getMessage().startswith("rule_fired")]
        assert wired.value("rule_fired_total", rule="tool-outage", action="notify",
                           agent="demo") == fired
    finally:
        wired.store.close()


def test_a_label_value_carries_no_control_character(sidecar: Sidecar) -> None:
    """An agent chooses its name and its tools': a control character in one (ESC, CR, DEL, C1,
    a bidirectional override) is written in the label as its escape (``\\x1b``), so a scrape
    read in a terminal (``curl /metrics``) meets no command of the agent's, in either format."""
    agent, tool = "ag\x1b[2J\rX\x7f\x9b\u202e", "se\x1b]0;t\x07arch"
    maker = SpanMaker({"service.name": agent})
    with maker.agent() as root:
        maker.span("execute_tool x", tool_attrs(tool), parent=root)
    sidecar.export(maker)

    assert sidecar.value("tool_calls_total", agent="ag\\x1b[2J\\x0dX\\x7f\\x9b\\u202e",
                         tool="se\\x1b]0;t\\x07arch") == 1
    for accept in ("text/plain", OPENMETRICS):
        body = sidecar.metrics.render(accept)[0].decode()
        assert not [c for c in body if c != "\n" and (
            ord(c) < 32 or 127 <= ord(c) < 160 or c == "\u202e")], accept
