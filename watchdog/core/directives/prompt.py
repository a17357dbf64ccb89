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
from typing import TYPE_CHECKING, Any, NamedTuple

from watchdog.core.redact import redact
from watchdog.core.rules.decision import Action
from watchdog.core.runs.activity import ActivityEntry
from watchdog.core.runs.steps import StepLog, format_duration, format_number, format_usd
from watchdog.core.runs.view import RunView

if TYPE_CHECKING:
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


class PromptFacts(NamedTuple):
    """What a directive's report prompt is made of, frozen when it is decided: the run's
    counters then and its last steps. The text is made from them when the directive is read
    (:meth:`~watchdog.core.directives.model.Directive.report_prompt`), most directives being
    stored and never read; they are what the store keeps (:meth:`to_list`) instead of the
    text, so a directive read back makes the same prompt."""

    tool_calls: int
    iterations: int
    errors: int
    consecutive_errors: int
    total_tokens: int
    elapsed_seconds: float
    last_error: str | None
    steps: tuple[str, ...] | StepLog  # oldest first: lines, or the steps to make them from
    earlier_steps: int  # the run's steps before those
    log_available: bool  # False: the log could not be read (not: there were no steps)
    cost_usd: float = 0.0  # what the run's priced model calls cost

    def lines(self) -> Sequence[str]:
        steps = self.steps
        return steps.lines() if isinstance(steps, StepLog) else steps

    def to_list(self) -> list[Any]:
        """A JSON-ready form (the store's); :meth:`from_list` takes it back. The steps stay
        tuples (JSON arrays to both encoders): copying each into a list cost more than
        encoding it."""
        steps = self.steps
        log = (steps.entries, steps.start) if isinstance(steps, StepLog) else (steps, None)
        return [*self[:7], self.earlier_steps, self.log_available,
                isinstance(steps, StepLog), *log, self.cost_usd]

    @classmethod
    def from_list(cls, data: Sequence[Any]) -> PromptFacts:
        (tool_calls, iterations, errors, consecutive, tokens, elapsed, last_error, earlier,
         available, as_log, steps, start) = data[:12]
        cost = float(data[12]) if len(data) > 12 else 0.0  # rows stored before costs: none
        log: tuple[str, ...] | StepLog = StepLog(
            tuple(ActivityEntry(*entry) for entry in steps), start) if as_log else tuple(steps)
        return cls(tool_calls, iterations, errors, consecutive, tokens, elapsed, last_error,
                   log, earlier, available, cost)


def facts_of(run: RunView, steps: tuple[str, ...] | StepLog | Sequence[str] = (),
             earlier_steps: int = 0, log_available: bool = True) -> PromptFacts:
    """The counters of ``run``'s view with its last ``steps``."""
    return PromptFacts(run.tool_calls, run.iterations, run.errors, run.consecutive_errors,
                       run.total_tokens, run.elapsed_seconds, run.last_error,
                       steps if isinstance(steps, StepLog) else tuple(steps), earlier_steps,
                       log_available, run.cost_usd)


def decided_facts(decided: Decided) -> PromptFacts:
    """What the report prompt of ``decided``'s directive is made of: the run's view and its
    last steps (:data:`watchdog.core.step.RECENT_STEPS`) as the decision carries them. A run
    restored after a restart has its earlier steps in the store only: the prompt says the log
    is not available."""
    run, steps = decided.run, decided.steps
    kept = len(steps.entries) if isinstance(steps, StepLog) else len(steps)
    return facts_of(run, steps, decided.earlier_steps, bool(kept) or not run.activity_seq)


def report_prompt(run: RunView, activity_lines: Sequence[str], directive_message: str, *,
                  action: str = Action.WIND_DOWN.value, now: float | None = None,
                  budget: Mapping[str, float] | None = None, log_available: bool = True,
                  earlier_steps: int = 0) -> str:
    """The instruction for the model. ``action`` picks the wording (``abort`` says stop calling
    tools now); ``budget`` defaults to the view's; ``now`` (the time the prompt is written
    at) is not part of the text; ``log_available=False`` says the log could not be read
    (rather than that there were no steps); ``earlier_steps`` counts steps before the first of
    ``activity_lines`` (the caller rendered only the most recent ones)."""
    return prompt_text(facts_of(run, activity_lines, earlier_steps, log_available),
                       directive_message, action, run.budget if budget is None else budget)


def prompt_text(facts: PromptFacts, directive_message: str, action: str,
                budget: Mapping[str, float]) -> str:
    """The report prompt made of ``facts`` (see :func:`report_prompt`)."""
    intro = _ABORT if action == Action.ABORT.value else _WIND_DOWN
    parts = [_HEADER, intro.format(message=redact(directive_message.strip())), _SECTIONS,
             "Run counters: " + _counters(facts, budget)]
    lines, omitted = bounded_log(facts.lines())
    omitted += facts.earlier_steps
    if lines:
        heading = (f"Activity log of this run (the watchdog's record of your last {len(lines)} "
                   f"steps, oldest first; use it to recall what you did — do not repeat these "
                   f"calls):")
        if omitted:
            heading += f"\n(… {omitted} earlier steps omitted)"
        parts.append(heading + "\n" + "\n".join(lines))
    elif facts.log_available:
        parts.append("Activity log of this run: no steps recorded yet.")
    else:
        parts.append("Activity log of this run: not available right now; rely on your own "
                     "context.")
    return "\n\n".join(parts)


def bare_prompt(directive_message: str, action: str) -> str:
    """The prompt without the run's record: what a directive says when its facts cannot be
    made into text (a bug must not lose the request to report)."""
    intro = _ABORT if action == Action.ABORT.value else _WIND_DOWN
    return "\n\n".join((_HEADER, intro.format(message=redact(directive_message.strip())),
                        _SECTIONS, "Activity log of this run: not available right now; rely "
                        "on your own context."))


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


def _counters(facts: PromptFacts, budget: Mapping[str, float]) -> str:
    parts = [_used("tool calls", facts.tool_calls, budget, "tool_calls"),
             _used("model calls", facts.iterations, budget, "iterations"),
             f"errors {facts.errors}"]
    if facts.consecutive_errors > 1:
        parts[-1] += f" ({facts.consecutive_errors} in a row)"
    if facts.total_tokens:
        parts.append(_used("tokens", facts.total_tokens, budget, "tokens"))
    if facts.cost_usd or "max_cost_usd" in budget:
        cost = "cost USD " + format_usd(facts.cost_usd)
        if (limit := budget.get("max_cost_usd")) is not None:
            cost += (f" of {format_usd(limit)} "
                     f"({format_usd(max(limit - facts.cost_usd, 0.0))} left)")
        parts.append(cost)
    parts.append("elapsed " + format_duration(facts.elapsed_seconds))
    if facts.last_error:
        parts.append(f"last error: {redact(facts.last_error[:200])}")
    return "; ".join(parts) + "."


def _used(label: str, used: int, budget: Mapping[str, float], key: str) -> str:
    limit = budget.get("max_" + key)
    if limit is None:
        return f"{label} {used}"
    remaining = max(limit - used, 0)
    return f"{label} {used} of {format_number(limit)} ({format_number(remaining)} left)"

