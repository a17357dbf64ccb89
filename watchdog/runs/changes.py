"""Which signals of a run changed, so rules that read none of them need not be evaluated.

The shell takes a :func:`snapshot` of each run an export request is about to touch and, after
the spans are folded in, asks :func:`changed_signals` what moved. Most spans move only counters
no rule reads (a new, distinct tool call changes ``tool_calls`` but not ``repeated_tool_call``),
so most spans cost no CEL evaluation at all. Time signals (elapsed, idle) are not compared: they
change with time alone, and the rules reading them run on the timer.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

from watchdog.runs.run import RunState

# Signals read straight from a RunState attribute of the same name.
_PLAIN = ("iterations", "tool_calls", "messages", "input_tokens", "output_tokens", "errors",
          "consecutive_errors", "last_error", "repeated_error", "repeated_tool_call",
          "repeated_tool_result", "cycle_repeats", "finish_reason", "has_final_answer", "ended",
          "agent_name", "session")
_RENAMED = {"agent_name": "agent"}  # attribute -> signal name
# Signals that move whenever another one does.
_FOLLOWERS = {"tool_calls": ("tools",), "input_tokens": ("total_tokens",),
              "output_tokens": ("total_tokens",)}
# A known budget's remaining_* move with these.
_BUDGET_USES = frozenset({"tool_calls", "iterations", "input_tokens", "output_tokens"})

# attribute -> the signals that change with it
_CHANGES = {name: (_RENAMED.get(name, name), *_FOLLOWERS.get(name, ())) for name in _PLAIN}
_NOTHING: frozenset[str] = frozenset()

Snapshot = tuple[Any, ...]
_read_plain = attrgetter(*_PLAIN)  # one C call for all of them


def snapshot(run: RunState) -> Snapshot:
    """The values :func:`changed_signals` compares (cheap: a tuple of attribute reads)."""
    return (*_read_plain(run), tuple(run.budget.items()))


def changed_signals(before: Snapshot, run: RunState, has_budget: bool) -> frozenset[str]:
    """The ``run.*`` signals that differ between ``before`` and ``run`` now. ``has_budget``:
    whether the run has any budget (announced or from a rule pack) whose remaining_* follow
    its usage."""
    after = snapshot(run)
    if before == after:
        return _NOTHING
    changed: set[str] = set()
    for name, old, new in zip(_PLAIN, before, after, strict=False):  # (budget items: below)
        if old != new:
            changed.update(_CHANGES[name])
    if before[-1] != after[-1] or (has_budget and not _BUDGET_USES.isdisjoint(changed)):
        changed.add("budget")
    return frozenset(changed)
