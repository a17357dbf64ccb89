"""The ``report_prompt`` of a wind_down or abort directive (DESIGN §6).

It is written for the model, as a system/developer instruction: the agent-side adapter injects
it as such (dynamic instructions, a system message), never as a user turn, and the text says so,
so a model that sees it quoted elsewhere still knows where it came from. It asks for a report a
follow-up run can continue from, and gives the model the watchdog's own record of the run — the
activity log and counters — because after a long loop the model's context may no longer hold
its early steps.

The log is bounded (the last ``PROMPT_MAX_LINES`` steps, at most ``PROMPT_MAX_LOG_CHARS``
characters) so the prompt never crowds out the model's context. Pure: no IO, no clock. The
lines come from :class:`watchdog.core.runs.report.RecentSteps`, which redacts them; the message and
the last error are redacted here; the rest is our own text (so the prompt is not redacted as a
whole: that took milliseconds on the directive path).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from watchdog.core.redact import redact
from watchdog.core.rules.decision import Action
from watchdog.core.runs.report import format_duration, format_number
from watchdog.core.runs.view import RunView

if TYPE_CHECKING:
    from watchdog.core.directives.model import Directive
    from watchdog.core.rules.decision import Decided

PROMPT_MAX_LINES = 20  # most recent activity lines in a prompt (watchdog.core.step.RECENT_STEPS)
PROMPT_MAX_LOG_CHARS = 8 * 1024  # and at most this much log text

_HEADER = ("[agent-watchdog: system instruction. This comes from the supervisor that monitors "
           "this agent run, not from the user.]")

_WIND_DOWN = (
    "You must wind down now: {message}\n"
    "Do not start new lines of work. Finish or abandon the step in progress (use at most the "
    "remaining budget), then give the structured progress report below as your final answer, "
    "so that a follow-up run can continue from where you stop without repeating your work."
)

_ABORT = (
    "This run is being stopped: {message}\n"
    "Stop calling tools now. Do not attempt any further step. Produce the structured progress "
    "report below as your final answer, immediately, so that a follow-up run can continue "
    "from where you stopped."
)

_SECTIONS = """\
Write the report in Markdown with exactly these sections:

## Task
What you were asked to do, in one or two sentences.

## Completed Work
What is done, in order.

## Key Findings
The concrete facts you established, exactly as observed: file paths, line numbers, values,
identifiers, URLs, commands and their results — so they can be reused without looking them up
again.

## Attempted but Inconclusive
What you tried that failed or gave no answer, and why, so it is not repeated blindly.

## Not Started / Remaining
What is left of the task.

## Suggested Next Steps
The concrete next actions for whoever continues, most important first.

Report only what you actually observed; mark anything uncertain as uncertain."""


def report_prompt(run: RunView, activity_lines: Sequence[str], directive_message: str, *,
                  action: str = Action.WIND_DOWN.value, now: float | None = None,
                  budget: Mapping[str, float] | None = None, log_available: bool = True,
                  earlier_steps: int = 0) -> str:
    """The instruction for the model. ``action`` picks the wording (``abort`` says stop calling
    tools now); ``budget`` defaults to the view's; ``now`` (the time the prompt is written
    at) defaults to the run's last activity; ``log_available=False`` says the log could not
    be read (rather than that there were no steps); ``earlier_steps`` counts steps before the
    first of ``activity_lines`` (the caller rendered only the most recent ones)."""
    when = run.last_seen if now is None else now
    intro = _ABORT if action == Action.ABORT.value else _WIND_DOWN
    parts = [_HEADER, intro.format(message=redact(directive_message.strip())), _SECTIONS,
             "Run counters: " + _counters(run, when, budget)]
    lines, omitted = bounded_log(activity_lines)
    omitted += earlier_steps
    if lines:
        heading = (f"Activity log of this run (the watchdog's record of your last {len(lines)} "
                   f"steps, oldest first; use it to recall what you did — do not repeat these "
                   f"calls):")
        if omitted:
            heading += f"\n(… {omitted} earlier steps omitted)"
        parts.append(heading + "\n" + "\n".join(lines))
    elif log_available:
        parts.append("Activity log of this run: no steps recorded yet.")
    else:
        parts.append("Activity log of this run: not available right now; rely on your own "
                     "context.")
    return "\n\n".join(parts)


def prompt_for(decided: Decided, directive: Directive) -> str:
    """The report prompt of ``directive`` from what its decision carries: the lines of the
    run's last steps (:data:`watchdog.core.step.RECENT_STEPS`) and its budget view. A run restored
    after a restart has its earlier steps in the store only: the prompt says the log is not
    available."""
    run, steps = decided.run, decided.steps
    return report_prompt(run, steps, directive.message, action=directive.action,
                         now=directive.created_at, budget=directive.budget,
                         log_available=bool(steps) or not run.activity_seq,
                         earlier_steps=decided.earlier_steps)


def bounded_log(lines: Sequence[str], max_lines: int = PROMPT_MAX_LINES,
                max_chars: int = PROMPT_MAX_LOG_CHARS) -> tuple[list[str], int]:
    """The most recent lines that fit both bounds, and how many older ones were left out."""
    kept: list[str] = []
    size = 0
    for line in reversed(lines[-max_lines:] if max_lines else []):
        if size + len(line) + 1 > max_chars:
            if not kept:  # one huge line: keep its head rather than nothing
                kept.append(line[: max_chars - 1] + "…")
            break
        kept.append(line)
        size += len(line) + 1
    kept.reverse()
    return kept, len(lines) - len(kept)


def _counters(run: RunView, now: float, budget: Mapping[str, float] | None) -> str:
    view = run.budget if budget is None else budget
    parts = [_used("tool calls", run.tool_calls, view, "tool_calls"),
             _used("model calls", run.iterations, view, "iterations"),
             f"errors {run.errors}"]
    if run.consecutive_errors > 1:
        parts[-1] += f" ({run.consecutive_errors} in a row)"
    if run.total_tokens:
        parts.append(_used("tokens", run.total_tokens, view, "tokens"))
    parts.append("elapsed " + format_duration(run.elapsed_seconds))
    if run.last_error:
        parts.append(f"last error: {redact(run.last_error[:200])}")
    return "; ".join(parts) + "."


def _used(label: str, used: int, budget: Mapping[str, float], key: str) -> str:
    limit = budget.get("max_" + key)
    if limit is None:
        return f"{label} {used}"
    remaining = max(limit - used, 0)
    return f"{label} {used} of {format_number(limit)} ({format_number(remaining)} left)"

