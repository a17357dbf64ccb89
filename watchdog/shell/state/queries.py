"""Read queries for the API: runs and their activity, from memory first, then the store.

Memory (the runs' frozen views, taken from :class:`LiveRuns` on the event loop; what is on its
way to the store) is read on the event loop; the store is
read on the reader lane, a thread of its own, through the store's reader connection (WAL:
readers never wait for the writer). So a query never waits for a flush, and the event loop never
waits for the disk: ingest and syncs go on while a report's log is read. Nothing here changes
state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from watchdog.core.runs.activity import ActivityEntry
from watchdog.core.runs.view import RunView, run_detail, run_summary
from watchdog.shell.clock import Clock
from watchdog.shell.errors import NotFound
from watchdog.shell.state.lanes import Lane
from watchdog.shell.state.store import Store

log = logging.getLogger("watchdog")

MAX_LIST_LIMIT = 1000


class LiveRuns(Protocol):
    """The runs in memory, as views taken at ``now`` (:class:`watchdog.core.step.Core`)."""

    def view(self, key: str, now: float) -> RunView | None: ...
    def newest_keys(self, active: bool, agent: str | None, limit: int) -> list[str]: ...
    def child_views(self, key: str, now: float) -> list[RunView]: ...
    def stored_view(self, data: dict[str, Any], now: float) -> RunView: ...


class RunQueries:
    def __init__(self, runs: LiveRuns, store: Store, clock: Clock,
                 unsaved: Callable[[str], list[ActivityEntry]],
                 on_failed_run: Callable[[str, str], None], activity_log_size: int,
                 trace_url: str | None = None) -> None:
        self.runs = runs
        self.trace_url = trace_url  # the config's template of a run's link to its trace
        self.store = store
        self.clock = clock
        self._unsaved = unsaved
        self._on_failed_run = on_failed_run
        self.activity_log_size = activity_log_size
        self._lane = Lane("watchdog-reader")

    def close(self) -> None:
        self._lane.close()

    async def find_run(self, key: str) -> RunView:
        """The run ``key`` as it is now: from memory, else from the store."""
        run = self.runs.view(key, self.clock.now())
        if run is None:
            data = await self._lane.run(self.store.get_run, key)
            if data is None:
                raise NotFound(f"no run {key!r}")
            run = self.from_store(data, self.clock.now())
            if run is None:
                raise NotFound(f"run {key!r} is stored but cannot be read (see the log)")
        return run

    def from_store(self, data: dict[str, Any], now: float) -> RunView | None:
        """A stored run; a row from an older build, or one damaged on disk, is None (and
        counted), never a failed request."""
        try:
            return self.runs.stored_view(data, now)
        except Exception:
            self._on_failed_run("restore", str(data.get("key")))
            return None

    async def run_detail(self, key: str) -> dict[str, Any]:
        run = await self.find_run(key)
        children = await self.child_runs(key)
        detail = run_detail(run, self.trace_url)
        detail["children"] = [run_summary(child, self.trace_url) for child in children]
        return detail

    async def child_runs(self, key: str) -> list[RunView]:
        """The runs of nested agents below ``key`` (sub-agents, agents as tools, handoffs)."""
        stored = await self._lane.run(self.store.child_runs, key, MAX_LIST_LIMIT)
        now = self.clock.now()
        children = {child.key: child for child in self.runs.child_views(key, now)}
        for data in stored:
            if data["key"] not in children and (child := self.from_store(data, now)):
                children[data["key"]] = child
        return sorted(children.values(), key=_started)

    async def list_runs(self, state: str | None = None, agent: str | None = None,
                        limit: int = 100) -> list[dict[str, Any]]:
        """Active runs come from memory; ended ones from memory, then from the store when
        memory has fewer than ``limit``."""
        limit = max(1, min(limit, MAX_LIST_LIMIT))
        runs: dict[str, RunView | None] = {}  # None: in memory (its view is taken below)
        if state in (None, "active"):
            runs.update(dict.fromkeys(self.runs.newest_keys(True, agent, limit)))
        if state in (None, "ended"):
            for key in self.runs.newest_keys(False, agent, limit):
                runs.setdefault(key, None)
            if len(runs) < limit:
                stored = await self._lane.run(self.store.list_runs, True, agent, limit)
                now = self.clock.now()
                for data in stored:
                    if data["key"] not in runs and (restored := self.from_store(data, now)):
                        runs[data["key"]] = restored
        now = self.clock.now()
        summaries = []
        for key, run in list(runs.items())[:limit]:
            try:
                view = run if run is not None else self.runs.view(key, now)
                if view is not None:  # (None: it left memory while the store was read)
                    summaries.append(run_summary(view, self.trace_url))
            except Exception:  # one damaged run must not take the listing down with it
                self._on_failed_run("read", key)
        return summaries

    async def activity(self, key: str) -> list[ActivityEntry]:
        """The run's activity log: what the store has, plus what is on its way there (taken
        first: an entry written while the store is read is in one or the other)."""
        unsaved = self._unsaved(key)
        entries = {entry.seq: entry for entry in await self._lane.run(self.store.activity, key)}
        for entry in unsaved:
            entries[entry.seq] = entry
        ordered = [entries[seq] for seq in sorted(entries)]
        return ordered[-self.activity_log_size:]


def _started(run: RunView) -> tuple[float, str]:
    """Children in the order they started (a run no span has started yet first)."""
    return (run.started_at or 0.0, run.key)
