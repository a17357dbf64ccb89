"""Plain-text tables for the CLI that fit a terminal: aligned columns, and when a row is wider
than the terminal, the columns that may shrink are cut with an ellipsis, widest first, never
below their minimum. Pure and standard library only (the client commands run where the server's
dependencies may not); ``-o wide`` and ``-o json`` are the untruncated forms."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

ELLIPSIS = "…"
GAP = "  "


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    numeric: bool = False  # right-aligned
    min_width: int | None = None  # None: never shrunk; else cut down to this many characters
    middle: bool = False  # cut in the middle (ids: the head and the tail tell them apart)


def render(columns: Sequence[Column], rows: Sequence[Sequence[str]],
           width: int | None = None) -> str:
    """``rows`` under a header of the column names; within ``width`` characters if the
    shrinkable columns allow it (``None``: no limit)."""
    table = [[c.name for c in columns], *[list(row) for row in rows]]
    widths = [max(len(row[i]) for row in table) for i in range(len(columns))]
    if width is not None:
        _shrink(columns, widths, width)
    lines = []
    for row in table:
        cells = [_fit(cell, size, column.middle) for cell, size, column
                 in zip(row, widths, columns, strict=True)]
        lines.append(GAP.join(cell.rjust(size) if column.numeric else cell.ljust(size)
                              for cell, size, column in zip(cells, widths, columns, strict=True)
                              ).rstrip())
    return "\n".join(lines)


def _shrink(columns: Sequence[Column], widths: list[int], limit: int) -> None:
    excess = sum(widths) + len(GAP) * (len(widths) - 1) - limit
    while excess > 0:
        room = [(widths[i] - (c.min_width or 0), i) for i, c in enumerate(columns)
                if c.min_width is not None and widths[i] > max(c.min_width, len(c.name))]
        if not room:
            return  # as narrow as it gets: the terminal wraps what is left
        _spare, index = max(room)
        widths[index] -= 1
        excess -= 1


def _fit(cell: str, size: int, middle: bool) -> str:
    if len(cell) <= size:
        return cell
    if size <= 1:
        return ELLIPSIS[:size]
    if middle:
        head = size // 2
        tail = size - 1 - head
        return cell[:head] + ELLIPSIS + (cell[-tail:] if tail else "")
    return cell[:size - 1] + ELLIPSIS
