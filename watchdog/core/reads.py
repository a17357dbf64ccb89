"""What the shell reads of the core between steps: the runs in memory as frozen views taken at
a ``now`` (the API's run detail, report and child runs), their keys, the run a trace named, and
what the live-runs gauges read. Never the live run itself: every read that hands a run out hands
a :class:`~watchdog.core.runs.view.RunView`.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import Any

from watchdog.core.rules.engine import RuleEngine
from watchdog.core.runs.run import RunState
from watchdog.core.runs.tracker import RunTracker
from watchdog.core.runs.view import RunView

# The run listing's order (``GET /v1/runs``, paged by key set): the active runs, most recently
# started first, then the ended ones, most recently seen (ended) first; ties by id, the greatest
# first. Active (True) or ended (False) -> the run's attribute that places it.
PAGE_ORDER = {True: "first_seen", False: "last_seen"}


class CoreReads:
    """The reads of :class:`~watchdog.core.step.Core`: its runs, as views."""

    tracker: RunTracker
    engine: RuleEngine | None

    def trace_run(self, trace_id: str) -> str | None:
        """The run the spans of this trace named, if any."""
        return self.tracker.trace_run(trace_id)

    def view(self, key: str, now: float) -> RunView | None:
        """The run ``key`` (active or recently ended) as it is at ``now``; None: not in memory."""
        run = self.tracker.get(key)
        return None if run is None else run.view(now, self._defaults(run))

    def live_runs(self) -> list[tuple[str, float]]:
        """What the live-runs gauges read of each active run at a scrape: its agent and its
        last progress (seconds since the epoch). Not whole views: at 10,000 active runs,
        taking them made a scrape ~100 ms instead of ~8, and keeping each run's last one cost
        ~2 KiB a run."""
        return [(run.agent_name, run.last_progress) for run in self.tracker.active()]

    def newest_keys(self, active: bool, agent: str | None, limit: int) -> list[str]:
        """At most ``limit`` of the active (or the ended) runs in memory, most recent first;
        ``agent``: only its runs."""
        runs = self.tracker.active() if active else self.tracker.ended()
        keys: list[str] = []
        for run in reversed(list(runs)):
            if len(keys) >= limit:
                break
            if agent is None or run.agent_name == agent:
                keys.append(run.key)
        return keys

    def holds(self, key: str) -> bool:
        """Whether the run ``key`` is in memory (active or recently ended)."""
        return self.tracker.get(key) is not None

    def page_keys(self, active: bool, agent: str | None, before: tuple[float, str] | None,
                  limit: int, session: str | None = None) -> list[tuple[float, str]]:
        """At most ``limit`` of the active (or the ended) runs in memory as ``(place, key)``,
        in the listing's order (:data:`PAGE_ORDER`): the greatest first, only those below
        ``before`` (a page's last); ``agent``, ``session``: only the runs of that agent, of
        that session."""
        runs = self.tracker.active() if active else self.tracker.ended()
        place = PAGE_ORDER[active]
        picked: Iterable[tuple[float, str]] = (
            (getattr(run, place), run.key) for run in runs
            if (agent is None or run.agent_name == agent)
            and (session is None or run.session == session))
        if before is not None:
            picked = (item for item in picked if item < before)
        return heapq.nlargest(limit, picked)

    def child_views(self, key: str, now: float) -> list[RunView]:
        """The runs in memory whose parent run is ``key``."""
        defaults = self._defaults
        return [run.view(now, defaults(run)) for run in self.tracker.children(key)]

    def stored_view(self, data: dict[str, Any], now: float) -> RunView:
        """A run as the store keeps it (a snapshot row), as a view; raises when the row cannot
        be read back."""
        run = RunState.from_dict(data)
        return run.view(now, self._defaults(run))

    def active_among(self, keys: Iterable[str]) -> list[str]:
        """Those of ``keys`` whose run is in memory and active, in their order."""
        get = self.tracker.get
        return [key for key in keys if (run := get(key)) is not None and not run.ended]

    def active_keys(self) -> list[str]:
        """The active runs' keys, least recently active first."""
        return [run.key for run in self.tracker.active()]

    def _defaults(self, run: RunState) -> dict[str, float] | None:
        """The rule pack's default budget for the run's agent (None: none)."""
        engine = self.engine  # (the engine's own: signals copy it)
        return (engine.agent_budget(run.agent_name) or None) if engine is not None else None

    def default_budget(self, run: RunState) -> dict[str, float] | None:
        if self.engine is None:
            return None
        budget = self.engine.default_budget(run.agent_name)
        return dict(budget) if budget else None
