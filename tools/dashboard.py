"""Generate the Grafana dashboard of agent-watchdog with grafana-foundation-sdk (Grafana 11).

    python tools/dashboard.py            # write helm/agent-watchdog/dashboards/agent-watchdog.json
    python tools/dashboard.py --check    # exit 1 if the committed JSON differs from the output

The chart ships the JSON as a ConfigMap labelled ``grafana_dashboard: "1"`` (the Grafana sidecar
picks it up). Every query uses the ``${datasource}`` variable and filters on ``$agent`` where
the metric has an ``agent`` label; every selector also filters on ``$cluster`` and
``$namespace`` (the monitoring-mixin convention: one dashboard for every cluster and namespace;
a series without a ``cluster`` label matches the "All" value ``.*``); exemplars (``trace_id``)
are requested on the queries over metrics that carry them (runs_finished, run_* histograms,
tool_calls, tokens, errors, rule_fired), so Grafana links a point to the agent's trace when the
Prometheus data source names a trace data source for the ``trace_id`` exemplar label.

tests/test_dashboard.py checks that the committed file equals this output and that every query
returns data from a real Prometheus scraping a real sidecar.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from grafana_foundation_sdk.builders import bargauge, common, dashboard, prometheus, stat
from grafana_foundation_sdk.builders import timeseries as ts
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as common_models
from grafana_foundation_sdk.models import dashboard as dashboard_models

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "helm/agent-watchdog/dashboards/agent-watchdog.json"
UID = "agent-watchdog"
DATASOURCE = dashboard_models.DataSourceRef(type_val="prometheus", uid="${datasource}")
AGENT = 'agent=~"$agent"'
# Added to every selector of every query (see scoped()).
SCOPE = 'cluster=~"$cluster",namespace=~"$namespace"'
RATE = "$__rate_interval"
QUANTILES = (0.5, 0.9, 0.99)
# Which metrics carry trace_id exemplars (watchdog/shell/metrics.py): a query over one of them asks
# Grafana for exemplars.
EXEMPLAR_METRICS = ("runs_finished_total", "run_iterations", "run_tool_calls",
                    "run_duration_seconds", "tool_calls_total", "tokens_total", "errors_total",
                    "rule_fired_total", "cost_usd_total")
_EXEMPLARS = re.compile(r"\bagent_watchdog_(?:" + "|".join(EXEMPLAR_METRICS) + r")(?:_bucket)?\b")
_SELECTOR = re.compile(r"\b(agent_watchdog_\w+)(?:\{([^}]*)\})?")


def m(name: str) -> str:
    return "agent_watchdog_" + name


def carries_exemplars(expr: str) -> bool:
    """Whether the query reads a metric whose samples carry trace_id exemplars."""
    return _EXEMPLARS.search(expr) is not None


def scoped(expr: str) -> str:
    """``expr`` with the $cluster and $namespace matchers in every agent_watchdog_* selector."""
    def scope(match: re.Match[str]) -> str:
        name, matchers = match.group(1), match.group(2)
        return f"{name}{{{SCOPE}{',' + matchers if matchers else ''}}}"
    return _SELECTOR.sub(scope, expr)


def label_values(metric: str, label: str, selector: str = SCOPE) -> str:
    return f"label_values({m(metric)}{{{selector}}}, {label})".replace("{}", "")


class Query:
    """One PromQL query and its legend; scoped to $cluster and $namespace."""

    def __init__(self, expr: str, legend: str = "__auto", instant: bool = False) -> None:
        self.expr = scoped(expr)
        self.legend = legend
        self.instant = instant

    def build(self, ref: str) -> prometheus.Dataquery:
        query = (prometheus.Dataquery().expr(self.expr).legend_format(self.legend).ref_id(ref)
                 .datasource(DATASOURCE))
        query = query.instant() if self.instant else query.range()
        if carries_exemplars(self.expr) and not self.instant:
            query = query.exemplar(True)
        return query


def quantiles(metric: str, selector: str = "") -> list[Query]:
    inner = f"sum by (le) (rate({m(metric)}_bucket{{{selector}}}[{RATE}]))"
    return [Query(f"histogram_quantile({q}, {inner})", f"p{round(q * 100)}") for q in QUANTILES]


def _targets(panel: Builder, queries: Sequence[Query]) -> None:
    for index, query in enumerate(queries):
        panel.with_target(query.build(chr(ord("A") + index)))


def graph(title: str, description: str, queries: Sequence[Query], unit: str = "short",
          width: int = 12, bars: bool = False, stacked: bool = False) -> ts.Panel:
    panel = (ts.Panel().title(title).description(description).datasource(DATASOURCE)
             .unit(unit).min(0).span(width).height(8)
             .legend(common.VizLegendOptions().display_mode(common_models.LegendDisplayMode.LIST)
                     .placement(common_models.LegendPlacement.BOTTOM).show_legend(True))
             .tooltip(common.VizTooltipOptions().mode(common_models.TooltipDisplayMode.MULTI)
                      .sort(common_models.SortOrder.DESCENDING)))
    if bars:
        panel = (panel.draw_style(common_models.GraphDrawStyle.BARS).fill_opacity(80)
                 .line_width(1))
    else:
        panel = panel.fill_opacity(10).line_width(1)
    if stacked or bars:
        panel = panel.stacking(common.StackingConfig().mode(common_models.StackingMode.NORMAL))
    _targets(panel, queries)
    return panel


def single(title: str, description: str, query: Query, unit: str = "short",
           red_at: float | None = None) -> stat.Panel:
    steps = [dashboard_models.Threshold(value=None, color="green")]
    if red_at is not None:
        steps.append(dashboard_models.Threshold(value=red_at, color="red"))
    panel = (stat.Panel().title(title).description(description).datasource(DATASOURCE)
             .unit(unit).span(3).height(4)
             .graph_mode(common_models.BigValueGraphMode.AREA)
             .color_mode(common_models.BigValueColorMode.VALUE)
             .reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
             .thresholds(dashboard.ThresholdsConfig().mode(dashboard_models.ThresholdsMode.ABSOLUTE)
                         .steps(steps)))
    _targets(panel, [query])
    return panel


def bars(title: str, description: str, query: Query, width: int = 12) -> bargauge.Panel:
    panel = (bargauge.Panel().title(title).description(description).datasource(DATASOURCE)
             .unit("short").min(0).span(width).height(8)
             .orientation(common_models.VizOrientation.HORIZONTAL)
             .display_mode(common_models.BarGaugeDisplayMode.BASIC)
             .reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"]).values(False)))
    _targets(panel, [query])
    return panel


def scope_variable(name: str, label: str, query: str) -> dashboard.QueryVariable:
    """A multi-value variable whose "All" is ``.*``: it also matches series without the label
    (a single cluster without a ``cluster`` label)."""
    return (dashboard.QueryVariable(name).label(label).datasource(DATASOURCE).query(query)
            .refresh(dashboard_models.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(dashboard_models.VariableSort.ALPHABETICAL_ASC)
            .multi(True).include_all(True).all_value(".*")
            .current(dashboard_models.VariableOption(selected=True, text="All",
                                                     value="$__all")))


def build() -> dashboard.Dashboard:
    a = AGENT
    board = (
        dashboard.Dashboard("agent-watchdog")
        .uid(UID)
        .description("LLM agents seen by agent-watchdog: runs, stuck and looping agents, "
                     "directives, per-run distributions, tools, tokens, errors, the model "
                     "endpoint and ingest. "
                     "Alerts and their runbook: docs/alerts.md.")
        .tags(["agent-watchdog", "llm", "agents"])
        .editable()
        .tooltip(dashboard_models.DashboardCursorSync.CROSSHAIR)
        .time("now-3h", "now")
        .refresh("30s")
        .timezone("browser")
        .with_variable(dashboard.DatasourceVariable("datasource").label("Data source")
                       .type("prometheus"))
        .with_variable(scope_variable("cluster", "Cluster",
                                      label_values("build_info", "cluster", "")))
        .with_variable(scope_variable("namespace", "Namespace", label_values(
            "build_info", "namespace", 'cluster=~"$cluster"')))
        .with_variable(dashboard.QueryVariable("agent").label("Agent")
                       .datasource(DATASOURCE)
                       .query(label_values("runs_active", "agent"))
                       .refresh(dashboard_models.VariableRefresh.ON_TIME_RANGE_CHANGED)
                       .sort(dashboard_models.VariableSort.ALPHABETICAL_ASC)
                       .multi(True).include_all(True).all_value(".*")
                       .current(dashboard_models.VariableOption(
                           selected=True, text="All", value="$__all")))
    )

    board = (
        board.with_row(dashboard.Row("Overview"))
        .with_panel(single("Active runs", "Runs in progress.",
                           Query(f"sum({m('runs_active')}{{{a}}})")))
        .with_panel(single("Stuck runs", "Active runs a rule told to wind down or abort.",
                           Query(f"sum({m('runs_stuck')}{{{a}}})"), red_at=1))
        .with_panel(single("Longest idle run", "Longest time without progress among active "
                           "runs.", Query(f"max({m('run_idle_seconds_max')}{{{a}}})"), "s",
                           red_at=600))
        .with_panel(single("Runs finished", "Runs that reached a terminal state in the time "
                           "range.", Query(f"sum(increase({m('runs_finished_total')}{{{a}}}"
                                           "[$__range]))")))
        .with_panel(single("Aborts", "Abort directives in the time range.",
                           Query(f"sum(increase({m('rule_fired_total')}{{{a},action=\"abort\"}}"
                                 "[$__range]))"), red_at=1))
        .with_panel(single("Spans rejected", "Share of received spans refused as unusable in "
                           "the time range.",
                           Query(f"sum(increase({m('spans_rejected_total')}[$__range])) / "
                                 f"sum(increase({m('spans_received_total')}[$__range]))"),
                           "percentunit", red_at=0.01))
        .with_panel(single("Watchdogs", "Watchdog processes scraped.",
                           Query(f"count({m('build_info')})")))
        .with_panel(single("Rule packs refused", "Watchdogs whose last rule reload failed "
                           "(they run their previous rules).",
                           Query(f"sum(1 - {m('rules_reload_success')})"), red_at=1))
    )

    board = (
        board.with_row(dashboard.Row("Runs"))
        .with_panel(graph("Active runs per agent", "Runs in progress.",
                          [Query(f"sum by (agent) ({m('runs_active')}{{{a}}})", "{{agent}}")],
                          width=8))
        .with_panel(graph("Stuck runs per agent and reason",
                          "Active runs a rule told to wind down or abort, by the terminal state "
                          "it set (or the rule).",
                          [Query(f"sum by (agent, reason) ({m('runs_stuck')}{{{a}}})",
                                 "{{agent}} {{reason}}")], width=8))
        .with_panel(graph("Longest idle run per agent",
                          "Longest time without progress among each agent's active runs.",
                          [Query(f"max by (agent) ({m('run_idle_seconds_max')}{{{a}}})",
                                 "{{agent}}")], unit="s", width=8))
        .with_panel(graph("Terminal states", "How runs ended (exemplars link to the run's "
                          "trace).",
                          [Query(f"sum by (terminal_state) (increase("
                                 f"{m('runs_finished_total')}{{{a}}}[{RATE}]))",
                                 "{{terminal_state}}")], bars=True))
        .with_panel(bars("Terminal states per agent (time range)",
                         "Finished runs per agent and terminal state over the time range.",
                         Query(f"sum by (agent, terminal_state) (increase("
                               f"{m('runs_finished_total')}{{{a}}}[$__range]))",
                               "{{agent}} {{terminal_state}}", instant=True)))
    )

    board = (
        board.with_row(dashboard.Row("Rules and directives"))
        .with_panel(graph("Directives by action", "Rule actions fired (notify, wind_down, "
                          "abort).",
                          [Query(f"sum by (action) (increase({m('rule_fired_total')}{{{a}}}"
                                 f"[{RATE}]))", "{{action}}")], bars=True, width=8))
        .with_panel(graph("Directives by rule", "Which rules fire.",
                          [Query(f"sum by (rule) (increase({m('rule_fired_total')}{{{a}}}"
                                 f"[{RATE}]))", "{{rule}}")], bars=True, width=8))
        .with_panel(graph("Directives by agent", "Which agents are told to wind down or stop.",
                          [Query(f"sum by (agent, action) (increase("
                                 f"{m('rule_fired_total')}{{{a}}}[{RATE}]))",
                                 "{{agent}} {{action}}")], bars=True, width=8))
        .with_panel(graph("Directive deliveries", "Deliveries by channel (longpoll, sse, "
                          "webhook, outbox) and outcome.",
                          [Query(f"sum by (channel, outcome) (rate("
                                 f"{m('directives_delivered_total')}[{RATE}]))",
                                 "{{channel}} {{outcome}}")], unit="ops", width=6))
        .with_panel(graph("Delivery failures", "failed / dropped / conflict: a directive nobody "
                          "received; retry: a webhook will be tried again; overflow: a stream "
                          "subscriber fell behind and resumes from the store.",
                          [Query(f"sum by (channel, outcome) (increase("
                                 f"{m('directives_delivered_total')}"
                                 f"{{outcome=~\"failed|dropped|conflict|retry|overflow\"}}"
                                 f"[{RATE}]))", "{{channel}} {{outcome}}")],
                          bars=True, width=6))
        .with_panel(graph("Rule errors", "Rule evaluations that failed, by rule: a failing "
                          "rule never fires.",
                          [Query(f"sum by (rule) (increase({m('rule_errors_total')}[{RATE}]))",
                                 "{{rule}}")], bars=True, width=6))
        .with_panel(graph("Rule evaluation time", "Time one evaluation of all rules takes.",
                          quantiles("rule_eval_duration_seconds"), unit="s", width=6))
    )

    board = (
        board.with_row(dashboard.Row("Per-run distributions"))
        .with_panel(graph("LLM calls per run", "Iterations of finished runs (quantiles; "
                          "exemplars link to runs' traces).",
                          quantiles("run_iterations", a), width=8))
        .with_panel(graph("Tool calls per run", "Tool calls of finished runs (quantiles; "
                          "exemplars link to runs' traces).",
                          quantiles("run_tool_calls", a), width=8))
        .with_panel(graph("Run duration", "Duration of finished runs (quantiles; exemplars "
                          "link to runs' traces).",
                          quantiles("run_duration_seconds", a), unit="s", width=8))
    )

    board = (
        board.with_row(dashboard.Row("Tools, tokens and errors"))
        .with_panel(graph("Tool calls", "Tool executions per second by agent and tool.",
                          [Query(f"sum by (agent, tool) (rate({m('tool_calls_total')}{{{a}}}"
                                 f"[{RATE}]))", "{{agent}} {{tool}}")], unit="ops",
                          width=8, stacked=True))
        .with_panel(graph("Tokens", "LLM tokens per second by agent and direction.",
                          [Query(f"sum by (agent, direction) (rate({m('tokens_total')}"
                                 f"{{{a}}}[{RATE}]))", "{{agent}} {{direction}}")],
                          width=8, stacked=True))
        .with_panel(graph("Errors", "Failed LLM and tool spans per second by agent and error "
                          "type.",
                          [Query(f"sum by (agent, error_type) (rate({m('errors_total')}"
                                 f"{{{a}}}[{RATE}]))", "{{agent}} {{error_type}}")],
                          unit="ops", width=8, stacked=True))
        .with_panel(graph("Failing tools", "Tools failing for many runs (fleet.failing_tools: "
                          "3 runs or more saw the same error type within fleet_window, no "
                          "success since): 1 while failing. The default rule tool-outage told "
                          "their runs; see AgentWatchdogToolFailing.",
                          [Query(f"max by (tool) ({m('tools_failing')})", "{{tool}}")],
                          width=24))
    )

    board = (
        board.with_row(dashboard.Row("Cost"))
        .with_panel(graph("Spend", "US dollars per hour by agent and model: each model call "
                          "priced from its model and token counts (genai-prices), or the cost "
                          "its span reports; calls with no known price are not in it "
                          "(`unpriced_calls` of each run). AgentWatchdogSpendHigh.",
                          [Query(f"sum by (agent, model) (rate({m('cost_usd_total')}"
                                 f"{{{a}}}[{RATE}])) * 3600", "{{agent}} {{model}}")],
                          unit="currencyUSD", width=24, stacked=True))
    )

    upstream_failed = 'outcome=~"upstream_error|upstream_unreachable|upstream_timeout"'
    board = (
        board.with_row(dashboard.Row("Model endpoint"))
        .with_panel(graph("Model requests", "Requests through the model endpoint by API and "
                          "outcome: passed (forwarded as sent), steered (a countdown, the "
                          "final no-tools request, an abort answered), refused, and the "
                          "upstream's errors, timeouts and unreachability.",
                          [Query(f"sum by (api, outcome) (rate({m('model_requests_total')}"
                                 f"{{{a}}}[{RATE}]))", "{{api}} {{outcome}}")],
                          unit="reqps", width=6, stacked=True))
        .with_panel(graph("Steered model requests", "Requests the endpoint changed, by agent "
                          "and action: note (countdown, wind-down), final (tools withdrawn, "
                          "the report asked for), abort (answered without the upstream), trim "
                          "(tool calls past the budget removed from the answer).",
                          [Query(f"sum by (agent, action) (increase("
                                 f"{m('model_steered_total')}{{{a}}}[{RATE}]))",
                                 "{{agent}} {{action}}")], bars=True, width=6))
        .with_panel(graph("Upstream failures", "Share of each agent's model requests the "
                          "upstream failed (an error status, a timeout, unreachable): "
                          "AgentWatchdogModelUpstreamErrors.",
                          [Query(f"sum by (agent) (rate({m('model_requests_total')}"
                                 f"{{{a},{upstream_failed}}}[{RATE}])) / sum by (agent) (rate("
                                 f"{m('model_requests_total')}{{{a}}}[{RATE}]))",
                                 "{{agent}}")], unit="percentunit", width=6))
        .with_panel(graph("Upstream time", "From a request sent upstream to the end of its "
                          "response (streamed ones included): the model's time, not the "
                          "endpoint's.",
                          quantiles("model_upstream_duration_seconds"), unit="s", width=6))
    )

    board = (
        board.with_row(dashboard.Row("Ingest"))
        .with_panel(graph("Spans received", "Spans per second by protocol, accepted or "
                          "rejected.",
                          [Query(f"sum by (protocol) (rate({m('spans_received_total')}"
                                 f"[{RATE}]))", "{{protocol}}")], unit="ops", width=6))
        .with_panel(graph("Spans rejected", "Spans refused as unusable, by reason.",
                          [Query(f"sum by (reason) (rate({m('spans_rejected_total')}"
                                 f"[{RATE}]))", "{{reason}}")], unit="ops", width=6))
        .with_panel(graph("Export requests", "OTLP export requests by protocol and outcome.",
                          [Query(f"sum by (protocol, outcome) (rate("
                                 f"{m('export_requests_total')}[{RATE}]))",
                                 "{{protocol}} {{outcome}}")], unit="reqps", width=6))
        .with_panel(graph("Ingest lag", "From the end of a request's oldest span to its "
                          "ingestion (includes the exporter's batch delay).",
                          quantiles("ingest_lag_seconds"), unit="s", width=6))
        .with_panel(graph("Timed loops", "Passes of each watchdog's timed loops by task "
                          "(state_flush, evaluate, prune, rules_watch) and outcome: a task "
                          "with no ok pass stops its timed rules (idle and total timeouts) or "
                          "its writes. AgentWatchdogLoopStalled.",
                          [Query(f"sum by (task, outcome) (increase("
                                 f"{m('background_passes_total')}[{RATE}]))",
                                 "{{task}} {{outcome}}")], bars=True, width=24))
    )
    return board


def number_panels(board: dict[str, object]) -> None:
    """Stable panel ids in layout order (Grafana needs them unique)."""
    panels = board.get("panels")
    assert isinstance(panels, list)
    for index, panel in enumerate(panels, start=1):
        panel["id"] = index


def render() -> str:
    board = json.loads(json.dumps(build().build(), cls=JSONEncoder))
    number_panels(board)
    return json.dumps(board, indent=2, sort_keys=True) + "\n"


def main(argv: Sequence[str]) -> int:
    text = render()
    if "--check" in argv:
        if not OUTPUT.exists() or OUTPUT.read_text() != text:
            print(f"{OUTPUT} is out of date: run python tools/dashboard.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
