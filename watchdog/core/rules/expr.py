"""CEL expressions: compile rule conditions and ``${expr}`` message templates, evaluate them.

Theory of operation
-------------------
Every expression is compiled twice, both at load time. The *checker* environment declares ``run``
and ``session`` as protobuf message types built from :mod:`watchdog.core.rules.signals` (descriptors
made in Python, no ``.proto`` files), so an unknown variable, an unknown field, a type error or a
condition that is not a bool is refused with its line and column before any run is seen. The
*runtime* environment declares both variables as ``map(string, dyn)`` and evaluates on the plain
dicts that :meth:`RunState.signals` returns, which costs a couple of microseconds per rule once
the activation is built (one activation per run evaluation, shared by all rules).

At evaluation time cel-expr-python returns errors as values, not exceptions (an absent budget key
is ``NOT_FOUND``); :meth:`Expr.evaluate` turns them into :class:`EvalError`, which the engine
counts as "did not match" plus a rule error.

Each checked expression's cost is bounded before it is accepted (:mod:`watchdog.core.rules.cost`):
cel-expr-python has no cost limit of its own, so a rule whose evaluation could make megabytes
(a chain of ``replace``, a comprehension over one) is refused at load, with its position.

A third compile, against a schema without the time-dependent signals, tells whether an expression
reads one of them (:attr:`Expr.timed`): only such rules need evaluating on a timer.

A condition with parts that compare a run's counters and flags also gets :attr:`Expr.fast`, a
Python function of the run that the engine asks first (:mod:`watchdog.core.rules.fast`): no
activation is built for a run whose conditions all come out false that way.

cel-expr-python (its libraries are some 13 MB resident) and the protobuf descriptor modules are
imported with the environments, at the first expression checked or evaluated, not with this
module: a sidecar without rules never loads them, and one with only the shipped packs loads them
when a rule first needs CEL (their checks ship with them: :mod:`watchdog.core.rules.checked`).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from watchdog.core.rules import checked
from watchdog.core.rules.cost import CostError, check_cost
from watchdog.core.rules.fast import FastCondition, FastValue, compile_fast, compile_fast_value
from watchdog.core.rules.signals import NO_FLEET, SCHEMAS, TIME_DEPENDENT, field_names
from watchdog.core.runs.catalogue import FieldType, ListOf, MapOf, Maybe, Schema

if TYPE_CHECKING:
    from cel_expr_python import cel

PACKAGE = "watchdog.rules"
MAX_DECIMALS = 6  # doubles in messages: at most this many decimals, never an exponent

_WRAPPERS = {bool: ".google.protobuf.BoolValue", int: ".google.protobuf.Int64Value",
             float: ".google.protobuf.DoubleValue", str: ".google.protobuf.StringValue"}


@cache
def _cel() -> Any:
    """The ``cel`` module, imported at first use."""
    from cel_expr_python import cel as module

    return module


@cache
def _fdp() -> Any:
    """``FieldDescriptorProto``, imported at first use."""
    from google.protobuf import descriptor_pb2

    return descriptor_pb2.FieldDescriptorProto


def _scalar(kind: type) -> Any:
    fdp = _fdp()
    return {bool: fdp.TYPE_BOOL, int: fdp.TYPE_INT64, float: fdp.TYPE_DOUBLE,
            str: fdp.TYPE_STRING}[kind]


class EvalError(Exception):
    """An expression failed at evaluation (absent key, division by zero, bad regex...)."""


@dataclass(frozen=True, slots=True)
class Issue:
    """One compile problem; ``line`` and ``column`` are 1-based within the expression text."""

    line: int
    column: int
    message: str


class ExprError(Exception):
    """An expression was refused at load: every problem CEL found, with its position."""

    def __init__(self, issues: list[Issue]) -> None:
        super().__init__("; ".join(f"{i.line}:{i.column}: {i.message}" for i in issues))
        self.issues = issues


# -- environments ---------------------------------------------------------------------------------

def _type_name(path: str) -> str:
    return ".".join(part.title().replace("_", "") for part in path.split("."))


def _add_message(container: Any, path: str, schema: Schema, omit: dict[str, frozenset[str]],
                 struct_paths: dict[str, str]) -> None:
    """Declare ``schema`` as message ``path`` (``run``, ``run.budget``) in ``container``."""
    local = path.rsplit(".", 1)[-1].title().replace("_", "")
    message = container.add(name=local)
    full = f"{PACKAGE}.{_type_name(path)}"
    struct_paths[full] = path
    skipped = omit.get(path, frozenset())
    for number, (name, kind) in enumerate(schema.items(), 1):
        if name in skipped:
            continue
        field = message.field.add(name=name, number=number, label=_fdp().LABEL_OPTIONAL)
        _declare(message, field, f"{path}.{name}", kind, omit, struct_paths)


def _declare(message: Any, field: Any, path: str, kind: FieldType,
             omit: dict[str, frozenset[str]], struct_paths: dict[str, str]) -> None:
    fdp = _fdp()
    if isinstance(kind, dict):
        _add_message(message.nested_type, path, kind, omit, struct_paths)
        field.type = fdp.TYPE_MESSAGE
        field.type_name = f".{PACKAGE}.{_type_name(path)}"
    elif isinstance(kind, Maybe):
        field.type = fdp.TYPE_MESSAGE
        field.type_name = _WRAPPERS[kind.type]
    elif isinstance(kind, MapOf):
        entry = message.nested_type.add(name=field.name.title().replace("_", "") + "Entry")
        entry.options.map_entry = True
        entry.field.add(name="key", number=1, type=_scalar(kind.key), label=fdp.LABEL_OPTIONAL)
        value = entry.field.add(name="value", number=2, label=fdp.LABEL_OPTIONAL)
        if isinstance(kind.value, dict):  # a struct per key, declared beside the entry
            _add_message(message.nested_type, f"{path}_value", dict(kind.value), omit,
                         struct_paths)
            value.type = fdp.TYPE_MESSAGE
            value.type_name = f".{PACKAGE}.{_type_name(path + '_value')}"
            struct_paths[value.type_name[1:]] = f"{path}[*]"  # as rule authors write it
        else:
            value.type = _scalar(kind.value)
        field.type = fdp.TYPE_MESSAGE
        field.type_name = f".{PACKAGE}.{_type_name(path.rsplit('.', 1)[0])}.{entry.name}"
        field.label = fdp.LABEL_REPEATED
    elif isinstance(kind, ListOf):
        field.type = _scalar(kind.item)
        field.label = fdp.LABEL_REPEATED
    else:
        field.type = _scalar(kind)


def _extensions() -> list[cel.CelExtensionBase]:
    from cel_expr_python.ext import ext_math, ext_strings

    return [ext_strings.ExtStrings(), ext_math.ExtMath()]


def checker(schemas: dict[str, Schema], omit: dict[str, frozenset[str]] | None = None,
            struct_paths: dict[str, str] | None = None) -> cel.Env:
    """The checking environment declaring ``schemas`` (variable -> schema; :data:`SCHEMAS` for
    rules) without the fields in ``omit``; ``struct_paths`` collects each declared message's
    variable path."""
    from google.protobuf import descriptor_pb2, descriptor_pool, struct_pb2, wrappers_pb2

    cel = _cel()
    omit = omit if omit is not None else {}
    struct_paths = struct_paths if struct_paths is not None else {}
    pool = descriptor_pool.DescriptorPool()
    for module in (wrappers_pb2, struct_pb2):
        file_proto = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(file_proto)
        pool.Add(file_proto)
    schema_file = descriptor_pb2.FileDescriptorProto(
        name="watchdog_rules_signals.proto", package=PACKAGE, syntax="proto3",
        dependency=["google/protobuf/wrappers.proto", "google/protobuf/struct.proto"])
    for variable, schema in schemas.items():
        _add_message(schema_file.message_type, variable, schema, omit, struct_paths)
    pool.Add(schema_file)
    variables = {v: cel.Type(f"{PACKAGE}.{_type_name(v)}") for v in schemas}
    return cel.NewEnv(pool, variables=variables, extensions=_extensions())


class _Envs:
    """The three environments, built once on first use (about a millisecond)."""

    def __init__(self) -> None:
        cel = _cel()
        self.struct_paths: dict[str, str] = {}  # "watchdog.rules.Run.Budget" -> "run.budget"
        self.checker = checker(SCHEMAS, {}, self.struct_paths)
        self.timeless = checker(SCHEMAS, TIME_DEPENDENT)
        map_dyn = cel.Type.Map(cel.Type.STRING, cel.Type.DYN)
        self.runtime = cel.NewEnv(variables={v: map_dyn for v in SCHEMAS},
                                  extensions=_extensions())


_envs: _Envs | None = None


def _environments() -> _Envs:
    global _envs
    if _envs is None:
        _envs = _Envs()
    return _envs


def activation(run: dict[str, Any], session: dict[str, Any],
               fleet: dict[str, Any] | None = None) -> cel.Activation:
    """One activation per run evaluation, shared by all rules (converted lazily, once)."""
    return _environments().runtime.Activation(
        {"run": run, "session": session, "fleet": fleet if fleet is not None else NO_FLEET})


# -- compiled expressions -------------------------------------------------------------------------

_VARIABLE = re.compile(r"(?<![\w.])(run|session|fleet)\b(\s*\.\s*(\w+))?")
EVERYTHING = None  # "reads" of an expression that uses ``run``/``session`` as a whole


def signals_read(source: str) -> frozenset[str] | None:
    """The signals an already-checked expression reads: ``run.<field>`` names, ``session``
    and ``fleet``.

    An over-approximation is safe (a rule is evaluated more often than needed, never less): a
    name inside a string literal counts too, and ``run`` used as a whole (``[run].exists(...)``)
    means everything (None).
    """
    reads: set[str] = set()
    for match in _VARIABLE.finditer(source):
        variable, field = match.group(1), match.group(3)
        if variable != "run":
            reads.add(variable)
        elif field is None:
            return EVERYTHING
        else:
            reads.add(field)
    return frozenset(reads)


class Expr:
    """A checked CEL expression, ready to evaluate on an :func:`activation`."""

    __slots__ = ("_program", "fast", "reads", "result_type", "source", "timed")

    def __init__(self, source: str, program: cel.Expression | None, result_type: str,
                 timed: bool, fast: FastCondition | None = None) -> None:
        self.source = source
        self._program = program
        self.result_type = result_type  # the checker's type name: BOOL, INT, STRING...
        self.timed = timed  # reads a signal that changes with time alone
        self.reads = signals_read(source)  # run fields (and "session"); None: all of them
        # a condition decided on the RunState itself (None: CEL only); see watchdog.core.rules.fast
        self.fast = fast

    @property
    def program(self) -> cel.Expression:
        """The runtime program (compiled here at first use when the check was shipped)."""
        if self._program is None:
            self._program = _environments().runtime.compile(self.source)
        return self._program

    def evaluate(self, act: cel.Activation) -> Any:
        """The value as plain Python, or :class:`EvalError`."""
        try:
            value = self.program.eval(act)
        except RuntimeError as exc:  # internal limits (e.g. the comprehension budget) raise
            raise EvalError(str(exc)) from None
        if value.type() == _cel().Type.ERROR:
            raise EvalError(str(value.value()))
        return value.plain_value()

    def matches(self, act: cel.Activation) -> bool:
        """Evaluate a condition: ``True``/``False``, or :class:`EvalError`."""
        try:
            result = self.program.eval(act).plain_value()
        except RuntimeError as exc:
            raise EvalError(str(exc)) from None
        if result is True or result is False:
            return result
        # An error value's plain value is its message; a dyn condition may yield a non-bool.
        if isinstance(result, str):
            raise EvalError(result)
        raise EvalError(f"condition returned {format_value(result)}, not a bool")

    def __repr__(self) -> str:
        return f"Expr({self.source!r})"


# While set (by :func:`watchdog.core.rules.write_checked.check_shipped`): every expression checked
# with CEL, with its result type and whether it is timed.
recorded: checked.Checks | None = None


def compile_expr(source: str, *, condition: bool = False) -> Expr:
    """Check and compile ``source``; a condition must be a bool. Raises :class:`ExprError`."""
    if not source.strip():
        raise ExprError([Issue(1, 1, "empty expression")])
    _check_text(source)
    known = checked.shipped().get(source) if recorded is None else None
    if known is not None:  # a shipped pack's: checked ahead, compiled at its first evaluation
        result_type, timed = known
        _check_condition(condition, result_type)
        return Expr(source, None, result_type, timed,
                    compile_fast(source) if condition else None)
    envs = _environments()
    try:
        program = envs.checker.compile(source)
    except RuntimeError as exc:
        raise ExprError(_issues(str(exc), source, envs.struct_paths)) from None
    result_type = program.return_type().name()
    _check_condition(condition, result_type)
    try:
        check_cost(program.serialize())
    except CostError as exc:
        line, column = _position(source, exc.offset)
        raise ExprError([Issue(line, column, str(exc))]) from None
    try:
        envs.timeless.compile(source)
        timed = False
    except RuntimeError:
        timed = True  # it names a field the time-free schema lacks
    if recorded is not None:
        recorded[source] = (result_type, timed)
    return Expr(source, envs.runtime.compile(source), result_type, timed,
                compile_fast(source) if condition else None)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _check_text(source: str) -> None:
    """An expression is Unicode text: an unpaired surrogate (YAML's ``"\\ud800"`` escape) is
    no character CEL can read."""
    found = _SURROGATE.search(source)
    if found is not None:
        line = source.count("\n", 0, found.start()) + 1
        column = found.start() - (source.rfind("\n", 0, found.start()) + 1) + 1
        raise ExprError([Issue(line, column, f"U+{ord(found.group()):04X} is an unpaired "
                                             "surrogate, no character: write the character "
                                             "itself")])


def _check_condition(condition: bool, result_type: str) -> None:
    if condition and result_type not in ("BOOL", "DYN"):
        raise ExprError([Issue(1, 1, f"must be a bool condition, but it is of type "
                                     f"{result_type.lower()}")])


_STATUS = re.compile(r"^([A-Z_]+): (.*) \[\1\]$", re.S)
_DEPTH = re.compile(r"^Expression recursion limit exceeded\. limit: (\d+)$")
_ERROR_HEAD = re.compile(r"^ERROR: <input>:(\d+):(\d+): (.*)$")
_STRUCT = re.compile(r"undefined field '(\w+)' not found in struct '([\w.]+)'")
_OVERLOAD = re.compile(r"found no matching overload for '([^']+)' applied to '\((.*)\)'")
_RIGHT_INT = re.compile(r"^[<>=!+\-*/%]*\s*(-?\d+)(?![\w.])")
_LEFT_INT = re.compile(r"(?<![\w.])(-?\d+)\s*$")
_RIGHT_DOUBLE = re.compile(r"^[<>=!+\-*/%]*\s*(-?\d+)\.(\d*)(?![\w.])")
_LEFT_DOUBLE = re.compile(r"(?<![\w.])(-?\d+)\.(\d*)\s*$")
_OPERATORS = {"_>_": ">", "_>=_": ">=", "_<_": "<", "_<=_": "<=", "_==_": "==", "_!=_": "!=",
              "_+_": "+", "_-_": "-", "_*_": "*", "_/_": "/", "_%_": "%", "_&&_": "&&",
              "_||_": "||", "_?_:_": "?:", "!_": "!", "-_": "-"}


def _issues(text: str, source: str, struct_paths: dict[str, str]) -> list[Issue]:
    """CEL's compile error text (one ``ERROR: <input>:L:C: msg`` block per problem, each with a
    caret snippet) as issues with messages rewritten for rule authors."""
    status = _STATUS.match(text)  # "CODE: message [CODE]", the status of the C++ library
    if status is not None:
        text = status.group(2)
    issues = []
    for line in text.splitlines():
        head = _ERROR_HEAD.match(line)
        if head is not None:
            row, column = int(head.group(1)), int(head.group(2))
            issues.append(Issue(row, column, _explain(head.group(3), source, row, column,
                                                      struct_paths)))
    if not issues:
        first = text.strip().splitlines()[0] if text.strip() else "invalid"
        depth = _DEPTH.match(first)
        if depth is not None:
            first = f"nested more than {depth.group(1)} levels deep (CEL's limit)"
        issues.append(Issue(1, 1, first))
    return issues


def _explain(message: str, source: str, row: int, column: int,
             struct_paths: dict[str, str]) -> str:
    struct = _STRUCT.search(message)
    if struct is not None:
        field, owner = struct.group(1), struct_paths.get(struct.group(2), struct.group(2))
        known = field_names(owner)
        import difflib  # (only a misspelling needs it)

        close = difflib.get_close_matches(field, known, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else f" (fields: {', '.join(known)})"
        return f"unknown field '{field}' in {owner}{hint}"
    if message.startswith("undeclared reference to "):
        message = message.replace(" (in container '')", "")
        return f"{message} (the variables are run, session and fleet)"
    if message.startswith("Syntax error:"):
        message = re.sub(r" expecting (\{.*\}|'.*')$", "", message)
        message = message.replace("mismatched input '<EOF>'", "unexpected end of expression")
        message = message.replace("mismatched input", "unexpected")
        return message.replace("Syntax error:", "syntax error:")
    overload = _OVERLOAD.search(message)
    if overload is not None:
        operator = _OPERATORS.get(overload.group(1), overload.group(1))
        operands = overload.group(2)
        text = f"no operator '{operator}' for ({operands})"
        if "double" in operands and "int" in operands:
            text += "; hint: CEL does not mix int and double; " + _number_hint(source, row,
                                                                                column)
        return text
    return message


def _number_hint(source: str, row: int, column: int) -> str:
    lines = source.splitlines() or [source]
    line = lines[row - 1] if row - 1 < len(lines) else ""
    literal = (_RIGHT_INT.search(line[column - 1:]) or _LEFT_INT.search(line[:column - 1]))
    if literal is not None:
        return f"write {literal.group(1)}.0"
    # a double literal beside a count (run.errors > 3.0): the count is the int
    double = (_RIGHT_DOUBLE.search(line[column - 1:]) or _LEFT_DOUBLE.search(line[:column - 1]))
    if double is not None:
        whole, fraction = double.groups()
        if not fraction.strip("0"):
            return f"counts are ints: write {whole}"
        return f"counts are ints: compare double(COUNT) with {whole}.{fraction}"
    return "write the literal as a double (300.0) or convert with double(...) / int(...)"


# -- message templates ----------------------------------------------------------------------------

class Template:
    """A message with ``${expr}`` placeholders (``$${`` is a literal ``${``)."""

    __slots__ = ("_fast", "_parts", "reads", "text", "timed")

    def __init__(self, text: str, parts: list[str | Expr]) -> None:
        self.text = text
        self._parts = parts
        self.timed = any(isinstance(p, Expr) and p.timed for p in parts)
        # every placeholder a plain signal (watchdog.core.rules.fast): the message rendered
        # from the RunState, no activation (None: some placeholder is CEL's)
        fast: list[str | tuple[FastValue, type]] = []
        for part in parts:
            value = part if isinstance(part, str) else compile_fast_value(part.source)
            if value is None:
                fast = []
                break
            fast.append(value)
        self._fast: tuple[str | tuple[FastValue, type], ...] | None = \
            tuple(fast) if fast else None
        reads: frozenset[str] | None = frozenset()
        for part in parts:
            if isinstance(part, Expr):
                reads = None if reads is None or part.reads is None else reads | part.reads
        self.reads = reads

    def render(self, act: cel.Activation) -> tuple[str, list[str]]:
        """The message, and the errors of placeholders that failed (shown as ``<error>``)."""
        parts = self._parts
        if len(parts) == 1 and isinstance(parts[0], str):
            return parts[0], []
        out: list[str] = []
        errors: list[str] = []
        for part in parts:
            if isinstance(part, str):
                out.append(part)
                continue
            try:
                out.append(format_value(part.evaluate(act)))
            except EvalError as exc:
                errors.append(f"${{{part.source}}}: {exc}")
                out.append("<error>")
        return "".join(out), errors

    def render_fast(self, run: Any, now: float, budget: dict[str, float] | None) -> str | None:
        """The message :meth:`render` gives on ``run``'s activation, read from the RunState
        itself (``budget``: the rule pack's for its agent), when every placeholder is a plain
        signal of its declared type; None: ask :meth:`render`."""
        parts = self._fast
        if parts is None:
            return None
        out: list[str] = []
        for part in parts:
            if isinstance(part, str):
                out.append(part)
                continue
            read, kind = part
            value = read(run, now, budget)
            if type(value) is not kind:
                return None  # (CEL converts it its own way)
            out.append(format_value(value))
        return "".join(out)


# ``{{ run.x }}`` (Helm, Jinja) or ``{run.x}`` (Python) where ``${run.x}`` was meant: sent to the
# agent as written, never rendered
NOT_A_PLACEHOLDER = re.compile(r"\{\{?\s*((?:run|session|fleet)\.[\w.\[\]'\"]*)\s*\}\}?")


def compile_template(text: str) -> Template:
    """Parse and compile every placeholder; positions in :class:`ExprError` are within ``text``."""
    _check_text(text)  # (the message goes into directives, webhooks and the model's prompt)
    parts: list[str | Expr] = []
    issues: list[Issue] = []
    literal: list[str] = []
    i = 0
    while i < len(text):
        if text.startswith("$${", i):
            literal.append("${")
            i += 3
            continue
        if not text.startswith("${", i):
            wrong = NOT_A_PLACEHOLDER.match(text, i) if text[i] == "{" else None
            if wrong is not None:
                issues.append(Issue(*_position(text, i), f"'{wrong.group()}' is not a "
                                                         f"placeholder: write ${{{wrong[1]}}}"))
                i = wrong.end()
                continue
            literal.append(text[i])
            i += 1
            continue
        end = _closing_brace(text, i + 2)
        if end < 0:
            issues.append(Issue(*_position(text, i), "unclosed '${' (a placeholder ends with '}'; "
                                                     "write $${ for a literal ${)"))
            break
        source = text[i + 2:end]
        if literal:
            parts.append("".join(literal))
            literal = []
        try:
            parts.append(compile_expr(source))
        except ExprError as exc:
            row, column = _position(text, i + 2)
            for issue in exc.issues:
                at_row = row + issue.line - 1
                at_column = column + issue.column - 1 if issue.line == 1 else issue.column
                issues.append(Issue(at_row, at_column, f"${{{source.strip()}}}: "
                                                       f"{issue.message}"))
        i = end + 1
    if issues:
        raise ExprError(issues)
    if literal or not parts:
        parts.append("".join(literal))
    return Template(text, parts)


def _closing_brace(text: str, start: int) -> int:
    """Index of the ``}`` closing a placeholder whose expression starts at ``start`` (CEL map
    literals nest braces; string literals may hold any), or -1."""
    depth = 0
    i = start
    while i < len(text):
        char = text[i]
        if char in "\"'":
            quote = text[i:i + 3] if text[i:i + 3] in ('"""', "'''") else char
            i += len(quote)
            while i < len(text) and not text.startswith(quote, i):
                i += 2 if text[i] == "\\" else 1
            i += len(quote)
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            if depth == 0:
                return i
            depth -= 1
        i += 1
    return -1


def _position(text: str, offset: int) -> tuple[int, int]:
    row = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return row, column


# -- values in messages ---------------------------------------------------------------------------

def format_value(value: Any) -> str:
    """A CEL value as message text: ints as ints, doubles positional (``301.5``, ``3``, never
    ``3e+06``), strings bare, bools ``true``/``false``, lists and maps as JSON."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _format_double(value)
    if isinstance(value, str):
        return value
    if value is None:
        return "null"
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)
    return str(value)


def _format_double(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value.is_integer():
        return str(int(value))
    text = f"{value:.{MAX_DECIMALS}f}".rstrip("0").rstrip(".")
    if text in ("0", "-0"):  # smaller than the decimals shown: all its digits, positionally
        from decimal import Decimal  # (rare: not loaded before, 0.4 MB)

        text = format(Decimal(repr(value)), "f")
    return text
