"""What a run holds: every field of a :class:`~watchdog.core.runs.run.RunState`, with its
meaning, and the bounds that keep a run's memory from growing with its length. How spans fold
into the fields is :mod:`watchdog.core.runs.counts`; how a run ends and what it reports,
:mod:`watchdog.core.runs.run`.
"""

from __future__ import annotations

from watchdog.core.bounds import MAX_CYCLE_LENGTH
from watchdog.core.runs.terminal import TerminalState
from watchdog.core.spans.record import MAX_ASKED_TOOLS, KeySource

# Per-run bounds. A run with more distinct tools/signatures than this still counts every call;
# it just stops telling new ones apart (they go to an overflow bucket).
MAX_DISTINCT_TOOLS = 64
OTHER_TOOL = "_other"
# Model calls a run keeps to pair a twin with (the same call traced by two instrumentations)
# that comes after other calls (out of order)
RECENT_MODEL_CALLS = 8
# (span id, parent span id or "", input tokens, output tokens, response id or "", scope,
# price in USD or -1.0: unpriced, start and end in ns (0: not known), model or "")
ModelCall = tuple[str, str, int, int, str, str, float, int, int, str]
# A model endpoint's record of a call and an agent's span of it that names no response pair by
# their usage only when they name the same model (if both name one) and ran at the same time:
# the span (the agent's clock) around the request and its response (the sidecar's), within
# this many nanoseconds either side, for the two clocks (one host's, a pod's: far closer)
USAGE_PAIR_SLACK_NS = 5 * 1_000_000_000
UNPRICED = -1.0
NS = 1_000_000_000
# Seconds between a span's end (the agent's clock) and its arrival (the sidecar's) beyond which
# the two clocks are taken to disagree rather than the span to have waited: an exporter's batch
# delay (5 s by default) and retries stay well inside it.
CLOCK_SKEW_TOLERANCE = 60.0
# Failed spans a run keeps to tell an exception's echo on the span around (or inside) one
RECENT_FAILURES = 8
# the ids of the tool calls a run counted lately, with the scope of the record that counted
# each: a call of the same id from another scope (the model endpoint's record of a call it
# handed over, and the agent's span of running it) is the same call, counted once
RECENT_TOOL_IDS = 32
# Tool calls asked for and not answered a run keeps (several model calls' worth: an export
# request groups spans by scope, so a tool's span may come after the model call after it)
MAX_ASKED = 2 * MAX_ASKED_TOOLS
# (tool name, call id or "", start of the model call that asked for it)
Asked = tuple[str, str, int]
# Tool calls answered by name a run keeps: a model call that comes after one of them, started
# before the tool did and after the call it was paired with, asked for it (its spans sent out
# of order): the earlier call's request is open again. Several model calls' worth, as
# RECENT_MODEL_CALLS; not kept over a restart (out-of-order requests come seconds apart, and
# every snapshot of a busy run would be longer)
RECENT_ANSWERED = 8
# (tool name, call id or "", start of the model call that asked for it, start of the tool call)
Answered = tuple[str, str, int, int]
# (span id, parent span id or "", exception id, counted: it or the span it echoes counted)
Failure = tuple[str, str, int, bool]


class RunFields:
    """The fields of one run (its identity, counts, signals and outcome), set to a new run's."""

    __slots__ = (
        "_agent_step_ns", "_answered", "_asked", "_call_counts", "_cap_request", "_cycle_runs",
        "_delta_messages",
        "_error_counts", "_failures", "_final_end_ns", "_input_start_ns", "_llm_end_ns",
        "_llm_final", "_llm_messages", "_llm_parent", "_llm_said_ns", "_llm_said_start_ns",
        "_llm_start_ns",
        "_loop_cap", "_loop_capped", "_loop_ended", "_models", "_named", "_plumbing_service",
        "_recent_calls",
        "_reported_calls",
        "_result_counts", "_step_stop_messages", "_step_stop_ns", "_tool_end_ns",
        "_tool_error_streak", "_tool_ids", "_tool_spans", "_tool_start_ns",
        "activity_seq",
        "agent", "agent_spans", "budget", "budget_used", "clock_lags", "consecutive_errors",
        "cost_usd", "counted_state",
        "cycle_repeats", "end_error_type", "ended", "ended_at", "errors",
        "explicit_final", "final_output", "finish_reason", "first_seen", "first_start_ns",
        "forced_reason", "forced_state", "framed", "hangs_from", "in_flight", "in_flight_since",
        "input_hash", "input_tokens", "instance", "iterations", "key", "key_source",
        "last_error", "last_progress", "last_seen", "limit_stop", "loose_trace", "messages",
        "named_at", "named_by_agent", "named_trace",
        "output_tokens", "parent_run",
        "repeated_error", "repeated_tool_call", "repeated_tool_result", "root_span", "service",
        "session",
        "session_counted", "spans", "stop_answers", "stop_note", "terminal_reason",
        "terminal_state", "tool_calls", "tools",
        "trace_id", "unpriced_calls",
    )

    def __init__(self, key: str, key_source: KeySource, trace_id: str, now: float) -> None:
        self.key = key
        self.key_source = key_source
        self.trace_id = trace_id
        self.root_span: str | None = None  # its first trace's earliest span (its trace link)
        self.agent: str | None = None
        self.agent_spans = False  # a span of the agent's came (not only the model endpoint's)
        self.service: str | None = None
        self.instance: str | None = None  # which process of the service (its calls')
        self._plumbing_service = False  # ... taken from a span of no kind: a call's names it
        self.session: str | None = None
        self.session_counted = False  # the shell has counted this run in its session's runs
        # the model endpoint's stop: the note it answered the run with (at most
        # bounds.MAX_STOP_NOTE_CHARS) and what a request that goes on from that answer carries
        # (its digests, its Responses id, its kept conversation; at most bounds.
        # MAX_STOP_ANSWERS): kept with the run, so a retry after a restart is still the
        # stopped run's
        self.stop_note: str | None = None
        self.stop_answers: tuple[str, ...] = ()
        # The client SDK announced it: its own span (``watchdog.run <agent>``) ends it, not the
        # agent spans inside it (a framework's agent, an agent called as a tool).
        self.framed = False
        self.named_by_agent = False  # an agent span (not a workflow around it) named the run
        # The trace the client SDK's announcement named it in, and when it last did (the
        # sidecar's clock): a model request's traceparent of that trace is its run's (the run
        # named last); kept with its snapshot, so a restart after a crash knows it too
        self.named_trace: str | None = None
        self.named_at = 0.0
        self._final_end_ns = 0  # the end of the span that gave final_output (0: none)
        self._agent_step_ns = 0  # the start of the span of no agent kind that named it (0: none)
        self.parent_run: str | None = None
        # The span its agent span hangs from, while that span (so the parent run) has not come.
        self.hangs_from: str | None = None
        # A run of loose calls (see watchdog.core.runs.tracker): the trace of its last call, whose
        # tool calls may still come; with the run's service, agent and session, what a restarted
        # tracker needs to go on with it. None: not such a run.
        self.loose_trace: str | None = None
        self.first_start_ns = 0
        # The least and the most time between a span's end and its arrival (~the exporter's
        # delay, plus how far the agent's clock is behind the sidecar's): see clock_skew.
        self.clock_lags: list[float] | None = None  # [least, most], updated in place
        self.first_seen = now
        self.last_seen = now
        self.last_progress = now
        self.spans = 0
        self.iterations = 0
        self.tool_calls = 0
        self.tools: dict[str, int] = {}
        self.messages = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.cost_usd = 0.0  # the priced model calls' cost (watchdog.core.runs.pricing)
        self.unpriced_calls = 0  # model calls with no known price (never counted as free)
        self.errors = 0
        self.consecutive_errors = 0
        self._tool_error_streak = False  # the current error streak includes a failed tool call
        self._loop_cap: str | None = None  # a loop cap its agent span told before its tools
        # the cap an agent span told a request for an answer at (cap_request), and that span:
        # its last model call, come after it, hanging from it says the run stopped at the cap
        self._cap_request: tuple[str, str] | None = None
        self._loop_ended = False  # the framework's own loop-end tool ran (DSPy's `finish`)
        # limit_stop is that loop cap, told before the loop-end tool came: one that comes
        # after (a later request) says the loop did not end at its cap
        self._loop_capped = False
        # the end of the call of a loop its application runs itself (SpanRecord.loop_call) that
        # told limit_stop (0: none did): a model call that starts after it takes the limit back
        self._step_stop_ns = 0
        self._step_stop_messages = 0  # the conversation's length then (a step going on is longer)
        self.last_error: str | None = None
        self._error_counts: dict[int, int] = {}
        self.repeated_error = 0
        self._call_counts: dict[int, int] = {}
        self.repeated_tool_call = 0
        # (tool, result) -> (count, last args); tuples of ints, so the garbage collector stops
        # tracking them (a list per distinct result made every young collection longer)
        self._result_counts: dict[int, tuple[int, int]] = {}
        self.repeated_tool_result = 0
        self._recent_calls: list[int] = []
        self._cycle_runs = [0] * MAX_CYCLE_LENGTH
        self.cycle_repeats = 0
        self.finish_reason: str | None = None
        # the request of its earliest model call (SpanRecord.input_hash), and when that started
        self.input_hash: int | None = None
        self._input_start_ns = 0
        self.explicit_final = False
        self._llm_final = False
        # When the model call that set _llm_final (said whether it answered) ended; 0: none has.
        # An export request groups its spans by instrumentation scope, so a tool call and the
        # model call after it may arrive in either order: their end times tell which was last.
        self._llm_said_ns = 0
        self._llm_said_start_ns = 0  # ... and when it started
        self._tool_start_ns = self._tool_end_ns = 0  # the last tool call to end: its span
        self._llm_start_ns = self._llm_end_ns = 0  # the last model call to end: its span
        self._llm_parent: str | None = None  # ... and the span it hangs from
        self._llm_messages = 0  # ... and its conversation's length (0: not seen)
        # (The rings below are lists updated in place, never handed out: to_dict and copy copy
        # them, to_row's row shares them and is encoded at once; an empty one is the empty
        # tuple, no list for a run that never fills it. A tuple rebuilt on every span was new
        # garbage for the collector a span.)
        # the last RECENT_MODEL_CALLS model calls, in the order they came (a pair of twins as
        # one, the half that came last): (span id, parent span id or "", input tokens, output
        # tokens, response id or "", scope)
        self._models: list[ModelCall] | tuple[()] = ()
        # The tool calls the run's model calls asked for that no tool call has answered yet,
        # (name, call id, when the call that asked started), the last MAX_ASKED kept: a span
        # after that call named after one of them is that tool's execution (see asked_for)
        self._asked: list[Asked] | tuple[()] = ()
        self._answered: list[Answered] | tuple[()] = ()  # ... and those answered by name (Answered)
        # the tool calls counted lately (a span taken as a tool's execution by its name too):
        # (parent span id, tool); a tool call around one of them is that call, traced twice
        self._named: list[tuple[str, str]] | tuple[()] = ()
        # ... and (span id, tool): a tool call inside one of them, come after it, is too
        self._tool_spans: list[tuple[str, str]] | tuple[()] = ()
        # ... and (call id, scope) of the last RECENT_TOOL_IDS that carried an id
        self._tool_ids: list[tuple[str, str]] | tuple[()] = ()
        # the last RECENT_FAILURES failed spans (not agent spans): an exception seen again on
        # the span around one of them, or inside it, is one failure (see _echo)
        self._failures: list[Failure] | tuple[()] = ()
        self.final_output: str | None = None
        self.limit_stop: str | None = None  # a framework limit a span reported (first wins)
        self.budget: dict[str, float] = {}
        # how much of its budget the agent says it used (by budget key): the run's remaining
        # budget counts the larger of that and what the watchdog counted
        self.budget_used: dict[str, float] = {}
        self._delta_messages = 0  # input messages the model calls added (messages delta)
        # model calls an agent span reported that no model-call span has counted yet (crewai
        # reports its calls on the agent span; a span of one that comes later is one of them)
        self._reported_calls = 0
        self.ended = False
        self.ended_at: float | None = None
        self.end_error_type: str | None = None
        self.terminal_state: TerminalState | None = None
        # the state its end was handed out in (runs_finished_total): a later one is a move
        self.counted_state: TerminalState | None = None
        self.terminal_reason: str | None = None
        self.forced_state: TerminalState | None = None
        self.forced_reason: str | None = None
        self.activity_seq = 0
        self.in_flight = 0  # calls started but not ended, as the client SDK last reported
        self.in_flight_since: float | None = None  # start of the oldest of them
