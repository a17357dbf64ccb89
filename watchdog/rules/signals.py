"""The rule vocabulary (DESIGN §4): the declared schema of the CEL variables run and session.

This is the one place that says which fields a rule may use and of what type. The CEL checker is
built from it (:mod:`watchdog.rules.expr`), so a rule that names an unknown field or compares a
string with a number is refused at load; the activation a rule is evaluated against is built by
:func:`run_activation` / :func:`session_activation` from :meth:`RunState.signals` and the session
mapping, and a test holds the two sides together.

Types are Python types: ``int`` is CEL ``int``, ``float`` is ``double``, a nested ``dict`` is a
struct, :class:`MapOf` an open map, and :class:`Maybe` a field that may be absent (a budget that is
not known) — rules test those with ``has(run.budget.max_tool_calls)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, TypeAlias


@dataclass(frozen=True, slots=True)
class Maybe:
    """A field that is absent when unknown (``has()`` tells)."""

    type: type


@dataclass(frozen=True, slots=True)
class MapOf:
    """An open map (arbitrary keys), e.g. ``run.tools``: tool name -> count."""

    key: type
    value: type


FieldType: TypeAlias = "type | Maybe | MapOf | dict[str, FieldType]"
Schema: TypeAlias = "dict[str, FieldType]"

# Counts are CEL ints (``remaining_tool_calls <= 3``); only seconds are doubles.
BUDGET_SCHEMA: Schema = {
    "max_tool_calls": Maybe(int),
    "remaining_tool_calls": Maybe(int),
    "max_iterations": Maybe(int),
    "remaining_iterations": Maybe(int),
    "max_seconds": Maybe(float),
    "remaining_seconds": Maybe(float),
    "max_tokens": Maybe(int),
    "remaining_tokens": Maybe(int),
}
BUDGET_INT_KEYS = frozenset(k for k, t in BUDGET_SCHEMA.items()
                            if isinstance(t, Maybe) and t.type is int)

RUN_SCHEMA: Schema = {
    "id": str,
    "agent": str,
    "session": str,
    "trace_id": str,
    "iterations": int,
    "tool_calls": int,
    "tools": MapOf(str, int),
    "messages": int,
    "input_tokens": int,
    "output_tokens": int,
    "total_tokens": int,
    "errors": int,
    "consecutive_errors": int,
    "last_error": str,
    "repeated_error": int,
    "repeated_tool_call": int,
    "repeated_tool_result": int,
    "cycle_repeats": int,
    "elapsed_seconds": float,
    "idle_seconds": float,
    "in_flight": int,
    "in_flight_seconds": float,
    "budget": BUDGET_SCHEMA,
    "has_final_answer": bool,
    "finish_reason": str,
    "ended": bool,
}

SESSION_SCHEMA: Schema = {
    "id": str,
    "runs": int,
    "checkpoints": int,
    "zero_progress": bool,
    "zero_progress_streak": int,
    # checkpoints made during the run being evaluated: lets a rule stop the runs that reported
    # no progress without stopping a new run (new user direction) before it has checkpointed
    "run_checkpoints": int,
}

SCHEMAS: dict[str, Schema] = {"run": RUN_SCHEMA, "session": SESSION_SCHEMA}

# Signals that change while nothing happens: a rule reading one of these (or waiting out a
# ``for``) must be re-evaluated on a timer, every other rule only when a run changes.
TIME_DEPENDENT: dict[str, frozenset[str]] = {
    "run": frozenset({"elapsed_seconds", "idle_seconds", "in_flight_seconds"}),
    "run.budget": frozenset({"remaining_seconds"}),
}

DEFAULT_SESSION: dict[str, Any] = {
    "id": "", "runs": 0, "checkpoints": 0, "zero_progress": False, "zero_progress_streak": 0,
    "run_checkpoints": 0,
}


def run_activation(signals: dict[str, Any]) -> dict[str, Any]:
    """``RunState.signals()`` as the CEL ``run`` variable: budget counts as ints, seconds as
    floats (CEL does not mix int and double in arithmetic). Mutates and returns ``signals``."""
    budget = signals["budget"]
    if budget:
        signals["budget"] = {k: (int(v) if k in BUDGET_INT_KEYS else float(v))
                             for k, v in budget.items()}
    signals["elapsed_seconds"] = float(signals["elapsed_seconds"])
    signals["idle_seconds"] = float(signals["idle_seconds"])
    signals["in_flight_seconds"] = float(signals["in_flight_seconds"])
    return signals


def session_activation(session: Mapping[str, Any] | None) -> dict[str, Any]:
    """The CEL ``session`` variable: the shell's session mapping over the defaults (a run without
    a session has id "" and zeros). Keys outside :data:`SESSION_SCHEMA` are dropped."""
    values = dict(DEFAULT_SESSION)
    if session:
        for key, value in session.items():
            cast = _SESSION_CASTS.get(key)
            if cast is None or value is None:
                continue
            if type(value) is cast:  # the session book's own values: nothing to convert
                values[key] = value
                continue
            with suppress(TypeError, ValueError):  # a bad value reads as the default
                values[key] = cast(value)
    return values


_SESSION_CASTS: dict[str, Any] = {"id": str, "runs": int, "checkpoints": int,
                                  "zero_progress": bool, "zero_progress_streak": int,
                                  "run_checkpoints": int}


def field_names(path: str) -> list[str]:
    """The fields of ``run``, ``session`` or ``run.budget`` (for "did you mean" hints)."""
    schema: FieldType = dict(SCHEMAS)
    for part in path.split("."):
        if not isinstance(schema, dict) or part not in schema:
            return []
        schema = schema[part]
    return sorted(schema) if isinstance(schema, dict) else []
