"""The fleet: tools failing for every run the watchdog sees (``fleet.failing_tools`` in rules).

Theory of operation
-------------------
Each step hands the :class:`Fleet` the tool calls it counted (:meth:`Fleet.observe`: tool, run,
error type or None for a success, ``now``). Per tool it keeps, within the last ``window``
seconds, which runs saw it fail with which error type (each run's latest failure and how many),
and forgets all of that at the tool's next success: a failure only counts while no success of
the tool came after it.

A tool is *failing* once ``threshold`` runs or more saw it fail with one error type within the
window. The outage keeps its ``since`` (that error type's first failure in the window at the
moment the threshold was reached) until it ends: at the tool's next success, or once the window
holds no failure of the tool at all. :meth:`Fleet.advance` prunes the window at ``now`` and
returns the tools whose outage began or ended since it was last asked (:meth:`Fleet.changed`
asks without pruning), so the step evaluates the runs that used them; nothing here reads a
clock.

Telling many runs is spread over the timer's turns: the runs an outage's beginning or end
concerns wait in :class:`ToTell`, and each turn evaluates at most :data:`FLEET_SLICE` of them
(an outage of a tool ten thousand runs use costs 0.1-0.4 s a turn, not 3-4 s in one).

Everything is bounded: tools (least recently failed forgotten first), error types per tool,
runs per error type and runs waiting to be told.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import islice
from typing import Any

FLEET_WINDOW = 300.0  # seconds (config ``fleet_window``)
FAILING_RUNS = 3  # runs that saw one tool fail with one error type within the window
MAX_TOOLS = 256  # tools with failures kept; the least recently failed is forgotten first
MAX_ERROR_TYPES = 8  # error types kept per tool
MAX_RUNS = 1024  # runs kept per tool and error type (the oldest failure forgotten first)
ToolResult = tuple[str, str, str | None]  # (tool, run key, error type; None: it succeeded)
FLEET_SLICE = 500  # runs told of an outage per turn of the timer (the rest at the next turns)
MAX_TO_TELL = 100_000  # runs waiting to be told (the longest waiting dropped first)


@dataclass(slots=True)
class _Tool:
    # error type -> run -> (its first and latest failure, its failures), oldest latest first
    failures: dict[str, OrderedDict[str, tuple[float, float, int]]] = field(default_factory=dict)
    outage: tuple[float, str] | None = None  # (since, error type) while failing


def timestamp(seconds: float) -> str:
    """``seconds`` since the epoch as RFC 3339 in UTC, to the second (what rules read)."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Fleet:
    """The tools failing across runs; one instance, fed by the core's step."""

    def __init__(self, window: float = FLEET_WINDOW, threshold: int = FAILING_RUNS) -> None:
        if not math.isfinite(window) or window <= 0:
            raise ValueError(f"fleet window must be positive seconds, not {window!r}")
        if threshold < 1:
            raise ValueError(f"fleet threshold must be at least 1, not {threshold!r}")
        self.window = window
        self.threshold = threshold
        self._tools: OrderedDict[str, _Tool] = OrderedDict()
        self._changed: set[str] = set()  # tools whose outage began or ended, not yet told
        self._activation: dict[str, Any] | None = None

    def observe(self, results: list[ToolResult], now: float) -> None:
        """Take one step's tool calls, in the order they were folded in."""
        tools = self._tools
        for tool, run, error_type in results:
            state = tools.get(tool)
            if error_type is None:
                if state is not None:  # a success: earlier failures no longer count
                    del tools[tool]
                    self._activation = None
                    if state.outage is not None:
                        self._changed.add(tool)
                continue
            if state is None:
                state = tools[tool] = _Tool()
                while len(tools) > MAX_TOOLS:
                    gone, dropped = tools.popitem(last=False)
                    if dropped.outage is not None:
                        self._changed.add(gone)
            else:
                tools.move_to_end(tool)
            runs = state.failures.get(error_type)
            if runs is None:
                if len(state.failures) >= MAX_ERROR_TYPES:
                    continue  # the tool's first error types already tell the story
                runs = state.failures[error_type] = OrderedDict()
            first, _, count = runs.pop(run, (now, now, 0))
            runs[run] = (first, now, count + 1)
            horizon = now - self.window
            while len(runs) > MAX_RUNS or next(iter(runs.values()))[1] < horizon:
                runs.popitem(last=False)
            self._activation = None
            if state.outage is None and len(runs) >= self.threshold:
                state.outage = (self._first(runs, now), error_type)
                self._changed.add(tool)

    def _first(self, runs: OrderedDict[str, tuple[float, float, int]], now: float) -> float:
        """When the failures of one error type still in the window began."""
        return max(min((first for first, _, _ in runs.values()), default=now),
                   now - self.window)

    def advance(self, now: float) -> set[str]:
        """Prune the window at ``now``; the tools whose outage began or ended since the last
        call (to evaluate the runs that used them)."""
        horizon = now - self.window
        for tool in list(self._tools):
            state = self._tools[tool]
            for error_type in list(state.failures):
                runs = state.failures[error_type]
                while runs and next(iter(runs.values()))[1] < horizon:
                    runs.popitem(last=False)
                    self._activation = None
                if not runs:
                    del state.failures[error_type]
            if not state.failures:
                del self._tools[tool]
                self._activation = None
                if state.outage is not None:
                    self._changed.add(tool)
        changed, self._changed = self._changed, set()
        return changed

    def changed(self) -> set[str]:
        """The tools whose outage began or ended since the last call (of this or
        :meth:`advance`), without pruning the window (the ingest path's cheap question)."""
        changed, self._changed = self._changed, set()
        return changed

    def failing(self) -> dict[str, dict[str, Any]]:
        """``fleet.failing_tools``: tool -> {runs, errors, since, error_type} for the tools
        failing now (``runs``/``errors``: runs that saw it fail and their failures, within the
        window, of any error type; ``since``: RFC 3339)."""
        failing: dict[str, dict[str, Any]] = {}
        for tool, state in sorted(self._tools.items()):  # (in name order: CEL keeps it)
            if state.outage is None:
                continue
            since, error_type = state.outage
            runs: set[str] = set()
            errors = 0
            for table in state.failures.values():
                runs.update(table)
                errors += sum(count for _, _, count in table.values())
            failing[tool] = {"runs": len(runs), "errors": errors, "since": timestamp(since),
                             "error_type": error_type}
        return failing

    def activation(self) -> dict[str, Any]:
        """The CEL ``fleet`` variable (rebuilt only after a change)."""
        if self._activation is None:
            self._activation = {"failing_tools": self.failing()}
        return self._activation

    def is_failing(self, tool: str) -> bool:
        state = self._tools.get(tool)
        return state is not None and state.outage is not None


class ToTell:
    """Runs to evaluate because a tool they used began or stopped failing for the fleet: each
    once, in the order they came, :data:`FLEET_SLICE` at a time."""

    def __init__(self, limit: int = MAX_TO_TELL) -> None:
        self._keys: OrderedDict[str, None] = OrderedDict()
        self.limit = limit

    def add(self, keys: Iterable[str]) -> None:
        waiting = self._keys
        for key in keys:
            waiting[key] = None  # (one already waiting keeps its place)
        while len(waiting) > self.limit:
            waiting.popitem(last=False)

    def take(self, count: int = FLEET_SLICE) -> list[str]:
        """The next ``count`` runs (or fewer), no longer waiting."""
        keys = list(islice(self._keys, count))
        for key in keys:
            del self._keys[key]
        return keys

    def __len__(self) -> int:
        return len(self._keys)
