"""One agent run: its identity, its incrementally maintained signals and its outcome.

Theory of operation
-------------------
:meth:`RunState.apply` folds one :class:`SpanRecord` into the run in O(1): counters are bumped,
the "most frequent" signals keep their maximum as they go (a count only ever grows, so the max
of the counts is updated on each increment), and tool-call cycles are detected from the last
``MAX_CYCLE_LENGTH`` call signatures. Nothing rescans the run's history, and every per-run map
has a bound (``MAX_DISTINCT_*``) so a run's memory does not grow with its length; the activity
log lives in the store, not here. Time enters only as the ``now`` argument.

The run is built in three layers, one idea each: what it holds (:class:`RunFields
<watchdog.core.runs.fields.RunFields>`: every field and bound), how it counts (:class:`RunCounts
<watchdog.core.runs.counts.RunCounts>`: the fold of spans, heartbeats and announcements) and,
here, how it ends, what it reports (its views and signals) and how it is stored.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping
from enum import Enum
from operator import attrgetter
from types import MappingProxyType
from typing import Any

from watchdog.core.bounds import budget_limit, plain_number
from watchdog.core.runs.catalogue import RUN_SIGNALS, reader
from watchdog.core.runs.counts import RunCounts
from watchdog.core.runs.fields import (
    NS,
    RECENT_MODEL_CALLS,
    UNPRICED,
    ModelCall,
    RunFields,
)
from watchdog.core.runs.terminal import TerminalState, classify_end
from watchdog.core.runs.view import OpenedRun, RunView
from watchdog.core.spans.record import BUDGET_KEYS, KeySource, SpanRecord

# the states a run of the model endpoint's is taken back from when its agent goes on with it
RESUMABLE = frozenset({TerminalState.ABANDONED, TerminalState.COMPLETED})


class RunState(RunCounts):
    """Signals of one run. Mutated only through :meth:`apply`, :meth:`heartbeat` and :meth:`end`."""

    __slots__ = ()

    # -- ending ---------------------------------------------------------------------------------

    @property
    def has_final_answer(self) -> bool:
        return self.explicit_final or self._llm_final

    def force(self, state: TerminalState, reason: str) -> None:
        """Record that the watchdog stopped this run; the state applies when it ends."""
        if self.forced_state is None:
            self.forced_state = state
            self.forced_reason = reason

    def at_budget(self, defaults: Mapping[str, float] | None = None) -> bool:
        """Whether the run has spent its budget: the one announced, over the rule pack's
        ``defaults`` for its agent when given."""
        budget = {**defaults, **self.budget} if defaults else self.budget
        max_calls = budget.get("max_tool_calls")
        max_iterations = budget.get("max_iterations")
        used = self.budget_used
        max_cost = budget.get("max_cost_usd")
        return (max_calls is not None
                and max(self.tool_calls, used.get("max_tool_calls", 0)) >= max_calls) or (
            max_iterations is not None
            and max(self.iterations, used.get("max_iterations", 0)) >= max_iterations
        ) or (max_cost is not None and self.cost_usd >= max_cost)

    def end(self, now: float, abandoned: bool = False) -> None:
        if self.ended:
            return
        self.ended = True
        self.ended_at = now
        if abandoned:
            self.terminal_state, self.terminal_reason = TerminalState.ABANDONED, "run_end_timeout"
            if self.forced_state is not None:
                self.terminal_state, self.terminal_reason = self.forced_state, self.forced_reason
            return
        self.terminal_state, self.terminal_reason = classify_end(
            forced=self.forced_state,
            forced_reason=self.forced_reason,
            end_error_type=self.end_error_type,
            has_final_answer=self.has_final_answer,
            at_budget=self.at_budget(),
            limit_stop=self.limit_stop,
        )

    def ended_at_budget(self, defaults: Mapping[str, float]) -> bool:
        """A run that ended on its own (an answer, or none) having spent the rule pack's budget
        for its agent (``defaults``: :meth:`end` reads only the budget the agent announced) is
        ``tool_limit_reached`` as one that spent an announced budget is. True if its state
        changed."""
        if self.terminal_state not in (TerminalState.COMPLETED, TerminalState.NO_RESPONSE) \
                or not self.at_budget(defaults):
            return False
        self.terminal_state, self.terminal_reason = TerminalState.TOOL_LIMIT_REACHED, "budget"
        return True

    def resume(self, now: float, going_on: bool = False) -> tuple[str, str] | None:
        """The run ended and its agent acts again now (its next request to the model endpoint):
        taken as ``abandoned`` (silent for ``run_end_timeout``, or evicted: it was slow, not
        gone), or ``completed`` at an answer of the model the agent did not end with (an
        answer to a request aside, a summary of the work so far, after which it goes on with
        its tools: ``going_on``, its request answers calls the run handed over). It is
        active again, to count on and end as a live run does. Returns the state it had ended
        in and the reason; None (nothing changed) for a run that did not end so."""
        state = self.terminal_state
        if not self.ended or state is None or state not in (
                RESUMABLE if going_on else (TerminalState.ABANDONED,)):
            return None
        reason = self.terminal_reason or (
            "run_end_timeout" if state is TerminalState.ABANDONED else "answer")
        self.ended, self.ended_at = False, None
        self.terminal_state = self.terminal_reason = self.counted_state = None
        self.last_seen = now
        return state.value, reason

    def uncapped(self, cap: str) -> bool:
        """The loop cap ``cap`` its agent span told was this ended run's limit, and the loop-end
        tool that came after says the loop did not end at it: the run is classified again,
        if that cap gave its state. True if its state changed."""
        capped = classify_end(
            forced=self.forced_state, forced_reason=self.forced_reason,
            end_error_type=self.end_error_type, has_final_answer=self.has_final_answer,
            at_budget=self.at_budget(), limit_stop=cap)
        if not self.ended or self.limit_stop is not None \
                or (self.terminal_state, self.terminal_reason) != capped:
            return False
        self.terminal_state, self.terminal_reason = classify_end(
            forced=self.forced_state, forced_reason=self.forced_reason,
            end_error_type=self.end_error_type, has_final_answer=self.has_final_answer,
            at_budget=self.at_budget(), limit_stop=None)
        return (self.terminal_state, self.terminal_reason) != capped

    def late_answer(self, ends: bool = False) -> bool:
        """A span that arrived after the run ended (two export paths, or an exporter's
        batches, need not arrive in the order the spans ended) brought what the run's end
        lacked: its answer (a run that ended ``no_response``), or the limit that stopped it (a
        framework's limit on a child span, the run's budget reached): the run is classified
        again. So is a run taken as ``abandoned`` after ``run_end_timeout`` of silence whose
        ending span (``ends``) comes after all: it was slow, not gone. An answer or a limit is
        never taken back. True if its state changed."""
        state = self.terminal_state
        answered = state is TerminalState.NO_RESPONSE and self.has_final_answer
        limited = state in (TerminalState.NO_RESPONSE, TerminalState.COMPLETED) and (
            self.limit_stop is not None or self.at_budget())
        returned = ends and state is TerminalState.ABANDONED \
            and self.terminal_reason == "run_end_timeout"
        if not (answered or limited or returned):
            return False
        new = classify_end(
            forced=self.forced_state, forced_reason=self.forced_reason,
            end_error_type=self.end_error_type, has_final_answer=self.has_final_answer,
            at_budget=self.at_budget(), limit_stop=self.limit_stop)
        if new == (state, self.terminal_reason):
            return False
        self.terminal_state, self.terminal_reason = new
        return True

    def refold(self, records: list[SpanRecord], now: float) -> None:
        """Fold the run's span-derived signals again from ``records`` (after a nested agent's
        spans moved out into a child run); identity, timing and what the watchdog or the client
        said about the run are kept."""
        fresh = RunState(self.key, self.key_source, self.trace_id, self.first_seen)
        for record in records:
            fresh.apply(record, now)
        for name in _SPAN_SLOTS:
            setattr(self, name, getattr(fresh, name))

    # -- views ----------------------------------------------------------------------------------

    @property
    def agent_name(self) -> str:
        return self.agent or self.service or "unknown"

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def elapsed_seconds(self, now: float) -> float:
        if not self.first_start_ns:
            return 0.0
        end = self.ended_at if self.ended_at is not None else now
        return max(end - self.clock_skew() - self.first_start_ns / NS, 0.0)

    def idle_seconds(self, now: float) -> float:
        return 0.0 if self.ended else max(now - self.last_progress, 0.0)

    def calls_in_flight(self) -> int:
        """Calls started and not ended, as the client last said (none once the run ended)."""
        return 0 if self.ended else self.in_flight

    def in_flight_seconds(self, now: float) -> float:
        """How long the oldest call in flight has run."""
        if self.in_flight_since is None or self.ended:
            return 0.0
        return max(now - self.in_flight_since, 0.0)

    def budget_view(self, defaults: dict[str, float] | None = None, now: float = 0.0
                    ) -> dict[str, float]:
        """``max_*`` and ``remaining_*`` for each known budget (announced beats default)."""
        budget = dict(defaults or {})
        budget.update(self.budget)
        if not budget:
            return {}  # most runs: no budget announced or configured (rules read this per batch)
        used = {"max_tool_calls": self.tool_calls, "max_iterations": self.iterations,
                "max_seconds": self.elapsed_seconds(now), "max_tokens": self.total_tokens,
                "max_cost_usd": self.cost_usd}
        for key, reported in self.budget_used.items():  # the agent's own count, if larger
            if key in used:
                used[key] = max(used[key], reported)
        view: dict[str, float] = {}
        for key in BUDGET_KEYS:
            if key in budget:
                limit = budget[key]
                view[key] = plain_number(limit)
                view["remaining_" + key[4:]] = plain_number(max(limit - used[key], 0))
        return view

    def signals(self, now: float, default_budget: dict[str, float] | None = None) -> dict[str, Any]:
        """The ``run`` object of DESIGN §4 (also the API's ``signals``): every signal of the
        catalogue (:data:`~watchdog.core.runs.catalogue.RUN_SIGNALS`), as CEL takes it."""
        return _read_signals(self, now, default_budget)

    def view(self, now: float, default_budget: dict[str, float] | None = None) -> RunView:
        """The run as it is at ``now``, frozen (``default_budget``: the rule pack's, under the
        run's own): what the core hands out (:mod:`watchdog.core.runs.view`)."""
        signals = self.signals(now, default_budget)
        signals["tools"] = MappingProxyType(signals["tools"])
        budget = signals["budget"]
        signals["budget"] = MappingProxyType(budget) if budget else _NO_BUDGET
        return RunView(self.key, self.trace_id, signals["agent"], self.session, self.parent_run,
                       self.spans, self.activity_seq, MappingProxyType(signals),
                       self.terminal_state, self.terminal_reason, self.final_output,
                       self.first_seen, self.first_start_ns / NS if self.first_start_ns else None,
                       self.last_seen, self.last_progress, self.ended_at, now, self.framed,
                       self.root_span)

    def opened(self, now: float, default_budget: dict[str, float] | None = None) -> OpenedRun:
        """What the model endpoint reads of the run at a request, at ``now`` (as :meth:`view`
        would hold it)."""
        signals = _read_opened(self, now, default_budget)
        budget = signals["budget"]
        return OpenedRun(self.key, signals["agent"], self.framed, self.terminal_state,
                         bool(signals["ended"]), int(signals["iterations"]),
                         int(signals["tool_calls"]), float(signals["cost_usd"]),
                         int(signals["total_tokens"]),
                         MappingProxyType(budget) if budget else _NO_BUDGET)

    def copy(self) -> RunState:
        """An independent copy, to fold records into that the run has not seen (what a request
        would make of it). Its mutable fields are dicts and lists of immutable values, copied
        (anything else mutable is copied deep)."""
        return _copy_run(self)

    # -- persistence ----------------------------------------------------------------------------

    def to_row(self) -> dict[str, Any]:
        """The snapshot the state flush encodes at once (:mod:`watchdog.shell.state.store`'s
        ``encode_row``): :meth:`to_dict`'s, its rings and integer keys left as they are, which
        either JSON encoder writes as :meth:`to_dict`'s lists and string keys (the same text).
        It shares the run's own containers: encode it, never keep it."""
        # Every dirty run is snapshotted on each state flush: one C-level read of all the slots,
        # then the few values JSON cannot take as they are.
        data = dict(zip(RunFields.__slots__, _read_slots(self), strict=True))
        for name in _ENUM_SLOTS:
            value = data[name]
            if value is not None:
                data[name] = value.value
        # (the last one only: what pairs an in-order twin after a restart; all of them made
        # every snapshot of a busy run ~0.5 KiB longer to encode and store)
        data["_models"] = data["_models"][-1:]
        data["_answered"] = []  # (see RECENT_ANSWERED)
        return data

    def to_dict(self) -> dict[str, Any]:
        """:meth:`to_row` as plain JSON values of its own (lists, string keys): a snapshot to
        keep (nothing in it is the run's: the run's later spans move none of it)."""
        data = self.to_row()
        for name, value in data.items():  # (its counters, tools and budgets: flat, copied)
            if type(value) is dict or type(value) is list:
                data[name] = value.copy()
        for name in _INT_KEYED_SLOTS:
            data[name] = {str(k): v for k, v in data[name].items()}
        data["_result_counts"] = {str(k): list(v) for k, v in data["_result_counts"].items()}
        if data["clock_lags"] is not None:
            data["clock_lags"] = list(data["clock_lags"])
        data["_models"] = [list(call) for call in data["_models"]]
        data["stop_answers"] = list(data["stop_answers"])  # (stored as a JSON list)
        for name in _TUPLE_LIST_SLOTS:  # stored as JSON lists, taken back as tuples
            data[name] = [list(item) for item in data[name]]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunState:
        run = cls(data["key"], KeySource(data["key_source"]), data["trace_id"], data["first_seen"])
        for name in RunFields.__slots__:
            if name not in data:
                continue
            value = data[name]
            if name in ("_call_counts", "_error_counts"):
                value = {int(k): v for k, v in value.items()}
            elif name == "clock_lags" and value is not None:  # stored as a JSON list
                value = [float(value[0]), float(value[1])]
            elif name == "stop_answers":  # stored as a JSON list
                value = tuple(str(item) for item in value)
            elif name == "_cap_request" and value is not None:  # stored as a JSON list
                value = (str(value[0]), str(value[1]))
            elif name == "_models":  # stored as JSON lists
                value = [_model_call(call) for call in value[-RECENT_MODEL_CALLS:]]
            elif name == "_result_counts":  # stored as JSON lists
                value = {int(k): (int(v[0]), int(v[1])) for k, v in value.items()}
            elif name in _TUPLE_LIST_SLOTS:
                value = [tuple(item) for item in value]
            elif name in _ENUM_SLOTS and name != "key_source" and value is not None:
                value = TerminalState(value)
            elif name == "key_source":
                value = KeySource(value)
            elif name == "budget":  # a build before bounds.budget_limit may have stored inf
                value = {k: limit for k, v in value.items()
                         if (limit := budget_limit(v)) is not None}
            setattr(run, name, value)
        if "_models" not in data and data.get("_last_model"):  # an older build's: the last one
            run._models = [_model_call(data["_last_model"])]
        if "agent_spans" not in data:  # an older build's: whether one came is not known, and
            run.agent_spans = True  # its answer does not end it as an endpoint run's (expire)
        return run


_NO_BUDGET: Mapping[str, float] = MappingProxyType({})


def _model_call(value: list[Any]) -> ModelCall:
    more = [str(item) for item in value[4:6]] + ["", ""]  # (older builds: none)
    cost = float(value[6]) if len(value) > 6 else UNPRICED
    times = [int(item) for item in value[7:9]] + [0, 0]  # (older builds: none, not known)
    model = str(value[9]) if len(value) > 9 else ""
    return (str(value[0]), str(value[1]), int(value[2]), int(value[3]), more[0], more[1],
            cost if math.isfinite(cost) else UNPRICED, times[0], times[1], model)


_read_slots = attrgetter(*RunFields.__slots__)
_read_signals = reader()
_read_opened = reader(signal for signal in RUN_SIGNALS if signal.name in OpenedRun._fields)
# What RunState.apply derives from spans alone, and refold therefore recomputes.
_SPAN_SLOTS = (
    "_answered", "_asked", "_call_counts", "_cap_request", "_cycle_runs", "_delta_messages",
    "_error_counts",
    "_failures",
    "_final_end_ns",
    "_input_start_ns",
    "_llm_end_ns", "_llm_final", "_llm_messages", "_llm_parent",
    "_llm_said_ns",
    "_llm_said_start_ns", "_llm_start_ns", "_loop_cap", "_loop_capped", "_loop_ended", "_models",
    "_named", "_recent_calls", "_reported_calls", "_result_counts", "_step_stop_messages",
    "_step_stop_ns",
    "_tool_end_ns", "_tool_error_streak", "_tool_ids", "_tool_spans", "_tool_start_ns",
    "_agent_step_ns",
    "agent", "agent_spans",
    "budget_used",
    "consecutive_errors", "cycle_repeats",
    "end_error_type", "errors", "explicit_final", "final_output", "finish_reason",
    "cost_usd", "first_start_ns", "input_hash", "input_tokens", "iterations", "last_error",
    "limit_stop", "messages", "output_tokens", "unpriced_calls",
    "repeated_error", "repeated_tool_call", "repeated_tool_result", "spans", "tool_calls",
    "tools",
)
_ENUM_SLOTS = ("counted_state", "forced_state", "key_source", "terminal_state")
_INT_KEYED_SLOTS = ("_call_counts", "_error_counts")  # JSON keys are strings (_result_counts too)
# tuples of tuples (JSON: lists of lists)
_TUPLE_LIST_SLOTS = ("_answered", "_asked", "_named", "_tool_ids", "_tool_spans", "_failures")
# values a run's copy shares with it (nothing in them changes)
_IMMUTABLE = (int, float, str, tuple, frozenset, Enum, type(None))
_SHARED = frozenset({int, float, str, tuple, bool, type(None)})  # (the most, told at once)


def _copied(value: Any) -> Any:
    """A slot's value as a run's copy holds it (one that is not of a :data:`_SHARED` type)."""
    kind = type(value)
    if kind is dict or kind is list:
        return value.copy()
    return value if isinstance(value, _IMMUTABLE) else copy.deepcopy(value)


def _copier() -> Callable[[RunState], RunState]:
    """:meth:`RunState.copy` as one generated function, a statement a slot (a loop over the
    slots' names with ``setattr`` cost ~3 times as much: a copy a proof of the model endpoint)."""
    lines = ["def copy_run(run):", "    clone = new(cls)"]
    for name in RunFields.__slots__:
        lines.append(f"    value = run.{name}")
        lines.append(f"    clone.{name} = value if type(value) in shared else copied(value)")
    lines.append("    return clone")
    namespace: dict[str, Any] = {"new": RunState.__new__, "cls": RunState, "shared": _SHARED,
                                 "copied": _copied, "type": type}
    exec("\n".join(lines), namespace)  # (the names are the class's own slots)
    function: Callable[[RunState], RunState] = namespace["copy_run"]
    return function


_copy_run = _copier()
