"""Conditions the engine can decide without CEL: comparisons of a run's counters.

Most rule conditions are of one shape — ``!run.ended && run.repeated_error >= 5`` — and on the
ingest path most evaluations of them come out false. Evaluating one with CEL needs the run's
whole ``signals()`` dict and an activation (~10 µs per run evaluation, the largest part of rule
evaluation). :func:`compile_fast` turns a condition of that shape into a Python function of the
:class:`~watchdog.runs.run.RunState` itself, reading only the attributes it names.

Theory of operation
-------------------
* The subset: ``&&``, ``||``, ``!``, parentheses, and the six comparisons between fields of
  :data:`RUN_FIELDS` (counters and flags that are RunState attributes of the same name and
  type as the signal) and int or bool literals. Anything else — another variable, a budget, a
  time signal, a string, a double, arithmetic, a function — leaves the rule to CEL alone
  (:func:`compile_fast` returns None).
* Only expressions the CEL checker accepted are compiled here, so types agree (an int field is
  compared with an int); the fields always exist and are never absent, so no CEL error value
  can occur, and ``&&``/``||`` short-circuiting gives CEL's result.
* The engine asks the fast function first; only when it says *true* is the CEL program run —
  the authority for what fires, and what the message template is rendered against.
* Generated from the parsed tree (field names checked against :data:`RUN_FIELDS`, literals
  re-printed from Python ints), never from the rule's text.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

# Signals that are RunState attributes of the same name, as ints or bools, never absent.
RUN_FIELDS = frozenset({
    "iterations", "tool_calls", "messages", "input_tokens", "output_tokens", "total_tokens",
    "errors", "consecutive_errors", "repeated_error", "repeated_tool_call",
    "repeated_tool_result", "cycle_repeats", "has_final_answer", "ended"})

FastCondition = Callable[[Any], bool]

_TOKEN = re.compile(r"\s*(?:(\d+)(?![\w.])|(&&|\|\||==|!=|<=|>=|[<>!().-])|([A-Za-z_]\w*))")
_COMPARISONS = {"==", "!=", "<", "<=", ">", ">="}


class _Unsupported(Exception):
    """Outside the subset: CEL alone evaluates the condition."""


def compile_fast(source: str) -> FastCondition | None:
    """A Python function of a run deciding ``source`` as CEL does, or None when ``source`` is
    outside the subset. ``source`` must already have passed the CEL checker as a condition."""
    try:
        tokens = _tokens(source)
        parser = _Parser(tokens)
        code = parser.expression()
        if parser.position != len(tokens):
            raise _Unsupported
    except _Unsupported:
        return None
    # (every expression of the subset is a bool, and the checker only lets bool conditions in)
    function: FastCondition = eval(f"lambda run: {code}", {"__builtins__": {}})
    return function


def _tokens(source: str) -> list[str]:
    tokens: list[str] = []
    position = 0
    end = len(source.rstrip())
    while position < end:
        match = _TOKEN.match(source, position)
        if match is None:
            raise _Unsupported  # a string, a double, an operator CEL has and this does not
        tokens.append(match.group(match.lastindex or 0))
        position = match.end()
    return tokens


class _Parser:
    """CEL precedence: ``||`` < ``&&`` < comparisons < ``!`` (and a literal's ``-``)."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens
        self.position = 0

    def _peek(self) -> str | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def _take(self) -> str:
        token = self._peek()
        if token is None:
            raise _Unsupported
        self.position += 1
        return token

    def expression(self) -> str:
        parts = [self._conjunction()]
        while self._peek() == "||":
            self._take()
            parts.append(self._conjunction())
        return parts[0] if len(parts) == 1 else "(" + " or ".join(parts) + ")"

    def _conjunction(self) -> str:
        parts = [self._comparison()]
        while self._peek() == "&&":
            self._take()
            parts.append(self._comparison())
        return parts[0] if len(parts) == 1 else "(" + " and ".join(parts) + ")"

    def _comparison(self) -> str:
        left = self._unary()
        operator = self._peek()
        if operator in _COMPARISONS:
            self._take()
            right = self._unary()
            if self._peek() in _COMPARISONS:
                raise _Unsupported  # a < b < c: not CEL (bool < int), leave it to the checker
            return f"({left} {operator} {right})"
        return left

    def _unary(self) -> str:
        token = self._take()
        if token == "!":
            return f"(not {self._unary()})"
        if token == "-":
            digits = self._take()
            if not digits.isdigit():
                raise _Unsupported  # negation of anything but a literal
            return repr(-int(digits))
        if token == "(":
            inner = self.expression()
            if self._take() != ")":
                raise _Unsupported
            return inner
        if token.isdigit():
            return repr(int(token))
        if token in ("true", "false"):
            return repr(token == "true")
        if token == "run" and self._peek() == ".":
            self._take()
            field = self._take()
            if field not in RUN_FIELDS or self._peek() in (".", "("):
                raise _Unsupported
            return f"run.{field}"
        raise _Unsupported
