"""Read queries for the API: runs and their activity, from memory first, then the store.

The store reads through its own connection (WAL: readers never wait for the writer), so a query
never waits for a flush. Nothing here changes state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from watchdog.clock import Clock
from watchdog.errors import NotFound
from watchdog.runs.activity import ActivityEntry
from watchdog.runs.run import RunState
from watchdog.runs.tracker import RunTracker
from watchdog.runs.view import run_detail, run_summary
from watchdog.store import Store

log = logging.getLogger("watchdog")

MAX_LIST_LIMIT = 1000


class RunQueries:
    def __init__(self, tracker: RunTracker, store: Store, clock: Clock,
                 default_budget: Callable[[RunState], dict[str, float] | None],
                 unsaved: Callable[[str], list[ActivityEntry]],
                 on_failed_run: Callable[[str, str], None], activity_log_size: int) -> None:
        self.tracker = tracker
        self.store = store
        self.clock = clock
        self.default_budget = default_budget
        self._unsaved = unsaved
        self._on_failed_run = on_failed_run
        self.activity_log_size = activity_log_size

    def find_run(self, key: str) -> RunState:
        run = self.tracker.get(key)
        if run is None:
            data = self.store.get_run(key)
            if data is None:
                raise NotFound(f"no run {key!r}")
            run = self.from_store(data)
            if run is None:
                raise NotFound(f"run {key!r} is stored but cannot be read (see the log)")
        return run

    def from_store(self, data: dict[str, Any]) -> RunState | None:
        """A stored run; a row from an older build, or one damaged on disk, is None (and
        counted), never a failed request."""
        try:
            return RunState.from_dict(data)
        except Exception:
            self._on_failed_run("restore", str(data.get("key")))
            return None

    def run_detail(self, key: str) -> dict[str, Any]:
        run = self.find_run(key)
        now = self.clock.now()
        detail = run_detail(run, now, self.default_budget(run))
        detail["children"] = [run_summary(child, now) for child in self.child_runs(key)]
        return detail

    def child_runs(self, key: str) -> list[RunState]:
        """The runs of nested agents below ``key`` (sub-agents, agents as tools, handoffs)."""
        children = {child.key: child for child in self.tracker.children(key)}
        for data in self.store.child_runs(key, MAX_LIST_LIMIT):
            if data["key"] not in children and (stored := self.from_store(data)):
                children[data["key"]] = stored
        return sorted(children.values(), key=lambda run: (run.first_start_ns, run.key))

    def list_runs(self, state: str | None = None, agent: str | None = None,
                  limit: int = 100) -> list[dict[str, Any]]:
        """Active runs come from memory; ended ones from memory then the store."""
        now = self.clock.now()
        limit = max(1, min(limit, MAX_LIST_LIMIT))
        runs: dict[str, RunState] = {}
        if state in (None, "active"):
            for run in reversed(list(self.tracker.active())):
                if agent is None or run.agent_name == agent:
                    runs[run.key] = run
        if state in (None, "ended"):
            for run in reversed(list(self.tracker.ended())):
                if agent is None or run.agent_name == agent:
                    runs.setdefault(run.key, run)
            if len(runs) < limit:
                for data in self.store.list_runs(True, agent, limit):
                    if data["key"] not in runs and (stored := self.from_store(data)):
                        runs[data["key"]] = stored
        summaries = []
        for run in list(runs.values())[:limit]:
            try:
                summaries.append(run_summary(run, now))
            except Exception:  # one damaged run must not take the listing down with it
                self._on_failed_run("read", run.key)
        return summaries

    def activity(self, key: str) -> list[ActivityEntry]:
        """The run's activity log: what the store has, plus what is on its way there."""
        entries = {entry.seq: entry for entry in self.store.activity(key)}
        for entry in self._unsaved(key):
            entries[entry.seq] = entry
        ordered = [entries[seq] for seq in sorted(entries)]
        return ordered[-self.activity_log_size:]
