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
from watchdog.core.shown import shown
from watchdog.shell.clock import Clock
from watchdog.shell.errors import NotFound
from watchdog.shell.state.lanes import Lane
from watchdog.shell.state.store import Store

log = logging.getLogger("watchdog")

MAX_LIST_LIMIT = 1000  # runs per page of the listing
Place = tuple[bool, float, str]  # a run's place in the listing: (active, its time, its key)


class LiveRuns(Protocol):
    """The runs in memory, as views taken at ``now`` (:class:`watchdog.core.step.Core`)."""

    def view(self, key: str, now: float) -> RunView | None: ...
    def newest_keys(self, active: bool, agent: str | None, limit: int) -> list[str]: ...
    def page_keys(self, active: bool, agent: str | None, before: tuple[float, str] | None,
                  limit: int, session: str | None = None) -> list[tuple[float, str]]: ...
    def holds(self, key: str) -> bool: ...
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
                raise NotFound(f"no run {shown(key)}")
            run = self.from_store(data, self.clock.now())
            if run is None:
                raise NotFound(f"run {shown(key)} is stored but cannot be read (see the log)")
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

    async def list_runs(self, state: str | None, agent: str | None, limit: int,
                        after: Place | None = None, session: str | None = None
                        ) -> tuple[list[dict[str, Any]], Place | None]:
        """One page of the run listing (``GET /v1/runs``), by key set: at most ``limit`` run
        summaries after ``after`` (the place of the last run of the page before; None: the
        first page) in the listing's order (:data:`watchdog.core.reads.PAGE_ORDER`: the active
        runs, from memory, most recently started first; then the ended ones, from memory and
        the store, most recently seen first), and the place of the page's last run when there
        may be more (else None). A place is ``(active, time, key)``: runs that come, change or
        end between two pages never shift the next page (no run is listed twice in one state,
        none skipped that stayed as it was). ``agent``, ``session``: only the runs of that
        agent, of that session."""
        limit = max(1, min(limit, MAX_LIST_LIMIT))
        groups = [True, False] if state is None else [state == "active"]
        if after is not None:  # from the cursor's group on
            groups = [active for active in groups if active <= after[0]]
        found: list[tuple[Place, dict[str, Any] | None]] = []
        for active in groups:
            want = limit + 1 - len(found)  # one more than the page: is there a next one?
            if want <= 0:
                break
            before = (after[1], after[2]) if after is not None and after[0] == active else None
            places: list[tuple[float, str, dict[str, Any] | None]] = [
                (place, key, None) for place, key in
                self.runs.page_keys(active, agent, before, want, session)]
            if not active:  # the store keeps the ended runs memory no longer holds
                stored = await self._lane.run(self.store.list_runs, True, agent, before, want,
                                              session)
                places.extend(row for row in stored if not self.runs.holds(row[1]))
                places.sort(key=lambda item: (item[0], item[1]), reverse=True)
            found.extend(((active, place, key), data) for place, key, data in places[:want])
        more = len(found) > limit
        found = found[:limit]
        now = self.clock.now()
        summaries = []
        for (_active, _place, key), data in found:
            try:
                view = self.runs.view(key, now) if data is None else self.from_store(data, now)
                if view is not None:  # (None: it left memory meanwhile, or cannot be read)
                    summaries.append(run_summary(view, self.trace_url))
            except Exception:  # one damaged run must not take the listing down with it
                self._on_failed_run("read", key)
        return summaries, (found[-1][0] if more else None)

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
