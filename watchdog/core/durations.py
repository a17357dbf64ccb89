"""One duration grammar for configuration and rules: Prometheus'.

A duration is one or more ``<integer><unit>`` parts, largest unit first, each unit at most once:
``500ms``, ``30s``, ``1m30s``, ``1h``, ``1d``, ``2w``, ``1y`` (units ``ms s m h d w y``; a day is
24 h, a week 7 d, a year 365 d) — what ``promtool`` and Prometheus' ``for:`` accept, so a rule
author writes the same thing in both places. ``0`` alone is the zero duration.

Two readers, by what a key's name promises:

* :func:`parse_duration` — a duration string only. Rules' ``for:`` uses it: a bare ``5`` has no
  unit and Prometheus refuses it, so we do too.
* :func:`parse_seconds` — keys whose name or documentation says *seconds* (``run_end_timeout``,
  ``eval_interval``, ``grace.seconds``, a budget's ``max_seconds``) also take a plain number of
  seconds (``900``, ``0.5``, or the env var text ``"900"``): that reads unambiguously and is what
  those keys always accepted.

Pure: no IO. Errors are :class:`DurationError` (a ``ValueError``) whose text says what is
allowed; callers add the key and the value.
"""

from __future__ import annotations

import math
import re

UNIT_SECONDS = {"y": 365 * 86400.0, "w": 7 * 86400.0, "d": 86400.0, "h": 3600.0, "m": 60.0,
                "s": 1.0, "ms": 0.001}
# Prometheus' model.ParseDuration: each unit at most once, in this order.
_GRAMMAR = re.compile("^" + "".join(f"(?:(?P<{'ms_' if u == 'ms' else u}>[0-9]+){u})?"
                                    for u in UNIT_SECONDS) + "$")
_NUMBER = re.compile(r"^[0-9]+(?:\.[0-9]+)?$")

DURATION_HELP = "a duration like 500ms, 30s, 1m30s, 1h, 1d (units ms s m h d w y, largest first)"
SECONDS_HELP = "a number of seconds >= 0 or " + DURATION_HELP
TOO_LARGE = "this one is too large for a number of seconds"
NEGATIVE = "this one is negative"
UNSIGNED = "a duration is written without a sign"


class DurationError(ValueError):
    """The value is not a duration: :attr:`allowed` says what is, :attr:`hint` (may be empty)
    how to fix this value."""

    def __init__(self, allowed: str, hint: str = "") -> None:
        super().__init__(allowed + (f"; {hint}" if hint else ""))
        self.allowed = allowed
        self.hint = hint


def parse_duration(value: object) -> float:
    """Seconds from a Prometheus duration string (``1m30s``); a bare number is refused."""
    text = value.strip() if isinstance(value, str) else None
    if text == "0":
        return 0.0
    match = _GRAMMAR.match(text) if text else None
    if match is None:
        bare = text if text is not None else value
        hint = "" if isinstance(value, bool) or not _NUMBER.match(str(bare)) else (
            f"a bare number has no unit: write {bare}s")
        if text and text[0] in "+-" and text[1:] and (text[1:] == "0"
                                                      or _GRAMMAR.match(text[1:])):
            hint = UNSIGNED
        raise DurationError(DURATION_HELP, hint)
    try:  # (a count of hundreds of digits is past any float)
        seconds = sum(int(count) * UNIT_SECONDS["ms" if name == "ms_" else name]
                      for name, count in match.groupdict().items() if count is not None)
    except OverflowError:
        seconds = math.inf
    if not math.isfinite(seconds):
        raise DurationError(DURATION_HELP, TOO_LARGE)
    return seconds


def parse_seconds(value: object) -> float:
    """Seconds from a non-negative number, a numeric string or a duration string. A number may
    carry a sign, as YAML and the integer keys take one (``-0`` is 0, ``+5`` is 5); a negative
    one is refused as such, and a duration takes no sign (Prometheus' grammar has none)."""
    if isinstance(value, bool):
        raise DurationError(SECONDS_HELP)
    if isinstance(value, (int, float)):
        if isinstance(value, float) and math.isnan(value):
            raise DurationError(SECONDS_HELP)
        if value < 0:
            raise DurationError(SECONDS_HELP, NEGATIVE)
        return _finite(value) + 0.0  # (-0.0 is 0)
    text = value.strip() if isinstance(value, str) else ""
    sign, unsigned = (text[0], text[1:]) if text[:1] in ("+", "-") else ("", text)
    if _NUMBER.match(unsigned):
        seconds = _finite(unsigned)
        if sign == "-" and seconds != 0:
            raise DurationError(SECONDS_HELP, NEGATIVE)
        return seconds
    try:
        return parse_duration(value)
    except DurationError as exc:  # (its hint for a bare number does not apply here)
        raise DurationError(SECONDS_HELP, exc.hint if exc.hint in (TOO_LARGE, UNSIGNED)
                            else "") from None


def _finite(number: float | str) -> float:
    """``float(number)``, refused when it is past what a float holds: YAML's ``.inf``, an integer
    or a string of digits of some 310 digits or more (``float`` would raise or give inf)."""
    try:
        seconds = float(number)
    except OverflowError:
        seconds = math.inf
    if not math.isfinite(seconds):
        raise DurationError(SECONDS_HELP, TOO_LARGE)
    return seconds


def parse_retry_after(value: str | None, now: float) -> float | None:
    """HTTP's ``Retry-After`` as seconds from ``now`` (epoch seconds): delta-seconds or an HTTP
    date (one in the past: 0); None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():  # (str.isdigit takes "²", which float refuses)
        return float(value)
    import email.utils  # (only a date: the webhook sender and the forwarder read it)

    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - now, 0.0)

