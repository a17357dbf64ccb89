"""Which signals of a run changed, so rules that read none of them need not be evaluated.

The shell takes a :func:`snapshot` of each run an export request is about to touch and, after
the spans are folded in, asks :func:`changed_signals` what moved. Most spans move only counters
no rule reads (a new, distinct tool call changes ``tool_calls`` but not ``repeated_tool_call``),
so most spans cost no CEL evaluation at all. Time signals change with time alone, and the rules
reading them run on the timer; idle is also moved by progress (the run's ``last_progress``),
which sets it back to 0.

What is compared comes from the signal catalogue: the snapshot is every distinct expression of
the signals' ``moves_with`` and ``with_budget`` (:mod:`watchdog.core.runs.catalogue`), read by one
generated function.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from watchdog.core.runs.catalogue import RUN_SIGNALS, Signal, compiled
from watchdog.core.runs.run import RunState

Snapshot = tuple[Any, ...]
_NOTHING: frozenset[str] = frozenset()
MAX_KINDS_OF_CHANGE = 4096  # distinct changes whose signal sets are kept; then start over


class ChangeDetector:
    """Snapshots and their comparison for a set of signals."""

    __slots__ = ("_differ", "_sets", "_signals", "snapshot")

    def __init__(self, signals: Iterable[Signal]) -> None:
        signals = tuple(signals)
        watched = list(dict.fromkeys(expression for signal in signals
                                     for expression in (*signal.moves_with, *signal.with_budget)))
        # one tuple of every watched value (cheap: attribute reads in one generated function)
        self.snapshot: Callable[[RunState], Snapshot] = compiled(
            f"lambda run: ({', '.join(watched)},)")
        # the watched values that differ, as a bit mask (bit i: watched[i]), in one generated
        # function reading the run as snapshot does
        bits = " | ".join(f"(0 if before[{index}] == ({expression}) else {1 << index})"
                          for index, expression in enumerate(watched))
        self._differ: Callable[[Snapshot, RunState], int] = compiled(
            f"lambda before, run: {bits or '0'}")
        # per watched value, the signals it moves always / while the run has a budget
        self._signals = tuple(
            (tuple(s.name for s in signals if expression in s.moves_with),
             tuple(s.name for s in signals if expression in s.with_budget))
            for expression in watched)
        # (mask, has budget) -> the signals that moved: one set per kind of change, shared
        self._sets: dict[tuple[int, bool], frozenset[str]] = {}

    def changed(self, before: Snapshot, run: RunState, has_budget: bool) -> frozenset[str]:
        """The ``run.*`` signals that differ between ``before`` and ``run`` now. ``has_budget``:
        whether the run has any budget (announced or from a rule pack) whose remaining_* follow
        its usage. Equal changes give the same set object (the rule engine keys on it)."""
        mask = self._differ(before, run)
        if not mask:
            return _NOTHING
        key = (mask, has_budget)
        found = self._sets.get(key)
        if found is None:
            changed: set[str] = set()
            for index, (moves, budgeted) in enumerate(self._signals):
                if mask >> index & 1:
                    changed.update(moves)
                    if has_budget:
                        changed.update(budgeted)
            if len(self._sets) >= MAX_KINDS_OF_CHANGE:
                self._sets.clear()
            found = self._sets[key] = frozenset(changed)
        return found


_RUN = ChangeDetector(RUN_SIGNALS)
snapshot = _RUN.snapshot  # the values changed_signals compares
changed_signals = _RUN.changed
