"""Prometheus metrics (DESIGN §9) and the ``/metrics``, ``/healthz``, ``/readyz`` endpoint.

This is the only module that imports ``prometheus_client``; the rest of the sidecar reports
through the narrow :class:`~watchdog.shell.service.Observer` protocol and the few methods below.

Theory of operation
-------------------
* Counters and histograms move once per export request (``spans_received``) or once per
  finished run, from aggregates the core already computed — never once per span. The per-agent
  counters of applied spans (tool calls, tokens, errors) are only added up in plain dicts on
  the ingest path (``batch_applied``: once per ingest slice, a prometheus_client ``inc`` with
  an exemplar costs ~5 µs), and so are the decisions (``rule_fired``), and moved into their
  series when the registry is collected (a scrape), or when many label combinations are
  waiting (:data:`MAX_PENDING_SERIES`).
* Gauges about live runs (``runs_active``, ``run_idle_seconds_max``) are not kept up to date at
  all: :class:`LiveRunsCollector` computes them when Prometheus scrapes, from the plain values
  (agent, last progress) that the function given to :meth:`Metrics.read_live_runs` returns for
  the active runs; nothing here reads live state.
* One way to a series: every labelled one through :class:`Children` (``self._child(metric,
  *labels)``, its child looked up once), each label value through a cap or :func:`clip`; an
  unlabelled metric directly; values known only at scrape time through a collector.
* Every label value that comes from agent data passes a :class:`LabelCap`: the first N distinct
  values keep their name and later ones become ``_other``, so a misbehaving agent (a tool name
  with a UUID in it, a thousand generated agent names) cannot blow up the series count. Run,
  trace and session ids never become labels; exemplars carry ``trace_id`` instead, and only
  OpenMetrics (``Accept: application/openmetrics-text``) shows them.
"""

from __future__ import annotations

import bisect
import logging
import re
import threading
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar

from aiohttp import web
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from watchdog.core.rules.decision import Action
from watchdog.core.shown import shown

if TYPE_CHECKING:
    from watchdog.core.runs.tracker import BatchResult
    from watchdog.core.runs.view import RunView
    from watchdog.core.spans.pipeline import Decoded

log = logging.getLogger("watchdog")

PREFIX = "agent_watchdog_"
OTHER = "_other"  # the label value every capped-out value collapses into
UNKNOWN = "unknown"  # an empty label value would make Prometheus drop the label
NS = 1_000_000_000
LiveRun = tuple[str, float]  # an active run's agent and last progress (seconds since the epoch)

# Cardinality bounds. Worst case for the widest metric, tool_calls_total:
# (MAX_AGENTS + 1) x (MAX_TOOLS_PER_AGENT + 1) = 5,151 series.
MAX_LABEL_CHARS = 128
MAX_AGENTS = 100
MAX_TOOLS_PER_AGENT = 50
MAX_ERROR_TYPES_PER_AGENT = 20
MAX_RULES = 200  # rule names come from the operator's packs, but a pack is data too
MAX_PENDING_SERIES = 4096  # label combinations added up before a scrape moves them into series
# where a model call went unrecorded (model_unrecorded_total): its request, its response
UNRECORDED_STAGES = ("request", "response")
# How a GenAI log event's content was read (watchdog.core.spans.logs.CONTENT_OUTCOMES, which
# loads with the span pipeline: named here too, so each series is shown at 0 from the start)
LOG_CONTENT_OUTCOMES = ("with_span", "late", "dropped")

# Histogram buckets, chosen for agents: a handful to a few hundred steps, seconds to hours.
COUNT_BUCKETS = (0, 1, 2, 3, 5, 8, 13, 20, 30, 50, 75, 100, 150, 200, 300, 500, 1000)
DURATION_BUCKETS = (1, 5, 10, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400)
# The OTel SDK batches for up to 5 s by default (DESIGN §3), so lag clusters below ~6 s.
# a model call: a short completion in ~0.3 s, a long streamed or reasoning one in minutes
MODEL_UPSTREAM_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)
INGEST_LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 6, 10, 30, 60, 300)
RULE_EVAL_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                     0.25, 0.5, 1)

# ``*_created`` series double the series count and Prometheus 2.x stores them as plain samples;
# counters' resets are detected without them. Process-wide, and this module owns the library.
disable_created_metrics()  # type: ignore[no-untyped-call]


# A control character (C0, DEL, C1), a line or paragraph separator or a bidirectional control
# in a label value is written as its escape: names come from the agents' spans, and a scrape
# read in a terminal (curl /metrics) would act on them (ESC clears the screen, CR draws over).
_ESCAPED = {code: f"\\x{code:02x}" for code in (*range(32), *range(127, 160))} | {
    code: f"\\u{code:04x}" for code in (0x061C, 0x200E, 0x200F, 0x2028, 0x2029,
                                          *range(0x202A, 0x202F), *range(0x2066, 0x206A))}
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def clip(value: str | None) -> str:
    """A label value: never empty, at most ``MAX_LABEL_CHARS`` characters, UTF-8 (a lone
    surrogate, which no scrape could encode, becomes ``?``), no control character
    (:data:`_ESCAPED`)."""
    if not value:
        return UNKNOWN
    if _CONTROL.search(value) is not None:
        value = value.translate(_ESCAPED)
    value = value if len(value) <= MAX_LABEL_CHARS else value[:MAX_LABEL_CHARS]
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "replace").decode("utf-8")
    return value


class LabelCap:
    """The first ``limit`` distinct values keep their name; later ones become ``_other``.

    Admission is first come, first kept, for the life of the process, so a series never changes
    its name once it exists. Lookups of known values take no lock. ``full``, if given, is told
    the first value turned away (once).
    """

    __slots__ = ("_full", "_known", "_limit", "_lock")

    def __init__(self, limit: int, full: Callable[[str], None] | None = None) -> None:
        self._limit = limit
        self._known: dict[str, None] = {}
        self._lock = threading.Lock()
        self._full = full

    def __call__(self, value: str | None) -> str:
        if value in self._known:
            return value
        value = clip(value)
        if value in self._known:
            return value
        with self._lock:
            if len(self._known) < self._limit:
                self._known[value] = None
                return value
            full, self._full = self._full, None
        if full is not None:
            full(value)
        return OTHER

    def known(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._known)


def _agents_full(first: str) -> None:
    log.warning("metrics: the agent label holds the %d agent names seen first; %s and every "
                "agent named after it are counted as agent=\"%s\" until the sidecar restarts "
                "(docs/metrics.md)", MAX_AGENTS, shown(first), OTHER)


def _capped_within(caps: dict[str, LabelCap], agent: str, value: str, limit: int) -> str:
    """``value`` through ``agent``'s own cap (agents are capped, so ``caps`` is bounded too)."""
    cap = caps.get(agent)
    if cap is None:
        cap = caps.setdefault(agent, LabelCap(limit))
    return cap(value)


def _exemplar(trace_id: str | None) -> dict[str, str] | None:
    return {"trace_id": trace_id} if trace_id else None


M = TypeVar("M", bound=MetricWrapperBase)


class Children:
    """Labelled children of metrics, kept once made.

    ``labels()`` converts, validates and takes the metric's lock on every call, which is most of
    the per-batch cost of the metrics; a child is the same object for the life of its metric
    (nothing here removes one), so it is looked up once. Bounded like the series themselves:
    every label value has passed a cap or is one of our own constants.
    """

    __slots__ = ("_children",)

    def __init__(self) -> None:
        self._children: dict[tuple[MetricWrapperBase, tuple[str, ...]], MetricWrapperBase] = {}

    def __call__(self, metric: M, *values: str) -> M:
        key = (metric, values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child  # type: ignore[return-value]  # labels() returns the metric's own type


class Metrics:
    """Every metric of DESIGN §9 in one registry of its own (tests create many)."""

    def __init__(self, version: str, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry = registry if registry is not None else CollectorRegistry()
        # First, so every collection (a scrape, a test's get_sample_value) sees what the ingest
        # path added up since the last one.
        self._pending = PendingCounts()
        registry.register(_Publisher(self))
        # What every Python exporter has, unprefixed: process_* (CPU, resident memory, file
        # descriptors) and python_gc_* (collections per generation: full ones stop the loop)
        ProcessCollector(registry=registry)
        GCCollector(registry=registry)
        PlatformCollector(registry=registry)
        self._live_runs: Callable[[], Iterable[LiveRun]] | None = None
        self._log_content: Callable[[], Mapping[str, int]] | None = None
        self._now: Callable[[], float] = time.time
        self._agents = LabelCap(MAX_AGENTS, _agents_full)
        self._tools: dict[str, LabelCap] = {}  # capped agent -> its tool names
        self._models: dict[str, LabelCap] = {}  # capped agent -> its model names
        self._error_types: dict[str, LabelCap] = {}  # capped agent -> its error types
        self._rules = LabelCap(MAX_RULES)
        self._stuck: set[tuple[str, str]] = set()
        self._fleet_tools = LabelCap(MAX_TOOLS_PER_AGENT)  # tools_failing's tool names
        self._failing: dict[str, set[str]] = {}  # tools_failing label -> its tools failing
        self.reload_success: bool | None = None  # unknown until the rules engine reports
        self._child = Children()

        def counter(name: str, doc: str, labels: Iterable[str] = ()) -> Counter:
            return Counter(PREFIX + name, doc, tuple(labels), registry=registry)

        def histogram(name: str, doc: str, labels: Iterable[str],
                      buckets: Iterable[float]) -> Histogram:
            return Histogram(PREFIX + name, doc, tuple(labels), registry=registry,
                             buckets=tuple(buckets))

        def gauge(name: str, doc: str, labels: Iterable[str]) -> Gauge:
            return Gauge(PREFIX + name, doc, tuple(labels), registry=registry)

        # ingest
        self.spans_received_total = counter(
            "spans_received_total", "Spans received, accepted or rejected.", ["protocol"])
        self.spans_rejected_total = counter(
            "spans_rejected_total", "Spans refused as unusable, by reason.", ["reason"])
        self.export_requests_total = counter(
            "export_requests_total", "OTLP export requests by outcome.", ["protocol", "outcome"])
        self.forwarded_total = counter(
            "forwarded_total", "OTLP export requests passed on to forward_endpoint, by outcome "
            "(sent, retried: one failed attempt, dropped_*: given up).", ["signal", "outcome"])
        self.ingest_lag_seconds = PlainHistogram(
            PREFIX + "ingest_lag_seconds",
            "Seconds from the end of the oldest span of an export request to its ingestion.",
            INGEST_LAG_BUCKETS, registry)
        # runs
        self.tool_calls_total = counter(
            "tool_calls_total", "Tool executions.", ["agent", "tool"])
        self.tokens_total = counter(
            "tokens_total", "LLM tokens used.", ["agent", "direction"])
        self.cost_usd_total = counter(
            "cost_usd_total", "US dollars the priced model calls cost (genai-prices, or the "
            "cost a span reports).", ["agent", "model"])
        self.errors_total = counter(
            "errors_total", "Failed LLM and tool spans.", ["agent", "error_type"])
        self.runs_finished_total = counter(
            "runs_finished_total", "Runs that reached a terminal state.",
            ["agent", "terminal_state"])
        self.runs_reclassified_total = counter(
            "runs_reclassified_total", "Runs counted in runs_finished_total under "
            "terminal_state that left it: classified again after (late spans), counted again "
            "under their new state; or taken back by their agent, counted again at their next "
            "end.", ["agent", "terminal_state"])
        self.runs_evicted_total = counter(
            "runs_evicted_total", "Active runs dropped (as abandoned) to stay within max_runs.",
            ["agent"])
        self.run_iterations = histogram(
            "run_iterations", "LLM calls per finished run.", ["agent"], COUNT_BUCKETS)
        self.run_tool_calls = histogram(
            "run_tool_calls", "Tool calls per finished run.", ["agent"], COUNT_BUCKETS)
        self.run_duration_seconds = histogram(
            "run_duration_seconds", "Duration of finished runs.", ["agent"], DURATION_BUCKETS)
        # rules and directives
        self.runs_stuck = gauge(
            "runs_stuck", "Active runs a rule currently holds stuck, by reason.",
            ["agent", "reason"])
        self.tools_failing_gauge = gauge(
            "tools_failing", "1 while a tool fails for many runs (fleet.failing_tools: the "
            "same error type in fleet_window, no success since), else 0.", ["tool"])
        self.rule_fired_total = counter(
            "rule_fired_total", "Rule actions fired.", ["rule", "action", "agent"])
        self.rule_errors_total = counter(
            "rule_errors_total", "Rule evaluations that failed (counted as not matching).",
            ["rule"])
        self.directives_delivered_total = counter(
            "directives_delivered_total", "Directive deliveries by channel and outcome.",
            ["action", "channel", "outcome"])
        self.background_passes_total = counter(
            "background_passes_total", "Passes of the sidecar's timed loops (state_flush, "
            "evaluate, prune, rules_watch) by outcome (ok, failed).", ["task", "outcome"])
        self.rule_eval_duration_seconds = PlainHistogram(
            PREFIX + "rule_eval_duration_seconds", "Seconds one evaluation of all rules took.",
            RULE_EVAL_BUCKETS, registry)
        # the model endpoint (DESIGN §12)
        self.model_requests_total = counter(
            "model_requests_total", "Requests through the model endpoint, by API and outcome "
            "(passed, steered, aborted, refused, upstream_error, upstream_unreachable, "
            "upstream_timeout, cancelled).", ["agent", "api", "outcome"])
        self.model_steered_total = counter(
            "model_steered_total", "Model requests the endpoint steered, by action (note, "
            "final, abort, trim).", ["agent", "action"])
        self.model_overloaded_total = counter(
            "model_overloaded_total", "Model requests answered 503 with Retry-After, by the "
            "limit they met (model_max_concurrent, model_max_inflight_bytes, "
            "model_max_held_response_bytes).", ["limit"])
        self.model_request_bytes_in_flight = gauge(
            "model_request_bytes_in_flight", "Bytes of request bodies the model requests in "
            "flight hold (bounded by model_max_inflight_bytes, but for one request alone).", ())
        self.model_response_bytes_held = gauge(
            "model_response_bytes_held", "Bytes of whole upstream responses the model requests "
            "in flight hold before they are answered (bounded by "
            "model_max_held_response_bytes, but for one response alone).", ())
        self.model_ahead_total = counter(
            "model_ahead_total", "Model requests the compiled relay sent upstream before the "
            "loop read them, by kind (first: a new run's first request; continued: a request "
            "that continues a run) and outcome (same: the loop decided the same once it read "
            "it; missed: it decided otherwise).", ["kind", "outcome"])
        self.model_unrecorded_total = counter(
            "model_unrecorded_total", "Model calls the endpoint could not record while the "
            "state cannot be written or is behind, by stage (request: the request steered by "
            "the endpoint's own counts; response: the call's record).", ["stage"])
        for stage in UNRECORDED_STAGES:
            self.model_unrecorded_total.labels(stage)
        self.model_ahead_unread_total = counter(
            "model_ahead_unread_total", "Chat Completions responses whose tool calls the "
            "compiled relay could not read: until the loop has booked each, no continuing "
            "request goes on before the loop reads it.", ())
        self.model_upstream_duration_seconds = histogram(
            "model_upstream_duration_seconds", "Seconds from a request sent upstream to the "
            "end of its response.", ["api"], MODEL_UPSTREAM_BUCKETS)
        # faults
        self.run_failures_total = counter(
            "run_failures_total", "Per-run work that failed and was skipped for that run alone "
            "(stage: rules, flush, restore, read, view, session); the other runs go on.", ["stage"])
        self.state_writable_gauge = gauge(
            "state_writable", "1 while the state directory can be written; 0 while exports are "
            "refused because it cannot (disk full, read-only, I/O error).", ())
        self.state_writable_gauge.set(1)
        self.state_write_failures_total = counter(
            "state_write_failures_total", "Times the state became unwritable.", ())
        # process
        self._child(gauge("build_info", "The running watchdog's version (always 1).",
                          ["version"]), clip(version)).set(1)
        registry.register(LiveRunsCollector(self))
        registry.register(LogContentCollector(self))

    def read_log_content(self, counts: Callable[[], Mapping[str, int]]) -> None:
        """Where ``log_content_total`` is read from at a scrape: ``counts`` returns how many
        GenAI log events' content was read each way (:data:`LOG_CONTENT_OUTCOMES`) so far."""
        self._log_content = counts

    def log_content(self) -> Mapping[str, int]:
        return self._log_content() if self._log_content is not None else {}

    def read_live_runs(self, runs: Callable[[], Iterable[LiveRun]],
                       now: Callable[[], float]) -> None:
        """Where the scrape-time gauges take the active runs from (``runs`` returns them, as
        plain values) and the watchdog's clock (a run's idle time counts to its ``now``)."""
        self._live_runs = runs
        self._now = now

    def now(self) -> float:
        return self._now()

    def live_runs(self) -> Iterable[LiveRun]:
        """The active runs (none before :meth:`read_live_runs`)."""
        return () if self._live_runs is None else self._live_runs()

    # -- label caps ---------------------------------------------------------------------------

    def agent(self, name: str | None) -> str:
        return self._agents(name)

    def known_agents(self) -> tuple[str, ...]:
        return self._agents.known()

    def _tool(self, agent: str, tool: str) -> str:
        return _capped_within(self._tools, agent, tool, MAX_TOOLS_PER_AGENT)

    def _model(self, agent: str, model: str) -> str:
        return _capped_within(self._models, agent, model, MAX_TOOLS_PER_AGENT)

    def _error_type(self, agent: str, error_type: str) -> str:
        return _capped_within(self._error_types, agent, error_type, MAX_ERROR_TYPES_PER_AGENT)

    # -- Observer (watchdog.shell.service) --------------------------------------------------------

    def spans_rejected(self, reason: str, count: int) -> None:
        """Spans received (counted then) and refused once applied: a second span of an id."""
        self._child(self.spans_rejected_total, clip(reason)).inc(count)

    def spans_received(self, protocol: str, decoded: Decoded, now: float) -> None:
        records = decoded.records
        received = len(records) + decoded.rejected_count
        child = self._child
        if received:
            child(self.spans_received_total, clip(protocol)).inc(received)
        for reason, count in decoded.rejected.items():
            child(self.spans_rejected_total, clip(reason)).inc(count)
        if records:
            # (a slice: at most INGEST_SLICE spans, each trace's in end order, not the whole)
            oldest_ns = min(record.end_ns for record in records)
            if oldest_ns > 0:
                self.ingest_lag_seconds.observe(max(now - oldest_ns / NS, 0.0))

    def batch_applied(self, result: BatchResult, evicted: Sequence[RunView]) -> None:
        if self._pending.add(result) > MAX_PENDING_SERIES:
            self.publish()
        for run in evicted:  # also reported to runs_finished, as abandoned
            self._child(self.runs_evicted_total, self.agent(run.agent)).inc()

    def publish(self) -> None:
        """Move the counts ``batch_applied``, ``rule_fired`` and ``_count`` added up into their
        series (with each agent's, or each rule's, action's and agent's, or each series', latest
        trace id as the exemplar), in the order they first came (the label caps admit values
        so)."""
        tool_calls, tokens, errors, cost, exemplars, fired, counted = self._pending.take()
        child = self._child
        for (counter, labels), (count, trace_id) in counted.items():
            child(counter, *labels).inc(count, _exemplar(trace_id))
        for (rule, action, agent), (count, trace_id) in fired.items():
            child(self.rule_fired_total, self._rules(rule), clip(action), self.agent(agent)).inc(
                count, _exemplar(trace_id))
        for (agent, tool), count in tool_calls.items():
            label = self.agent(agent)
            child(self.tool_calls_total, label, self._tool(label, tool)).inc(
                count, _exemplar(exemplars.get(agent)))
        for (agent, direction), count in tokens.items():
            child(self.tokens_total, self.agent(agent), clip(direction)).inc(
                count, _exemplar(exemplars.get(agent)))
        for (agent, error_type), count in errors.items():
            label = self.agent(agent)
            child(self.errors_total, label, self._error_type(label, error_type)).inc(
                count, _exemplar(exemplars.get(agent)))
        for (agent, model), dollars in cost.items():
            label = self.agent(agent)
            child(self.cost_usd_total, label, self._model(label, model)).inc(
                dollars, _exemplar(exemplars.get(agent)))

    def pending_series(self) -> int:
        """Label combinations added up and not yet in their series."""
        return self._pending.waiting()

    def runs_finished(self, runs: Iterable[RunView]) -> None:
        child = self._child
        for run in runs:
            agent = self.agent(run.agent)
            state = run.terminal_state.value if run.terminal_state is not None else UNKNOWN
            exemplar = _exemplar(run.trace_id)
            self._count(self.runs_finished_total, agent, state, trace_id=run.trace_id)
            child(self.run_iterations, agent).observe(run.iterations, exemplar)
            child(self.run_tool_calls, agent).observe(run.tool_calls, exemplar)
            child(self.run_duration_seconds, agent).observe(run.elapsed_seconds, exemplar)

    def runs_reclassified(self, moves: Iterable[tuple[RunView, str]]) -> None:
        """Runs whose state moved after their end was counted: counted again in the new state,
        and as having left the one they were counted in, so ``runs_finished_total -
        runs_reclassified_total`` is, by state, what ``/v1/runs`` says (histograms: once)."""
        child = self._child
        for run, was in moves:
            agent = self.agent(run.agent)
            state = run.terminal_state.value if run.terminal_state is not None else UNKNOWN
            exemplar = _exemplar(run.trace_id)
            child(self.runs_finished_total, agent, state).inc(1, exemplar)
            child(self.runs_reclassified_total, agent, clip(was)).inc(1, exemplar)

    def runs_resumed(self, moves: Iterable[tuple[str | None, str]]) -> None:
        """Ended runs their agent took back (``agent``, the state they ended in): no longer in
        the state they were counted in; their next end is counted again (``runs_finished_total
        - runs_reclassified_total`` stays what ``/v1/runs`` says)."""
        for agent, was in moves:
            self._child(self.runs_reclassified_total, self.agent(agent), clip(was)).inc(1)

    # -- receivers ----------------------------------------------------------------------------

    def export_request(self, protocol: str, outcome: str) -> None:
        self._child(self.export_requests_total, clip(protocol), clip(outcome)).inc()

    def forwarded(self, signal: str, outcome: str, count: int = 1) -> None:
        self._child(self.forwarded_total, clip(signal), clip(outcome)).inc(count)

    # -- the model endpoint -------------------------------------------------------------------

    def _count(self, counter: Counter, *labels: str, trace_id: str | None = None) -> None:
        """``counter``'s series of ``labels`` one up, added up until the next collection (as
        ``rule_fired``'s: an ``inc`` takes the series' lock, ~3 µs, ~5 with an exemplar)."""
        if self._pending.count(counter, labels, trace_id) > MAX_PENDING_SERIES:
            self.publish()

    def model_request(self, agent: str | None, api: str, outcome: str) -> None:
        self._count(self.model_requests_total, self.agent(agent), clip(api), clip(outcome))

    def model_overloaded(self, limit: str) -> None:
        self._child(self.model_overloaded_total, clip(limit)).inc()

    def model_ahead(self, kind: str, outcome: str) -> None:
        self._count(self.model_ahead_total, clip(kind), clip(outcome))

    def model_unrecorded(self, stage: str) -> None:
        self._child(self.model_unrecorded_total, clip(stage)).inc()

    def model_ahead_unread(self) -> None:
        self.model_ahead_unread_total.inc()

    def model_bytes_from(self, held: Callable[[], int], responses: Callable[[], int]) -> None:
        """``model_request_bytes_in_flight`` and ``model_response_bytes_held`` read at scrape
        time from ``held`` and ``responses``."""
        self.model_request_bytes_in_flight.set_function(held)
        self.model_response_bytes_held.set_function(responses)

    def model_steered(self, agent: str | None, action: str) -> None:
        self._count(self.model_steered_total, self.agent(agent), clip(action))

    def model_upstream(self, api: str, seconds: float) -> None:
        self._child(self.model_upstream_duration_seconds, clip(api)).observe(seconds)

    # -- rules engine and directives ----------------------------------------------------------

    def rule_fired(self, rule: str, action: str, agent: str, trace_id: str | None) -> None:
        """Added up until the next collection (a decision is made every few spans on a busy
        loop; an ``inc`` with an exemplar costs ~5 µs), as ``batch_applied``'s counts are."""
        if self._pending.fire(rule, action, agent, trace_id) > MAX_PENDING_SERIES:
            self.publish()

    def rule_error(self, rule: str) -> None:
        self._child(self.rule_errors_total, self._rules(rule)).inc()

    def rules_loaded(self, names: Iterable[str]) -> None:
        """Show ``rule_errors_total`` at 0 for every rule loaded, so a rule's first error is a
        step from 0 that ``increase()`` sees (a series born at 1 is not one)."""
        for name in names:
            self._child(self.rule_errors_total, self._rules(name))

    def directive_outcomes(self, channel: str, outcomes: Iterable[str]) -> None:
        """Show ``directives_delivered_total`` at 0 for each action and these outcomes of
        ``channel``, for the same reason: the alerts count their first one."""
        for action in Action:
            for outcome in outcomes:
                self._child(self.directives_delivered_total, action.value, channel, outcome)

    def directive_delivered(self, action: str, channel: str, outcome: str) -> None:
        self._child(self.directives_delivered_total, clip(action), clip(channel),
                    clip(outcome)).inc()

    def background_pass(self, task: str, outcome: str) -> None:
        self._child(self.background_passes_total, task, outcome).inc()

    def rule_eval(self, seconds: float) -> None:
        self.rule_eval_duration_seconds.observe(seconds)

    def run_failed(self, stage: str) -> None:
        self._child(self.run_failures_total, clip(stage)).inc()

    def state_writable(self, writable: bool) -> None:
        self.state_writable_gauge.set(1 if writable else 0)
        if not writable:
            self.state_write_failures_total.inc()

    def rules_reloaded(self, ok: bool) -> None:
        self.reload_success = ok

    def tools_failing(self, outages: dict[str, bool]) -> None:
        """Tools whose outage began (True) or ended (False); a tool's series stays, at 0,
        after it recovers, so alerts resolve. Tools past the cap share ``_other``."""
        for tool, failing in outages.items():
            label = self._fleet_tools(tool)
            tools = self._failing.setdefault(label, set())
            if failing:
                tools.add(tool)
            else:
                tools.discard(tool)
            self._child(self.tools_failing_gauge, label).set(1 if tools else 0)

    def set_stuck(self, counts: dict[tuple[str, str], int]) -> None:
        """Replace ``runs_stuck`` with ``counts`` ((agent, reason) -> runs); pairs that were
        stuck before and are not now drop to 0 rather than vanish, so alerts resolve."""
        merged: Tally[tuple[str, str]] = Tally()
        for (agent, reason), count in counts.items():
            merged[(self.agent(agent), self._rules(reason))] += count
        for key in self._stuck - merged.keys():
            self._child(self.runs_stuck, *key).set(0)
        for key, count in merged.items():
            self._child(self.runs_stuck, *key).set(count)
        self._stuck |= merged.keys()

    # -- exposition ---------------------------------------------------------------------------

    def render(self, accept_header: str) -> tuple[bytes, str]:
        """The exposition body and its content type: OpenMetrics (with exemplars) when the
        scraper asks for it, else the Prometheus text format 0.0.4."""
        encoder, content_type = choose_encoder(accept_header)
        return encoder(self.registry), content_type


Key = tuple[str, str]


Count = TypeVar("Count", int, float)


def _add_up(into: dict[Key, Count], counts: Mapping[Key, Count]) -> None:
    """``into += counts``, key by key (``Counter.update`` first asks whether ``counts`` is a
    ``Mapping``, an ABC check that costs more than the few additions of a slice)."""
    get = into.get
    for key, count in counts.items():
        into[key] = get(key, 0) + count


class PendingCounts:
    """Per-agent counts of applied spans, decisions and the model endpoint's counts not yet in
    their series. The ingest path and the endpoint add on the event loop; a collection may take
    them from another thread (a test reading the registry), hence the lock (uncontended: ~0.1
    µs)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clear()

    def _clear(self) -> None:
        self.tool_calls: Tally[Key] = Tally()
        self.tokens: Tally[Key] = Tally()
        self.errors: Tally[Key] = Tally()
        self.cost: dict[Key, float] = {}
        self.exemplars: dict[str, str] = {}
        # (rule, action, agent) -> decisions, and the latest trace id among them
        self.fired: dict[tuple[str, str, str], tuple[int, str | None]] = {}
        # (a counter, its label values) -> what it went up by, and the latest trace id given
        self.counted: dict[tuple[Counter, tuple[str, ...]], tuple[int, str | None]] = {}

    def add(self, result: BatchResult) -> int:
        """Add ``result``'s counts; returns how many label combinations now wait."""
        with self._lock:
            _add_up(self.tool_calls, result.tool_calls)
            _add_up(self.tokens, result.tokens)
            _add_up(self.errors, result.errors)
            _add_up(self.cost, result.cost)
            self.exemplars.update(result.exemplars)
            return self._waiting()

    def waiting(self) -> int:
        with self._lock:
            return self._waiting()

    def fire(self, rule: str, action: str, agent: str, trace_id: str | None) -> int:
        """One decision of ``rule``; returns how many label combinations now wait."""
        key = (rule, action, agent)
        with self._lock:
            count, latest = self.fired.get(key, (0, None))
            self.fired[key] = (count + 1, trace_id or latest)
            return self._waiting()

    def count(self, counter: Counter, labels: tuple[str, ...], trace_id: str | None = None
              ) -> int:
        """``counter``'s series of ``labels`` one up (``trace_id``: its exemplar's, the latest
        given wins); returns how many label combinations now wait."""
        key = (counter, labels)
        with self._lock:
            count, latest = self.counted.get(key, (0, None))
            self.counted[key] = (count + 1, trace_id or latest)
            return self._waiting()

    def _waiting(self) -> int:
        return (len(self.tool_calls) + len(self.tokens) + len(self.errors) + len(self.cost)
                + len(self.fired) + len(self.counted))

    def take(self) -> tuple[Tally[Key], Tally[Key], Tally[Key], dict[Key, float],
                            dict[str, str], dict[tuple[str, str, str], tuple[int, str | None]],
                            dict[tuple[Counter, tuple[str, ...]], tuple[int, str | None]]]:
        with self._lock:
            taken = (self.tool_calls, self.tokens, self.errors, self.cost, self.exemplars,
                     self.fired, self.counted)
            self._clear()
        return taken


class PlainHistogram(Collector):
    """A histogram without labels or exemplars, observed on the ingest path once per slice
    (``ingest_lag_seconds``, ``rule_eval_duration_seconds``): a bisection and two additions
    (~0.5 µs), where prometheus_client's ``observe`` walks the buckets and takes a lock per
    value (~5 µs). Collected as prometheus_client's :class:`Histogram` shows one: the
    cumulative ``_bucket`` series (``le`` as it writes it), ``_count``, ``_sum``."""

    def __init__(self, name: str, documentation: str, buckets: Sequence[float],
                 registry: CollectorRegistry) -> None:
        self.name, self.documentation = name, documentation
        self._bounds = tuple(float(bound) for bound in buckets)
        self._les: list[str] = [floatToGoString(bound)  # type: ignore[no-untyped-call]
                                for bound in (*self._bounds, float("inf"))]
        self._counts = [0] * (len(self._bounds) + 1)  # per bucket, not cumulative
        self._sum = 0.0
        self._lock = threading.Lock()  # (a collection may come from another thread: a test)
        registry.register(self)

    def observe(self, value: float) -> None:
        index = bisect.bisect_left(self._bounds, value)  # the first bound >= value, as `le`
        with self._lock:
            if value == value:  # (NaN is in no bucket, but in the sum, as there)
                self._counts[index] += 1
            self._sum += value

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self.name, self.documentation)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            counts, total = list(self._counts), self._sum
        family = HistogramMetricFamily(self.name, self.documentation)
        cumulative, buckets = 0, []
        for le, count in zip(self._les, counts, strict=True):
            cumulative += count
            buckets.append((le, float(cumulative)))
        family.add_metric([], buckets, total)
        yield family


class _Publisher(Collector):
    """Registered first: moves the pending counts into their series before the registry
    collects them; describes and yields nothing itself."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        self._metrics.publish()
        return iter(())


class LiveRunsCollector(Collector):
    """Gauges computed at scrape time from the active runs, on the event loop thread."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        metrics = self._metrics
        active, idle_max = self._families()
        counts: Tally[str] = Tally()
        idle: dict[str, float] = {}
        now = metrics.now()
        for name, last_progress in metrics.live_runs():
            agent = metrics.agent(name)
            counts[agent] += 1
            seconds = max(now - last_progress, 0.0)
            if seconds > idle.get(agent, -1.0):
                idle[agent] = seconds
        # Agents seen before report 0 instead of vanishing, so "no active run" is a value.
        for agent in sorted(set(metrics.known_agents()) | counts.keys()):
            active.add_metric([agent], counts.get(agent, 0))
            idle_max.add_metric([agent], idle.get(agent, 0.0))
        yield active
        yield idle_max
        if metrics.reload_success is not None:
            yield GaugeMetricFamily(PREFIX + "rules_reload_success",
                                    "Whether the last rules (re)load succeeded (1) or not (0).",
                                    value=1.0 if metrics.reload_success else 0.0)

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily(PREFIX + "runs_active", "Runs in progress.", labels=["agent"]),
            GaugeMetricFamily(PREFIX + "run_idle_seconds_max",
                              "Longest time without progress among the agent's active runs.",
                              labels=["agent"]),
        )


class LogContentCollector(Collector):
    """``log_content_total``: the log join's own counts, read at scrape time (the join is made
    with the span pipeline, at the first export: 0 until then)."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def describe(self) -> Iterator[Metric]:
        yield self._family()

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        counts = self._metrics.log_content()
        for outcome in LOG_CONTENT_OUTCOMES:
            family.add_metric([outcome], counts.get(outcome, 0))
        yield family

    @staticmethod
    def _family() -> CounterMetricFamily:
        return CounterMetricFamily(
            PREFIX + "log_content", "GenAI log events' content (a model call's messages, tool "
            "calls, finish reason) by how it was read: with_span, late (into a run that had "
            "read the call without it), dropped (no span came for it in time).",
            labels=["outcome"])


def create_metrics_app(metrics: Metrics, ready: Callable[[], bool]) -> web.Application:
    """``GET /metrics``, ``/healthz`` (the process is up) and ``/readyz`` (it takes spans)."""

    async def scrape(request: web.Request) -> web.Response:
        body, content_type = metrics.render(request.headers.get("Accept", ""))
        response = web.Response(body=body, headers={"Content-Type": content_type})
        response.enable_compression()  # only when the scraper sends Accept-Encoding
        return response

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(request: web.Request) -> web.Response:
        if ready():
            return web.Response(text="ready")
        return web.Response(status=503, text="not ready")

    app = web.Application()
    app.router.add_get("/metrics", scrape)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app
