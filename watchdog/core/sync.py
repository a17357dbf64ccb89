"""Read-your-writes for agents: the run's ended spans, applied before the agent's next step.

Theory of operation
-------------------
Spans reach the sidecar through the agent's OTLP exporter only after a batch delay, so a
directive derived from them would arrive after the agent has begun its next step. Before each
model request the client SDK therefore sends the run's spans that ended since its last sync —
the same OTLP protobuf its exporter will send later — on ``POST /v1/runs/{id}/sync?after=SEQ``.
The sidecar applies them exactly as an export (conventions, signals, rules), waits until every
directive they caused is stored, and answers with the run's directives after ``SEQ`` and its
budget view. So the agent's next request sees every directive that accounts for every span that
ended before it (DESIGN §8).

The same spans arrive again later through OTLP; :class:`SpanLedger` makes the two paths
idempotent. A run enters the ledger with its first sync (or the client's announcement), and
from then on every span of it applied from either path is remembered by id: whichever copy comes
second is dropped before it reaches the tracker. Runs that never sync cost one dict lookup per
span while the ledger holds any run. Pure: no IO, no clock.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict, deque
from collections.abc import Iterable
from typing import Any

from watchdog.core.runs.view import RunView, plain
from watchdog.core.spans.record import SpanRecord, copy_mark

MAX_SYNCED_RUNS = 10_000  # runs whose span ids are remembered (least recently synced dropped)
MAX_SPANS_PER_RUN = 2_048  # span ids remembered per run: the oldest go first; OTLP brings a
#                            span's second copy seconds after the first, not thousands of spans
# ?stop=: the client stopped the run by itself — at its tool budget (``max_tool_calls``), or at
# the end of the tool-call grace a wind_down announced (``grace``)
STOP_BUDGET, STOP_GRACE = "max_tool_calls", "grace"
CLIENT_STOPS = frozenset({STOP_BUDGET, STOP_GRACE})
SYNC_DIRECTIVE_WAIT = 2.0  # seconds a sync waits for the directives its spans caused to be stored


class SpanLedger:
    """Which spans of synced runs have been applied, to apply each span once."""

    def __init__(self, max_runs: int = MAX_SYNCED_RUNS,
                 max_spans_per_run: int = MAX_SPANS_PER_RUN) -> None:
        self.max_runs = max_runs
        self.max_spans_per_run = max_spans_per_run
        self._runs: OrderedDict[str, dict[str, None]] = OrderedDict()
        self.duplicates = 0  # spans dropped because their other copy was applied first
        self.forgotten_runs = 0  # runs dropped from the ledger at MAX_SYNCED_RUNS

    def __bool__(self) -> bool:
        return bool(self._runs)

    def register(self, run_key: str) -> None:
        runs = self._runs
        if run_key in runs:
            runs.move_to_end(run_key)
            return
        runs[run_key] = {}
        while len(runs) > self.max_runs:
            runs.popitem(last=False)
            self.forgotten_runs += 1

    def admit(self, records: Iterable[SpanRecord]) -> list[SpanRecord]:
        """The records not applied before; remembers those of registered runs."""
        runs = self._runs
        admitted: list[SpanRecord] = []
        for record in records:
            seen = runs.get(record.run_key)
            if seen is None:
                admitted.append(record)
                continue
            span_id = record.span_id
            if span_id in seen:
                self.duplicates += 1
                continue
            seen[span_id] = None
            if len(seen) > self.max_spans_per_run:
                del seen[next(iter(seen))]
            admitted.append(record)
        return admitted


MAX_RECENT_SPANS = 16_384  # span ids of any run remembered, the oldest going first


class RecentSpans:
    """The span ids applied last, of every run: a span that comes again (an exporter's retry
    of a batch re-cut, a collector's re-send) is dropped before it reaches the tracker, so it
    is counted once. Another span with an id already applied (another name or time:
    :func:`~watchdog.core.spans.record.copy_mark`) is dropped too — the first of an id is the
    span — and counted in :attr:`conflicts` (a rejection the receiver reports). Bounded: the
    last :data:`MAX_RECENT_SPANS` (some 3 MB when full), which covers a retry that comes within
    that many spans of its first copy.

    Kept over a clean restart (:meth:`state`, :meth:`restore`): a batch the sidecar applied
    just before it stopped, whose answer the exporter never read, comes again to the next
    process. A copy mark is a hash of this process's, so a span taken back is told by its
    times alone (its start and end, to the nanosecond). And over a crash, as far as the runs
    are: each state flush stores the ids applied since the one before (:meth:`take_new`, with
    the runs they changed), so a span whose counts are stored is one the next process drops
    when it comes again; one applied after the last flush counts again, its counts lost."""

    def __init__(self, size: int = MAX_RECENT_SPANS) -> None:
        # trace + span id -> the copy mark of the one applied (its times, taken back)
        self._ids: dict[str, int | tuple[int, int]] = {}
        self._order: deque[tuple[str, int, int]] = deque()  # (trace + span id, start, end)
        self._size = size
        self.duplicates = 0  # spans dropped as a second copy
        self.conflicts: list[SpanRecord] = []  # of the last admit: other spans of an id applied
        self._added = 0  # ids ever admitted (restored ones are stored already: not counted)
        self._taken = 0  # ... of which take_new handed out

    def admit(self, records: Iterable[SpanRecord]) -> list[SpanRecord]:
        """The records whose span was not applied lately (one of each in the batch)."""
        ids, order, admitted = self._ids, self._order, []
        self.conflicts = []
        for record in records:
            key = record.trace_id + record.span_id
            mark = copy_mark(record)
            first = ids.get(key)
            if first is not None:
                if first != mark and first != (record.start_ns, record.end_ns):
                    self.conflicts.append(record)
                else:
                    self.duplicates += 1
                continue
            ids[key] = mark
            order.append((key, record.start_ns, record.end_ns))
            if len(order) > self._size:
                del ids[order.popleft()[0]]
            admitted.append(record)
        self._added += len(admitted)
        return admitted

    def take_new(self) -> list[tuple[str, int, int]]:
        """The ids remembered since the last take (at most the last ``size``), oldest first,
        each with its span's times (what :meth:`restore` takes back): a state flush stores
        them with the runs they changed."""
        new = min(self._added - self._taken, len(self._order))
        self._taken = self._added
        if new <= 0:
            return []
        newest = list(itertools.islice(reversed(self._order), new))
        newest.reverse()
        return newest

    def give_back(self, count: int) -> None:
        """``count`` ids of the last take were not stored (the write failed): the next take
        hands them out again (those still remembered)."""
        self._taken = max(self._taken - count, 0)

    def state(self) -> list[list[Any]]:
        """The ids remembered, oldest first, with their spans' times (JSON-able)."""
        return [list(item) for item in self._order]

    def restore(self, state: object) -> int:
        """Take back what :meth:`state` gave (before any span is admitted); returns the
        entries left out because they cannot be read."""
        skipped = 0
        for item in state if isinstance(state, list) else ():
            try:
                key, start, end = item
                if not (isinstance(key, str) and type(start) is int and type(end) is int):
                    raise TypeError(f"not a span's id and times: {item!r}")
            except (TypeError, ValueError):
                skipped += 1
                continue
            if key not in self._ids:
                self._ids[key] = (start, end)
                self._order.append((key, start, end))
        while len(self._order) > self._size:
            del self._ids[self._order.popleft()[0]]
        return skipped


def sync_answer(run: RunView | None, run_id: str, applied: int,
                directives: list[dict[str, Any]], last_seq: int) -> dict[str, Any]:
    """The body of a sync answer: what the agent needs to decide its next step."""
    if run is None:
        return {"run_id": run_id, "known": False, "applied": applied, "tool_calls": 0,
                "iterations": 0, "budget": {}, "directives": directives,
                "last_seq": last_seq, "ended": False}
    return {"run_id": run_id, "known": True, "applied": applied, "tool_calls": run.tool_calls,
            "iterations": run.iterations, "budget": plain(run.budget),
            "directives": directives, "last_seq": last_seq, "ended": run.ended}
