"""Directives as the agent sees them, and the per-run board that keeps the latest of each kind.

The listener thread posts every directive it receives to the run's :class:`DirectiveBoard`;
the agent's thread reads the board without waiting (``run.directive()``, ``budget_note()``,
the adapters' instructions). Directives arrive in ``seq`` order, but a reconnect may deliver
one twice: anything at or below the highest ``seq`` seen is ignored.

The vocabulary below (actions, severities, the grace's keys, the fields of :class:`Directive`)
is the sidecar's: its source is ``watchdog.core.rules.decision`` (``Action``, ``Severity``),
``watchdog.core.rules.engine.announced_grace`` and
``watchdog.core.directives.model.Directive.to_json``. This package installs into agent environments
without the server, so it cannot import them; it keeps this short copy instead, and the
repository's ``tests/test_directive_vocabulary.py`` compares the two, so a change on either side
fails until the other follows. (A copy checked by a test is leaner here than a generated module: it
is a dozen names that change rarely.)
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

NOTIFY, WIND_DOWN, ABORT = "notify", "wind_down", "abort"
ACTIONS = (NOTIFY, WIND_DOWN, ABORT)
INFO, WARNING, CRITICAL = "info", "warning", "critical"
SEVERITIES = (INFO, WARNING, CRITICAL)
# a wind_down's grace: the rule's limits, and the tool-call count at which it is used up
GRACE_TOOL_CALLS, GRACE_SECONDS, GRACE_ENDS_AT = "tool_calls", "seconds", "ends_at_tool_calls"
GRACE_KEYS = (GRACE_TOOL_CALLS, GRACE_SECONDS, GRACE_ENDS_AT)
BUDGET_MESSAGE_PREFIX = "[budget"  # (a sidecar without ``countdown`` on its directives)
# the budgets a rule may declare it counts down (a directive's ``countdown``)
COUNTDOWN_TOOL_CALLS = "tool_calls"
COUNTDOWN_BUDGETS = (COUNTDOWN_TOOL_CALLS, "cost_usd", "tokens", "iterations")
WITHDRAWN_MESSAGE = ""  # a notify's message that withdraws its rule's earlier note


@dataclass(frozen=True, slots=True)
class Directive:
    """One directive (DESIGN §6). ``raw`` is the JSON as received, for fields added later."""

    id: str
    run_id: str
    seq: int
    action: str  # one of ACTIONS
    rule: str
    severity: str  # one of SEVERITIES
    message: str
    terminal_state: str | None
    budget: Mapping[str, float]
    report_prompt: str | None
    created_at: str
    raw: Mapping[str, Any] = field(repr=False, compare=False)
    # a wind_down's grace: {"tool_calls": 2, "ends_at_tool_calls": 10, "seconds": 60}
    grace: Mapping[str, float] = field(default_factory=dict)
    # the budget its rule counts down (one of COUNTDOWN_BUDGETS; None: none, or a sidecar that
    # does not say: ``is_budget``)
    countdown: str | None = None

    @classmethod
    def from_json(cls, data: Any) -> Directive:
        """Raises ``ValueError`` for anything that is not a directive."""
        if not isinstance(data, dict):
            raise ValueError("a directive must be a JSON object")
        seq = data.get("seq")
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
            raise ValueError(f"directive seq={seq!r} is not a positive integer")
        budget = data.get("budget")
        grace = data.get("grace")
        return cls(
            id=str(data.get("id", "")),
            run_id=str(data.get("run_id", "")),
            seq=seq,
            action=str(data.get("action", NOTIFY)),
            rule=str(data.get("rule", "")),
            severity=str(data.get("severity", "")),
            message=str(data.get("message", "")),
            terminal_state=_optional_str(data.get("terminal_state")),
            budget={key: value for key, value in budget.items() if _is_number(value)}
            if isinstance(budget, dict) else {},
            report_prompt=_optional_str(data.get("report_prompt")),
            created_at=str(data.get("created_at", "")),
            raw=data,
            grace={key: value for key, value in grace.items() if _is_number(value)}
            if isinstance(grace, dict) else {},
            countdown=_optional_str(data.get("countdown")),
        )

    @property
    def is_abort(self) -> bool:
        return self.action == ABORT

    @property
    def is_wind_down(self) -> bool:
        return self.action == WIND_DOWN

    @property
    def is_budget(self) -> bool:
        """A budget's countdown (or its end, an abort): a directive whose rule declares
        ``countdown``. A sidecar that predates the field (no ``countdown`` key) is read as it
        meant it: a ``budget-*`` rule, or a message that starts with ``[budget``."""
        if "countdown" in self.raw:
            return self.countdown is not None
        return "budget" in self.rule or self.message.startswith(BUDGET_MESSAGE_PREFIX)

    @property
    def counts_tool_calls(self) -> bool:
        """The tool-call budget's countdown (a sidecar that predates the field: any budget
        directive, as it meant it)."""
        if "countdown" in self.raw:
            return self.countdown == COUNTDOWN_TOOL_CALLS
        return self.is_budget

    @property
    def withdraws(self) -> bool:
        """A notify with an empty message: its rule's earlier note no longer holds (a tool
        outage is over), and leaves the model's instructions."""
        return self.action == NOTIFY and self.message == WITHDRAWN_MESSAGE

    @property
    def grace_ends_at(self) -> int | None:
        """A wind_down's hard cap: the run's tool-call count at which its grace is used up
        (absolute, so re-reading the directive gives the same cap), or None."""
        if not self.is_wind_down:
            return None
        ends = self.grace.get(GRACE_ENDS_AT)
        return None if ends is None else int(ends)

    def instruction(self) -> str:
        """What to put in the model's instructions for this directive: the report prompt of a
        wind_down or abort (it quotes the message), else the message."""
        return self.report_prompt or self.message


def _is_number(value: object) -> bool:
    """A budget's or a grace's value: a finite number (JSON's 1e999 reads as infinity)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


def _optional_str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


class DirectiveBoard:
    """The latest directive of each kind for one run. Written by the listener thread, read by
    the agent's thread; the lock is held only to swap references."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.last_seq = 0
        self.latest: Directive | None = None
        self.latest_wind_down: Directive | None = None
        self.latest_budget: Directive | None = None  # of the tool-call budget's countdown
        self.latest_notify: Directive | None = None
        self.abort: Directive | None = None  # the first abort: a run is aborted only once
        self.grace: Directive | None = None  # the wind_down whose tool-call grace ends first
        self.received = 0
        self._changed = threading.Condition(self._lock)

    def post(self, directive: Directive) -> bool:
        """Record ``directive``; False if it was already seen (a redelivery)."""
        with self._lock:
            if directive.seq <= self.last_seq:
                return False
            self.last_seq = directive.seq
            self.latest = directive
            self.received += 1
            if directive.is_abort:
                if self.abort is None:
                    self.abort = directive
            elif directive.is_wind_down:
                self.latest_wind_down = directive
                ends = directive.grace_ends_at
                if ends is not None and (self.grace is None
                                         or ends < (self.grace.grace_ends_at or 0)):
                    self.grace = directive
            elif directive.withdraws:
                notify = self.latest_notify
                if notify is not None and notify.rule == directive.rule:
                    self.latest_notify = None  # its rule no longer holds (the outage is over)
            else:
                self.latest_notify = directive
            if directive.counts_tool_calls and not directive.withdraws:
                self.latest_budget = directive
            self._changed.notify_all()
        return True

    def wait_for(self, seq: int, timeout: float) -> bool:
        """Block until a directive with ``seq`` or later has arrived (for tests and tools
        that want to wait; agents never need to)."""
        with self._lock:
            return self._changed.wait_for(lambda: self.last_seq >= seq, timeout)
