"""Loops across agents (DESIGN §13): agents that hand a task back and forth, or re-run one agent,
with the same input.

Theory of operation
-------------------
Every single run of a multi-agent ping-pong looks healthy — triage hands off to billing, billing
hands back to triage, each with the same request — the loop is only visible across runs. A
**group** is the runs of one session or conversation (the run's session, or its parent run's),
else a run and its child runs (handoffs and delegations alike: the runs whose ``parent_run`` it
is). Each run of a group enters its :class:`Trail` once, as an :class:`Entry`: its agent and its
**input** — the request of its first model call, its last user message with case and spacing
ignored, as a 64-bit hash (``SpanRecord.input_hash``) — in the order the runs started. A run
whose input is unknown (content capture off) never enters: an unknown input is the same as no
other.

The trail keeps the last :data:`MAX_TRAIL` entries, and after each new one looks for a cycle at
its tail: the last *n* entries (agent and input, *n* from 1 to :data:`MAX_CYCLE_AGENTS`)
repeated back to back. ``repeats`` counts the whole sequence's occurrences (A→B→A→B→A→B is the
cycle ``[A, B]`` 3 times; one agent run again and again with the same input is a cycle of one),
and the longest repetition wins (ties: the shorter cycle). Fewer than two occurrences is no
cycle. A healthy chain (A→B→C, or A→B→A with a different input the second time) repeats
nothing. A run that ended with its answer and hangs from no run of the group (its answer went
to whoever started it: a script or an evaluation harness that runs one task again and again,
each time to its answer) closes what came before it: only the runs after the latest such run
can repeat (the same task again after an answer is a new task; again after a run that failed,
ran out or gave up, a loop repeating a failing approach).

The cycle is stopped by the **orchestrator**: the parent of the cycling runs when it is still
running (it is the one that hands off or delegates), else the latest run of the group still
running. Which run that is depends on which runs have ended, so the caller (the core's step,
which holds the runs) works it out; this module is pure and holds no run.

Memory is bounded: :data:`MAX_TRAIL` entries per group, :data:`MAX_GROUPS` groups (the least
recently changed are forgotten; a forgotten group's next run starts a new trail), and the
:data:`MAX_NOTED` runs entered last are known without a look at their trail.
"""

from __future__ import annotations

from bisect import insort
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

MAX_TRAIL = 32  # runs remembered per group (the most recently started)
MAX_CYCLE_AGENTS = 4  # A→B→C→D→A→B→C→D… is the longest cycle looked for
MAX_GROUPS = 10_000  # groups remembered (least recently changed dropped first)
MAX_NOTED = 50_000  # runs remembered as entered (a run forgotten here is found in its trail)


@dataclass(frozen=True, slots=True, order=True)
class Entry:
    """One run of a group, ordered by when it started."""

    start_ns: int
    agent: str
    input_hash: int
    run: str
    parent: str | None


@dataclass(slots=True)
class Trail:
    """The runs of one group, oldest first, and the cycle at its tail."""

    entries: list[Entry] = field(default_factory=list)
    cycle: tuple[str, ...] = ()  # agent names, in the order of the tail
    repeats: int = 0
    cycling: tuple[Entry, ...] = ()  # the entries the cycle's repeats cover

    def add(self, entry: Entry, answered: Callable[[Entry], bool] = lambda _e: False) -> bool:
        """Put ``entry`` in (by its start); True if the cycle or its repeats changed. A run
        already in is not put in again. ``answered``: whether an entry's run ended with its
        answer, given to whoever started it (the runs after the latest such one may repeat)."""
        entries = self.entries
        if any(known.run == entry.run for known in entries):
            return False
        insort(entries, entry)
        del entries[:-MAX_TRAIL]
        before = (self.cycle, self.repeats)
        since = next((at + 1 for at in range(len(entries) - 1, -1, -1)
                      if answered(entries[at])), 0)
        tail = entries[since:]
        length, repeats = tail_cycle([(e.agent, e.input_hash) for e in tail])
        if repeats:
            self.cycle = tuple(e.agent for e in tail[-length:])
            self.cycling = tuple(tail[-length * repeats:])
        else:
            self.cycle, self.cycling = (), ()
        self.repeats = repeats
        return (self.cycle, self.repeats) != before


def tail_cycle(items: list[tuple[str, int]]) -> tuple[int, int]:
    """The cycle at the end of ``items``: (its length, how many times it occurs back to back);
    (0, 0) when nothing at the end occurs twice in a row."""
    count = len(items)
    best = (0, 0)
    for length in range(1, min(MAX_CYCLE_AGENTS, count // 2) + 1):
        tail = items[count - length:]
        repeats = 1
        while (repeats + 1) * length <= count and \
                items[count - (repeats + 1) * length:count - repeats * length] == tail:
            repeats += 1
        if repeats >= 2 and repeats > best[1]:
            best = (length, repeats)
    return best


class CycleBook:
    """The trails of the groups seen lately (an LRU, :data:`MAX_GROUPS` at most)."""

    def __init__(self, max_groups: int = MAX_GROUPS) -> None:
        self.max_groups = max_groups
        self._trails: OrderedDict[str, Trail] = OrderedDict()
        self._noted: OrderedDict[str, None] = OrderedDict()  # runs already in a trail
        self.cycling = 0  # groups with a cycle now (0: no run's activation needs a look)

    def __len__(self) -> int:
        return len(self._trails)

    def noted(self, run: str) -> bool:
        return run in self._noted

    def note(self, group: str, entry: Entry,
             answered: Callable[[Entry], bool] = lambda _e: False) -> Trail | None:
        """``entry``'s run enters ``group``'s trail (once); returns the trail if its cycle
        changed (``answered``: :meth:`Trail.add`'s)."""
        if entry.run in self._noted:
            return None
        self._noted[entry.run] = None
        while len(self._noted) > MAX_NOTED:
            self._noted.popitem(last=False)
        trails = self._trails
        trail = trails.get(group)
        if trail is None:
            trail = trails[group] = Trail()
            while len(trails) > self.max_groups:
                _group, dropped = trails.popitem(last=False)
                self.cycling -= bool(dropped.repeats)
        else:
            trails.move_to_end(group)
        had = bool(trail.repeats)
        changed = trail.add(entry, answered)
        self.cycling += bool(trail.repeats) - had
        return trail if changed else None

    def get(self, group: str) -> Trail | None:
        return self._trails.get(group)
