"""The run signals (DESIGN §4): one catalogue, from which every list of them is made.

A :class:`Signal` names a ``run.*`` field a rule may read, its type, how it is read from a
:class:`~watchdog.core.runs.run.RunState` and what it means. From :data:`RUN_SIGNALS` come:

* :meth:`RunState.signals` — the ``run`` object rules are evaluated against and the API shows
  (:func:`reader`);
* the change detection of :mod:`watchdog.core.runs.changes` (each signal's ``moves_with``);
* the CEL declaration of ``run`` (:mod:`watchdog.core.rules.signals`, then
:mod:`watchdog.core.rules.expr`);
* the fields the fast path compares without CEL (:mod:`watchdog.core.rules.fast`): the ints, doubles
  and bools;
* the signal table of ``docs/rules.md`` (:func:`markdown_table`; a test holds the two equal).

A new signal is one entry here, plus the RunState attribute or method its ``read`` names.

``read`` and ``moves_with`` are Python expressions, compiled once when a module that uses them
is imported (one generated function reads every signal; no per-signal call). They are code of
this module, never text from a rule. ``read`` sees ``run`` (the RunState), ``now`` (seconds) and
``budget`` (the rule pack's default budget for the run's agent, or None) and gives the value as
CEL takes it. ``moves_with`` lists expressions of ``run`` alone whose values are immutable: when
none of them changed across a batch of spans, neither did the signal (an over-approximation is
safe: a rule is evaluated more often than needed, never less). A ``timed`` signal changes with
time alone: the rules reading it run on the timer, and also when its ``moves_with`` moved
(``idle_seconds``, set back to 0 by progress).

Types are Python types: ``int`` is CEL ``int``, ``float`` is ``double``, a nested ``dict`` is a
struct, :class:`MapOf` an open map, and :class:`Maybe` a field that may be absent (a budget that is
not known) — rules test those with ``has(run.budget.max_tool_calls)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeAlias


@dataclass(frozen=True, slots=True)
class Maybe:
    """A field that is absent when unknown (``has()`` tells)."""

    type: type


@dataclass(frozen=True, slots=True)
class MapOf:
    """An open map (arbitrary keys), e.g. ``run.tools``: tool name -> count; a value may be a
    struct (``fleet.failing_tools``: tool name -> {runs, errors, since, error_type})."""

    key: type
    value: type | dict[str, type]


@dataclass(frozen=True, slots=True)
class ListOf:
    """A list, e.g. ``session.agent_cycle``: agent names."""

    item: type


FieldType: TypeAlias = "type | Maybe | MapOf | ListOf | dict[str, FieldType]"
Schema: TypeAlias = "dict[str, FieldType]"


@dataclass(frozen=True, slots=True)
class Signal:
    """One ``run.<name>`` signal; see the module's docstring for ``read`` and ``moves_with``."""

    name: str
    type: FieldType
    read: str  # Python expression over run, now, budget: the value as CEL takes it
    doc: str  # its meaning, a cell of the docs' table (consecutive equal ones share a row)
    moves_with: tuple[str, ...] = ()  # () and not timed: constant for the run's life
    timed: bool = False  # changes with time alone
    # more expressions that move it while the run has a budget (its remaining_* follow usage)
    with_budget: tuple[str, ...] = ()


def _plain(name: str, kind: type, doc: str) -> Signal:
    """A signal read straight from the RunState attribute (or property) of the same name."""
    return Signal(name, kind, f"run.{name}", doc, (f"run.{name}",))


# Counts are CEL ints (``remaining_tool_calls <= 3``); only seconds and dollars are doubles.
BUDGET_SCHEMA: Schema = {
    "max_tool_calls": Maybe(int),
    "remaining_tool_calls": Maybe(int),
    "max_iterations": Maybe(int),
    "remaining_iterations": Maybe(int),
    "max_seconds": Maybe(float),
    "remaining_seconds": Maybe(float),
    "max_tokens": Maybe(int),
    "remaining_tokens": Maybe(int),
    "max_cost_usd": Maybe(float),
    "remaining_cost_usd": Maybe(float),
}
BUDGET_TIMED = frozenset({"remaining_seconds"})  # the budget's fields that move with time

_IDENTITY = "identity"
_TOOLS = "tool executions, and per tool name (64 names per run, then `_other`)"
_USAGE = "usage, from LLM spans only"
_ARGUMENTS = ("; calls whose arguments were not recorded (content capture off, redacted values, "
              "or a tracer that records none: [frameworks.md](frameworks.md)) are not counted")
_ERRORS = ("failed tool/LLM spans, and tool results that say the call failed (the agent span "
           "repeats its children's error and is not counted again)")
_IN_FLIGHT = ("calls started but not ended, as the client SDK (or the model endpoint) last said, "
              "and how long the oldest of them has run; 0 once the run ended")

RUN_SIGNALS: tuple[Signal, ...] = (
    Signal("id", str, "run.key", _IDENTITY),
    Signal("agent", str, "run.agent_name", _IDENTITY, ("run.agent_name",)),
    Signal("session", str, "run.session or ''", _IDENTITY, ("run.session",)),
    _plain("trace_id", str, _IDENTITY),
    _plain("iterations", int, "LLM calls so far"),
    _plain("tool_calls", int, _TOOLS),
    Signal("tools", MapOf(str, int), "dict(run.tools)", _TOOLS, ("run.tool_calls",)),
    _plain("messages", int, "largest conversation length seen"),
    _plain("input_tokens", int, _USAGE),
    _plain("output_tokens", int, _USAGE),
    Signal("total_tokens", int, "run.total_tokens", _USAGE,
           ("run.input_tokens", "run.output_tokens")),
    Signal("cost_usd", float, "float(run.cost_usd)",
           "USD so far: each model call priced from its model (response, else request) and "
           "token counts (input, output, cache read/write) at the call's time, or the cost its "
           "span reports; covers the priced calls only", ("run.cost_usd",)),
    Signal("unpriced_calls", int, "max(run.unpriced_calls, 0)",
           "model calls with no known price (no model named, a model the price data does not "
           "know, or no usage reported): never counted as free", ("run.unpriced_calls",)),
    _plain("errors", int, _ERRORS),
    _plain("consecutive_errors", int, _ERRORS),
    Signal("last_error", str, "run.last_error or ''", _ERRORS, ("run.last_error",)),
    _plain("repeated_error", int, "count of the most frequent error signature: type + message "
                                  "with ids, numbers and paths masked"),
    _plain("repeated_tool_call", int, "count of the most frequent identical call: tool + "
                                      "canonical (sorted-key) JSON arguments" + _ARGUMENTS),
    _plain("repeated_tool_result", int, "count of the most frequent identical result of one "
                                        "tool whose arguments differed from the previous such "
                                        "call" + _ARGUMENTS),
    _plain("cycle_repeats", int, "repetitions of a repeating tail cycle of calls (A→B→A→B…, "
                                 "length 1–4); 0 when there is none" + _ARGUMENTS),
    Signal("elapsed_seconds", float, "float(run.elapsed_seconds(now))",
           "since the run's first span started", timed=True),
    # timed, and set back to 0 by progress: a rule reading it is evaluated then too, so what
    # held during the idle stretch lapses at once (a `for` starts over, an each_time re-arms),
    # not at the timer's next turn (a rule test has none between its steps)
    Signal("idle_seconds", float, "float(run.idle_seconds(now))",
           "since the last sign of progress (a new span, or a heartbeat whose message count "
           "grew)", ("run.last_progress",), timed=True),
    Signal("in_flight", int, "run.calls_in_flight()", _IN_FLIGHT, ("run.in_flight", "run.ended")),
    Signal("in_flight_seconds", float, "float(run.in_flight_seconds(now))", _IN_FLIGHT,
           timed=True),
    Signal("budget", BUDGET_SCHEMA, "run.budget_view(budget, now)",
           "`max_*` / `remaining_*` for tool calls, iterations, seconds, tokens, cost (USD) — "
           "only for the "
           "budgets that are known: announced by the agent (`watchdog.budget.*` span or resource "
           "attributes) or set by the rule pack's `budgets`",
           ("tuple(run.budget.items())",),
           with_budget=("run.tool_calls", "run.iterations", "run.input_tokens",
                        "run.output_tokens", "run.cost_usd")),
    _plain("has_final_answer", bool, "whether the run has given a final answer so far"),
    Signal("finish_reason", str, "run.finish_reason or ''",
           "the latest finish reason a model call (or the agent span) gave, as its framework "
           "or API names it: `stop`, `tool_calls`, `length` (OpenAI), `end_turn`, `max_tokens` "
           "(Anthropic), `STOP`, `MAX_TOKENS` (Gemini), `FinishReason.STOP` (Semantic "
           "Kernel)…; `''` when none did", ("run.finish_reason",)),
    _plain("ended", bool, "whether the run has ended (see [Terminal states](#terminal-states))"),
)

# What the generated code may call besides the RunState's own attributes.
NAMESPACE: dict[str, Any] = {"__builtins__": {}, "float": float, "dict": dict, "tuple": tuple,
                             "max": max}

SignalReader = Callable[[Any, float, "dict[str, float] | None"], dict[str, Any]]


def compiled(code: str) -> Any:
    """``code`` (a lambda built from catalogue entries) as a function."""
    return eval(code, dict(NAMESPACE))


def reader(signals: Iterable[Signal] = RUN_SIGNALS) -> SignalReader:
    """One function ``(run, now, budget) -> {name: value}`` reading every signal: the dict
    literal :meth:`RunState.signals` would be written as by hand."""
    items = ", ".join(f"{signal.name!r}: {signal.read}" for signal in signals)
    function: SignalReader = compiled(f"lambda run, now, budget: {{{items}}}")
    return function


def markdown_table(signals: Iterable[Signal] = RUN_SIGNALS) -> str:
    """The signal table of ``docs/rules.md``: one row per run of consecutive signals with the
    same ``doc``; a struct shows as ``run.<name>.*``."""
    rows: list[tuple[list[str], str]] = []
    for signal in signals:
        name = f"`run.{signal.name}{'.*' if isinstance(signal.type, dict) else ''}`"
        if rows and rows[-1][1] == signal.doc:
            rows[-1][0].append(name)
        else:
            rows.append(([name], signal.doc))
    lines = ["| signal | meaning |", "|---|---|"]
    lines += [f"| {', '.join(names)} | {doc} |" for names, doc in rows]
    return "\n".join(lines) + "\n"
