"""Conditions the engine can often decide without CEL: comparisons of a run's counters, and
the guards (budget, session, fleet) that rule a condition out.

Most rule conditions are of one shape — ``!run.ended && run.repeated_error >= 5`` — and on the
ingest path most evaluations of them come out false. Evaluating one with CEL needs the run's
whole ``signals()`` dict and an activation (~10 µs per run evaluation, the largest part of rule
evaluation). :func:`compile_fast` turns a condition into a Python function of the
:class:`~watchdog.core.runs.run.RunState` itself that answers ``True``, ``False`` or ``None`` (not
known without CEL), reading only the attributes it names.

Theory of operation
-------------------
* Known atoms: the fields of :data:`RUN_FIELDS` (the catalogue's ints, doubles and bools:
  counters, flags and time signals, read from the RunState by the catalogue's ``read``, as
  ``signals()`` reads them), int, double and bool literals, and the six comparisons between
  them. ``&&``, ``||``, ``!`` and parentheses combine them.
* Guards, known or not at each evaluation from what the engine hands in besides the run (the
  rule pack's budget for the run's agent, the session mapping, the fleet):
  ``has(run.budget.<field>)`` (the field is there when its ``max_*`` limit is announced or
  set by the pack, as :meth:`RunState.budget_view` builds it) and ``run.budget.<field>``
  (unknown when absent); a scalar ``session.<field>`` (its default for a run with no
  session, the session's own value when it is of the field's type, else unknown: CEL
  converts it); ``<variable> in fleet.failing_tools`` (false while no tool fails), and
  ``run.<list or map>.exists(v, P)`` / ``.all(v, P)`` when ``P`` is false / true whatever
  ``v`` is, and ``run.<list or map>.exists(v, v in fleet.failing_tools)`` always (whether one
  of the run's tools is failing, as the fleet says: a key's presence, never an error). So
  ``!run.ended && has(run.budget.remaining_cost_usd) && …`` is false without CEL for a run
  with no cost budget, and a session rule is false without CEL for a run with no session.
* Any other operand of ``&&``, ``||`` or ``!`` — a string, arithmetic, a function, another
  macro — is *unknown*. CEL's logical operators are commutative over
  errors and unknowns (``false && x`` and ``x && false`` are false, ``true || x`` is true,
  whatever ``x`` is), so three-valued logic, evaluated left to right and stopping at the
  first decisive part, gives CEL's answer whenever it gives one:
  ``!run.ended && has(run.budget.remaining_tool_calls) && …`` is false, without CEL, for every
  run that ended.
* Only expressions the CEL checker accepted are compiled here, so types agree (an int field is
  compared with an int) and the known fields are never absent.
* The engine asks the fast function first and takes a ``True`` or ``False`` as the answer CEL
  would give (``tests/test_rules_fast.py`` holds the two together); when it says ``None`` the
  CEL program runs. The message is rendered against the activation, built then, unless every
  placeholder is a plain signal (below).
* A condition with a string literal or a ternary is not split (quotes could hide an operator;
  ``?:`` binds looser than ``&&`` and ``||``): it is decided here only if it is entirely known.
* Generated from the parsed tree (field names checked against :data:`RUN_FIELDS`, literals
  re-printed from Python ints), never from the rule's text.
* A message placeholder that is a plain signal, ``${run.<field>}`` of an int, double, bool or
  string, is read from the RunState the same way (:func:`compile_fast_value`): the value
  ``signals()`` would hand CEL, which CEL hands back as it is. A value of another type than
  the signal's declared one is left to CEL.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from watchdog.core.rules.signals import BUDGET_INT_KEYS, DEFAULT_SESSION, SESSION_SCHEMA
from watchdog.core.runs.catalogue import (
    BUDGET_SCHEMA,
    NAMESPACE,
    RUN_SIGNALS,
    ListOf,
    MapOf,
    Signal,
)


def fast_fields(signals: Iterable[Signal] = RUN_SIGNALS) -> dict[str, str]:
    """The signals compared here (never absent: an int, a double or a bool), each with the
    code that reads it from the run (the catalogue's ``read``, as RunState.signals() reads it)."""
    return {signal.name: signal.read for signal in signals
            if signal.type is int or signal.type is float or signal.type is bool}


RUN_FIELDS: dict[str, str] = fast_fields()
# ${run.<field>} read without CEL: the scalar signals (ints, doubles, bools, strings), each with
# its code and declared type
VALUE_FIELDS: dict[str, tuple[str, type]] = {
    signal.name: (signal.read, signal.type) for signal in RUN_SIGNALS
    if signal.type is int or signal.type is float or signal.type is bool or signal.type is str}
# has(run.budget.<field>): the budget limit whose presence puts <field> in the budget view
BUDGET_LIMITS: dict[str, str] = {name: "max_" + name.removeprefix("max_").removeprefix(
    "remaining_") for name in BUDGET_SCHEMA}
# session.<field> compared here: the scalars (a list is CEL's)
SESSION_FIELDS: dict[str, type] = {name: kind for name, kind in SESSION_SCHEMA.items()
                                   if kind is int or kind is float or kind is bool}
# the run's collections a comprehension (exists, all) may range over: never absent
COLLECTIONS: dict[str, str] = {signal.name: signal.read for signal in RUN_SIGNALS
                               if isinstance(signal.type, (MapOf, ListOf))}
_RESERVED = frozenset({"run", "session", "fleet", "now", "budget", "true", "false", "null"})
_NO_BUDGET: dict[str, float] = {}

# (run, now, budget, session, fleet): the run, the time, the rule pack's budget for its agent,
# the session mapping the engine was handed (None: no session), the CEL fleet (None: no tool
# failing); the last three may be left out (none of each)
FastCondition = Callable[..., "bool | None"]
# (run, now, budget): a placeholder's value as CEL would give it
FastValue = Callable[[Any, float, "dict[str, float] | None"], Any]

_TOKEN = re.compile(
    r"\s*(?:"
    r"(\d+\.\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|0[xX][0-9a-fA-F]+[uU]?"
    r"|\d+[uU]?)"  # numbers (hex and unsigned ones are left to CEL)
    r"|(&&|\|\||==|!=|<=|>=|[-+*/%<>!().,\[\]{}:?])"
    r"|([A-Za-z_]\w*))")
_COMPARISONS = frozenset({"==", "!=", "<", "<=", ">", ">="})
_OPEN, _CLOSE = frozenset("([{"), frozenset(")]}")
_UNKNOWN = "None"  # the code of an unknown value


class _Unsupported(Exception):
    """Not decided here at all: CEL alone evaluates the condition."""


def compile_fast(source: str, fields: Mapping[str, str] = RUN_FIELDS) -> FastCondition | None:
    """A Python function of a run deciding ``source`` as CEL does (``None``: not known without
    CEL), or None when nothing of ``source`` can be decided here. ``source`` must already have
    passed the CEL checker as a condition; ``fields``: see :func:`fast_fields`."""
    try:
        tokens = _tokens(source)
        # a ternary has the lowest precedence: splitting at the && or || before its ? is wrong
        code, _partial = _Compiler(tokens, "?" not in tokens, fields).expression(
            0, len(tokens))
    except (_Unsupported, RecursionError):
        return None  # (nested deeper than Python compiles: CEL alone, which allows it)
    if code == _UNKNOWN:
        return None  # nothing known: asking would only cost time
    # (a known condition is a bool: the checker only lets bool conditions in)
    namespace: dict[str, Any] = {**NAMESPACE, "_not": _not,
                                 "_session": _session, "_none_failing": _none_failing,
                                 "_any_failing": _any_failing,
                                 "_budget": _budget,
                                 "_NO_BUDGET": _NO_BUDGET, "int": int, "bool": bool}
    try:
        function: FastCondition = eval(
            f"lambda run, now, budget=_NO_BUDGET, session=None, fleet=None: {code}", namespace)
    except (RecursionError, SyntaxError, MemoryError):
        # the code of a long chain of partly known parts nests one conditional in the next,
        # deeper than Python's compiler goes (thousands of `||`): CEL alone decides it
        return None
    return function


def compile_fast_value(source: str) -> tuple[FastValue, type] | None:
    """A placeholder that is a plain signal (``run.<field>``, see :data:`VALUE_FIELDS`) as a
    function of ``(run, now, budget)`` giving its value as ``signals()`` does, with the
    signal's declared type; None for anything else (CEL renders it)."""
    try:
        tokens = _tokens(source)
    except _Unsupported:
        return None
    if len(tokens) != 3 or tokens[0] != "run" or tokens[1] != "." \
            or tokens[2] not in VALUE_FIELDS:
        return None
    read, kind = VALUE_FIELDS[tokens[2]]
    function: FastValue = eval(f"lambda run, now, budget: {read}", dict(NAMESPACE))
    return function, kind


_INT = re.compile(r"\d+")
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_DOUBLE = re.compile(r"\d*\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+")  # CEL's double literals


def _number(token: str) -> int | float | None:
    """A decimal int or a double literal as Python's value (IEEE doubles, as CEL's)."""
    if _INT.fullmatch(token):
        return int(token)
    if _DOUBLE.fullmatch(token):
        return float(token)
    return None  # hex, unsigned: left to CEL


def _not(value: bool | None) -> bool | None:
    return None if value is None else not value


def _session(session: Mapping[str, Any] | None, key: str, kind: type, default: Any) -> Any:
    """``session.<key>`` as :func:`~watchdog.core.rules.signals.session_activation` makes it,
    or None (unknown) where it would convert the value."""
    if session is None:
        return default
    value = session.get(key)
    if value is None:
        return default
    return value if type(value) is kind else None


def _budget(run: Any, budget: dict[str, float], now: float, key: str) -> int | float | None:
    """``run.budget.<key>`` as the rules read it (:meth:`RunState.budget_view` as
    :func:`~watchdog.core.rules.signals.run_activation` converts it), None when it is absent
    (CEL's error: unknown here)."""
    value = run.budget_view(budget, now).get(key)
    if value is None:
        return None
    return int(value) if key in BUDGET_INT_KEYS else float(value)


def _none_failing(fleet: Mapping[str, Any] | None) -> bool | None:
    """``x in fleet.failing_tools`` is false for every x while no tool fails (else unknown)."""
    return False if fleet is None or not fleet["failing_tools"] else None


def _any_failing(items: Iterable[Any], fleet: Mapping[str, Any] | None) -> bool:
    """``items.exists(v, v in fleet.failing_tools)``: whether one of ``items`` is failing."""
    if fleet is None:
        return False
    failing = fleet["failing_tools"]
    return bool(failing) and any(item in failing for item in items)


def _tokens(source: str) -> list[str]:
    if any(quote in source for quote in "\"'`"):
        raise _Unsupported  # string literals: their text could look like operators
    tokens: list[str] = []
    position = 0
    end = len(source.rstrip())
    while position < end:
        match = _TOKEN.match(source, position)
        if match is None:
            raise _Unsupported
        tokens.append(match.group(match.lastindex or 0))
        position = match.end()
    return tokens


class _Compiler:
    """CEL precedence: ``||`` < ``&&`` < comparisons < ``!`` (and a literal's ``-``) <
    member access. Each method compiles ``tokens[lo:hi]`` to Python code and says whether that
    code may be unknown (``None``)."""

    def __init__(self, tokens: list[str], splittable: bool, fields: Mapping[str, str]) -> None:
        self.tokens = tokens
        self.splittable = splittable  # unknown parts allowed (no string, no top-level ?:)
        self.fields = fields
        self.names = 0  # the generated code's temporaries (_v0, _v1, ...)

    def _depths(self, lo: int, hi: int) -> Iterator[tuple[int, int]]:
        """Each index of ``tokens[lo:hi]`` with the bracket depth after its token (0: outside
        any bracket opened from ``lo``)."""
        depth = 0
        for index in range(lo, hi):
            token = self.tokens[index]
            if token in _OPEN:
                depth += 1
            elif token in _CLOSE:
                depth -= 1
            yield index, depth

    def _outside(self, lo: int, hi: int) -> list[int]:
        """The indexes of the tokens of ``tokens[lo:hi]`` outside any brackets."""
        tokens = self.tokens
        return [index for index, depth in self._depths(lo, hi)
                if depth == 0 and tokens[index] not in _CLOSE]

    def _split(self, lo: int, hi: int, operator: str) -> list[tuple[int, int]]:
        cuts = [i for i in self._outside(lo, hi) if self.tokens[i] == operator]
        parts = list(zip([lo, *(i + 1 for i in cuts)], [*cuts, hi], strict=True))
        if any(a >= b for a, b in parts):
            raise _Unsupported  # an operator with a missing operand: not CEL
        return parts

    def expression(self, lo: int, hi: int) -> tuple[str, bool]:
        return self._join(self._split(lo, hi, "||"), self._conjunction, " or ", True)

    def _conjunction(self, lo: int, hi: int) -> tuple[str, bool]:
        return self._join(self._split(lo, hi, "&&"), self._relation, " and ", False)

    def _join(self, parts: list[tuple[int, int]], compile_part: Callable[[int, int],
              tuple[str, bool]], python: str, decisive_value: bool) -> tuple[str, bool]:
        compiled = [compile_part(lo, hi) for lo, hi in parts]
        if len(compiled) == 1:
            return compiled[0]
        codes = [code for code, _ in compiled]
        if not any(partial for _, partial in compiled):
            return "(" + python.join(codes) + ")", False
        # three-valued, left to right, stopping at the first decisive part (CEL's && and ||
        # are commutative over errors and unknowns, so the rest cannot change the answer):
        # (False if (_v0 := a) is False else False if (_v1 := b) is False else
        #  None if _v0 is None or _v1 is None else True) for a && b
        decisive, other = repr(decisive_value), repr(not decisive_value)
        names: list[str | None] = []
        steps: list[str] = []
        for code, partial in compiled:
            if code == _UNKNOWN:
                names.append(None)
                continue
            if partial:
                name = f"_v{self.names}"
                self.names += 1
                names.append(name)
                steps.append(f"{decisive} if ({name} := {code}) is {decisive} else ")
            else:
                steps.append(f"{decisive} if {code} is {decisive} else ")
        unknown = [f"{name} is None" for name in names if name is not None]
        if None in names:  # a part never known: at best unknown
            last = "None"
        elif unknown:
            last = f"None if {' or '.join(unknown)} else {other}"
        else:
            last = other
        return "(" + "".join(steps) + last + ")", True

    def _relation(self, lo: int, hi: int) -> tuple[str, bool]:
        try:
            operators = [i for i in self._outside(lo, hi) if self.tokens[i] in _COMPARISONS]
            if not operators:
                return self._operand(lo, hi)
            if len(operators) > 1:
                raise _Unsupported  # a < b < c, or a comparison we cannot split
            at = operators[0]
            left, left_partial = self._operand(lo, at)
            right, right_partial = self._operand(at + 1, hi)
            if left == _UNKNOWN or right == _UNKNOWN:
                return self._unknown()
            operator = self.tokens[at]
            if not (left_partial or right_partial):
                return f"({left} {operator} {right})", False
            # an operand known at some evaluations only (a session field): unknown when it is
            tests, values = [], []
            for code, partial in ((left, left_partial), (right, right_partial)):
                if partial:
                    name = f"_v{self.names}"
                    self.names += 1
                    tests.append(f"({name} := {code}) is None")
                    code = name
                values.append(code)
            return (f"(None if {' or '.join(tests)} else ({values[0]} {operator} {values[1]}))",
                    True)
        except _Unsupported:
            return self._unknown()

    def _unknown(self) -> tuple[str, bool]:
        if not self.splittable:
            raise _Unsupported
        return _UNKNOWN, True

    def _operand(self, lo: int, hi: int) -> tuple[str, bool]:
        tokens = self.tokens[lo:hi]
        if not tokens:
            raise _Unsupported
        first = tokens[0]
        if first == "!":
            code, partial = self._operand(lo + 1, hi)
            return (f"_not({code})", True) if partial else (f"(not {code})", False)
        if first == "(" and self._closing(lo) == hi - 1:
            return self.expression(lo + 1, hi - 1)
        if len(tokens) == 1 and first in ("true", "false"):
            return repr(first == "true"), False
        number = tokens[1:] if first == "-" else tokens
        if len(number) == 1 and (value := _number(number[0])) is not None:
            return repr(-value if first == "-" else value), False
        if len(tokens) == 3 and first == "run" and tokens[1] == "." and tokens[2] in self.fields:
            return self.fields[tokens[2]], False
        guard = self._guard(lo, hi, tokens)
        if guard is not None:
            return guard
        return self._unknown()

    def _guard(self, lo: int, hi: int, tokens: list[str]) -> tuple[str, bool] | None:
        """The code of an atom known from the budget, the session or the fleet (module
        docstring), or None when ``tokens`` is none of them."""
        first = tokens[0]
        if (len(tokens) == 8 and tokens[:6] == ["has", "(", "run", ".", "budget", "."]
                and tokens[6] in BUDGET_LIMITS and tokens[7] == ")"):
            limit = BUDGET_LIMITS[tokens[6]]
            return f"({limit!r} in run.budget or {limit!r} in budget)", False
        if len(tokens) == 5 and tokens[:4] == ["run", ".", "budget", "."] \
                and tokens[4] in BUDGET_LIMITS:
            self._partial_allowed()
            return f"_budget(run, budget, now, {tokens[4]!r})", True
        if len(tokens) == 3 and first == "session" and tokens[1] == "." \
                and tokens[2] in SESSION_FIELDS:
            self._partial_allowed()
            name = tokens[2]
            kind = SESSION_FIELDS[name]
            return (f"_session(session, {name!r}, {kind.__name__}, "
                    f"{DEFAULT_SESSION[name]!r})"), True
        if (len(tokens) == 5 and tokens[1:] == ["in", "fleet", ".", "failing_tools"]
                and _IDENTIFIER.fullmatch(first) and first not in _RESERVED):
            self._partial_allowed()
            return "_none_failing(fleet)", True
        if (len(tokens) >= 10 and first == "run" and tokens[1] == "." and tokens[2] in COLLECTIONS
                and tokens[3] == "." and tokens[4] in ("exists", "all") and tokens[5] == "("
                and _IDENTIFIER.fullmatch(tokens[6]) and tokens[6] not in _RESERVED
                and tokens[7] == "," and self._closing(lo + 5) == hi - 1):
            if tokens[4] == "exists" and tokens[8:hi - lo - 1] == [
                    tokens[6], "in", "fleet", ".", "failing_tools"]:
                # whether one of the run's tools (map keys, list items) is failing: known
                return f"_any_failing({COLLECTIONS[tokens[2]]}, fleet)", False
            self._partial_allowed()
            # the predicate's code never reads the variable (an unknown wherever it is used):
            # an answer it gives holds for every element
            code, _partial = self.expression(lo + 8, hi - 1)
            if code == _UNKNOWN:
                return self._unknown()
            # empty or not, exists of false is false and all of true is true (else: CEL)
            decisive = "False" if tokens[4] == "exists" else "True"
            return f"({decisive} if {code} is {decisive} else None)", True
        return None

    def _partial_allowed(self) -> None:
        if not self.splittable:
            raise _Unsupported

    def _closing(self, lo: int) -> int:
        """The index of the bracket that closes the one at ``lo``."""
        for index, depth in self._depths(lo, len(self.tokens)):
            if depth == 0:
                return index
        raise _Unsupported


# The time signals that only grow while a run's state stands still (its age, how long it has
# been idle, how long its oldest call has run): a condition comparing one of them to a literal
# as ``field > N`` (or ``>=``, or ``N < field``) turns true at most once as time goes on
RISING = frozenset({"elapsed_seconds", "idle_seconds", "in_flight_seconds"})


@functools.lru_cache(maxsize=4096)  # (asked at each booking, of the same few conditions)
def rises_with_time(source: str) -> bool:
    """Whether the condition ``source`` can only turn from false to true as time goes on,
    while nothing else about the run changes: a conjunction (``&&`` at the top level, no
    ``||``, no ``?:``, no ``now``) whose every part that names a time signal is a comparison
    of a :data:`RISING` signal with a number that is true above a threshold, and whose other
    parts name no signal of seconds at all. False for anything else (not known to rise)."""
    try:
        tokens = _tokens(source)
    except _Unsupported:
        return False
    if any(token in ("||", "?", ":", "now") for token in tokens):
        return False
    parts: list[list[str]] = [[]]
    depth = 0
    for token in tokens:
        if token in _OPEN:
            depth += 1
        elif token in _CLOSE:
            depth -= 1
        if token == "&&" and depth == 0:
            parts.append([])
        else:
            parts[-1].append(token)
    for part in parts:
        if not any("seconds" in token for token in part):
            continue
        if len(part) != 5 or _number(part[-1] if part[0] == "run" else part[0]) is None:
            return False
        if part[0] == "run":
            rising = part[1] == "." and part[2] in RISING and part[3] in (">", ">=")
        else:
            rising = part[2] == "run" and part[3] == "." and part[4] in RISING \
                and part[1] in ("<", "<=")
        if not rising:
            return False
    return True
