"""Plain-text tables for the CLI that fit a terminal: aligned columns, and when a row is wider
than the terminal, the columns that may shrink are cut with an ellipsis, widest first, never
below their minimum. Widths are a terminal's cells: a wide character (CJK, most emoji) takes
two, a combining mark none. Pure and standard library only (the client commands run where the
server's dependencies may not); ``-o wide`` and ``-o json`` are the untruncated forms."""

from __future__ import annotations

import unicodedata
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
    widths = [max(cells(row[i]) for row in table) for i in range(len(columns))]
    if width is not None:
        _shrink(columns, widths, width)
    lines = []
    for row in table:
        fitted = [_fit(cell, size, column.middle) for cell, size, column
                  in zip(row, widths, columns, strict=True)]
        lines.append(GAP.join(_pad(cell, size, column.numeric)
                              for cell, size, column in zip(fitted, widths, columns, strict=True)
                              ).rstrip())
    return "\n".join(lines)


def cells(text: str) -> int:
    """The terminal cells ``text`` takes."""
    if text.isascii():
        return len(text)
    return sum(_cells(char) for char in text)


def _cells(char: str) -> int:
    if unicodedata.combining(char) or unicodedata.category(char) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def _pad(cell: str, size: int, right: bool) -> str:
    space = " " * max(size - cells(cell), 0)
    return space + cell if right else cell + space


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
    if cells(cell) <= size:
        return cell
    if size <= 1:
        return ELLIPSIS[:size]
    if middle:
        head = size // 2
        return _take(cell, head) + ELLIPSIS + _take(cell[::-1], size - 1 - head)[::-1]
    return _take(cell, size - 1) + ELLIPSIS


def _take(text: str, size: int) -> str:
    """The longest start of ``text`` within ``size`` cells."""
    taken = 0
    for index, char in enumerate(text):
        taken += _cells(char)
        if taken > size:
            return text[:index]
    return text
