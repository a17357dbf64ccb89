"""Rule test files (the format is documented in :mod:`watchdog.core.rule_tests`): reading and
validating them, with every problem named by file and line."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from yaml.nodes import Node

from watchdog.core.bounds import MAX_BUDGET
from watchdog.core.rules.decision import Action, Decision, Severity
from watchdog.core.rules.problem import Problem
from watchdog.core.rules.signals import SESSION_SCHEMA
from watchdog.core.rules.yamldoc import Reader, line_of
from watchdog.core.runs.catalogue import ListOf
from watchdog.core.runs.terminal import TerminalState
from watchdog.core.spans.record import BUDGET_KEYS

DEFAULT_AGENT = "agent"
MAX_TEST_FILE_BYTES = 4 * 1024 * 1024

FILE_KEYS = ("rule_files", "include_default", "tests")
TEST_KEYS = ("name", "agent", "budget", "session", "steps", "expect", "expect_terminal_state")
STEP_KINDS = ("llm", "tool", "heartbeat", "tick", "end", "session")
STEP_KEYS = ("at", "duration", "args", "result", "error", "runs", *STEP_KINDS)
MAX_STEP_RUNS = 100  # a tool step's `runs`: this run and up to 99 others of the fleet
LLM_KEYS = ("input_tokens", "output_tokens", "messages", "finish_reason", "error", "cost_usd")
END_KEYS = ("final_answer", "output", "finish_reason", "error")
ERROR_KEYS = ("type", "message")
EXPECT_KEYS = ("step", "rule", "action", "severity", "terminal_state", "escalation", "message")


@dataclass(slots=True)
class Step:
    index: int
    at: float
    kind: str
    line: int
    duration: float = 0.0
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Expectation:
    step: int
    rule: str
    line: int
    action: str | None = None
    severity: str | None = None
    terminal_state: str | None = None
    escalation: bool | None = None
    message: str | None = None

    def matches(self, step: int, decision: Decision) -> bool:
        return (step == self.step and decision.rule == self.rule
                and (self.action is None or decision.action.value == self.action)
                and (self.severity is None or decision.severity.value == self.severity)
                and (self.terminal_state is None
                     or (decision.terminal_state or "") == self.terminal_state)
                and (self.escalation is None or decision.escalation == self.escalation)
                and (self.message is None or self.message in decision.message))

    def __str__(self) -> str:
        text = f"step {self.step} rule {self.rule}"
        for name in ("action", "severity", "terminal_state", "escalation"):
            value = getattr(self, name)
            if value is not None:
                text += f" {name} {str(value).lower()}"
        if self.message is not None:
            text += f" message ~ {self.message!r}"
        return text


@dataclass(slots=True)
class RuleTest:
    name: str
    line: int
    steps: list[Step]
    expect: list[Expectation]
    agent: str = DEFAULT_AGENT
    budget: dict[str, float] | None = None
    session: dict[str, Any] | None = None
    expect_terminal_state: str | None = None


@dataclass(slots=True)
class TestFile:
    __test__ = False  # not a pytest test class
    file: str
    rule_files: list[str] | None
    include_default: bool
    tests: list[RuleTest]


# -- reading test files ---------------------------------------------------------------------------

def read_test_file(path: str) -> tuple[TestFile | None, list[Problem]]:
    reader = Reader(path)
    try:
        with open(path, "rb") as stream:
            data = stream.read(MAX_TEST_FILE_BYTES + 1)
    except OSError as exc:
        return None, [Problem(path, None, None, f"cannot read: {exc.strerror or exc}")]
    if len(data) > MAX_TEST_FILE_BYTES:  # (before decoding: the read may end inside a char)
        return None, [Problem(path, None, None, f"larger than {MAX_TEST_FILE_BYTES} bytes")]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, [Problem(path, data.count(b"\n", 0, exc.start) + 1, None,
                              f"not UTF-8 text ({exc.reason} at byte {exc.start}); save it as "
                              f"UTF-8")]
    documents = reader.documents(text)
    if len(documents) != 1:
        if not reader.problems:
            reader.problem(None, None, "expected one YAML document with 'tests'")
        return None, reader.problems
    fields = reader.fields(documents[0], None, "test file", FILE_KEYS, ("tests",))
    if fields is None:
        return None, reader.problems
    rule_files = None
    if "rule_files" in fields:
        names = reader.strings(fields["rule_files"], None, "rule_files")
        if names is not None:
            base = os.path.dirname(path)
            rule_files = [os.path.join(base, name) for name, _ in names]
    include_default = True
    if "include_default" in fields:
        include_default = bool(reader.boolean(fields["include_default"], None,
                                              "include_default"))
    tests: list[RuleTest] = []
    names_seen: set[str] = set()
    test_nodes = reader.sequence(fields["tests"], None, "tests") if "tests" in fields else []
    for node in test_nodes or []:
        test = _read_test(reader, node)
        if test is None:
            continue
        if test.name in names_seen:
            reader.problem(node, None, f"test {test.name!r}: duplicate test name")
        names_seen.add(test.name)
        tests.append(test)
    if reader.problems:
        return None, reader.problems
    return TestFile(path, rule_files, include_default, tests), []


def _read_test(reader: Reader, node: Node) -> RuleTest | None:
    fields = reader.fields(node, None, "test", TEST_KEYS, ("name", "steps"))
    if fields is None or "name" not in fields:
        return None
    name = reader.string(fields["name"], None, "name")
    if name is None:
        return None
    where = f"test {name!r}"
    count = len(reader.problems)
    test = RuleTest(name, line_of(node), [], [])
    if "agent" in fields:
        test.agent = reader.string(fields["agent"], None, f"{where}: agent") or DEFAULT_AGENT
    if "budget" in fields:
        test.budget = _read_budget(reader, fields["budget"], where)
    if "session" in fields:
        test.session = _read_session(reader, fields["session"], where)
    if "expect_terminal_state" in fields:
        test.expect_terminal_state = reader.choice(
            fields["expect_terminal_state"], None, f"{where}: expect_terminal_state",
            [s.value for s in TerminalState])
    if "steps" not in fields:
        return None  # (said: a required key)
    step_nodes = reader.sequence(fields["steps"], None, f"{where}: steps") or []
    if step_nodes:
        last_at = 0.0
        for index, step_node in enumerate(step_nodes):
            step = _read_step(reader, step_node, index, f"{where}: step {index}")
            if step is None:
                continue
            if step.at < last_at:
                reader.problem(step_node, None, f"{where}: step {index}: at {step.at:g} is "
                                                f"before the previous step ({last_at:g})")
            last_at = step.at
            test.steps.append(step)
        ends = [s.index for s in test.steps if s.kind == "end"]
        if ends and ends[0] != len(step_nodes) - 1:
            after = ends[0] + 1
            reader.problem(step_nodes[after], None, f"{where}: step {after}: comes after 'end' "
                                                    f"(step {ends[0]}): the run has ended")
    if "expect" in fields:
        for item in reader.sequence(fields["expect"], None, f"{where}: expect") or []:
            expectation = _read_expectation(reader, item, where, len(step_nodes))
            if expectation is not None:
                test.expect.append(expectation)
    return test if len(reader.problems) == count else None


def _read_budget(reader: Reader, node: Node, where: str) -> dict[str, float] | None:
    fields = reader.fields(node, None, f"{where}: budget", BUDGET_KEYS)
    if fields is None:
        return None
    budget = {}
    for key, value_node in fields.items():
        value = reader.number(value_node, None, f"{where}: budget: {key}")
        if value is not None:
            budget[key] = value
    return budget


def _read_session(reader: Reader, node: Node, where: str) -> dict[str, Any] | None:
    fields = reader.fields(node, None, f"{where}: session", tuple(SESSION_SCHEMA))
    if fields is None:
        return None
    session: dict[str, Any] = {}
    for key, value_node in fields.items():
        kind = SESSION_SCHEMA[key]
        label = f"{where}: session: {key}"
        if kind is bool:
            value: Any = reader.boolean(value_node, None, label)
        elif kind is int:
            value = reader.integer(value_node, None, label)
        elif isinstance(kind, ListOf):
            names = reader.strings(value_node, None, label)
            value = None if names is None else [name for name, _node in names]
        else:
            value = reader.string(value_node, None, label, nonempty=False)
        if value is not None:
            session[key] = value
    return session


def _bounded(reader: Reader, node: Node, where: str) -> float | None:
    """A step's seconds (``at``, ``duration``): a number or a duration, at most
    :data:`MAX_BUDGET` (the largest ``max_seconds`` a test may reach): the test's clock is a
    float, which past it no longer tells the seconds apart."""
    seconds = reader.duration(node, None, where, seconds=True)
    if seconds is not None and seconds > MAX_BUDGET:
        reader.problem(node, None, f"{where}: must be at most {MAX_BUDGET:g} seconds, not "
                                   f"{seconds:.15g}")
        return None
    return seconds


def _read_step(reader: Reader, node: Node, index: int, where: str) -> Step | None:
    fields = reader.fields(node, None, where, STEP_KEYS, ("at",))
    if fields is None or "at" not in fields:
        return None
    at = _bounded(reader, fields["at"], f"{where}: at")
    kinds = [k for k in STEP_KINDS if k in fields]
    if len(kinds) != 1:
        reader.problem(node, None, f"{where}: needs exactly one of {', '.join(STEP_KINDS)}"
                                   + (f" (has {', '.join(kinds)})" if kinds else ""))
        return None
    kind = kinds[0]
    step = Step(index, at if at is not None else 0.0, kind, line_of(node))  # read on regardless
    for key in ("args", "result", "error", "runs"):
        if key in fields and kind != "tool":
            reader.problem(fields[key], None, f"{where}: '{key}' belongs to a tool step")
    if "duration" in fields:
        step.duration = _bounded(reader, fields["duration"], f"{where}: duration") or 0.0
    body = fields[kind]
    if kind == "tool":
        step.data["tool"] = reader.string(body, None, f"{where}: tool")
        if "args" in fields:
            step.data["args"] = reader.data(fields["args"], None, f"{where}: args")
        if "result" in fields:
            step.data["result"] = reader.data(fields["result"], None, f"{where}: result")
        if "error" in fields:
            step.data["error"] = _read_error(reader, fields["error"], where)
        if "runs" in fields:
            runs = reader.integer(fields["runs"], None, f"{where}: runs", minimum=1)
            if runs is not None and runs > MAX_STEP_RUNS:
                reader.problem(fields["runs"], None,
                               f"{where}: runs: at most {MAX_STEP_RUNS}, not {runs}")
            elif runs is not None:
                step.data["runs"] = runs
    elif kind == "llm":
        step.data = _read_mapping(reader, body, where, "llm", LLM_KEYS)
    elif kind == "end":
        if reader.value(body) is not True:
            step.data = _read_mapping(reader, body, where, "end", END_KEYS)
    elif kind == "heartbeat":
        beat = reader.fields(body, None, f"{where}: heartbeat", ("messages",), ("messages",))
        if beat and "messages" in beat:
            step.data["messages"] = reader.integer(beat["messages"], None,
                                                   f"{where}: heartbeat: messages")
    elif kind == "tick":
        if reader.value(body) is not True:
            reader.problem(body, None, f"{where}: tick: expected true")
    elif kind == "session":
        step.data = _read_session(reader, body, where) or {}
    return step


def _read_mapping(reader: Reader, node: Node, where: str, kind: str,
                  keys: tuple[str, ...]) -> dict[str, Any]:
    fields = reader.fields(node, None, f"{where}: {kind}", keys)
    data: dict[str, Any] = {}
    for key, value_node in (fields or {}).items():
        label = f"{where}: {kind}: {key}"
        if key == "error":
            data[key] = _read_error(reader, value_node, f"{where}: {kind}")
        elif key in ("finish_reason", "output"):
            data[key] = reader.string(value_node, None, label, nonempty=False)
        elif key == "final_answer":
            data[key] = reader.boolean(value_node, None, label)
        elif key == "cost_usd":  # what the call cost (the price of a model call, in USD)
            data[key] = reader.number(value_node, None, label)
        else:
            data[key] = reader.integer(value_node, None, label)
    return data


def _read_error(reader: Reader, node: Node, where: str) -> tuple[str, str] | None:
    fields = reader.fields(node, None, f"{where}: error", ERROR_KEYS, ("type",))
    if not fields or "type" not in fields:
        return None
    error_type = reader.string(fields["type"], None, f"{where}: error: type")
    message = ""
    if "message" in fields:
        message = reader.string(fields["message"], None, f"{where}: error: message",
                                nonempty=False) or ""
    return (error_type, message) if error_type is not None else None


def _read_expectation(reader: Reader, node: Node, where: str, steps: int) -> Expectation | None:
    fields = reader.fields(node, None, f"{where}: expect", EXPECT_KEYS, ("step", "rule"))
    if fields is None or "step" not in fields or "rule" not in fields:
        return None
    step = reader.integer(fields["step"], None, f"{where}: expect: step")
    rule = reader.string(fields["rule"], None, f"{where}: expect: rule")
    if step is None or rule is None:
        return None
    if step >= steps:
        has = f"{steps} steps, 0-{steps - 1}" if steps > 1 else "1 step, 0" if steps else \
            "no steps: nothing can fire"
        reader.problem(fields["step"], None, f"{where}: expect: step {step} does not exist "
                                             f"(the test has {has})")
        return None
    expectation = Expectation(step, rule, line_of(node))
    if "action" in fields:
        expectation.action = reader.choice(fields["action"], None, f"{where}: expect: action",
                                           [a.value for a in Action])
    if "severity" in fields:
        expectation.severity = reader.choice(fields["severity"], None,
                                             f"{where}: expect: severity",
                                             [s.value for s in Severity])
    if "terminal_state" in fields:
        expectation.terminal_state = reader.choice(fields["terminal_state"], None,
                                                   f"{where}: expect: terminal_state",
                                                   [s.value for s in TerminalState])
    if "escalation" in fields:
        expectation.escalation = reader.boolean(fields["escalation"], None,
                                                f"{where}: expect: escalation")
    if "message" in fields:
        expectation.message = reader.string(fields["message"], None,
                                            f"{where}: expect: message")
    return expectation
