"""What the rule engine decides: the hand-off from ``rules`` to ``directives``.

A :class:`Decision` says that a rule fired for a run; the directive layer turns it into a
stored, numbered, delivered :class:`~watchdog.core.directives.model.Directive`.

:class:`Action`, :class:`Severity`, the grace keys and the budget message's mark are the
directive vocabulary's source (the model endpoint's steering reads them from here), and so are
the budgets a rule may count down (``COUNTDOWN_BUDGETS``). The
agent-side client (``agent_watchdog_client.directive``) cannot import this package, so it keeps a
copy (``ACTIONS``, ``SEVERITIES``, ``GRACE_KEYS``, ``BUDGET_MESSAGE_PREFIX``,
``COUNTDOWN_BUDGETS``) that
``tests/test_directive_vocabulary.py`` compares with these.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from watchdog.core.runs.steps import StepLog
from watchdog.core.runs.terminal import TerminalState
from watchdog.core.runs.view import RunView


class Action(StrEnum):
    NOTIFY = "notify"  # recorded and delivered, the agent need not change course
    WIND_DOWN = "wind_down"  # finish up: report progress and stop soon
    ABORT = "abort"  # stop now


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


# A wind_down's grace as its directive announces it: the rule's limits, and the run's tool-call
# count at which a tool-call grace ends (``Decision.grace``)
GRACE_TOOL_CALLS, GRACE_SECONDS, GRACE_ENDS_AT = "tool_calls", "seconds", "ends_at_tool_calls"
GRACE_KEYS = (GRACE_TOOL_CALLS, GRACE_SECONDS, GRACE_ENDS_AT)
BUDGET_MESSAGE_PREFIX = "[budget"  # how a directive that tells the run's budget begins
# What a rule may declare it counts down (``countdown:`` in a pack; the directive's
# ``countdown``): a budget the model endpoint and the client SDK write the true count of, from
# the run's counts at each request, once its rule has fired. A wind_down so declared is the
# countdown (its message is replaced by that note), an abort so declared the budget's end
# (the run's final turn asks for the report).
COUNTDOWN_TOOL_CALLS, COUNTDOWN_COST, COUNTDOWN_TOKENS, COUNTDOWN_ITERATIONS = (
    "tool_calls", "cost_usd", "tokens", "iterations")
COUNTDOWN_BUDGETS = (COUNTDOWN_TOOL_CALLS, COUNTDOWN_COST, COUNTDOWN_TOKENS,
                     COUNTDOWN_ITERATIONS)
# a notify with this message withdraws its rule's earlier note (the rule's condition no longer
# holds: a tool outage is over); a rule's own message is never empty
WITHDRAWN_MESSAGE = ""


def counts_down(decision: Decision) -> bool:
    """A wind_down of a rule that declares itself a budget's countdown (``countdown:``; the
    default pack's ``budget-countdown``, ``budget-last-call``...): the model endpoint writes
    the countdown from the run's counts, so once the countdown has started such a directive
    changes nothing of what a request gets (what starts it is the caller's to tell)."""
    return decision.action is Action.WIND_DOWN and decision.countdown is not None


def withdraws(action: str, message: str) -> bool:
    """A directive that withdraws its rule's note rather than giving one."""
    return action == Action.NOTIFY.value and message == WITHDRAWN_MESSAGE


@dataclass(frozen=True, slots=True)
class Decision:
    run_key: str
    rule: str
    action: Action
    severity: Severity
    message: str
    terminal_state: TerminalState | None
    dedup_key: str  # rule name, or rule name + message hash with repeat: on_change
    escalation: bool = False  # an abort because a wind_down's grace ran out
    # a wind_down's grace as announced to the agent: the rule's limits ({"tool_calls": 2,
    # "seconds": 60}) and, with a tool-call limit, "ends_at_tool_calls" — the run's tool-call
    # count at which the grace is used up (absolute, so a client that re-reads the directive
    # after a reconnect or a restart gets the same cap)
    grace: Mapping[str, float] | None = field(default=None, compare=False)
    # the budget its rule declares it counts down (one of COUNTDOWN_BUDGETS; None: none)
    countdown: str | None = field(default=None, compare=False)


def forced_state(action: Action | str, terminal_state: TerminalState | str | None
                 ) -> TerminalState | None:
    """The terminal state a decision imposes on its run when the run ends: the rule's
    ``terminal_state``; an ``abort`` without one stops the run as ``aborted``; a notify or
    wind_down without one imposes nothing (the run may still finish well)."""
    if terminal_state is not None:
        return TerminalState(terminal_state)
    return TerminalState.ABORTED if Action(action) is Action.ABORT else None


@dataclass(frozen=True, slots=True)
class Decided:
    """A decision with what its directive needs, taken in the step that decided it."""

    decision: Decision
    run: RunView  # the run as the step left it (its budget view includes rule-pack defaults)
    # the run's last steps (redacted), oldest first: as report lines, or as the steps to make
    # them from when a report prompt is read (the core's)
    steps: tuple[str, ...] | StepLog
    now: float
    earlier_steps: int = 0  # the run's steps before those

    @property
    def budget(self) -> Mapping[str, float]:
        return self.run.budget
