"""The rule vocabulary (DESIGN §4): the declared schema of the CEL variables run and session.

This is the one place that says which fields a rule may use and of what type. ``run`` is the
signal catalogue (:data:`~watchdog.core.runs.catalogue.RUN_SIGNALS`); ``session`` is declared here.
The CEL checker is built from :data:`SCHEMAS` (:mod:`watchdog.core.rules.expr`), so a rule that
names an unknown field or compares a string with a number is refused at load; the activation a rule
is evaluated against is built by :func:`run_activation` / :func:`session_activation` from
:meth:`RunState.signals` (read by the same catalogue) and the session mapping, and a test holds
the two sides together.

Types are Python types: ``int`` is CEL ``int``, ``float`` is ``double``, a nested ``dict`` is a
struct, :class:`MapOf` an open map, and :class:`Maybe` a field that may be absent (a budget that is
not known) — rules test those with ``has(run.budget.max_tool_calls)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import suppress
from typing import Any

from watchdog.core.runs.catalogue import (
    BUDGET_SCHEMA,
    BUDGET_TIMED,
    RUN_SIGNALS,
    ListOf,
    MapOf,
    Maybe,
    Schema,
    Signal,
)

BUDGET_INT_KEYS = frozenset(k for k, t in BUDGET_SCHEMA.items()
                            if isinstance(t, Maybe) and t.type is int)


def run_schema(signals: Iterable[Signal] = RUN_SIGNALS) -> Schema:
    """The declared fields of ``run``: each signal's name and type."""
    return {signal.name: signal.type for signal in signals}


def time_dependent(signals: Iterable[Signal] = RUN_SIGNALS) -> dict[str, frozenset[str]]:
    """The signals that change while nothing happens, by struct (see :data:`TIME_DEPENDENT`)."""
    return {"run": frozenset(signal.name for signal in signals if signal.timed),
            "run.budget": BUDGET_TIMED}


RUN_SCHEMA: Schema = run_schema()

SESSION_SCHEMA: Schema = {
    "id": str,
    "runs": int,
    "checkpoints": int,
    "zero_progress": bool,
    "zero_progress_streak": int,
    # checkpoints made during the run being evaluated: lets a rule stop the runs that reported
    # no progress without stopping a new run (new user direction) before it has checkpointed
    "run_checkpoints": int,
    # loops across agents (watchdog.core.cycles): the repeating sequence of agents over the
    # session's runs (or a trace's child runs), how many times it repeated back to back, and
    # whether the run being evaluated is the one that can stop it (the cycling runs' parent,
    # else the latest of them still running)
    "agent_cycle": ListOf(str),
    "agent_cycle_repeats": int,
    "cycle_orchestrator": bool,
}

# What a watchdog sees across its runs (watchdog.core.fleet): the tools failing for many runs.
FLEET_SCHEMA: Schema = {
    "failing_tools": MapOf(str, {"runs": int, "errors": int, "since": str, "error_type": str}),
}
NO_FLEET: dict[str, Any] = {"failing_tools": {}}

SCHEMAS: dict[str, Schema] = {"run": RUN_SCHEMA, "session": SESSION_SCHEMA,
                              "fleet": FLEET_SCHEMA}

# Signals that change while nothing happens: a rule reading one of these (or waiting out a
# ``for``) must be re-evaluated on a timer, every other rule only when a run changes.
TIME_DEPENDENT: dict[str, frozenset[str]] = time_dependent()

def _names(value: object = ()) -> list[str]:
    """A list of strings (``session.agent_cycle``) from a list or tuple; TypeError otherwise."""
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"expected a list, not {type(value).__name__}")
    return [str(item) for item in value]


# each converts a value to its type
_SESSION_CASTS: dict[str, Any] = {key: _names if isinstance(kind, ListOf) else kind
                                  for key, kind in SESSION_SCHEMA.items()}
DEFAULT_SESSION: dict[str, Any] = {key: cast() for key, cast in _SESSION_CASTS.items()}
_SESSION_LISTS = frozenset(key for key, kind in SESSION_SCHEMA.items() if isinstance(kind, ListOf))


def run_activation(signals: dict[str, Any]) -> dict[str, Any]:
    """``RunState.signals()`` as the CEL ``run`` variable: the budget's counts as ints, its
    seconds as floats (CEL does not mix int and double in arithmetic; the other signals are
    read as CEL takes them). Mutates and returns ``signals``."""
    budget = signals["budget"]
    if budget:
        signals["budget"] = {k: (int(v) if k in BUDGET_INT_KEYS else float(v))
                             for k, v in budget.items()}
    tools = signals["tools"]
    if len(tools) > 1:
        # the order CEL iterates a map in follows the order its keys were put in, and a run's
        # tools come in the order it first called them: put in name order, a text made of
        # them (tool-outage's note) is one for equal values
        signals["tools"] = dict(sorted(tools.items()))
    return signals


def session_activation(session: Mapping[str, Any] | None) -> dict[str, Any]:
    """The CEL ``session`` variable: the shell's session mapping over the defaults (a run without
    a session has id "" and zeros: :data:`DEFAULT_SESSION` itself, read only). Keys outside
    :data:`SESSION_SCHEMA` are dropped."""
    if not session:
        return DEFAULT_SESSION
    values = dict(DEFAULT_SESSION)
    if session:
        for key, value in session.items():
            cast = _SESSION_CASTS.get(key)
            if cast is None or value is None:
                continue
            if type(value) is cast or (type(value) is list and key in _SESSION_LISTS):
                # the session book's own values: nothing to convert
                values[key] = value
                continue
            with suppress(TypeError, ValueError):  # a bad value reads as the default
                values[key] = cast(value)
    return values


def field_names(path: str) -> list[str]:
    """The fields of ``run``, ``session``, ``run.budget`` or a map's struct values
    (``fleet.failing_tools[*]``), for "did you mean" hints."""
    schema: Any = dict(SCHEMAS)
    for part in path.split("."):
        name = part.removesuffix("[*]")
        if not isinstance(schema, dict) or name not in schema:
            return []
        schema = schema[name]
        if name != part:
            schema = schema.value if isinstance(schema, MapOf) else {}
    return sorted(schema) if isinstance(schema, dict) else []
