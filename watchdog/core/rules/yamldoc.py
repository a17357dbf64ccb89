"""Reading YAML with positions: typed field access that records every problem with its line.

Rule packs and rule tests are read from YAML *nodes* (``yaml.compose``), not from the plain
objects ``safe_load`` returns, because every message a rule author sees names the file, the line
and the rule. A :class:`Reader` never stops at the first problem: each getter records what is
wrong and returns ``None``, so one ``watchdog rules check`` lists everything to fix.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, TypeVar

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from watchdog.core.durations import DurationError, parse_duration, parse_seconds
from watchdog.core.rules.problem import Problem, suggest

T = TypeVar("T")


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
        self._constructor = yaml.constructor.SafeConstructor()

    def line(self, node: Node, row: int = 1) -> int:
        """The file line of line ``row`` of ``node``'s text (:func:`text_line`)."""
        return text_line(node, row)

    def label(self, node: Node, index: int) -> str:
        """How problems name an item of a list (a rule): the ``name`` it has as written, else
        its position (``#3``)."""
        if isinstance(node, MappingNode):
            for key, value in node.value:
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
            nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
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
        """The plain Python value of a node (YAML typing: ints, floats, bools, null)."""
        try:
            return self._constructor.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            return _Unreadable(str(exc))

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
        self._constructor.flatten_mapping(node)  # YAML merge keys (<<: *anchor)
        found: dict[str, Node] = {}
        for key_node, value_node in node.value:
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
        return self.get(node, rule, key,
                        lambda v: float(v) if isinstance(v, (int, float))
                        and not isinstance(v, bool) and v >= minimum else None,
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


class _Unreadable:
    """A node whose value YAML could not construct (e.g. an unknown ``!tag``)."""

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

