"""Rule packs: the YAML schema (DESIGN §5), loading files and directories, validation, merging.

Theory of operation
-------------------
:func:`load_rules` reads the shipped default pack first (unless told not to), then each path in
order; a directory contributes its ``*.yaml``/``*.yml`` files in name order (hidden entries, such
as the ``..data`` of a Kubernetes ConfigMap mount, and ``*.test.yaml`` rule tests are skipped).
Every file is validated completely, every expression compiled and type-checked; all problems are
collected, each with file, line and rule name, and raised together as one :class:`RulePackError`.
Nothing half-loaded is ever returned.

Packs merge by rule name: a later pack's rule replaces an earlier one of the same name (the whole
rule, keeping its place in the order; one that does not say ``countdown:`` keeps the replaced
rule's, so a pack that copied the default pack's budget rules before the key existed still
counts them down), ``disable: [names]`` or ``enabled: false`` switches one off.
Budgets of later packs come first, and within a pack the first entry whose ``agents`` glob matches
wins. The result, a :class:`RuleSet`, is immutable; reloading is the shell's job
(:meth:`RuleSet.stale` tells it when the files changed).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from watchdog.core.bounds import MAX_BUDGET
from watchdog.core.rules.decision import COUNTDOWN_BUDGETS, Action, Severity
from watchdog.core.rules.expr import Expr, ExprError, Template, compile_expr, compile_template
from watchdog.core.rules.model import (
    ACTIONS_CODE,
    ACTIONS_TEXT,
    ACTIONS_TOOLS,
    ACTS_IN_TEXT,
    BUDGET_PER,
    BUDGET_PER_RUN,
    MAX_ACTION_KEY_CHARS,
    MAX_ACTION_PATTERN_CHARS,
    MAX_ANSWER_TOOLS,
    MAX_FINISH_ARGUMENTS,
    MAX_STOP_ANSWER_CHARS,
    WORK_BESIDE,
    Budget,
    Finish,
    Grace,
    Repeat,
    Rule,
    RuleSet,
    Source,
)
from watchdog.core.rules.problem import Problem, suggest
from watchdog.core.runs.terminal import TerminalState
from watchdog.core.spans.record import BUDGET_KEYS, WHOLE_BUDGET_KEYS

if TYPE_CHECKING:
    from yaml.nodes import Node

    from watchdog.core.rules.yamldoc import Reader

__all__ = ["DEFAULT_PACK", "Budget", "Grace", "Problem", "Repeat", "Rule", "RulePackError",
           "RuleSet", "Source", "load_rules", "load_text"]

API_VERSION = "agent-watchdog/v1"
KIND = "RulePack"
DEFAULT_PACK = Path(__file__).resolve().parent / "packs" / "default.yaml"
DEFAULT_AHEAD = DEFAULT_PACK.with_suffix(".json")  # the default pack read ahead (see read_ahead)
MAX_PACK_BYTES = 1024 * 1024  # a rule pack is a few KiB; a bigger file is a mistake
MAX_NAME_LENGTH = 63  # rule names are metric label values and file-like identifiers
RULE_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")
PACK_SUFFIXES = (".yaml", ".yml")
TEST_SUFFIXES = (".test.yaml", ".test.yml")

# A rule may stop a run in any of these states; the others describe how a run ended on its own.
RULE_TERMINAL_STATES = tuple(s.value for s in TerminalState if s not in (
    TerminalState.COMPLETED, TerminalState.NO_RESPONSE, TerminalState.ERROR,
    TerminalState.ABANDONED))

PACK_KEYS = ("apiVersion", "kind", "name", "budgets", "rules", "disable")
RULE_KEYS = ("name", "description", "agents", "when", "for", "action", "severity", "message",
             "repeat", "terminal_state", "grace", "enabled", "countdown")
# What other rule languages call a rule's keys (Prometheus: expr, alert; others: condition, if)
RULE_KEY_SYNONYMS = {"expr": "when", "expression": "when", "condition": "when", "if": "when",
                     "alert": "name"}
GRACE_KEYS = ("tool_calls", "seconds")
NO_COUNTDOWN = "none"  # ``countdown: none``: not a countdown (nor one a replaced rule had)
BUDGET_ENTRY_KEYS = ("agents", *BUDGET_KEYS, "actions", "stop_answer", "action_pattern",
                     "action_key", "answer_tools", "answer_key", "finish", "budget_per",
                     "work_beside_answer")
INTEGER_BUDGETS = WHOLE_BUDGET_KEYS


class RulePackError(Exception):
    """Rule packs that cannot be loaded; :attr:`problems` lists every reason."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        self.message = "\n".join(str(p) for p in problems)
        super().__init__(self.message)


# -- loading --------------------------------------------------------------------------------------

@dataclass(slots=True)
class _Pack:
    file: str
    name: str = ""
    rules: list[Rule] = field(default_factory=list)
    budgets: list[Budget] = field(default_factory=list)
    disable: list[tuple[str, int]] = field(default_factory=list)
    switch_off: list[tuple[str, int]] = field(default_factory=list)  # {name, enabled: false}
    says_countdown: set[str] = field(default_factory=set)  # rules that say countdown: (or none)


def load_rules(paths: Sequence[str], include_default: bool = True) -> RuleSet:
    """Load, validate and merge rule packs (the default pack first unless ``include_default`` is
    false). Raises :class:`RulePackError` with every problem found."""
    problems: list[Problem] = []
    sources: list[Source] = []
    packs: list[_Pack] = []

    def read(file: str) -> None:
        sources.append(Source.of(file))
        packs.extend(_read_yaml(file, problems))

    default = os.path.realpath(DEFAULT_PACK)
    if include_default:
        sources.append(Source.of(str(DEFAULT_PACK)))
        packs.extend(_default_packs(problems))
    for path in paths:
        if os.path.isdir(path):
            sources.append(Source.of(path))
            for file in _pack_files(path):
                read(file)
        elif os.path.exists(path):
            if not (include_default and os.path.realpath(path) == default):
                read(path)
        else:
            problems.append(Problem(path, None, None, "no such file or directory"))
    ruleset = _merge(packs, problems)
    if problems:
        raise RulePackError(sorted_problems(problems))
    return RuleSet(ruleset.rules, ruleset.disabled, ruleset.budgets, tuple(sources))


def load_text(text: str, file: str = "<string>", include_default: bool = False) -> RuleSet:
    """A rule set from YAML text (tests, the API); the default pack only if asked."""
    problems: list[Problem] = []
    packs: list[_Pack] = []
    if include_default:
        packs.extend(_default_packs(problems))
    packs.extend(_read_yaml(file, problems, text))
    ruleset = _merge(packs, problems)
    if problems:
        raise RulePackError(sorted_problems(problems))
    return ruleset


def _read_yaml(file: str, problems: list[Problem], text: str | None = None) -> list[_Pack]:
    """The packs of a YAML file (or of ``text``, named ``file``); its problems to ``problems``.
    PyYAML loads here, for the first YAML file read."""
    from watchdog.core.rules.yamldoc import Reader

    reader = Reader(file)
    packs = _read_packs(reader, _read_text(reader) if text is None else text)
    problems.extend(reader.problems)
    return packs


def read_yaml(file: str) -> list[_Pack]:
    """The packs of the YAML file ``file`` as :func:`load_rules` reads them; raises
    :class:`RulePackError` with its problems."""
    problems: list[Problem] = []
    packs = _read_yaml(file, problems)
    if problems:
        raise RulePackError(sorted_problems(problems))
    return packs


def _default_packs(problems: list[Problem]) -> list[_Pack]:
    """The shipped default pack: from its form read ahead (:func:`read_ahead`) when that was made
    from this ``default.yaml``, else read from the YAML as any other file (its problems, if an
    edit made any, named as usual)."""
    pack = read_ahead(str(DEFAULT_PACK))
    return [pack] if pack is not None else _read_yaml(str(DEFAULT_PACK), problems)


# -- the default pack read ahead -----------------------------------------------------------------
#
# ``packs/default.json`` holds the default pack as the YAML reading gives it (every value
# checked, each rule's and budget's line), with the SHA-256 of the ``default.yaml`` it was made
# from: a sidecar with the shipped defaults then never loads PyYAML (0.7 MB resident, and the
# node trees of a reading). ``python -m watchdog.core.rules.write_checked`` writes it again;
# ``tests/test_rules_checked.py`` fails while it is stale.

def yaml_digest(file: str) -> str | None:
    try:
        with open(file, "rb") as stream:
            data = stream.read(MAX_PACK_BYTES + 1)
    except OSError:
        return None
    return hashlib.sha256(data).hexdigest()


def ahead_form(packs: Sequence[_Pack], digest: str) -> dict[str, Any]:
    """What ``packs/default.json`` holds for ``packs`` (read from a file whose SHA-256 is
    ``digest``)."""
    return {"sha256": digest, "packs": [{
        "name": pack.name,
        "rules": [{
            "name": r.name, "line": r.line, "when": r.when.source, "message": r.message.text,
            "description": r.description, "agents": list(r.agents), "for": r.for_seconds,
            "action": r.action.value, "severity": r.severity.value, "repeat": r.repeat.value,
            "terminal_state": r.terminal_state.value if r.terminal_state else None,
            "grace": [r.grace.tool_calls, r.grace.seconds] if r.grace else None,
            "countdown": r.countdown, "enabled": r.enabled} for r in pack.rules],
        "budgets": [{"agents": list(b.agents), "limits": b.limits, "line": b.line,
                     "actions": b.actions, "stop_answer": b.stop_answer,
                     **({"action_pattern": b.action_pattern} if b.action_pattern else {}),
                     **({"action_key": b.action_key} if b.action_key else {}),
                     **({"answer_tools": list(b.answer_tools)} if b.answer_tools else {}),
                     **({"answer_key": b.answer_key} if b.answer_key else {}),
                     "finish": b.finish.describe() if b.finish else None,
                     **({"budget_per": b.budget_per}
                        if b.budget_per != BUDGET_PER_RUN else {}),
                     **({"work_beside_answer": b.work_beside_answer}
                        if b.work_beside_answer is not None else {}),
                     **({"actions_said": True} if b.actions_said else {})}
                    for b in pack.budgets],
        "disable": [[name, line] for name, line in pack.disable],
        "switch_off": [[name, line] for name, line in pack.switch_off]} for pack in packs]}


def _ahead_finish(form: Any) -> Finish | None:
    if not form:
        return None
    return Finish(str(form["tool"]), tuple((str(k), str(v))
                                           for k, v in form["arguments"].items()))


def read_ahead(file: str) -> _Pack | None:
    """The default pack (named ``file``) from ``packs/default.json``, or None: that file is
    missing, unreadable, or made from another ``default.yaml`` than ``file``."""
    try:
        data = json.loads(DEFAULT_AHEAD.read_text(encoding="utf-8"))
        if data["sha256"] != yaml_digest(file):
            return None
        [form] = data["packs"]
        return _Pack(file, str(form["name"]), [_ahead_rule(file, rule) for rule in form["rules"]],
                     [Budget(tuple(b["agents"]), {k: float(v) for k, v in b["limits"].items()},
                             file, int(b["line"]), str(b.get("actions", ACTIONS_TOOLS)),
                             b.get("stop_answer"), b.get("action_pattern"),
                             _ahead_finish(b.get("finish")),
                             str(b.get("budget_per", BUDGET_PER_RUN)),
                             b.get("action_key"), tuple(b.get("answer_tools", ())),
                             b.get("work_beside_answer"), bool(b.get("actions_said")),
                             b.get("answer_key"))
                      for b in form["budgets"]],
                     [(str(name), int(line)) for name, line in form["disable"]],
                     [(str(name), int(line)) for name, line in form.get("switch_off", ())])
    except (OSError, ValueError, LookupError, TypeError, ExprError):
        return None  # (read from the YAML instead, as any other file)


def _ahead_rule(file: str, rule: dict[str, Any]) -> Rule:
    grace = rule["grace"]
    state = rule["terminal_state"]
    return Rule(name=str(rule["name"]), when=compile_expr(rule["when"], condition=True),
                action=Action(rule["action"]), message=compile_template(rule["message"]),
                description=str(rule["description"]), agents=tuple(rule["agents"]),
                for_seconds=float(rule["for"]), severity=Severity(rule["severity"]),
                repeat=Repeat(rule["repeat"]),
                terminal_state=TerminalState(state) if state is not None else None,
                grace=Grace(*grace) if grace is not None else None,
                countdown=rule["countdown"] and str(rule["countdown"]),
                enabled=bool(rule["enabled"]), file=file, line=int(rule["line"]))


def sorted_problems(problems: list[Problem]) -> list[Problem]:
    """Files in the order they were read, lines in order within a file."""
    order = {file: i for i, file in reversed(list(enumerate(p.file for p in problems)))}
    return sorted(problems, key=lambda p: (order[p.file], p.line or 0))


def _pack_files(directory: str) -> list[str]:
    names = sorted(os.listdir(directory))
    return [os.path.join(directory, name) for name in names
            if not name.startswith(".") and name.endswith(PACK_SUFFIXES)
            and not name.endswith(TEST_SUFFIXES)
            and os.path.isfile(os.path.join(directory, name))]


def _read_text(reader: Reader) -> str:
    try:
        with open(reader.file, "rb") as stream:
            data = stream.read(MAX_PACK_BYTES + 1)
    except OSError as exc:
        reader.problem(None, None, f"cannot read: {exc.strerror or exc}")
        return ""
    if len(data) > MAX_PACK_BYTES:
        reader.problem(None, None, f"larger than {MAX_PACK_BYTES} bytes: not a rule pack")
        return ""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        reader.problem(data.count(b"\n", 0, exc.start) + 1, None,
                       f"not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8")
        return ""


def _read_packs(reader: Reader, text: str) -> list[_Pack]:
    """The packs (one per YAML document) of one file; problems go to ``reader``."""
    documents = reader.documents(text)
    if not documents and not reader.problems:
        reader.problem(None, None, f"empty: expected a {KIND} (apiVersion: {API_VERSION})")
    return [_read_pack(reader, node) for node in documents]


def _read_pack(reader: Reader, node: Node) -> _Pack:
    pack = _Pack(reader.file)
    fields = reader.fields(node, None, KIND, PACK_KEYS, ("apiVersion", "kind", "name"))
    if fields is None:
        return pack
    if "apiVersion" in fields:
        version = reader.value(fields["apiVersion"])
        if version != API_VERSION:
            reader.problem(fields["apiVersion"], None,
                           f"apiVersion: {version!r} is not supported (expected {API_VERSION})")
    if "kind" in fields:
        kind = reader.value(fields["kind"])
        if kind != KIND:
            reader.problem(fields["kind"], None, f"kind: {kind!r} is not {KIND}")
    if "name" in fields:
        pack.name = reader.string(fields["name"], None, "name") or ""
    if "budgets" in fields:
        for item in reader.sequence(fields["budgets"], None, "budgets") or []:
            budget = _read_budget(reader, item)
            if budget is not None:
                pack.budgets.append(budget)
    if "rules" in fields:
        seen: dict[str, int] = {}
        for index, item in enumerate(reader.sequence(fields["rules"], None, "rules") or [], 1):
            name: str | None = _switch_off(reader, item)
            rule: Rule | None = None
            if name is not None:  # {name: N, enabled: false}: as disable: [N]
                pack.switch_off.append((name, reader.line(item)))
            else:
                name, rule = _read_rule(reader, item, index, pack.says_countdown)
            if name is not None and name in seen:
                reader.problem(item, name, f"duplicate rule name (first defined on line "
                                           f"{seen[name]})")
                continue
            if name is not None:
                seen[name] = reader.line(item)
            if rule is not None:
                pack.rules.append(rule)
    if "disable" in fields:
        for name, name_node in reader.strings(fields["disable"], None, "disable") or []:
            pack.disable.append((name, reader.line(name_node)))
    return pack


_N = TypeVar("_N", int, float)


def _read_budget(reader: Reader, node: Node) -> Budget | None:
    fields = reader.fields(node, None, "budgets", BUDGET_ENTRY_KEYS)
    if fields is None:
        return None
    agents = _read_agents(reader, fields, None, "budgets")
    limits: dict[str, float] = {}
    ok = agents is not None
    for key in BUDGET_KEYS:
        if key not in fields:
            continue
        if key in INTEGER_BUDGETS:
            value: float | None = reader.integer(fields[key], None, f"budgets: {key}", 1)
            if value is not None and value > MAX_BUDGET:  # (past CEL's int in a run's sums)
                reader.problem(fields[key], None, f"budgets: {key}: must be at most "
                                                  f"{MAX_BUDGET:g}")
                value = None
        elif key == "max_cost_usd":  # dollars: a plain number
            value = reader.number(fields[key], None, f"budgets: {key}")
            if value is not None and not 0 < value <= MAX_BUDGET:
                reader.problem(fields[key], None,
                               f"budgets: {key}: must be more than 0 and at most {MAX_BUDGET:g}")
                value = None
        else:
            value = _bounded(reader, fields[key], None, f"budgets: {key}",
                             reader.duration(fields[key], None, f"budgets: {key}", seconds=True))
            if value == 0:
                reader.problem(fields[key], None, f"budgets: {key}: must be more than 0")
                value = None
        if value is None:
            ok = False
        else:
            limits[key] = float(value)
    actions, stop_answer = ACTIONS_TOOLS, None
    if "actions" in fields:
        value_text = reader.string(fields["actions"], None, "budgets: actions")
        if value_text in (ACTIONS_TOOLS, *ACTS_IN_TEXT):
            actions = value_text
        elif value_text is not None:
            reader.problem(fields["actions"], None, f"budgets: actions: {value_text!r} is not "
                                                    f"{ACTIONS_TOOLS}, {ACTIONS_TEXT} or "
                                                    f"{ACTIONS_CODE}")
            ok = False
        else:
            ok = False
    if "stop_answer" in fields:
        stop_answer = reader.string(fields["stop_answer"], None, "budgets: stop_answer")
        if stop_answer is None:
            ok = False
        elif actions not in ACTS_IN_TEXT:
            reader.problem(fields["stop_answer"], None,
                           "budgets: stop_answer: only for agents that act in text "
                           f"(actions: {ACTIONS_TEXT} or {ACTIONS_CODE})")
            ok = False
        elif len(stop_answer) > MAX_STOP_ANSWER_CHARS:
            reader.problem(fields["stop_answer"], None, f"budgets: stop_answer: at most "
                                                        f"{MAX_STOP_ANSWER_CHARS} characters")
            ok = False
    action_pattern = None
    if "action_pattern" in fields:
        action_pattern = reader.string(fields["action_pattern"], None,
                                       "budgets: action_pattern")
        problem = None
        if action_pattern is None:
            ok = False
        elif actions != ACTIONS_TEXT:
            problem = f"only for agents that act in text (actions: {ACTIONS_TEXT})"
        elif not action_pattern or len(action_pattern) > MAX_ACTION_PATTERN_CHARS:
            problem = f"1 to {MAX_ACTION_PATTERN_CHARS} characters"
        else:
            problem = _action_pattern_problem(action_pattern)
        if problem is not None:
            reader.problem(fields["action_pattern"], None, f"budgets: action_pattern: {problem}")
            ok = False
    action_key = None
    if "action_key" in fields:
        action_key = reader.string(fields["action_key"], None, "budgets: action_key")
        problem = None
        if action_key is None:
            ok = False
        elif actions != ACTIONS_TEXT:
            problem = f"only for agents that act in text (actions: {ACTIONS_TEXT})"
        elif not action_key or len(action_key) > MAX_ACTION_KEY_CHARS:
            problem = f"1 to {MAX_ACTION_KEY_CHARS} characters"
        if problem is not None:
            reader.problem(fields["action_key"], None, f"budgets: action_key: {problem}")
            ok = False
    answer_tools: tuple[str, ...] = ()
    if "answer_tools" in fields:
        items = reader.strings(fields["answer_tools"], None, "budgets: answer_tools")
        names = [name for name, _ in items] if items is not None else None
        problem = None
        if names is None:
            ok = False
        elif action_key is None and action_pattern is None:
            problem = ("only with an action_key or action_pattern (what names an action's "
                       "tool)")
        elif not names or len(names) > MAX_ANSWER_TOOLS \
                or not all(0 < len(name) <= MAX_ACTION_KEY_CHARS for name in names):
            problem = (f"1 to {MAX_ANSWER_TOOLS} names, each 1 to {MAX_ACTION_KEY_CHARS} "
                       "characters")
        else:
            answer_tools = tuple(dict.fromkeys(names))
        if problem is not None:
            reader.problem(fields["answer_tools"], None, f"budgets: answer_tools: {problem}")
            ok = False
    answer_key = None
    if "answer_key" in fields:
        answer_key = reader.string(fields["answer_key"], None, "budgets: answer_key")
        problem = None
        if answer_key is None:
            ok = False
        elif action_key is None:
            problem = "only with an action_key (what names an action's tool)"
        elif not answer_key or len(answer_key) > MAX_ACTION_KEY_CHARS \
                or answer_key == action_key:
            problem = f"1 to {MAX_ACTION_KEY_CHARS} characters, not the action_key"
        if problem is not None:
            reader.problem(fields["answer_key"], None, f"budgets: answer_key: {problem}")
            ok = False
    finish = None
    if "finish" in fields:
        finish = _finish(reader, fields["finish"])
        if finish is None:
            ok = False
        elif actions in ACTS_IN_TEXT:
            reader.problem(fields["finish"], None, "budgets: finish: only for agents that act "
                           f"by tool calls (for actions: {actions}, stop_answer)")
            ok = False
    budget_per = BUDGET_PER_RUN
    if "budget_per" in fields:
        per = reader.string(fields["budget_per"], None, "budgets: budget_per")
        if per in BUDGET_PER:
            budget_per = per
        else:
            if per is not None:
                reader.problem(fields["budget_per"], None, f"budgets: budget_per: {per!r} is "
                                                           f"not {' or '.join(BUDGET_PER)}")
            ok = False
    work_beside = None
    if "work_beside_answer" in fields:
        work_beside = reader.string(fields["work_beside_answer"], None,
                                    "budgets: work_beside_answer")
        if work_beside is not None and work_beside not in WORK_BESIDE:
            reader.problem(fields["work_beside_answer"], None,
                           f"budgets: work_beside_answer: {work_beside!r} is not "
                           f"{' or '.join(WORK_BESIDE)}")
            work_beside = None
        if work_beside is None:
            ok = False
        elif actions in ACTS_IN_TEXT:
            reader.problem(fields["work_beside_answer"], None,
                           "budgets: work_beside_answer: only for agents that act by tool "
                           f"calls (for actions: {actions}, answer_tools)")
            ok = False
    if not limits and ok and actions == ACTIONS_TOOLS and finish is None \
            and work_beside is None:
        reader.problem(node, None, "budgets: an entry sets no limit (use one of "
                                   f"{', '.join(BUDGET_KEYS)}, actions: {ACTIONS_TEXT}, "
                                   "or finish)")
        ok = False
    if not ok or agents is None:
        return None
    return Budget(agents, limits, reader.file, reader.line(node), actions, stop_answer,
                  action_pattern, finish, budget_per, action_key, answer_tools, work_beside,
                  "actions" in fields, answer_key)


def _action_pattern_problem(pattern: str) -> str | None:
    """What is wrong with a budgets entry's ``action_pattern`` (None: nothing): not a regular
    expression, or, where the compiled module is built, not one its matcher reads (it searches
    a model's answer in time linear in it, which no look-around or back-reference allows)."""
    from watchdog.core.spans.native import searcher

    try:
        re.compile(pattern)
    except re.error as exc:
        return f"not a regular expression ({exc})"
    try:
        searcher(pattern)
    except ValueError as exc:
        first = str(exc).strip().splitlines()[-1:] or [""]
        return ("not one the linear-time matcher reads (no look-around or back-reference): "
                f"{first[0][:200]}")
    return None


def _finish(reader: Reader, node: Node) -> Finish | None:
    """A budgets entry's ``finish:`` (``tool:``, the name of the tool whose call ends the
    agents' task; ``arguments:``, a mapping of its arguments to strings), or None with its
    problems told."""
    fields = reader.fields(node, None, "budgets: finish", ("tool", "arguments"),
                           required=("tool", "arguments"))
    if fields is None or len(fields) < 2:
        return None
    tool = reader.string(fields["tool"], None, "budgets: finish: tool")
    value = reader.data(fields["arguments"], None, "budgets: finish: arguments")
    if value is None:
        return None
    if not isinstance(value, dict) or len(value) > MAX_FINISH_ARGUMENTS \
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        reader.problem(fields["arguments"], None, "budgets: finish: arguments: expected a "
                       f"mapping of 0 to {MAX_FINISH_ARGUMENTS} names to strings, got "
                       f"a {type(value).__name__}")
        return None
    if any(len(v) > MAX_STOP_ANSWER_CHARS for v in value.values()):
        reader.problem(fields["arguments"], None, "budgets: finish: arguments: each at most "
                       f"{MAX_STOP_ANSWER_CHARS} characters")
        return None
    return Finish(tool, tuple(value.items())) if tool is not None else None


def _read_agents(reader: Reader, fields: dict[str, Node], rule: str | None,
                 what: str) -> tuple[str, ...] | None:
    if "agents" not in fields:
        return ("*",)
    key = f"{what}: agents" if rule is None else "agents"
    globs = reader.strings(fields["agents"], rule, key)
    if globs is None:
        return None
    if not globs:
        reader.problem(fields["agents"], rule, f"{key}: empty list (the rule would never apply; "
                                               f"use enabled: false)")
        return None
    ok = True
    for glob, glob_node in globs:
        reason = glob_problem(glob)
        if reason is not None:
            reader.problem(glob_node, rule, f"{key}: bad glob {glob!r}: {reason}")
            ok = False
    return tuple(g for g, _ in globs) if ok else None


def glob_problem(glob: str) -> str | None:
    """Why ``glob`` is not a usable agent-name pattern (fnmatch syntax), or None."""
    if glob != glob.strip():
        return "leading or trailing whitespace"
    i = 0
    while i < len(glob):
        if glob[i] == "[":
            j = i + 1
            if j < len(glob) and glob[j] == "!":
                j += 1
            if j < len(glob) and glob[j] == "]":
                j += 1
            while j < len(glob) and glob[j] != "]":
                j += 1
            if j >= len(glob):
                return "unclosed '['"
            i = j
        i += 1
    return None


def _switch_off(reader: Reader, node: Node) -> str | None:
    """The name of an earlier pack's rule that ``node`` switches off — a rule of a name and
    ``enabled: false`` alone (and perhaps a description), which says to switch it off as
    ``disable: [name]`` does — else None (a rule to read)."""
    from yaml.nodes import MappingNode, ScalarNode

    if not isinstance(node, MappingNode):
        return None
    keys = {key.value: value for key, value in node.value if isinstance(key, ScalarNode)}
    if len(keys) != len(node.value) or not {"name", "enabled"} <= set(keys) \
            or not set(keys) <= {"name", "enabled", "description"}:
        return None
    enabled, name = reader.value(keys["enabled"]), reader.value(keys["name"])
    return name if enabled is False and isinstance(name, str) and name.strip() else None


def _read_rule(reader: Reader, node: Node, index: int, says_countdown: set[str] | None = None
               ) -> tuple[str | None, Rule | None]:
    """A rule's name (when it has a valid one) and the rule, or None (problems recorded); the
    name goes to ``says_countdown`` when the rule says ``countdown:``."""
    label = reader.label(node, index)
    fields = reader.fields(node, label, "", RULE_KEYS, ("name", "when", "action", "message"),
                           synonyms=RULE_KEY_SYNONYMS)
    if fields is None:
        return None, None
    name = _read_name(reader, fields, label)
    ok = name is not None
    values: dict[str, Any] = {}

    def take(key: str, value: Any) -> None:
        nonlocal ok
        if value is None:
            ok = False
        else:
            values[key] = value

    if "description" in fields:
        take("description", reader.string(fields["description"], label, "description",
                                          nonempty=False))
    agents = _read_agents(reader, fields, label, "rule")
    take("agents", agents)
    if "when" in fields:
        take("when", _compile(reader, fields["when"], label, "when", condition=True))
    if "for" in fields:
        take("for_seconds", _bounded(reader, fields["for"], label, "for",
                                     reader.duration(fields["for"], label, "for")))
    action = None
    if "action" in fields:
        action_name = reader.choice(fields["action"], label, "action", [a.value for a in Action])
        action = Action(action_name) if action_name is not None else None
        take("action", action)
    if "severity" in fields:
        severity = reader.choice(fields["severity"], label, "severity",
                                 [s.value for s in Severity])
        take("severity", Severity(severity) if severity is not None else None)
    if "message" in fields:
        take("message", _compile(reader, fields["message"], label, "message", template=True))
    if "repeat" in fields:
        repeat = reader.choice(fields["repeat"], label, "repeat", [r.value for r in Repeat])
        take("repeat", Repeat(repeat) if repeat is not None else None)
    if "enabled" in fields:
        take("enabled", reader.boolean(fields["enabled"], label, "enabled"))
    if "terminal_state" in fields:
        take("terminal_state", _read_terminal_state(reader, fields["terminal_state"], label,
                                                    action))
    elif action is Action.ABORT:
        values["terminal_state"] = TerminalState.ABORTED  # a watchdog abort without a reason
    if "grace" in fields:
        take("grace", _read_grace(reader, fields["grace"], label, action))
    if "countdown" in fields:
        countdown = _read_countdown(reader, fields["countdown"], label, action,
                                    "grace" in fields)
        take("countdown", countdown)
        if countdown is not None:
            if countdown == NO_COUNTDOWN:
                del values["countdown"]
            if name is not None and says_countdown is not None:
                says_countdown.add(name)
    if name is None or not ok or "when" not in values or "message" not in values or not action:
        return name, None
    return name, Rule(name=name, file=reader.file, line=reader.line(node), **values)


def _read_name(reader: Reader, fields: dict[str, Node], label: str) -> str | None:
    if "name" not in fields:
        return None
    name = reader.string(fields["name"], label, "name")
    if name is None:
        return None
    if len(name) > MAX_NAME_LENGTH or not RULE_NAME.match(name):
        reader.problem(fields["name"], label, f"name: {name!r} is not allowed: use lowercase "
                                              f"letters, digits and '-' (at most "
                                              f"{MAX_NAME_LENGTH} characters)")
        return None
    return name


def _compile(reader: Reader, node: Node, rule: str, key: str, condition: bool = False,
             template: bool = False) -> Expr | Template | None:
    source = reader.string(node, rule, key)
    if source is None:
        return None
    try:
        if template:
            return compile_template(source)
        return compile_expr(source, condition=condition)
    except ExprError as exc:
        for issue in exc.issues:
            reader.problem(reader.line(node, issue.line), rule,
                           f"{key}: {issue.message} (column {issue.column})")
        return None


def _read_terminal_state(reader: Reader, node: Node, rule: str,
                         action: Action | None) -> TerminalState | None:
    state = reader.choice(node, rule, "terminal_state", RULE_TERMINAL_STATES)
    if state is None:
        return None
    if action is Action.NOTIFY:
        reader.problem(node, rule, "terminal_state: a notify rule does not stop the run "
                                   "(use wind_down or abort)")
        return None
    return TerminalState(state)


def _bounded(reader: Reader, node: Node, rule: str | None, key: str, value: _N | None,
             unit: str = " seconds") -> _N | None:
    """``value`` if it is at most :data:`MAX_BUDGET`, as a budget an agent announces must be
    (a count or seconds past it: a problem); None stays None (its problem recorded)."""
    if value is not None and value > MAX_BUDGET:
        reader.problem(node, rule, f"{key}: must be at most {MAX_BUDGET:g}{unit}")
        return None
    return value


def _read_grace(reader: Reader, node: Node, rule: str, action: Action | None) -> Grace | None:
    fields = reader.fields(node, rule, "grace", GRACE_KEYS)
    if fields is None:
        return None
    tool_calls = seconds = None
    ok = True
    if "tool_calls" in fields:
        key = "grace: tool_calls"
        tool_calls = _bounded(reader, fields["tool_calls"], rule, key,
                              reader.integer(fields["tool_calls"], rule, key, 0), "")
        ok = tool_calls is not None
    if "seconds" in fields:
        seconds = _bounded(reader, fields["seconds"], rule, "grace: seconds",
                           reader.duration(fields["seconds"], rule, "grace: seconds",
                                           seconds=True))
        ok = ok and seconds is not None
    if ok and tool_calls is None and seconds is None:
        reader.problem(node, rule, "grace: set tool_calls, seconds or both")
        return None
    if action is not None and action is not Action.WIND_DOWN:
        reader.problem(node, rule, f"grace: only a wind_down can escalate (this rule is "
                                   f"{action.value})")
        return None
    return Grace(tool_calls, seconds) if ok else None


def _read_countdown(reader: Reader, node: Node, rule: str, action: Action | None,
                    grace: bool) -> str | None:
    """The budget a rule counts down (or :data:`NO_COUNTDOWN`); None: a problem recorded."""
    budget = reader.choice(node, rule, "countdown", (*COUNTDOWN_BUDGETS, NO_COUNTDOWN))
    if budget is None or budget == NO_COUNTDOWN:
        return budget
    if action is Action.NOTIFY:
        reader.problem(node, rule, "countdown: only a wind_down (the countdown) or an abort "
                                   "(the budget's end) counts a budget down (this rule is "
                                   "notify)")
        return None
    if grace:
        reader.problem(node, rule, "countdown: a countdown has no grace (the budget is its "
                                   "limit): remove grace, or the countdown")
        return None
    return budget


def _merge(packs: list[_Pack], problems: list[Problem]) -> RuleSet:
    by_name: dict[str, Rule] = {}
    switched_off: set[str] = set()
    budgets: list[Budget] = []
    for pack in packs:
        for rule in pack.rules:
            replaced = by_name.get(rule.name)
            if (replaced is not None and replaced.countdown is not None
                    and rule.name not in pack.says_countdown and rule.grace is None
                    and rule.action is not Action.NOTIFY):
                rule = replace(rule, countdown=replaced.countdown)  # (see the module doc)
            by_name[rule.name] = rule  # replaces the whole rule, keeps its place
            switched_off.discard(rule.name)
        for name, line in pack.disable:
            if name not in by_name:
                problems.append(Problem(pack.file, line, None,
                                        f"disable: no rule named {name!r} in this or an earlier "
                                        f"pack{suggest(name, by_name)}"))
            switched_off.add(name)
        for name, line in pack.switch_off:
            if name not in by_name:
                problems.append(Problem(pack.file, line, name,
                                        f"enabled: false switches off a rule of an earlier pack, "
                                        f"and there is none of this name{suggest(name, by_name)}"
                                        f" (a new rule needs when, action and message)"))
            switched_off.add(name)
        budgets[:0] = pack.budgets  # later packs first
    enabled = tuple(r for n, r in by_name.items() if r.enabled and n not in switched_off)
    disabled = tuple(r for n, r in by_name.items() if not r.enabled or n in switched_off)
    return RuleSet(enabled, disabled, tuple(budgets))
