"""What the span processor knows about a run: its attributes, its calls in flight, what it
counted, and the call spans that ended since the run last synced with the sidecar.

This is the only run state the span path touches, kept apart from
:class:`~agent_watchdog_client.Run` so that the processor depends on it alone (the run, the
reporter and the watchdog depend on the processor's module, never the reverse). Written by the
span processor on the agent's threads, read by the reporter thread and by the run before each
model request: single operations on plain dicts, ints and a deque, which are atomic under the
GIL.
"""

from __future__ import annotations

import os
from collections import deque
from types import ModuleType
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import Span

RUN_KEY = otel_context.create_key("agent-watchdog-run")
RUN_ID_ATTRIBUTE = "watchdog.run.id"
# Runs in progress by id: some instrumentations (OpenInference's LangChain tracer) set a span's
# kind only when it ends, so the processor finds the run of such a span by its stamped id.
LIVE_RUNS: dict[str, RunTally] = {}
# Calls and agent spans in flight, of every run: span id -> (run, start in epoch ns — None for
# an agent span —, whether it is a tool call that counts: an int for one no model asked for,
# the run's model calls when it started). One dict for all runs, so that a span's end is one
# pop; a run's own calls in flight are picked out when asked (the reporter, every 50 ms).
# Bounded by the processor's MAX_OPEN_CALLS.
OPEN_SPANS: dict[int, tuple[RunTally, int | None, bool | int]] = {}
MAX_UNSYNCED_SPANS = 1_024  # ended call spans waiting for the next sync; older ones are dropped
#                             (the exporter still delivers them, only later)


def _compiled_span_path() -> ModuleType | None:
    """The span path in C (``_spanpath.c``), an optional extension: a package installed without
    a compiler has none, and the Python path runs. ``WATCHDOG_CLIENT_PURE_PYTHON=1`` chooses
    the Python path anyway."""
    if os.environ.get("WATCHDOG_CLIENT_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:
        from agent_watchdog_client import _spanpath  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _spanpath  # type: ignore[no-any-return]


SPAN_PATH = _compiled_span_path()

if TYPE_CHECKING or SPAN_PATH is None:
    class _Counts:
        """The counts the span path writes: ``_spanpath.Counts`` (plain C fields there), or
        these slots."""

        __slots__ = ("agent_spans", "changed", "ended_calls", "keep_spans", "model_spans",
                     "span_attributes", "tool_spans", "tools_ended", "unsynced",
                     "unsynced_dropped")
        agent_spans: int
        changed: bool
        ended_calls: int
        keep_spans: bool
        model_spans: int
        span_attributes: dict[str, Any]
        tool_spans: int
        tools_ended: int
        unsynced: deque[ReadableSpan]
        unsynced_dropped: int
else:
    _Counts = SPAN_PATH.Counts


class RunTally(_Counts):
    """Created by the run; ``owner`` is the :class:`~agent_watchdog_client.Run` it belongs to."""

    __slots__ = ("_agent_spans", "ended_agents", "owner")

    def __init__(self, owner: object) -> None:
        self.owner = owner
        self.span_attributes: dict[str, Any] = {}
        self.agent_spans = 0
        self._agent_spans: dict[int, Span] = {}  # open agent spans, oldest first
        # the agent spans ended inside the run, the last 64 (a steered run's last sync sends
        # them before its own span: a framework's limit stop is on its agent span)
        self.ended_agents: deque[Span] = deque(maxlen=64)
        self.tool_spans = 0  # tool calls started (output tools excluded)
        self.tools_ended = 0  # tool calls ended (output tools excluded)
        self.model_spans = 0  # model calls started
        self.ended_calls = 0  # model and tool calls ended
        self.changed = False  # something the sidecar should hear (read by the reporter thread)
        # Ended call spans are kept for the next sync only once the run steers (an adapter
        # asked at a decision point): a run nobody steers holds no span.
        self.keep_spans = False
        self.unsynced: deque[ReadableSpan] = deque(maxlen=MAX_UNSYNCED_SPANS)
        self.unsynced_dropped = 0

    def agent_started(self, span_id: int, span: Span) -> None:
        self.agent_spans += 1
        self._agent_spans[span_id] = span

    def innermost_agent_span(self) -> Span | None:
        spans = list(self._agent_spans.values())
        return spans[-1] if spans else None

    def agent_ended(self, span_id: int) -> None:
        span = self._agent_spans.pop(span_id, None)
        if span is not None:
            self.ended_agents.append(span)

    @property
    def calls(self) -> dict[int, int]:
        """This run's calls in flight: span id -> start (epoch ns)."""
        return {span_id: start for span_id, (run, start, _) in list(OPEN_SPANS.items())
                if run is self and start is not None}

    def take_unsynced(self) -> list[ReadableSpan]:
        """The ended call spans not sent yet, oldest first (popped one at a time: the span
        path may append meanwhile)."""
        taken: list[ReadableSpan] = []
        unsynced = self.unsynced
        while unsynced:
            taken.append(unsynced.popleft())
        return taken

    def give_back(self, spans: list[ReadableSpan]) -> None:
        """Spans a failed sync could not deliver: sent with the next one."""
        self.unsynced.extendleft(reversed(spans))
