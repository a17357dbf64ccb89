"""A run's last steps, as the report prompts of its directives show them: one compact line per
step (``+12.3s tool read_file({"path":"a.py"}) -> 'x = 1'``), and the formats of durations,
dollars and budget numbers every report and message uses.

The core keeps a :class:`RecentSteps` per active run; a decision freezes them into a
:class:`StepLog`, whose lines are made when its report prompt is read. The full report of a run
(:mod:`watchdog.core.runs.report`) renders its steps with these lines too.

Pure: no IO, no clock.
"""

from __future__ import annotations

import math
import operator
from collections import deque
from typing import NamedTuple

from watchdog.core.redact import redact
from watchdog.core.runs.activity import ActivityEntry

LINE_DETAIL_CHARS = 160  # argument brief in one step line
LINE_RESULT_CHARS = 200  # result / error brief in one step line


ENDED_AT = operator.attrgetter("at")  # (C-level: a sort key on every report prompt)


class RecentSteps:
    """A run's last steps (the core keeps one per active run, for the report prompts of its
    directives) and their lines, each made once: a looping run's directives show the same
    steps again and again, and a cache shared by all runs thrashed once a few hundred runs
    fired at a time. The entries' arguments, results and errors were redacted at ingest, so
    only a step's name is redacted here."""

    __slots__ = ("entries", "lines", "origin")

    def __init__(self, size: int) -> None:
        self.entries: deque[ActivityEntry] = deque(maxlen=size)
        # seq -> line, its offset from origin: made when a directive first needs them
        self.lines: dict[int, str] | None = None
        self.origin: float | None = None

    def append(self, entry: ActivityEntry) -> None:
        self.entries.append(entry)

    def log(self, start: float | None = None) -> tuple[StepLog, int]:
        """The steps kept, frozen, their lines not made yet (:class:`StepLog`), and how many
        of the run's steps came before them: what a directive's report prompt is made from
        when it is read."""
        entries = self.entries
        if not entries:
            return StepLog((), start), 0
        return StepLog(tuple(entries), start), max(entries[0].seq - 1, 0)

    def render(self, start: float | None = None) -> tuple[tuple[str, ...], int]:
        """The lines of the steps kept (as :func:`~watchdog.core.runs.report.activity_lines`
        makes them; offsets from ``start``, default: the first step), and how many of the run's
        steps came before them."""
        entries = self.entries
        if not entries:
            return (), 0
        ordered = sorted(entries, key=ENDED_AT)
        origin = ordered[0].at if start is None else start
        lines = self.lines
        if lines is None or origin != self.origin or len(lines) > 2 * len(entries):
            lines = self.lines = {}  # other offsets, or lines of steps no longer kept
            self.origin = origin
        rendered = []
        for entry in ordered:
            line = lines.get(entry.seq)
            if line is None:
                line = lines[entry.seq] = step_line(entry, origin, redact(entry.name))
            rendered.append(line)
        return tuple(rendered), max(entries[0].seq - 1, 0)


class StepLog(NamedTuple):
    """A run's last steps as a decision left them (:meth:`RecentSteps.log`): their lines, the
    same as :meth:`RecentSteps.render` makes, are made by :meth:`lines` when a report prompt
    is read rather than at every decision."""

    entries: tuple[ActivityEntry, ...]
    start: float | None  # offsets count from here (None: the first step)

    def lines(self) -> tuple[str, ...]:
        if not self.entries:
            return ()
        ordered = sorted(self.entries, key=ENDED_AT)
        origin = ordered[0].at if self.start is None else self.start
        return tuple(step_line(entry, origin, redact(entry.name)) for entry in ordered)


def step_line(entry: ActivityEntry, origin: float, name: str | None = None) -> str:
    """``entry``'s line with its offset from ``origin`` (``name``: for its name)."""
    return ("+" + format_duration(max(entry.at - origin, 0.0)) + " "
            + _detail_line(entry, entry.name if name is None else name))


def _detail_line(entry: ActivityEntry, name: str) -> str:
    """The line of ``entry`` after its offset, with ``name`` for its name."""
    kind, detail = entry.kind, entry.detail
    if kind == "tool":
        call = f"{name}({one_line(detail, LINE_DETAIL_CHARS) if detail else ''})"
    elif detail:
        call = f"{name} ({one_line(detail, LINE_DETAIL_CHARS)})"
    else:
        call = name
    line = f"{kind} {call}"
    if entry.error:
        return f"{line} -> ERROR {one_line(entry.error, LINE_RESULT_CHARS)}"
    if entry.result:
        return f"{line} -> {one_line(entry.result, LINE_RESULT_CHARS)}"
    return line


def format_duration(seconds: float) -> str:
    """``4.2s``, ``3m05s``, ``2h07m``."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def format_usd(value: float) -> str:
    """Dollars as text, never an exponent: cents from a dollar up (``12.35``), three
    significant digits below (``0.0123``, ``0.0000451``)."""
    if not math.isfinite(value) or value <= 0:
        return "0"
    if value >= 1:
        return f"{value:.2f}"
    from decimal import Decimal  # (loaded when first needed: 0.4 MB)

    return format(Decimal(f"{value:.3g}"), "f")


def format_number(value: float) -> str:
    """A budget's limit or what is left, as text everywhere (reports, directives, messages):
    ``5`` for 5.0, ``2.5`` for a fraction (seconds)."""
    return str(int(value)) if float(value).is_integer() else f"{value:.1f}"


def one_line(text: str, limit: int | None = None) -> str:
    """``text`` on one line (a brief may hold newlines), cut to ``limit`` characters."""
    text = " ".join(text.split())  # runs of whitespace as one space (5x re.sub's speed)
    if limit is not None and len(text) > limit:
        return text[: limit - 1] + "…"
    return text
