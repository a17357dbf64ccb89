"""What a number or an id coming from outside may be: one rule each, used at every edge
(span normalisation, heartbeats, checkpoints, API routes), so a value that passed one door
cannot be refused — or crash something — behind another.

Numbers must be finite and within a range that every consumer can hold: CEL ints are 64-bit,
JSON answers must not carry ``Infinity``/``NaN``, and a budget of 1e300 is a mistake, not a
plan. Ids are 1 to :data:`MAX_ID_CHARS` characters without control characters or unpaired
surrogates; anything else (``{``, ``/``, spaces, non-ASCII) is allowed and routes take it
percent-encoded.
"""

from __future__ import annotations

import json
import math
import re

from watchdog.core.shown import shown

MAX_ID_CHARS = 200
# More tokens than any model call uses (a year of a large model's output); a larger figure is
# taken as this bound, so a run's sum stays far below 2**63 (CEL's int) for billions of calls.
MAX_TOKENS_PER_CALL = 10**9
# Budgets: counts, seconds or tokens an agent announces. 1e12 seconds is 31,000 years.
MAX_BUDGET = 1e12
MAX_MESSAGES = 10**9  # conversation length a heartbeat may report
MAX_IN_FLIGHT = 10**6  # calls a heartbeat may report as running
# Times from outside (epoch seconds) from 2000 to year 5138: an earlier one is none (0, OTLP's
# "unknown"; other units, µs or ms, read as January 1970), a later one units mixed up (ms, ns).
MIN_EPOCH_SECONDS = 946_684_800
MAX_EPOCH_SECONDS = 1e11
# A span's times, in ns (a uint64: at most year 2554). One that ends far after it arrived is the
# run's to judge (watchdog.core.runs.run: it knows when the span arrived).
MIN_SPAN_TIME_NS = MIN_EPOCH_SECONDS * 10**9
# A run's signatures (watchdog.core.runs.fields): distinct tool calls, results and errors it
# tells apart (more still count, in an overflow bucket), and the longest cycle of tool calls
# looked for (A→B→C→D→A→B→C→D…). Here, not with the run's other bounds, as the compiled fold
# of a tool call's signatures is handed them with the compiled decode (spans read no run).
MAX_DISTINCT_SIGNATURES = 128
MAX_CYCLE_LENGTH = 4
# the model endpoint's stop of one run, kept with it: what a request that goes on from its stop
# answer carries (digests, ids), and its note
MAX_STOP_ANSWERS = 8
MAX_STOP_NOTE_CHARS = 4096
MAX_STOPS_KEPT = 20_000  # stop answers told from a run's, across runs (least recent out)

# C0 and C1 controls, DEL, and lone surrogates (JSON "\ud800" decodes to one).
_BAD_ID_CHAR = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


class InvalidId(ValueError):
    """An id breaks the id rule; the message says which part."""


def id_problem(value: str) -> str | None:
    """Why ``value`` is not a valid run/session id, or None when it is."""
    if not value:
        return "must not be empty"
    if len(value) > MAX_ID_CHARS:
        return f"must be at most {MAX_ID_CHARS} characters (got {len(value)})"
    bad = _BAD_ID_CHAR.search(value)
    if bad is not None:
        return (f"must not contain control characters or unpaired surrogates "
                f"(U+{ord(bad.group()):04X} at {bad.start()})")
    return None


def check_id(value: str, what: str) -> str:
    problem = id_problem(value)
    if problem is not None:
        raise InvalidId(f"{what} {shown(value[:64])} is not allowed: it {problem}")
    return value


def span_times(start_ns: int, end_ns: int) -> tuple[int, int] | None:
    """A span's start and end (ns), the end not before the start. A time that cannot be one (see
    :data:`MIN_SPAN_TIME_NS`) is taken from the other: a span whose start is unknown took no
    time that is known, and it ended when it ended. None when neither is a time."""
    start_ok = start_ns >= MIN_SPAN_TIME_NS
    if end_ns >= MIN_SPAN_TIME_NS:
        return (start_ns, max(end_ns, start_ns)) if start_ok else (end_ns, end_ns)
    return (start_ns, start_ns) if start_ok else None


def token_count(value: object) -> int:
    """A token count from a span attribute: a number or numeric string, finite, >= 0, at most
    :data:`MAX_TOKENS_PER_CALL`; anything else (NaN, ±inf, "1e999", text) counts as 0."""
    # (the two a model call's span carries first: a count, or none; ~3 reads a span)
    if type(value) is int:
        return value if 0 <= value <= MAX_TOKENS_PER_CALL \
            else min(max(value, 0), MAX_TOKENS_PER_CALL)
    if value is None:
        return 0
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return min(max(value, 0), MAX_TOKENS_PER_CALL)
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return 0
    if isinstance(value, float):
        if not math.isfinite(value):
            return 0
        return int(min(max(value, 0.0), MAX_TOKENS_PER_CALL))
    return 0


def _in_range(value: object, top: float, text: bool) -> float | None:
    """``value`` as a finite number from 0 to ``top`` (with ``text``: a numeric string too),
    else None."""
    if text and isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if 0.0 <= number <= top else None  # NaN fails too


def budget_limit(value: object, whole: bool = False, text: bool = False) -> float | None:
    """A budget limit: a finite number from 0 to :data:`MAX_BUDGET` (``whole``: a whole one, a
    count), else None; with ``text``, a number written as a string too (a span attribute set in
    ``OTEL_RESOURCE_ATTRIBUTES`` is one)."""
    limit = _in_range(value, MAX_BUDGET, text)
    return None if limit is None or (whole and not limit.is_integer()) else limit


MAX_REPORTED_COST = 1e6  # USD for one model call: more is no cost a span can mean


def reported_cost(value: object) -> float | None:
    """A cost in USD an agent reports for a call: a finite number from 0 to
    :data:`MAX_REPORTED_COST` (a numeric string too), else None (not reported)."""
    return _in_range(value, MAX_REPORTED_COST, text=True)


def plain_number(value: float) -> float:
    """A budget as it is shown everywhere (API, CLI, reports, directives): ``5.0`` -> ``5``;
    a fraction (seconds left) stays a float."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def finite_float(text: str) -> float:
    """``json.loads(parse_float=...)``: a JSON number too large for a double ("1e999") would
    become ``inf``; refuse it like the ``NaN``/``Infinity`` literals."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:32]} is out of range")
    return value


def bounded_int(text: str) -> int:
    """``json.loads(parse_int=...)``: an integer of more digits than the interpreter converts
    (``sys.get_int_max_str_digits()``, 4300) is out of range for every field, said so rather
    than with the interpreter's advice on raising the limit."""
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"number {text[:32]}... ({len(text.lstrip('-'))} digits) is out of "
                         f"range") from None


def refuse_constant(name: str) -> float:
    """``json.loads(parse_constant=...)``: ``NaN``, ``Infinity`` and ``-Infinity`` are not JSON."""
    raise ValueError(f"{name} is not a JSON number")


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")
# json.loads with options makes a decoder at every call: this one is reused (what it keeps
# between calls is a cache of the keys it read, cleared at the end of each)
_DECODER = json.JSONDecoder(parse_float=finite_float, parse_int=bounded_int,
                            parse_constant=refuse_constant)


def load_json(raw: bytes | str) -> object:
    """``json.loads`` for input from outside: bytes strictly UTF-8, numbers finite, no
    ``NaN``/``Infinity``, no unpaired surrogate (``"\\ud800"`` — it cannot be encoded again, so
    it would fail far from here), nesting bounded by the interpreter's recursion limit. Raises
    ``ValueError`` with a message for the client in every case."""
    if isinstance(raw, bytes):
        # Decoded here, strictly: ``json.loads`` of bytes guesses UTF-16/32 from the first
        # bytes and decodes UTF-8 with "surrogatepass" (ED A0 80 would be a lone surrogate).
        needle = raw
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"not UTF-8: {exc.reason} at byte {exc.start}") from None
    else:
        needle, text = raw.encode("utf-8", "surrogatepass"), raw
    if text.startswith("\ufeff"):  # (as json.loads says it)
        raise ValueError("Unexpected UTF-8 BOM (decode using utf-8-sig): line 1 column 1 "
                         "(char 0)")
    try:
        value = _DECODER.decode(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    except ValueError as exc:
        raise ValueError(str(exc)) from None
    if _SURROGATE_ESCAPE.search(needle) is not None:  # rare: check what it decoded to
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("a string holds an unpaired UTF-16 surrogate (\\ud800-\\udfff)"
                             ) from None
        except RecursionError:
            raise ValueError("JSON nested too deeply") from None
    return value


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def is_number(value: object) -> bool:
    """A JSON number every consumer can hold: a finite float, or an int within 64 bits
    (``math.isfinite(10**400)`` itself raises; SQLite and CEL stop at 64 bits)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return INT64_MIN <= value <= INT64_MAX
    return isinstance(value, float) and math.isfinite(value)
