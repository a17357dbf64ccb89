"""Reading YAML with positions: typed field access that records every problem with its line.

Rule packs and rule tests are read from YAML *nodes* (``yaml.compose``), not from the plain
objects ``safe_load`` returns, because every message a rule author sees names the file, the line
and the rule. A :class:`Reader` never stops at the first problem: each getter records what is
wrong and returns ``None``, so one ``watchdog rules check`` lists everything to fix.

YAML's own ways to make a small file large are bounded: nesting (:data:`MAX_DEPTH` levels, past
which PyYAML's composer would overflow Python's stack), and aliases (a value that its aliases
expand to more than :data:`MAX_EXPANDED_NODES` nodes, a "billion laughs", is not read).
Merge keys (``<<: *anchor``) are read as YAML defines them, without changing the nodes: the
mapping's own keys win over merged ones, and of merged mappings the first listed wins.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, TypeVar

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from watchdog.core.durations import DurationError, parse_duration, parse_seconds
from watchdog.core.rules.problem import Problem, suggest

T = TypeVar("T")

MAX_DEPTH = 100  # nesting levels of a YAML file (a rule pack has 5; Python's stack ~300)
MAX_EXPANDED_NODES = 100_000  # nodes a value may stand for with its aliases expanded
MERGE_TAG = "tag:yaml.org,2002:merge"
Pair = tuple[Node, Node]


class BoundedLoader(yaml.SafeLoader):  # type: ignore[misc]  # (PyYAML: untyped)
    """PyYAML's safe loader refusing to nest deeper than :data:`MAX_DEPTH` (a ComposerError at
    the place, where PyYAML's recursive composer would raise RecursionError)."""

    _depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self._depth >= MAX_DEPTH:
            raise yaml.composer.ComposerError(
                None, None, f"nested more than {MAX_DEPTH} levels deep",
                self.peek_event().start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _bounded_int(loader: yaml.constructor.SafeConstructor, node: ScalarNode) -> int:
    """YAML's integer, refused at its place when Python's ``int()`` refuses its digits (more
    than ``sys.get_int_max_str_digits()``, 4300: a ValueError, a traceback, where every other
    YAML problem is a line and a column)."""
    try:
        return int(yaml.constructor.SafeConstructor.construct_yaml_int(loader, node))
    except ValueError:
        raise yaml.constructor.ConstructorError(
            None, None, f"an integer of {len(node.value)} characters is too long to be a number",
            node.start_mark) from None


def _key(node: Node) -> object:
    """What makes two mapping keys the same key (a scalar's tag and text; another node itself)."""
    return (node.tag, node.value) if isinstance(node, ScalarNode) else id(node)


class Merged:
    """The pairs of mappings with their merge keys (``<<``) applied, remembered per node (a merge
    bomb, each level merging the one before twice, costs one pass per node)."""

    def __init__(self) -> None:
        self._pairs: dict[int, tuple[list[Pair], list[Pair]]] = {}
        self._open: set[int] = set()  # (the mappings being merged, one inside the next)

    def pairs(self, node: MappingNode) -> tuple[list[Pair], list[Pair]]:
        """``node``'s own pairs (merge keys left out) and the pairs it merges in that its own keys
        do not set, one per key, in precedence order (first wins). Raises
        :class:`yaml.constructor.ConstructorError` when a merge key's value is not a mapping or
        a list of them, or when merges chain more than :data:`MAX_DEPTH` mappings deep (each
        merging the one after, anchored apart: past the stack, were it followed)."""
        known = self._pairs.get(id(node))
        if known is not None:
            return known
        if len(self._open) >= MAX_DEPTH:
            raise yaml.constructor.ConstructorError(
                None, None, f"merge keys (<<) chained more than {MAX_DEPTH} mappings deep",
                node.start_mark)
        own = [(k, v) for k, v in node.value if k.tag != MERGE_TAG]
        keys = {_key(k) for k, _ in own}
        inherited: list[Pair] = []
        self._open.add(id(node))
        try:
            for key_node, value_node in node.value:
                if key_node.tag != MERGE_TAG:
                    continue
                sources = (value_node.value if isinstance(value_node, SequenceNode)
                           else [value_node])
                for source in sources:
                    if not isinstance(source, MappingNode):
                        raise yaml.constructor.ConstructorError(
                            None, None, "a merge key (<<) takes a mapping or a list of mappings",
                            source.start_mark)
                    if id(source) in self._open:
                        continue  # (a mapping merging itself adds nothing to itself)
                    source_own, source_inherited = self.pairs(source)
                    for pair in (*source_own, *source_inherited):
                        if _key(pair[0]) not in keys:
                            keys.add(_key(pair[0]))
                            inherited.append(pair)
        finally:
            self._open.discard(id(node))
        self._pairs[id(node)] = (own, inherited)
        return own, inherited


class _Constructor(yaml.constructor.SafeConstructor):  # type: ignore[misc]
    """PyYAML's safe constructor with :class:`Merged`'s merge keys: the nodes are left as they
    are (PyYAML's flattens them in place, so a second look would see the merged keys as the
    mapping's own)."""

    def __init__(self, merged: Merged) -> None:
        super().__init__()
        self.merged = merged

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, MappingNode):
            own, inherited = self.merged.pairs(node)
            # (the base reads node.value, a later pair winning: a flat copy, not the node)
            node = MappingNode(node.tag, [*reversed(inherited), *own], node.start_mark,
                               node.end_mark, node.flow_style)
        return yaml.constructor.BaseConstructor.construct_mapping(  # type: ignore[no-any-return]
            self, node, deep=deep)


for _loader in (BoundedLoader, _Constructor):  # (the files' YAML and the packs' nodes alike)
    _loader.add_constructor("tag:yaml.org,2002:int", _bounded_int)


def expanded_size(node: Node, limit: int, sizes: dict[int, int] | None = None,
                  depth: int = 0) -> int:
    """How many nodes ``node`` stands for with its aliases expanded, counted up to just past
    ``limit`` (a node that contains itself, or that its aliases nest more than
    :data:`MAX_DEPTH` levels deep: past it)."""
    sizes = {} if sizes is None else sizes
    known = sizes.get(id(node))
    if known is not None:
        return known
    if depth >= MAX_DEPTH:  # (anchors chained, each inside the next: past the stack)
        return limit + 1
    sizes[id(node)] = limit + 1  # (met again inside itself: it never ends)
    total = 1
    if isinstance(node, SequenceNode):
        children: Iterable[Node] = node.value
    elif isinstance(node, MappingNode):
        children = (child for pair in node.value for child in pair)
    else:
        children = ()
    for child in children:
        total += expanded_size(child, limit, sizes, depth + 1)
        if total > limit:
            break
    sizes[id(node)] = total
    return total


def line_of(node: Node) -> int:
    return int(node.start_mark.line) + 1


def text_line(node: Node, row: int) -> int:
    """The file line of line ``row`` (1-based) of a scalar's text: a block scalar (``|``, ``>``)
    starts on the line after its indicator."""
    first = line_of(node)
    if isinstance(node, ScalarNode) and node.style in ("|", ">"):
        first += 1
    return first + row - 1


class Reader:
    """Typed access to the nodes of one YAML file; problems accumulate in :attr:`problems`."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.problems: list[Problem] = []
        self._merged = Merged()
        self._constructor = _Constructor(self._merged)
        self._sizes: dict[int, int] = {}

    def line(self, node: Node, row: int = 1) -> int:
        """The file line of line ``row`` of ``node``'s text (:func:`text_line`)."""
        return text_line(node, row)

    def label(self, node: Node, index: int) -> str:
        """How problems name an item of a list (a rule): the ``name`` it has as written, else
        its position (``#3``)."""
        if isinstance(node, MappingNode):
            try:
                own, inherited = self._merged.pairs(node)
            except yaml.YAMLError:
                own, inherited = node.value, []
            for key, value in (*own, *inherited):
                text = str(value.value).strip() if isinstance(value, ScalarNode) else ""
                if key.value == "name" and text:
                    return text
        return f"#{index}"

    def problem(self, at: Node | int | None, rule: str | None, message: str) -> None:
        line = line_of(at) if isinstance(at, Node) else at
        self.problems.append(Problem(self.file, line, rule, message))

    def documents(self, text: str) -> list[Node]:
        """The YAML documents of ``text`` (empty ones dropped); a syntax error is a problem."""
        try:
            nodes = list(yaml.compose_all(text, Loader=BoundedLoader))
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            detail = " ".join(p for p in (exc.context, exc.problem) if p)
            if (exc.context_mark is not None and mark is not None
                    and exc.context_mark.line != mark.line):
                detail += f" (the construct began on line {exc.context_mark.line + 1})"
            self.problem(None if mark is None else mark.line + 1, None, f"bad YAML: {detail}")
            return []
        except yaml.YAMLError as exc:
            self.problem(None, None, f"bad YAML: {exc}")
            return []
        return [n for n in nodes if not (isinstance(n, ScalarNode) and n.value == ""
                                         and n.tag.endswith(":null"))]

    def value(self, node: Node) -> Any:
        """The plain Python value of a node (YAML typing: ints, floats, bools, null); an
        :class:`Unreadable` one when YAML cannot construct it or its aliases expand it past
        :data:`MAX_EXPANDED_NODES` nodes."""
        if not isinstance(node, ScalarNode) \
                and expanded_size(node, MAX_EXPANDED_NODES, self._sizes) > MAX_EXPANDED_NODES:
            return Unreadable(f"its aliases expand it to more than {MAX_EXPANDED_NODES:,} "
                              f"values, more than {MAX_DEPTH} levels deep, or into itself")
        try:
            return self._constructor.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            return Unreadable(str(exc))
        except RecursionError:  # (merge keys chained deeper than the stack)
            return Unreadable("nested too deep")

    def data(self, node: Node, rule: str | None, key: str) -> Any:
        """Any value (a tool call's arguments), or None with a problem when it is unreadable."""
        value = self.value(node)
        if isinstance(value, Unreadable):
            self.problem(node, rule, f"{key}: {value!r}")
            return None
        return value

    def fields(self, node: Node, rule: str | None, what: str, allowed: Collection[str],
               required: Iterable[str] = (), synonyms: Mapping[str, str] | None = None,
               ) -> dict[str, Node] | None:
        """A mapping's values by key; unknown, duplicate and missing keys are problems (an
        unknown key in ``synonyms`` is told the allowed key it stands for, else the closest)."""
        if not isinstance(node, MappingNode):
            self.problem(node, rule, f"{what or 'a rule'} must be a mapping, not "
                                     f"{describe(self.value(node))}")
            return None
        prefix = f"{what}: " if what else ""
        try:
            own, inherited = self._merged.pairs(node)  # YAML merge keys (<<: *anchor)
        except (yaml.constructor.ConstructorError, RecursionError) as exc:
            mark = getattr(exc, "problem_mark", None)
            self.problem(node if mark is None else mark.line + 1, rule,
                         f"{prefix}{getattr(exc, 'problem', 'merge keys nested too deep')}")
            own, inherited = [(k, v) for k, v in node.value if k.tag != MERGE_TAG], []
        found: dict[str, Node] = {}
        for key_node, value_node in own:
            key = self.value(key_node)
            if not isinstance(key, str):
                self.problem(key_node, rule, f"{prefix}key {key!r} is not a string")
                continue
            if key in found:
                self.problem(key_node, rule, f"{prefix}duplicate key '{key}'")
                continue
            if key not in allowed:
                meant = (synonyms or {}).get(key)
                hint = f" (did you mean '{meant}'?)" if meant in allowed else suggest(key, allowed)
                self.problem(key_node, rule, f"{prefix}unknown key '{key}'{hint}")
                continue
            found[key] = value_node
        for key_node, value_node in inherited:  # (keys the mapping's own do not set)
            key = self.value(key_node)
            if not isinstance(key, str):
                self.problem(key_node, rule, f"{prefix}key {key!r} is not a string")
            elif key not in allowed:
                self.problem(key_node, rule, f"{prefix}unknown key '{key}'{suggest(key, allowed)}")
            else:
                found[key] = value_node
        for key in required:
            if key not in found:
                self.problem(node, rule, f"{prefix}'{key}' is required")
        return found

    def get(self, node: Node, rule: str | None, key: str, check: Callable[[Any], T | None],
            expected: str) -> T | None:
        """``check(value)`` or, when it returns None, a problem ``KEY: expected ..., got ...``."""
        value = self.value(node)
        result = check(value)
        if result is None:
            self.problem(node, rule, f"{key}: expected {expected}, got {describe(value)}")
        return result

    def string(self, node: Node, rule: str | None, key: str, nonempty: bool = True) -> str | None:
        expected = "a non-empty string" if nonempty else "a string"
        if isinstance(node, ScalarNode) and node.tag.endswith(":bool") and node.style is None:
            expected += f" (YAML reads {node.value} as a boolean: quote it)"
        return self.get(node, rule, key,
                        lambda v: v if isinstance(v, str) and (v.strip() or not nonempty)
                        else None, expected)

    def boolean(self, node: Node, rule: str | None, key: str) -> bool | None:
        return self.get(node, rule, key, lambda v: v if isinstance(v, bool) else None,
                        "true or false")

    def integer(self, node: Node, rule: str | None, key: str, minimum: int = 0) -> int | None:
        return self.get(node, rule, key,
                        lambda v: v if isinstance(v, int) and not isinstance(v, bool)
                        and v >= minimum else None, f"an integer >= {minimum}")

    def number(self, node: Node, rule: str | None, key: str, minimum: float = 0.0
               ) -> float | None:
        return self.get(node, rule, key, lambda v: _finite_number(v, minimum),
                        f"a number >= {minimum:g}")

    def duration(self, node: Node, rule: str | None, key: str, seconds: bool = False
                 ) -> float | None:
        """A duration (:mod:`watchdog.core.durations`); ``seconds``: a key named in seconds also
        takes a plain number."""
        value = self.value(node)
        try:
            return (parse_seconds if seconds else parse_duration)(value)
        except DurationError as exc:
            self.problem(node, rule, f"{key}: expected {exc.allowed}, got {describe(value)}"
                                     + (f"; {exc.hint}" if exc.hint else ""))
            return None

    def choice(self, node: Node, rule: str | None, key: str, choices: Collection[str]
               ) -> str | None:
        value = self.value(node)
        if isinstance(value, str) and value in choices:
            return value
        self.problem(node, rule, f"{key}: {describe(value)} is not one of "
                                 f"{', '.join(choices)}{suggest(value, choices)}")
        return None

    def strings(self, node: Node, rule: str | None, key: str) -> list[tuple[str, Node]] | None:
        """A list of non-empty strings, each with its node (for positions)."""
        if not isinstance(node, SequenceNode):
            self.problem(node, rule, f"{key}: expected a list of strings, got "
                                     f"{describe(self.value(node))}")
            return None
        items: list[tuple[str, Node]] = []
        ok = True
        for item in node.value:
            text = self.string(item, rule, key)
            if text is None:
                ok = False
            else:
                items.append((text, item))
        return items if ok else None

    def sequence(self, node: Node, rule: str | None, key: str) -> list[Node] | None:
        if not isinstance(node, SequenceNode):
            self.problem(node, rule, f"{key}: expected a list, got {describe(self.value(node))}")
            return None
        return list(node.value)


class Unreadable:
    """A node whose value YAML could not construct (e.g. an unknown ``!tag``), or that its aliases
    make too large to read."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"an unreadable value ({self.reason.splitlines()[0]})"


def describe(value: object) -> str:
    """How a YAML value reads in a message: ``'abc'``, ``42``, ``a mapping``, ``nothing``."""
    if value is None:
        return "nothing"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _finite_number(value: object, minimum: float) -> float | None:
    """``value`` as a float if it is a number from ``minimum`` that a float holds: not YAML's
    ``.inf`` or ``.nan``, nor an integer of some 310 digits or more (``float`` raises)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) and number >= minimum else None
