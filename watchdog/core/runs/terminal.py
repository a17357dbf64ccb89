"""How a run ended: the terminal states of DESIGN §7 and the rule that picks one.

A run that a framework or the watchdog stopped at its budget is ``tool_limit_reached`` even when
it produced an answer (``has_final_answer`` says so); only a run that finished on its own with an
answer is ``completed``. That distinction is what lets a follow-up tell "done" from "cut off".
"""

from __future__ import annotations

from enum import StrEnum


class TerminalState(StrEnum):
    COMPLETED = "completed"
    NO_RESPONSE = "no_response"
    ERROR = "error"
    TOOL_LIMIT_REACHED = "tool_limit_reached"
    TIME_LIMIT_REACHED = "time_limit_reached"
    IDLE_TIMEOUT = "idle_timeout"
    LOOP_DETECTED = "loop_detected"
    INTERVENTION_REQUIRED = "intervention_required"
    ABORTED = "aborted"
    ABANDONED = "abandoned"


def short_type(error_type: str) -> str:
    """``pydantic_ai.exceptions.UsageLimitExceeded`` -> ``UsageLimitExceeded``."""
    return error_type.rsplit(".", 1)[-1]


def classify_end(
    *,
    forced: TerminalState | None,
    forced_reason: str | None,
    end_error_type: str | None,
    has_final_answer: bool,
    at_budget: bool,
    limit_stop: str | None = None,
) -> tuple[TerminalState, str | None]:
    """The terminal state and reason of a run whose root span has arrived.

    ``limit_stop`` is the framework limit any span of the run reported (a limit exception, a
    status description, a finish reason, a state field: :mod:`watchdog.core.spans.frameworks`).
    """
    if forced is not None:
        return forced, forced_reason
    if limit_stop is not None:
        return TerminalState.TOOL_LIMIT_REACHED, limit_stop
    if end_error_type is not None:
        return TerminalState.ERROR, short_type(end_error_type)
    if at_budget:
        return TerminalState.TOOL_LIMIT_REACHED, "budget"
    if has_final_answer:
        return TerminalState.COMPLETED, None
    return TerminalState.NO_RESPONSE, None
