"""What the control API asks of the watchdog: its commands through the narrow
:class:`Watchdog` protocol, and :class:`RunReads` for the runs' views and logs
(:class:`~watchdog.shell.service.WatchdogService` implements it).
"""

from __future__ import annotations

from typing import Any, Protocol

from watchdog.core.runs.activity import ActivityEntry
from watchdog.core.runs.view import RunView
from watchdog.core.sessions import Checkpoint
from watchdog.core.spans.decode import TraceRequest
from watchdog.shell.priority import Priority


class RunReads(Protocol):
    """What the API reads about runs (:class:`watchdog.shell.state.queries.RunQueries`): views and
    logs."""

    async def list_runs(self, state: str | None, agent: str | None, limit: int,
                        after: tuple[bool, float, str] | None = None,
                        session: str | None = None
                        ) -> tuple[list[dict[str, Any]], tuple[bool, float, str] | None]: ...
    async def run_detail(self, key: str) -> dict[str, Any]: ...
    async def find_run(self, key: str) -> RunView: ...
    async def activity(self, key: str) -> list[ActivityEntry]: ...
    async def child_runs(self, key: str) -> list[RunView]: ...
    @property
    def trace_url(self) -> str | None: ...  # the config's template of a run's trace link


class Watchdog(Protocol):
    """What the API asks of the watchdog (:class:`watchdog.shell.service.WatchdogService`)."""

    @property
    def queries(self) -> RunReads: ...
    @property
    def priority(self) -> Priority: ...
    def now(self) -> float: ...
    def view(self, key: str) -> RunView | None: ...
    def heartbeat(self, key: str, messages: int, in_flight: int | None = None,
                  oldest_call_started: float | None = None,
                  announce: dict[str, Any] | None = None) -> RunView: ...
    def sync(self, key: str, request: TraceRequest, stop: str | None = None,
             announce: dict[str, Any] | None = None) -> tuple[RunView | None, int]: ...
    async def checkpoint(self, session_id: str, checkpoint: Checkpoint) -> dict[str, Any]: ...
    def session_context(self, session_id: str) -> dict[str, Any]: ...
