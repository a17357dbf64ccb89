"""The compiled form of rule packs: :class:`Rule`, :class:`Budget`, and the merged, immutable
:class:`RuleSet` the engine evaluates (built by :mod:`watchdog.core.rules.pack`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from fnmatch import fnmatchcase
from typing import Any

from watchdog.core.bounds import is_number
from watchdog.core.rules.decision import Action, Severity
from watchdog.core.rules.expr import Expr, Template
from watchdog.core.runs.terminal import TerminalState
from watchdog.core.shown import readable_path

MAX_CACHED_AGENTS = 4096  # distinct agent names whose budget is remembered; then start over
# How a budgets entry's agents act (its ``actions:``): by the API's tool calls, or in the text
# of their answers (a command or code block the agent parses out and runs: mini-swe-agent),
# or by the code blocks in their answers' text, an answer with none their task's end (Open
# Interpreter's)
ACTIONS_TOOLS, ACTIONS_TEXT, ACTIONS_CODE = "tools", "text", "code"
ACTS_IN_TEXT = (ACTIONS_TEXT, ACTIONS_CODE)
# what a budget covers at the model endpoint (a budgets entry's ``budget_per``): a run (a new
# user message after its answer starts the next run, with a budget of its own), or the whole
# conversation (every new user message in it goes on in its run: an agent that nudges itself)
BUDGET_PER_RUN = "run"
BUDGET_PER_CONVERSATION = "conversation"
BUDGET_PER = (BUDGET_PER_RUN, BUDGET_PER_CONVERSATION)
# whether the agent runs the other tool calls an answer asks for beside its answer's call (a
# final-answer tool's, the pack's finish that carries only the report) before it ends: a
# budgets entry's ``work_beside_answer`` (default: the conventions', ``answer_ends_first``)
WORK_BESIDE_RUN = "run"
WORK_BESIDE_SKIPPED = "skipped"
WORK_BESIDE = (WORK_BESIDE_RUN, WORK_BESIDE_SKIPPED)
STOP_NOTE_MARK = "${note}"  # where a ``stop_answer:`` puts the stop note
# ... and the stop note as a JSON string (quoted, escaped): a form that is a JSON object
STOP_NOTE_JSON_MARK = "${note_json}"
MAX_STOP_ANSWER_CHARS = 4096
MAX_ACTION_PATTERN_CHARS = 500  # a budgets entry's action_pattern (a regular expression)
MAX_ACTION_KEY_CHARS = 100  # a budgets entry's action_key (a JSON object's key)
MAX_ANSWER_TOOLS = 16  # a budgets entry's answer_tools, each at most MAX_ACTION_KEY_CHARS
# where a ``finish:`` call's arguments put the report: as it is, or quoted for a POSIX shell
REPORT_MARK, REPORT_SHELL_MARK = "${report}", "${report_shell}"
MAX_FINISH_ARGUMENTS = 16  # a finish call's arguments, each at most MAX_STOP_ANSWER_CHARS


@dataclass(frozen=True, slots=True)
class Finish:
    """The tool call that ends a budgets entry's agents' task (its ``finish:``): the endpoint's
    final and stop answers are given as a call of ``tool`` with ``arguments`` (name, value;
    each value with the report where it says REPORT_MARK, or REPORT_SHELL_MARK)."""

    tool: str
    arguments: tuple[tuple[str, str], ...]

    def describe(self) -> dict[str, Any]:
        return {"tool": self.tool, "arguments": dict(self.arguments)}

    @property
    def answers(self) -> bool:
        """Whether the call carries the report and nothing else (each argument REPORT_MARK,
        as adk.ExitTool's ``final_result``): a tool that only delivers the agent's answer,
        so the model's own call of it is the run's answer, never work."""
        return all(value == REPORT_MARK for _, value in self.arguments)

    def answered_by(self, parameters: frozenset[str] | None) -> bool:
        """Whether a request's tool of this name, offered with ``parameters`` (None: not
        offered), is this finish (:attr:`answers`, and it takes these arguments and no
        other): a tool of the same name that the request does not offer, or that takes other
        arguments (another agent's the same budgets entry matches, a command's ``exit``), is
        work, never the run's answer."""
        return self.answers and parameters == frozenset(name for name, _ in self.arguments)


class Repeat(StrEnum):
    ONCE = "once"  # fire once per run
    ON_CHANGE = "on_change"  # fire again whenever the rendered message is new for the run
    EACH_TIME = "each_time"  # fire again each time the condition holds after it did not


@dataclass(frozen=True, slots=True)
class Grace:
    """How long a run may go on after a wind_down before it is aborted (either limit)."""

    tool_calls: int | None = None
    seconds: float | None = None

    def describe(self) -> dict[str, float | int]:
        grace: dict[str, float | int] = {}
        if self.tool_calls is not None:
            grace["tool_calls"] = self.tool_calls
        if self.seconds is not None:
            grace["seconds"] = self.seconds
        return grace

    @classmethod
    def announced(cls, described: Mapping[str, object]) -> Grace:
        """The grace a wind_down announced, from what it said (:meth:`describe`'s keys; the
        others, such as ``ends_at_tool_calls``, ignored): ``Grace()`` when it announced none.
        A limit that is no number a grace can have (a damaged record) is left out."""
        calls, seconds = described.get("tool_calls"), described.get("seconds")
        return cls(int(calls) if isinstance(calls, int | float) and is_number(calls)
                   and calls >= 0 and float(calls).is_integer() else None,
                   float(seconds) if isinstance(seconds, int | float) and is_number(seconds)
                   and seconds > 0 else None)

    @property
    def limits(self) -> bool:
        """Whether it has a limit (``Grace()`` has none: no grace)."""
        return self.tool_calls is not None or self.seconds is not None


@dataclass(frozen=True, slots=True, eq=False)
class Rule:
    name: str
    when: Expr
    action: Action
    message: Template
    description: str = ""
    agents: tuple[str, ...] = ("*",)
    for_seconds: float = 0.0
    severity: Severity = Severity.WARNING
    repeat: Repeat = Repeat.ONCE
    terminal_state: TerminalState | None = None
    grace: Grace | None = None
    enabled: bool = True
    countdown: str | None = None  # the budget it counts down (COUNTDOWN_BUDGETS; None: none)
    file: str = ""
    line: int = 0

    @property
    def timed(self) -> bool:
        """Whether time alone can make this rule fire (so it must be evaluated on a timer): it
        reads a time-dependent signal, waits out a ``for``, or (``on_change``) its message
        changes with time. Grace escalation by seconds is timed on its own."""
        return (self.when.timed or self.for_seconds > 0
                or (self.repeat is Repeat.ON_CHANGE and self.message.timed))

    @property
    def reads(self) -> frozenset[str] | None:
        """The signals whose change can change this rule's outcome (None: any): its condition,
        and with ``on_change`` its message too."""
        reads = self.when.reads
        if self.repeat is Repeat.ON_CHANGE:
            message = self.message.reads
            reads = None if reads is None or message is None else reads | message
        return reads

    def applies_to(self, agent: str) -> bool:
        return any(fnmatchcase(agent, glob) for glob in self.agents)

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "agents": list(self.agents),
            "when": self.when.source,
            "for_seconds": self.for_seconds,
            "action": self.action.value,
            "severity": self.severity.value,
            "message": self.message.text,
            "repeat": self.repeat.value,
            "terminal_state": self.terminal_state.value if self.terminal_state else None,
            "grace": self.grace.describe() if self.grace else None,
            "countdown": self.countdown,
            "enabled": self.enabled,
            "timed": self.timed,
            "source": f"{readable_path(self.file)}:{self.line}",
        }


@dataclass(frozen=True, slots=True)
class Budget:
    """Default budget limits for agents whose name matches ``agents`` (used when a run announces
    none of its own; announced limits win key by key)."""

    agents: tuple[str, ...]
    limits: dict[str, float]
    file: str = ""
    line: int = 0
    # how the agents act: ACTIONS_TOOLS (the API's tool calls), ACTIONS_TEXT (each answer's
    # text is the action the agent runs: the model endpoint books it as a tool call) or
    # ACTIONS_CODE (an answer's code blocks are: an answer with none is the agent's answer)
    actions: str = ACTIONS_TOOLS
    # ACTS_IN_TEXT: the answer an abort gives them, in the form that ends their task, the
    # stop note where it says STOP_NOTE_MARK, as a JSON string where STOP_NOTE_JSON_MARK
    # (None: the stop note alone)
    stop_answer: str | None = None
    # ACTIONS_TEXT: the regular expression an answer's action matches (its groups, else the
    # match, are the action; an answer it does not match holds none: the agent's answer).
    # None: every answer is an action, its fenced blocks else its whole text
    action_pattern: str | None = None
    # ACTIONS_TOOLS: the tool call that ends their task (None: a text answer ends it)
    finish: Finish | None = None
    # what the budget covers at the model endpoint (BUDGET_PER)
    budget_per: str = BUDGET_PER_RUN
    # ACTIONS_TEXT: the key whose value names the tool a JSON object in an answer asks for
    # (each such object an action; an answer with none holds none: the agent's answer; with
    # an action_pattern, the objects in what it matches alone)
    action_key: str | None = None
    # ACTIONS_TEXT, with an action_key or action_pattern: the tools whose action is the agent's
    # answer, not work (Langroid's done_tool; the tool an action_pattern's first group names):
    # an answer whose actions are all of them ends the run with it, counted as no tool call
    answer_tools: tuple[str, ...] = ()
    # ACTIONS_TOOLS: whether the agent runs the calls asked beside its answer's (WORK_BESIDE;
    # None: as its framework's conventions say)
    work_beside_answer: str | None = None
    # whether the entry says ``actions:`` (``actions: tools`` said: its agents act by the API's
    # tool calls, whatever their instructions carry; :data:`TEXT_TEMPLATES` do not apply)
    actions_said: bool = False
    # ACTIONS_TEXT, with an action_key: the key of the JSON object that is the agent's answer
    # (KaibanJS's finalAnswer): an answer holding one ends the run with the key's value; with
    # it, an answer holding neither an action nor one is a step of the agent's (its
    # observation): a model call, no tool call, the run going on at its next request
    answer_key: str | None = None

    def applies_to(self, agent: str) -> bool:
        return any(fnmatchcase(agent, glob) for glob in self.agents)


@dataclass(frozen=True, slots=True)
class TextTemplate:
    """A template by which agents call tools in their answers' text, told so in their
    instructions (a model's chat template rendered by its client): a request that offers no
    API tools and whose instructions carry every one of ``markers`` is read as the budgets
    entry ``reading`` (``actions: text``, its ``action_pattern`` and ``action_key``) declares,
    unless its agent's own entry says ``actions:``."""

    name: str
    markers: tuple[str, ...]
    reading: Budget


BUILT_IN = "(built in)"  # the file of a TEXT_TEMPLATES reading
# The templates read by default, first matching first: the Hermes ("nous") template (NousResearch's
# function calling; Qwen-Agent's default; Qwen, Hermes and other models' chat templates): the
# tools in ``<tools>...</tools>``, each call ``<tool_call>{"name": ..., "arguments": ...}
# </tool_call>``
TEXT_TEMPLATES: tuple[TextTemplate, ...] = (
    TextTemplate("hermes", ("<tools>", "<tool_call>"),
                 Budget(("*",), {}, BUILT_IN, 0, ACTIONS_TEXT,
                        action_pattern="(?s)<tool_call>.*</tool_call>", action_key="name")),
)


def text_template(instructions: str) -> Budget | None:
    """The reading of the first of :data:`TEXT_TEMPLATES` whose markers ``instructions`` (a
    request's system / developer / instructions text) all carry, else None."""
    for template in TEXT_TEMPLATES:
        if all(marker in instructions for marker in template.markers):
            return template.reading
    return None


@dataclass(frozen=True, slots=True)
class Source:
    """A file or directory the rules came from, as it was when read (for reload detection:
    a ConfigMap swap changes the inode behind the symlink and the directory's mtime)."""

    path: str
    mtime_ns: int | None
    inode: int | None
    size: int | None

    @classmethod
    def of(cls, path: str) -> Source:
        try:
            stat = os.stat(path)
        except OSError:
            return cls(path, None, None, None)
        return cls(path, stat.st_mtime_ns, stat.st_ino, stat.st_size)

    def changed(self) -> bool:
        return Source.of(self.path) != self


@dataclass(frozen=True, slots=True)
class RuleSet:
    """The merged, compiled rules of all packs. ``rules`` holds the enabled ones, in order."""

    rules: tuple[Rule, ...] = ()
    disabled: tuple[Rule, ...] = ()
    budgets: tuple[Budget, ...] = ()
    sources: tuple[Source, ...] = ()
    _budget_cache: dict[str, dict[str, float]] = field(default_factory=dict, repr=False,
                                                       compare=False)
    _acting_cache: dict[str, Budget | None] = field(default_factory=dict, repr=False,
                                                    compare=False)

    def budget_for(self, agent: str) -> dict[str, float]:
        """The default budget of ``agent``: the first matching entry (a copy)."""
        cached = self._budget_cache.get(agent)
        if cached is None:
            cached = next((b.limits for b in self.budgets if b.applies_to(agent)), {})
            if len(self._budget_cache) >= MAX_CACHED_AGENTS:
                self._budget_cache.clear()
            self._budget_cache[agent] = cached
        return dict(cached)

    @property
    def has_text_acting(self) -> bool:
        """Whether a budgets entry says its agents act in their answers' text."""
        return any(entry.actions in ACTS_IN_TEXT for entry in self.budgets)

    def acts_in_text(self, agent: str) -> Budget | None:
        """``agent``'s budgets entry (the first matching) when it says ``actions: text`` or
        ``code`` (read at each model request: remembered per agent, as its budget is)."""
        entry = self._entry(agent)
        return entry if entry is not None and entry.actions in ACTS_IN_TEXT else None

    def text_acting(self, agent: str, instructions: str) -> Budget | None:
        """How a request of ``agent`` that offers no API tools acts in its answers' text: by
        its budgets entry (the first matching) when that says ``actions: text`` or ``code``;
        not at all when it says ``actions: tools``; else by the first of
        :data:`TEXT_TEMPLATES` its ``instructions`` carry (None: none)."""
        entry = self._entry(agent)
        if entry is not None and entry.actions_said:
            return entry if entry.actions in ACTS_IN_TEXT else None
        return text_template(instructions)

    def per_conversation(self, agent: str) -> bool:
        """Whether ``agent``'s budgets entry (the first matching) says its budget covers the
        whole conversation (``budget_per: conversation``)."""
        entry = self._entry(agent)
        return entry is not None and entry.budget_per == BUDGET_PER_CONVERSATION

    def work_beside_answer(self, agent: str) -> str | None:
        """Whether ``agent`` runs the calls asked beside its answer's, as its budgets entry
        (the first matching) says (``work_beside_answer``), else None."""
        entry = self._entry(agent)
        return entry.work_beside_answer if entry is not None else None

    def finish_of(self, agent: str) -> Finish | None:
        """The tool call that ends ``agent``'s task, as its budgets entry (the first matching)
        declares it (``finish:``), else None."""
        entry = self._entry(agent)
        return entry.finish if entry is not None else None

    def _entry(self, agent: str) -> Budget | None:
        """``agent``'s budgets entry, the first matching (remembered per agent)."""
        cache = self._acting_cache
        if agent in cache:
            return cache[agent]
        entry = next((b for b in self.budgets if b.applies_to(agent)), None)
        if len(cache) >= MAX_CACHED_AGENTS:
            cache.clear()
        cache[agent] = entry
        return entry

    def get(self, name: str) -> Rule | None:
        return next((r for r in self.rules if r.name == name), None)

    def describe(self) -> list[dict[str, Any]]:
        """Every rule (enabled first, then disabled) for ``GET /v1/rules``."""
        return ([rule.describe() for rule in self.rules]
                + [{**rule.describe(), "enabled": False} for rule in self.disabled])

    def stale(self) -> bool:
        """Whether any file or directory the rules came from changed since they were read."""
        return any(source.changed() for source in self.sources)
