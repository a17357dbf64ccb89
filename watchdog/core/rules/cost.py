"""A static bound on what one evaluation of a CEL expression can cost, checked at load.

Theory of operation
-------------------
cel-expr-python has no cost limit: ``x.replace("a", "aaaaaaaaaa")`` makes a string up to ten
times longer, and a few of them chained make gigabytes from a tool's error message. Rules come
from operators, so such a rule is refused at load, with its position, before it meets a run.

The checked expression (``Expression.serialize()``: a ``cel.expr.CheckedExpr`` in an ``Any``) is
read here with a plain protobuf wire reader (its field numbers are CEL's published
``syntax.proto`` / ``checked.proto``), and each node is given an upper bound on its *size* (a
string's characters, a list's or map's entries and the size of each) and its *cost* (the sizes
of everything made to evaluate it, a comprehension's step once per element). Inputs are taken
at bounds no signal exceeds in practice (:data:`STRING_CHARS`, :data:`COLLECTION_ENTRIES`);
what matters is growth: a rule that only compares, counts, or writes a few signals into a
message costs thousands, a chain of ``replace`` that multiplies millions and more.
An expression whose bound exceeds :data:`MAX_COST` is refused, at the node where the bound
first passes it. Functions not known here are bounded by what their arguments hold (or 1 for
a number or bool), which holds for every function the rule environments declare.
"""

from __future__ import annotations

from dataclasses import dataclass

# No string signal is longer (names and ids: 200 characters, an error message or a brief:
# 500; watchdog.core.spans.values), no list or map has more entries (run.tools: 64 tools,
# fleet.failing_tools: 256, session.agent_cycle: 4)
STRING_CHARS = 512
COLLECTION_ENTRIES = 256
SCALAR = 1
MAX_COST = 10_000_000  # about 10 MB made per evaluation: far above any useful rule
MAX_DEPTH = 200  # nodes nested (CEL itself refuses deeper expressions)

# cel.expr.Type.PrimitiveType
_STRING, _BYTES = 5, 6
_REFERENCES = frozenset({"_[_]", "_?_:_", "dyn"})  # hand on a value, make none
_KEEP_SIZE = frozenset({"lowerAscii", "upperAscii", "trim", "reverse", "substring",
                        "charAt", "dyn", "string_to_string"})


@dataclass(frozen=True, slots=True)
class Size:
    """An upper bound on a value: ``count`` characters of a string (``item`` None), or entries of
    a list or map, each at most ``item``."""

    count: int
    item: Size | None = None

    @property
    def total(self) -> int:
        return self.count if self.item is None else self.count * max(self.item.total, 1)


ONE = Size(SCALAR)


class CostError(Exception):
    """The expression can cost more than :data:`MAX_COST`; ``offset``: where (0-based, in the
    expression's text)."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


# -- the protobuf wire format, as far as CheckedExpr needs it -------------------------------------

Fields = dict[int, list[bytes | int]]


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def fields(data: bytes) -> Fields:
    """The fields of one message: number -> values (ints, or bytes for length-delimited)."""
    found: Fields = {}
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        value: bytes | int
        if wire == 0:
            value, at = _varint(data, at)
        elif wire == 2:
            length, at = _varint(data, at)
            value, at = data[at:at + length], at + length
        elif wire == 1:
            value, at = int.from_bytes(data[at:at + 8], "little"), at + 8
        elif wire == 5:
            value, at = int.from_bytes(data[at:at + 4], "little"), at + 4
        else:
            raise ValueError(f"wire type {wire}")
        found.setdefault(number, []).append(value)
    return found


def _one(found: Fields, number: int) -> bytes:
    value = found.get(number, [b""])[0]
    return value if isinstance(value, bytes) else b""


def _int(found: Fields, number: int) -> int:
    value = found.get(number, [0])[0]
    return value if isinstance(value, int) else 0


# -- the estimate ---------------------------------------------------------------------------------

class _Estimate:
    def __init__(self, checked: Fields) -> None:
        self.types: dict[int, Fields] = {}
        for entry in checked.get(3, []):  # type_map: expr id -> Type
            item = fields(entry) if isinstance(entry, bytes) else {}
            self.types[_int(item, 1)] = fields(_one(item, 2))
        self.positions: dict[int, int] = {}
        for entry in fields(_one(checked, 5)).get(4, []):  # source_info.positions
            item = fields(entry) if isinstance(entry, bytes) else {}
            self.positions[_int(item, 1)] = _int(item, 2)
        self.scope: dict[str, Size] = {}

    def of_type(self, type_: Fields, depth: int = 0) -> Size:
        """What a value of a checked type can hold when it comes from the activation."""
        if depth > 8:
            return Size(STRING_CHARS)
        if _int(type_, 3) in (_STRING, _BYTES) or _int(type_, 4) in (_STRING, _BYTES):
            return Size(STRING_CHARS)
        if 6 in type_:  # list_type
            return Size(COLLECTION_ENTRIES, self.of_type(fields(_one(fields(_one(type_, 6)), 1)),
                                                         depth + 1))
        if 7 in type_:  # map_type
            return Size(COLLECTION_ENTRIES, self.of_type(fields(_one(fields(_one(type_, 7)), 2)),
                                                         depth + 1))
        if 1 in type_:  # dyn: anything a signal holds
            return Size(COLLECTION_ENTRIES, Size(STRING_CHARS))
        return ONE  # a number, a bool, or a struct (read by reference: its fields have types)

    def node(self, expr: Fields, depth: int = 0) -> tuple[Size, int]:
        """(size, cost) of one node."""
        if depth > MAX_DEPTH:
            raise CostError("nested too deeply to bound its cost", self._at(expr))
        size, cost = self._node(expr, depth + 1)
        if cost > MAX_COST:
            raise CostError(f"too costly: one evaluation could build {cost:,} characters "
                            f"(at most {MAX_COST:,}): a string or list grown call after call "
                            "(replace, +), or a comprehension over one", self._at(expr))
        return size, cost

    def _at(self, expr: Fields) -> int:
        return self.positions.get(_int(expr, 2), 0)

    def _node(self, expr: Fields, depth: int) -> tuple[Size, int]:
        if 3 in expr:  # const_expr
            constant = fields(_one(expr, 3))
            text = constant.get(6) or constant.get(7)
            size = Size(len(text[0]) if text and isinstance(text[0], bytes) else SCALAR)
            return size, size.total
        if 4 in expr:  # ident_expr
            name = _one(fields(_one(expr, 4)), 1).decode("utf-8", "replace")
            if name in self.scope:
                return self.scope[name], 1
            return self.of_type(self.types.get(_int(expr, 2), {})), 1
        if 5 in expr:  # select_expr
            select = fields(_one(expr, 5))
            _, cost = self.node(fields(_one(select, 1)), depth)
            if _int(select, 3):  # has()
                return ONE, cost + 1
            return self.of_type(self.types.get(_int(expr, 2), {})), cost + 1
        if 6 in expr:
            return self._call(expr, fields(_one(expr, 6)), depth)
        if 7 in expr:  # list_expr
            elements = [self.node(fields(e), depth) for e in fields(_one(expr, 7)).get(1, [])
                        if isinstance(e, bytes)]
            return self._collection(elements)
        if 8 in expr:  # struct_expr (a map literal)
            values = []
            for entry in fields(_one(expr, 8)).get(2, []):
                item = fields(entry) if isinstance(entry, bytes) else {}
                for number in (3, 4):
                    if number in item:
                        values.append(self.node(fields(_one(item, number)), depth))
            return self._collection(values)
        if 9 in expr:
            return self._comprehension(fields(_one(expr, 9)), depth)
        return ONE, 1

    @staticmethod
    def _collection(elements: list[tuple[Size, int]]) -> tuple[Size, int]:
        item = max((s for s, _ in elements), key=lambda s: s.total, default=ONE)
        size = Size(len(elements), item)
        return size, sum(c for _, c in elements) + size.total

    def _comprehension(self, comp: Fields, depth: int) -> tuple[Size, int]:
        range_size, cost = self.node(fields(_one(comp, 2)), depth)
        element = range_size.item if range_size.item is not None else ONE  # (a map: its keys)
        iterations = range_size.count
        iter_var = _one(comp, 1).decode("utf-8", "replace")
        iter_var2 = _one(comp, 8).decode("utf-8", "replace")
        accu_var = _one(comp, 3).decode("utf-8", "replace")
        init, init_cost = self.node(fields(_one(comp, 4)), depth)
        saved = dict(self.scope)
        try:
            self.scope[iter_var] = element
            if iter_var2:
                self.scope[iter_var2] = element
            self.scope[accu_var] = init
            step, step_cost = self.node(fields(_one(comp, 6)), depth)
            _, condition_cost = self.node(fields(_one(comp, 5)), depth)
            # the accumulator grows by what one step adds, once per element
            if step.item is not None or init.item is not None:
                grown = Size(init.count + iterations * max(step.count - init.count, 0),
                             step.item or init.item)
            else:
                grown = Size(init.count + iterations * max(step.count - init.count, 0))
            self.scope[accu_var] = grown
            result, result_cost = self.node(fields(_one(comp, 7)), depth)
        finally:
            self.scope = saved
        cost += init_cost + iterations * (step_cost + condition_cost) + result_cost
        return result, cost

    def _call(self, expr: Fields, call: Fields, depth: int) -> tuple[Size, int]:
        function = _one(call, 2).decode("utf-8", "replace")
        target = [self.node(fields(_one(call, 1)), depth)] if 1 in call else []
        args = [self.node(fields(a), depth) for a in call.get(3, []) if isinstance(a, bytes)]
        operands = target + args
        cost = sum(c for _, c in operands)
        sizes = [s for s, _ in operands]
        result = self._result(function, sizes, call, expr)
        if function in _REFERENCES:
            return result, cost + 1
        if result is ONE:  # a comparison, size(), contains(), matches(): reads its strings
            return result, cost + 1 + sum(s.total for s in sizes if s.item is None)
        return result, cost + result.total

    def _result(self, function: str, sizes: list[Size], call: Fields, expr: Fields) -> Size:
        type_ = self.types.get(_int(expr, 2), {})
        returns = self.of_type(type_)
        if returns is ONE and 1 not in type_:
            return ONE  # a number or bool: comparisons, size(), contains(), matches()...
        if function == "_+_" and len(sizes) == 2:
            left, right = sizes
            if left.item is None and right.item is None:
                return Size(left.count + right.count)
            item = max((s.item for s in sizes if s.item is not None), key=lambda s: s.total)
            return Size(left.count + right.count, item)
        if function == "replace" and len(sizes) >= 3:
            text, new = sizes[0], sizes[2]
            old_chars = self._const_chars(call, 0)
            if old_chars:  # each match of a known old string grows by what replaces it
                return Size(text.count * max(1, -(-new.count // old_chars)))
            return Size(text.count * (new.count + 1) + new.count)  # "" matches between all
        if function == "_[_]" and sizes and sizes[0].item is not None:
            return sizes[0].item
        if function == "_?_:_" and len(sizes) == 3:
            return max(sizes[1:], key=lambda s: s.total)
        if function in _KEEP_SIZE and sizes:
            return Size(sizes[0].total)
        if function == "quote" and sizes:
            return Size(6 * sizes[0].total + 2)
        if function == "split" and sizes:
            return Size(sizes[0].total + 1, Size(sizes[0].total))
        if returns.item is not None:  # a list or map made of the arguments
            item = max((s.item or s for s in sizes), key=lambda s: s.total, default=ONE)
            return Size(max((s.count for s in sizes), default=0), item)
        # a string made of its arguments (join, format, string(...)): what they hold, with
        # a separator between each two entries and a few characters around each
        total = sum(s.total for s in sizes)
        entries = sum(s.count for s in sizes if s.item is not None)
        widest = max((s.total for s in sizes if s.item is None), default=0)
        return Size(total + entries * (widest + 32) + 32)

    @staticmethod
    def _const_chars(call: Fields, index: int) -> int:
        """The length of the ``index``-th argument when it is a string constant, else 0."""
        args = call.get(3, [])
        raw = args[index] if len(args) > index else None
        if not isinstance(raw, bytes):
            return 0
        arg = fields(raw)
        if 3 not in arg:
            return 0
        text = fields(_one(arg, 3)).get(6)
        return len(text[0]) if text and isinstance(text[0], bytes) else 0


def check_cost(serialized: bytes) -> int:
    """The bound on one evaluation's cost of a checked expression (its ``serialize()``).
    Raises :class:`CostError` past :data:`MAX_COST`."""
    try:
        message = fields(serialized)
        if 1 in message and 2 in message:  # an Any around the CheckedExpr
            message = fields(_one(message, 2))
        estimate = _Estimate(message)
        _, cost = estimate.node(fields(_one(message, 4)))
    except (ValueError, IndexError, RecursionError):  # (a CEL that writes another format)
        raise CostError("its cost cannot be bounded: the checked expression could not be "
                        "read", 0) from None
    return cost
